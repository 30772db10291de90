//! Reopening a segment file found at start: [`ActiveSegment::recover`] scans it whole (the last
//! segment, which a crash may have torn, and any segment not known to be synced), and
//! [`ActiveSegment::open_sealed`] opens one that was synced whole without reading its batches,
//! finding the end of its data from its index and a walk of the batch headers after it.
//!
//! Apart from creating and writing because this is recovery's side of a segment: it decides how
//! much of a file is the log, and it must never adopt a byte that an earlier crash left behind.

use std::fs::{self, OpenOptions};
use std::io;
use std::path::Path;

use super::super::index::{self, IndexBuilder, IndexWriter};
use super::super::mmap;
use super::{
    index_file_name, log_file_name, scan, ActiveSegment, Layout, ScanResult, SegmentOptions,
    UNKNOWN_MAX_TIMESTAMP,
};
use crate::batch::{BatchHeader, HEADER_BYTES};

/// A segment recovered from disk: its reader, and its writer if it is to be the active one.
#[derive(Debug)]
pub struct Recovered {
    /// The writable segment (sealed segments are reopened the same way and just not written).
    pub segment: ActiveSegment,
    /// What the scan found.
    pub scan: ScanResult,
    /// Whether the index file had to be rebuilt.
    pub index_rebuilt: bool,
    /// Opened without a scan ([`ActiveSegment::open_sealed`]): its batches are checked later.
    pub lazily: bool,
}

impl ActiveSegment {
    /// Opens an existing segment file, scans it, and rebuilds the index if needed.
    ///
    /// With `cut_tail` (the partition's last segment, the only one a crash can tear) whatever
    /// follows the last valid batch is cut (zeroed, so a later shorter append never leaves an old
    /// batch behind that a future scan would adopt). Without it (a sealed segment, synced before
    /// the next one was created) the file's bytes are left exactly as found: damage there is
    /// corruption, which the partition refuses to serve instead of deleting.
    pub fn recover(
        directory: &Path,
        base_offset: u64,
        options: SegmentOptions,
        cut_tail: bool,
    ) -> io::Result<Recovered> {
        let path = directory.join(log_file_name(base_offset));
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let file_len = usize::try_from(file.metadata()?.len()).map_err(io::Error::other)?;
        let scan = mmap::with_file_bytes(&file, file_len, |bytes| {
            scan(bytes, base_offset, options.index_interval_bytes)
        })?;
        let mut file_len = file_len;
        if cut_tail && scan.data_end > scan.valid_bytes {
            // Cut: drop the blocks after the valid prefix; appends reserve (zeroed) space again
            // as they need it, so no old byte can be adopted by a later scan.
            file.set_len(scan.valid_bytes as u64)?;
            super::super::durable_file::sync_file(&file, &path)?;
            file_len = scan.valid_bytes;
        }
        // Files of older versions were preallocated whole, and may be longer than the setting
        // now: map what is there, or the segment size, whichever is larger.
        let map_len = (file_len as u64).max(options.segment_bytes);
        let (index, index_rebuilt) = IndexWriter::open(
            &directory.join(index_file_name(base_offset)),
            scan.index.entries.clone(),
            options.index_interval_bytes,
            scan.index.bytes_since_entry,
        )?;
        let segment = Self::from_parts(
            path,
            &file,
            Layout {
                map_len,
                reserved: file_len,
                valid_bytes: scan.valid_bytes,
                verified: scan.valid_bytes,
            },
            base_offset,
            index,
            scan.next_offset,
            scan.max_timestamp,
        )?;
        Ok(Recovered {
            segment,
            scan,
            index_rebuilt,
            lazily: false,
        })
    }

    /// Opens a segment that was synced whole (below the recovery point) without reading its
    /// batches: the end of its data is found by walking batch headers from the index's last
    /// entry, and must be exactly where the next segment, at `next_base`, begins. `Ok(None)` when
    /// that cannot be established (no or damaged index, a header out of line, another end): the
    /// caller then scans the segment whole, as before. The batches' CRCs are checked later (see
    /// [`SegmentReader::verify`](super::SegmentReader::verify)); until then reads check each
    /// batch they serve.
    pub fn open_sealed(
        directory: &Path,
        base_offset: u64,
        options: SegmentOptions,
        next_base: u64,
    ) -> io::Result<Option<Recovered>> {
        let index_path = directory.join(index_file_name(base_offset));
        let Some(entries) = fs::read(&index_path)
            .ok()
            .and_then(|bytes| index::decode(&bytes))
        else {
            return Ok(None);
        };
        let path = directory.join(log_file_name(base_offset));
        // Read and write: the segment's map is shared and writable (see `mmap`).
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let file_len = usize::try_from(file.metadata()?.len()).map_err(io::Error::other)?;
        let start = last_entry(&entries);
        let Some(walk) = mmap::with_file_bytes(&file, file_len, |bytes| {
            locate_end(
                bytes,
                base_offset,
                &entries,
                options.index_interval_bytes,
                next_base,
            )
        })?
        else {
            return Ok(None);
        };
        let map_len = (file_len as u64).max(options.segment_bytes);
        let bytes_since_entry = walk.end - start.position as usize;
        let (index, index_rebuilt) = IndexWriter::open(
            &index_path,
            entries.clone(),
            options.index_interval_bytes,
            bytes_since_entry,
        )?;
        let segment = Self::from_parts(
            path,
            &file,
            Layout {
                map_len,
                reserved: file_len,
                valid_bytes: walk.end,
                verified: 0,
            },
            base_offset,
            index,
            walk.next_offset,
            UNKNOWN_MAX_TIMESTAMP,
        )?;
        let mut index_entries = IndexBuilder::new(options.index_interval_bytes);
        index_entries.entries = entries;
        index_entries.bytes_since_entry = bytes_since_entry;
        let scan = ScanResult {
            valid_bytes: walk.end,
            next_offset: walk.next_offset,
            batches: walk.batches,
            last_epoch: walk.last_epoch,
            max_timestamp: UNKNOWN_MAX_TIMESTAMP,
            index: index_entries,
            invalid: None,
            data_end: walk.end,
        };
        Ok(Some(Recovered {
            segment,
            scan,
            index_rebuilt,
            lazily: true,
        }))
    }
}

/// The index's last entry: where a walk to the end of the data starts.
fn last_entry(entries: &[index::IndexEntry]) -> index::IndexEntry {
    entries.last().copied().unwrap_or(index::IndexEntry {
        relative_offset: 0,
        position: 0,
    })
}

/// Finds the end of a sealed segment's data without reading its batches: a walk of batch
/// headers from the index's last entry, which must end exactly at `next_base` (where the next
/// segment begins). `None` when that cannot be established: the caller scans the segment whole.
///
/// The walk reads headers only, but the last batch's epoch becomes the log's highest (recovery
/// deletes later segments whose epochs go below it, and the fence starts above it): that one
/// batch is CRC-checked, so a flipped bit there cannot pose as a new epoch.
pub(super) fn locate_end(
    bytes: &[u8],
    base_offset: u64,
    entries: &[index::IndexEntry],
    interval_bytes: usize,
    next_base: u64,
) -> Option<HeaderWalk> {
    walk_headers(bytes, base_offset, last_entry(entries), interval_bytes)
        .filter(|walk| {
            walk.last_start.is_none_or(|last| {
                crate::batch::validate(&bytes[last..walk.end], usize::MAX).is_ok()
            })
        })
        .filter(|walk| walk.next_offset == next_base)
}

/// Where a header walk ended.
pub(super) struct HeaderWalk {
    /// Position after the last batch.
    pub(super) end: usize,
    /// Offset after the last batch.
    next_offset: u64,
    /// Epoch of the last batch (the highest: epochs never decrease with offset).
    last_epoch: u64,
    /// Batches walked (from the start entry on).
    batches: u64,
    /// Where the last batch walked starts, if any.
    last_start: Option<usize>,
}

/// Walks batch headers (not their CRCs) from an index entry to the end of the data: each batch
/// must start where the previous one ends with the next offset, fit in the file, and not lower
/// the epoch. `None` if one does not: the caller scans the segment whole instead.
///
/// `None` too when the index is short: the walk applies the index's spacing rule (an entry at
/// the first batch after `interval_bytes`, as [`IndexBuilder::on_batch`] does), and an entry
/// that rule would have written but the index lacks (an index emptied or cut short by a crash
/// or by hand) means the index does not cover the segment; the whole scan then rebuilds it,
/// rather than leaving every read to walk from the segment's start.
fn walk_headers(
    bytes: &[u8],
    base_offset: u64,
    start: index::IndexEntry,
    interval_bytes: usize,
) -> Option<HeaderWalk> {
    let interval_bytes = interval_bytes.max(1);
    let mut bytes_since_entry = 0usize;
    let mut position = start.position as usize;
    let mut walk = HeaderWalk {
        end: position,
        next_offset: base_offset.checked_add(u64::from(start.relative_offset))?,
        last_epoch: 0,
        batches: 0,
        last_start: None,
    };
    if position > bytes.len() {
        return None;
    }
    while let Some(header) = BatchHeader::parse(&bytes[position..]) {
        if header.batch_length == 0 {
            break;
        }
        let length = header.batch_length as usize;
        let fits = length >= HEADER_BYTES && position + length <= bytes.len();
        if !fits || header.base_offset != walk.next_offset || header.epoch < walk.last_epoch {
            return None;
        }
        if bytes_since_entry >= interval_bytes {
            return None;
        }
        bytes_since_entry += length;
        walk.next_offset = header.next_offset();
        walk.last_epoch = header.epoch;
        walk.batches += 1;
        walk.last_start = Some(position);
        position += length;
        walk.end = position;
    }
    Some(walk)
}
