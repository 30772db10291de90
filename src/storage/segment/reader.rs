//! The read side of a segment ([`SegmentReader`]): what fetches, the seal thread, retention and
//! timestamp lookups share, whether the segment is mapped for its whole life (resident) or opened
//! on demand.
//!
//! It holds what a segment knows of itself (its size, its largest timestamp, how much of it was
//! checked, whether retention deleted it) and hands out its map for syncing and publishing. Reads
//! of batches, with their checks and corruption reports, are in `read`; the writer that fills a
//! resident segment is in `active`.

use std::borrow::Cow;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::super::index::SharedEntries;
use super::super::mmap::MapReader;
use super::on_demand::OnDemand;
use super::{index_file_name, log_file_name, SegmentOptions, SegmentReadError};

/// `max_timestamp` of a segment opened without reading its batches, until verification finds
/// the real one: the largest value, so that retention by age never deletes a segment whose age
/// it does not know, and timestamp lookups never skip it.
pub(super) const UNKNOWN_MAX_TIMESTAMP: i64 = i64::MAX;

/// The read side of a segment, shared by fetches.
#[derive(Debug)]
pub struct SegmentReader {
    pub(super) base_offset: u64,
    pub(super) path: PathBuf,
    pub(super) contents: Contents,
    pub(super) max_timestamp: AtomicI64,
    /// Bytes `[0, verified)` were checked (CRC) by this process: written after validation, or
    /// scanned at recovery. Reads re-check anything beyond.
    pub(super) verified: AtomicUsize,
    /// Retention removed the segment: nothing is gained by syncing it any more.
    pub(super) deleted: AtomicBool,
    /// The file was shortened (a reused file's old tail cut, see `spare`) and the new length
    /// is not synced yet: sealing must sync the file whole, not only its data.
    pub(super) length_unsynced: AtomicBool,
    /// The first corrupt batch found by a read or a check of unchecked bytes (offset, position,
    /// reason): offsets from it to the end of the segment are refused from then on, as recovery
    /// refuses the damaged range of a segment it scanned.
    pub(super) corrupt: std::sync::Mutex<Option<(u64, usize, String)>>,
}

/// Where a segment's bytes and index come from.
#[derive(Debug)]
pub(super) enum Contents {
    /// Mapped for the life of the segment: the active segment (the map is shared with its
    /// writer), and every segment recovery opened or that was written by this process.
    Resident(Mapped),
    /// A sealed segment below the recovery point, opened on first use and closed again by the
    /// cache of open sealed segments.
    OnDemand(Arc<OnDemand>),
}

/// A segment's map and index, as a read needs them.
#[derive(Debug, Clone)]
pub(super) struct Mapped {
    pub(super) map: MapReader,
    pub(super) index: SharedEntries,
}

impl SegmentReader {
    /// A sealed segment of `directory` (below the recovery point, so synced whole) that is not
    /// opened now: only its base offset and the next segment's, `next_base`, are known. It is
    /// opened on first use (see [`on_demand`](super::on_demand)); until then its size and
    /// largest timestamp are unknown and its batches unchecked.
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
    pub(super) fn mapped(&self, keep: bool) -> Result<Cow<'_, Mapped>, SegmentReadError> {
        match &self.contents {
            Contents::Resident(mapped) => Ok(Cow::Borrowed(mapped)),
            Contents::OnDemand(on_demand) => on_demand.mapped(self, keep).map(Cow::Owned),
        }
    }

    /// Where the offsets this segment may serve end: the next segment's base for one opened on
    /// demand (its data must end there; past it a read stops), unbounded otherwise.
    pub(super) fn offset_limit(&self) -> u64 {
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
        self.sync_range(0, self.written_bytes())?;
        if self.length_unsynced.load(Ordering::Acquire) {
            // Retention may have deleted it meanwhile: then nothing will ever read it again.
            super::super::durable_file::sync_file_if_present(&self.path)?;
            self.length_unsynced.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// Writes bytes `[start, end)` of the segment to disk (msync of its map).
    pub fn sync_range(&self, start: usize, end: usize) -> io::Result<()> {
        super::super::durable_file::before(
            super::super::durable_file::FileOperation::Sync,
            &self.path,
        )?;
        self.map().sync_range(start, end)
    }

    /// fsyncs the segment's index file by name (the writer that had it open is gone by the
    /// seal); one retention deleted needs nothing.
    pub fn sync_index_file(&self) -> io::Result<()> {
        super::super::durable_file::sync_file_if_present(
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
}
