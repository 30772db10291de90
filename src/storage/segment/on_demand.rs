//! A sealed segment opened on first use rather than at start, so that a restart costs the same
//! however much data is kept.
//!
//! At start recovery knows, for each segment below the recovery point (synced whole, see
//! `storage::seal`), only what the directory listing gives: its base offset, and the next
//! segment's, where its offsets must end. The first read, timestamp lookup, retention pass or
//! background check that needs it opens it exactly as a restart used to: the end of its data
//! from the index's last entry and a walk of the batch headers after it, with the last batch
//! CRC-checked, which must land on the next segment's base; when it does not, the segment is
//! scanned whole and the damage recorded and reported as recovery reports it (the offsets from
//! the first bad batch to the next segment are refused on read, the file is left as found).
//! Nothing is ever served that the checks did not pass: reads check every batch not checked yet.
//!
//! What is learned (where the data ends, the largest timestamp once checked, any corruption) is
//! kept for the life of the process; the map and index are dropped again when the cache of open
//! sealed segments ([`crate::storage::open_segments`]) needs the room, and reopened without any
//! walk.

use std::fs::{self, File};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use super::{
    locate_end, scan, Mapped, ReadCorruption, SegmentOptions, SegmentReadError, SegmentReader,
    UNKNOWN_MAX_TIMESTAMP,
};
use crate::storage::index::{self, IndexEntry, IndexWriter};
use crate::storage::mmap::{self, MapReader};
use crate::storage::open_segments::{Closable, OpenSegments, OPEN_SEALED_SEGMENTS};

/// The on-demand state of one sealed segment (its base offset and path are the reader's).
#[derive(Debug)]
pub(super) struct OnDemand {
    index_path: std::path::PathBuf,
    options: SegmentOptions,
    /// Where the next segment begins: this one's offsets end there.
    next_base: u64,
    /// Where the data ends, once the segment was opened once.
    data_bytes: OnceLock<usize>,
    /// The map and index while the segment is open.
    open: Mutex<Option<Mapped>>,
    /// Set on every use; the cache's passes clear it (see `open_segments`).
    referenced: AtomicBool,
    /// The cache that bounds how many such segments are open.
    cache: Arc<OpenSegments>,
}

impl OnDemand {
    /// A segment not opened yet, under the process's cache.
    pub(super) fn new(
        index_path: std::path::PathBuf,
        options: SegmentOptions,
        next_base: u64,
    ) -> Self {
        Self::with_cache(
            index_path,
            options,
            next_base,
            Arc::clone(&OPEN_SEALED_SEGMENTS),
        )
    }

    /// A segment not opened yet, under `cache`.
    pub(super) fn with_cache(
        index_path: std::path::PathBuf,
        options: SegmentOptions,
        next_base: u64,
        cache: Arc<OpenSegments>,
    ) -> Self {
        Self {
            index_path,
            options,
            next_base,
            data_bytes: OnceLock::new(),
            open: Mutex::new(None),
            referenced: AtomicBool::new(false),
            cache,
        }
    }

    /// Where the next segment begins.
    pub(super) fn next_base(&self) -> u64 {
        self.next_base
    }

    /// Where the data ends, if the segment was opened once.
    pub(super) fn data_bytes(&self) -> Option<usize> {
        self.data_bytes.get().copied()
    }

    /// Whether the segment is open now.
    pub(super) fn is_mapped(&self) -> bool {
        self.open.lock().expect("segment lock poisoned").is_some()
    }

    /// The map and index, opening the segment if it is closed; with `keep` it stays open (and
    /// the cache may close another one), otherwise it is closed again when the caller is done.
    pub(super) fn mapped(
        self: &Arc<Self>,
        segment: &SegmentReader,
        keep: bool,
    ) -> Result<Mapped, SegmentReadError> {
        self.referenced.store(true, Ordering::Relaxed);
        let mut open = self.open.lock().expect("segment lock poisoned");
        if let Some(mapped) = open.as_ref() {
            return Ok(mapped.clone());
        }
        // Opened under the segment's lock: concurrent first readers wait for one open.
        let mapped = self.open_file(segment)?;
        if keep {
            *open = Some(mapped.clone());
            drop(open);
            let weak: std::sync::Weak<dyn Closable> = Arc::downgrade(self) as _;
            self.cache.admit(weak);
        }
        Ok(mapped)
    }

    /// Opens the file, finds where its data ends (the index and a header walk the first time;
    /// what was found then afterwards), and maps that much read-only.
    fn open_file(&self, segment: &SegmentReader) -> Result<Mapped, SegmentReadError> {
        let open_error = |source: io::Error| SegmentReadError::Open {
            path: segment.path.clone(),
            source,
        };
        let file = File::open(&segment.path).map_err(open_error)?;
        let file_len = usize::try_from(file.metadata().map_err(open_error)?.len())
            .map_err(|error| open_error(io::Error::other(error)))?;
        let entries = fs::read(&self.index_path)
            .ok()
            .and_then(|bytes| index::decode(&bytes));
        let interval_bytes = self.options.index_interval_bytes;
        let located = match (self.data_bytes(), entries) {
            (Some(data_bytes), Some(entries)) => Some((data_bytes, entries)),
            (None, Some(entries)) => mmap::with_file_bytes(&file, file_len, |bytes| {
                locate_end(
                    bytes,
                    segment.base_offset,
                    &entries,
                    interval_bytes,
                    self.next_base,
                )
            })
            .map_err(open_error)?
            .map(|walk| (walk.end, entries)),
            (_, None) => None,
        };
        let (data_bytes, entries) = match located {
            Some(found) => found,
            None => self.scan_whole(segment, &file, file_len)?,
        };
        let data_bytes = *self.data_bytes.get_or_init(|| data_bytes);
        if data_bytes == 0 {
            // No batch at all: the damage was recorded by the scan; every offset is refused.
            return Err(segment
                .refuse_if_corrupt(segment.base_offset)
                .err()
                .unwrap_or_else(|| ReadCorruption {
                    path: segment.path.clone(),
                    position: 0,
                    offset: segment.base_offset,
                    reason: "the sealed segment holds no batch".into(),
                })
                .into());
        }
        let map = MapReader::map_sealed(&file, data_bytes).map_err(open_error)?;
        Ok(Mapped {
            map,
            index: Arc::new(RwLock::new(entries)),
        })
    }

    /// The whole-segment scan, when the index does not lead to the next segment's base: checks
    /// every batch (so they count as checked), learns the largest timestamp, rewrites a wrong
    /// index as recovery does, and records damage before the next segment's base as corruption
    /// (refused on read, reported loudly, the file left as found). Returns where the valid data
    /// ends and the index entries.
    fn scan_whole(
        &self,
        segment: &SegmentReader,
        file: &File,
        file_len: usize,
    ) -> Result<(usize, Vec<IndexEntry>), SegmentReadError> {
        let interval_bytes = self.options.index_interval_bytes;
        let scanned = mmap::with_file_bytes(file, file_len, |bytes| {
            scan(bytes, segment.base_offset, interval_bytes)
        })
        .map_err(|source| SegmentReadError::Open {
            path: segment.path.clone(),
            source,
        })?;
        segment
            .verified
            .fetch_max(scanned.valid_bytes, Ordering::AcqRel);
        // Only the placeholder is replaced: a known timestamp is never lowered.
        let _ = segment.max_timestamp.compare_exchange(
            UNKNOWN_MAX_TIMESTAMP,
            scanned.max_timestamp,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        match IndexWriter::open(
            &self.index_path,
            scanned.index.entries.clone(),
            interval_bytes,
            scanned.index.bytes_since_entry,
        ) {
            Ok((_, true)) => {
                tracing::info!(segment = %segment.path.display(), "rebuilt the index of a sealed segment on first use");
            }
            Ok((_, false)) => {}
            Err(error) => {
                tracing::warn!(segment = %segment.path.display(), %error, "could not rewrite the index of a sealed segment; using the one rebuilt in memory");
            }
        }
        if scanned.next_offset < self.next_base {
            let (position, reason) = scanned.invalid.clone().unwrap_or_else(|| {
                (
                    scanned.valid_bytes,
                    format!(
                        "the segment ends at offset {} but the next one starts at {}",
                        scanned.next_offset, self.next_base
                    ),
                )
            });
            tracing::error!(
                segment = %segment.path.display(),
                position,
                start_offset = scanned.next_offset,
                end_offset = self.next_base,
                reason = reason.as_str(),
                "corrupt sealed segment: these offsets are refused on read; restore the file from a backup to serve them again"
            );
            segment.record_corruption(scanned.next_offset, position, reason);
        } else if scanned.next_offset > self.next_base {
            tracing::warn!(
                segment = %segment.path.display(),
                next_base = self.next_base,
                data_ends_at = scanned.next_offset,
                "a sealed segment's data runs past the next segment's base; those offsets are served from the next segment"
            );
        }
        Ok((scanned.valid_bytes, scanned.index.entries))
    }
}

impl Closable for OnDemand {
    fn referenced(&self) -> &AtomicBool {
        &self.referenced
    }

    fn is_open(&self) -> bool {
        self.is_mapped()
    }

    fn close(&self) {
        self.open.lock().expect("segment lock poisoned").take();
    }
}

#[cfg(all(test, not(fencelog_loom)))]
mod tests {
    use super::*;
    use crate::batch::{BatchBuilder, BatchHeader};
    use crate::storage::segment::{ActiveSegment, Contents};
    use std::path::Path;
    use std::sync::atomic::{AtomicI64, AtomicUsize};

    const OPTIONS: SegmentOptions = SegmentOptions {
        segment_bytes: 64 * 1024,
        index_interval_bytes: 1024,
    };

    /// Writes `segments` segments of `batches` batches each into `directory`; returns their
    /// base offsets and the base offset after the last one.
    fn write_segments(directory: &Path, segments: usize, batches: usize) -> (Vec<u64>, u64) {
        let mut bases = Vec::new();
        let mut next = 0;
        for _ in 0..segments {
            let mut segment = ActiveSegment::create(directory, next, OPTIONS).unwrap();
            bases.push(next);
            for tag in 0..batches {
                let mut builder = BatchBuilder::new(1);
                builder.push(1_000 + tag as i64, None, Some(&[tag as u8; 300]));
                let bytes = builder.finish();
                let header = BatchHeader::parse(&bytes).unwrap();
                segment
                    .append(crate::batch::BatchSlices::new(&bytes), &header)
                    .unwrap()
                    .unwrap();
            }
            segment.sync_index().unwrap();
            next = segment.next_offset();
        }
        (bases, next)
    }

    fn on_demand(
        directory: &Path,
        base_offset: u64,
        next_base: u64,
        cache: &Arc<OpenSegments>,
    ) -> SegmentReader {
        SegmentReader {
            base_offset,
            path: directory.join(super::super::log_file_name(base_offset)),
            contents: Contents::OnDemand(Arc::new(OnDemand::with_cache(
                directory.join(super::super::index_file_name(base_offset)),
                OPTIONS,
                next_base,
                Arc::clone(cache),
            ))),
            max_timestamp: AtomicI64::new(UNKNOWN_MAX_TIMESTAMP),
            verified: AtomicUsize::new(0),
            deleted: AtomicBool::new(false),
            length_unsynced: AtomicBool::new(false),
            corrupt: Mutex::new(None),
        }
    }

    /// A sealed segment is opened by its first read, which serves its batches from the first
    /// offset asked; reading through many segments keeps at most the cache's limit open, and a
    /// segment the cache closed reads back the same when it is used again.
    #[test]
    fn reads_open_segments_and_the_cache_bounds_how_many_stay_open() {
        let directory = tempfile::tempdir().unwrap();
        let (bases, end) = write_segments(directory.path(), 5, 20);
        let cache = Arc::new(OpenSegments::new(2));
        let segments: Vec<_> = bases
            .iter()
            .enumerate()
            .map(|(index, base)| {
                let next = bases.get(index + 1).copied().unwrap_or(end);
                on_demand(directory.path(), *base, next, &cache)
            })
            .collect();
        assert!(segments.iter().all(|segment| !segment.is_open_on_demand()));
        assert!(segments.iter().all(|segment| !segment.size_known()));
        let mut first_reads = Vec::new();
        for segment in &segments {
            let batches = segment
                .read(segment.base_offset() + 3, 1 << 20, u64::MAX)
                .unwrap();
            let first = BatchHeader::parse(&batches[0]).unwrap();
            assert_eq!(first.base_offset, segment.base_offset() + 3);
            assert_eq!(batches.len(), 17, "up to the end of the segment");
            assert!(segment.size_known());
            assert!(cache.open_count() <= 2);
            first_reads.push(batches);
        }
        assert!(!segments[0].is_open_on_demand(), "closed by the cache");
        let again = segments[0].read(3, 1 << 20, u64::MAX).unwrap();
        assert_eq!(again, first_reads[0]);
        assert!(segments[0].is_open_on_demand());
        assert!(cache.open_count() <= 2);
    }

    /// The background check opens a closed segment for the check only (it does not take a
    /// place in the cache), learns its largest timestamp and marks it checked.
    #[test]
    fn the_check_opens_for_itself_and_learns_the_timestamp() {
        let directory = tempfile::tempdir().unwrap();
        let (bases, end) = write_segments(directory.path(), 2, 10);
        let cache = Arc::new(OpenSegments::new(2));
        let segment = on_demand(directory.path(), bases[1], end, &cache);
        assert!(!segment.max_timestamp_known());
        segment.verify().unwrap();
        assert!(segment.is_verified());
        assert_eq!(segment.max_timestamp(), 1_009);
        assert!(!segment.is_open_on_demand());
        assert_eq!(cache.open_count(), 0);
        segment.learn_size().unwrap();
        assert!(segment.written_bytes() > 0);
    }

    /// A segment whose data ends before the next segment's base (here: its file cut inside a
    /// batch, index and all) is scanned whole on first use; the offsets from the cut batch to
    /// the next segment are refused, naming them, the ones before are served, and the file is
    /// left as found.
    #[test]
    fn a_short_segment_found_at_first_use_is_refused_from_the_damage_on() {
        let directory = tempfile::tempdir().unwrap();
        let (bases, end) = write_segments(directory.path(), 2, 10);
        let path = directory.path().join(super::super::log_file_name(bases[1]));
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        // Ten batches of a little over 350 bytes: cut inside the eighth.
        file.set_len(7 * 360 + 100).unwrap();
        let cut_file = std::fs::read(&path).unwrap();
        let cache = Arc::new(OpenSegments::new(2));
        let segment = on_demand(directory.path(), bases[1], end, &cache);
        let served = segment.read(bases[1], 1 << 20, u64::MAX).unwrap();
        assert_eq!(served.len(), 7);
        let SegmentReadError::Corrupt(corruption) =
            segment.read(bases[1] + 7, 1 << 20, u64::MAX).unwrap_err()
        else {
            panic!("corruption expected");
        };
        assert!(
            corruption.reason.contains(&format!(
                "offsets {}..{end} are unreadable, the next readable offset is {end}",
                bases[1] + 7
            )),
            "{}",
            corruption.reason
        );
        assert!(segment.read(end - 1, 1 << 20, u64::MAX).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), cut_file);
    }
}
