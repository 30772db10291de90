//! The two security files of a data directory, `users.json` and `acls.json`: reading them,
//! changing them from the CLI while a server runs, and the server's live view of them.
//!
//! Why JSON files beside the data and not a server API: the issue asks for `fencelog user` and
//! `fencelog acl` to work on a data directory, also while a server owns it. So they do not take
//! the server's `fencelog.lock`; they serialize among themselves on a separate small lock
//! (`security.lock`) and replace a file atomically (temporary file, fsync, rename, directory
//! fsync), so the server reads the old or the new file, never a mix. The server notices a
//! change by the file's identity (inode, size, modification time), which a rename always
//! changes, checked at most every [`RELOAD_INTERVAL`] for ACLs and at every authentication for
//! users. A file that fails to parse while the server runs is logged and the last good version
//! kept; at start it is an error.

use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::storage::durable_file::write_durably;

/// Name of the users file in the data directory.
pub const USERS_FILE: &str = "users.json";
/// Name of the ACL file in the data directory.
pub const ACLS_FILE: &str = "acls.json";
/// Lock serializing changes to the security files (not the server's lock).
pub const SECURITY_LOCK_FILE: &str = "security.lock";
/// Longest a server goes without checking the ACL file for changes.
pub const RELOAD_INTERVAL: Duration = Duration::from_millis(500);
/// Largest security file read (a bound on what a corrupt or hostile file can make us allocate).
pub const MAX_SECURITY_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// A security file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SecurityFileError {
    /// Reading, writing or locking failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// The file is not valid JSON of the expected shape, or too large.
    #[error("{path} is not a valid fencelog security file ({reason}); fix or remove it")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The parser's complaint.
        reason: String,
    },
    /// A change was refused (an empty password, an invalid name, ...).
    #[error("{0}")]
    Refused(String),
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> SecurityFileError {
    let path = path.to_path_buf();
    move |source| SecurityFileError::Io {
        action,
        path,
        source,
    }
}

/// Reads a security file; a missing file is the default (empty) value.
pub fn read<T: DeserializeOwned + Default>(path: &Path) -> Result<T, SecurityFileError> {
    let bytes = match fs::metadata(path) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(T::default()),
        Err(error) => return Err(io_error("read", path)(error)),
        Ok(metadata) if metadata.len() > MAX_SECURITY_FILE_BYTES => {
            return Err(SecurityFileError::Invalid {
                path: path.to_path_buf(),
                reason: format!(
                    "{} bytes, more than the limit of {MAX_SECURITY_FILE_BYTES}",
                    metadata.len()
                ),
            })
        }
        Ok(_) => match fs::read(path) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(T::default()),
            other => other.map_err(io_error("read", path))?,
        },
    };
    serde_json::from_slice(&bytes).map_err(|error| SecurityFileError::Invalid {
        path: path.to_path_buf(),
        reason: error.to_string(),
    })
}

/// Changes the file `name` of `data_dir` under the security lock: reads it, applies `change`,
/// writes it back atomically and durably. Creates the directory if needed. Does not take the
/// server's lock, so it works while a server runs.
pub fn update<T, R>(
    data_dir: &Path,
    name: &str,
    change: impl FnOnce(&mut T) -> Result<R, SecurityFileError>,
) -> Result<R, SecurityFileError>
where
    T: DeserializeOwned + Serialize + Default,
{
    fs::create_dir_all(data_dir).map_err(io_error("create", data_dir))?;
    let lock_path = data_dir.join(SECURITY_LOCK_FILE);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io_error("open", &lock_path))?;
    lock.lock().map_err(io_error("lock", &lock_path))?;
    let path = data_dir.join(name);
    let mut value: T = read(&path)?;
    let result = change(&mut value)?;
    let mut contents = serde_json::to_vec_pretty(&value)
        .map_err(|error| SecurityFileError::Refused(format!("cannot encode {name}: {error}")))?;
    contents.push(b'\n');
    write_durably(data_dir, name, &contents).map_err(io_error("write", &path))?;
    drop(lock);
    Ok(result)
}

/// What tells one version of a file from the next: a rename gives a new inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    inode: u64,
    len: u64,
    modified: Option<SystemTime>,
}

fn identity(path: &Path) -> Option<Identity> {
    let metadata = fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&metadata);
    #[cfg(not(unix))]
    let inode = 0;
    Some(Identity {
        inode,
        len: metadata.len(),
        modified: metadata.modified().ok(),
    })
}

/// A server's view of one security file, reloaded when the file changes.
#[derive(Debug)]
pub struct LiveFile<T> {
    path: PathBuf,
    state: Mutex<LiveState<T>>,
}

#[derive(Debug)]
struct LiveState<T> {
    identity: Option<Identity>,
    checked_at: Instant,
    value: Arc<T>,
}

impl<T: DeserializeOwned + Default> LiveFile<T> {
    /// Reads the file now; a file that exists but does not parse is an error.
    pub fn open(path: PathBuf) -> Result<Self, SecurityFileError> {
        let identity = identity(&path);
        let value = read(&path)?;
        Ok(Self {
            path,
            state: Mutex::new(LiveState {
                identity,
                checked_at: Instant::now(),
                value: Arc::new(value),
            }),
        })
    }

    /// The current contents, checking the file for a change if the last check is older than
    /// `max_age` (zero: always).
    pub fn current(&self, max_age: Duration) -> Arc<T> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.checked_at.elapsed() < max_age {
            return Arc::clone(&state.value);
        }
        state.checked_at = Instant::now();
        let now = identity(&self.path);
        if now != state.identity {
            match read(&self.path) {
                Ok(value) => {
                    tracing::info!(path = %self.path.display(), "security file changed; reloaded");
                    state.value = Arc::new(value);
                    state.identity = now;
                }
                Err(error) => {
                    // Keep serving with the last good version; say so once per change.
                    tracing::warn!(%error, "security file not reloaded; keeping the previous version");
                    state.identity = now;
                }
            }
        }
        Arc::clone(&state.value)
    }
}

/// Opens `name` for reading only, checking that it parses (used by `list` commands).
pub fn open_read<T: DeserializeOwned + Default>(
    data_dir: &Path,
    name: &str,
) -> Result<T, SecurityFileError> {
    read(&data_dir.join(name))
}
