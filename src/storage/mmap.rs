//! The only module with `unsafe` code: a memory-mapped segment file with one writer and many
//! zero-copy readers.
//!
//! # The invariants that make this sound
//!
//! A segment map is shared between exactly one [`MapWriter`] (not `Clone`, owned by the partition's
//! append path) and any number of [`MapReader`]s (cheap clones, held by fetches and by `Bytes`
//! handed to the network). Two watermarks live in the shared [`MapInner`]:
//!
//! * `written`: bytes `[0, written)` hold data the writer has finished writing. Only the writer
//!   changes it, and only the writer ever writes to the segment (with `pwritev` on the file,
//!   which changes the page cache pages the map shows), always at positions `>= written`.
//! * `visible`: bytes `[0, visible)` may be read. `visible <= written` always holds (it is clamped
//!   on every publish), and `visible` never decreases.
//!
//! Readers only build slices (`&[u8]` or `Bytes`) inside `[0, visible)`, so no byte a reader can
//! see is ever written again: a shared slice never aliases a write. The writer may *rewind*
//! `written` (recovery cuts a torn tail) only down to `visible`, never below it.
//!
//! The writer itself reads bytes past `written` in one place: [`MapWriter::append_filled`]
//! checks a batch that landed in the file without passing through this process (a splice from
//! a socket) before `written` moves past it. That read stays inside the reserved part of the
//! file (so it cannot fault), borrows the only writer (so no write runs meanwhile), and starts
//! after the write that put the bytes there returned.
//!
//! # Reserved space: why a write can never meet a hole
//!
//! A segment's map is `capacity` bytes long (the segment size), but its file is not: the file
//! holds only the bytes *reserved* so far, `[0, reserved)`, allocated with `fallocate` in chunks
//! of [`RESERVE_CHUNK_BYTES`] as the writer crosses into unreserved space (so an empty partition
//! costs no disk, and a topic of thousands of partitions does not claim `partitions x
//! segment_bytes` at once). Three more invariants keep that sound:
//!
//! * `written <= reserved <= file length`: [`MapWriter::append`] reserves first (a full disk is
//!   an `ENOSPC` of that `fallocate`, returned as an error of the append that needed it, with
//!   nothing written) and only then writes, so every written byte lies in allocated blocks and a
//!   later `msync` never has to allocate one. Nothing is ever written through the map itself,
//!   which is what turns a hole on a full disk into `SIGBUS` elsewhere.
//! * Readers only touch `[0, visible)`, and `visible <= written`: no access of the map reaches
//!   a page past the end of the file (which would be `SIGBUS`); the mapping's length beyond the
//!   file is address space only.
//! * Recovery may shorten the file (a cut) only before the map exists. While the map exists the
//!   writer may shorten the file only to `written` ([`MapWriter::truncate_to_written`]: a reused
//!   file's old tail, see `spare`), never below: every byte a reader may touch stays in the file.
//!
//! What we cannot enforce in code: another process truncating the file while it is mapped would
//! turn reads into SIGBUS. The server owns its data directory exclusively (a lock file).
//!
//! # Sealed segments mapped read-only
//!
//! A sealed segment opened on demand after a restart ([`MapReader::map_sealed`]) has no
//! [`MapWriter`] at all: nothing in the process ever writes its file again. It is mapped
//! read-only, only as far as its data reaches (which is inside the file), with `written` and
//! `visible` both at that length from the start, so every invariant above holds trivially.
//!
//! # Descriptors
//!
//! The map does not need its file open. A [`MapWriter`] opens the file on its first append
//! (and keeps it for the next ones), so a partition at rest holds no descriptor: ten thousand
//! idle partitions do not need ten thousand open files.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use memmap2::{MmapOptions, MmapRaw};

/// How much disk a segment reserves at a time, ahead of its write position (see the module
/// documentation). Large enough that an append rarely waits for a `fallocate` (one per MiB of
/// log), small enough that an empty or barely used partition costs almost nothing.
pub const RESERVE_CHUNK_BYTES: usize = 1024 * 1024;

/// Allocates real disk blocks for `[from, to)` of `file` (growing the file to at least `to`),
/// so appends never hit a sparse hole (and a full disk is reported by this call, not as SIGBUS
/// on a later access).
#[allow(unsafe_code)]
pub fn reserve(file: &File, from: u64, to: u64) -> io::Result<()> {
    if to <= from {
        return Ok(());
    }
    let offset = libc::off_t::try_from(from).map_err(|_| io::Error::other("segment too large"))?;
    let len =
        libc::off_t::try_from(to - from).map_err(|_| io::Error::other("segment too large"))?;
    // SAFETY: `fallocate` only reads its integer arguments; the descriptor is valid for the life
    // of `file`, which outlives the call.
    let result = unsafe { libc::fallocate(file.as_raw_fd(), 0, offset, len) };
    if result == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        // Filesystems without fallocate (tmpfs on old kernels, some overlays): fall back to
        // extending the file; the writes allocate their pages anyway.
        Some(libc::EOPNOTSUPP) if file.metadata()?.len() < to => file.set_len(to),
        Some(libc::EOPNOTSUPP) => Ok(()),
        _ => Err(error),
    }
}

/// Where the reservation must reach for a write ending at `end`: the next chunk boundary,
/// never past `capacity`.
fn reservation_for(end: usize, capacity: usize) -> usize {
    end.div_ceil(RESERVE_CHUNK_BYTES)
        .saturating_mul(RESERVE_CHUNK_BYTES)
        .min(capacity)
        .max(end)
}

/// State shared by the writer and all readers of one segment's map.
#[derive(Debug)]
pub struct MapInner {
    raw: MmapRaw,
    written: AtomicUsize,
    visible: AtomicUsize,
}

/// The single writer of a segment map. See the module documentation for the invariants.
#[derive(Debug)]
pub struct MapWriter {
    inner: Arc<MapInner>,
    /// The segment file's path, to open it on the first append.
    path: PathBuf,
    /// The segment file, for `pwritev` and `fallocate`: opened on the first append.
    file: Option<File>,
    /// Bytes `[0, reserved)` of the file are allocated (the file is at least this long).
    reserved: usize,
}

/// A reader of a segment map: reads only the published prefix.
#[derive(Debug, Clone)]
pub struct MapReader {
    inner: Arc<MapInner>,
}

/// Keeps a map alive for as long as a `Bytes` slice of it exists.
struct MapSlice {
    inner: Arc<MapInner>,
    start: usize,
    len: usize,
}

impl AsRef<[u8]> for MapSlice {
    #[allow(unsafe_code)]
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `MapSlice` is only built by `MapReader::slice` for a range inside
        // `[0, visible)`, which no writer touches again (module invariants), and the `Arc`
        // keeps the mapping alive.
        unsafe { std::slice::from_raw_parts(self.inner.raw.as_ptr().add(self.start), self.len) }
    }
}

impl MapWriter {
    /// Maps `len` bytes of the segment file at `path` for writing (the file may be shorter: see
    /// the module documentation). `reserved` is the file's length (every byte of it allocated),
    /// `written` and `visible` start at `valid_len`: the recovered data is readable at once. The
    /// file is opened again on the first append; `file` is not kept.
    pub fn map(
        file: &File,
        path: &Path,
        len: usize,
        reserved: usize,
        valid_len: usize,
    ) -> io::Result<Self> {
        assert!(
            valid_len <= reserved.min(len),
            "valid length {valid_len} beyond the reserved {reserved} or mapped {len} bytes"
        );
        let raw = MmapOptions::new().len(len).map_raw(file)?;
        Ok(Self {
            inner: Arc::new(MapInner {
                raw,
                written: AtomicUsize::new(valid_len),
                visible: AtomicUsize::new(valid_len),
            }),
            path: path.to_path_buf(),
            file: None,
            reserved,
        })
    }

    /// The segment file, opened on first use.
    fn file(&mut self) -> io::Result<&File> {
        if self.file.is_none() {
            self.file = Some(OpenOptions::new().read(true).write(true).open(&self.path)?);
        }
        Ok(self.file.as_ref().expect("opened above"))
    }

    /// Makes sure `[0, end)` is reserved, growing the reservation by whole chunks.
    fn reserve_up_to(&mut self, end: usize) -> io::Result<()> {
        if end <= self.reserved {
            return Ok(());
        }
        let target = reservation_for(end, self.capacity());
        let from = self.reserved as u64;
        reserve(self.file()?, from, target as u64)?;
        self.reserved = target;
        Ok(())
    }

    /// Shortens the file to the bytes written (a reused file's old bytes beyond them go; see
    /// `spare`), returning the file so the caller can sync the new length. Only the writer
    /// shortens the file, and never below `written >= visible`: no byte a reader may touch leaves
    /// the file (module invariants).
    pub fn truncate_to_written(&mut self) -> io::Result<&File> {
        let written = self.written();
        let file = self.file()?;
        file.set_len(written as u64)?;
        self.reserved = written;
        self.file()
    }

    /// Bytes of the file reserved so far.
    #[cfg(all(test, not(fencelog_loom)))]
    pub fn reserved(&self) -> usize {
        self.reserved
    }

    /// A new reader handle.
    pub fn reader(&self) -> MapReader {
        MapReader {
            inner: Arc::clone(&self.inner),
        }
    }

    /// Length of the map in bytes.
    pub fn capacity(&self) -> usize {
        self.inner.raw.len()
    }

    /// Bytes written so far (the tail position).
    pub fn written(&self) -> usize {
        self.inner.written.load(Ordering::Acquire)
    }

    /// Most parts one [`MapWriter::append`] writes: a stamped base offset and the rest of a
    /// batch, or (magic 2) two stamps and the two stretches between them.
    pub const MAX_APPEND_PARTS: usize = 4;

    /// Writes `parts` one after the other at the tail of the segment and returns the position
    /// they were written at, or `Ok(None)` if they do not fit. The bytes go in with `pwritev` on
    /// the file rather than a copy through the map: they land in the same page cache pages the
    /// map shows, but a write of whole pages does not first fault in and zero each page, which
    /// made copying into a fresh mapping several times slower than `pwrite`. Only after the write
    /// is complete does `written` move past it. On an error nothing counts as written (the bytes
    /// that did land lie beyond `written` and are overwritten by the next append).
    ///
    /// Panics with more than [`Self::MAX_APPEND_PARTS`] parts (a caller's bug, not input).
    pub fn append(&mut self, parts: &[&[u8]]) -> io::Result<Option<usize>> {
        let position = self.written();
        let total: usize = parts.iter().map(|part| part.len()).sum();
        let Some(end) = self.room_for(total) else {
            return Ok(None);
        };
        // Reserve before writing: a full disk fails here, with nothing written.
        self.reserve_up_to(end)?;
        self.write_at(position, parts)?;
        self.inner.written.store(end, Ordering::Release);
        Ok(Some(position))
    }

    /// Writes `head` at the tail, has `fill` put `tail_len` more bytes into the file right after
    /// it (without them passing through this process: a splice from a socket, see
    /// [`super::splice`]), shows `check` the whole as it landed, and only if `check` accepts
    /// it moves `written` past it. Returns `Ok(None)` if it does not fit (nothing written,
    /// `fill` not called), else the position and what `check` returned, or its refusal: then
    /// nothing counts as written (the landed bytes lie beyond `written` and are overwritten by
    /// the next append). `fill` gets the file and the offset to write at.
    pub fn append_filled<T, E>(
        &mut self,
        head: &[&[u8]],
        tail_len: usize,
        fill: impl FnOnce(&File, u64) -> io::Result<()>,
        check: impl FnOnce(&[u8]) -> Result<T, E>,
    ) -> io::Result<Option<(usize, Result<T, E>)>> {
        let position = self.written();
        let head_len: usize = head.iter().map(|part| part.len()).sum();
        let Some(end) = head_len
            .checked_add(tail_len)
            .and_then(|total| self.room_for(total))
        else {
            return Ok(None);
        };
        self.reserve_up_to(end)?;
        self.write_at(position, head)?;
        fill(self.file()?, (position + head_len) as u64)?;
        let checked = check(self.landed(position, end));
        if checked.is_ok() {
            self.inner.written.store(end, Ordering::Release);
        }
        Ok(Some((position, checked)))
    }

    /// Where `total` more bytes would end, if they fit in the map.
    fn room_for(&self, total: usize) -> Option<usize> {
        self.written()
            .checked_add(total)
            .filter(|end| *end <= self.capacity())
    }

    /// The bytes `[position, end)` as they landed in the file, past `written`: what
    /// [`Self::append_filled`] checks before it counts them as written.
    #[allow(unsafe_code)]
    fn landed(&self, position: usize, end: usize) -> &[u8] {
        assert!(
            self.written() <= position && position <= end && end <= self.reserved,
            "landed bytes [{position}, {end}) outside the unwritten reserved range"
        );
        // SAFETY: `[position, end)` lies inside `[0, reserved)`, so inside the file: no access
        // faults. It lies at or beyond `written >= visible`, so no reader builds a slice of it,
        // and `&self` borrowed from the only writer (whose `&mut` methods are the only writes to
        // the segment) means nothing writes these bytes while the slice lives; the write that
        // put them there (`write_at`, and the caller's fill) has returned, so the page cache,
        // which the map shows, holds them.
        unsafe { std::slice::from_raw_parts(self.inner.raw.as_ptr().add(position), end - position) }
    }

    /// Writes `parts` one after the other at `position` (at or beyond `written`) with
    /// `pwritev`, whole; `written` does not move.
    #[allow(unsafe_code)]
    fn write_at(&mut self, position: usize, parts: &[&[u8]]) -> io::Result<()> {
        assert!(parts.len() <= Self::MAX_APPEND_PARTS, "too many parts");
        super::durable_file::before(super::durable_file::FileOperation::Write, &self.path)?;
        let total: usize = parts.iter().map(|part| part.len()).sum();
        let descriptor = self.file()?.as_raw_fd();
        let mut done = 0;
        while done < total {
            // The parts not yet written, the first one cut where the last write stopped.
            let mut vectors = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; Self::MAX_APPEND_PARTS];
            let mut count = 0;
            let mut skip = done;
            for part in parts {
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                let rest = &part[skip..];
                skip = 0;
                vectors[count] = libc::iovec {
                    iov_base: rest.as_ptr() as *mut libc::c_void,
                    iov_len: rest.len(),
                };
                count += 1;
            }
            let offset = libc::off_t::try_from(position + done).map_err(io::Error::other)?;
            // SAFETY: the first `count` iovecs point into live slices of the stated lengths,
            // which the kernel only reads; the descriptor is `self.file`'s, which lives as long as `self`. The file range
            // written, `[position, position + total)`, is at or beyond `written >= visible`, so no reader holds
            // a slice of the mapped bytes it changes, and `&mut self` on the only writer means no
            // other write to the segment is in progress.
            let written =
                unsafe { libc::pwritev(descriptor, vectors.as_ptr(), count as i32, offset) };
            if written < 0 {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            if written == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "pwritev wrote nothing",
                ));
            }
            done += written as usize;
        }
        Ok(())
    }
}

impl MapReader {
    /// Maps the first `len` bytes of a sealed segment's `file` read-only, all of them readable
    /// at once (see "Sealed segments mapped read-only" above). `len` must not exceed the file's
    /// length: the caller found the data's end inside the file. The file is not kept.
    pub fn map_sealed(file: &File, len: usize) -> io::Result<Self> {
        let file_len = usize::try_from(file.metadata()?.len()).map_err(io::Error::other)?;
        if len == 0 || len > file_len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot map {len} bytes of a {file_len}-byte sealed segment"),
            ));
        }
        let raw = MmapOptions::new().len(len).map_raw_read_only(file)?;
        Ok(Self {
            inner: Arc::new(MapInner {
                raw,
                written: AtomicUsize::new(len),
                visible: AtomicUsize::new(len),
            }),
        })
    }

    /// Whether this handle is the only one left: no other reader, no writer, and no `Bytes`
    /// slice of the map exists (none can be made without a handle). A segment file whose map is
    /// unshared can be reused without any reader seeing its bytes change.
    pub fn is_unshared(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
    }

    /// Bytes readers may see.
    pub fn visible(&self) -> usize {
        self.inner.visible.load(Ordering::Acquire)
    }

    /// Bytes the writer has finished (may be ahead of `visible`: written but not yet acknowledged).
    pub fn written(&self) -> usize {
        self.inner.written.load(Ordering::Acquire)
    }

    /// Makes `[0, upto)` readable. Clamped to what was written, and never moves backwards.
    pub fn publish(&self, upto: usize) {
        let upto = upto.min(self.written());
        self.inner.visible.fetch_max(upto, Ordering::AcqRel);
    }

    /// Borrowed view of the visible range `[start, end)`, or `None` if it is not all visible.
    #[allow(unsafe_code)]
    pub fn bytes(&self, start: usize, end: usize) -> Option<&[u8]> {
        if start > end || end > self.visible() {
            return None;
        }
        // SAFETY: `[start, end)` is inside `[0, visible)`, which is never written again and lies
        // inside the file (`visible <= written <= reserved <= file length`, so no page past its
        // end is touched), and the returned borrow keeps `self` (and so the mapping) alive.
        Some(unsafe { std::slice::from_raw_parts(self.inner.raw.as_ptr().add(start), end - start) })
    }

    /// Zero-copy `Bytes` over the visible range `[start, end)`; it keeps the map alive.
    pub fn slice(&self, start: usize, end: usize) -> Option<Bytes> {
        self.bytes(start, end)?;
        Some(Bytes::from_owner(MapSlice {
            inner: Arc::clone(&self.inner),
            start,
            len: end - start,
        }))
    }

    /// Writes `[start, end)` of the map to disk (msync with `MS_SYNC`, which syncs the data of
    /// that range like `fdatasync`).
    pub fn sync_range(&self, start: usize, end: usize) -> io::Result<()> {
        if end <= start {
            return Ok(());
        }
        // msync wants a page-aligned start.
        let aligned = start & !(page_size() - 1);
        self.inner.raw.flush_range(aligned, end - aligned)
    }
}

fn page_size() -> usize {
    4096
}

/// Runs `f` over the first `len` bytes of `file`, mapped read-only. Used by recovery to scan a
/// segment before any writer or reader of it exists.
#[allow(unsafe_code)]
pub fn with_file_bytes<T>(file: &File, len: usize, f: impl FnOnce(&[u8]) -> T) -> io::Result<T> {
    if len == 0 {
        return Ok(f(&[]));
    }
    let raw = MmapOptions::new().len(len).map_raw_read_only(file)?;
    // SAFETY: the map covers `len` bytes of the file and lives until the end of this function;
    // nothing in this process writes the file while `f` runs (recovery runs before the segment
    // has a writer, and the data directory is locked against other processes).
    let bytes = unsafe { std::slice::from_raw_parts(raw.as_ptr(), len) };
    Ok(f(bytes))
}

#[cfg(all(test, not(fencelog_loom)))]
mod tests {
    use super::*;

    /// The reservation reaches the next chunk boundary, never beyond the map, never short of the
    /// write.
    #[test]
    fn reservation_grows_by_chunks_within_the_capacity() {
        let chunk = RESERVE_CHUNK_BYTES;
        assert_eq!(reservation_for(1, 64 * chunk), chunk);
        assert_eq!(reservation_for(chunk, 64 * chunk), chunk);
        assert_eq!(reservation_for(chunk + 1, 64 * chunk), 2 * chunk);
        assert_eq!(reservation_for(4000, 4096), 4096);
        assert_eq!(reservation_for(5000, 4096), 5000);
    }

    /// An append into a file shorter than its map reserves a chunk first, then writes: the file
    /// grows by whole chunks, the bytes read back through the map.
    #[test]
    fn appends_reserve_ahead_of_the_write_position() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("segment");
        let file = File::create_new(&path).unwrap();
        let capacity = 4 * RESERVE_CHUNK_BYTES;
        let mut writer = MapWriter::map(&file, &path, capacity, 0, 0).unwrap();
        drop(file);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        assert_eq!(
            writer.append(&[b"he", b"ad", b"", b"tail"]).unwrap(),
            Some(0)
        );
        assert_eq!(writer.reserved(), RESERVE_CHUNK_BYTES);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            RESERVE_CHUNK_BYTES as u64
        );
        let big = vec![7u8; RESERVE_CHUNK_BYTES];
        assert_eq!(writer.append(&[&big]).unwrap(), Some(8));
        assert_eq!(writer.reserved(), 2 * RESERVE_CHUNK_BYTES);
        let reader = writer.reader();
        reader.publish(writer.written());
        assert_eq!(reader.bytes(0, 8).unwrap(), b"headtail");
        assert_eq!(reader.bytes(8, 9).unwrap(), [7]);
    }
}
