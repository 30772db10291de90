//! Syncing: what group commit runs to make the written log durable and visible, the periodic and
//! closing sync, and the observer tests use to see exactly what reached the disk.
//!
//! Kept apart from the append path because it runs outside the append lock: it takes the writer
//! lock only to plan (which ranges are dirty) and to publish (bytes, then the high watermark),
//! and does the msync in between, so appends go on while the disk works.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::super::durable_file::FileOperation;
use super::super::seal::RECOVERY_POINT_FILE;
use super::super::{io_error, StorageError};
use super::Partition;

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
pub(super) struct ObserverSlot(std::sync::OnceLock<SyncObserver>);

impl std::fmt::Debug for ObserverSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "Some(observer)"
        } else {
            "None"
        })
    }
}

impl Partition {
    /// Installs a [`SyncObserver`] (once; later calls are ignored and return false).
    pub fn set_sync_observer(&self, observer: SyncObserver) -> bool {
        self.sync_observer.0.set(observer).is_ok()
    }

    /// Syncs everything written so far and publishes it to readers. Runs with at most one caller
    /// at a time (through group commit); the msync happens outside the append lock.
    pub(super) fn sync_everything(&self) -> Result<u64, StorageError> {
        if self.shared.write_stop.is_stopped() {
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
            if let Err(source) = segment.sync_range(*start, *end) {
                // After a failed fsync the kernel may have dropped the dirty pages: what is on
                // disk is unknown, so stop accepting writes rather than acknowledge on top of it
                // (never sync again and trust the answer: see `write_stop`).
                return Err(self.shared.write_stop.disk_failed(
                    FileOperation::Sync,
                    segment.path(),
                    source,
                ));
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
    /// A failed sync of the log or of its directory stops the partition's writes (see
    /// `write_stop`); one of the recovery point or the index is reported and changes nothing
    /// (both only save work at the next open).
    pub fn sync(&self) -> Result<(), StorageError> {
        if self.shared.write_stop.is_stopped() {
            return Err(self.failed_error());
        }
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
        if let Err(error) = self.shared.directory_sync.sync_all() {
            return Err(self.shared.write_stop.disk_failed(
                FileOperation::Sync,
                &self.directory,
                error,
            ));
        }
        // Every segment before the active one is synced now: trust them at the next recovery
        // (unless a truncation came meanwhile: then they may not be the log any more).
        if let Err(error) = self
            .shared
            .recovery_point
            .advance_in(generation, active_base)
        {
            self.shared.write_stop.file_failed(
                "recovery point",
                &self.directory.join(RECOVERY_POINT_FILE),
                &error,
            );
            return Err(io_error("write recovery point")(error));
        }
        self.fence
            .with_log(|writer| writer.active.sync_index())
            .map_err(io_error("sync index"))
    }
}
