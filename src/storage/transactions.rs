//! The log side of Kafka transactions: which producers have a transaction open in this
//! partition, where each started, and which transactions were aborted.
//!
//! A transactional batch (attribute [`ATTRIBUTE_TRANSACTIONAL`](crate::batch::ATTRIBUTE_TRANSACTIONAL))
//! opens its producer's transaction at its base offset if none is open; a control batch (a
//! marker, [`crate::batch::control_batch`]) closes it. An aborted transaction is remembered as
//! (producer id, first offset, marker offset): what Kafka's Fetch returns as
//! `aborted_transactions` and what a read_committed reader drops. The last stable offset is the
//! first offset of the oldest transaction not yet settled (still open, or closed by a marker the
//! high watermark has not passed yet, as Kafka's "unreplicated" transactions), capped by the
//! high watermark.
//!
//! This state is part of [`ProducerStates`](super::producer_state::ProducerStates): it changes
//! under the same lock as the append, and it is carried by the producer-state snapshot and
//! rebuilt by the same replay after it (open, truncation), so it follows the log wherever the
//! producer state does. Aborted transactions whose marker is below the log start are dropped
//! when a snapshot is written (their records are gone).

use std::collections::{BTreeMap, VecDeque};

/// A transaction of a producer that has records in this partition and no marker yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenTransaction {
    /// The producer.
    pub producer_id: i64,
    /// The producer epoch of its latest transactional batch.
    pub producer_epoch: i16,
    /// Offset of the transaction's first record in this partition.
    pub first_offset: u64,
}

/// A transaction closed by an abort marker: read_committed readers drop the producer's
/// transactional records from `first_offset` up to the marker at `last_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    /// The producer.
    pub producer_id: i64,
    /// Offset of the transaction's first record.
    pub first_offset: u64,
    /// Offset of the abort marker.
    pub last_offset: u64,
}

/// The transactions of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transactions {
    /// Open transactions by producer id.
    open: BTreeMap<i64, OpenTransaction>,
    /// Aborted transactions in marker order (so by `last_offset`).
    aborted: VecDeque<AbortedTransaction>,
    /// Closed transactions whose marker the high watermark may not have passed yet, as
    /// (first offset, marker offset), in marker order. In memory only: after a restart the
    /// replayed markers are back here; older ones are below a durable snapshot.
    settling: VecDeque<(u64, u64)>,
}

impl Transactions {
    /// A transactional data batch of `producer_id` at `producer_epoch` appended at `base_offset`:
    /// opens the producer's transaction there unless one is open.
    pub fn on_data(&mut self, producer_id: i64, producer_epoch: i16, base_offset: u64) {
        let open = self.open.entry(producer_id).or_insert(OpenTransaction {
            producer_id,
            producer_epoch,
            first_offset: base_offset,
        });
        open.producer_epoch = open.producer_epoch.max(producer_epoch);
    }

    /// A marker of `producer_id` appended at `offset`: closes its open transaction (a marker
    /// with none open changes nothing: the coordinator writes markers to every partition it
    /// added, written to or not). An abort is remembered for readers.
    pub fn on_marker(&mut self, producer_id: i64, aborted: bool, offset: u64) {
        let Some(open) = self.open.remove(&producer_id) else {
            return;
        };
        self.settling.push_back((open.first_offset, offset));
        if aborted {
            self.aborted.push_back(AbortedTransaction {
                producer_id,
                first_offset: open.first_offset,
                last_offset: offset,
            });
        }
    }

    /// The producer epoch of `producer_id`'s open transaction, if one is open.
    pub fn open_epoch(&self, producer_id: i64) -> Option<i16> {
        self.open.get(&producer_id).map(|open| open.producer_epoch)
    }

    /// The offset below which every transaction is settled as far as `high_watermark` says:
    /// the first offset of the oldest open transaction, or of a closed one whose marker is at
    /// or past the high watermark; `high_watermark` when there is none below it. Forgets the
    /// settled transactions the high watermark has passed.
    pub fn last_stable_offset(&mut self, high_watermark: u64) -> u64 {
        while self
            .settling
            .front()
            .is_some_and(|(_, marker)| *marker < high_watermark)
        {
            self.settling.pop_front();
        }
        let open = self.open.values().map(|open| open.first_offset);
        let settling = self.settling.iter().map(|(first, _)| *first);
        open.chain(settling).fold(high_watermark, u64::min)
    }

    /// The aborted transactions that overlap `[from, to)`: marker at or after `from`, first
    /// record before `to` (Kafka's `collectAbortedTxns`), in marker order.
    pub fn aborted_between(&self, from: u64, to: u64) -> Vec<AbortedTransaction> {
        let start = self
            .aborted
            .partition_point(|aborted| aborted.last_offset < from);
        self.aborted
            .range(start..)
            .filter(|aborted| aborted.first_offset < to)
            .copied()
            .collect()
    }

    /// Whether nothing is open, settling or aborted.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty() && self.aborted.is_empty() && self.settling.is_empty()
    }

    /// Every open transaction, by producer id.
    pub fn open(&self) -> Vec<OpenTransaction> {
        self.open.values().copied().collect()
    }

    /// Every aborted transaction still remembered, in marker order.
    pub fn aborted(&self) -> impl Iterator<Item = &AbortedTransaction> {
        self.aborted.iter()
    }

    /// Restores a state read from a snapshot (nothing settling: the snapshot's log is durable).
    pub fn restore(open: Vec<OpenTransaction>, aborted: Vec<AbortedTransaction>) -> Self {
        Self {
            open: open
                .into_iter()
                .map(|open| (open.producer_id, open))
                .collect(),
            aborted: aborted.into(),
            settling: VecDeque::new(),
        }
    }

    /// Forgets aborted transactions whose marker is below `log_start` (their records are gone).
    pub fn forget_below(&mut self, log_start: u64) {
        while self
            .aborted
            .front()
            .is_some_and(|aborted| aborted.last_offset < log_start)
        {
            self.aborted.pop_front();
        }
    }
}

/// What a read_committed reader is sent of `chunks` (stored batches as a read returns them):
/// the whole batches below `last_stable`, leaving out transaction markers and the batches of
/// the `aborted` transactions (a transactional batch of an aborted transaction's producer between
/// its first offset and its marker). Zero-copy: the kept batches are slices of the chunks.
/// Returns them with the offset after the last batch looked at (kept or not), where the reader
/// goes on; `None` if none was below `last_stable`.
pub fn committed_batches(
    chunks: Vec<bytes::Bytes>,
    last_stable: u64,
    aborted: &[AbortedTransaction],
) -> (Vec<bytes::Bytes>, Option<u64>) {
    use crate::batch::{BatchHeader, ProducerStamp, HEADER_BYTES};
    let mut kept = Vec::with_capacity(chunks.len());
    let mut next = None;
    'chunks: for chunk in chunks {
        let mut position = 0;
        // The start of a run of kept batches in this chunk, sent as one slice.
        let mut run = 0;
        while position < chunk.len() {
            let Some(header) = BatchHeader::parse(&chunk[position..]) else {
                break;
            };
            let length = header.batch_length as usize;
            if header.base_offset >= last_stable
                || length < HEADER_BYTES
                || position + length > chunk.len()
            {
                if run < position {
                    kept.push(chunk.slice(run..position));
                }
                break 'chunks;
            }
            let batch = &chunk[position..position + length];
            let hidden = header.is_control()
                || (header.is_transactional()
                    && ProducerStamp::parse(batch).is_some_and(|stamp| {
                        aborted.iter().any(|transaction| {
                            transaction.producer_id == stamp.producer_id
                                && (transaction.first_offset..=transaction.last_offset)
                                    .contains(&header.base_offset)
                        })
                    }));
            if hidden {
                if run < position {
                    kept.push(chunk.slice(run..position));
                }
                run = position + length;
            }
            next = Some(header.next_offset());
            position += length;
        }
        if run < position {
            kept.push(chunk.slice(run..position));
        }
    }
    (kept, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_close_and_aborts_are_remembered() {
        let mut txns = Transactions::default();
        txns.on_data(1, 0, 10);
        txns.on_data(1, 0, 12);
        txns.on_data(2, 3, 11);
        assert_eq!(txns.last_stable_offset(100), 10);
        txns.on_marker(1, true, 13);
        // Closed, but the high watermark has not passed the marker.
        assert_eq!(txns.last_stable_offset(13), 10);
        assert_eq!(txns.last_stable_offset(14), 11);
        txns.on_marker(2, false, 14);
        assert_eq!(txns.last_stable_offset(15), 15);
        assert_eq!(
            txns.aborted_between(0, 100),
            vec![AbortedTransaction {
                producer_id: 1,
                first_offset: 10,
                last_offset: 13
            }]
        );
        assert!(txns.aborted_between(14, 100).is_empty());
        assert!(txns.aborted_between(0, 10).is_empty());
        assert_eq!(txns.aborted_between(13, 11).len(), 1);
        // A marker with nothing open is a no-op.
        txns.on_marker(9, true, 20);
        assert_eq!(txns.aborted_between(0, 100).len(), 1);
        txns.forget_below(14);
        assert!(txns.aborted_between(0, 100).is_empty());
    }
}
