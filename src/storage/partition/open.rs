//! Opening a partition (recovering its log, rebuilding its producer state, reading its epochs)
//! and closing it.
//!
//! The two live together because each is the other's counterpart: what a clean close makes
//! durable (every segment synced, the producer-state snapshot at the log end, the high watermark
//! of a replicated partition) is exactly what lets the next open trust the sealed segments and
//! skip the replay, and what a crash leaves out is what the open recovers instead.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, RwLock};

use tokio::sync::watch;
use tracing::{info, warn};

use super::super::config::{FlushPolicy, PartitionConfig};
use super::super::durable_file::{sync_directory, DeferredDirectorySync};
use super::super::fence::{EpochCheckpoint, Fence, ReplicaState, Role};
use super::super::flush::GroupCommit;
use super::super::leader_epochs::LeaderEpochFile;
use super::super::producer_state::ProducerStates;
use super::super::recovery::{self, DamagedRange, RecoveredLog, RecoveryReport};
use super::super::seal::{RecoveryPoint, SealWorker};
use super::super::segment::{SegmentOptions, SegmentReader};
use super::super::spare::SpareSegments;
use super::super::{io_error, log_start, StorageError};
use super::{ObserverSlot, Partition, Shared, Watermarks, WriteStop, Writer};
use crate::batch::{BatchHeader, ProducerStamp};
use crate::metrics::PartitionMetrics;

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
        let recorded_log_start = log_start::load(directory).map_err(io_error("load log start"))?;
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
            recorded_log_start,
        )?;
        let log_end = active.next_offset();
        let first_base = readers.first().map_or(0, |r| r.base_offset());
        // Records deleted below a recorded log start stay deleted; but the log start never stays
        // past the log end (a crash under flush `interval` or `never` may have cut the log
        // shorter than it): the offsets from the log end on are written again, and what is
        // acknowledged then must be readable.
        let log_start =
            recorded_log_start.map_or(first_base, |recorded| recorded.min(log_end).max(first_base));
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
        let metrics = Arc::new(PartitionMetrics::default());
        let shared = Arc::new(Shared {
            segments: RwLock::new(readers),
            high_watermark: watch::Sender::new(high_watermark),
            acknowledged: watch::Sender::new(log_end),
            log_start_offset: AtomicU64::new(log_start),
            write_stop: WriteStop::new(name, Arc::clone(&metrics), Arc::clone(&recovery_point)),
            damaged: RwLock::new(report.damaged.clone()),
            recovery_point,
            watermarks: Watermarks::new(leader_epochs.is_replicated(), log_end, high_watermark),
            truncations: AtomicU64::new(0),
            spares,
            directory_sync: Arc::new(DeferredDirectorySync::new(directory)),
            transactional: AtomicBool::new(!producers.transactions().is_empty()),
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
            last_seal_due: std::time::Instant::now(),
            durable_rolls: config.flush != FlushPolicy::Never,
            seal_worker: seal_worker.clone(),
            producers,
            leader_epochs,
            last_epoch: epoch_in_log,
        };
        let partition = Self {
            name: name.to_string(),
            directory: directory.to_path_buf(),
            config,
            limits: super::LiveLimits::new(super::Limits::of(&config)),
            fence: Fence::with_replica_state(epoch, creation_epoch, replica, writer),
            shared,
            commit: GroupCommit::new(log_end),
            sync_observer: ObserverSlot::default(),
            metrics,
        };
        partition.delete_segments_below_log_start()?;
        Ok((partition, report))
    }
}

impl Drop for Partition {
    /// Closing a partition syncs it, so the next open trusts every sealed segment (the recovery
    /// point reaches the active one) and scans only the last. A failed sync is logged: the next
    /// open then recovers from what is on disk.
    fn drop(&mut self) {
        if self.shared.write_stop.is_stopped() || self.is_retired() {
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
    match fs::remove_file(directory.join(super::super::producer_state::SNAPSHOT_FILE)) {
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
pub(super) fn rebuild_producer_states(
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
            let mut fresh = ProducerStates::new(max_producers);
            if log_start > 0 {
                // Producers whose batches were all before the log start are gone with them.
                fresh.note_forgotten();
            }
            (log_start, fresh)
        }
    };
    if offset < log_start {
        producers.note_forgotten();
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
            producers.note_forgotten();
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
                producers.note_forgotten();
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
                producers.record_batch(bytes, &stamp, &header, header.base_offset);
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
