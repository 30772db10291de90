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
//! In a cluster a partition also has a replication role (see `docs/replication.md`); what that
//! adds lives in the child modules: `replicate` (roles, replicated appends, the leader-side read
//! for followers, OffsetsForLeaderEpoch), `truncate` (cutting the log to a follower's divergence
//! point) and `high_watermark` (what readers may see once the partition is replicated).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use tokio::sync::watch;
use tracing::{info, warn};

use super::config::{FlushPolicy, PartitionConfig};
use super::durable_file::{sync_directory, DeferredDirectorySync};
use super::fence::{
    check_credential_since, EpochCheckpoint, Fence, FenceError, ReplicaState, Role, WriteCredential,
};
use super::flush::GroupCommit;
use super::leader_epochs::LeaderEpochFile;
use super::producer_state::{write_snapshot_if_newer, ProducerStates, SequenceVerdict};
use super::recovery::{self, DamagedRange, RecoveredLog, RecoveryReport};
use super::seal::{DeferredRoll, RecoveryPoint, SealJob, SealWorker};
use super::segment::{self, ActiveSegment, SegmentOptions, SegmentReader};
use super::spare::SpareSegments;
use super::{io_error, StorageError};
use crate::batch::{self, BatchHeader, ProducerStamp};
use crate::metrics::PartitionMetrics;
use high_watermark::Watermarks;

mod high_watermark;
mod replicate;
mod truncate;

pub use replicate::ReplicaRead;

/// What an append returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Offset of the batch's first record.
    pub base_offset: u64,
    /// Offset of its last record.
    pub last_offset: u64,
    /// The offset the next batch will get.
    pub log_end_offset: u64,
    /// True when the batch was a producer's retry of a batch already in the log: nothing was
    /// appended, and the offsets are those the batch got the first time.
    pub duplicate: bool,
}

/// A batch copied into the log but not yet acknowledged (see [`Partition::append_pending`]).
#[derive(Debug)]
#[must_use = "an append is not acknowledged until `acknowledge` returns"]
pub struct PendingAppend {
    appended: Appended,
    /// The offset up to which the log must be durable before the batch is acknowledged (for a
    /// duplicate, the end of the original batch, which may still await its sync).
    durable_at: u64,
    /// Size of the batch, for the produce metrics once it is acknowledged.
    batch_bytes: u64,
    /// Truncations of the log before the append (see [`Partition::acknowledge`]).
    truncations: u64,
}

impl PendingAppend {
    /// The offsets the batch got.
    pub fn offsets(&self) -> Appended {
        self.appended
    }
}

/// What a read returns.
#[derive(Debug, Clone)]
pub struct ReadResult {
    /// Whole stored batches, zero-copy slices of the segment maps.
    pub batches: Vec<Bytes>,
    /// Offsets below this are acknowledged and readable.
    pub high_watermark: u64,
    /// The earliest offset still in the log.
    pub log_start_offset: u64,
}

/// What a retention pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Segments deleted.
    pub segments: usize,
    /// Bytes of log deleted.
    pub bytes: u64,
}

/// State readers share with the writer.
#[derive(Debug)]
struct Shared {
    segments: RwLock<Vec<Arc<SegmentReader>>>,
    high_watermark: watch::Sender<u64>,
    log_start_offset: AtomicU64,
    failed: AtomicBool,
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
}

/// The writer's state: everything behind the fence lock.
#[derive(Debug)]
pub struct Writer {
    directory: PathBuf,
    options: SegmentOptions,
    active: ActiveSegment,
    checkpoint: EpochCheckpoint,
    /// Segments with bytes not yet synced: base offset → (segment, synced up to).
    dirty: BTreeMap<u64, (Arc<SegmentReader>, usize)>,
    shared: Arc<Shared>,
    publish_on_append: bool,
    /// How long a full segment waits before it is sealed (`PartitionConfig::seal_delay`).
    seal_delay: std::time::Duration,
    /// Whether a roll makes its changes durable under the append lock: a reused segment file's
    /// cut tail (see `spare`), the new segment's directory entry and the sealed segment's index.
    /// Every flush policy but `never`; under `never` the seal does it, later and for many rolls
    /// at once (see `DeferredDirectorySync`).
    durable_rolls: bool,
    /// The thread full segments are handed to.
    seal_worker: SealWorker,
    /// Each idempotent producer's recent batches.
    producers: ProducerStates,
    /// The leader-epoch history and floor (no file: a standalone partition).
    leader_epochs: LeaderEpochFile,
    /// Epoch of the last batch in the log (epochs never decrease with offset).
    last_epoch: u64,
}

impl Writer {
    /// The append of one validated batch, with the producer sequence check when the batch
    /// carries a producer stamp: a new batch is appended and remembered, a retry is answered
    /// with its first offsets (nothing written), anything else is refused.
    fn append_batch(
        &mut self,
        batch_bytes: &[u8],
        header: &BatchHeader,
        stamp: Option<ProducerStamp>,
    ) -> Result<PendingAppend, StorageError> {
        if let Some(stamp) = &stamp {
            if let SequenceVerdict::Duplicate {
                base_offset,
                last_offset,
            } = self.producers.check(stamp, header.record_count)?
            {
                return Ok(PendingAppend {
                    appended: Appended {
                        base_offset,
                        last_offset,
                        log_end_offset: self.active.next_offset(),
                        duplicate: true,
                    },
                    durable_at: last_offset + 1,
                    batch_bytes: batch_bytes.len() as u64,
                    truncations: self.shared.truncations.load(Ordering::Acquire),
                });
            }
        }
        let appended = self.append(batch_bytes, header)?;
        if let Some(stamp) = &stamp {
            self.producers
                .record(stamp, header.record_count, appended.base_offset);
        }
        Ok(PendingAppend {
            appended,
            durable_at: appended.log_end_offset,
            batch_bytes: batch_bytes.len() as u64,
            truncations: self.shared.truncations.load(Ordering::Acquire),
        })
    }

    /// Writes the producer-state snapshot as of the log end (at close, when everything is
    /// durable). A failure is only logged: the snapshot saves replay time, the log itself
    /// always rebuilds the state.
    fn snapshot_producers(&self) {
        if let Some(write) = self.producer_snapshot_writer() {
            write();
        }
    }

    /// The write of the producer-state snapshot as of the log end, encoded now (under the
    /// lock, where the state is consistent with the log) and written by whoever runs it. Written
    /// with no producers too: an empty snapshot is what tells the next open that nothing before
    /// its offset needs replaying, so a restart reads only the log written since, however much
    /// is kept.
    fn producer_snapshot_writer(&self) -> Option<impl FnOnce() + Send + 'static> {
        let offset = self.active.next_offset();
        // An empty log has nothing to replay: no file (and no fsync) for an unused partition.
        if self.producers.is_empty()
            && offset == self.shared.log_start_offset.load(Ordering::Acquire)
        {
            return None;
        }
        let snapshot = self.producers.encode_snapshot(offset);
        let directory = self.directory.clone();
        Some(move || {
            if let Err(error) = write_snapshot_if_newer(&directory, offset, &snapshot) {
                warn!(directory = %directory.display(), %error, "could not write the producer-state snapshot");
            }
        })
    }

    fn append(
        &mut self,
        batch_bytes: &[u8],
        header: &BatchHeader,
    ) -> Result<Appended, StorageError> {
        let base_offset = self.active.next_offset();
        let end = match self
            .active
            .append(batch_bytes, header)
            .map_err(io_error("write to segment"))?
        {
            Some(end) => end,
            None => {
                self.roll()?;
                self.active
                    .append(batch_bytes, header)
                    .map_err(io_error("write to segment"))?
                    .expect("a batch no larger than a segment fits in an empty one")
            }
        };
        // Track the segment as unsynced on its first append only: no Arc clone per append.
        if let std::collections::btree_map::Entry::Vacant(slot) =
            self.dirty.entry(self.active.reader().base_offset())
        {
            slot.insert((Arc::clone(self.active.reader()), 0));
        }
        let log_end_offset = self.active.next_offset();
        self.last_epoch = header.epoch;
        if self.publish_on_append {
            self.active.reader().map().publish(end);
            self.shared.publish_high_watermark(log_end_offset);
        }
        Ok(Appended {
            base_offset,
            last_offset: log_end_offset - 1,
            log_end_offset,
            duplicate: false,
        })
    }

    /// Seals the active segment and starts a new one at the next offset. On failure nothing
    /// changes and nothing is left behind, so a later roll can try again.
    ///
    /// The sealed segment is synced whole in the background ([`super::seal`]), which then moves
    /// the recovery point past it: recovery cuts torn data only after the recovery point and
    /// treats damage before it as corruption (refused, never cut or deleted).
    fn roll(&mut self) -> Result<(), StorageError> {
        let base_offset = self.active.next_offset();
        // A reused file's old tail goes first: recovery must never find old bytes after a
        // segment's data once another segment follows it (see `spare`).
        self.active
            .finish_writing(self.durable_rolls)
            .map_err(io_error("cut a reused segment file"))?;
        let next = match self.shared.spares.take(self.options.segment_bytes) {
            Some(spare) => {
                ActiveSegment::create_reusing(&self.directory, base_offset, self.options, &spare)
                    .or_else(|error| {
                        warn!(directory = %self.directory.display(), %error, "could not reuse a spare segment file; creating one");
                        ActiveSegment::create(&self.directory, base_offset, self.options)
                    })
            }
            None => ActiveSegment::create(&self.directory, base_offset, self.options),
        }
        .map_err(io_error("create segment"))?;
        // Under `never` the directory is synced by the seal, for many rolls at once (see
        // `DeferredDirectorySync`); otherwise an acknowledged record's segment must be findable
        // after a crash as soon as it is synced, so the roll syncs it.
        let deferred = if self.durable_rolls {
            if let Err(error) = sync_directory(&self.directory) {
                drop(next);
                if let Err(cleanup) = segment::delete_files(&self.directory, base_offset) {
                    warn!(directory = %self.directory.display(), error = %cleanup, "could not remove a half-created segment");
                }
                return Err(io_error("sync partition directory")(error));
            }
            None
        } else {
            let directory = Arc::clone(&self.shared.directory_sync);
            let change = directory.note_change();
            Some(DeferredRoll { directory, change })
        };
        // The state as of the new segment's start, written by the seal thread once the full
        // segment is durable (no fsync under the append lock, and never ahead of the durable
        // log): a restart then replays the active segment only.
        let snapshot = self.producer_snapshot_writer();
        let generation = self.shared.recovery_point.generation();
        let sealed = std::mem::replace(&mut self.active, next);
        self.shared
            .segments
            .write()
            .expect("segments lock poisoned")
            .push(Arc::clone(self.active.reader()));
        // The index is a cache that recovery checks and rebuilds: a failed sync is not worth
        // failing the append for. Under `never` the seal syncs it, off the append lock.
        if self.durable_rolls {
            if let Err(error) = sealed.sync_index() {
                warn!(segment = %sealed.reader().path().display(), %error, "could not sync the sealed segment's index");
            }
        }
        // Sync the full segment whole and advance the recovery point, off the append lock.
        let shared = Arc::clone(&self.shared);
        self.seal_worker.submit(SealJob {
            segment: Arc::downgrade(sealed.reader()),
            recovery_point: Arc::clone(&self.shared.recovery_point),
            next_base: base_offset,
            deferred,
            generation,
            not_before: std::time::Instant::now() + self.seal_delay,
            on_failure: Box::new(move |_| shared.failed.store(true, Ordering::Release)),
            after_seal: snapshot.map(|write| {
                // Not into a deleted partition's path, which a re-created topic may own.
                let recovery_point = Arc::clone(&self.shared.recovery_point);
                Box::new(move || {
                    recovery_point.unless_retired_in(generation, write);
                }) as Box<dyn FnOnce() + Send>
            }),
        });
        Ok(())
    }

    /// What a sync must cover now: each dirty segment's unsynced range, and the offset that will
    /// be durable once those ranges are.
    fn sync_plan(&self) -> (u64, Vec<(Arc<SegmentReader>, usize, usize)>) {
        let ranges = self
            .dirty
            .values()
            .map(|(segment, synced)| (Arc::clone(segment), *synced, segment.written_bytes()))
            .collect();
        (self.active.next_offset(), ranges)
    }

    fn mark_synced(&mut self, ranges: &[(Arc<SegmentReader>, usize, usize)]) {
        let active_base = self.active.reader().base_offset();
        for (segment, _, end) in ranges {
            let base = segment.base_offset();
            if let Some((_, synced)) = self.dirty.get_mut(&base) {
                *synced = (*synced).max(*end);
                if base != active_base && *synced >= segment.written_bytes() {
                    self.dirty.remove(&base);
                }
            }
        }
    }
}

/// A byte range of a segment that a sync has just made durable.
#[derive(Debug)]
pub struct SyncedRange<'a> {
    /// The segment file.
    pub segment: &'a Path,
    /// First byte synced.
    pub start: usize,
    /// The bytes `[start, start + bytes.len())` as they are now on disk.
    pub bytes: &'a [u8],
}

/// Called after every successful sync with each range it made durable, in order. Tests use it to
/// keep a copy of only what reached the disk, then "crash" by reopening that copy.
pub type SyncObserver = Arc<dyn Fn(&SyncedRange<'_>) + Send + Sync>;

#[derive(Default)]
struct ObserverSlot(std::sync::OnceLock<SyncObserver>);

impl std::fmt::Debug for ObserverSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "Some(observer)"
        } else {
            "None"
        })
    }
}

/// One partition of a topic.
#[derive(Debug)]
pub struct Partition {
    name: String,
    directory: PathBuf,
    config: PartitionConfig,
    fence: Fence<Writer>,
    shared: Arc<Shared>,
    commit: GroupCommit,
    sync_observer: ObserverSlot,
    /// What the partition counts for the metrics endpoint (atomics; see `crate::metrics`).
    metrics: PartitionMetrics,
}

impl Partition {
    /// Opens (or creates) the partition stored in `directory`, recovering its log. `name` is how
    /// logs and errors refer to it (`topic/partition`). Full segments are sealed by
    /// `seal_worker`'s thread (the partition keeps a handle to it).
    pub fn open(
        name: &str,
        directory: &Path,
        config: PartitionConfig,
        seal_worker: &SealWorker,
    ) -> Result<Self, StorageError> {
        Self::open_with_report(name, directory, config, seal_worker).map(|(partition, _)| partition)
    }

    /// [`Partition::open`], also returning what recovery found: what it cut, deleted, rebuilt or
    /// found damaged.
    pub fn open_with_report(
        name: &str,
        directory: &Path,
        config: PartitionConfig,
        seal_worker: &SealWorker,
    ) -> Result<(Self, RecoveryReport), StorageError> {
        config.validate().map_err(StorageError::InvalidConfig)?;
        fs::create_dir_all(directory).map_err(io_error("create partition directory"))?;
        let options = SegmentOptions {
            segment_bytes: config.segment_bytes,
            index_interval_bytes: config.index_interval_bytes,
        };
        let checkpoint =
            EpochCheckpoint::load(directory).map_err(io_error("load epoch checkpoint"))?;
        let (spares, _) =
            SpareSegments::open(directory).map_err(io_error("delete spare segment files"))?;
        let recovery_point =
            Arc::new(RecoveryPoint::load(directory).map_err(io_error("load recovery point"))?);
        let RecoveredLog {
            readers,
            active,
            report,
            epoch_in_log,
        } = recovery::recover_log(
            name,
            directory,
            options,
            recovery_point.offset(),
            checkpoint.latest_epoch(),
        )?;
        let log_end = active.next_offset();
        let log_start = readers.first().map_or(0, |r| r.base_offset());
        let epoch = report.epoch;
        let producers = rebuild_producer_states(
            name,
            directory,
            &readers,
            &report.damaged,
            log_end,
            config.max_producers,
        )?;
        let mut leader_epochs =
            LeaderEpochFile::load(directory).map_err(io_error("load leader-epoch history"))?;
        let recovery_cut = report.bytes_cut > 0 || report.segments_deleted > 0;
        leader_epochs
            .fit_to_log(log_end, recovery_cut)
            .map_err(io_error("write leader-epoch history"))?;
        let creation_epoch = checkpoint.creation_epoch();
        // A replicated partition opens as a follower: it serves no producer until the broker,
        // having read the partition's state, makes it leader again.
        let (replica, high_watermark) = match leader_epochs.epochs() {
            Some(epochs) => (
                ReplicaState {
                    role: Role::Follower,
                    leader_epoch: epochs.floor,
                    leased: epochs.leased,
                },
                epochs.high_watermark.min(log_end),
            ),
            None => (
                ReplicaState::standalone(epoch.max(creation_epoch), creation_epoch),
                log_end,
            ),
        };
        let shared = Arc::new(Shared {
            segments: RwLock::new(readers),
            high_watermark: watch::Sender::new(high_watermark),
            acknowledged: watch::Sender::new(log_end),
            log_start_offset: AtomicU64::new(log_start),
            failed: AtomicBool::new(false),
            damaged: RwLock::new(report.damaged.clone()),
            recovery_point,
            watermarks: Watermarks::new(leader_epochs.is_replicated(), log_end, high_watermark),
            truncations: AtomicU64::new(0),
            spares,
            directory_sync: Arc::new(DeferredDirectorySync::new(directory)),
        });
        let writer = Writer {
            directory: directory.to_path_buf(),
            options,
            active,
            checkpoint,
            dirty: BTreeMap::new(),
            shared: Arc::clone(&shared),
            publish_on_append: config.flush != FlushPolicy::Always,
            seal_delay: config.seal_delay,
            durable_rolls: config.flush != FlushPolicy::Never,
            seal_worker: seal_worker.clone(),
            producers,
            leader_epochs,
            last_epoch: epoch_in_log,
        };
        Ok((
            Self {
                name: name.to_string(),
                directory: directory.to_path_buf(),
                config,
                fence: Fence::with_replica_state(epoch, creation_epoch, replica, writer),
                shared,
                commit: GroupCommit::new(log_end),
                sync_observer: ObserverSlot::default(),
                metrics: PartitionMetrics::default(),
            },
            report,
        ))
    }

    /// Installs a [`SyncObserver`] (once; later calls are ignored and return false).
    pub fn set_sync_observer(&self, observer: SyncObserver) -> bool {
        self.sync_observer.0.set(observer).is_ok()
    }

    /// `topic/partition`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The partition's directory.
    pub fn directory(&self) -> &Path {
        &self.directory
    }

    /// The partition's settings.
    pub fn config(&self) -> &PartitionConfig {
        &self.config
    }

    /// What the partition counts: produce, fetch, fence refusals, lease events, sync latency.
    pub fn metrics(&self) -> &PartitionMetrics {
        &self.metrics
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

    /// The earliest offset still in the log.
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

    /// Makes `epoch` current: refuses `epoch <= current`, records it durably in the checkpoint
    /// (temp file, fsync, rename, directory fsync) and only then installs it in the writer.
    ///
    /// On a follower it is refused ([`StorageError::NotLeader`]); on a replicated partition the
    /// first grant since creation is also recorded in the leader-epoch file, so the partition
    /// stays leased whoever leads it later.
    pub fn install_epoch(&self, epoch: u64) -> Result<(), StorageError> {
        self.fence
            .install_grant(epoch, |epoch, first_grant, writer: &mut Writer| {
                if writer.shared.recovery_point.is_retired() {
                    return Err(StorageError::Deleted {
                        partition: self.name.clone(),
                    });
                }
                if first_grant {
                    replicate::record_lease_granted(writer)?;
                }
                let start_offset = writer.active.next_offset();
                writer
                    .checkpoint
                    .record(epoch, start_offset)
                    .map_err(io_error("write epoch checkpoint"))
            })?;
        info!(partition = %self.name, epoch, "installed epoch");
        Ok(())
    }

    /// Appends one batch (in its stored format, base offset ignored) under the epoch in its header.
    /// Returns once the batch is acknowledged under the partition's flush policy. Blocks on a sync
    /// under flush `always`. A convenience for storage-level callers; the broker service passes
    /// the request's epoch to [`Partition::append_pending`] itself.
    pub fn append(&self, batch_bytes: &[u8]) -> Result<Appended, StorageError> {
        let epoch = BatchHeader::peek_epoch(batch_bytes).ok_or(batch::BatchError::TooShort {
            len: batch_bytes.len(),
        })?;
        let pending = self.append_pending(epoch, batch_bytes)?;
        self.acknowledge(pending)
    }

    /// The first half of [`Partition::append`]: the fence check of `epoch` and the copy into the
    /// segment, which fix the batch's offsets. The epoch is passed in by the caller (the listener
    /// found it where its protocol carries it), checked first, before any other validation, so
    /// a stale holder always learns that it is stale; the batch's own header must then carry the
    /// same epoch, so what is stored says who wrote it. Never blocks on a sync, so a connection
    /// can run it in request order (pipelined produces are appended in the order they were sent)
    /// and wait for durability afterwards with [`Partition::acknowledge`]. Under flush `always`
    /// the batch stays invisible to readers until a sync covers it.
    pub fn append_pending(
        &self,
        epoch: u64,
        batch_bytes: &[u8],
    ) -> Result<PendingAppend, StorageError> {
        self.append_pending_as(WriteCredential::Epoch(epoch), batch_bytes)
    }

    /// [`append_pending`](Self::append_pending) for any [`WriteCredential`]: a writer without a
    /// lease ([`WriteCredential::Unleased`], batches carrying epoch 0) appends only while the
    /// partition has never granted one.
    pub fn append_pending_as(
        &self,
        credential: WriteCredential,
        batch_bytes: &[u8],
    ) -> Result<PendingAppend, StorageError> {
        let result = self.append_checked(credential, batch_bytes);
        match &result {
            Err(StorageError::Fence(FenceError::Fenced { .. } | FenceError::Leased { .. })) => {
                self.metrics.fenced()
            }
            Err(StorageError::Fence(FenceError::UnknownEpoch { .. })) => {
                self.metrics.unknown_epoch()
            }
            _ => {}
        }
        result
    }

    /// [`append_pending_as`](Self::append_pending_as) before its refusals are counted.
    fn append_checked(
        &self,
        credential: WriteCredential,
        batch_bytes: &[u8],
    ) -> Result<PendingAppend, StorageError> {
        let epoch = credential.epoch();
        // Early answer for a stale holder; the authoritative check is inside the fence. A
        // replicated partition answers only staleness early (its never-granted epoch and its
        // lease state are the fence's to judge).
        let current = self.fence.current_epoch();
        if !self.shared.watermarks.is_replicated() {
            check_credential_since(credential, current, self.fence.creation_epoch())
                .map_err(StorageError::Fence)?;
        } else if let WriteCredential::Epoch(epoch) = credential {
            if epoch != 0 && epoch < current {
                return Err(StorageError::Fence(FenceError::Fenced { epoch, current }));
            }
        }
        if batch_bytes.len() > self.config.batch_limit() {
            return Err(StorageError::BatchTooLarge {
                len: batch_bytes.len(),
                max: self.config.batch_limit(),
            });
        }
        let header = batch::validate(batch_bytes, self.config.batch_limit())?;
        if header.epoch != epoch {
            return Err(batch::BatchError::EpochMismatch {
                header: header.epoch,
                request: epoch,
            }
            .into());
        }
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(self.failed_error());
        }
        let stamp = ProducerStamp::parse(batch_bytes);
        self.fence.append_as(credential, |writer: &mut Writer| {
            if writer.shared.recovery_point.is_retired() {
                return Err(StorageError::Deleted {
                    partition: self.name.clone(),
                });
            }
            writer.append_batch(batch_bytes, &header, stamp)
        })
    }

    /// Whether [`Partition::acknowledge`] blocks (flush `always`): then call it off async workers.
    pub fn acknowledge_blocks(&self) -> bool {
        self.config.flush == FlushPolicy::Always
    }

    /// The second half of [`Partition::append`]: waits until the batch is acknowledged under the
    /// flush policy (a group-commit sync for `always`; nothing otherwise).
    pub fn acknowledge(&self, pending: PendingAppend) -> Result<Appended, StorageError> {
        if self.acknowledge_blocks() {
            self.commit
                .wait_durable(pending.durable_at, || self.sync_everything())?;
        }
        // A truncation since the append may have cut it (the partition became a follower
        // meanwhile): never acknowledge what the log may no longer hold.
        if self.shared.truncations.load(Ordering::Acquire) != pending.truncations {
            return Err(StorageError::NotLeader {
                leader_epoch: self.fence.leader_epoch(),
            });
        }
        let appended = pending.appended;
        if !appended.duplicate {
            let records = appended.last_offset - appended.base_offset + 1;
            self.metrics.produced(records, pending.batch_bytes);
        }
        Ok(appended)
    }

    fn failed_error(&self) -> StorageError {
        StorageError::Failed {
            partition: self.name.clone(),
        }
    }

    /// Syncs everything written so far and publishes it to readers. Runs with at most one caller
    /// at a time (through group commit); the msync happens outside the append lock.
    fn sync_everything(&self) -> Result<u64, StorageError> {
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(self.failed_error());
        }
        let (target, ranges, truncations) = self.fence.with_log(|writer| {
            let (target, ranges) = writer.sync_plan();
            (
                target,
                ranges,
                writer.shared.truncations.load(Ordering::Acquire),
            )
        });
        let started = std::time::Instant::now();
        for (segment, start, end) in &ranges {
            if let Err(source) = segment.map().sync_range(*start, *end) {
                // After a failed fsync the kernel may have dropped the dirty pages: what is on
                // disk is unknown, so stop accepting writes rather than acknowledge on top of it.
                self.shared.failed.store(true, Ordering::Release);
                tracing::error!(partition = %self.name, error = %source, "sync failed; partition stops accepting writes");
                return Err(StorageError::Io {
                    context: format!("sync {}", segment.path().display()),
                    source,
                });
            }
        }
        if !ranges.is_empty() {
            self.metrics.synced(started.elapsed());
        }
        // A truncation since the plan cut (some of) what was synced: report nothing new.
        let current = self.fence.with_log(|writer| {
            writer.mark_synced(&ranges);
            let current = writer.shared.truncations.load(Ordering::Acquire) == truncations;
            if current {
                // Under the writer lock, so no truncation can come between the check and this;
                // the bytes first, so that a reader woken by the high watermark finds them.
                for (segment, _, end) in &ranges {
                    segment.map().publish(*end);
                }
                writer.shared.publish_high_watermark(target);
            }
            current
        });
        if !current {
            return Ok(0);
        }
        for (segment, start, end) in &ranges {
            if let (Some(observer), Some(bytes)) = (
                self.sync_observer.0.get(),
                segment.map().bytes(*start, *end),
            ) {
                observer(&SyncedRange {
                    segment: segment.path(),
                    start: *start,
                    bytes,
                });
            }
        }
        Ok(target)
    }

    /// Makes everything appended so far durable (the interval flusher and shutdown call this).
    pub fn sync(&self) -> Result<(), StorageError> {
        let (target, active_base, generation) = self.fence.with_log(|writer| {
            (
                writer.active.next_offset(),
                writer.active.reader().base_offset(),
                writer.shared.recovery_point.generation(),
            )
        });
        self.commit
            .wait_durable(target, || self.sync_everything())?;
        // Rolls under `never` left their directory changes to the seal: the segments must be
        // findable before the recovery point says they are synced.
        self.shared
            .directory_sync
            .sync_all()
            .map_err(io_error("sync partition directory"))?;
        // Every segment before the active one is synced now: trust them at the next recovery
        // (unless a truncation came meanwhile: then they may not be the log any more).
        self.shared
            .recovery_point
            .advance_in(generation, active_base)
            .map_err(io_error("write recovery point"))?;
        self.fence
            .with_log(|writer| writer.active.sync_index())
            .map_err(io_error("sync index"))
    }

    /// Whole batches from the one holding `offset`, up to `max_bytes` (at least one batch).
    /// Offsets outside `[log start, high watermark]` are an error; the high watermark itself
    /// returns no batches (nothing is there yet).
    pub fn read(&self, offset: u64, max_bytes: usize) -> Result<ReadResult, StorageError> {
        if self.is_retired() {
            return Err(StorageError::Deleted {
                partition: self.name.clone(),
            });
        }
        let high_watermark = self.high_watermark();
        let log_start_offset = self.log_start_offset();
        if offset < log_start_offset || offset > high_watermark {
            return Err(StorageError::OffsetOutOfRange {
                partition: self.name.clone(),
                offset,
                earliest: log_start_offset,
                latest: high_watermark,
            });
        }
        let mut result = ReadResult {
            batches: Vec::new(),
            high_watermark,
            log_start_offset,
        };
        if offset == high_watermark {
            return Ok(result);
        }
        result.batches = self.read_batches(offset, max_bytes, high_watermark)?;
        Ok(result)
    }

    /// Whole batches of the segment holding `offset`, from the one holding it, up to
    /// `max_bytes` (at least one), none at or past `limit`; damaged or corrupt data refused.
    fn read_batches(
        &self,
        offset: u64,
        max_bytes: usize,
        limit: u64,
    ) -> Result<Vec<Bytes>, StorageError> {
        if let Some(damage) = self
            .shared
            .damaged
            .read()
            .expect("damaged ranges lock poisoned")
            .iter()
            .find(|damage| (damage.start_offset..damage.end_offset).contains(&offset))
        {
            return Err(StorageError::Corrupt {
                partition: self.name.clone(),
                segment: damage.segment.display().to_string(),
                position: damage.position,
                offset,
                reason: format!(
                    "{}; offsets {}..{} are unreadable, the next readable offset is {}",
                    damage.reason, damage.start_offset, damage.end_offset, damage.end_offset
                ),
            });
        }
        let segment = {
            let segments = self.shared.segments.read().expect("segments lock poisoned");
            let at = segments.partition_point(|segment| segment.base_offset() <= offset);
            Arc::clone(&segments[at.saturating_sub(1)])
        };
        segment
            .read(offset, max_bytes, limit)
            .map_err(|error| error.into_storage_error(&self.name))
    }

    /// Checks the batches of the segments opened at startup without a scan (below the recovery
    /// point: see `recovery`), one segment at a time, while `keep_going` says so; returns how
    /// many segments it checked. Reads never wait for this: they check every unchecked batch they
    /// serve. A corrupt batch found here is logged and stays refused on read.
    pub fn verify_unscanned_segments(&self, keep_going: impl Fn() -> bool) -> usize {
        let segments = self
            .shared
            .segments
            .read()
            .expect("segments lock poisoned")
            .clone();
        let mut checked = 0;
        for segment in segments.iter().filter(|segment| !segment.is_verified()) {
            if !keep_going() {
                break;
            }
            checked += 1;
            if let Err(error) = segment.verify() {
                tracing::error!(partition = %self.name, segment = %error.path().display(), %error, "a sealed segment failed its check: what it cannot serve is refused on read; restore the file from a backup");
            }
        }
        checked
    }

    /// Deletes whole closed segments beyond the retention size or age (`now_ms`: wall clock ms).
    /// The active segment is never deleted.
    pub fn enforce_retention(&self, now_ms: i64) -> Result<RetentionReport, StorageError> {
        if self.is_retired() {
            return Ok(RetentionReport::default());
        }
        self.shared.spares.expire(std::time::Instant::now());
        if !self.retention_due(now_ms) {
            return Ok(RetentionReport::default());
        }
        let victims = self.fence.with_log(|writer| {
            let mut segments = self
                .shared
                .segments
                .write()
                .expect("segments lock poisoned");
            let mut total: u64 = segments.iter().map(|s| s.written_bytes() as u64).sum();
            let mut victims = Vec::new();
            while segments.len() > 1 {
                let oldest = &segments[0];
                if !self.exceeds_retention(total, oldest.max_timestamp(), now_ms) {
                    break;
                }
                total -= oldest.written_bytes() as u64;
                writer.dirty.remove(&oldest.base_offset());
                victims.push(segments.remove(0));
            }
            self.shared
                .log_start_offset
                .store(segments[0].base_offset(), Ordering::Release);
            victims
        });
        // Not in a deleted partition's path, which a re-created topic may own by now.
        let deleted = self.shared.recovery_point.unless_retired(|| {
            let mut report = RetentionReport::default();
            for victim in victims {
                victim.mark_deleted();
                let base_offset = victim.base_offset();
                report.segments += 1;
                report.bytes += victim.written_bytes() as u64;
                // Below the log start for good: its files may be reused by a later roll.
                if let Some(file) = victim.into_reusable_file() {
                    let index = self.directory.join(segment::index_file_name(base_offset));
                    let reuse = self.config.segment_file_reuse;
                    if let Err(error) = self.shared.spares.keep(&file, &index, reuse) {
                        warn!(partition = %self.name, %error, "could not keep a deleted segment's files as a spare; deleting them");
                    }
                }
                segment::delete_files(&self.directory, base_offset)
                    .map_err(io_error("delete segment"))?;
            }
            if report.segments > 0 {
                sync_directory(&self.directory).map_err(io_error("sync partition directory"))?;
            }
            Ok::<_, StorageError>(report)
        });
        let report = deleted.transpose()?.unwrap_or_default();
        if report.segments > 0 {
            info!(partition = %self.name, segments = report.segments, bytes = report.bytes, log_start = self.log_start_offset(), "retention deleted segments");
        }
        Ok(report)
    }

    /// Whether retention would delete a segment now: a check under the segment list's read lock
    /// only, so running retention often costs the writer nothing while nothing is due.
    fn retention_due(&self, now_ms: i64) -> bool {
        if self.config.retention_bytes.is_none() && self.config.retention_ms.is_none() {
            return false;
        }
        self.learn_retention_facts(now_ms);
        let segments = self.shared.segments.read().expect("segments lock poisoned");
        let Some(oldest) = segments.first().filter(|_| segments.len() > 1) else {
            return false;
        };
        let total: u64 = segments.iter().map(|s| s.written_bytes() as u64).sum();
        self.exceeds_retention(total, oldest.max_timestamp(), now_ms)
    }

    /// What retention needs to know of sealed segments opened on demand, learned outside every
    /// lock (see `segment::on_demand`): by size, where each one's data ends (found once, from
    /// its index, as a restart used to); by age, the largest timestamp of the oldest ones, up to
    /// the first that is not expired (found by checking those segments whole, once). Nothing
    /// is looked at when everything needed is known, so frequent passes stay cheap.
    fn learn_retention_facts(&self, now_ms: i64) {
        let age_limit_ms = self
            .config
            .retention_ms
            .map(|ms| now_ms.saturating_sub(i64::try_from(ms).unwrap_or(i64::MAX)));
        let by_bytes = self.config.retention_bytes.is_some();
        let age_unknown = |segments: &[Arc<SegmentReader>]| {
            age_limit_ms.is_some_and(|limit| {
                segments[..segments.len().saturating_sub(1)]
                    .iter()
                    .find(|segment| {
                        !segment.max_timestamp_known() || segment.max_timestamp() >= limit
                    })
                    .is_some_and(|segment| !segment.max_timestamp_known())
            })
        };
        let segments = {
            let segments = self.shared.segments.read().expect("segments lock poisoned");
            let size_unknown = by_bytes && segments.iter().any(|segment| !segment.size_known());
            if !size_unknown && !age_unknown(&segments) {
                return;
            }
            segments.clone()
        };
        if by_bytes {
            for segment in &segments {
                if let Err(error) = segment.learn_size() {
                    warn!(partition = %self.name, segment = %error.path().display(), %error, "retention could not learn a sealed segment's size; it counts as empty");
                }
            }
        }
        if let Some(limit) = age_limit_ms {
            for segment in &segments[..segments.len().saturating_sub(1)] {
                if !segment.max_timestamp_known() {
                    if let Err(error) = segment.verify() {
                        warn!(partition = %self.name, segment = %error.path().display(), %error, "retention could not learn a sealed segment's age; it is kept");
                    }
                }
                if !segment.max_timestamp_known() || segment.max_timestamp() >= limit {
                    break;
                }
            }
        }
    }

    /// Whether a log of `total` bytes whose oldest segment's newest record is `oldest_max_ms`
    /// is beyond the retention limits (the oldest segment must go).
    fn exceeds_retention(&self, total: u64, oldest_max_ms: i64, now_ms: i64) -> bool {
        let too_big = self.config.retention_bytes.is_some_and(|max| total > max);
        let too_old = self.config.retention_ms.is_some_and(|ms| {
            oldest_max_ms < now_ms.saturating_sub(i64::try_from(ms).unwrap_or(i64::MAX))
        });
        too_big || too_old
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

    /// The first offset whose record timestamp is at or after `timestamp` (ms), among the
    /// records readers can see; `None` if none is that recent (see `timestamp_lookup`).
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<u64>, StorageError> {
        let high_watermark = self.high_watermark();
        let segments = self
            .shared
            .segments
            .read()
            .expect("segments lock poisoned")
            .clone();
        super::timestamp_lookup::first_offset_at_or_after(
            &self.name,
            &segments,
            high_watermark,
            timestamp,
        )
    }
}

impl Drop for Partition {
    /// Closing a partition syncs it, so the next open trusts every sealed segment (the recovery
    /// point reaches the active one) and scans only the last. A failed sync is logged: the next
    /// open then recovers from what is on disk.
    fn drop(&mut self) {
        if self.shared.failed.load(Ordering::Acquire) || self.is_retired() {
            return;
        }
        // A reused file's old tail is cut before the final sync, so a clean restart finds
        // nothing after the data; spares are deleted (the next open would delete them anyway).
        if let Err(error) = self
            .fence
            .with_log(|writer| writer.active.finish_writing(false))
        {
            warn!(partition = %self.name, %error, "could not cut a reused segment file on close");
        }
        self.shared.spares.clear();
        if let Err(error) = self.sync() {
            warn!(partition = %self.name, %error, "sync on close failed");
            return;
        }
        // Everything is durable: a snapshot at the log end spares the next open any replay.
        self.fence.with_log(|writer| writer.snapshot_producers());
        // A replicated partition reopens with the high watermark it had (see `high_watermark`).
        if let Err(error) = self.checkpoint_high_watermark() {
            warn!(partition = %self.name, %error, "could not record the high watermark on close");
        }
    }
}

/// Removes the producer-state snapshot, if there is one, durably.
fn discard_snapshot(directory: &Path) -> Result<(), StorageError> {
    match fs::remove_file(directory.join(super::producer_state::SNAPSHOT_FILE)) {
        Ok(()) => sync_directory(directory).map_err(io_error("sync partition directory")),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(io_error("remove producer-state snapshot")(error)),
    }
}

/// Batches read at a time while replaying the log into the producer state.
const REPLAY_READ_BYTES: usize = 4 * 1024 * 1024;

/// The producer state as of `log_end`: the snapshot, if it is usable, then every magic-3 batch
/// after it. A snapshot past the log end (its segment lost its tail in a crash after the
/// snapshot was written) would claim batches the log no longer has, so it is dropped and the
/// whole log replayed. Damaged ranges are skipped (their batches cannot be read); a producer
/// whose batches were there then meets a gap and starts a new session.
fn rebuild_producer_states(
    name: &str,
    directory: &Path,
    segments: &[Arc<SegmentReader>],
    damaged: &[DamagedRange],
    log_end: u64,
    max_producers: usize,
) -> Result<ProducerStates, StorageError> {
    let log_start = segments.first().map_or(0, |segment| segment.base_offset());
    let snapshot = ProducerStates::load_snapshot(directory, max_producers)
        .map_err(io_error("read producer-state snapshot"))?;
    let (mut offset, mut producers) = match snapshot {
        Some((offset, state)) if offset <= log_end => (offset, state),
        unusable => {
            if let Some((offset, _)) = unusable {
                warn!(
                    partition = name,
                    snapshot = offset,
                    log_end,
                    "producer-state snapshot is past the log end; rebuilding from the whole log"
                );
            }
            // A snapshot not trusted now must never be trusted later (once the log grows past
            // its offset it would describe another history), nor keep newer ones from being
            // written: remove it, durably, before the partition takes writes.
            discard_snapshot(directory)?;
            (log_start, ProducerStates::new(max_producers))
        }
    };
    if offset < log_start {
        warn!(
            partition = name,
            snapshot = offset,
            log_start,
            "producer-state snapshot is older than the log start; replaying what is left"
        );
        offset = log_start;
    }
    let started = std::time::Instant::now();
    let from = offset;
    let mut batches = 0u64;
    while offset < log_end {
        if let Some(damage) = damaged
            .iter()
            .find(|damage| (damage.start_offset..damage.end_offset).contains(&offset))
        {
            offset = damage.end_offset;
            continue;
        }
        let at = segments.partition_point(|segment| segment.base_offset() <= offset);
        let Some(segment) = at.checked_sub(1).map(|index| &segments[index]) else {
            break;
        };
        let read = match segment.read(offset, REPLAY_READ_BYTES, log_end) {
            Ok(read) => read,
            Err(error) => {
                warn!(partition = name, segment = %error.path().display(), %error, "producer-state replay stopped at unreadable data");
                break;
            }
        };
        if read.is_empty() {
            // The rest of this segment is past the log end; go on with the next one, if any.
            match segments.get(at) {
                Some(next) if next.base_offset() > offset => {
                    offset = next.base_offset();
                    continue;
                }
                _ => break,
            }
        }
        for bytes in &read {
            let header = BatchHeader::parse(bytes).expect("a read returns whole batches");
            if let Some(stamp) = ProducerStamp::parse(bytes) {
                producers.record(&stamp, header.record_count, header.base_offset);
            }
            offset = offset.max(header.next_offset());
            batches += 1;
        }
    }
    if batches > 0 {
        info!(
            partition = name,
            from,
            to = log_end,
            batches,
            producers = producers.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "rebuilt producer state from the log"
        );
    }
    Ok(producers)
}

impl From<FenceError> for StorageError {
    fn from(error: FenceError) -> Self {
        StorageError::Fence(error)
    }
}
