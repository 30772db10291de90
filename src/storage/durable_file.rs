//! Small files replaced atomically and durably, directory syncs, and removals that tolerate a
//! file already gone.
//!
//! Several small files must survive a crash whole or not at all: the epoch checkpoint, the
//! recovery point, the broker's `topic.json`. They share one way of writing (temporary file,
//! fsync, rename, directory fsync), and every creation, rename or deletion of a segment needs the
//! directory fsync too, so both live here rather than with any one of their users.
//!
//! Every sync of storage's files (fsync, fdatasync, the segment maps' msync) and every write of a
//! segment passes [`before`] first: the one seam where unit tests make a chosen path fail with
//! `EIO` or `ENOSPC` ([`faults`], compiled into tests only), so that what storage does after a
//! failed sync is tested on the real code path rather than on a full disk alone. Outside tests
//! it does nothing.
//!
//! A failed [`write_durably`] is safe to call again: the retry writes the whole contents afresh
//! into a truncated temporary file and fsyncs that, and only a successful fsync is followed by
//! the rename. No page whose write-back failed is ever trusted by a later fsync (the PostgreSQL
//! "fsyncgate" lesson); the callers answer the failure and change nothing in memory.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Replaces `directory/name` with `contents` atomically and durably: writes `name.tmp`, fsyncs
/// it, renames it over `name` and fsyncs the directory. A crash leaves the old or the new
/// contents, never a mix.
pub fn write_durably(directory: &Path, name: &str, contents: &[u8]) -> io::Result<()> {
    let target = directory.join(name);
    let temporary = directory.join(format!("{name}.tmp"));
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temporary)?;
    before(FileOperation::Write, &target)?;
    file.write_all(contents)?;
    sync_file(&file, &target)?;
    drop(file);
    fs::rename(&temporary, &target)?;
    sync_directory(directory)
}

/// fsyncs a directory so that creations, renames and deletions in it survive a crash.
pub fn sync_directory(directory: &Path) -> io::Result<()> {
    sync_file(&File::open(directory)?, directory)
}

/// fsyncs `file`, found at `path` (which names it in a fault a test injected).
pub fn sync_file(file: &File, path: &Path) -> io::Result<()> {
    before(FileOperation::Sync, path)?;
    file.sync_all()
}

/// What storage is about to do to a file, for [`before`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOperation {
    /// Write bytes into it (a segment's append, a durable file's contents).
    Write,
    /// Sync it to the disk (fsync, fdatasync, msync of its map; a directory's fsync).
    Sync,
}

/// Called before every sync and segment write of `path`: the error a test injected for it, if
/// any ([`faults`]); nothing at all outside tests.
#[inline]
pub fn before(operation: FileOperation, path: &Path) -> io::Result<()> {
    #[cfg(test)]
    {
        faults::check(operation, path)
    }
    #[cfg(not(test))]
    {
        let _ = (operation, path);
        Ok(())
    }
}

/// Faults injected by tests: every [`before`] of an operation on a path under a chosen one
/// fails with a chosen OS error while the returned [`faults::Fault`] lives. A fault on a
/// partition's directory fails every file in it, like a failing device; one on a file fails that
/// file only. Tests in parallel do not meet each other's faults: each uses its own temporary
/// directory.
#[cfg(test)]
pub(crate) mod faults {
    use super::FileOperation;
    use std::io;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, PoisonError};

    struct Injected {
        id: u64,
        under: PathBuf,
        operation: FileOperation,
        errno: i32,
        hits: Arc<AtomicU64>,
    }

    static INJECTED: Mutex<Vec<Injected>> = Mutex::new(Vec::new());
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);

    /// An injected fault; dropping it removes it.
    #[derive(Debug)]
    pub(crate) struct Fault {
        id: u64,
        hits: Arc<AtomicU64>,
    }

    impl Fault {
        /// How many operations it failed so far.
        pub(crate) fn hits(&self) -> u64 {
            self.hits.load(Ordering::Acquire)
        }
    }

    impl Drop for Fault {
        fn drop(&mut self) {
            INJECTED
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|injected| injected.id != self.id);
        }
    }

    /// Makes every `operation` on `under` or a path below it fail with `errno` (`libc::EIO`,
    /// `libc::ENOSPC`) until the returned fault is dropped.
    pub(crate) fn inject(operation: FileOperation, under: &Path, errno: i32) -> Fault {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let hits = Arc::new(AtomicU64::new(0));
        INJECTED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Injected {
                id,
                under: under.to_path_buf(),
                operation,
                errno,
                hits: Arc::clone(&hits),
            });
        Fault { id, hits }
    }

    pub(super) fn check(operation: FileOperation, path: &Path) -> io::Result<()> {
        let injected = INJECTED.lock().unwrap_or_else(PoisonError::into_inner);
        match injected
            .iter()
            .find(|fault| fault.operation == operation && path.starts_with(&fault.under))
        {
            Some(fault) => {
                fault.hits.fetch_add(1, Ordering::AcqRel);
                Err(io::Error::from_raw_os_error(fault.errno))
            }
            None => Ok(()),
        }
    }
}

/// A directory whose changes are made durable later, many at a time: one fsync covers every
/// change noted before it began.
///
/// Why: a flush `never` partition rolls to a new segment file every few megabytes, under its
/// append lock. An fsync of the directory there (a disk cache flush, milliseconds on a virtual
/// disk) stalled the connection's appends at every roll: with 4 producers over 1,000 partitions
/// of 2 MiB segments, half the appends rolled and the CPUs idled a quarter of the time. Nothing
/// is promised durable under `never` until a segment is sealed, so the roll only notes its change
/// and the seal syncs the directory, once for all the changes noted since the last sync, before
/// it moves the recovery point past them.
#[derive(Debug)]
pub struct DeferredDirectorySync {
    directory: PathBuf,
    /// Changes noted so far (each after its rename or creation completed).
    noted: AtomicU64,
    /// Every change up to this one is durable.
    synced: AtomicU64,
    /// One fsync at a time: a second caller waits, then finds its change covered.
    syncing: Mutex<()>,
}

impl DeferredDirectorySync {
    /// No change noted yet, for `directory`.
    pub fn new(directory: &Path) -> Self {
        Self {
            directory: directory.to_path_buf(),
            noted: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            syncing: Mutex::new(()),
        }
    }

    /// The directory whose changes this makes durable.
    pub fn directory(&self) -> &Path {
        &self.directory
    }

    /// Notes a change made to the directory (call it *after* the change): returns its number,
    /// for [`sync_through`](Self::sync_through).
    pub fn note_change(&self) -> u64 {
        self.noted.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Makes change `change` and every earlier one durable: nothing when an fsync since has
    /// covered it, else one fsync covering every change noted so far. A directory that is gone
    /// (its partition was deleted) has nothing left to make durable.
    pub fn sync_through(&self, change: u64) -> io::Result<()> {
        if self.is_synced_through(change) {
            return Ok(());
        }
        let _one_at_a_time = self.syncing.lock().unwrap_or_else(PoisonError::into_inner);
        if self.is_synced_through(change) {
            return Ok(());
        }
        // Read before the fsync: every change counted here completed before it was counted.
        let covered = self.noted.load(Ordering::Acquire);
        match sync_directory(&self.directory) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
        self.synced.fetch_max(covered, Ordering::AcqRel);
        Ok(())
    }

    /// Whether change `change` is known durable.
    pub fn is_synced_through(&self, change: u64) -> bool {
        self.synced.load(Ordering::Acquire) >= change
    }

    /// Makes every change noted so far durable.
    pub fn sync_all(&self) -> io::Result<()> {
        self.sync_through(self.noted.load(Ordering::Acquire))
    }
}

/// fsyncs the file at `path`; one that is gone (retention deleted it, or its partition's
/// directory went) has nothing left to make durable.
pub fn sync_file_if_present(path: &Path) -> io::Result<()> {
    match File::open(path) {
        Ok(file) => sync_file(&file, path),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}

/// Removes the file at `path`; one that is not there is not an error (a crash, a retry, or a
/// rename before it got there).
pub fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

#[cfg(all(test, not(fencelog_loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_sync_covers_every_change_noted_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let deferred = DeferredDirectorySync::new(dir.path());
        let first = deferred.note_change();
        let second = deferred.note_change();
        assert_eq!((first, second), (1, 2));
        deferred.sync_through(first).unwrap();
        assert!(deferred.is_synced_through(second), "one sync covers both");
        let third = deferred.note_change();
        assert!(!deferred.is_synced_through(third));
        deferred.sync_all().unwrap();
        assert!(deferred.is_synced_through(third));
    }

    #[test]
    fn a_removed_directory_has_nothing_left_to_sync() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("partition-0");
        fs::create_dir(&gone).unwrap();
        let deferred = DeferredDirectorySync::new(&gone);
        let change = deferred.note_change();
        fs::remove_dir(&gone).unwrap();
        deferred.sync_through(change).unwrap();
    }
}
