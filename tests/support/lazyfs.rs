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
    backing: PathBuf,
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
            backing: backing.to_owned(),
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

impl LazyFs {
    /// Recovers a wedged mount, losing its unsynced writes as a power cut does: aborts the FUSE
    /// connection (every request waiting on it fails, so processes stuck in it can exit), kills
    /// LazyFS, unmounts and mounts the backing directory again. Only what LazyFS had flushed to
    /// the backing directory (what was fsync'd) is there afterwards.
    ///
    /// Why it is needed: LazyFS can deadlock. Its `write` takes a file's cache-item lock and then,
    /// in `getattr`, the cache's own lock, while an `fsync` of the same file, in its `getattr`,
    /// holds the cache's lock and waits for the item's (seen in the long nemesis run of issue 56:
    /// two LazyFS threads in `pthread_rwlock_wrlock`, one under `lfs_write`, one under
    /// `lfs_fsync`). Every later request under the mount then hangs, and a broker killed with
    /// `kill -9` never exits (its threads wait in the kernel for FUSE answers). LazyFS is a third
    /// party's tool shared by the projects here, so the fix is on this side.
    pub fn recover_wedged(&mut self) -> Result<(), String> {
        // Killing LazyFS closes its /dev/fuse, which aborts the connection too; the explicit
        // abort first is for a LazyFS that does not die at once. Where the FUSE control file
        // system cannot be mounted, the kill alone does it.
        if let Err(why) = abort_fuse_connection(&self.mount) {
            eprintln!(
                "lazyfs: could not abort the FUSE connection of {} ({why}); killing LazyFS alone",
                self.mount.display()
            );
        }
        let pid_file = PathBuf::from(format!("{}.pid", self.mount.display()));
        if let Ok(pid) = std::fs::read_to_string(&pid_file) {
            let _ = Command::new("kill").args(["-9", pid.trim()]).status();
        }
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        let _ = Command::new(tool_path())
            .arg("umount")
            .arg(&self.mount)
            .status();
        let remounted = LazyFs::mount(&self.backing, &self.mount)?;
        // The new mount is this one now; the old value must not unmount it when dropped.
        std::mem::forget(remounted);
        Ok(())
    }
}

/// Aborts the FUSE connection serving `mount` (`/sys/fs/fuse/connections/N/abort`, where N is
/// the mount's device number as `/proc/self/mountinfo` gives it: reading the mount itself would
/// hang), mounting the FUSE control file system first when it is not.
fn abort_fuse_connection(mount: &Path) -> Result<(), String> {
    let mount = std::fs::canonicalize(mount)
        .unwrap_or_else(|_| mount.to_owned())
        .display()
        .to_string();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|error| format!("read /proc/self/mountinfo: {error}"))?;
    // Fields: id, parent, major:minor, root, mount point, ...
    let device = mountinfo
        .lines()
        .rev()
        .map(|line| line.split(' ').collect::<Vec<_>>())
        .filter(|fields| fields.len() > 4 && fields[4] == mount)
        .filter_map(|fields| {
            let (major, minor) = fields[2].split_once(':')?;
            Some((major.parse::<u32>().ok()? << 20) | minor.parse::<u32>().ok()?)
        })
        .next()
        .ok_or_else(|| format!("{mount} is not mounted"))?;
    let connections = Path::new("/sys/fs/fuse/connections");
    if !connections.join(device.to_string()).exists() {
        let _ = Command::new("mount")
            .args(["-t", "fusectl", "none"])
            .arg(connections)
            .status();
    }
    let abort = connections.join(device.to_string()).join("abort");
    std::fs::write(&abort, b"1").map_err(|error| format!("write {}: {error}", abort.display()))
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
