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
//! What we cannot enforce in code: another process truncating the file while it is mapped would
//! turn reads into SIGBUS. The server owns its data directory exclusively (a lock file), and the
//! files are preallocated to full length before they are mapped, so the mapping never extends past
//! the end of the file.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use memmap2::{MmapOptions, MmapRaw};

/// Allocates real disk blocks for `[0, len)` of `file`, so appends never hit a sparse hole (and a
/// full disk is reported when the segment is created, not as SIGBUS on a later write to the map).
#[allow(unsafe_code)]
pub fn preallocate(file: &File, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::other("segment too large"))?;
    // SAFETY: `fallocate` only reads its integer arguments; the descriptor is valid for the life
    // of `file`, which outlives the call.
    let result = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
    if result == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        // Filesystems without fallocate (tmpfs on old kernels, some overlays): fall back to
        // extending the file; the writes fault in pages anyway.
        Some(libc::EOPNOTSUPP) => file.set_len(len as u64),
        _ => Err(error),
    }
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
    /// The segment file, for `pwritev`.
    file: File,
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
    /// Maps `len` bytes of `file` (which must already be at least that long) for writing.
    /// `written` and `visible` start at `valid_len`: the recovered data is readable at once.
    pub fn map(file: &File, len: usize, valid_len: usize) -> io::Result<Self> {
        assert!(
            valid_len <= len,
            "valid length {valid_len} beyond map length {len}"
        );
        let raw = MmapOptions::new().len(len).map_raw(file)?;
        Ok(Self {
            inner: Arc::new(MapInner {
                raw,
                written: AtomicUsize::new(valid_len),
                visible: AtomicUsize::new(valid_len),
            }),
            file: file.try_clone()?,
        })
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

    /// Writes `head` followed by `tail` at the tail of the segment and returns the position they
    /// were written at, or `Ok(None)` if they do not fit. The bytes go in with `pwritev` on the
    /// file rather than a copy through the map: they land in the same page cache pages the map
    /// shows, but a write of whole pages does not first fault in and zero each page, which made
    /// copying into a fresh mapping several times slower than `pwrite`. Only after the write is
    /// complete does `written` move past it. On an error nothing counts as written (the bytes
    /// that did land lie beyond `written` and are overwritten by the next append).
    #[allow(unsafe_code)]
    pub fn append(&mut self, head: &[u8], tail: &[u8]) -> io::Result<Option<usize>> {
        let position = self.written();
        let total = head.len() + tail.len();
        let Some(end) = position
            .checked_add(total)
            .filter(|end| *end <= self.capacity())
        else {
            return Ok(None);
        };
        let mut done = 0;
        while done < total {
            let (first, second) = if done < head.len() {
                (&head[done..], tail)
            } else {
                (&tail[done - head.len()..], &[][..])
            };
            let vectors = [
                libc::iovec {
                    iov_base: first.as_ptr() as *mut libc::c_void,
                    iov_len: first.len(),
                },
                libc::iovec {
                    iov_base: second.as_ptr() as *mut libc::c_void,
                    iov_len: second.len(),
                },
            ];
            let offset = libc::off_t::try_from(position + done).map_err(io::Error::other)?;
            // SAFETY: both iovecs point into live slices of the stated lengths, which the kernel
            // only reads; the descriptor is valid for the life of `self.file`. The file range
            // written, `[position, end)`, is at or beyond `written >= visible`, so no reader holds
            // a slice of the mapped bytes it changes, and `&mut self` on the only writer means no
            // other write to the segment is in progress.
            let written =
                unsafe { libc::pwritev(self.file.as_raw_fd(), vectors.as_ptr(), 2, offset) };
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
        self.inner.written.store(end, Ordering::Release);
        Ok(Some(position))
    }
}

impl MapReader {
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
        // SAFETY: `[start, end)` is inside `[0, visible)`, which is never written again, and the
        // returned borrow keeps `self` (and so the mapping) alive.
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
