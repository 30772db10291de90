//! Storage: partitions as logs of CRC-checked record batches in memory-mapped segment files, with
//! the epoch fence inside the segment writer.
//!
//! * `mmap` (crate-private): the only `unsafe` code — the segment map with one writer and
//!   zero-copy readers.
//! * `segment` (crate-private): one segment file: append, read, recovery scan.
//! * `index` (crate-private): the sparse offset index beside each segment.
//! * `recovery` (crate-private): turning the segment files found on open back into a log, one
//!   function per rule.
//! * [`durable_file`]: small files replaced atomically and durably; directory syncs.
//! * [`fence`]: the epoch check and its durable checkpoint (what loom models); in a cluster
//!   also the leader-epoch check and the partition's role.
//! * [`leader_epochs`]: the leader-epoch history and floor of a replicated partition.
//! * [`log_start`]: the durable log start a DeleteRecords moved (`log-start`).
//! * [`flush`]: group commit.
//! * [`seal`]: syncing full segments in the background ([`SealWorker`]); the recovery point.
//! * [`producer_state`]: each idempotent producer's recent batches, so that retries are appended
//!   once and a failed batch stops the ones behind it.
//! * [`partition`]: the segments of one partition, the append and read paths, retention; in a
//!   cluster also roles, replicated appends, truncation and the replicated high watermark.
//! * [`transactions`]: the partition's open and aborted Kafka transactions and its last stable
//!   offset (held in the producer state).
//! * [`open_segments`]: the bound on sealed segments opened on demand and kept open.
//! * `timestamp_lookup` (private): the first offset at or after a timestamp, from segment and
//!   batch-header timestamps.

pub mod config;
pub mod durable_file;
pub mod fence;
pub mod flush;
pub(crate) mod index;
pub mod leader_epochs;
pub mod log_start;
pub(crate) mod mmap;
pub mod open_segments;
pub mod partition;
pub mod producer_state;
mod recovery;
pub mod seal;
pub(crate) mod segment;
pub mod spare;
pub mod splice;
mod timestamp_lookup;
pub mod transactions;
pub mod verification;

use thiserror::Error;

pub use crate::batch::{BatchError, BatchHeader};
pub use config::{FlushPolicy, PartitionConfig};
pub use fence::{FenceError, ReplicaError, Role, WriteCredential};
pub use open_segments::{open_sealed_segments, OPEN_SEALED_SEGMENTS_MAX};
pub use partition::{
    Appended, AtomicAppend, AtomicAppendError, Limits, Partition, PendingAppend, ReadResult,
    ReplicaRead, RetentionReport, SyncObserver, SyncedRange,
};
pub use producer_state::SequenceError;
pub use recovery::{DamagedRange, RecoveryReport};
pub use seal::SealWorker;
/// The recovery scan of one segment file's bytes, for tools and fuzzers: walks the batches from
/// byte 0 with recovery's checks and says where the valid prefix ends and why.
pub use segment::{scan as scan_segment_bytes, ScanResult};
pub use transactions::{committed_batches, AbortedTransaction, OpenTransaction};

/// Everything that can go wrong in storage, each with what a user needs to act on it.
#[derive(Debug, Error)]
pub enum StorageError {
    /// The epoch check refused the append or install.
    #[error(transparent)]
    Fence(FenceError),
    /// The producer sequence check refused the batch; nothing was written.
    #[error(transparent)]
    Sequence(#[from] SequenceError),
    /// The batch is malformed; nothing was written.
    #[error("invalid batch: {0}")]
    InvalidBatch(#[from] BatchError),
    /// The batch exceeds the partition's limit (configured maximum or segment size).
    #[error("batch of {len} bytes exceeds the partition's maximum of {max} bytes")]
    BatchTooLarge {
        /// Batch size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A read outside the log.
    #[error("offset {offset} is out of range [{earliest}, {latest}] of partition {partition}")]
    OffsetOutOfRange {
        /// `topic/partition`.
        partition: String,
        /// Offset asked for.
        offset: u64,
        /// Earliest offset in the log.
        earliest: u64,
        /// High watermark.
        latest: u64,
    },
    /// A stored batch failed its check on read; it is not served.
    #[error("corrupt data in partition {partition}, segment {segment} at byte {position} (reading offset {offset}): {reason}")]
    Corrupt {
        /// `topic/partition`.
        partition: String,
        /// Segment file.
        segment: String,
        /// Byte position in the segment.
        position: u64,
        /// Offset being read.
        offset: u64,
        /// What failed.
        reason: String,
    },
    /// A sync failed earlier; the partition refuses writes until the server restarts and
    /// recovers from what is really on disk.
    #[error("partition {partition} refuses writes after a failed sync; restart the server to recover it")]
    Failed {
        /// `topic/partition`.
        partition: String,
    },
    /// A sync or a write of the partition's log (a segment, the partition directory) failed at
    /// the disk. What reached the disk is unknown (after a failed fsync the kernel may have
    /// dropped the pages it could not write, and a later fsync would succeed without them), so
    /// the partition stopped taking writes: every later one is refused with
    /// [`StorageError::Failed`] until the server restarts and recovers the log from what is on
    /// disk. The batch being written may or may not be in the log after that restart.
    #[error("partition {partition}: {operation} of {file} failed: {source}; the batch may or may not be in the log, and the partition refuses writes until the server restarts and recovers it from what is on disk")]
    DiskFailed {
        /// `topic/partition`.
        partition: String,
        /// `sync` or `write`.
        operation: &'static str,
        /// The file (or directory) that failed.
        file: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// An I/O error, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Settings out of bounds.
    #[error("invalid partition config: {0}")]
    InvalidConfig(crate::domain::ConfigError),
    /// A producer append (or a lease grant) on a follower replica; nothing was written.
    #[error("this replica follows the leader of leader epoch {leader_epoch}; send writes to the partition's leader (fetch the cluster metadata to find it)")]
    NotLeader {
        /// The leader epoch this replica follows.
        leader_epoch: crate::domain::LeaderEpoch,
    },
    /// A replication step the fence refused (a fenced or unknown leader epoch, an older leader
    /// epoch than installed, a replicated append on a replica that is not a follower); nothing
    /// was written.
    #[error(transparent)]
    Replica(ReplicaError),
    /// Replicated batches that do not start at this replica's log end; nothing was written.
    #[error("replicated batches start at offset {base_offset} but this replica's log ends at {log_end_offset}; fetch from the log end")]
    ReplicaOffsetMismatch {
        /// First offset of the batches.
        base_offset: u64,
        /// This replica's log end offset.
        log_end_offset: u64,
    },
    /// Replicated batches that cannot follow this replica's log (their epochs go backwards):
    /// its log diverged from the leader's; nothing was written.
    #[error("replicated batches do not fit partition {partition}: {reason}; truncate by leader epoch before fetching again")]
    ReplicaDiverged {
        /// `topic/partition`.
        partition: String,
        /// What does not fit.
        reason: String,
    },
    /// A marker or transactional batch was offered to the spliced produce path
    /// (`Partition::append_spliced_pending`): its checks read its records, which are still on
    /// the socket. The caller reads the batch and takes the copy path; nothing was written.
    #[error("a marker or transactional batch cannot be spliced into the log; read it and append it with the copy path")]
    NotSpliceable,
    /// A follower was asked to start its log over at an offset below its log end: that would
    /// delete records the leader still has, so the caller's view of the leader is stale.
    /// Nothing changed.
    #[error("refusing to start partition {partition} over at offset {offset}: its log ends at {log_end_offset}, and a start-over only moves past the log end")]
    StartOverBelowLogEnd {
        /// `topic/partition`.
        partition: String,
        /// Where the start-over was asked to start.
        offset: u64,
        /// The partition's log end offset.
        log_end_offset: u64,
    },
    /// The partition's topic was deleted while the request was in flight; nothing was written.
    #[error(
        "partition {partition} was deleted with its topic; create the topic again to write to it"
    )]
    Deleted {
        /// `topic/partition`.
        partition: String,
    },
}

impl StorageError {
    /// What ran out, when the error is the operating system refusing for lack of a resource
    /// (descriptors, disk space, memory) rather than anything wrong with the data: such a failure
    /// changed nothing and may pass, so it is answered as retriable.
    pub fn exhausted_resource(&self) -> Option<&'static str> {
        let StorageError::Io { source, .. } = self else {
            return None;
        };
        exhausted_resource(source)
    }
}

/// The resource an OS error says is exhausted, if it says so.
pub fn exhausted_resource(error: &std::io::Error) -> Option<&'static str> {
    match error.raw_os_error()? {
        libc::EMFILE => Some("the server's open-file limit (ulimit -n) is reached"),
        libc::ENFILE => Some("the system's open-file table is full"),
        libc::ENOSPC => Some("the disk is full"),
        libc::EDQUOT => Some("the disk quota is exceeded"),
        libc::ENOMEM => Some("the server is out of memory"),
        _ => None,
    }
}

impl From<ReplicaError> for StorageError {
    /// A follower's refusal of a producer append is [`StorageError::NotLeader`]; every other
    /// replication refusal keeps its type.
    fn from(error: ReplicaError) -> Self {
        match error {
            ReplicaError::NotLeader { leader_epoch } => StorageError::NotLeader { leader_epoch },
            other => StorageError::Replica(other),
        }
    }
}

/// Wraps an OS error with what storage was doing when it happened.
pub(crate) fn io_error(context: &'static str) -> impl Fn(std::io::Error) -> StorageError {
    move |source| StorageError::Io {
        context: context.to_string(),
        source,
    }
}
