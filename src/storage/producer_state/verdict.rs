//! What the producer state answers about a batch: append it, answer a retry with its first
//! offsets ([`SequenceVerdict`]), what a fenced resend is ([`ResendVerdict`]), or why it is
//! refused ([`SequenceError`]).
//!
//! Why apart: these are the state's whole vocabulary towards the partition and the protocols
//! (each error is a wire error code); the rules that pick one are in `checks`.

use thiserror::Error;

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
