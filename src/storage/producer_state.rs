//! Producer state: what a partition remembers of each idempotent producer so that it appends each
//! of its batches exactly once, in order.
//!
//! The epoch fence decides *who* may write; this decides *which writes* are new. A producer (an id
//! handed out by `InitProducerId`, and a session `producer_epoch` under it) numbers its records
//! with consecutive sequence numbers per partition and stamps each batch with the first one
//! (batch magic 3). Kafka's idempotent producer works the same way, and the Kafka listener uses
//! this state machine too: it is built once, here, for both protocols.
//!
//! For each producer the partition keeps its epoch and its last [`PRODUCER_BATCH_WINDOW`] batches
//! (sequence range and offsets). A batch is then:
//! * **the next one** (its base sequence follows the last batch's): appended;
//! * **a retry of a remembered batch** (same sequence range): not appended again; answered with
//!   the offsets it got the first time, so a producer that lost a response can resend safely;
//! * **older than the window**: refused with [`SequenceError::Duplicate`] (it was appended, but its
//!   offsets are forgotten);
//! * **anything else** (a gap): refused with [`SequenceError::OutOfOrder`]. This is what makes a
//!   failure ordered: once a batch of a producer fails, every later batch of that producer is
//!   refused until the producer resolves it (resends it, or starts a new session: a higher
//!   `producer_epoch` with sequence 0).
//!
//! The check and the update run inside the fence's critical section with the append itself
//! (see `Writer::append_batch` in `partition/writer.rs`), so two retries of one batch can never both be
//! appended. The state survives restarts: it is rebuilt from the log (magic-3 batch headers carry
//! everything it needs), starting from a snapshot ([`SNAPSHOT_FILE`]) written once a rolled
//! segment is sealed (by the seal thread, off the append lock) and when the partition is closed,
//! so a restart replays about the active segment only.
//!
//! Bounded: at most `max_producers` producers per partition (the least recently written one is
//! forgotten beyond that; its next batch, unless it has sequence 0, is refused with
//! [`SequenceError::UnknownProducer`] and the producer starts a new session).
//!
//! **Resends across a newer lease.** A batch whose lease epoch is fenced may still be the resend
//! of a batch written while that epoch was current (its answer was lost). Before the fence
//! refuses it, the partition asks [`ProducerStates::check_resend`], under the same lock: an
//! *exact* resend of a remembered batch (same producer id, producer epoch, sequence range and
//! CRC) is answered with its original offsets and writes nothing; only what the partition can
//! tell was never appended is refused as fenced. Where it cannot tell (the producer is not
//! remembered but some producer was forgotten), it says so
//! ([`SequenceError::ForgottenResend`]), so the client reports the outcome as unknown rather
//! than as not written. The CRC of a remembered batch is kept in memory only (a batch
//! remembered from a snapshot has none, and is matched by its sequence range alone).
//!
//! **Transactions.** The state also holds the partition's [`Transactions`] (open
//! transactions, aborted ones), changed by [`record_batch`](ProducerStates::record_batch) as
//! batches are appended, replicated or replayed, and carried by the snapshot (version 2), so
//! open, truncation and restart rebuild them with the sequences. A marker (control batch) is
//! taken without a sequence check, refused only below the producer epoch the partition knows
//! ([`check_batch`](ProducerStates::check_batch)); a marker of a newer producer epoch (the
//! coordinator bumped it, aborting on a timeout) starts that session: the producer's next batch
//! must have sequence 0.
//!
//! **Coordinator epochs.** A marker also carries its coordinator's epoch (the control record's
//! `coordinator_epoch`: 0 for a standalone coordinator; on a cluster the leader epoch of the
//! transactional id's offsets partition under which its coordinator loaded the id). The state
//! keeps, per producer, the highest coordinator epoch of the markers appended, and refuses a
//! marker below it ([`SequenceError::StaleCoordinatorEpoch`], in the same critical section as
//! the append): a deposed coordinator that still writes the markers of an old decision cannot
//! end a later transaction of the same producer epoch. Carried by the snapshot (version 3) and
//! rebuilt from the log like the rest.
//!
//! The parts: the state and how appended batches change it (here), the checks that decide
//! without changing anything (`checks`), what they answer (`verdict`), and the snapshot file
//! (`snapshot`).

mod checks;
mod snapshot;
mod verdict;

use std::collections::{HashMap, VecDeque};

use super::transactions::Transactions;
use super::verification::Verifications;
use crate::batch::{add_sequence, control_record, BatchHeader, ControlMarker, ProducerStamp};

pub use snapshot::{write_snapshot_if_newer, SnapshotError};
pub use verdict::{ResendVerdict, SequenceError, SequenceVerdict};

pub use crate::domain::PRODUCER_BATCH_WINDOW;
/// Default most producers remembered per partition.
pub const DEFAULT_MAX_PRODUCERS: usize = 10_000;
/// Name of the producer-state snapshot in a partition directory.
pub const SNAPSHOT_FILE: &str = "producer-state";
/// A producer's coordinator epoch before any marker of it was appended.
const NO_COORDINATOR_EPOCH: i32 = -1;

/// One remembered batch of a producer. Equality ignores the CRC: it is a cache of what the log
/// holds (a state decoded from a snapshot has none), not part of what the state says.
#[derive(Debug, Clone, Copy)]
struct BatchEntry {
    first_sequence: i32,
    last_sequence: i32,
    base_offset: u64,
    last_offset: u64,
    /// The batch's CRC, when known (not kept in snapshots): what makes a resend *exact*.
    crc: Option<u32>,
}

impl PartialEq for BatchEntry {
    fn eq(&self, other: &Self) -> bool {
        (
            self.first_sequence,
            self.last_sequence,
            self.base_offset,
            self.last_offset,
        ) == (
            other.first_sequence,
            other.last_sequence,
            other.base_offset,
            other.last_offset,
        )
    }
}

impl Eq for BatchEntry {}

/// What the partition remembers of one producer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProducerEntry {
    producer_epoch: i16,
    /// The highest coordinator epoch of the producer's markers appended
    /// ([`NO_COORDINATOR_EPOCH`] before the first).
    coordinator_epoch: i32,
    /// Oldest first; at most [`PRODUCER_BATCH_WINDOW`]. Empty only when a marker started the
    /// producer epoch (the next batch then has sequence 0).
    batches: VecDeque<BatchEntry>,
}

impl ProducerEntry {
    fn last_offset(&self) -> u64 {
        self.batches.back().map_or(0, |batch| batch.last_offset)
    }

    fn next_sequence(&self) -> i32 {
        self.batches
            .back()
            .map_or(0, |batch| add_sequence(batch.last_sequence, 1))
    }
}

/// What DescribeProducers reports of one producer a partition remembers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveProducer {
    /// The producer id.
    pub producer_id: i64,
    /// Its current session.
    pub producer_epoch: i16,
    /// The last sequence number of its last batch.
    pub last_sequence: i32,
    /// The offset of its last batch's last record.
    pub last_offset: u64,
}

/// The producer state of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
    max_producers: usize,
    /// Whether a producer may have been forgotten (evicted beyond `max_producers`, or lost with
    /// a damaged or missing part of the log): then a producer not remembered may still have
    /// batches in the log. In memory only; set conservatively on open.
    forgotten: bool,
    /// Open and aborted transactions (not bounded by `max_producers`: a producer with an open
    /// transaction holds the last stable offset back, so it is never forgotten).
    transactions: Transactions,
    /// A replicated leader's pending questions to transaction coordinators (in memory only).
    verifications: Verifications,
}

impl ProducerStates {
    /// Every producer remembered, by producer id (a copy: the caller holds no lock).
    pub fn active(&self) -> Vec<ActiveProducer> {
        let mut active: Vec<ActiveProducer> = self
            .producers
            .iter()
            .filter_map(|(&producer_id, entry)| {
                let last = entry.batches.back()?;
                Some(ActiveProducer {
                    producer_id,
                    producer_epoch: entry.producer_epoch,
                    last_sequence: last.last_sequence,
                    last_offset: last.last_offset,
                })
            })
            .collect();
        active.sort_unstable_by_key(|producer| producer.producer_id);
        active
    }

    /// No producers yet; remembers at most `max_producers` (at least 1).
    pub fn new(max_producers: usize) -> Self {
        Self {
            producers: HashMap::new(),
            max_producers: max_producers.max(1),
            forgotten: false,
            transactions: Transactions::default(),
            verifications: Verifications::default(),
        }
    }

    /// The partition's transactions.
    pub fn transactions(&self) -> &Transactions {
        &self.transactions
    }

    /// The partition's transactions, to settle the ones the high watermark passed.
    pub fn transactions_mut(&mut self) -> &mut Transactions {
        &mut self.transactions
    }

    /// The partition's pending transaction verifications (a replicated leader's).
    pub fn verifications_mut(&mut self) -> &mut Verifications {
        &mut self.verifications
    }

    /// Remembers any magic-3 batch appended at `base_offset` (`bytes` is the whole batch, for a
    /// marker's type): a data batch as [`record`](Self::record) does, opening its producer's
    /// transaction if it is transactional; a marker closes the producer's open transaction and,
    /// of a newer producer epoch, starts that session.
    pub fn record_batch(
        &mut self,
        bytes: &[u8],
        stamp: &ProducerStamp,
        header: &BatchHeader,
        base_offset: u64,
    ) {
        if !header.is_control() {
            self.record(stamp, header.record_count, base_offset, header.crc);
            if header.is_transactional() {
                self.transactions
                    .on_data(stamp.producer_id, stamp.producer_epoch, base_offset);
                self.verifications.on_opened(stamp.producer_id);
            }
            return;
        }
        self.verifications.on_marker(stamp.producer_id);
        let control = control_record(bytes);
        let aborted = control.is_none_or(|control| control.marker == ControlMarker::Abort);
        self.transactions
            .on_marker(stamp.producer_id, aborted, base_offset);
        let entry = self
            .producers
            .entry(stamp.producer_id)
            .or_insert_with(|| ProducerEntry {
                producer_epoch: stamp.producer_epoch,
                coordinator_epoch: NO_COORDINATOR_EPOCH,
                batches: VecDeque::new(),
            });
        if stamp.producer_epoch > entry.producer_epoch {
            entry.producer_epoch = stamp.producer_epoch;
            entry.batches.clear();
        }
        if let Some(control) = control {
            entry.coordinator_epoch = entry.coordinator_epoch.max(control.coordinator_epoch);
        }
        if self.producers.len() > self.max_producers {
            self.evict_least_recent(stamp.producer_id);
        }
    }

    /// Records that producers may have been forgotten (their batches lost with a damaged or
    /// unread part of the log): a batch of a producer not remembered is then of unknowable
    /// standing (see [`check_resend`](Self::check_resend)).
    pub fn note_forgotten(&mut self) {
        self.forgotten = true;
    }

    /// Whether a producer may have been forgotten.
    pub fn may_have_forgotten(&self) -> bool {
        self.forgotten
    }

    /// Producers remembered.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// True when no producer is remembered.
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Remembers a batch appended at `base_offset` (after [`check`](Self::check) said
    /// [`SequenceVerdict::Append`], or while replaying the log), with its CRC. Forgets the least
    /// recently written producer when more than `max_producers` are remembered.
    pub fn record(&mut self, stamp: &ProducerStamp, record_count: u32, base_offset: u64, crc: u32) {
        let batch = BatchEntry {
            first_sequence: stamp.base_sequence,
            last_sequence: stamp.last_sequence(record_count),
            base_offset,
            last_offset: base_offset + u64::from(record_count.max(1)) - 1,
            crc: Some(crc),
        };
        let entry = self
            .producers
            .entry(stamp.producer_id)
            .or_insert_with(|| ProducerEntry {
                producer_epoch: stamp.producer_epoch,
                coordinator_epoch: NO_COORDINATOR_EPOCH,
                batches: VecDeque::new(),
            });
        if entry.producer_epoch != stamp.producer_epoch {
            entry.producer_epoch = stamp.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == PRODUCER_BATCH_WINDOW {
            entry.batches.pop_front();
        }
        entry.batches.push_back(batch);
        if self.producers.len() > self.max_producers {
            self.evict_least_recent(stamp.producer_id);
        }
    }

    /// Forgets the producer whose last batch is oldest (never `keep`, the one just written).
    fn evict_least_recent(&mut self, keep: i64) {
        let oldest = self
            .producers
            .iter()
            .filter(|(id, _)| **id != keep)
            .min_by_key(|(_, entry)| entry.last_offset())
            .map(|(id, _)| *id);
        if let Some(id) = oldest {
            self.producers.remove(&id);
            self.forgotten = true;
            tracing::info!(
                producer_id = id,
                max_producers = self.max_producers,
                "forgot the least recently written producer"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::snapshot::{SNAPSHOT_VERSION_1, SNAPSHOT_VERSION_2};
    use super::*;
    use crate::batch::MAX_SEQUENCE;

    fn stamp(producer_id: i64, producer_epoch: i16, base_sequence: i32) -> ProducerStamp {
        ProducerStamp {
            producer_id,
            producer_epoch,
            base_sequence,
        }
    }

    /// Appends `count`-record batches the way the partition does: check, then record.
    fn append(state: &mut ProducerStates, s: ProducerStamp, count: u32, offset: &mut u64) -> u64 {
        assert_eq!(state.check(&s, count), Ok(SequenceVerdict::Append));
        state.record(&s, count, *offset, 0xC0FFEE);
        let base = *offset;
        *offset += u64::from(count);
        base
    }

    #[test]
    fn next_batches_append_and_retries_get_their_offsets() {
        let mut state = ProducerStates::new(10);
        let mut offset = 100;
        append(&mut state, stamp(1, 0, 0), 3, &mut offset);
        append(&mut state, stamp(1, 0, 3), 2, &mut offset);
        assert_eq!(
            state.check(&stamp(1, 0, 0), 3),
            Ok(SequenceVerdict::Duplicate {
                base_offset: 100,
                last_offset: 102
            })
        );
        assert_eq!(
            state.check(&stamp(1, 0, 3), 2),
            Ok(SequenceVerdict::Duplicate {
                base_offset: 103,
                last_offset: 104
            })
        );
        assert_eq!(state.check(&stamp(1, 0, 5), 1), Ok(SequenceVerdict::Append));
    }

    #[test]
    fn a_gap_is_refused_until_the_missing_batch_arrives() {
        let mut state = ProducerStates::new(10);
        let mut offset = 0;
        append(&mut state, stamp(1, 0, 0), 3, &mut offset);
        // The batch at sequence 3 failed; the one after it must not land.
        assert!(matches!(
            state.check(&stamp(1, 0, 5), 2),
            Err(SequenceError::OutOfOrder {
                expected: 3,
                got: 5,
                ..
            })
        ));
        append(&mut state, stamp(1, 0, 3), 2, &mut offset);
        append(&mut state, stamp(1, 0, 5), 2, &mut offset);
    }

    #[test]
    fn sessions_epochs_and_unknown_producers() {
        let mut state = ProducerStates::new(10);
        let mut offset = 0;
        assert!(matches!(
            state.check(&stamp(9, 0, 4), 1),
            Err(SequenceError::UnknownProducer { got: 4, .. })
        ));
        append(&mut state, stamp(9, 0, 0), 4, &mut offset);
        // A new session restarts at 0 and only at 0.
        assert!(matches!(
            state.check(&stamp(9, 1, 4), 1),
            Err(SequenceError::OutOfOrder { expected: 0, .. })
        ));
        append(&mut state, stamp(9, 1, 0), 1, &mut offset);
        assert!(matches!(
            state.check(&stamp(9, 0, 4), 1),
            Err(SequenceError::StaleProducerEpoch {
                got: 0,
                current: 1,
                ..
            })
        ));
    }

    #[test]
    fn retries_older_than_the_window_are_duplicates_without_offsets() {
        let mut state = ProducerStates::new(10);
        let mut offset = 0;
        for batch in 0..(PRODUCER_BATCH_WINDOW as i32 + 2) {
            append(&mut state, stamp(1, 0, batch), 1, &mut offset);
        }
        assert!(matches!(
            state.check(&stamp(1, 0, 0), 1),
            Err(SequenceError::Duplicate { got: 0, .. })
        ));
        assert!(matches!(
            state.check(&stamp(1, 0, 2), 1),
            Ok(SequenceVerdict::Duplicate { base_offset: 2, .. })
        ));
    }

    #[test]
    fn sequences_wrap_after_the_largest() {
        let mut state = ProducerStates::new(10);
        let mut offset = 0;
        append(&mut state, stamp(1, 0, 0), 1, &mut offset);
        // Pretend the producer got far: a session restart lands right before the wrap.
        append(&mut state, stamp(1, 1, 0), 1, &mut offset);
        state.producers.get_mut(&1).unwrap().batches[0].last_sequence = MAX_SEQUENCE - 2;
        append(&mut state, stamp(1, 1, MAX_SEQUENCE - 1), 3, &mut offset);
        append(&mut state, stamp(1, 1, 1), 1, &mut offset);
    }

    #[test]
    fn the_least_recently_written_producer_is_forgotten_beyond_the_limit() {
        let mut state = ProducerStates::new(2);
        let mut offset = 0;
        append(&mut state, stamp(1, 0, 0), 1, &mut offset);
        append(&mut state, stamp(2, 0, 0), 1, &mut offset);
        append(&mut state, stamp(1, 0, 1), 1, &mut offset);
        append(&mut state, stamp(3, 0, 0), 1, &mut offset);
        assert_eq!(state.len(), 2);
        assert!(matches!(
            state.check(&stamp(2, 0, 1), 1),
            Err(SequenceError::UnknownProducer { .. })
        ));
        assert_eq!(state.check(&stamp(1, 0, 2), 1), Ok(SequenceVerdict::Append));
    }

    /// Open and aborted transactions travel in the snapshot, and a version-1 snapshot (no
    /// transaction lists) still reads.
    #[test]
    fn snapshots_carry_transactions() {
        use crate::batch::{control_batch, BatchBuilder};
        let mut state = ProducerStates::new(10);
        let mut offset = 0;
        let mut apply = |state: &mut ProducerStates, bytes: bytes::Bytes| {
            let header = BatchHeader::parse(&bytes).unwrap();
            let stamp = ProducerStamp::parse(&bytes).unwrap();
            assert_eq!(
                state.check_batch(&bytes, &stamp, &header),
                Ok(SequenceVerdict::Append)
            );
            state.record_batch(&bytes, &stamp, &header, offset);
            offset += u64::from(header.record_count);
        };
        for producer in 1..4 {
            let mut builder = BatchBuilder::with_producer(1, producer, 0).transactional();
            builder.push(1, None, Some(b"v"));
            apply(&mut state, builder.finish());
        }
        apply(
            &mut state,
            control_batch(1, 2, 0, ControlMarker::Abort, 0, 1),
        );
        apply(
            &mut state,
            control_batch(1, 3, 1, ControlMarker::Commit, 0, 1),
        );
        assert_eq!(state.transactions().open().len(), 1);
        assert_eq!(state.transactions().aborted_between(0, offset).len(), 1);
        let bytes = state.encode_snapshot(offset);
        let (_, decoded) = ProducerStates::decode_snapshot(&bytes, 10).unwrap();
        assert_eq!(decoded.transactions().open(), state.transactions().open());
        assert_eq!(
            decoded.transactions().aborted_between(0, offset),
            state.transactions().aborted_between(0, offset)
        );
        assert_eq!(decoded.producers, state.producers);
        for position in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[position] ^= 0x10;
            assert!(ProducerStates::decode_snapshot(&damaged, 10).is_err());
        }
        // Version 2: the same without the producers' coordinator epochs (one producer here,
        // whose coordinator epoch is bytes 30..34); version 1 also without the two lists (and
        // every producer with a batch).
        let mut plain = ProducerStates::new(10);
        let mut at = 0;
        append(&mut plain, stamp(1, 0, 0), 2, &mut at);
        let current = plain.encode_snapshot(at);
        let older = |version: u32| {
            let mut bytes = current[..current.len() - 4].to_vec();
            bytes.drain(30..34);
            if version == SNAPSHOT_VERSION_1 {
                bytes.truncate(bytes.len() - 8);
            }
            bytes[4..8].copy_from_slice(&version.to_be_bytes());
            let crc = crc32fast::hash(&bytes);
            bytes.extend_from_slice(&crc.to_be_bytes());
            bytes
        };
        for version in [SNAPSHOT_VERSION_2, SNAPSHOT_VERSION_1] {
            assert_eq!(
                ProducerStates::decode_snapshot(&older(version), 10),
                Ok((at, plain.clone())),
                "version {version}"
            );
        }
    }

    /// A marker from an older coordinator than the producer's last marker here is refused (a
    /// deposed coordinator cannot end a later transaction); the same or a newer coordinator's
    /// is taken; the coordinator epoch survives the snapshot and a replay of the log.
    #[test]
    fn a_marker_of_a_deposed_coordinator_is_refused() {
        use crate::batch::{control_batch, BatchBuilder};
        let mut state = ProducerStates::new(10);
        let mut offset = 0;
        let mut log = Vec::new();
        let mut apply = |state: &mut ProducerStates, bytes: bytes::Bytes| {
            let header = BatchHeader::parse(&bytes).unwrap();
            let stamp = ProducerStamp::parse(&bytes).unwrap();
            let verdict = state.check_batch(&bytes, &stamp, &header);
            if verdict.is_ok() {
                state.record_batch(&bytes, &stamp, &header, offset);
                offset += u64::from(header.record_count);
                log.push(bytes);
            }
            verdict
        };
        let data = || {
            let mut builder = BatchBuilder::with_producer(1, 7, 0).transactional();
            builder.push(1, None, Some(b"v"));
            builder.finish()
        };
        assert!(apply(&mut state, data()).is_ok());
        let marker =
            |coordinator_epoch| control_batch(1, 7, 0, ControlMarker::Commit, coordinator_epoch, 1);
        assert!(apply(&mut state, marker(5)).is_ok(), "the first marker");
        assert_eq!(
            apply(&mut state, marker(4)),
            Err(SequenceError::StaleCoordinatorEpoch {
                producer_id: 7,
                got: 4,
                current: 5
            })
        );
        assert!(
            apply(&mut state, marker(5)).is_ok(),
            "the same coordinator again"
        );
        assert!(apply(&mut state, marker(6)).is_ok(), "a newer coordinator");

        let (_, decoded) =
            ProducerStates::decode_snapshot(&state.encode_snapshot(offset), 10).unwrap();
        let mut replayed = ProducerStates::new(10);
        let mut at = 0;
        for bytes in &log {
            let header = BatchHeader::parse(bytes).unwrap();
            let stamp = ProducerStamp::parse(bytes).unwrap();
            replayed.record_batch(bytes, &stamp, &header, at);
            at += u64::from(header.record_count);
        }
        for rebuilt in [decoded, replayed] {
            let stale = marker(5);
            let header = BatchHeader::parse(&stale).unwrap();
            let stamp = ProducerStamp::parse(&stale).unwrap();
            assert!(matches!(
                rebuilt.check_batch(&stale, &stamp, &header),
                Err(SequenceError::StaleCoordinatorEpoch { current: 6, .. })
            ));
        }
    }

    #[test]
    fn snapshots_round_trip_and_refuse_damage() {
        let mut state = ProducerStates::new(10);
        let mut offset = 0;
        for producer in 0..3 {
            for batch in 0..(PRODUCER_BATCH_WINDOW as i32 + 1) {
                append(&mut state, stamp(producer, 2, batch * 2), 2, &mut offset);
            }
        }
        let bytes = state.encode_snapshot(offset);
        assert_eq!(
            ProducerStates::decode_snapshot(&bytes, 10),
            Ok((offset, state.clone()))
        );
        for position in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[position] ^= 0x10;
            assert!(ProducerStates::decode_snapshot(&damaged, 10).is_err());
        }
        for cut in 0..bytes.len() {
            assert!(ProducerStates::decode_snapshot(&bytes[..cut], 10).is_err());
        }
    }
}
