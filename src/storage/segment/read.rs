//! Reading a segment: whole batches from the one holding an offset, every batch not checked yet
//! checked on the way, and the first corrupt batch found remembered, so that it and everything
//! after it in the segment is refused on every later read (as recovery refuses a damaged range).
//!
//! Kept apart from the reader's state because this is where the rule "nothing is served that
//! the checks did not pass" is enforced, for resident segments and segments opened on demand
//! alike, with the errors that say what was refused and why.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::super::index;
use super::super::StorageError;
use super::{scan, Contents, Mapped, SegmentReader, UNKNOWN_MAX_TIMESTAMP};
use crate::batch::{self, BatchHeader, HEADER_BYTES};

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

    /// Where the first corrupt batch found after open is, if one was.
    fn corrupt_from(&self) -> Option<(u64, usize, String)> {
        self.corrupt.lock().expect("corrupt lock poisoned").clone()
    }

    /// Refuses `offset` when it is at or after the first corrupt batch found: as recovery
    /// refuses a damaged range, up to the next segment.
    pub(super) fn refuse_if_corrupt(&self, offset: u64) -> Result<(), ReadCorruption> {
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
    pub(super) fn record_corruption(&self, offset: u64, position: usize, reason: String) {
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
    /// opened without a scan
    /// ([`ActiveSegment::open_sealed`](super::ActiveSegment::open_sealed)); reads check
    /// unverified bytes themselves, so this only moves the cost off the first reads and lets
    /// retention by age see the segment's real age. A corrupt batch is reported, and stays
    /// refused on read.
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
