//! Small files replaced atomically and durably, directory syncs, and removals that tolerate a
//! file already gone.
//!
//! Several small files must survive a crash whole or not at all: the epoch checkpoint, the
//! recovery point, the broker's `topic.json`. They share one way of writing (temporary file,
//! fsync, rename, directory fsync), and every creation, rename or deletion of a segment needs the
//! directory fsync too, so both live here rather than with any one of their users.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

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

/// Removes the file at `path`; one that is not there is not an error (a crash, a retry, or a
/// rename before it got there).
pub fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}
