//! The classic groups of a standalone broker, kept in `DATA/groups/` next to their committed
//! offsets, so that a restart keeps every stable group stable in its generation (Kafka keeps
//! them in `__consumer_offsets`; a cluster of fencelog brokers does too, see
//! [`crate::broker::offsets_topic`]).
//!
//! The coordinator hands each change to [`GroupMemberships::save`] (through its
//! [`GroupStore`] writer, one write at a time and in order); the bucket file holding the group
//! is replaced durably before `save` returns. [`GroupMemberships::open`] reads every file at
//! start: a file that fails its checks (torn, damaged) is dropped with a warning, and its
//! groups' members get `UNKNOWN_MEMBER_ID` and rejoin, as they did before groups were durable;
//! it never stops the broker. A data directory without these files (written by an older
//! fencelog) opens with no groups.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use tracing::{info, warn};

use super::bucket_file::bucket_of;
use super::membership_file::{self, BucketMemberships, MAX_MEMBERSHIP_FILE_BYTES};
use crate::broker::coordinator::{GroupSnapshot, GroupStore};
use crate::storage::durable_file::{remove_if_present, sync_directory, write_durably};

/// The groups' membership files of one data directory.
#[derive(Debug)]
pub struct GroupMemberships {
    directory: PathBuf,
    /// What each bucket file holds now (buckets without groups have no file and no entry).
    buckets: Mutex<HashMap<u64, BucketMemberships>>,
}

impl GroupMemberships {
    /// Reads every membership file in `directory` (which the committed offsets store has
    /// created) and returns the store and the groups it holds. Damaged files are skipped with a
    /// warning; only a directory that cannot be listed is an error.
    pub fn open(directory: &Path) -> std::io::Result<(Self, Vec<(String, GroupSnapshot)>)> {
        let mut buckets = HashMap::new();
        let mut loaded = Vec::new();
        for entry in fs::read_dir(directory)? {
            let entry = entry?;
            let Some(bucket) = entry
                .file_name()
                .to_str()
                .and_then(membership_file::parse_file_name)
            else {
                continue;
            };
            let path = entry.path();
            match read(&path, bucket) {
                Ok(groups) => {
                    loaded.extend(groups.iter().map(|(id, group)| (id.clone(), group.clone())));
                    buckets.insert(bucket, groups);
                }
                Err(reason) => warn!(
                    path = %path.display(), %reason,
                    "group membership file is damaged: its groups are dropped and their members rejoin"
                ),
            }
        }
        info!(directory = %directory.display(), groups = loaded.len(), "group memberships loaded");
        let store = Self {
            directory: directory.to_path_buf(),
            buckets: Mutex::new(buckets),
        };
        Ok((store, loaded))
    }
}

fn read(path: &Path, bucket: u64) -> Result<BucketMemberships, String> {
    let length = fs::metadata(path).map_err(|error| error.to_string())?.len();
    if length > MAX_MEMBERSHIP_FILE_BYTES as u64 {
        return Err(format!(
            "{length} bytes is more than the {MAX_MEMBERSHIP_FILE_BYTES} a membership file can be"
        ));
    }
    let bytes = fs::read(path).map_err(|error| error.to_string())?;
    membership_file::decode(bucket, &bytes)
}

impl GroupStore for GroupMemberships {
    fn save(&self, group_id: &str, snapshot: &GroupSnapshot) -> Result<(), String> {
        let bucket = bucket_of(group_id);
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let mut groups = buckets.get(&bucket).cloned().unwrap_or_default();
        match snapshot.members.is_empty() {
            true => groups.remove(group_id),
            false => groups.insert(group_id.to_owned(), snapshot.clone()),
        };
        let name = membership_file::file_name(bucket);
        let context = |error: std::io::Error| {
            format!("write {}: {error}", self.directory.join(&name).display())
        };
        if groups.is_empty() {
            remove_if_present(&self.directory.join(&name)).map_err(context)?;
            sync_directory(&self.directory).map_err(context)?;
            buckets.remove(&bucket);
            return Ok(());
        }
        let contents = membership_file::encode(&groups)?;
        write_durably(&self.directory, &name, &contents).map_err(context)?;
        buckets.insert(bucket, groups);
        Ok(())
    }
}
