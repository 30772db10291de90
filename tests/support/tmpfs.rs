//! A small tmpfs mounted on a directory, for tests whose disk must be able to fill up on cue: a
//! broker's data directory on its own [`Tmpfs`] fills when [`Tmpfs::fill`] writes a filler file
//! into the space left, and has room again after [`Tmpfs::unfill`].
//!
//! Why a real file system rather than a failpoint: the server has no failpoint knob, and a full
//! tmpfs fails exactly the calls a full disk fails (a segment's preallocation, an index entry, a
//! checkpoint's rename) with `ENOSPC`, wherever they are in the code. Mounting needs root (the
//! test suite runs as root here and in CI); [`Tmpfs::mount`] says why when it cannot, and the
//! caller leaves its disk faults out.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The name of the file [`Tmpfs::fill`] writes at the top of the mount.
pub const FILLER_NAME: &str = "nemesis-filler";

/// A tmpfs of a fixed size mounted on a directory; unmounted (lazily) when dropped.
pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size_bytes` on `path` (created if missing). Fails with the reason
    /// (`mount` missing or not permitted).
    pub fn mount(path: &Path, size_bytes: u64) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(path).map_err(|error| format!("create {path:?}: {error}"))?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size_bytes}"))
            .arg("fencelog-test-tmpfs")
            .arg(path)
            .output()
            .map_err(|error| format!("cannot run mount: {error}"))?;
        if !output.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(Tmpfs {
            path: path.to_owned(),
        })
    }

    /// The mounted directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the filler file until the file system refuses more; returns the bytes it took.
    pub fn fill(&self) -> std::io::Result<u64> {
        let mut file = std::fs::File::create(self.path.join(FILLER_NAME))?;
        let chunk = vec![0x5au8; 64 * 1024];
        let mut written = 0u64;
        while file.write_all(&chunk).is_ok() {
            written += chunk.len() as u64;
        }
        // The last partial chunk: page by page.
        let page = &chunk[..4096];
        while file.write_all(page).is_ok() {
            written += page.len() as u64;
        }
        Ok(written)
    }

    /// Removes the filler file: the space is free again.
    pub fn unfill(&self) -> std::io::Result<()> {
        match std::fs::remove_file(self.path.join(FILLER_NAME)) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: detaches now even if something still holds a file open.
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}
