//! The broker: topics and their partitions in one data directory, and the service every listener
//! calls.
//!
//! * [`Broker`] (this file): the data directory, its lock, and the topics and partitions in it.
//! * [`service`]: [`BrokerService`], the protocol-neutral operations (produce, fetch, leases,
//!   topic admin, metadata) that the native listener, and next the Kafka listener, translate to.
//! * [`produce_queue`]: a connection's produces appended in request order, off its socket task.
//! * [`spliced_produce`]: a produce whose batch is spliced from the producer's socket into the
//!   segment file (the one-copy produce path).
//! * [`maintenance`]: interval syncs and retention on their timers.
//! * [`topic_file`]: the versioned on-disk form of a topic's settings (`topic.json`).
//! * [`producer_ids`]: producer ids for idempotent appends, unique across restarts.
//! * [`coordinator`]: consumer-group membership (Kafka's classic group protocol), for the Kafka
//!   listener's group APIs.
//! * [`error`]: [`BrokerError`], one variant per thing a client can be told.
//! * [`epoch_floors`]: the fence floors of deleted topics, so a re-created topic fences every
//!   holder of the old one.
//! * [`transactions`]: Kafka transactions' coordinator state, per transactional id.
//! * [`groups`]: committed offsets of consumer groups ([`GroupOffsets`]), protocol-neutral.
//!
//! Layout of the data directory:
//!
//! ```text
//! DATA/fencelog.lock                 held (flock) while a server owns the directory
//! DATA/producer-id-block             first producer id not yet reserved (see producer_ids)
//! DATA/topics/NAME/topic.json        the topic's settings (written temp + fsync + rename)
//! DATA/topics/NAME/P/                partition P: segments, indexes, epoch-checkpoint
//! DATA/groups/HASH.offsets           committed offsets of the groups whose name hashes to HASH
//! DATA/transactions/HEX.json         one transactional id's state (transactions::store)
//! DATA/epoch-floors                  highest epoch of each deleted topic name (epoch_floors)
//! DATA/deleted/NAME.SUFFIX/          a deleted topic's files, removed in the background; a
//!                                    leftover (a crash before removal) is removed on open
//! ```

pub mod appender;
mod blocking;
pub mod cluster;
pub mod consumer_groups;
pub mod coordinator;
pub mod epoch_floors;
pub mod error;
pub mod group_service;
pub mod groups;
pub mod lease_service;
pub mod maintenance;
pub mod offsets_topic;
pub mod partition_opener;
pub mod produce_path;
pub mod produce_queue;
pub mod producer_ids;
pub mod reads;
pub mod service;
pub mod shutdown;
pub mod spliced_produce;
pub mod topic_admin;
mod topic_changes;
pub mod topic_file;
pub mod transaction_state;
pub mod transactions;
pub mod verifier;

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use tracing::info;

pub(crate) use blocking::blocking;
pub use error::BrokerError;
pub use group_service::{CommitBound, GroupService, OffsetCommits, OffsetToCommit};
pub use groups::{CommittedOffset, GroupOffsets, GroupOffsetsConfig, GroupOffsetsError};
pub use produce_path::{ProducePath, ProduceRequest};
pub use reads::{FetchRequest, PartitionOffsets, ReadPath};
pub use service::BrokerService;
pub use topic_admin::{TopicAdmin, TopicConfigChangeFn};

pub use coordinator::{CoordinatorConfig, GroupCoordinator};

use crate::domain::{ConfigError, FlushPolicy, TopicConfig};
use crate::lease::LeaseConfig;
use crate::storage::durable_file::write_durably;
use crate::storage::{Partition, PartitionConfig, SealWorker};
use error::io_error;

/// Most partitions a topic may have. Empty partitions cost no disk and no open descriptor, and
/// a restart opens them in parallel without reading their data.
pub const MAX_PARTITIONS_PER_TOPIC: u32 = 10_000;
/// Most topics a broker holds.
pub const MAX_TOPICS: usize = 10_000;
/// Longest topic name, in bytes.
pub const MAX_TOPIC_NAME_BYTES: usize = 200;
/// Name of the lock file in the data directory.
pub const LOCK_FILE: &str = "fencelog.lock";
/// Directory of the data directory where deleted topics wait for their removal.
pub const DELETED_DIRECTORY: &str = "deleted";
use topic_file::{TopicFile, TOPIC_FILE};

/// One partition of a topic as the broker holds it.
#[derive(Debug, Clone)]
pub enum PartitionSlot {
    /// Open and served.
    Open(Arc<Partition>),
    /// It failed to open at startup (the reason); its requests are answered with
    /// [`BrokerError::PartitionUnavailable`] while the others are served.
    Unavailable(Arc<str>),
}

impl PartitionSlot {
    /// The partition, if it is open.
    pub fn open(&self) -> Option<&Arc<Partition>> {
        match self {
            PartitionSlot::Open(partition) => Some(partition),
            PartitionSlot::Unavailable(_) => None,
        }
    }
}

/// One topic: its settings and partitions.
#[derive(Debug)]
pub struct Topic {
    name: String,
    config: TopicConfig,
    partitions: Vec<PartitionSlot>,
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
    /// Its partitions, by index (open or unavailable).
    pub fn partitions(&self) -> &[PartitionSlot] {
        &self.partitions
    }
    /// Its open partitions.
    pub fn open_partitions(&self) -> impl Iterator<Item = &Arc<Partition>> {
        self.partitions.iter().filter_map(PartitionSlot::open)
    }
}

/// Settings of a broker.
#[derive(Debug, Clone, Default)]
pub struct BrokerConfig {
    /// Lease TTL bounds (of the local lease authority the service creates).
    pub lease: LeaseConfig,
    /// Timings and limits of the consumer-group coordinator (the Kafka listener's groups).
    pub coordinator: CoordinatorConfig,
    /// This broker's node id (`serve --node-id`), the one id every listener reports.
    pub node_id: crate::domain::NodeId,
}

impl BrokerConfig {
    /// Checks the lease bounds and the coordinator's limits.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.lease.validate()?;
        self.coordinator.validate()
    }
}

/// Topics and partitions of one data directory.
#[derive(Debug)]
pub struct Broker {
    /// Checks unscanned sealed segments in the background; first, so that it stops (and lets
    /// go of its partitions) before anything else of the broker is dropped.
    _verifier: verifier::Verifier,
    data_dir: PathBuf,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    /// Serializes topic creation so two creates of one name cannot both write files.
    create_lock: std::sync::Mutex<()>,
    /// When each `interval` partition was last synced.
    interval_syncs: std::sync::Mutex<HashMap<String, Instant>>,
    /// Seals the full segments of every partition of this broker.
    seal_worker: SealWorker,
    /// Hands out producer ids for idempotent appends.
    producer_ids: producer_ids::ProducerIds,
    /// Committed offsets of consumer groups.
    group_offsets: GroupOffsets,
    /// The classic groups' membership, next to their offsets (used standalone).
    group_memberships: Arc<groups::membership::GroupMemberships>,
    /// The memberships read at open, until the group coordinator takes them.
    loaded_memberships: std::sync::Mutex<Vec<(String, coordinator::GroupSnapshot)>>,
    /// The fence floors of deleted topic names (behind `create_lock` for writes).
    epoch_floors: std::sync::Mutex<epoch_floors::EpochFloors>,
    _lock_file: File,
}

/// What [`Broker::delete_topic`] did; the files are left to [`DeletedTopic::remove_files`].
#[derive(Debug)]
#[must_use = "the deleted topic's files are removed by `remove_files`"]
pub struct DeletedTopic {
    /// The topic's name.
    pub name: String,
    /// Its partitions.
    pub partitions: u32,
    /// The highest epoch any of its partitions installed: the name's fence floor now.
    pub floor: u64,
    /// Where its files wait for removal (under `DATA/deleted/`).
    pub files: PathBuf,
}

impl DeletedTopic {
    /// Removes the deleted topic's files (blocking: run it off the async workers). A failure is
    /// logged, not returned: the delete is already durable, and the next open removes what is
    /// left under `DATA/deleted/`.
    pub fn remove_files(&self) {
        match fs::remove_dir_all(&self.files) {
            Ok(()) => {
                info!(topic = %self.name, path = %self.files.display(), "removed the deleted topic's files")
            }
            Err(error) => {
                tracing::warn!(topic = %self.name, path = %self.files.display(), %error, "could not remove the deleted topic's files; the next start removes them")
            }
        }
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

/// Checks that topic `topic` may grow from `current` to `requested` partitions (the new total):
/// partitions only ever grow (a partition's records cannot move elsewhere, and keyed producers
/// count on the partition of a key), up to `max` (the broker's or the cluster's limit).
pub fn check_partition_growth(
    topic: &str,
    current: u32,
    requested: u32,
    max: u32,
) -> Result<(), BrokerError> {
    if requested <= current {
        return Err(BrokerError::InvalidPartitions(format!(
            "topic {topic:?} has {current} partitions and would have {requested}: partitions \
             can only be added, so ask for a total above {current}"
        )));
    }
    if requested > max {
        return Err(BrokerError::InvalidPartitions(format!(
            "topic {topic:?} would have {requested} partitions; a topic has at most {max} here"
        )));
    }
    Ok(())
}

/// The partitions of topic `name` to open.
fn open_jobs(
    topics_dir: &Path,
    name: &str,
    partitions: u32,
    config: &TopicConfig,
) -> Vec<partition_opener::OpenJob> {
    let storage = partition_config(config, partitions);
    (0..partitions)
        .map(|index| partition_opener::OpenJob {
            name: format!("{name}/{index}"),
            directory: topics_dir.join(name).join(index.to_string()),
            config: storage,
        })
        .collect()
}

/// The storage settings the partitions of a topic of `partitions` partitions get.
pub fn partition_config(config: &TopicConfig, partitions: u32) -> PartitionConfig {
    PartitionConfig {
        segment_bytes: config.segment_bytes,
        flush: config.flush,
        retention_bytes: config.retention_bytes,
        retention_ms: config.retention_ms,
        seal_delay: match config.flush {
            FlushPolicy::Never => crate::storage::config::NEVER_SEAL_DELAY,
            _ => std::time::Duration::ZERO,
        },
        segment_file_reuse: crate::storage::spare::SegmentFileReuse::for_topic(
            partitions,
            config.segment_bytes,
        ),
        ..PartitionConfig::default()
    }
}

/// How long [`Broker::open`] waits for the data directory's lock before answering
/// [`BrokerError::Locked`]. Not for a second server (it gets `Locked` after this wait): a
/// process that spawns children holds the lock a moment after it let go of it, because a child
/// between its fork and its exec holds a copy of every descriptor of its parent, close-on-exec
/// ones included, and with it the lock. A broker closed and opened again in a process that
/// spawns processes (a test suite, an application embedding the broker) would otherwise fail now
/// and then.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Takes the data directory's lock, retrying for up to [`LOCK_WAIT`].
fn lock_directory(lock_file: &std::fs::File, data_dir: &Path) -> Result<(), BrokerError> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match lock_file.try_lock() {
            Ok(()) => return Ok(()),
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(_) => return Err(BrokerError::Locked(data_dir.to_path_buf())),
        }
    }
}

impl Broker {
    /// Opens the data directory (creating it if needed), takes its lock, and opens every topic,
    /// recovering each partition's log.
    pub fn open(data_dir: &Path) -> Result<Self, BrokerError> {
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
        lock_directory(&lock_file, data_dir)?;
        let seal_worker = SealWorker::start().map_err(io_error("start the seal thread"))?;
        let producer_ids = producer_ids::ProducerIds::open(data_dir)
            .map_err(io_error("read producer id block"))?;
        let mut found = Vec::new();
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
            let file = TopicFile::parse(&text).map_err(|error| {
                BrokerError::InvalidConfig(format!("{}: {error}", path.display()))
            })?;
            found.push((name, file.partitions, file.config()));
        }
        let started = Instant::now();
        let jobs: Vec<_> = found
            .iter()
            .flat_map(|(name, partitions, config)| {
                open_jobs(&topics_dir, name, *partitions, config)
            })
            .collect();
        let mut opened = partition_opener::open_all(&jobs, &seal_worker).into_iter();
        let mut topics = HashMap::new();
        let mut unscanned = Vec::new();
        let mut unavailable = 0;
        for (name, partitions, config) in found {
            let slots = (0..partitions)
                .map(|index| match opened.next().expect("one result per job") {
                    Ok((partition, report)) => {
                        if report.segments_opened_lazily > 0 {
                            unscanned.push(Arc::downgrade(&partition));
                        }
                        PartitionSlot::Open(partition)
                    }
                    Err(error) => {
                        unavailable += 1;
                        tracing::error!(partition = %format!("{name}/{index}"), %error, "partition could not be opened; it answers PARTITION_UNAVAILABLE until the cause is fixed and the server restarted");
                        PartitionSlot::Unavailable(error.to_string().into())
                    }
                })
                .collect();
            let topic = Topic {
                name: name.clone(),
                config,
                partitions: slots,
            };
            topics.insert(name, Arc::new(topic));
        }
        info!(
            partitions = jobs.len(),
            unavailable,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "opened partitions"
        );
        let verifier = verifier::Verifier::start(unscanned);
        let group_offsets = GroupOffsets::open(
            &data_dir.join(groups::GROUPS_DIRECTORY),
            GroupOffsetsConfig::default(),
        )?;
        let (group_memberships, loaded_memberships) =
            groups::membership::GroupMemberships::open(&data_dir.join(groups::GROUPS_DIRECTORY))
                .map_err(io_error("read the group memberships"))?;
        let epoch_floors = epoch_floors::EpochFloors::open(data_dir)
            .map_err(io_error("read the epoch floors of deleted topics"))?;
        if Self::purge_deleted(data_dir)? {
            // A delete was interrupted after its rename: its committed offsets may remain.
            let forgotten = group_offsets.forget_topics(|topic| !topics.contains_key(topic))?;
            info!(forgotten, "forgot committed offsets of deleted topics");
        }
        info!(data_dir = %data_dir.display(), topics = topics.len(), "broker opened");
        Ok(Self {
            _verifier: verifier,
            data_dir: data_dir.to_path_buf(),
            topics: RwLock::new(topics),
            create_lock: std::sync::Mutex::new(()),
            interval_syncs: std::sync::Mutex::new(HashMap::new()),
            seal_worker,
            producer_ids,
            group_offsets,
            group_memberships: Arc::new(group_memberships),
            loaded_memberships: std::sync::Mutex::new(loaded_memberships),
            epoch_floors: std::sync::Mutex::new(epoch_floors),
            _lock_file: lock_file,
        })
    }

    /// Removes what deleted topics left under `DATA/deleted/` (a crash before their background
    /// removal) and returns whether there was anything.
    fn purge_deleted(data_dir: &Path) -> Result<bool, BrokerError> {
        let deleted = data_dir.join(DELETED_DIRECTORY);
        let entries = match fs::read_dir(&deleted) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(error) => return Err(io_error("list deleted topics")(error)),
        };
        let mut found = false;
        for entry in entries {
            let path = entry.map_err(io_error("list deleted topics"))?.path();
            found = true;
            Self::remove_leftover(&path)?;
            info!(path = %path.display(), "removed a deleted topic's leftover files");
        }
        Ok(found)
    }

    /// Removes one entry of `DATA/deleted/`. The previous broker's background removal
    /// ([`DeletedTopic::remove_files`]) may still be running on the same files (a broker
    /// restarted inside one process), so an entry that vanishes under us is not an error: a
    /// `NotFound` means someone else removed part of it, and the walk is retried until the entry
    /// is gone or fails for another reason.
    fn remove_leftover(path: &Path) -> Result<(), BrokerError> {
        const ATTEMPTS: usize = 8;
        let mut attempt = 0;
        loop {
            let removed = match fs::symlink_metadata(path) {
                Ok(metadata) if metadata.is_dir() => fs::remove_dir_all(path),
                Ok(_) => fs::remove_file(path),
                Err(error) => Err(error),
            };
            match removed {
                Ok(()) => return Ok(()),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    attempt += 1;
                    if !path.exists() {
                        return Ok(());
                    }
                    if attempt >= ATTEMPTS {
                        return Err(io_error(format!("remove {}", path.display()))(error));
                    }
                }
                Err(error) => return Err(io_error(format!("remove {}", path.display()))(error)),
            }
        }
    }

    /// A producer id never handed out before by this data directory (for `InitProducerId`).
    pub fn allocate_producer_id(&self) -> Result<i64, BrokerError> {
        self.producer_ids
            .allocate()
            .map_err(io_error("reserve producer ids"))
    }

    /// Opens every partition of a new topic (in parallel); any failure fails the creation.
    fn open_topic(
        topics_dir: &Path,
        name: &str,
        partitions: u32,
        config: TopicConfig,
        seal_worker: &SealWorker,
    ) -> Result<Topic, BrokerError> {
        let jobs = open_jobs(topics_dir, name, partitions, &config);
        let partitions = partition_opener::open_all(&jobs, seal_worker)
            .into_iter()
            .map(|opened| opened.map(|(partition, _)| PartitionSlot::Open(partition)))
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

    /// The committed offsets of consumer groups.
    pub fn group_offsets(&self) -> &GroupOffsets {
        &self.group_offsets
    }

    /// The classic groups' membership store (a standalone coordinator writes to it).
    pub fn group_memberships(&self) -> &Arc<groups::membership::GroupMemberships> {
        &self.group_memberships
    }

    /// The memberships read when the broker opened; empty after the first call (one
    /// coordinator restores them).
    pub fn take_loaded_memberships(&self) -> Vec<(String, coordinator::GroupSnapshot)> {
        std::mem::take(
            &mut *self
                .loaded_memberships
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
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
        match found.partitions.get(partition as usize) {
            Some(PartitionSlot::Open(open)) => Ok(Arc::clone(open)),
            Some(PartitionSlot::Unavailable(reason)) => Err(BrokerError::PartitionUnavailable {
                topic: topic.to_string(),
                partition,
                reason: reason.to_string(),
            }),
            None => Err(BrokerError::UnknownPartition {
                topic: topic.to_string(),
                partition,
                count: found.partitions.len() as u32,
            }),
        }
    }

    /// Syncs every partition (shutdown). Returns the first error after trying them all.
    pub fn sync_all(&self) -> Result<(), BrokerError> {
        let mut first_error = None;
        for topic in self.topics() {
            for partition in topic.open_partitions() {
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
            let FlushPolicy::Interval { interval_ms } = topic.config.flush else {
                continue;
            };
            for partition in topic.open_partitions() {
                let last = last_syncs
                    .entry(partition.name().to_string())
                    .or_insert(now);
                // A partition whose disk failed it was reported once and syncs nothing more
                // until the restart (see `docs/reliability.md`, section 3).
                if partition.refuses_writes()
                    || now.duration_since(*last).as_millis() < u128::from(interval_ms)
                {
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
            for partition in topic.open_partitions() {
                if let Err(error) = partition.enforce_retention(now_ms) {
                    tracing::error!(partition = partition.name(), %error, "retention failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leftover that another thread removes at the same time (the previous broker's
    /// background removal) is removed without an error.
    #[test]
    fn leftover_removed_concurrently_is_not_an_error() {
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let leftover = dir.path().join("t.0000000000000001");
            for partition in 0..8 {
                let partition_dir = leftover.join(partition.to_string());
                fs::create_dir_all(&partition_dir).unwrap();
                for segment in 0..16 {
                    fs::write(partition_dir.join(format!("{segment}.log")), b"x").unwrap();
                }
            }
            let racer = {
                let leftover = leftover.clone();
                std::thread::spawn(move || {
                    let _ = fs::remove_dir_all(leftover);
                })
            };
            Broker::remove_leftover(&leftover).unwrap();
            racer.join().unwrap();
            assert!(!leftover.exists());
        }
    }

    #[test]
    fn missing_leftover_is_already_removed() {
        let dir = tempfile::tempdir().unwrap();
        Broker::remove_leftover(&dir.path().join("gone")).unwrap();
    }
}
