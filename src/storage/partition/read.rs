//! The read path: whole stored batches for consumers, the first offset at a timestamp, and the
//! background check of segments opened without a scan.
//!
//! Reads take no writer lock: they go through the segment list's read lock and the published
//! high watermark only, so a consumer never waits for an append. Every byte served was checked
//! (at write, at recovery, or by the read itself), which is also why the background check here
//! is only an optimisation.

use std::sync::Arc;

use bytes::Bytes;

use super::super::StorageError;
use super::Partition;

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

impl Partition {
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
    pub(super) fn read_batches(
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

    /// The first offset whose record timestamp is at or after `timestamp` (ms), among the
    /// records readers can see; `None` if none is that recent (see `timestamp_lookup`). Never
    /// below the log start: a record found in a segment's deleted part answers the log start
    /// (what Kafka answers too), where the first record a reader can still get is.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<u64>, StorageError> {
        let (high_watermark, segments) = self.visible_segments();
        let log_start = self.log_start_offset();
        let found = super::super::timestamp_lookup::first_offset_at_or_after(
            &self.name,
            &segments,
            high_watermark,
            timestamp,
        )?;
        Ok(found.map(|offset| offset.max(log_start)))
    }

    /// The first visible offset holding the largest record timestamp, with that timestamp;
    /// `None` when no record is visible (see `timestamp_lookup`).
    pub fn offset_of_max_timestamp(&self) -> Result<Option<(u64, i64)>, StorageError> {
        let (high_watermark, segments) = self.visible_segments();
        super::super::timestamp_lookup::offset_of_max_timestamp(
            &self.name,
            &segments,
            high_watermark,
        )
    }

    /// The high watermark, then the segments (oldest first): read in that order, so every
    /// record below the high watermark is in a segment listed.
    fn visible_segments(&self) -> (u64, Vec<Arc<super::super::segment::SegmentReader>>) {
        let high_watermark = self.high_watermark();
        let segments = self
            .shared
            .segments
            .read()
            .expect("segments lock poisoned")
            .clone();
        (high_watermark, segments)
    }
}
