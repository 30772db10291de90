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

/// Where the shared tool lives: `FENCELOG_LAZYFS_TOOL` when set, else beside the project at
/// `../shared/tools/lazyfs` (in CI and in the main checkout), or beside a folder further up (a
/// git worktree kept in a subfolder of the one that holds `shared/`).
pub fn tool_path() -> PathBuf {
    if let Some(path) = std::env::var_os("FENCELOG_LAZYFS_TOOL") {
        return PathBuf::from(path);
    }
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
    /// there first (`kill -9`) and wait for it to exit: a power cut stops it too, a write after
    /// the cut would be a write after the power came back, and the dirty pages of its memory
    /// maps reach LazyFS as the maps are torn down at its exit.
    pub fn power_cut(&self) -> Result<(), String> {
        // The tool hands the fault to LazyFS through a FIFO and returns at once, and LazyFS
        // says nothing once it is done (it logs to its standard output, which FUSE sends to
        // /dev/null when it goes to the background). So a canary tells: an unsynced write
        // that the cut drops with everything else, in one step under LazyFS's cache lock.
        let canary = self.mount.join(CANARY);
        std::fs::write(&canary, CANARY_TEXT)
            .map_err(|error| format!("cannot write the canary {}: {error}", canary.display()))?;
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
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::fs::read(&canary).is_ok_and(|text| text == CANARY_TEXT) {
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "LazyFS still holds the unsynced {} 30 s after the cut",
                    canary.display()
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::fs::remove_file(&canary).map_err(|error| format!("remove the canary: {error}"))
    }
}

/// The file [`LazyFs::power_cut`] writes, unsynced, at the top of the mount, and watches vanish.
const CANARY: &str = ".power-cut-canary";
const CANARY_TEXT: &[u8] = b"written after the last sync";

impl Drop for LazyFs {
    fn drop(&mut self) {
        let _ = Command::new(tool_path())
            .arg("umount")
            .arg(&self.mount)
            .status();
    }
}
