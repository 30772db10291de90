//! What the replication logic needs from a partition's log, as a trait: the broker implements
//! it with [`crate::storage::Partition`], the deterministic simulation with an in-memory log.
//!
//! The leader-epoch check lives *inside* [`ReplicaLog::append_replicated`], in the same critical
//! section as the write, through the same fence code as the producer epoch: a follower that has
//! installed leader epoch `e` refuses every batch a leader of an older epoch sends it, even one
//! whose fetch was already in flight when `e` was installed.

use thiserror::Error;

use super::LeaderEpoch;

/// Why a replica-log operation was refused. Nothing was written.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ReplicaLogError {
    /// The batches came from a leader of an older epoch than the one this replica installed.
    #[error("fenced leader epoch: epoch {epoch} < current {current}")]
    FencedLeaderEpoch {
        /// Leader epoch the append carried.
        epoch: LeaderEpoch,
        /// Leader epoch this replica installed.
        current: LeaderEpoch,
    },
    /// The batches came from a leader epoch this replica has not installed yet (it must learn it
    /// from the metadata store first). Never adopted.
    #[error("unknown leader epoch: epoch {epoch} > current {current}")]
    UnknownLeaderEpoch {
        /// Leader epoch the append carried.
        epoch: LeaderEpoch,
        /// Leader epoch this replica installed.
        current: LeaderEpoch,
    },
    /// `become_leader`/`become_follower` with an epoch below the installed one.
    #[error("leader epoch {epoch} is older than the installed {current}")]
    EpochNotNewer {
        /// Leader epoch asked for.
        epoch: LeaderEpoch,
        /// Leader epoch installed.
        current: LeaderEpoch,
    },
    /// The batches do not start at the log end offset, or are not contiguous.
    #[error("replicated batches start at {base_offset}, the log ends at {log_end_offset}")]
    OffsetMismatch {
        /// First offset of the batches.
        base_offset: u64,
        /// This replica's log end offset.
        log_end_offset: u64,
    },
    /// The batches are corrupt (a CRC or length check failed).
    #[error("corrupt replicated batch: {0}")]
    Corrupt(String),
    /// The disk failed; the message says what to do.
    #[error("storage: {0}")]
    Storage(String),
}

/// A partition log as the replication logic sees it. Implementations keep the invariants in the
/// method docs; the deterministic simulation checks them.
pub trait ReplicaLog: Send + Sync {
    /// The offset the next appended record gets.
    fn log_end_offset(&self) -> u64;

    /// The offset below which records are deleted (retention, DeleteRecords, a start-over).
    fn log_start_offset(&self) -> u64;

    /// The offset below which records are committed (replicated to the ISR); consumers see only
    /// those. Never goes down.
    fn high_watermark(&self) -> u64;

    /// How far the log is durable under its flush policy (a leader counts its own log towards
    /// the high watermark only this far).
    fn durable_end_offset(&self) -> u64;

    /// The highest leader epoch this replica installed (its leader-epoch fence floor: it never
    /// goes down, not even when the log is truncated).
    fn leader_epoch_floor(&self) -> LeaderEpoch;

    /// The latest entry of the leader-epoch history: the newest leader epoch that wrote records
    /// in this log, and the offset its first record has. `None` for an empty history.
    fn latest_epoch_entry(&self) -> Option<(LeaderEpoch, u64)>;

    /// Kafka's OffsetsForLeaderEpoch: the largest epoch `<= epoch` in the history and the offset
    /// where it ended (the start of the next epoch, or the log end for the latest). When every
    /// entry is above `epoch`, `epoch` itself, ended where the first entry starts (the log holds
    /// nothing of it: an asker holding records of `epoch` cuts there, as Kafka's leader answers).
    /// `None` only for an empty history (the asker keeps what it knows is committed: its log up
    /// to its high watermark).
    fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, u64)>;

    /// Takes over as leader in `epoch`: durably records `(epoch, log_end_offset)` in the
    /// leader-epoch history and raises the fence floor, installs the producer epoch base
    /// ([`super::producer_epoch_base`]) so every producer epoch issued before is fenced, and only
    /// then returns. Producer appends are accepted from here on.
    fn become_leader(&self, epoch: LeaderEpoch) -> Result<(), ReplicaLogError>;

    /// Follows the leader of `epoch`: durably raises the fence floor to `epoch` (refusing every
    /// later replicated append from an older leader), and refuses producer appends (they get
    /// "not leader") until a later `become_leader`.
    fn become_follower(&self, epoch: LeaderEpoch) -> Result<(), ReplicaLogError>;

    /// Appends batches fetched from the leader of `leader_epoch`, byte for byte as the leader
    /// stored them, which were written by the leader of `records_epoch` (`<= leader_epoch`; the
    /// history gets `(records_epoch, first offset)` first if it is newer than its latest entry).
    /// The leader-epoch check (lower fenced, equal fine, higher unknown) runs in the same
    /// critical section as the write. Returns the new log end offset.
    fn append_replicated(
        &self,
        batches: &[u8],
        records_epoch: LeaderEpoch,
        leader_epoch: LeaderEpoch,
    ) -> Result<u64, ReplicaLogError>;

    /// Cuts the log so that `offset` is its end (the records are untouched if it already ends at
    /// or below it), and the leader-epoch history with it: entries starting at or after the new
    /// end go, including an epoch that started at the log end and wrote nothing (else a replica
    /// that led that empty epoch would ask where it ended forever). The fence floors stay where
    /// they are. Refused below the high watermark.
    fn truncate_to(&self, offset: u64) -> Result<(), ReplicaLogError>;

    /// Starts the log over at `offset`, the leader's log start, which lies past this log's end
    /// (Kafka's `truncateFullyAndStartAt`): every record goes, the log start, the log end and the
    /// high watermark become `offset`, durably, before it returns. The fence floors stay; the
    /// leader-epoch history is emptied (it knows nothing of the epochs that wrote the offsets
    /// skipped). A no-op at the log end; refused below it (records the leader still has would
    /// go) and on a leader.
    fn start_over_at(&self, offset: u64) -> Result<(), ReplicaLogError>;

    /// Raises the high watermark to `offset` (capped at what this replica holds and has made
    /// durable under its flush policy). Never lowers it.
    fn advance_high_watermark(&self, offset: u64);
}
