//! One segment: a memory-mapped file of whole batches, reserved on disk in chunks as it fills
//! (see [`super::mmap`]), named by its base offset, with its sparse index beside it.
//!
//! The writer side ([`ActiveSegment`]) copies validated batches at the tail; the reader side
//! ([`SegmentReader`]) serves zero-copy slices of the published prefix. [`ActiveSegment::recover`] finds the
//! valid prefix of a segment file after a crash by walking and CRC-checking every batch.
//! [`ActiveSegment::open_sealed`] opens a segment that was synced whole without reading it: it
//! finds the end of the data from the index's last entry, and the batches are checked later
//! (on first read, as every read of unchecked bytes is, or by [`SegmentReader::verify`] in the
//! background), so a restart does not read the data it keeps. Older sealed segments are not
//! even opened at start: [`SegmentReader::on_demand`] knows only their base offset and where the
//! next segment begins, and opens them ([`on_demand`]) the first time a read, a timestamp
//! lookup, retention or the background check needs them, with the same checks and the same
//! corruption reports; a bounded cache ([`super::open_segments`]) closes the least recently used
//! again.
//!
//! Each job has its own child module: `files` (the two files' names and their removal), `scan`
//! (the recovery scan, the one definition of valid data), `reader` (the read side's state and
//! its map), `read` (serving batches with their checks and corruption reports), `active` (the
//! write side: creating, appending, finishing), `reopen` (opening files found at start: a whole
//! scan, or the header walk of a sealed segment) and `on_demand`.

mod active;
mod files;
mod on_demand;
mod read;
mod reader;
mod reopen;
mod scan;

pub use active::ActiveSegment;
pub use files::{delete_files, index_file_name, log_file_name, parse_log_file_name};
pub use read::{ReadCorruption, SegmentReadError};
pub use reader::SegmentReader;
pub use reopen::Recovered;
pub use scan::{scan, ScanResult};

use active::Layout;
use reader::{Contents, Mapped, UNKNOWN_MAX_TIMESTAMP};
use reopen::locate_end;

/// Options a segment is opened with.
#[derive(Debug, Clone, Copy)]
pub struct SegmentOptions {
    /// Size to map (disk is reserved in chunks as the segment fills).
    pub segment_bytes: u64,
    /// Index spacing.
    pub index_interval_bytes: usize,
}
