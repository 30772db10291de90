//! One partition: its segments, the fenced writer, group commit, reads and retention.
//!
//! Append path: peek the batch's epoch and refuse a stale one early (so a stale holder learns it
//! is stale before anything else), validate the batch outside the lock (CRC and structure, in
//! parallel across producers), then enter the [`Fence`]: the authoritative epoch check and the
//! copy into the segment happen in one critical section. With flush `always` the appender then
//! waits for a group-commit sync, outside the lock, before the batch becomes visible to readers.
//!
//! An idempotent producer's batch (magic 3) also passes the producer sequence check
//! ([`super::producer_state`]) in that same critical section: a retry of a batch already in the
//! log is answered with its original offsets instead of being appended twice.
//!
//! This file holds what every part shares (the [`Partition`] itself, the state readers share
//! with the writer, the lifecycle of a deleted topic's partition); each job has its own child
//! module: `open` (opening with recovery, and closing), `writer` (the state behind the fence
//! lock and the append and roll under it), `append` (epoch installs, the append path and
//! acknowledgement), `sync` (group commit's sync and the sync observer), `read` (the read path
//! and the background check), `retention` (deleting old segments), `delete_records` (moving the
//! log start forward: Kafka's DeleteRecords, durable in the `log-start` file).
//!
//! In a cluster a partition also has a replication role (see `docs/replication.md`); what that
//! adds lives in the child modules: `replicate` (roles, replicated appends, the leader-side read
//! for followers, OffsetsForLeaderEpoch), `truncate` (cutting the log to a follower's divergence
//! point) and `high_watermark` (what readers may see once the partition is replicated).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use super::config::PartitionConfig;
use super::durable_file::DeferredDirectorySync;
use super::fence::{Fence, FenceError, Role};
use super::flush::GroupCommit;
use super::recovery::DamagedRange;
use super::seal::RecoveryPoint;
use super::segment::SegmentReader;
use super::spare::SpareSegments;
use super::StorageError;
use crate::metrics::PartitionMetrics;
use high_watermark::Watermarks;
use sync::ObserverSlot;
use write_stop::WriteStop;

mod append;
mod atomic;
mod delete_records;
mod high_watermark;
mod open;
mod read;
mod replicate;
mod retention;
mod seal_due;
mod start_over;
mod sync;
mod truncate;
mod write_stop;
mod writer;

pub use append::{Appended, PendingAppend};
pub use atomic::{AtomicAppend, AtomicAppendError};
pub use read::ReadResult;
pub use replicate::ReplicaRead;
pub use retention::RetentionReport;
pub use sync::{SyncObserver, SyncedRange};
pub use writer::Writer;

/// State readers share with the writer.
#[derive(Debug)]
struct Shared {
    segments: RwLock<Vec<Arc<SegmentReader>>>,
    high_watermark: watch::Sender<u64>,
    log_start_offset: AtomicU64,
    /// Set once a sync or write of the log failed: no write is taken until a restart.
    write_stop: WriteStop,
    /// Found at recovery; only a truncation changes it (it drops the ranges it cut).
    damaged: RwLock<Vec<DamagedRange>>,
    /// Offsets below it are in segments synced whole (see [`super::seal`]).
    recovery_point: Arc<RecoveryPoint>,
    /// What the published high watermark is made of (see `high_watermark`).
    watermarks: Watermarks,
    /// The acknowledged end, published for a replicated partition's leader: a follower's fetch
    /// waits on it for records that are not committed yet (the high watermark waits for that
    /// very fetch).
    acknowledged: watch::Sender<u64>,
    /// Truncations so far: a sync or an acknowledgement planned before one must not count
    /// offsets the truncation cut.
    truncations: AtomicU64,
    /// Segment files retention deleted, kept for the next rolls to reuse (see `spare`).
    spares: SpareSegments,
    /// The rolls' directory changes not synced yet (flush `never`: the seal syncs them).
    directory_sync: Arc<DeferredDirectorySync>,
    /// Whether the log may hold transactional batches (set by the first one appended or
    /// replayed; never cleared): until then the last stable offset is the high watermark
    /// without taking the writer lock, so reads of logs without transactions pay nothing.
    transactional: std::sync::atomic::AtomicBool,
}

/// One partition of a topic.
#[derive(Debug)]
pub struct Partition {
    name: String,
    directory: PathBuf,
    config: PartitionConfig,
    /// The settings that change while the partition is open (see [`LiveLimits`]).
    limits: LiveLimits,
    fence: Fence<Writer>,
    shared: Arc<Shared>,
    commit: GroupCommit,
    sync_observer: ObserverSlot,
    /// What the partition counts for the metrics endpoint (atomics; see `crate::metrics`);
    /// shared with the seal thread, which counts a failed seal.
    metrics: Arc<PartitionMetrics>,
}

impl Partition {
    /// `topic/partition`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The partition's directory.
    pub fn directory(&self) -> &Path {
        &self.directory
    }

    /// The partition's settings as it was opened with (the live ones are [`Partition::limits`]).
    pub fn config(&self) -> &PartitionConfig {
        &self.config
    }

    /// The segment size and retention in force now: what it was opened with, or the last
    /// [`Partition::set_limits`].
    pub fn limits(&self) -> Limits {
        self.limits.get()
    }

    /// Changes the segment size and retention of the open partition: the next retention pass
    /// deletes by the new limits, and the next roll creates a segment of the new size (the
    /// active one keeps its size). Checked against the same bounds as at open.
    pub fn set_limits(&self, limits: Limits) -> Result<(), StorageError> {
        let mut config = self.config;
        config.segment_bytes = limits.segment_bytes;
        config.retention_bytes = limits.retention_bytes;
        config.retention_ms = limits.retention_ms;
        config.validate().map_err(StorageError::InvalidConfig)?;
        self.fence.with_log(|writer| {
            writer.options.segment_bytes = limits.segment_bytes;
            self.limits.set(limits);
        });
        Ok(())
    }

    /// The largest batch the partition takes now: the configured maximum, and never more than
    /// a segment of the current size.
    pub(crate) fn batch_limit(&self) -> usize {
        self.config
            .max_batch_bytes
            .min(usize::try_from(self.limits.get().segment_bytes).unwrap_or(usize::MAX))
    }

    /// What the partition counts: produce, fetch, fence refusals, lease events, sync latency.
    pub fn metrics(&self) -> &PartitionMetrics {
        &self.metrics
    }

    /// The idempotent producers the partition remembers (their state is what makes their
    /// retries land once). Takes the writer lock briefly.
    pub fn active_producers(&self) -> Vec<crate::storage::producer_state::ActiveProducer> {
        self.fence.with_log(|writer| writer.producers.active())
    }

    /// The last stable offset: below it every transaction is settled (committed or aborted,
    /// its marker under the high watermark), so a read_committed reader may read up to it.
    /// The high watermark when no transaction is open; never below the log start (records of a
    /// transaction that retention or DeleteRecords removed hold nothing back). Takes the
    /// writer lock briefly.
    pub fn last_stable_offset(&self) -> u64 {
        let high_watermark = self.high_watermark();
        if !self.shared.transactional.load(Ordering::Acquire) {
            return high_watermark;
        }
        let unstable = self.fence.with_log(|writer| {
            writer
                .producers
                .transactions_mut()
                .last_stable_offset(high_watermark)
        });
        unstable.max(self.log_start_offset().min(high_watermark))
    }

    /// The aborted transactions whose records fall in `[from, to)`: what Kafka's Fetch returns
    /// so that a read_committed consumer drops them. Takes the writer lock briefly.
    pub fn aborted_transactions(
        &self,
        from: u64,
        to: u64,
    ) -> Vec<crate::storage::AbortedTransaction> {
        self.fence
            .with_log(|writer| writer.producers.transactions().aborted_between(from, to))
    }

    /// The transactions open in this partition, by producer id (for DescribeProducers and
    /// DescribeTransactions). Takes the writer lock briefly.
    pub fn open_transactions(&self) -> Vec<crate::storage::OpenTransaction> {
        self.fence
            .with_log(|writer| writer.producers.transactions().open())
    }

    /// The offset the next appended batch will get (acknowledged or not: under flush `always`
    /// it runs ahead of the high watermark until the sync). Takes the writer lock briefly.
    pub fn log_end_offset(&self) -> u64 {
        self.fence.with_log(|writer| writer.active.next_offset())
    }

    /// The current epoch.
    pub fn current_epoch(&self) -> u64 {
        self.fence.current_epoch()
    }

    /// Offsets below this are acknowledged and readable.
    pub fn high_watermark(&self) -> u64 {
        *self.shared.high_watermark.borrow()
    }

    /// Segment files retention deleted that are kept for the next rolls to reuse (see
    /// `spare`).
    pub fn spare_segments(&self) -> usize {
        self.shared.spares.count()
    }

    /// The earliest offset still in the log: the first segment's base offset, or above it
    /// where records were deleted ([`Partition::delete_records_before`]). Reads below it are
    /// refused. Never moves back, except that it never stays past a log cut shorter than it
    /// (see `docs/storage-format.md`, "Log start").
    pub fn log_start_offset(&self) -> u64 {
        self.shared.log_start_offset.load(Ordering::Acquire)
    }

    /// A receiver that changes whenever the high watermark advances (for long polls).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.high_watermark.subscribe()
    }

    /// Syncs performed by group commit so far.
    pub fn sync_count(&self) -> u64 {
        self.commit.syncs()
    }

    fn failed_error(&self) -> StorageError {
        self.shared.write_stop.refusal()
    }

    /// Whether the partition refuses every write until the server restarts, because a sync or
    /// write of its log failed at the disk (or a truncation failed half way): see
    /// `docs/reliability.md`, section 3. Reads go on.
    pub fn refuses_writes(&self) -> bool {
        self.shared.write_stop.is_stopped()
    }

    /// The epoch the partition was created at: 0, or above every epoch of the deleted partition
    /// whose name it took (see [`super::fence`]).
    pub fn creation_epoch(&self) -> u64 {
        self.fence.creation_epoch()
    }

    /// Stops the partition for good because its topic is being deleted, and returns its final
    /// epoch. Taken under the writer lock, so appends and epoch installs already inside it
    /// finish first and none starts after: the returned epoch is the highest this partition
    /// will ever have installed. Later appends, installs and reads fail with
    /// [`StorageError::Deleted`]; long polls waiting on it wake up and learn the same. Closing
    /// it no longer syncs (its files are about to go).
    pub fn retire(&self) -> u64 {
        // One flag for the writer and the seal thread: the recovery point's, set under the
        // writer lock so that no append or install starts after it.
        self.fence
            .with_log(|writer| writer.shared.recovery_point.retire());
        self.shared.high_watermark.send_modify(|_| {});
        self.fence.current_epoch()
    }

    /// Undoes [`Partition::retire`] when the delete could not be carried out (its files are
    /// still in place): the partition serves again.
    pub fn reinstate(&self) {
        self.fence
            .with_log(|writer| writer.shared.recovery_point.reinstate());
    }

    /// Whether [`Partition::retire`] stopped the partition.
    pub fn is_retired(&self) -> bool {
        self.shared.recovery_point.is_retired()
    }

    /// The recorded epoch history `(epoch, start_offset)`, oldest first.
    pub fn epoch_history(&self) -> Vec<(u64, u64)> {
        self.fence
            .with_log(|writer| writer.checkpoint.history().to_vec())
    }
}

impl From<FenceError> for StorageError {
    fn from(error: FenceError) -> Self {
        StorageError::Fence(error)
    }
}

/// A partition's settings that can change while it is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Size of the segments rolled from now on.
    pub segment_bytes: u64,
    /// Delete closed segments while the partition is larger than this.
    pub retention_bytes: Option<u64>,
    /// Delete closed segments whose newest record is older than this.
    pub retention_ms: Option<u64>,
}

impl Limits {
    /// The limits of a partition opened with `config`.
    pub fn of(config: &PartitionConfig) -> Self {
        Self {
            segment_bytes: config.segment_bytes,
            retention_bytes: config.retention_bytes,
            retention_ms: config.retention_ms,
        }
    }
}

/// [`Limits`] readable without a lock (retention and the batch check read them on every pass);
/// 0 stands for "unlimited" in the retention fields, which never hold a real 0.
#[derive(Debug)]
struct LiveLimits {
    segment_bytes: AtomicU64,
    retention_bytes: AtomicU64,
    retention_ms: AtomicU64,
}

impl LiveLimits {
    fn new(limits: Limits) -> Self {
        let live = Self {
            segment_bytes: AtomicU64::new(0),
            retention_bytes: AtomicU64::new(0),
            retention_ms: AtomicU64::new(0),
        };
        live.set(limits);
        live
    }

    fn set(&self, limits: Limits) {
        self.segment_bytes
            .store(limits.segment_bytes, Ordering::Release);
        self.retention_bytes
            .store(limits.retention_bytes.unwrap_or(0), Ordering::Release);
        self.retention_ms
            .store(limits.retention_ms.unwrap_or(0), Ordering::Release);
    }

    fn get(&self) -> Limits {
        let unlimited_if_zero = |value: u64| (value != 0).then_some(value);
        Limits {
            segment_bytes: self.segment_bytes.load(Ordering::Acquire),
            retention_bytes: unlimited_if_zero(self.retention_bytes.load(Ordering::Acquire)),
            retention_ms: unlimited_if_zero(self.retention_ms.load(Ordering::Acquire)),
        }
    }
}
