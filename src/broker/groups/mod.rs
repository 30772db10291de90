//! Committed offsets of consumer groups: where each group has read up to in each partition,
//! stored durably by the broker so a consumer can stop and resume where it left off.
//!
//! The store is protocol-neutral: the native listener's `OffsetCommit`/`OffsetFetch` and the
//! Kafka listener's APIs of the same names call the same methods. It does not know partitions
//! either: whether a topic partition exists and where its high watermark is are the service's
//! checks ([`crate::broker::BrokerService::commit_offset`]).
//!
//! Durability: a commit is acknowledged only after the file holding its group has been replaced
//! durably (temporary file, fsync, rename, directory fsync: [`write_durably`]). A crash leaves
//! the old file or the new one, never a mix; each file also carries a CRC, so a damaged file is
//! refused as a whole ([`GroupOffsetsError::Corrupt`]) rather than read as wrong offsets.
//!
//! Groups are spread over bucket files by a hash of their name (see [`bucket_file`]), and each
//! bucket has its own lock: commits of different groups write different files concurrently;
//! commits of one group are serialized, each rewriting the group's file.
//!
//! * [`config`] holds the limits.
//! * [`error`] holds [`GroupOffsetsError`].
//! * [`bucket_file`] is the file format.
//! * [`membership`] keeps the classic groups' membership (generation, members, assignments)
//!   next to the offsets, in the format of [`membership_file`].

pub mod bucket_file;
pub mod config;
pub mod error;
pub mod membership;
pub mod membership_file;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tracing::{info, warn};

use crate::storage::durable_file::{sync_directory, write_durably};
pub use bucket_file::PartitionKey;
use bucket_file::{BucketGroups, GroupEntries};
pub use config::{
    GroupOffsetsConfig, DEFAULT_MAX_GROUPS, DEFAULT_MAX_GROUP_NAME_BYTES,
    DEFAULT_MAX_METADATA_BYTES, DEFAULT_MAX_OFFSETS_PER_GROUP,
};
pub use error::GroupOffsetsError;

/// Name of the store's directory inside the broker's data directory.
pub const GROUPS_DIRECTORY: &str = "groups";
/// Largest bucket file the store reads; anything longer is refused as damaged. Far above what
/// the default limits let a bucket reach (about 17 MiB).
pub const MAX_BUCKET_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// Committed offsets of one group, by topic and partition.
pub type PartitionCommits = Vec<(PartitionKey, CommittedOffset)>;

/// A committed offset: the offset of the next record the group will read, and a free-form note
/// the committer stored with it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommittedOffset {
    /// The offset of the next record to read.
    pub offset: u64,
    /// What the committer stored with it (empty if nothing).
    pub metadata: String,
}

impl CommittedOffset {
    /// An offset with no metadata.
    pub fn at(offset: u64) -> Self {
        Self {
            offset,
            metadata: String::new(),
        }
    }
}

/// One bucket's groups and whether its file could be read.
#[derive(Debug, Default)]
struct Bucket {
    groups: BucketGroups,
    /// Why the file failed its check on open: the bucket then refuses every request, so a
    /// damaged file is neither served nor overwritten with a partial picture.
    damaged: Option<String>,
}

/// The committed offsets of every group, in the `groups/` directory of a data directory.
#[derive(Debug)]
pub struct GroupOffsets {
    directory: PathBuf,
    config: GroupOffsetsConfig,
    buckets: Mutex<HashMap<u64, Arc<Mutex<Bucket>>>>,
    group_count: AtomicUsize,
}

impl GroupOffsets {
    /// Opens (creating if needed) the store in `directory`, reading every bucket file. A file
    /// that fails its check does not stop the broker: its groups answer
    /// [`GroupOffsetsError::Corrupt`] until it is repaired or removed. Leftover temporary files
    /// (a commit interrupted by a crash, never acknowledged) are ignored.
    pub fn open(directory: &Path, config: GroupOffsetsConfig) -> Result<Self, GroupOffsetsError> {
        config
            .validate()
            .map_err(GroupOffsetsError::InvalidConfig)?;
        let context = |what: &str| io_context(format!("{what} {}", directory.display()));
        fs::create_dir_all(directory).map_err(context("create"))?;
        if let Some(parent) = directory.parent() {
            sync_directory(parent).map_err(context("sync the parent of"))?;
        }
        let mut buckets = HashMap::new();
        let mut group_count = 0;
        for entry in fs::read_dir(directory).map_err(context("list"))? {
            let entry = entry.map_err(context("list"))?;
            let Some(bucket) = entry
                .file_name()
                .to_str()
                .and_then(bucket_file::parse_file_name)
            else {
                continue;
            };
            let loaded = Self::load(&entry.path(), bucket)?;
            group_count += loaded.groups.len();
            buckets.insert(bucket, Arc::new(Mutex::new(loaded)));
        }
        info!(directory = %directory.display(), groups = group_count, "committed offsets opened");
        Ok(Self {
            directory: directory.to_path_buf(),
            config,
            buckets: Mutex::new(buckets),
            group_count: AtomicUsize::new(group_count),
        })
    }

    fn load(path: &Path, bucket: u64) -> Result<Bucket, GroupOffsetsError> {
        let damaged = |reason: String| {
            warn!(path = %path.display(), %reason, "committed offsets file is damaged");
            Ok(Bucket {
                groups: BucketGroups::new(),
                damaged: Some(reason),
            })
        };
        let length = fs::metadata(path)
            .map_err(io_context(format!("read {}", path.display())))?
            .len();
        if length > MAX_BUCKET_FILE_BYTES {
            return damaged(format!(
                "{length} bytes is more than the {MAX_BUCKET_FILE_BYTES} a bucket file can be"
            ));
        }
        let bytes = fs::read(path).map_err(io_context(format!("read {}", path.display())))?;
        match bucket_file::decode(bucket, &bytes) {
            Ok(groups) => Ok(Bucket {
                groups,
                damaged: None,
            }),
            Err(reason) => damaged(reason),
        }
    }

    /// The store's limits.
    pub fn config(&self) -> &GroupOffsetsConfig {
        &self.config
    }

    /// How many groups hold committed offsets.
    pub fn group_count(&self) -> usize {
        self.group_count.load(Ordering::Acquire)
    }

    /// Commits `committed` for `group` on `topic/partition`, durably: when this returns `Ok`
    /// the offset survives a crash. Blocking (fsyncs): call it off the async runtime.
    pub fn commit(
        &self,
        group: &str,
        topic: &str,
        partition: u32,
        committed: CommittedOffset,
    ) -> Result<(), GroupOffsetsError> {
        self.commit_all(group, vec![((topic.to_string(), partition), committed)])
    }

    /// Commits several partitions' offsets of one group in one durable write (all or none).
    /// Blocking (fsyncs): call it off the async runtime.
    pub fn commit_all(
        &self,
        group: &str,
        offsets: PartitionCommits,
    ) -> Result<(), GroupOffsetsError> {
        self.check_group(group)?;
        for ((topic, _), committed) in &offsets {
            check_topic(topic)?;
            self.check_metadata(&committed.metadata)?;
        }
        let bucket_number = bucket_file::bucket_of(group);
        let bucket = self.bucket(bucket_number);
        let mut bucket = bucket.lock().expect("group offsets bucket lock poisoned");
        self.check_damage(&bucket, bucket_number)?;
        let mut groups = bucket.groups.clone();
        let is_new_group = !groups.contains_key(group);
        let entries: &mut GroupEntries = groups.entry(group.to_string()).or_default();
        for (key, committed) in offsets {
            entries.insert(key, committed);
        }
        if entries.len() > self.config.max_offsets_per_group {
            return Err(GroupOffsetsError::TooManyOffsets {
                group: group.to_string(),
                max: self.config.max_offsets_per_group,
            });
        }
        if is_new_group {
            self.reserve_group()?;
        }
        let name = bucket_file::file_name(bucket_number);
        let written = write_durably(&self.directory, &name, &bucket_file::encode(&groups));
        if let Err(source) = written {
            if is_new_group {
                self.group_count.fetch_sub(1, Ordering::AcqRel);
            }
            return Err(GroupOffsetsError::Io {
                context: format!(
                    "write committed offsets {}",
                    self.directory.join(&name).display()
                ),
                source,
            });
        }
        bucket.groups = groups;
        Ok(())
    }

    /// Forgets every group's committed offsets of each topic for which `is_gone` says so (a
    /// deleted topic, as Kafka does), rewriting each bucket file that held one, durably; a group
    /// left with no offsets is forgotten too. Returns how many offsets were forgotten. Damaged
    /// buckets are left as they are (they refuse every request until repaired anyway). Blocking
    /// (fsyncs): call it off the async runtime.
    pub fn forget_topics(
        &self,
        is_gone: impl Fn(&str) -> bool,
    ) -> Result<usize, GroupOffsetsError> {
        let buckets: Vec<(u64, Arc<Mutex<Bucket>>)> = self
            .buckets
            .lock()
            .expect("group offsets buckets lock poisoned")
            .iter()
            .map(|(number, bucket)| (*number, Arc::clone(bucket)))
            .collect();
        let mut forgotten = 0;
        for (bucket_number, bucket) in buckets {
            let mut bucket = bucket.lock().expect("group offsets bucket lock poisoned");
            if bucket.damaged.is_some() {
                continue;
            }
            let mut groups = bucket.groups.clone();
            let mut removed_here = 0;
            for entries in groups.values_mut() {
                let before = entries.len();
                entries.retain(|(topic, _), _| !is_gone(topic));
                removed_here += before - entries.len();
            }
            if removed_here == 0 {
                continue;
            }
            let groups_before = groups.len();
            groups.retain(|_, entries| !entries.is_empty());
            let emptied = groups_before - groups.len();
            let name = bucket_file::file_name(bucket_number);
            write_durably(&self.directory, &name, &bucket_file::encode(&groups)).map_err(
                |source| GroupOffsetsError::Io {
                    context: format!(
                        "write committed offsets {}",
                        self.directory.join(&name).display()
                    ),
                    source,
                },
            )?;
            bucket.groups = groups;
            self.group_count.fetch_sub(emptied, Ordering::AcqRel);
            forgotten += removed_here;
        }
        Ok(forgotten)
    }

    /// Deletes `group`'s committed offsets of `partitions`, or with `None` every one of them
    /// (the group is then forgotten), durably. Returns how many were deleted (0 if the group
    /// had none of them: nothing is written). Blocking (fsyncs): call it off the async runtime.
    pub fn delete(
        &self,
        group: &str,
        partitions: Option<&[PartitionKey]>,
    ) -> Result<usize, GroupOffsetsError> {
        self.check_group(group)?;
        let bucket_number = bucket_file::bucket_of(group);
        let bucket = self.bucket(bucket_number);
        let mut bucket = bucket.lock().expect("group offsets bucket lock poisoned");
        self.check_damage(&bucket, bucket_number)?;
        let mut groups = bucket.groups.clone();
        let Some(entries) = groups.get_mut(group) else {
            return Ok(0);
        };
        let before = entries.len();
        match partitions {
            None => entries.clear(),
            Some(keys) => {
                for key in keys {
                    entries.remove(key);
                }
            }
        }
        let deleted = before - entries.len();
        if deleted == 0 {
            return Ok(0);
        }
        let emptied = entries.is_empty();
        if emptied {
            groups.remove(group);
        }
        let name = bucket_file::file_name(bucket_number);
        write_durably(&self.directory, &name, &bucket_file::encode(&groups)).map_err(|source| {
            GroupOffsetsError::Io {
                context: format!(
                    "write committed offsets {}",
                    self.directory.join(&name).display()
                ),
                source,
            }
        })?;
        bucket.groups = groups;
        if emptied {
            self.group_count.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(deleted)
    }

    /// The offset `group` committed for `topic/partition`, if any.
    pub fn committed(
        &self,
        group: &str,
        topic: &str,
        partition: u32,
    ) -> Result<Option<CommittedOffset>, GroupOffsetsError> {
        self.check_group(group)?;
        let key = (topic.to_string(), partition);
        self.read_group(group, |entries| {
            entries.and_then(|entries| entries.get(&key).cloned())
        })
    }

    /// Every offset `group` committed, by topic and partition (for APIs that fetch a whole
    /// group's offsets at once).
    pub fn committed_all(&self, group: &str) -> Result<PartitionCommits, GroupOffsetsError> {
        self.check_group(group)?;
        self.read_group(group, |entries| {
            entries
                .map(|entries| entries.clone().into_iter().collect())
                .unwrap_or_default()
        })
    }

    /// The names of every group holding committed offsets, sorted (for admin listings). Groups
    /// of a damaged bucket file are not listed: they answer [`GroupOffsetsError::Corrupt`] when
    /// asked for by name. At most [`GroupOffsetsConfig::max_groups`] names.
    pub fn group_names(&self) -> Vec<String> {
        let buckets: Vec<Arc<Mutex<Bucket>>> = self
            .buckets
            .lock()
            .expect("group offsets buckets lock poisoned")
            .values()
            .cloned()
            .collect();
        let mut names = Vec::new();
        for bucket in buckets {
            let bucket = bucket.lock().expect("group offsets bucket lock poisoned");
            if bucket.damaged.is_none() {
                names.extend(bucket.groups.keys().cloned());
            }
        }
        names.sort_unstable();
        names
    }

    /// Whether `group` holds committed offsets (false for a group of a damaged bucket file).
    pub fn has_group(&self, group: &str) -> bool {
        self.read_group(group, |entries| entries.is_some())
            .unwrap_or(false)
    }

    fn read_group<T>(
        &self,
        group: &str,
        read: impl FnOnce(Option<&GroupEntries>) -> T,
    ) -> Result<T, GroupOffsetsError> {
        let bucket_number = bucket_file::bucket_of(group);
        let Some(bucket) = self
            .buckets
            .lock()
            .expect("group offsets buckets lock poisoned")
            .get(&bucket_number)
            .cloned()
        else {
            return Ok(read(None));
        };
        let bucket = bucket.lock().expect("group offsets bucket lock poisoned");
        self.check_damage(&bucket, bucket_number)?;
        Ok(read(bucket.groups.get(group)))
    }

    fn bucket(&self, bucket_number: u64) -> Arc<Mutex<Bucket>> {
        let mut buckets = self
            .buckets
            .lock()
            .expect("group offsets buckets lock poisoned");
        Arc::clone(buckets.entry(bucket_number).or_default())
    }

    fn reserve_group(&self) -> Result<(), GroupOffsetsError> {
        let max = self.config.max_groups;
        self.group_count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |count| {
                (count < max).then_some(count + 1)
            })
            .map(|_| ())
            .map_err(|_| GroupOffsetsError::TooManyGroups { max })
    }

    fn check_damage(&self, bucket: &Bucket, bucket_number: u64) -> Result<(), GroupOffsetsError> {
        match &bucket.damaged {
            None => Ok(()),
            Some(reason) => Err(GroupOffsetsError::Corrupt {
                path: self.directory.join(bucket_file::file_name(bucket_number)),
                reason: reason.clone(),
            }),
        }
    }

    /// Refuses a group name the store cannot hold (empty, or past its limit).
    pub fn check_group(&self, group: &str) -> Result<(), GroupOffsetsError> {
        self.config.check_group(group)
    }

    fn check_metadata(&self, metadata: &str) -> Result<(), GroupOffsetsError> {
        let max = self.config.max_metadata_bytes;
        if metadata.len() > max {
            return Err(GroupOffsetsError::MetadataTooLarge {
                bytes: metadata.len(),
                max,
            });
        }
        Ok(())
    }
}

fn check_topic(topic: &str) -> Result<(), GroupOffsetsError> {
    let max = config::MAX_STORED_STRING_BYTES;
    if topic.is_empty() || topic.len() > max {
        return Err(GroupOffsetsError::InvalidTopicName {
            bytes: topic.len(),
            max,
        });
    }
    Ok(())
}

fn io_context(context: String) -> impl FnOnce(std::io::Error) -> GroupOffsetsError {
    move |source| GroupOffsetsError::Io { context, source }
}

#[cfg(test)]
mod tests;
