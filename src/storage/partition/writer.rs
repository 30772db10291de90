//! The partition's writer: the state behind the fence lock and what changes it under that lock
//! (the copy of a batch into the active segment, the roll to a new segment, the bookkeeping of
//! what a sync must cover).
//!
//! It lives apart from [`Partition`](super::Partition) because it is what the [`Fence`] guards:
//! every method here runs under the fence's lock, reached only through the fence. The appends
//! run after the fence's epoch check, in the same critical section, which is why they never
//! check an epoch themselves and must never be reached another way.
//!
//! [`Fence`]: super::super::fence::Fence

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::warn;

use super::super::durable_file::{sync_directory, FileOperation};
use super::super::fence::{EpochCheckpoint, FenceError};
use super::super::leader_epochs::LeaderEpochFile;
use super::super::producer_state::{
    write_snapshot_if_newer, ProducerStates, ResendVerdict, SequenceError, SequenceVerdict,
};
use super::super::seal::{DeferredRoll, SealJob, SealWorker};
use super::super::segment::{self, ActiveSegment, SegmentOptions, SegmentReader};
use super::super::splice::BatchFill;
use super::super::{io_error, StorageError};
use super::seal_due::{seal_due_at, wall_clock_ms, SealDue};
use super::write_stop::device_failed;
use super::{Appended, PendingAppend, Shared};
use crate::batch::{BatchHeader, BatchSlices, ProducerStamp};

/// The writer's state: everything behind the fence lock.
#[derive(Debug)]
pub struct Writer {
    pub(super) directory: PathBuf,
    pub(super) options: SegmentOptions,
    pub(super) active: ActiveSegment,
    pub(super) checkpoint: EpochCheckpoint,
    /// Segments with bytes not yet synced: base offset → (segment, synced up to).
    pub(super) dirty: BTreeMap<u64, (Arc<SegmentReader>, usize)>,
    pub(super) shared: Arc<Shared>,
    pub(super) publish_on_append: bool,
    /// How long a full segment waits before it is sealed (`PartitionConfig::seal_delay`).
    pub(super) seal_delay: std::time::Duration,
    /// When the previous roll's seal comes due: the next never comes due before it.
    pub(super) last_seal_due: std::time::Instant,
    /// Whether a roll makes its changes durable under the append lock: a reused segment file's
    /// cut tail (see `spare`), the new segment's directory entry and the sealed segment's index.
    /// Every flush policy but `never`; under `never` the seal does it, later and for many rolls
    /// at once (see `DeferredDirectorySync`).
    pub(super) durable_rolls: bool,
    /// The thread full segments are handed to.
    pub(super) seal_worker: SealWorker,
    /// Each idempotent producer's recent batches.
    pub(super) producers: ProducerStates,
    /// The leader-epoch history and floor (no file: a standalone partition).
    pub(super) leader_epochs: LeaderEpochFile,
    /// Epoch of the last batch in the log (epochs never decrease with offset).
    pub(super) last_epoch: u64,
}

impl Writer {
    /// The append of one validated batch, with the producer sequence check when the batch
    /// carries a producer stamp: a new batch is appended and remembered, a retry is answered
    /// with its first offsets (nothing written), anything else is refused.
    ///
    /// On a replicated partition a transactional data batch that would open its producer's
    /// transaction needs `verification`, the guard of a verification still pending for it
    /// (see [`crate::storage::verification`]), checked here after the duplicate check (a
    /// retry of a batch already appended is answered as one).
    pub(super) fn append_batch(
        &mut self,
        batch: BatchSlices<'_>,
        header: &BatchHeader,
        stamp: Option<ProducerStamp>,
        verification: Option<u64>,
    ) -> Result<PendingAppend, StorageError> {
        if let Some(stamp) = &stamp {
            if let SequenceVerdict::Duplicate {
                base_offset,
                last_offset,
            } = self.producers.check_batch(batch.head(), stamp, header)?
            {
                return Ok(self.duplicate(base_offset, last_offset, batch.len()));
            }
            if header.is_transactional()
                && !header.is_control()
                && self.shared.watermarks.is_replicated()
            {
                self.producers.check_verified(stamp, verification)?;
            }
        }
        let appended = self.append(batch, header, SealDue::AfterRoll)?;
        if let Some(stamp) = &stamp {
            self.producers
                .record_batch(batch.head(), stamp, header, appended.base_offset);
        }
        Ok(PendingAppend {
            appended,
            durable_at: appended.log_end_offset,
            batch_bytes: batch.len() as u64,
            truncations: self.shared.truncations.load(Ordering::Acquire),
        })
    }

    /// The answer to a batch the fence refused as superseded (see
    /// `Fence::append_or_answer_resend`): an exact resend of a batch the log holds (same
    /// producer id, producer epoch, sequence range, CRC and lease epoch) gets its original
    /// offsets; sequences appended longer ago than remembered get
    /// [`SequenceError::Duplicate`] (appended, offsets forgotten); a batch whose standing the
    /// partition cannot tell gets [`SequenceError::ForgottenResend`]; everything else gets
    /// `refusal`. Reads only: nothing is ever written for a superseded credential. The batch is
    /// not validated: nothing of it is stored, and its header names the batch its sender meant.
    pub(super) fn answer_resend(
        &self,
        batch: BatchSlices<'_>,
        refusal: FenceError,
    ) -> Result<PendingAppend, StorageError> {
        let (Some(stamp), Some(header)) = (
            ProducerStamp::parse(batch.head()),
            BatchHeader::parse(batch.head()),
        ) else {
            return Err(refusal.into());
        };
        let (epoch, current) = match refusal {
            FenceError::Fenced { epoch, current } => (epoch, current),
            FenceError::Leased { current } => (0, current),
            _ => return Err(refusal.into()),
        };
        // A marker has no sequence of its own (always 0): it could pass for a resend of the
        // producer's first batch. Markers are not deduplicated, so a fenced one is refused.
        if header.epoch != epoch || header.is_control() {
            return Err(refusal.into());
        }
        match self
            .producers
            .check_resend(&stamp, header.record_count, header.crc)
        {
            ResendVerdict::Remembered {
                base_offset,
                last_offset,
            } => Ok(self.duplicate(base_offset, last_offset, batch.len())),
            ResendVerdict::AppendedLongAgo { expected } => Err(SequenceError::Duplicate {
                producer_id: stamp.producer_id,
                got: stamp.base_sequence,
                expected,
            }
            .into()),
            ResendVerdict::NotAppended => Err(refusal.into()),
            ResendVerdict::Unknowable => Err(SequenceError::ForgottenResend {
                producer_id: stamp.producer_id,
                producer_epoch: stamp.producer_epoch,
                epoch,
                current,
            }
            .into()),
        }
    }

    /// The answer to a retry of the batch appended at `base_offset..=last_offset`: its offsets,
    /// nothing written; acknowledged once the original batch is.
    fn duplicate(&self, base_offset: u64, last_offset: u64, batch_bytes: usize) -> PendingAppend {
        PendingAppend {
            appended: Appended {
                base_offset,
                last_offset,
                log_end_offset: self.active.next_offset(),
                duplicate: true,
            },
            durable_at: last_offset + 1,
            batch_bytes: batch_bytes as u64,
            truncations: self.shared.truncations.load(Ordering::Acquire),
        }
    }

    /// Writes the producer-state snapshot as of the log end (at close, when everything is
    /// durable). A failure is only logged: the snapshot saves replay time, the log itself
    /// always rebuilds the state.
    pub(super) fn snapshot_producers(&mut self) {
        if let Some(write) = self.producer_snapshot_writer() {
            write();
        }
    }

    /// The write of the producer-state snapshot as of the log end, encoded now (under the
    /// lock, where the state is consistent with the log) and written by whoever runs it. Written
    /// with no producers too: an empty snapshot is what tells the next open that nothing before
    /// its offset needs replaying, so a restart reads only the log written since, however much
    /// is kept.
    fn producer_snapshot_writer(&mut self) -> Option<impl FnOnce() + Send + 'static> {
        let offset = self.active.next_offset();
        // Aborted transactions whose records retention or DeleteRecords removed are not kept.
        let log_start = self.shared.log_start_offset.load(Ordering::Acquire);
        self.producers.transactions_mut().forget_below(log_start);
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

    /// Appends one batch, rolling to a new segment when the active one is full; `seal_due` says
    /// when the full segment's seal comes due (records copied from a leader: see `seal_due`).
    pub(super) fn append(
        &mut self,
        batch: BatchSlices<'_>,
        header: &BatchHeader,
        seal_due: SealDue,
    ) -> Result<Appended, StorageError> {
        let base_offset = self.active.next_offset();
        let end = match self
            .active
            .append(batch, header)
            .map_err(|error| self.write_failed(error))?
        {
            Some(end) => end,
            None => {
                self.roll(batch.len() as u64, seal_due)?;
                self.active
                    .append(batch, header)
                    .map_err(|error| self.write_failed(error))?
                    .expect("a segment rolled for a batch is at least its size")
            }
        };
        Ok(self.appended(base_offset, end, header))
    }

    /// The bookkeeping after a batch was written into the active segment at `base_offset`,
    /// ending at byte `end`: unsynced tracking, the last epoch, and (unless a sync must come
    /// first) publication.
    fn appended(&mut self, base_offset: u64, end: usize, header: &BatchHeader) -> Appended {
        // Track the segment as unsynced on its first append only: no Arc clone per append.
        if let std::collections::btree_map::Entry::Vacant(slot) =
            self.dirty.entry(self.active.reader().base_offset())
        {
            slot.insert((Arc::clone(self.active.reader()), 0));
        }
        let log_end_offset = self.active.next_offset();
        self.last_epoch = header.epoch;
        if header.is_transactional() {
            self.shared.transactional.store(true, Ordering::Release);
        }
        if self.publish_on_append {
            self.active.reader().map().publish(end);
            self.shared.publish_high_watermark(log_end_offset);
        }
        Appended {
            base_offset,
            last_offset: log_end_offset - 1,
            log_end_offset,
            duplicate: false,
        }
    }

    /// [`Self::append_batch`] of a batch whose first bytes, `head`, are in memory and whose
    /// other `tail_len` bytes `fill` puts straight into the segment file (the spliced produce
    /// path: [`super::Partition::append_spliced_pending`]). Runs after the fence's check, like
    /// every append. A plain data batch only (no marker, not transactional: their checks read
    /// the records, which are not in memory). The producer sequence check runs on the header
    /// first: a retry of a batch already in the log is answered as one and `fill` is not called;
    /// otherwise the segment rolls first if the batch does not fit, then `fill` runs and the
    /// batch is validated as it landed (an invalid one is refused, nothing counted, and the next
    /// batch takes its place).
    pub(super) fn append_filled_batch(
        &mut self,
        head: &[u8],
        tail_len: usize,
        header: &BatchHeader,
        stamp: Option<ProducerStamp>,
        max_batch_bytes: usize,
        fill: &mut BatchFill<'_>,
    ) -> Result<PendingAppend, StorageError> {
        assert!(
            !header.is_control() && !header.is_transactional(),
            "a marker or transactional batch takes the copy path"
        );
        let batch_len = head.len() + tail_len;
        if let Some(stamp) = &stamp {
            if let SequenceVerdict::Duplicate {
                base_offset,
                last_offset,
            } = self.producers.check_batch(head, stamp, header)?
            {
                return Ok(self.duplicate(base_offset, last_offset, batch_len));
            }
        }
        let base_offset = self.active.next_offset();
        let landed = match self
            .active
            .append_filled(head, tail_len, max_batch_bytes, fill)
            .map_err(|error| self.write_failed(error))?
        {
            Some(landed) => landed,
            None => {
                self.roll(batch_len as u64, SealDue::AfterRoll)?;
                self.active
                    .append_filled(head, tail_len, max_batch_bytes, fill)
                    .map_err(|error| self.write_failed(error))?
                    .expect("a segment rolled for a batch is at least its size")
            }
        };
        let landed = landed?;
        let end = self.active.reader().map().written();
        let appended = self.appended(base_offset, end, &landed);
        if let Some(stamp) = &stamp {
            self.producers
                .record_batch(head, stamp, &landed, appended.base_offset);
        }
        Ok(PendingAppend {
            appended,
            durable_at: appended.log_end_offset,
            batch_bytes: batch_len as u64,
            truncations: self.shared.truncations.load(Ordering::Acquire),
        })
    }

    /// Seals the active segment and starts a new one at the next offset. On failure nothing
    /// changes and nothing is left behind, so a later roll can try again.
    ///
    /// The sealed segment is synced whole in the background ([`super::super::seal`]), which then moves
    /// the recovery point past it: recovery cuts torn data only after the recovery point and
    /// treats damage before it as corruption (refused, never cut or deleted).
    ///
    /// The new segment has the current segment size, or `batch_bytes` if that is larger: a
    /// batch accepted before a live shrink of the segment size (or a follower's batch from a
    /// leader that applied a growth first) still fits in the segment rolled for it.
    fn roll(&mut self, batch_bytes: u64, seal_due: SealDue) -> Result<(), StorageError> {
        let base_offset = self.active.next_offset();
        let mut options = self.options;
        options.segment_bytes = options.segment_bytes.max(batch_bytes);
        // A reused file's old tail goes first: recovery must never find old bytes after a
        // segment's data once another segment follows it (see `spare`).
        if let Err(error) = self.active.finish_writing(self.durable_rolls) {
            // Under a durable roll that was a truncation and its fsync: the segment's length on
            // disk is unknown now, and a second fsync must not be trusted with it.
            return Err(if self.durable_rolls {
                self.shared.write_stop.disk_failed(
                    FileOperation::Sync,
                    self.active.reader().path(),
                    error,
                )
            } else {
                io_error("cut a reused segment file")(error)
            });
        }
        let next = match self.shared.spares.take(options.segment_bytes) {
            Some(spare) => {
                ActiveSegment::create_reusing(&self.directory, base_offset, options, &spare)
                    .or_else(|error| {
                        warn!(directory = %self.directory.display(), %error, "could not reuse a spare segment file; creating one");
                        ActiveSegment::create(&self.directory, base_offset, options)
                    })
            }
            None => ActiveSegment::create(&self.directory, base_offset, options),
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
                // The directory's earlier changes may be lost with it: stop, never sync again
                // and trust the answer.
                return Err(self.shared.write_stop.disk_failed(
                    FileOperation::Sync,
                    &self.directory,
                    error,
                ));
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
        let now = std::time::Instant::now();
        self.last_seal_due = seal_due_at(
            seal_due,
            self.seal_delay,
            now,
            wall_clock_ms(),
            self.active.reader().max_timestamp(),
            self.last_seal_due,
        );
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
            not_before: self.last_seal_due,
            on_failure: Box::new(move |file, error| {
                shared
                    .write_stop
                    .disk_failed(FileOperation::Sync, file, error);
            }),
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

    /// The answer to a failed write into the active segment: a failure of the device stops the
    /// partition's writes (see `write_stop`); a refusal that left nothing the log counts (a full
    /// disk, a shortage, the socket of a spliced batch) is only answered.
    fn write_failed(&self, error: std::io::Error) -> StorageError {
        if device_failed(&error) {
            return self.shared.write_stop.disk_failed(
                FileOperation::Write,
                self.active.reader().path(),
                error,
            );
        }
        io_error("write to segment")(error)
    }

    /// What a sync must cover now: each dirty segment's unsynced range, and the offset that will
    /// be durable once those ranges are.
    pub(super) fn sync_plan(&self) -> (u64, Vec<(Arc<SegmentReader>, usize, usize)>) {
        let ranges = self
            .dirty
            .values()
            .map(|(segment, synced)| (Arc::clone(segment), *synced, segment.written_bytes()))
            .collect();
        (self.active.next_offset(), ranges)
    }

    pub(super) fn mark_synced(&mut self, ranges: &[(Arc<SegmentReader>, usize, usize)]) {
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
