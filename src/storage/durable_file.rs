//! Small files replaced atomically and durably, directory syncs, and removals that tolerate a
//! file already gone.
//!
//! Several small files must survive a crash whole or not at all: the epoch checkpoint, the
//! recovery point, the broker's `topic.json`. They share one way of writing (temporary file,
//! fsync, rename, directory fsync), and every creation, rename or deletion of a segment needs the
//! directory fsync too, so both live here rather than with any one of their users.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Replaces `directory/name` with `contents` atomically and durably: writes `name.tmp`, fsyncs
/// it, renames it over `name` and fsyncs the directory. A crash leaves the old or the new
/// contents, never a mix.
pub fn write_durably(directory: &Path, name: &str, contents: &[u8]) -> io::Result<()> {
    let temporary = directory.join(format!("{name}.tmp"));
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temporary)?;
    file.write_all(contents)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&temporary, directory.join(name))?;
    sync_directory(directory)
}

/// fsyncs a directory so that creations, renames and deletions in it survive a crash.
pub fn sync_directory(directory: &Path) -> io::Result<()> {
    File::open(directory)?.sync_all()
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
        Ok(file) => file.sync_all(),
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
