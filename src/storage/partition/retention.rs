//! Retention: deleting whole sealed segments beyond the configured size or age, and keeping their
//! files as spares for later rolls.
//!
//! A pass first decides whether anything is due under the segment list's read lock only (so
//! running it often costs the writer nothing), then removes the victims from the log under the
//! writer lock, and deletes (or keeps) their files outside it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::{info, warn};

use super::super::durable_file::sync_directory;
use super::super::segment::{self, SegmentReader};
use super::super::{io_error, StorageError};
use super::Partition;

/// What a retention pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Segments deleted.
    pub segments: usize,
    /// Bytes of log deleted.
    pub bytes: u64,
}

impl Partition {
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
            // Never back: a DeleteRecords may have moved the log start inside this segment.
            self.shared
                .log_start_offset
                .fetch_max(segments[0].base_offset(), Ordering::AcqRel);
            victims
        });
        let report = self.delete_segments(victims)?;
        if report.segments > 0 {
            info!(partition = %self.name, segments = report.segments, bytes = report.bytes, log_start = self.log_start_offset(), "retention deleted segments");
        }
        Ok(report)
    }

    /// Deletes the files of `victims`, segments already taken out of the log (under the writer
    /// lock) because they lie wholly below the log start: each is marked deleted, its file kept
    /// as a spare for a later roll where it can be, and the directory synced once. Nothing is
    /// written in a deleted partition's path (a re-created topic may own it by now). Retention
    /// and DeleteRecords both end here.
    pub(super) fn delete_segments(
        &self,
        victims: Vec<Arc<SegmentReader>>,
    ) -> Result<RetentionReport, StorageError> {
        if victims.is_empty() {
            return Ok(RetentionReport::default());
        }
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
        Ok(deleted.transpose()?.unwrap_or_default())
    }

    /// Bytes of log data the partition holds on disk: the sum of its segments' data, not their
    /// preallocated files (as retention measures it). A sealed segment opened on demand whose
    /// size was never needed is opened for a moment to learn it; one that cannot be counts as
    /// empty, with a warning (as in retention).
    pub fn size_bytes(&self) -> u64 {
        let segments = self
            .shared
            .segments
            .read()
            .expect("segments lock poisoned")
            .clone();
        for segment in segments.iter().filter(|segment| !segment.size_known()) {
            if let Err(error) = segment.learn_size() {
                warn!(partition = %self.name, segment = %error.path().display(), %error, "could not learn a sealed segment's size; it counts as empty");
            }
        }
        segments.iter().map(|s| s.written_bytes() as u64).sum()
    }

    /// Whether retention would delete a segment now: a check under the segment list's read lock
    /// only, so running retention often costs the writer nothing while nothing is due.
    fn retention_due(&self, now_ms: i64) -> bool {
        let limits = self.limits();
        if limits.retention_bytes.is_none() && limits.retention_ms.is_none() {
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
        let limits = self.limits();
        let age_limit_ms = limits
            .retention_ms
            .map(|ms| now_ms.saturating_sub(i64::try_from(ms).unwrap_or(i64::MAX)));
        let by_bytes = limits.retention_bytes.is_some();
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
        let limits = self.limits();
        let too_big = limits.retention_bytes.is_some_and(|max| total > max);
        let too_old = limits.retention_ms.is_some_and(|ms| {
            oldest_max_ms < now_ms.saturating_sub(i64::try_from(ms).unwrap_or(i64::MAX))
        });
        too_big || too_old
    }
}
