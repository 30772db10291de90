//! Finding the first offset whose record timestamp is at or after a given time, for consumers
//! that start "from 09:00" rather than from an offset.
//!
//! Timestamps are set by producers and need not grow with offsets, so the answer is defined as
//! the *smallest* offset whose record timestamp is `>= T`, and found exactly, with bounded work,
//! from what the log already keeps: every segment knows its largest record timestamp, and every
//! batch header its first and largest. A segment whose largest timestamp is below `T` holds no
//! answer and is skipped without reading it; in the first segment that may hold one, only batch
//! headers are walked (48 bytes each) until a batch whose largest timestamp reaches `T`; that one
//! batch is validated (CRC) and decoded to pick the record. So the work is one comparison per
//! segment, plus the headers of one segment (at most `segment_bytes / 48`), plus one batch —
//! never a scan of the whole log. Only visible records (below the high watermark) are answers,
//! and a corrupt batch on the way is an error, never a guess.

use std::sync::Arc;

use bytes::Bytes;

use super::segment::SegmentReader;
use super::StorageError;
use crate::batch::{self, BatchHeader, HEADER_BYTES};

/// The first offset below `high_watermark` whose record timestamp is `>= timestamp` (ms), or
/// `None` if no visible record is that recent. `segments` are the partition's, oldest first;
/// `partition` names it in errors.
pub(super) fn first_offset_at_or_after(
    partition: &str,
    segments: &[Arc<SegmentReader>],
    high_watermark: u64,
    timestamp: i64,
) -> Result<Option<u64>, StorageError> {
    for segment in segments {
        if segment.base_offset() >= high_watermark {
            break;
        }
        // The segment's largest timestamp covers every record written to it (visible or not),
        // so below `timestamp` it cannot hold the answer.
        if segment.max_timestamp() < timestamp {
            continue;
        }
        if let Some(offset) = search_segment(partition, segment, high_watermark, timestamp)? {
            return Ok(Some(offset));
        }
    }
    Ok(None)
}

/// The first offset below `high_watermark` holding the largest record timestamp of the visible
/// records, with that timestamp (Kafka's ListOffsets "max timestamp", KIP-734), or `None` if no
/// record is visible. A segment wholly below the high watermark answers with its largest
/// timestamp at once; only a segment the high watermark cuts (the active one), or one whose
/// largest timestamp is not known yet, has its batch headers walked. Then the first record at
/// that time is found as [`first_offset_at_or_after`] does: ties go to the lowest offset.
pub(super) fn offset_of_max_timestamp(
    partition: &str,
    segments: &[Arc<SegmentReader>],
    high_watermark: u64,
) -> Result<Option<(u64, i64)>, StorageError> {
    let mut largest: Option<i64> = None;
    for (index, segment) in segments.iter().enumerate() {
        if segment.base_offset() >= high_watermark {
            break;
        }
        let wholly_visible = segments
            .get(index + 1)
            .is_some_and(|next| next.base_offset() <= high_watermark);
        let segment_largest = if wholly_visible && segment.max_timestamp_known() {
            (segment.max_timestamp() != i64::MIN).then(|| segment.max_timestamp())
        } else {
            visible_max_timestamp(partition, segment, high_watermark)?
        };
        largest = largest.max(segment_largest);
    }
    let Some(largest) = largest else {
        return Ok(None);
    };
    Ok(
        first_offset_at_or_after(partition, segments, high_watermark, largest)?
            .map(|offset| (offset, largest)),
    )
}

/// The largest batch-header timestamp of one segment's batches below `high_watermark`, walking
/// only the 48-byte headers (a batch's `max_timestamp` covers its records).
fn visible_max_timestamp(
    partition: &str,
    segment: &SegmentReader,
    high_watermark: u64,
) -> Result<Option<i64>, StorageError> {
    let mut largest = None;
    walk_visible_batches(partition, segment, high_watermark, |header, _, _| {
        largest = largest.max(Some(header.max_timestamp));
        Ok(None::<()>)
    })?;
    Ok(largest)
}

/// Reads one batch's bytes out of the segment's map, on demand.
type BatchBytes<'a> = dyn Fn() -> Result<Bytes, StorageError> + 'a;

/// Calls `visit` with each batch header of `segment` below `high_watermark`, in order, its byte
/// position and a reader of the batch's bytes (its CRC not checked: `visit` decodes what it needs), until
/// `visit` returns `Some`. A header that cannot be read or a length past the data is
/// `Corrupt`, never skipped.
fn walk_visible_batches<T>(
    partition: &str,
    segment: &SegmentReader,
    high_watermark: u64,
    mut visit: impl FnMut(&BatchHeader, usize, &BatchBytes<'_>) -> Result<Option<T>, StorageError>,
) -> Result<Option<T>, StorageError> {
    let map = segment
        .open_map()
        .map_err(|error| error.into_storage_error(partition))?;
    let visible = map.visible();
    let mut position = 0usize;
    while position + HEADER_BYTES <= visible {
        let corrupt = |offset: u64, reason: String| StorageError::Corrupt {
            partition: partition.to_owned(),
            segment: segment.path().display().to_string(),
            position: position as u64,
            offset,
            reason,
        };
        let header = map
            .bytes(position, position + HEADER_BYTES)
            .and_then(BatchHeader::parse)
            .ok_or_else(|| corrupt(segment.base_offset(), "unreadable batch header".into()))?;
        let length = header.batch_length as usize;
        if header.base_offset >= high_watermark {
            return Ok(None);
        }
        if length < HEADER_BYTES || position + length > visible {
            return Err(corrupt(
                header.base_offset,
                format!("batch length {length} runs past the data"),
            ));
        }
        let bytes = || {
            map.slice(position, position + length)
                .ok_or_else(|| corrupt(header.base_offset, "batch not mapped".into()))
        };
        if let Some(found) = visit(&header, position, &bytes)? {
            return Ok(Some(found));
        }
        position += length;
    }
    Ok(None)
}

/// Walks one segment's batch headers to the first batch that reaches `timestamp`, then picks
/// the first such record inside it.
fn search_segment(
    partition: &str,
    segment: &SegmentReader,
    high_watermark: u64,
    timestamp: i64,
) -> Result<Option<u64>, StorageError> {
    walk_visible_batches(
        partition,
        segment,
        high_watermark,
        |header, position, bytes| {
            if header.max_timestamp < timestamp {
                return Ok(None);
            }
            let records =
                batch::decode_batch(&bytes()?).map_err(|error| StorageError::Corrupt {
                    partition: partition.to_owned(),
                    segment: segment.path().display().to_string(),
                    position: position as u64,
                    offset: header.base_offset,
                    reason: error.to_string(),
                })?;
            Ok(records
                .iter()
                .take_while(|record| record.offset < high_watermark)
                .find(|record| record.timestamp >= timestamp)
                .map(|record| record.offset))
        },
    )
}
