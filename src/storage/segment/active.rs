//! The write side of the partition's newest segment ([`ActiveSegment`]): creating it (new, or
//! reusing a spare file), copying validated batches at its tail, and finishing it when the
//! partition rolls or closes.
//!
//! Only the partition's writer, under the fence lock, holds an `ActiveSegment`, so batches are
//! appended to a segment only here, after the fence's checks in the same critical section;
//! readers see the same segment through its [`SegmentReader`].

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};

use super::super::index::IndexWriter;
use super::super::mmap::MapWriter;
use super::super::splice::BatchFill;
use super::{
    delete_files, index_file_name, log_file_name, Contents, Mapped, SegmentOptions, SegmentReader,
};
use crate::batch::{BatchHeader, BatchSlices};

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
        spare: &super::super::spare::Spare,
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
            super::super::spare::discard(spare);
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
            super::super::durable_file::sync_file(file, self.reader.path())?;
        } else {
            self.reader.length_unsynced.store(true, Ordering::Release);
        }
        self.old_tail = false;
        Ok(())
    }

    pub(super) fn from_parts(
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
    /// producer's (the first 8 bytes, outside the CRC, and a magic-2 batch's Kafka
    /// `baseOffset`: written from a separate buffer, so the batch is never copied to stamp it). `Ok(None)` if it does not fit (the caller rolls):
    /// either the bytes, or the offsets (index entries hold offsets relative to the segment's
    /// base as `u32`). Returns the end position after the batch. On an error nothing was
    /// appended.
    pub fn append(
        &mut self,
        batch: BatchSlices<'_>,
        header: &BatchHeader,
    ) -> io::Result<Option<usize>> {
        let base_offset = self.next_offset;
        let Some(relative) = self.relative_offset(header.record_count) else {
            return Ok(None);
        };
        let stamp = base_offset.to_be_bytes();
        let (head, kafka) = (batch.head(), batch.kafka());
        let written = if kafka.is_empty() {
            self.map.append(&[&stamp, &head[stamp.len()..]])
        } else {
            // A stored Kafka batch carries the base offset twice (outside both checksums).
            self.map
                .append(&[&stamp, &head[stamp.len()..], &stamp, &kafka[stamp.len()..]])
        };
        let batch_len = batch.len();
        let Some(position) = written? else {
            return Ok(None);
        };
        self.record_appended(relative, position, batch_len, header);
        Ok(Some(position + batch_len))
    }

    /// The next batch's offset relative to the segment's base, as index entries hold it, when
    /// a batch of `record_count` records still fits those (a `u32`); `None`: the caller rolls.
    fn relative_offset(&self, record_count: u32) -> Option<u32> {
        u32::try_from(self.next_offset - self.reader.base_offset)
            .ok()
            .filter(|relative| relative.checked_add(record_count).is_some())
    }

    /// Counts a batch written at `position` (validated, by its caller or as it landed) as
    /// appended: verified (reads skip its CRC), its timestamp, its offsets, its index entry.
    fn record_appended(
        &mut self,
        relative: u32,
        position: usize,
        batch_len: usize,
        header: &BatchHeader,
    ) {
        self.reader
            .verified
            .fetch_max(position + batch_len, Ordering::AcqRel);
        self.reader
            .max_timestamp
            .fetch_max(header.max_timestamp, Ordering::AcqRel);
        self.next_offset += u64::from(header.record_count);
        self.index.on_append(relative, position, batch_len);
    }

    /// [`Self::append`] of a batch whose first bytes, `head` (at least its header), are in
    /// memory and whose other `tail_len` bytes `fill` puts straight into the segment file at the
    /// offset it is given (a splice from the producer's socket, see [`crate::storage::splice`]).
    /// The whole batch is validated as it landed (`batch::validate` against `max_batch_bytes`)
    /// before it counts as appended. `Ok(None)`: it does not fit (the caller rolls); `fill` was
    /// not called. `Ok(Some(Err(_)))`: the batch is invalid and not appended (its bytes lie past
    /// the written mark and the next append overwrites them); `fill` was called.
    pub fn append_filled(
        &mut self,
        head: &[u8],
        tail_len: usize,
        max_batch_bytes: usize,
        fill: &mut BatchFill<'_>,
    ) -> io::Result<Option<Result<BatchHeader, crate::batch::BatchError>>> {
        let Some(declared) = BatchHeader::parse(head) else {
            return Ok(Some(Err(crate::batch::BatchError::TooShort {
                len: head.len(),
            })));
        };
        let base_offset = self.next_offset;
        let Some(relative) = self.relative_offset(declared.record_count) else {
            return Ok(None);
        };
        let stamp = base_offset.to_be_bytes();
        let landed = self.map.append_filled(
            &[&stamp, &head[stamp.len()..]],
            tail_len,
            |file, offset| fill(file, offset),
            |landed| crate::batch::validate(landed, max_batch_bytes),
        );
        let (position, header) = match landed {
            Ok(None) => return Ok(None),
            Ok(Some((position, Ok(header)))) => (position, header),
            refused => {
                // Refused or half landed, the bytes stay past the written mark until later
                // appends cover them; whatever they do not cover is cut when the segment is
                // done (non-zero bytes after a segment's data make recovery cut it and delete
                // every later segment).
                self.old_tail = true;
                self.emptied = false;
                return match refused {
                    Ok(Some((_, Err(error)))) => Ok(Some(Err(error))),
                    Err(error) => Err(error),
                    Ok(_) => unreachable!("the other outcomes returned above"),
                };
            }
        };
        self.record_appended(relative, position, head.len() + tail_len, &header);
        Ok(Some(Ok(header)))
    }

    /// Syncs the index file (the log's range is synced through the reader's map).
    pub fn sync_index(&self) -> io::Result<()> {
        self.index.sync()
    }
}

/// How a segment's file and map are laid out when it is opened.
pub(super) struct Layout {
    /// Bytes to map (at least the file's length).
    pub(super) map_len: u64,
    /// The file's length: bytes already reserved on disk.
    pub(super) reserved: usize,
    /// Bytes of whole batches from the start.
    pub(super) valid_bytes: usize,
    /// Bytes already checked by this process (reads check the rest).
    pub(super) verified: usize,
}
