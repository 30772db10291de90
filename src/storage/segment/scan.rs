//! The recovery scan: walking a segment's bytes batch by batch from position 0, with every check
//! (length, CRC, structure, offsets that continue, epochs that never go down), to find where the
//! valid prefix ends and why.
//!
//! It is the one definition of "valid data" in a segment: recovery, the background check, the
//! first use of a damaged sealed segment and the fuzzers (through `scan_segment_bytes`) all use
//! it, so they can never disagree on where a log ends.

use super::super::index::IndexBuilder;
use crate::batch::{self, BatchHeader, HEADER_BYTES};

/// What a recovery scan of one segment found.
#[derive(Debug)]
pub struct ScanResult {
    /// Bytes of valid batches from the start.
    pub valid_bytes: usize,
    /// Offset after the last valid batch.
    pub next_offset: u64,
    /// Valid batches.
    pub batches: u64,
    /// Epoch of the last valid batch (epochs never decrease with offset), 0 if none.
    pub last_epoch: u64,
    /// Largest record timestamp, `i64::MIN` if none.
    pub max_timestamp: i64,
    /// Index entries for the valid part.
    pub(crate) index: IndexBuilder,
    /// Why the scan stopped before the end of the data, if it did: (position, reason).
    pub invalid: Option<(usize, String)>,
    /// Position after the last non-zero byte of the file (how far garbage may reach).
    pub data_end: usize,
}

/// Walks `bytes` batch by batch from position 0, checking each batch's length, CRC, structure,
/// base offset (must continue the sequence) and epoch (must not decrease). Stops at the first
/// zero header (end of data) or invalid batch.
pub fn scan(bytes: &[u8], base_offset: u64, index_interval_bytes: usize) -> ScanResult {
    let mut result = ScanResult {
        valid_bytes: 0,
        next_offset: base_offset,
        batches: 0,
        last_epoch: 0,
        max_timestamp: i64::MIN,
        index: IndexBuilder::new(index_interval_bytes),
        invalid: None,
        data_end: data_end(bytes),
    };
    let mut position = 0;
    while position < result.data_end {
        let Some(header) = BatchHeader::parse(&bytes[position..]) else {
            result.invalid = Some((position, "truncated batch header".into()));
            break;
        };
        let length = header.batch_length as usize;
        if length < HEADER_BYTES || position + length > bytes.len() {
            result.invalid = Some((
                position,
                format!("batch length {length} runs past the segment"),
            ));
            break;
        }
        let batch_bytes = &bytes[position..position + length];
        if let Err(error) = batch::validate(batch_bytes, usize::MAX) {
            result.invalid = Some((position, error.to_string()));
            break;
        }
        if header.base_offset != result.next_offset {
            result.invalid = Some((
                position,
                format!(
                    "base offset {} where {} was expected",
                    header.base_offset, result.next_offset
                ),
            ));
            break;
        }
        if header.epoch < result.last_epoch {
            result.invalid = Some((
                position,
                format!("epoch {} after epoch {}", header.epoch, result.last_epoch),
            ));
            break;
        }
        let relative = (header.base_offset - base_offset) as u32;
        result.index.on_batch(relative, position, length);
        result.last_epoch = header.epoch;
        result.max_timestamp = result.max_timestamp.max(header.max_timestamp);
        result.next_offset = header.next_offset();
        result.batches += 1;
        position += length;
        result.valid_bytes = position;
    }
    result
}

/// Position after the last non-zero byte of `bytes` (0 if all are zero). Reads the tail a block
/// at a time with a branch-free OR per block (which the compiler vectorizes): a zero tail of a
/// reserved chunk, or of a segment preallocated whole by an older version, costs a memory read
/// rather than a byte-by-byte search.
pub fn data_end(bytes: &[u8]) -> usize {
    const BLOCK: usize = 4096;
    let mut end = bytes.len();
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let block = &bytes[start..end];
        if block.iter().fold(0u8, |acc, byte| acc | byte) != 0 {
            return start + block.iter().rposition(|b| *b != 0).map_or(0, |p| p + 1);
        }
        end = start;
    }
    0
}
