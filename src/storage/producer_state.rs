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

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::Path;

use thiserror::Error;

use super::durable_file::write_durably;
use super::transactions::{AbortedTransaction, OpenTransaction, Transactions};
use super::verification::Verifications;
use crate::batch::{
    add_sequence, control_record, BatchHeader, ControlMarker, ProducerStamp, MAX_SEQUENCE,
};

pub use crate::domain::PRODUCER_BATCH_WINDOW;
/// Default most producers remembered per partition.
pub const DEFAULT_MAX_PRODUCERS: usize = 10_000;
/// Name of the producer-state snapshot in a partition directory.
pub const SNAPSHOT_FILE: &str = "producer-state";
/// First bytes of a snapshot file.
const SNAPSHOT_MAGIC: &[u8; 4] = b"FLPS";
/// Snapshot layout version this build writes (it reads 1 and 2 too: version 2 is version 3
/// without coordinator epochs, version 1 is version 2 without transactions).
const SNAPSHOT_VERSION: u32 = 3;
/// The snapshot version before coordinator epochs.
const SNAPSHOT_VERSION_2: u32 = 2;
/// The snapshot version before transactions.
const SNAPSHOT_VERSION_1: u32 = 1;
/// A producer's coordinator epoch before any marker of it was appended.
const NO_COORDINATOR_EPOCH: i32 = -1;

/// Why a producer's batch was refused. Nothing of a refused batch is written, and the producer's
/// state is unchanged.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SequenceError {
    /// The batch does not follow the producer's last batch: one before it failed or was lost.
    #[error("out of order sequence for producer {producer_id} (producer epoch {producer_epoch}): expected sequence {expected}, got {got}; an earlier batch failed, resend it or start a new producer session")]
    OutOfOrder {
        /// The producer.
        producer_id: i64,
        /// Its session.
        producer_epoch: i16,
        /// The sequence the next batch must start with.
        expected: i32,
        /// The batch's base sequence.
        got: i32,
    },
    /// The batch was appended already, longer ago than the partition remembers offsets for.
    #[error("duplicate sequence for producer {producer_id}: the batch starting at sequence {got} was appended already (the next expected is {expected}); its offsets are no longer remembered")]
    Duplicate {
        /// The producer.
        producer_id: i64,
        /// The batch's base sequence.
        got: i32,
        /// The sequence the next batch must start with.
        expected: i32,
    },
    /// The batch's producer epoch is older than the producer's current session.
    #[error("producer {producer_id}: producer epoch {got} is older than its current producer epoch {current}")]
    StaleProducerEpoch {
        /// The producer.
        producer_id: i64,
        /// The batch's producer epoch.
        got: i16,
        /// The session the partition knows.
        current: i16,
    },
    /// The partition knows nothing of the producer and the batch does not start a session.
    #[error("unknown producer {producer_id}: the partition has no state for it, so its first batch must have sequence 0 (got {got})")]
    UnknownProducer {
        /// The producer.
        producer_id: i64,
        /// The batch's base sequence.
        got: i32,
    },
    /// A transaction marker from a coordinator older than one whose marker the partition already
    /// appended for the producer: the coordinator was deposed (another broker leads the
    /// transactional id's offsets partition now) and its marker is not written. Kafka's
    /// `TRANSACTION_COORDINATOR_FENCED`.
    #[error("coordinator fenced: a marker of producer {producer_id} from coordinator epoch {got} < {current}, the coordinator epoch of its last marker here; the transaction's current coordinator writes its markers")]
    StaleCoordinatorEpoch {
        /// The producer.
        producer_id: i64,
        /// The marker's coordinator epoch.
        got: i32,
        /// The highest coordinator epoch of the producer's markers appended here.
        current: i32,
    },
    /// A transactional batch that would open its producer's transaction on a replicated
    /// partition without a verification still pending for it (see [`super::verification`]):
    /// the transaction's marker overtook the leader's question to the coordinator, or the
    /// question was never asked. Nothing was written; a retry is verified again. Kafka's
    /// `INVALID_TXN_STATE`.
    #[error("producer {producer_id} (producer epoch {producer_epoch}): its transaction is not verified open on this partition (it ended, or the partition was never added to it); nothing was written")]
    UnverifiedTransaction {
        /// The producer.
        producer_id: i64,
        /// The batch's producer epoch.
        producer_epoch: i16,
    },
    /// A batch of a fenced epoch that may be the resend of a batch appended while its epoch
    /// was current, but the partition no longer remembers the producer's batches (it forgot
    /// producers beyond `max_producers`, or the batch is of an earlier producer session), so it
    /// cannot tell. Nothing was written now; whether an earlier send landed is unknown.
    #[error("fenced: epoch {epoch} < current {current}, and the partition no longer remembers producer {producer_id} (producer epoch {producer_epoch}), so whether an earlier send of this batch was appended cannot be told: nothing was written now; read the partition to find out")]
    ForgottenResend {
        /// The producer.
        producer_id: i64,
        /// The batch's producer epoch.
        producer_epoch: i16,
        /// The (fenced) lease epoch the batch carried.
        epoch: u64,
        /// The partition's current lease epoch.
        current: u64,
    },
}

/// What the partition knows of a batch a superseded writer sent (see
/// [`ProducerStates::check_resend`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResendVerdict {
    /// An exact resend of a remembered batch: answer with these offsets, write nothing.
    Remembered {
        /// Offset of the batch's first record.
        base_offset: u64,
        /// Offset of its last record.
        last_offset: u64,
    },
    /// Its sequences were appended, longer ago than the partition remembers offsets for.
    AppendedLongAgo {
        /// The sequence the producer's next batch must start with.
        expected: i32,
    },
    /// The partition remembers the producer and this batch is not one it appended: refuse it
    /// as the fence says (nothing of it is in the log).
    NotAppended,
    /// The partition cannot tell: the producer (or this session of it) is not remembered.
    Unknowable,
}

/// What to do with a producer's batch that passed the sequence check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceVerdict {
    /// A new batch: append it.
    Append,
    /// A retry of a batch appended at these offsets: answer with them, append nothing.
    Duplicate {
        /// Offset of the batch's first record.
        base_offset: u64,
        /// Offset of its last record.
        last_offset: u64,
    },
}

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

    /// Whether a transactional data batch of `stamp` may be appended on a partition that
    /// verifies transactions (see [`super::verification`]): the producer's transaction is
    /// open here at that producer epoch, or `guard` is its pending verification's.
    pub fn check_verified(
        &self,
        stamp: &ProducerStamp,
        guard: Option<u64>,
    ) -> Result<(), SequenceError> {
        let open = self.transactions.open_epoch(stamp.producer_id) == Some(stamp.producer_epoch);
        if open
            || self
                .verifications
                .check(stamp.producer_id, stamp.producer_epoch, guard)
        {
            return Ok(());
        }
        Err(SequenceError::UnverifiedTransaction {
            producer_id: stamp.producer_id,
            producer_epoch: stamp.producer_epoch,
        })
    }

    /// [`check`](Self::check) for any magic-3 batch (`bytes`, the whole batch): a marker
    /// (control batch) is taken without a sequence check unless its producer epoch is older
    /// than the one the partition knows (of the producer's batches or of its open transaction),
    /// or its coordinator epoch older than that of the producer's last marker here.
    pub fn check_batch(
        &self,
        bytes: &[u8],
        stamp: &ProducerStamp,
        header: &BatchHeader,
    ) -> Result<SequenceVerdict, SequenceError> {
        if !header.is_control() {
            return self.check(stamp, header.record_count);
        }
        let known = self
            .producers
            .get(&stamp.producer_id)
            .map(|entry| entry.producer_epoch)
            .into_iter()
            .chain(self.transactions.open_epoch(stamp.producer_id))
            .max();
        if let Some(current) = known.filter(|current| stamp.producer_epoch < *current) {
            return Err(SequenceError::StaleProducerEpoch {
                producer_id: stamp.producer_id,
                got: stamp.producer_epoch,
                current,
            });
        }
        let last_coordinator = self
            .producers
            .get(&stamp.producer_id)
            .map_or(NO_COORDINATOR_EPOCH, |entry| entry.coordinator_epoch);
        match control_record(bytes) {
            Some(control) if control.coordinator_epoch < last_coordinator => {
                Err(SequenceError::StaleCoordinatorEpoch {
                    producer_id: stamp.producer_id,
                    got: control.coordinator_epoch,
                    current: last_coordinator,
                })
            }
            _ => Ok(SequenceVerdict::Append),
        }
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

    /// Decides what to do with a batch of `record_count` records stamped `stamp`. Changes
    /// nothing: call [`record`](Self::record) once the batch is appended.
    pub fn check(
        &self,
        stamp: &ProducerStamp,
        record_count: u32,
    ) -> Result<SequenceVerdict, SequenceError> {
        let producer_id = stamp.producer_id;
        let got = stamp.base_sequence;
        let Some(entry) = self.producers.get(&producer_id) else {
            return if got == 0 {
                Ok(SequenceVerdict::Append)
            } else {
                Err(SequenceError::UnknownProducer { producer_id, got })
            };
        };
        if stamp.producer_epoch < entry.producer_epoch {
            return Err(SequenceError::StaleProducerEpoch {
                producer_id,
                got: stamp.producer_epoch,
                current: entry.producer_epoch,
            });
        }
        if stamp.producer_epoch > entry.producer_epoch {
            // A new session starts its sequences again.
            return if got == 0 {
                Ok(SequenceVerdict::Append)
            } else {
                Err(SequenceError::OutOfOrder {
                    producer_id,
                    producer_epoch: stamp.producer_epoch,
                    expected: 0,
                    got,
                })
            };
        }
        let last = stamp.last_sequence(record_count);
        if let Some(batch) = entry
            .batches
            .iter()
            .find(|batch| batch.first_sequence == got && batch.last_sequence == last)
        {
            return Ok(SequenceVerdict::Duplicate {
                base_offset: batch.base_offset,
                last_offset: batch.last_offset,
            });
        }
        let expected = entry.next_sequence();
        if got == expected {
            Ok(SequenceVerdict::Append)
        } else if is_before(got, expected) {
            Err(SequenceError::Duplicate {
                producer_id,
                got,
                expected,
            })
        } else {
            Err(SequenceError::OutOfOrder {
                producer_id,
                producer_epoch: entry.producer_epoch,
                expected,
                got,
            })
        }
    }

    /// What a batch of a *fenced* epoch is to this partition (asked under the fence's lock,
    /// before the fence refuses it): an exact resend of a remembered batch (same producer id,
    /// producer epoch, sequence range and `crc`; a batch remembered without its CRC, from a
    /// snapshot, by its sequence range) is [`ResendVerdict::Remembered`] and is answered with
    /// its offsets; sequences before the producer's remembered window were appended
    /// ([`ResendVerdict::AppendedLongAgo`]); any other batch of a remembered producer session
    /// is not in the log ([`ResendVerdict::NotAppended`]). A producer (or session) not
    /// remembered is [`ResendVerdict::NotAppended`] only while the partition has forgotten no
    /// producer; otherwise [`ResendVerdict::Unknowable`]. Changes nothing.
    pub fn check_resend(
        &self,
        stamp: &ProducerStamp,
        record_count: u32,
        crc: u32,
    ) -> ResendVerdict {
        let Some(entry) = self.producers.get(&stamp.producer_id) else {
            return if self.forgotten {
                ResendVerdict::Unknowable
            } else {
                ResendVerdict::NotAppended
            };
        };
        if stamp.producer_epoch < entry.producer_epoch {
            // An earlier session's batches are forgotten when a new session starts.
            return ResendVerdict::Unknowable;
        }
        if stamp.producer_epoch > entry.producer_epoch {
            return ResendVerdict::NotAppended;
        }
        let got = stamp.base_sequence;
        let last = stamp.last_sequence(record_count);
        if let Some(batch) = entry
            .batches
            .iter()
            .find(|batch| batch.first_sequence == got && batch.last_sequence == last)
        {
            return if batch.crc.is_none_or(|known| known == crc) {
                ResendVerdict::Remembered {
                    base_offset: batch.base_offset,
                    last_offset: batch.last_offset,
                }
            } else {
                // Other records under the same sequences: this batch's records are not the
                // ones in the log.
                ResendVerdict::NotAppended
            };
        }
        let expected = entry.next_sequence();
        if is_before(got, expected) {
            ResendVerdict::AppendedLongAgo { expected }
        } else {
            ResendVerdict::NotAppended
        }
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

    /// The snapshot of this state as of `offset` (it reflects exactly the batches below it).
    ///
    /// Layout (big-endian): `"FLPS"`, `version u32` (3), `offset u64`, `producer_count u32`, then
    /// per producer `producer_id i64, producer_epoch i16, coordinator_epoch i32, batch_count u8`,
    /// and per batch
    /// `first_sequence i32, last_sequence i32, base_offset u64, last_offset u64`; then
    /// `open_count u32` and per open transaction `producer_id i64, producer_epoch i16,
    /// first_offset u64`; then `aborted_count u32` and per aborted transaction (in marker order)
    /// `producer_id i64, first_offset u64, last_offset u64`; finally `crc32 u32` of every byte
    /// before it. Version 2 is the same without `coordinator_epoch`; version 1 is version 2
    /// without the two transaction lists (and no producer with `batch_count` 0).
    pub fn encode_snapshot(&self, offset: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(20 + self.producers.len() * 64);
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&offset.to_be_bytes());
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let mut ids: Vec<_> = self.producers.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let entry = &self.producers[&id];
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&entry.producer_epoch.to_be_bytes());
            out.extend_from_slice(&entry.coordinator_epoch.to_be_bytes());
            out.push(entry.batches.len() as u8);
            for batch in &entry.batches {
                out.extend_from_slice(&batch.first_sequence.to_be_bytes());
                out.extend_from_slice(&batch.last_sequence.to_be_bytes());
                out.extend_from_slice(&batch.base_offset.to_be_bytes());
                out.extend_from_slice(&batch.last_offset.to_be_bytes());
            }
        }
        let open = self.transactions.open();
        out.extend_from_slice(&(open.len() as u32).to_be_bytes());
        for open in open {
            out.extend_from_slice(&open.producer_id.to_be_bytes());
            out.extend_from_slice(&open.producer_epoch.to_be_bytes());
            out.extend_from_slice(&open.first_offset.to_be_bytes());
        }
        let aborted: Vec<_> = self.transactions.aborted().collect();
        out.extend_from_slice(&(aborted.len() as u32).to_be_bytes());
        for aborted in aborted {
            out.extend_from_slice(&aborted.producer_id.to_be_bytes());
            out.extend_from_slice(&aborted.first_offset.to_be_bytes());
            out.extend_from_slice(&aborted.last_offset.to_be_bytes());
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Reads a snapshot written by [`encode_snapshot`](Self::encode_snapshot): the offset it is
    /// as of and the state. Any damage (wrong CRC, lengths, values) is an error, never a
    /// partial state.
    pub fn decode_snapshot(
        bytes: &[u8],
        max_producers: usize,
    ) -> Result<(u64, ProducerStates), SnapshotError> {
        let body_len = bytes
            .len()
            .checked_sub(4)
            .ok_or(SnapshotError("shorter than its checksum"))?;
        let (body, crc) = bytes.split_at(body_len);
        if crc32fast::hash(body).to_be_bytes() != crc {
            return Err(SnapshotError("checksum mismatch"));
        }
        let mut reader = SnapshotReader { bytes: body };
        if reader.take(4)? != SNAPSHOT_MAGIC {
            return Err(SnapshotError("not a producer-state snapshot"));
        }
        let version = reader.u32()?;
        if ![SNAPSHOT_VERSION, SNAPSHOT_VERSION_2, SNAPSHOT_VERSION_1].contains(&version) {
            return Err(SnapshotError("unknown snapshot version"));
        }
        let offset = reader.u64()?;
        let count = reader.u32()?;
        let mut state = ProducerStates::new(max_producers);
        for _ in 0..count {
            let producer_id = i64::from_be_bytes(reader.array()?);
            let producer_epoch = i16::from_be_bytes(reader.array()?);
            let coordinator_epoch = match version {
                SNAPSHOT_VERSION => i32::from_be_bytes(reader.array()?),
                _ => NO_COORDINATOR_EPOCH,
            };
            if coordinator_epoch < NO_COORDINATOR_EPOCH {
                return Err(SnapshotError("coordinator epoch below -1"));
            }
            let batch_count = usize::from(reader.take(1)?[0]);
            if producer_id < 0 || producer_epoch < 0 {
                return Err(SnapshotError("negative producer id or epoch"));
            }
            let fewest = usize::from(version == SNAPSHOT_VERSION_1);
            if batch_count < fewest || batch_count > PRODUCER_BATCH_WINDOW {
                return Err(SnapshotError("batch count outside 1..=window"));
            }
            let mut batches = VecDeque::with_capacity(batch_count);
            for _ in 0..batch_count {
                let batch = BatchEntry {
                    first_sequence: i32::from_be_bytes(reader.array()?),
                    last_sequence: i32::from_be_bytes(reader.array()?),
                    base_offset: reader.u64()?,
                    last_offset: reader.u64()?,
                    crc: None,
                };
                let sequences_valid = (0..=MAX_SEQUENCE).contains(&batch.first_sequence)
                    && (0..=MAX_SEQUENCE).contains(&batch.last_sequence);
                if !sequences_valid || batch.last_offset < batch.base_offset {
                    return Err(SnapshotError("batch entry out of range"));
                }
                if batch.last_offset >= offset {
                    return Err(SnapshotError("batch entry at or past the snapshot offset"));
                }
                batches.push_back(batch);
            }
            let entry = ProducerEntry {
                producer_epoch,
                coordinator_epoch,
                batches,
            };
            if state.producers.insert(producer_id, entry).is_some() {
                return Err(SnapshotError("producer listed twice"));
            }
        }
        if version != SNAPSHOT_VERSION_1 {
            state.transactions = decode_transactions(&mut reader, offset)?;
        }
        if !reader.bytes.is_empty() {
            return Err(SnapshotError("bytes after the last producer"));
        }
        while state.producers.len() > state.max_producers {
            state.evict_least_recent(-1);
        }
        // A snapshot does not say whether producers were forgotten before it; at the limit,
        // some may have been.
        if state.producers.len() >= state.max_producers {
            state.forgotten = true;
        }
        Ok((offset, state))
    }

    /// Loads the partition's snapshot: `None` when there is none, or when it is unreadable
    /// (logged: the state is then rebuilt from the whole log, which is always correct).
    pub fn load_snapshot(
        directory: &Path,
        max_producers: usize,
    ) -> io::Result<Option<(u64, ProducerStates)>> {
        let path = directory.join(SNAPSHOT_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(error),
        };
        match Self::decode_snapshot(&bytes, max_producers) {
            Ok(loaded) => Ok(Some(loaded)),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "ignoring damaged producer-state snapshot; rebuilding from the log");
                Ok(None)
            }
        }
    }
}

/// Writes an encoded snapshot (as of `offset`) durably (temp file, fsync, rename, directory
/// fsync), unless the partition already has one as of a later offset: the seal thread writes a
/// roll's snapshot after the segment is durable, possibly after the close wrote a newer one.
/// Writes are serialized process-wide (they are rare), so two never share the temporary file.
pub fn write_snapshot_if_newer(directory: &Path, offset: u64, snapshot: &[u8]) -> io::Result<()> {
    static WRITES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serialized = WRITES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let existing = match std::fs::read(directory.join(SNAPSHOT_FILE)) {
        Ok(bytes) => snapshot_offset(&bytes),
        Err(error) if error.kind() == io::ErrorKind::NotFound => None,
        Err(error) => return Err(error),
    };
    // One as of the same offset describes the same log prefix: rewriting it would only cost
    // an fsync (every idle partition at every close).
    if existing.is_some_and(|existing| existing >= offset) {
        return Ok(());
    }
    write_durably(directory, SNAPSHOT_FILE, snapshot)
}

/// The offset a snapshot file says it is as of, if its header is one (the rest is checked when
/// it is loaded).
fn snapshot_offset(bytes: &[u8]) -> Option<u64> {
    let header = bytes.get(..16)?;
    let version = u32::from_be_bytes(header[4..8].try_into().expect("4 bytes"));
    (&header[..4] == SNAPSHOT_MAGIC
        && (version == SNAPSHOT_VERSION || version == SNAPSHOT_VERSION_1))
        .then(|| u64::from_be_bytes(header[8..16].try_into().expect("8 bytes")))
}

/// The transaction lists of a version-2 snapshot as of `offset`.
fn decode_transactions(
    reader: &mut SnapshotReader<'_>,
    offset: u64,
) -> Result<Transactions, SnapshotError> {
    let open_count = reader.u32()?;
    let mut open: Vec<OpenTransaction> = Vec::new();
    for _ in 0..open_count {
        let transaction = OpenTransaction {
            producer_id: i64::from_be_bytes(reader.array()?),
            producer_epoch: i16::from_be_bytes(reader.array()?),
            first_offset: reader.u64()?,
        };
        if transaction.producer_id < 0 || transaction.producer_epoch < 0 {
            return Err(SnapshotError(
                "negative producer id or epoch in a transaction",
            ));
        }
        if transaction.first_offset >= offset {
            return Err(SnapshotError(
                "open transaction at or past the snapshot offset",
            ));
        }
        if open
            .last()
            .is_some_and(|last| last.producer_id >= transaction.producer_id)
        {
            return Err(SnapshotError("open transactions out of order"));
        }
        open.push(transaction);
    }
    let aborted_count = reader.u32()?;
    let mut aborted: Vec<AbortedTransaction> = Vec::new();
    for _ in 0..aborted_count {
        let transaction = AbortedTransaction {
            producer_id: i64::from_be_bytes(reader.array()?),
            first_offset: reader.u64()?,
            last_offset: reader.u64()?,
        };
        if transaction.producer_id < 0
            || transaction.first_offset >= transaction.last_offset
            || transaction.last_offset >= offset
        {
            return Err(SnapshotError("aborted transaction out of range"));
        }
        if aborted
            .last()
            .is_some_and(|last| last.last_offset >= transaction.last_offset)
        {
            return Err(SnapshotError("aborted transactions out of order"));
        }
        aborted.push(transaction);
    }
    Ok(Transactions::restore(open, aborted))
}

/// A snapshot file that cannot be trusted.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("producer-state snapshot is damaged: {0}")]
pub struct SnapshotError(&'static str);

struct SnapshotReader<'a> {
    bytes: &'a [u8],
}

impl<'a> SnapshotReader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], SnapshotError> {
        if self.bytes.len() < len {
            return Err(SnapshotError("truncated"));
        }
        let (head, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    fn u32(&mut self) -> Result<u32, SnapshotError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, SnapshotError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
}

/// Whether `sequence` comes before `next` in the wrapping sequence space (within half of it).
fn is_before(sequence: i32, next: i32) -> bool {
    let modulus = i64::from(MAX_SEQUENCE) + 1;
    let distance = (i64::from(next) - i64::from(sequence)).rem_euclid(modulus);
    distance > 0 && distance < modulus / 2
}

#[cfg(test)]
mod tests {
    use super::*;

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
