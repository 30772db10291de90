//! A directory on LazyFS, for tests that cut the power: [`LazyFs::mount`] serves a backing
//! directory through LazyFS's own page cache, and [`LazyFs::power_cut`] drops every write that
//! was not fsync'd, as a power cut, a kernel panic or a VM host failure does.
//!
//! Why LazyFS rather than `kill -9`: a killed process leaves its writes in the kernel's page
//! cache, so a restart finds everything the broker wrote, synced or not. A power cut loses the
//! unsynced part, and that is where logs lose acknowledged data. The mounting, building and
//! fault injection are the project's shared tool (`../shared/tools/lazyfs`, beside the
//! project); this module only drives it. It needs root, `/dev/fuse` and the tool (which builds
//! LazyFS once, installing its build dependencies when missing): [`LazyFs::mount`] says why
//! when it cannot, and the caller skips (or, with `CI=true`, fails).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the shared tool lives: beside the project, at `../shared/tools/lazyfs` (in CI and in
/// the main checkout), or beside a folder further up (a git worktree kept in a subfolder of the
/// one that holds `shared/`).
pub fn tool_path() -> PathBuf {
    let project = Path::new(env!("CARGO_MANIFEST_DIR"));
    project
        .ancestors()
        .skip(1)
        .map(|folder| folder.join("shared/tools/lazyfs"))
        .find(|tool| tool.exists())
        .unwrap_or_else(|| project.join("../shared/tools/lazyfs"))
}

/// A LazyFS mount; unmounted (and its process stopped) when dropped. The backing directory
/// keeps what LazyFS flushed to it.
pub struct LazyFs {
    mount: PathBuf,
}

impl LazyFs {
    /// Serves `backing`'s files at `mount` (both created) through LazyFS. Fails with the reason:
    /// the tool missing, no `/dev/fuse`, not root, or LazyFS not building or not mounting.
    pub fn mount(backing: &Path, mount: &Path) -> Result<LazyFs, String> {
        let tool = tool_path();
        if !tool.exists() {
            return Err(format!("the LazyFS tool is not at {}", tool.display()));
        }
        if !Path::new("/dev/fuse").exists() {
            return Err("no /dev/fuse: LazyFS needs FUSE".into());
        }
        let output = Command::new(&tool)
            .arg("mount")
            .arg(backing)
            .arg(mount)
            .output()
            .map_err(|error| format!("cannot run {}: {error}", tool.display()))?;
        if !output.status.success() {
            return Err(format!(
                "lazyfs mount failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(LazyFs {
            mount: mount.to_owned(),
        })
    }

    /// Mounts, or skips the test: `None` with a note when LazyFS cannot run here, a panic when
    /// `CI` is `true` (where it must run).
    pub fn mount_or_skip(test: &str, backing: &Path, mount: &Path) -> Option<LazyFs> {
        match LazyFs::mount(backing, mount) {
            Ok(lazyfs) => Some(lazyfs),
            Err(why) if std::env::var("CI").as_deref() == Ok("true") => {
                panic!("{test}: LazyFS is required when CI=true: {why}")
            }
            Err(why) => {
                eprintln!("{test}: skipped: {why}");
                None
            }
        }
    }

    /// The mounted directory: put the broker's data directory here.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Loses every write under the mount that was not fsync'd, now. Kill the process writing
    /// there first (`kill -9`): a power cut stops it too, and a write after the cut would be a
    /// write after the power came back.
    ///
    /// How the cut is known to have happened: LazyFS logs "cache is cleared", but its log is a
    /// buffered stdout redirected to a file and may not show the line for a long while, so a
    /// probe file is written (not synced) under the mount first; once a fresh open reads it
    /// short, LazyFS has dropped its cache (it clears under a lock that every operation takes).
    pub fn power_cut(&self) -> Result<(), String> {
        let log = PathBuf::from(format!("{}.lazyfs.log", self.mount.display()));
        let cleared = || {
            std::fs::read_to_string(&log)
                .map(|text| text.matches(CLEARED).count())
                .unwrap_or(0)
        };
        let probe = self.mount.join(PROBE_NAME);
        std::fs::write(&probe, PROBE_BYTES)
            .map_err(|error| format!("cannot write the probe {probe:?}: {error}"))?;
        let probe_dropped =
            || std::fs::read(&probe).is_ok_and(|bytes| bytes.len() < PROBE_BYTES.len());
        let before = cleared();
        let output = Command::new(tool_path())
            .arg("crash")
            .arg(&self.mount)
            .output()
            .map_err(|error| format!("cannot run the LazyFS tool: {error}"))?;
        if !output.status.success() {
            return Err(format!(
                "lazyfs crash failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        // The tool hands the fault to LazyFS through a FIFO and returns at once.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while cleared() <= before && !probe_dropped() {
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "LazyFS neither logged {CLEARED:?} ({log:?}) nor dropped the probe {probe:?} \
                     within 30 s"
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Ok(())
    }
}

/// The file [`LazyFs::power_cut`] writes (unsynced) under the mount to see the cut happen.
pub const PROBE_NAME: &str = ".lazyfs-power-probe";

/// What the probe holds until the cut drops it.
const PROBE_BYTES: &[u8] = b"written, never synced: a power cut drops this";

/// What LazyFS logs once a `clear-cache` fault has dropped every unsynced write.
const CLEARED: &str = "cache is cleared";

impl Drop for LazyFs {
    fn drop(&mut self) {
        let _ = Command::new(tool_path())
            .arg("umount")
            .arg(&self.mount)
            .status();
    }
}
