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

mod on_demand;

use std::borrow::Cow;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use super::index::{self, IndexBuilder, IndexWriter, SharedEntries};
use super::mmap::{self, MapReader, MapWriter};
use super::StorageError;
use crate::batch::{self, BatchHeader, HEADER_BYTES};
use on_demand::OnDemand;

/// Digits in a segment file name: `u64::MAX` has 20.
const NAME_DIGITS: usize = 20;

/// `00000000000000000042.log` for base offset 42.
pub fn log_file_name(base_offset: u64) -> String {
    format!("{base_offset:0width$}.log", width = NAME_DIGITS)
}

/// `00000000000000000042.index` for base offset 42.
pub fn index_file_name(base_offset: u64) -> String {
    format!("{base_offset:0width$}.index", width = NAME_DIGITS)
}

/// The base offset named by a segment file, if `name` is one.
pub fn parse_log_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    (digits.len() == NAME_DIGITS && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

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

/// `max_timestamp` of a segment opened without reading its batches, until verification finds
/// the real one: the largest value, so that retention by age never deletes a segment whose age
/// it does not know, and timestamp lookups never skip it.
const UNKNOWN_MAX_TIMESTAMP: i64 = i64::MAX;

/// The read side of a segment, shared by fetches.
#[derive(Debug)]
pub struct SegmentReader {
    base_offset: u64,
    path: PathBuf,
    contents: Contents,
    max_timestamp: AtomicI64,
    /// Bytes `[0, verified)` were checked (CRC) by this process: written after validation, or
    /// scanned at recovery. Reads re-check anything beyond.
    verified: AtomicUsize,
    /// Retention removed the segment: nothing is gained by syncing it any more.
    deleted: AtomicBool,
    /// The file was shortened (a reused file's old tail cut, see `spare`) and the new length
    /// is not synced yet: sealing must sync the file whole, not only its data.
    length_unsynced: AtomicBool,
    /// The first corrupt batch found by a read or a check of unchecked bytes (offset, position,
    /// reason): offsets from it to the end of the segment are refused from then on, as recovery
    /// refuses the damaged range of a segment it scanned.
    corrupt: std::sync::Mutex<Option<(u64, usize, String)>>,
}

/// Where a segment's bytes and index come from.
#[derive(Debug)]
enum Contents {
    /// Mapped for the life of the segment: the active segment (the map is shared with its
    /// writer), and every segment recovery opened or that was written by this process.
    Resident(Mapped),
    /// A sealed segment below the recovery point, opened on first use and closed again by the
    /// cache of open sealed segments.
    OnDemand(Arc<OnDemand>),
}

/// A segment's map and index, as a read needs them.
#[derive(Debug, Clone)]
struct Mapped {
    map: MapReader,
    index: SharedEntries,
}

/// Why a segment could not be read.
#[derive(Debug)]
pub enum SegmentReadError {
    /// A batch (or the segment's shape) failed its checks: refused, never served.
    Corrupt(ReadCorruption),
    /// A sealed segment could not be opened on first use (descriptors, a missing file, ...).
    Open {
        /// File of the segment.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

impl From<ReadCorruption> for SegmentReadError {
    fn from(corruption: ReadCorruption) -> Self {
        Self::Corrupt(corruption)
    }
}

impl SegmentReadError {
    /// The storage error for partition `partition` (`topic/partition`), logged as it is made: a
    /// corrupt batch as an error (it is refused until the file is restored), a failed open as a
    /// warning (it may pass: descriptors free up).
    pub fn into_storage_error(self, partition: &str) -> StorageError {
        match self {
            Self::Corrupt(corruption) => {
                tracing::error!(partition, segment = %corruption.path.display(), position = corruption.position, reason = %corruption.reason, "corrupt batch: not served");
                StorageError::Corrupt {
                    partition: partition.to_owned(),
                    segment: corruption.path.display().to_string(),
                    position: corruption.position as u64,
                    offset: corruption.offset,
                    reason: corruption.reason,
                }
            }
            Self::Open { path, source } => {
                tracing::warn!(partition, segment = %path.display(), error = %source, "could not open a sealed segment");
                StorageError::Io {
                    context: format!("open sealed segment {}", path.display()),
                    source,
                }
            }
        }
    }

    /// The segment file concerned.
    pub fn path(&self) -> &Path {
        match self {
            Self::Corrupt(corruption) => &corruption.path,
            Self::Open { path, .. } => path,
        }
    }
}

impl std::fmt::Display for SegmentReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Corrupt(corruption) => write!(
                f,
                "corrupt batch at byte {} (offset {}): {}",
                corruption.position, corruption.offset, corruption.reason
            ),
            Self::Open { source, .. } => write!(f, "could not open the segment: {source}"),
        }
    }
}

/// A corrupt batch found while reading.
#[derive(Debug)]
pub struct ReadCorruption {
    /// File of the segment.
    pub path: PathBuf,
    /// Byte position of the bad batch.
    pub position: usize,
    /// Offset the read was looking for.
    pub offset: u64,
    /// What was wrong.
    pub reason: String,
}

impl SegmentReader {
    /// A sealed segment of `directory` (below the recovery point, so synced whole) that is not
    /// opened now: only its base offset and the next segment's, `next_base`, are known. It is
    /// opened on first use (see [`on_demand`]); until then its size and largest timestamp are
    /// unknown and its batches unchecked.
    pub fn on_demand(
        directory: &Path,
        base_offset: u64,
        options: SegmentOptions,
        next_base: u64,
    ) -> Arc<Self> {
        Arc::new(Self {
            base_offset,
            path: directory.join(log_file_name(base_offset)),
            contents: Contents::OnDemand(Arc::new(OnDemand::new(
                directory.join(index_file_name(base_offset)),
                options,
                next_base,
            ))),
            max_timestamp: AtomicI64::new(UNKNOWN_MAX_TIMESTAMP),
            verified: AtomicUsize::new(0),
            deleted: AtomicBool::new(false),
            length_unsynced: AtomicBool::new(false),
            corrupt: std::sync::Mutex::new(None),
        })
    }

    /// Offset of the segment's first record.
    pub fn base_offset(&self) -> u64 {
        self.base_offset
    }

    /// Path of the `.log` file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes written to the segment so far. For a sealed segment opened on demand: its data's
    /// length once it was opened once ([`SegmentReader::learn_size`]), 0 before.
    pub fn written_bytes(&self) -> usize {
        match &self.contents {
            Contents::Resident(mapped) => mapped.map.written(),
            Contents::OnDemand(on_demand) => on_demand.data_bytes().unwrap_or(0),
        }
    }

    /// Whether [`SegmentReader::written_bytes`] is the real length (always, except for a sealed
    /// segment opened on demand that was never opened).
    pub fn size_known(&self) -> bool {
        match &self.contents {
            Contents::Resident(_) => true,
            Contents::OnDemand(on_demand) => on_demand.data_bytes().is_some(),
        }
    }

    /// Finds where the data of a segment opened on demand ends, if not known yet (opening it
    /// for a moment: the end of the data, from the index, checked as at a restart), without
    /// keeping it open.
    pub fn learn_size(&self) -> Result<(), SegmentReadError> {
        if self.size_known() {
            return Ok(());
        }
        self.mapped(false).map(drop)
    }

    /// Whether the largest timestamp is known ([`SegmentReader::max_timestamp`] is a
    /// placeholder, the largest value, until the batches are checked).
    pub fn max_timestamp_known(&self) -> bool {
        self.max_timestamp() != UNKNOWN_MAX_TIMESTAMP
    }

    /// Whether the segment is opened on demand and open now.
    #[cfg(all(test, not(fencelog_loom)))]
    pub(crate) fn is_open_on_demand(&self) -> bool {
        match &self.contents {
            Contents::Resident(_) => false,
            Contents::OnDemand(on_demand) => on_demand.is_mapped(),
        }
    }

    /// The segment's map and index: at hand for a resident segment, opened if needed for one
    /// opened on demand (kept open when `keep`, under the cache's bound).
    fn mapped(&self, keep: bool) -> Result<Cow<'_, Mapped>, SegmentReadError> {
        match &self.contents {
            Contents::Resident(mapped) => Ok(Cow::Borrowed(mapped)),
            Contents::OnDemand(on_demand) => on_demand.mapped(self, keep).map(Cow::Owned),
        }
    }

    /// Where the offsets this segment may serve end: the next segment's base for one opened on
    /// demand (its data must end there; past it a read stops), unbounded otherwise.
    fn offset_limit(&self) -> u64 {
        match &self.contents {
            Contents::Resident(_) => u64::MAX,
            Contents::OnDemand(on_demand) => on_demand.next_base(),
        }
    }

    /// The map of the segment, opened if it is opened on demand and kept open (under the
    /// cache's bound), for walks over its bytes (timestamp lookups).
    pub fn open_map(&self) -> Result<MapReader, SegmentReadError> {
        Ok(self.mapped(true)?.map.clone())
    }

    /// Largest record timestamp in the segment (ms), `i64::MIN` if empty.
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp.load(Ordering::Acquire)
    }

    /// Marks the segment as removed by retention (before its files are deleted).
    pub fn mark_deleted(&self) {
        self.deleted.store(true, Ordering::Release);
    }

    /// Whether retention removed the segment.
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// Syncs a full segment whole for its seal: the data of `[0, written)`, and the file's length
    /// too when a reused file's old tail was cut (see `spare`).
    pub fn sync_sealed(&self) -> io::Result<()> {
        self.map().sync_range(0, self.written_bytes())?;
        if self.length_unsynced.load(Ordering::Acquire) {
            // Retention may have deleted it meanwhile: then nothing will ever read it again.
            super::durable_file::sync_file_if_present(&self.path)?;
            self.length_unsynced.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// fsyncs the segment's index file by name (the writer that had it open is gone by the
    /// seal); one retention deleted needs nothing.
    pub fn sync_index_file(&self) -> io::Result<()> {
        super::durable_file::sync_file_if_present(
            &self.path.with_file_name(index_file_name(self.base_offset)),
        )
    }

    /// The segment's file, when retention deleted it and it can be reused as a spare: this was the
    /// last reference to the segment and nobody holds its map (no fetch in flight has a slice
    /// of it, so none can see its bytes change). Segments opened on demand are not reused.
    pub fn into_reusable_file(self: Arc<Self>) -> Option<PathBuf> {
        let segment = Arc::into_inner(self)?;
        match &segment.contents {
            Contents::Resident(mapped) if mapped.map.is_unshared() => Some(segment.path.clone()),
            _ => None,
        }
    }

    /// The map, for syncing and publishing: of a resident segment (the active one, and those
    /// recovery opened or this process wrote), which are the only ones ever written or synced.
    ///
    /// # Panics
    ///
    /// For a sealed segment opened on demand (use [`SegmentReader::open_map`]).
    pub fn map(&self) -> &MapReader {
        match &self.contents {
            Contents::Resident(mapped) => &mapped.map,
            Contents::OnDemand(_) => {
                panic!("a sealed segment opened on demand is never written or synced")
            }
        }
    }

    /// Publishes every written byte of a resident segment (so walks over its map see what was
    /// written but not synced yet); nothing to do for one opened on demand (sealed, synced whole).
    pub fn publish_written(&self) {
        if let Contents::Resident(mapped) = &self.contents {
            mapped.map.publish(mapped.map.written());
        }
    }

    /// Whole batches from the one containing `offset`, up to `max_bytes` (at least one batch, so
    /// a consumer always progresses), stopping before any batch at or past `high_watermark`.
    pub fn read(
        &self,
        offset: u64,
        max_bytes: usize,
        high_watermark: u64,
    ) -> Result<Vec<Bytes>, SegmentReadError> {
        self.refuse_if_corrupt(offset)?;
        let mapped = self.mapped(true)?;
        // Opening may have found the damage.
        self.refuse_if_corrupt(offset)?;
        let Mapped { map, index } = mapped.as_ref();
        let offset_limit = self.offset_limit();
        let relative = u32::try_from(offset.saturating_sub(self.base_offset)).unwrap_or(u32::MAX);
        let mut position = index::lookup(index, relative);
        let visible = map.visible();
        let mut batches = Vec::new();
        let mut total = 0usize;
        while position + HEADER_BYTES <= visible {
            let corrupt = |reason: String| ReadCorruption {
                path: self.path.clone(),
                position,
                offset,
                reason,
            };
            let header_bytes = map
                .bytes(position, position + HEADER_BYTES)
                .expect("visible");
            let header = BatchHeader::parse(header_bytes).expect("header length");
            let length = header.batch_length as usize;
            if header.base_offset >= high_watermark || header.base_offset >= offset_limit {
                break;
            }
            if length < HEADER_BYTES || position + length > visible {
                return Err(corrupt(format!("batch length {length} runs past the data")).into());
            }
            if header.next_offset() <= offset {
                position += length;
                continue;
            }
            if !batches.is_empty() && total + length > max_bytes {
                break;
            }
            let end = position + length;
            if end > self.verified.load(Ordering::Acquire) {
                let bytes = map.bytes(position, end).expect("visible");
                if let Err(error) = batch::validate(bytes, usize::MAX) {
                    self.record_corruption(header.base_offset, position, error.to_string());
                    // The batches before it are served; the next read starts at the bad one.
                    if !batches.is_empty() {
                        break;
                    }
                    return Err(corrupt(error.to_string()).into());
                }
                if position <= self.verified.load(Ordering::Acquire) {
                    self.verified.fetch_max(end, Ordering::AcqRel);
                }
            }
            batches.push(map.slice(position, end).expect("visible"));
            total += length;
            position = end;
        }
        Ok(batches)
    }
}

impl SegmentReader {
    /// Where the first corrupt batch found after open is, if one was.
    fn corrupt_from(&self) -> Option<(u64, usize, String)> {
        self.corrupt.lock().expect("corrupt lock poisoned").clone()
    }

    /// Refuses `offset` when it is at or after the first corrupt batch found: as recovery
    /// refuses a damaged range, up to the next segment.
    fn refuse_if_corrupt(&self, offset: u64) -> Result<(), ReadCorruption> {
        let Some((from, position, reason)) =
            self.corrupt_from().filter(|(from, ..)| offset >= *from)
        else {
            return Ok(());
        };
        let reason = match self.offset_limit() {
            u64::MAX => {
                format!("{reason}; offsets from {from} to the end of the segment are unreadable")
            }
            next => format!(
                "{reason}; offsets {from}..{next} are unreadable, the next readable offset is {next}"
            ),
        };
        Err(ReadCorruption {
            path: self.path.clone(),
            position,
            offset,
            reason,
        })
    }

    /// Records a corrupt batch at `offset` (the lowest found is kept).
    fn record_corruption(&self, offset: u64, position: usize, reason: String) {
        let mut corrupt = self.corrupt.lock().expect("corrupt lock poisoned");
        if corrupt.as_ref().is_none_or(|(known, ..)| offset < *known) {
            *corrupt = Some((offset, position, reason));
        }
    }

    /// Whether every published batch was checked by this process (written after validation, or
    /// scanned at open or by [`SegmentReader::verify`]).
    pub fn is_verified(&self) -> bool {
        let checked = self.verified.load(Ordering::Acquire);
        match &self.contents {
            Contents::Resident(mapped) => checked >= mapped.map.visible(),
            Contents::OnDemand(on_demand) => on_demand
                .data_bytes()
                .is_some_and(|data_bytes| checked >= data_bytes),
        }
    }

    /// Checks every published batch not yet checked (length, CRC, structure, offsets, epochs),
    /// as the recovery scan does, and learns the segment's largest timestamp. For segments
    /// opened without a scan ([`ActiveSegment::open_sealed`]); reads check unverified bytes
    /// themselves, so this only moves the cost off the first reads and lets retention by age
    /// see the segment's real age. A corrupt batch is reported, and stays refused on read.
    ///
    /// A sealed segment opened on demand is opened for the check and closed again after it,
    /// unless it was open already (the check does not push hot segments out of the cache).
    pub fn verify(&self) -> Result<(), SegmentReadError> {
        if self.is_verified() {
            return Ok(());
        }
        let mapped = self.mapped(false)?;
        if self.is_verified() {
            // Opening it scanned it whole.
            return Ok(());
        }
        let visible = mapped.map.visible();
        let bytes = mapped.map.bytes(0, visible).expect("visible");
        let scan = scan(bytes, self.base_offset, usize::MAX);
        if let Some((position, reason)) = scan.invalid {
            self.record_corruption(scan.next_offset, position, reason.clone());
            return Err(ReadCorruption {
                path: self.path.clone(),
                position,
                offset: scan.next_offset,
                reason,
            }
            .into());
        }
        self.verified.fetch_max(scan.valid_bytes, Ordering::AcqRel);
        // Only the placeholder is replaced: a known timestamp is never lowered.
        let _ = self.max_timestamp.compare_exchange(
            UNKNOWN_MAX_TIMESTAMP,
            scan.max_timestamp,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        Ok(())
    }
}

/// The write side of the partition's newest segment.
#[derive(Debug)]
pub struct ActiveSegment {
    reader: std::sync::Arc<SegmentReader>,
    map: MapWriter,
    index: IndexWriter,
    next_offset: u64,
    /// The file is a reused one (see `spare`): past what was written it still holds the old
    /// segment's bytes, which [`ActiveSegment::finish_writing`] cuts.
    old_tail: bool,
    /// The reused file was empty when taken (`SegmentFileReuse::Emptied`): past what was
    /// written only the reservation's zeros follow, unless a crash lost the emptying.
    emptied: bool,
}

/// Options a segment is opened with.
#[derive(Debug, Clone, Copy)]
pub struct SegmentOptions {
    /// Size to map (disk is reserved in chunks as the segment fills).
    pub segment_bytes: u64,
    /// Index spacing.
    pub index_interval_bytes: usize,
}

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
    /// Creates a new, empty segment file at `base_offset` in `directory`, mapped; it reserves
    /// disk as it fills. The caller fsyncs the directory.
    pub fn create(directory: &Path, base_offset: u64, options: SegmentOptions) -> io::Result<Self> {
        let path = directory.join(log_file_name(base_offset));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        let finish = || Self::empty(directory, path.clone(), &file, base_offset, options, 0);
        finish().inspect_err(|_| {
            // Leave nothing half-made behind: a later roll must be able to create this file
            // again once the cause (disk full, descriptors) is gone.
            if let Err(cleanup) = delete_files(directory, base_offset) {
                tracing::warn!(segment = %path.display(), error = %cleanup, "could not remove a half-created segment");
            }
        })
    }

    /// A segment with nothing written yet in `file` (at `path`), `[0, reserved)` of which is
    /// allocated, and a new empty index.
    fn empty(
        directory: &Path,
        path: PathBuf,
        file: &File,
        base_offset: u64,
        options: SegmentOptions,
        reserved: usize,
    ) -> io::Result<Self> {
        let (index, _) = IndexWriter::open(
            &directory.join(index_file_name(base_offset)),
            Vec::new(),
            options.index_interval_bytes,
            0,
        )?;
        Self::from_parts(
            path,
            file,
            Layout {
                map_len: options.segment_bytes,
                reserved,
                valid_bytes: 0,
                verified: 0,
            },
            base_offset,
            index,
            base_offset,
            i64::MIN,
        )
    }

    /// Creates the segment at `base_offset` in `directory` from a spare (a segment retention
    /// deleted; see `spare`): its files renamed into place, the log overwritten from position 0
    /// (a whole file's blocks and cached pages reused), the emptied index taken as the new
    /// segment's empty one. A file's old bytes past the write position are never readable, and
    /// [`ActiveSegment::finish_writing`] cuts them. The caller fsyncs the directory.
    pub fn create_reusing(
        directory: &Path,
        base_offset: u64,
        options: SegmentOptions,
        spare: &super::spare::Spare,
    ) -> io::Result<Self> {
        let path = directory.join(log_file_name(base_offset));
        let reused = || {
            if spare.file_len() > options.segment_bytes {
                return Err(io::Error::other("spare file longer than a segment"));
            }
            fs::rename(spare.path(), &path)?;
            if let Some(index) = spare.index_path() {
                fs::rename(index, directory.join(index_file_name(base_offset)))?;
            }
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            let reserved = usize::try_from(spare.file_len()).map_err(io::Error::other)?;
            let mut segment = Self::empty(
                directory,
                path.clone(),
                &file,
                base_offset,
                options,
                reserved,
            )?;
            segment.old_tail = true;
            segment.emptied = spare.file_len() == 0;
            Ok(segment)
        };
        reused().inspect_err(|_| {
            super::spare::discard(spare);
            if let Err(cleanup) = delete_files(directory, base_offset) {
                tracing::warn!(segment = %path.display(), error = %cleanup, "could not remove a half-created segment");
            }
        })
    }

    /// The partition is done writing this segment (it rolled, or is closing): a reused file's old
    /// bytes past what was written are cut, so that nothing but zeros or the end of the file ever
    /// follows the data (what recovery expects of a sealed segment). With `sync` the new length
    /// is made durable now (a flush policy that promises durability must never leave an old
    /// tail, after a crash, in a segment followed by acknowledged data); without it the seal
    /// syncs the file whole before the recovery point passes the segment.
    pub fn finish_writing(&mut self, sync: bool) -> io::Result<()> {
        if !self.old_tail {
            return Ok(());
        }
        if self.emptied && !sync {
            // Nothing old to cut: the page cache holds the data, then the reservation's zeros,
            // so a process crash finds no stale tail. An OS crash that lost the emptying is
            // guarded only by a synced cut, which `!sync` does not promise; the seal's
            // whole-file sync is what makes the segment's length durable. Skipping the cut
            // keeps the freeing of the reservation's blocks (a synchronous discard on a file
            // system mounted with `discard`) out of the roll, which runs under the append lock.
            self.reader.length_unsynced.store(true, Ordering::Release);
            self.old_tail = false;
            return Ok(());
        }
        let file = self.map.truncate_to_written()?;
        if sync {
            file.sync_all()?;
        } else {
            self.reader.length_unsynced.store(true, Ordering::Release);
        }
        self.old_tail = false;
        Ok(())
    }

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
            file.sync_all()?;
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
    /// [`SegmentReader::verify`]); until then reads check each batch they serve.
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

    fn from_parts(
        path: PathBuf,
        file: &File,
        layout: Layout,
        base_offset: u64,
        index: IndexWriter,
        next_offset: u64,
        max_timestamp: i64,
    ) -> io::Result<Self> {
        let map_len = usize::try_from(layout.map_len).map_err(io::Error::other)?;
        let map = MapWriter::map(file, &path, map_len, layout.reserved, layout.valid_bytes)?;
        let reader = std::sync::Arc::new(SegmentReader {
            base_offset,
            path,
            contents: Contents::Resident(Mapped {
                map: map.reader(),
                index: index.shared(),
            }),
            max_timestamp: AtomicI64::new(max_timestamp),
            verified: AtomicUsize::new(layout.verified),
            deleted: AtomicBool::new(false),
            length_unsynced: AtomicBool::new(false),
            corrupt: std::sync::Mutex::new(None),
        });
        Ok(Self {
            reader,
            map,
            index,
            next_offset,
            old_tail: false,
            emptied: false,
        })
    }

    /// The reader handle of this segment.
    pub fn reader(&self) -> &std::sync::Arc<SegmentReader> {
        &self.reader
    }

    /// Offset the next batch gets.
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Writes a validated batch at the tail with the broker's base offset in place of the
    /// producer's (the first 8 bytes, outside the CRC: written from a separate buffer, so the
    /// batch is never copied to stamp it). `Ok(None)` if it does not fit (the caller rolls):
    /// either the bytes, or the offsets (index entries hold offsets relative to the segment's
    /// base as `u32`). Returns the end position after the batch. On an error nothing was
    /// appended.
    pub fn append(
        &mut self,
        batch_bytes: &[u8],
        header: &BatchHeader,
    ) -> io::Result<Option<usize>> {
        let base_offset = self.next_offset;
        let Some(relative) = u32::try_from(base_offset - self.reader.base_offset)
            .ok()
            .filter(|relative| relative.checked_add(header.record_count).is_some())
        else {
            return Ok(None);
        };
        let stamp = base_offset.to_be_bytes();
        let Some(position) = self.map.append(&stamp, &batch_bytes[stamp.len()..])? else {
            return Ok(None);
        };
        // The copy was validated before: count it as verified so reads skip the CRC.
        self.reader
            .verified
            .fetch_max(position + batch_bytes.len(), Ordering::AcqRel);
        self.reader
            .max_timestamp
            .fetch_max(header.max_timestamp, Ordering::AcqRel);
        self.next_offset += u64::from(header.record_count);
        self.index.on_append(relative, position, batch_bytes.len());
        Ok(Some(position + batch_bytes.len()))
    }

    /// Syncs the index file (the log's range is synced through the reader's map).
    pub fn sync_index(&self) -> io::Result<()> {
        self.index.sync()
    }
}

/// How a segment's file and map are laid out when it is opened.
struct Layout {
    /// Bytes to map (at least the file's length).
    map_len: u64,
    /// The file's length: bytes already reserved on disk.
    reserved: usize,
    /// Bytes of whole batches from the start.
    valid_bytes: usize,
    /// Bytes already checked by this process (reads check the rest).
    verified: usize,
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
fn locate_end(
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
struct HeaderWalk {
    /// Position after the last batch.
    end: usize,
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

/// Removes a segment's files (retention, or a cut during recovery).
pub fn delete_files(directory: &Path, base_offset: u64) -> io::Result<()> {
    for name in [log_file_name(base_offset), index_file_name(base_offset)] {
        super::durable_file::remove_if_present(&directory.join(name))?;
    }
    Ok(())
}
