//! The users file (`DATA/users.json`): one SCRAM-SHA-256 credential per user name, never a
//! password, and the changes `fencelog user add|remove` make to it.
//!
//! ```json
//! {"format": 1, "users": {"alice": {"mechanism": "SCRAM-SHA-256", "iterations": 4096,
//!   "salt": "base64", "stored_key": "base64", "server_key": "base64"}}}
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde::{Deserialize, Serialize};

use super::files::{self, SecurityFileError, USERS_FILE};
use super::scram::{ScramCredential, DEFAULT_ITERATIONS, MECHANISM, MIN_ITERATIONS};

/// Longest user (principal) name, in bytes.
pub const MAX_USER_NAME_BYTES: usize = 128;
/// Longest password accepted, in bytes.
pub const MAX_PASSWORD_BYTES: usize = 1024;
/// The version of the file's layout this build writes and reads.
pub const USERS_FORMAT: u32 = 1;

/// The whole users file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserFile {
    /// Layout version ([`USERS_FORMAT`]).
    #[serde(default = "users_format")]
    pub format: u32,
    /// Credentials by user name.
    #[serde(default)]
    pub users: BTreeMap<String, StoredUser>,
}

fn users_format() -> u32 {
    USERS_FORMAT
}

/// One user's stored credential, base64 where binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredUser {
    /// Always `SCRAM-SHA-256` in this build.
    pub mechanism: String,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// Salt, base64.
    pub salt: String,
    /// `StoredKey`, base64.
    pub stored_key: String,
    /// `ServerKey`, base64.
    pub server_key: String,
}

impl StoredUser {
    /// The stored form of a credential.
    pub fn from_credential(credential: &ScramCredential) -> Self {
        Self {
            mechanism: MECHANISM.to_owned(),
            iterations: credential.iterations,
            salt: BASE64.encode(&credential.salt),
            stored_key: BASE64.encode(credential.stored_key),
            server_key: BASE64.encode(credential.server_key),
        }
    }

    /// The credential, or `None` if an entry was damaged by hand (treated as no such user).
    pub fn credential(&self) -> Option<ScramCredential> {
        if self.mechanism != MECHANISM || self.iterations < MIN_ITERATIONS {
            return None;
        }
        Some(ScramCredential {
            salt: BASE64.decode(&self.salt).ok()?,
            iterations: self.iterations,
            stored_key: BASE64.decode(&self.stored_key).ok()?.try_into().ok()?,
            server_key: BASE64.decode(&self.server_key).ok()?.try_into().ok()?,
        })
    }
}

/// Checks a user or principal name: 1 to [`MAX_USER_NAME_BYTES`] bytes of letters, digits and
/// `. _ - @`, so names survive shells, logs and SCRAM's own escaping unchanged.
pub fn validate_user_name(name: &str) -> Result<(), SecurityFileError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_USER_NAME_BYTES
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-' | b'@'));
    if valid {
        Ok(())
    } else {
        Err(SecurityFileError::Refused(format!(
            "invalid user name {name:?}: use 1 to {MAX_USER_NAME_BYTES} letters, digits, '.', '_', '-' or '@'"
        )))
    }
}

/// Adds `name` or replaces its password. Returns whether the user existed.
pub fn add_user(data_dir: &Path, name: &str, password: &str) -> Result<bool, SecurityFileError> {
    // The slow key derivation happens before the lock is taken.
    let stored = new_stored_user(name, password)?;
    files::update(data_dir, USERS_FILE, |file: &mut UserFile| {
        file.format = USERS_FORMAT;
        Ok(file.users.insert(name.to_owned(), stored).is_some())
    })
}

/// The stored credential of a new user `name` with `password`, after checking both (the name
/// by [`validate_user_name`], the password non-empty and at most [`MAX_PASSWORD_BYTES`]): what
/// every store of users (the data directory's file, a cluster's etcd) keeps.
pub fn new_stored_user(name: &str, password: &str) -> Result<StoredUser, SecurityFileError> {
    validate_user_name(name)?;
    if password.is_empty() {
        return Err(SecurityFileError::Refused(
            "refusing an empty password: set FENCELOG_PASSWORD or give --password-file".into(),
        ));
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(SecurityFileError::Refused(format!(
            "the password is longer than {MAX_PASSWORD_BYTES} bytes"
        )));
    }
    Ok(StoredUser::from_credential(&ScramCredential::new(
        password,
        DEFAULT_ITERATIONS,
    )))
}

/// Removes `name`. Returns whether it existed.
pub fn remove_user(data_dir: &Path, name: &str) -> Result<bool, SecurityFileError> {
    files::update(data_dir, USERS_FILE, |file: &mut UserFile| {
        Ok(file.users.remove(name).is_some())
    })
}

/// The user names, sorted.
pub fn list_users(data_dir: &Path) -> Result<Vec<String>, SecurityFileError> {
    let file: UserFile = files::open_read(data_dir, USERS_FILE)?;
    Ok(file.users.into_keys().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adding stores a credential that verifies the password and holds no trace of it; removing
    /// and listing see the change; an empty password is refused.
    #[test]
    fn users_are_added_listed_and_removed() {
        let directory = tempfile::tempdir().unwrap();
        assert!(!add_user(directory.path(), "alice", "s3cret-pw").unwrap());
        assert!(add_user(directory.path(), "alice", "other-pw").unwrap());
        add_user(directory.path(), "bob", "x").unwrap();
        assert_eq!(list_users(directory.path()).unwrap(), ["alice", "bob"]);
        let text = std::fs::read_to_string(directory.path().join(USERS_FILE)).unwrap();
        assert!(!text.contains("other-pw"));
        let file: UserFile = serde_json::from_str(&text).unwrap();
        let credential = file.users["alice"].credential().unwrap();
        let derived = ScramCredential::derive("other-pw", &credential.salt, credential.iterations);
        assert_eq!(derived, credential);
        assert!(add_user(directory.path(), "carol", "").is_err());
        assert!(add_user(directory.path(), "bad name", "x").is_err());
        assert!(remove_user(directory.path(), "alice").unwrap());
        assert!(!remove_user(directory.path(), "alice").unwrap());
        assert_eq!(list_users(directory.path()).unwrap(), ["bob"]);
    }
}
