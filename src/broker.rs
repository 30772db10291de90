//! The broker: topics and their partitions, the lease table, and the data directory they live in.
//!
//! It is the shared state of the server (a cheap `Arc` handed to every connection), and the one
//! place that turns a lease grant into an installed epoch: [`Broker::acquire_lease`] asks the
//! lease table for a grant whose install step is [`Partition::install_epoch`], so the epoch is
//! durable and enforced by the segment writer before the grant is returned to anyone.
//!
//! Layout of the data directory:
//!
//! ```text
//! DATA/fencelog.lock                 held (flock) while a server owns the directory
//! DATA/topics/NAME/topic.json        the topic's settings (written temp + fsync + rename)
//! DATA/topics/NAME/P/                partition P: segments, indexes, epoch-checkpoint
//! ```

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tracing::info;

use crate::lease::{EpochInstaller, Grant, LeaseConfig, LeaseError, LeaseTable, Renewed};
use crate::protocol::TopicConfig;
use crate::storage::durable_file::write_durably;
use crate::storage::{Partition, PartitionConfig, SealWorker, StorageError};

/// Most partitions a topic may have.
pub const MAX_PARTITIONS_PER_TOPIC: u32 = 1024;
/// Most topics a broker holds.
pub const MAX_TOPICS: usize = 10_000;
/// Longest topic name, in bytes.
pub const MAX_TOPIC_NAME_BYTES: usize = 200;
/// Name of the lock file in the data directory.
pub const LOCK_FILE: &str = "fencelog.lock";
const TOPIC_FILE: &str = "topic.json";

/// Errors of broker operations; each maps to one wire error code.
#[derive(Debug, Error)]
pub enum BrokerError {
    /// No topic of that name.
    #[error("unknown topic {0:?}")]
    UnknownTopic(String),
    /// The topic has fewer partitions.
    #[error("topic {topic:?} has no partition {partition} (it has {count})")]
    UnknownPartition {
        /// Topic.
        topic: String,
        /// Partition asked for.
        partition: u32,
        /// Partitions the topic has.
        count: u32,
    },
    /// A topic of that name exists.
    #[error("topic {0:?} already exists")]
    TopicExists(String),
    /// Bad topic name or settings.
    #[error("invalid topic config: {0}")]
    InvalidConfig(String),
    /// A storage failure.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A lease failure.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The data directory is in use by another process.
    #[error("data directory {0} is in use by another fencelog process")]
    Locked(PathBuf),
    /// Filesystem trouble with the data directory itself.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
}

fn io_error(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BrokerError {
    let context = context.into();
    move |source| BrokerError::Io { context, source }
}

/// What `topic.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TopicFile {
    partitions: u32,
    config: TopicConfig,
}

/// One topic: its settings and partitions.
#[derive(Debug)]
pub struct Topic {
    name: String,
    config: TopicConfig,
    partitions: Vec<Arc<Partition>>,
}

impl Topic {
    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Its settings.
    pub fn config(&self) -> &TopicConfig {
        &self.config
    }
    /// Its partitions, by index.
    pub fn partitions(&self) -> &[Arc<Partition>] {
        &self.partitions
    }
}

/// Settings of a broker.
#[derive(Debug, Clone, Default)]
pub struct BrokerConfig {
    /// Lease TTL bounds.
    pub lease: LeaseConfig,
}

/// Topics, partitions and leases of one data directory.
#[derive(Debug)]
pub struct Broker {
    data_dir: PathBuf,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    leases: LeaseTable,
    /// Serializes topic creation so two creates of one name cannot both write files.
    create_lock: std::sync::Mutex<()>,
    /// When each `interval` partition was last synced.
    interval_syncs: std::sync::Mutex<HashMap<String, Instant>>,
    /// Seals the full segments of every partition of this broker.
    seal_worker: SealWorker,
    _lock_file: File,
}

/// Installs epochs in a partition on behalf of the lease table.
struct PartitionInstaller<'a>(&'a Partition);

impl EpochInstaller for PartitionInstaller<'_> {
    type Error = StorageError;
    fn current_epoch(&self) -> u64 {
        self.0.current_epoch()
    }
    fn install_epoch(&self, epoch: u64) -> Result<(), StorageError> {
        self.0.install_epoch(epoch)
    }
}

/// A `LEASE_LOST` answer says where the partition is now. The lease table only knows the epochs
/// it granted since the server started (none after a restart), so the partition's installed
/// epoch, which is durable, is the floor of what is reported.
fn with_partition_epoch(error: LeaseError, partition: &Partition) -> BrokerError {
    match error {
        LeaseError::Lost {
            topic,
            partition: index,
            current_epoch,
        } => BrokerError::Lease(LeaseError::Lost {
            topic,
            partition: index,
            current_epoch: current_epoch.max(partition.current_epoch()),
        }),
        other => BrokerError::Lease(other),
    }
}

/// Checks a topic name: 1 to 200 bytes of `[A-Za-z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), BrokerError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_TOPIC_NAME_BYTES
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(BrokerError::InvalidConfig(format!(
            "topic name {name:?} must be 1 to {MAX_TOPIC_NAME_BYTES} characters of [A-Za-z0-9._-] and not . or .."
        )))
    }
}

/// The storage settings a topic's partitions get.
pub fn partition_config(config: &TopicConfig) -> PartitionConfig {
    PartitionConfig {
        segment_bytes: config.segment_bytes,
        flush: config.flush,
        retention_bytes: config.retention_bytes,
        retention_ms: config.retention_ms,
        seal_delay: match config.flush {
            crate::protocol::FlushPolicy::Never => crate::storage::config::NEVER_SEAL_DELAY,
            _ => std::time::Duration::ZERO,
        },
        ..PartitionConfig::default()
    }
}

impl Broker {
    /// Opens the data directory (creating it if needed), takes its lock, and opens every topic,
    /// recovering each partition's log.
    pub fn open(data_dir: &Path, config: BrokerConfig) -> Result<Self, BrokerError> {
        fs::create_dir_all(data_dir.join("topics")).map_err(io_error(format!(
            "create data directory {}",
            data_dir.display()
        )))?;
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(data_dir.join(LOCK_FILE))
            .map_err(io_error("open lock file"))?;
        lock_file
            .try_lock()
            .map_err(|_| BrokerError::Locked(data_dir.to_path_buf()))?;
        let seal_worker = SealWorker::start().map_err(io_error("start the seal thread"))?;
        let mut topics = HashMap::new();
        let topics_dir = data_dir.join("topics");
        for entry in fs::read_dir(&topics_dir).map_err(io_error("list topics"))? {
            let entry = entry.map_err(io_error("list topics"))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let path = entry.path().join(TOPIC_FILE);
            if validate_topic_name(&name).is_err() || !path.exists() {
                continue;
            }
            let text =
                fs::read_to_string(&path).map_err(io_error(format!("read {}", path.display())))?;
            let file: TopicFile = serde_json::from_str(&text).map_err(|error| {
                BrokerError::InvalidConfig(format!("{}: {error}", path.display()))
            })?;
            let topic = Self::open_topic(
                &topics_dir,
                &name,
                file.partitions,
                file.config,
                &seal_worker,
            )?;
            topics.insert(name, Arc::new(topic));
        }
        info!(data_dir = %data_dir.display(), topics = topics.len(), "broker opened");
        Ok(Self {
            data_dir: data_dir.to_path_buf(),
            topics: RwLock::new(topics),
            leases: LeaseTable::new(config.lease),
            create_lock: std::sync::Mutex::new(()),
            interval_syncs: std::sync::Mutex::new(HashMap::new()),
            seal_worker,
            _lock_file: lock_file,
        })
    }

    fn open_topic(
        topics_dir: &Path,
        name: &str,
        partitions: u32,
        config: TopicConfig,
        seal_worker: &SealWorker,
    ) -> Result<Topic, BrokerError> {
        let storage = partition_config(&config);
        let partitions = (0..partitions)
            .map(|index| {
                let directory = topics_dir.join(name).join(index.to_string());
                Partition::open(&format!("{name}/{index}"), &directory, storage, seal_worker)
                    .map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Topic {
            name: name.to_string(),
            config,
            partitions,
        })
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Creates a topic durably: its settings file is written and fsynced before it is announced.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        config: TopicConfig,
    ) -> Result<Arc<Topic>, BrokerError> {
        validate_topic_name(name)?;
        if !(1..=MAX_PARTITIONS_PER_TOPIC).contains(&partitions) {
            return Err(BrokerError::InvalidConfig(format!(
                "partitions {partitions} is outside 1..={MAX_PARTITIONS_PER_TOPIC}"
            )));
        }
        partition_config(&config)
            .validate()
            .map_err(BrokerError::InvalidConfig)?;
        let _serialized = self.create_lock.lock().expect("create lock poisoned");
        {
            let topics = self.topics.read().expect("topics lock poisoned");
            if topics.contains_key(name) {
                return Err(BrokerError::TopicExists(name.to_string()));
            }
            if topics.len() >= MAX_TOPICS {
                return Err(BrokerError::InvalidConfig(format!(
                    "the broker already has the maximum of {MAX_TOPICS} topics"
                )));
            }
        }
        let topics_dir = self.data_dir.join("topics");
        let topic_dir = topics_dir.join(name);
        fs::create_dir_all(&topic_dir).map_err(io_error("create topic directory"))?;
        let topic = Self::open_topic(&topics_dir, name, partitions, config, &self.seal_worker)?;
        let file = serde_json::to_vec_pretty(&TopicFile { partitions, config })
            .expect("topic config serializes");
        write_durably(&topic_dir, TOPIC_FILE, &file).map_err(io_error("write topic.json"))?;
        crate::storage::durable_file::sync_directory(&topics_dir)
            .map_err(io_error("sync topics directory"))?;
        let topic = Arc::new(topic);
        self.topics
            .write()
            .expect("topics lock poisoned")
            .insert(name.to_string(), Arc::clone(&topic));
        info!(topic = name, partitions, ?config, "created topic");
        Ok(topic)
    }

    /// A topic by name.
    pub fn topic(&self, name: &str) -> Result<Arc<Topic>, BrokerError> {
        self.topics
            .read()
            .expect("topics lock poisoned")
            .get(name)
            .cloned()
            .ok_or_else(|| BrokerError::UnknownTopic(name.to_string()))
    }

    /// All topics, sorted by name.
    pub fn topics(&self) -> Vec<Arc<Topic>> {
        let mut topics: Vec<_> = self
            .topics
            .read()
            .expect("topics lock poisoned")
            .values()
            .cloned()
            .collect();
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        topics
    }

    /// One partition of a topic.
    pub fn partition(&self, topic: &str, partition: u32) -> Result<Arc<Partition>, BrokerError> {
        let found = self.topic(topic)?;
        found
            .partitions
            .get(partition as usize)
            .cloned()
            .ok_or(BrokerError::UnknownPartition {
                topic: topic.to_string(),
                partition,
                count: found.partitions.len() as u32,
            })
    }

    /// Grants the partition's lease if it has no live one: installs `current + 1` durably in
    /// the partition's writer, then returns the grant. Blocking (fsync): call from a blocking
    /// context.
    pub fn acquire_lease(
        &self,
        topic: &str,
        partition: u32,
        holder: &str,
        ttl_ms: u64,
        now: Instant,
    ) -> Result<Grant, BrokerError> {
        let target = self.partition(topic, partition)?;
        Ok(self.leases.acquire(
            topic,
            partition,
            holder,
            ttl_ms,
            &PartitionInstaller(&target),
            now,
        )?)
    }

    /// Extends a live lease.
    pub fn renew_lease(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
        now: Instant,
    ) -> Result<Renewed, BrokerError> {
        let target = self.partition(topic, partition)?;
        self.leases
            .renew(topic, partition, lease_id, now)
            .map_err(|error| with_partition_epoch(error, &target))
    }

    /// Ends a live lease at once.
    pub fn release_lease(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
        now: Instant,
    ) -> Result<(), BrokerError> {
        let target = self.partition(topic, partition)?;
        self.leases
            .release(topic, partition, lease_id, now)
            .map_err(|error| with_partition_epoch(error, &target))
    }

    /// The lease table (for metadata and tests).
    pub fn leases(&self) -> &LeaseTable {
        &self.leases
    }

    /// Syncs every partition (shutdown). Returns the first error after trying them all.
    pub fn sync_all(&self) -> Result<(), BrokerError> {
        let mut first_error = None;
        for topic in self.topics() {
            for partition in &topic.partitions {
                if let Err(error) = partition.sync() {
                    tracing::error!(partition = partition.name(), %error, "sync failed");
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(()), |error| Err(error.into()))
    }

    /// Syncs each partition whose flush policy is `interval` and whose interval has passed since
    /// its last sync (the server calls this on a short timer).
    pub fn sync_due_interval_partitions(&self, now: Instant) {
        let mut last_syncs = self.interval_syncs.lock().expect("interval lock poisoned");
        for topic in self.topics() {
            let crate::protocol::FlushPolicy::Interval { interval_ms } = topic.config.flush else {
                continue;
            };
            for partition in &topic.partitions {
                let last = last_syncs
                    .entry(partition.name().to_string())
                    .or_insert(now);
                if now.duration_since(*last).as_millis() < u128::from(interval_ms) {
                    continue;
                }
                *last = now;
                if let Err(error) = partition.sync() {
                    tracing::error!(partition = partition.name(), %error, "interval sync failed");
                }
            }
        }
    }

    /// Applies retention to every partition.
    pub fn enforce_retention(&self, now_ms: i64) {
        for topic in self.topics() {
            for partition in &topic.partitions {
                if let Err(error) = partition.enforce_retention(now_ms) {
                    tracing::error!(partition = partition.name(), %error, "retention failed");
                }
            }
        }
    }
}

/// loom model at the server boundary: a lease grant racing the old holder's produce, through the
/// same broker and partition code the request handlers call (only the fence's lock and atomic
/// are modeled; file I/O runs for real in a temporary directory per iteration). Run with
/// `RUSTFLAGS="--cfg fencelog_loom" cargo test --release --lib loom_`.
#[cfg(all(test, fencelog_loom))]
mod loom_models {
    use super::*;
    use crate::batch::BatchBuilder;
    use crate::protocol::FlushPolicy;
    use crate::storage::FenceError;

    fn batch(epoch: u64, value: &str) -> bytes::Bytes {
        let mut builder = BatchBuilder::new(epoch);
        builder.push(1, None, Some(value.as_bytes()));
        builder.finish()
    }

    /// Holder A (epoch 1) appends while holder B is granted the lease: after the grant returns,
    /// A's append cannot land. Either A's batch is before the offset where epoch 2 starts, or A
    /// was fenced with epoch 1 < current 2.
    #[test]
    fn loom_grant_races_old_holder_append() {
        loom::model(|| {
            let directory = tempfile::tempdir().unwrap();
            let broker = Broker::open(directory.path(), BrokerConfig::default()).unwrap();
            let config = TopicConfig {
                segment_bytes: 4096,
                flush: FlushPolicy::Never,
                retention_bytes: None,
                retention_ms: None,
            };
            broker.create_topic("t", 1, config).unwrap();
            let now = Instant::now();
            let first = broker.acquire_lease("t", 0, "a", 100, now).unwrap();
            assert_eq!(first.epoch, 1);
            let broker = loom::sync::Arc::new(broker);
            let old_holder = {
                let broker = loom::sync::Arc::clone(&broker);
                loom::thread::spawn(move || {
                    let partition = broker.partition("t", 0).unwrap();
                    partition
                        .append(&batch(1, "a"))
                        .map(|appended| appended.base_offset)
                })
            };
            // A's lease has expired by B's clock: B is granted epoch 2.
            let later = now + std::time::Duration::from_millis(200);
            let grant = broker.acquire_lease("t", 0, "b", 100, later).unwrap();
            assert_eq!(grant.epoch, 2);
            let partition = broker.partition("t", 0).unwrap();
            let epoch_two_starts = partition.epoch_history().last().unwrap().1;
            let old_result = old_holder.join().unwrap();
            match old_result {
                Ok(offset) => assert!(
                    offset < epoch_two_starts,
                    "stale batch at {offset} after epoch 2 began at {epoch_two_starts}"
                ),
                Err(StorageError::Fence(error)) => {
                    assert_eq!(
                        error,
                        FenceError::Fenced {
                            epoch: 1,
                            current: 2
                        }
                    )
                }
                Err(other) => panic!("unexpected error {other}"),
            }
            partition.append(&batch(2, "b")).unwrap();
            let read = partition.read(0, 1 << 20).unwrap();
            let records = crate::batch::decode_batches(read.batches.concat().into()).unwrap();
            assert!(records
                .windows(2)
                .all(|pair| pair[0].epoch <= pair[1].epoch));
        });
    }
}
