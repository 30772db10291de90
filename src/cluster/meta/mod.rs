//! The cluster's metadata store: which brokers are alive, which topics exist, and each
//! partition's `{replicas, leader, leader_epoch, isr}`, kept in etcd (or, for in-process tests
//! and the simulation, in memory with the same semantics).
//!
//! Why a trait: the broker, the election logic and the tests should not care whether the store is
//! a real etcd cluster or a map in memory, only that it keeps etcd's promises: every change to a
//! partition state is a compare-and-swap against the revision it was read at (so two brokers
//! can never both win a leadership change), a topic and all its partition states appear in one
//! transaction, a broker's registration disappears when its lease lapses, and a watch delivers
//! every change after a snapshot, in order, or says `Resync` when it cannot.
//!
//! The keys and values follow `docs/replication.md` ("etcd layout"; see [`layout`]); values are
//! JSON. A broker registration is held by a [`BrokerLease`], which keeps it alive in the
//! background and tells, by a conservative local deadline, whether it still holds: etcd's lease
//! is a liveness tool, never a safety one.

pub mod layout;
pub mod memory;
pub mod placement;
pub mod registration;
pub mod watch;

#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "etcd")]
pub mod security;

use std::fmt::{self, Debug};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{BrokerRegistration, LeaderEpoch, NodeId, PartitionState, Versioned};
use crate::domain::TopicConfig;

pub use layout::KeyLayout;
pub use memory::MemoryMetaStore;
pub use placement::{place_replicas, PlacementError, INITIAL_LEADER_EPOCH};
pub use registration::{BrokerLease, RegistrationLoss};
pub use watch::{MetaEvent, MetaSnapshot, MetaWatch};

#[cfg(feature = "etcd")]
pub use etcd::{EtcdConfig, EtcdMetaStore};

/// Shortest registration TTL a broker may ask for. etcd itself refuses leases shorter than about
/// one and a half election timeouts (and rounds up to whole seconds).
pub const REGISTRATION_TTL_MIN: Duration = Duration::from_secs(1);

/// Longest registration TTL a broker may ask for: a crashed broker's partitions wait this long
/// before anyone may take them over.
pub const REGISTRATION_TTL_MAX: Duration = Duration::from_secs(300);

/// Most keys written by one transaction: etcd's default `--max-txn-ops` (128). Creating a topic
/// writes its record and one key per partition in one transaction, so a topic has at most
/// `TRANSACTION_OPERATIONS_MAX - 1` partitions in a cluster.
pub const TRANSACTION_OPERATIONS_MAX: usize = 128;

/// Most partitions a topic of the cluster may have (see [`TRANSACTION_OPERATIONS_MAX`]).
pub const CLUSTER_PARTITIONS_PER_TOPIC_MAX: u32 = (TRANSACTION_OPERATIONS_MAX - 1) as u32;

/// Most replicas a partition may have.
pub const REPLICATION_FACTOR_MAX: u16 = 16;

/// Most deleted topic names whose fence floor the store keeps by name (one tombstone key each,
/// `deleted-topics/<name>`). A delete past the limit folds the lowest tombstones into the one
/// cluster-wide floor of every name not listed (`deleted-topics-floor`), as a standalone broker's
/// `epoch-floors` file folds into `others`: floors only rise, so folding never lowers the floor
/// any name sees; it only makes a re-created name start higher than it strictly had to.
pub const TOPIC_TOMBSTONES_MAX: usize = 1000;

/// How often a topic delete (or a re-creation, a config change, a growth) reads and tries its
/// transaction again when what it read changed before the transaction (an election or an ISR
/// change of a partition, a concurrent change of the record): after that many it gives up with
/// [`MetaError::Contended`], nothing written. The etcd store waits between attempts (capped
/// exponential backoff with jitter: `etcd::COMPARE_AND_SWAP_RETRY_BASE`, `_CAP`).
pub const TOPIC_DELETE_ATTEMPTS_MAX: usize = 8;

/// Default capacity of a watch's event channel; past it the watch sends a `Resync`.
pub const DEFAULT_WATCH_EVENTS_CAPACITY: usize = 1024;

/// A registration as the store holds it, with its lease ([`MetaStore::broker_registration`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRegistration {
    /// What the holder registered.
    pub registration: BrokerRegistration,
    /// The store's id of the holder's lease.
    pub lease_id: i64,
    /// The TTL the lease was granted for.
    pub granted_ttl: Duration,
    /// What is left of it now, as the store counts (etcd: whole seconds). A renewal raises it.
    pub remaining_ttl: Duration,
}

/// What [`MetaStore::create_partitions`] wrote: the topic record with its new count, and the new
/// partitions' states (from the old count on) with their revisions.
pub type GrownTopic = (TopicRecord, Vec<Versioned<PartitionState>>);

/// Every partition state, by topic and index, with the revisions a compare-and-swap needs.
pub type PartitionStates = Vec<(PartitionId, Versioned<PartitionState>)>;

/// A topic as recorded in the metadata store (`topics/<name>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    /// The topic name (the same rule as standalone: 1 to 200 bytes of `[A-Za-z0-9._-]`).
    pub name: String,
    /// How many partitions it has (numbered from 0).
    pub partition_count: u32,
    /// How many replicas each partition has.
    pub replication_factor: u16,
    /// The smallest ISR with which a leader accepts `acks=all` writes (copied into each
    /// partition state at creation).
    pub min_insync: u16,
    /// Segment size, flush policy and retention, as for a standalone topic.
    pub config: TopicConfig,
    /// The leader epoch its partitions were created at: [`INITIAL_LEADER_EPOCH`] for a name
    /// never deleted, the name's fence floor plus one for a topic re-created under the name of a
    /// deleted one (the store sets it when it creates the topic, whatever the caller gave). A
    /// replica whose local leader-epoch history has an epoch below it holds a deleted lineage's
    /// data, which must never be served or replicated into this topic. Records written before
    /// the field existed read 0, which means [`INITIAL_LEADER_EPOCH`]
    /// ([`TopicRecord::first_leader_epoch`]).
    #[serde(default)]
    pub first_leader_epoch: LeaderEpoch,
}

impl TopicRecord {
    /// A topic record with `min_insync` at its default, `min(2, replication_factor)`
    /// (`docs/replication.md`, "Defaults decided where the issue is silent").
    pub fn new(
        name: impl Into<String>,
        partition_count: u32,
        replication_factor: u16,
        config: TopicConfig,
    ) -> Self {
        Self {
            name: name.into(),
            partition_count,
            replication_factor,
            min_insync: replication_factor.min(2),
            config,
            first_leader_epoch: INITIAL_LEADER_EPOCH,
        }
    }

    /// The leader epoch this topic's partitions started at (see the field; a record written
    /// before it existed started at [`INITIAL_LEADER_EPOCH`]).
    pub fn first_leader_epoch(&self) -> LeaderEpoch {
        self.first_leader_epoch.max(INITIAL_LEADER_EPOCH)
    }
}

/// What deleting a topic recorded: the fence floor of its name, kept in the store
/// (`deleted-topics/<name>`) after the topic record and its partition states are gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicTombstone {
    /// The highest leader epoch any partition of any deleted topic of this name ever had (at
    /// least the floor recorded before): every producer epoch such a lineage granted is below
    /// `producer_epoch_base(leader_epoch_floor + 1)`. A topic re-created under the name starts
    /// its leader epochs at `leader_epoch_floor + 1`.
    pub leader_epoch_floor: LeaderEpoch,
}

/// The leader epoch a topic re-created above the fence floor `floor` starts at, or `Invalid` if
/// the name used up every leader epoch (`u32::MAX` deleted leader changes: not in practice).
pub fn first_leader_epoch_above(topic: &str, floor: LeaderEpoch) -> Result<LeaderEpoch, MetaError> {
    floor
        .checked_add(1)
        .map(|first| first.max(INITIAL_LEADER_EPOCH))
        .ok_or_else(|| {
            MetaError::Invalid(format!(
                "topic {topic}: its deleted lineages used up every leader epoch ({floor}); \
                 choose another name"
            ))
        })
}

/// Moves a new topic's partition states and record above the fence floor `floor` of its name
/// (every partition's leader epoch at least `floor + 1`; the record's first leader epoch the
/// lowest of them). The one place a creation starts above a deleted lineage, for every store.
pub fn start_above_floor(
    topic: &mut TopicRecord,
    partitions: &mut [PartitionState],
    floor: LeaderEpoch,
) -> Result<(), MetaError> {
    let first = first_leader_epoch_above(&topic.name, floor)?;
    for state in partitions.iter_mut() {
        state.leader_epoch = state.leader_epoch.max(first);
    }
    topic.first_leader_epoch = partitions
        .iter()
        .map(|state| state.leader_epoch)
        .min()
        .unwrap_or(first);
    Ok(())
}

/// One partition of one topic: the address of a partition state.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionId {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
}

impl PartitionId {
    /// Partition `partition` of `topic`.
    pub fn new(topic: impl Into<String>, partition: u32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// Why a metadata operation failed. Each says what happened and what to do.
#[derive(Debug, Error)]
pub enum MetaError {
    /// The store could not be reached (or did not answer in time). Nothing is known to have
    /// changed; retrying may succeed once it is back.
    #[error(
        "metadata store unavailable (tried {endpoints}): {reason}; check that etcd is running \
         and reachable at those addresses"
    )]
    Unavailable {
        /// The endpoints tried, comma-separated.
        endpoints: String,
        /// What the client said.
        reason: String,
    },
    /// A compare-and-swap lost: the partition state changed since it was read. Nothing was
    /// written; `current` is the state now, to decide again from.
    #[error(
        "partition {partition} changed since revision {expected_revision} (now revision {}); \
         nothing was written: decide again from the current state",
        current.revision
    )]
    Conflict {
        /// The partition.
        partition: PartitionId,
        /// The revision the caller read.
        expected_revision: i64,
        /// The state and revision now.
        current: Box<Versioned<PartitionState>>,
    },
    /// The thing to create exists already. Nothing was written.
    #[error("{what} already exists; nothing was written")]
    AlreadyExists {
        /// What exists (`topic orders`, `broker 3 registered by ...`).
        what: String,
    },
    /// The thing asked for does not exist (never created, deleted, or its lease lapsed).
    #[error("{what} does not exist")]
    NotFound {
        /// What is missing (`topic orders`, `partition orders/3`).
        what: String,
    },
    /// A stored value could not be decoded: something other than fencelog wrote it, or a newer
    /// version did. The key names what to inspect.
    #[error(
        "corrupt metadata at key {key}: {reason}; inspect it with `etcdctl get {key}` and \
         rewrite or delete it"
    )]
    Corrupt {
        /// The etcd key (or the in-memory equivalent).
        key: String,
        /// What the decoder said.
        reason: String,
    },
    /// A write kept losing its compare-and-swap to other changes (a topic delete whose
    /// partitions kept electing leaders, a creation racing deletes of its name) for
    /// [`TOPIC_DELETE_ATTEMPTS_MAX`] attempts. Nothing was written; retry.
    #[error("{what}: the metadata changed under it {attempts} times; nothing was written, retry")]
    Contended {
        /// What was tried (`delete topic orders`).
        what: String,
        /// How many attempts were made.
        attempts: usize,
    },
    /// A topic config change lost its compare-and-swap: the topic's config is no longer the one
    /// the change was computed from. Nothing was written; `current` is the config now, to
    /// compute the change again from.
    #[error("topic {topic}: its config changed since it was read; nothing was written: apply the change to the current config and retry")]
    TopicConfigChanged {
        /// The topic.
        topic: String,
        /// Its config now.
        current: TopicConfig,
    },
    /// A partition grow lost its compare-and-swap: the topic's partition count is no longer the
    /// one the new partitions were placed after (another grow came first). Nothing was written;
    /// `current` is the count now, to decide again from.
    #[error("topic {topic}: its partition count changed to {current} since it was read; nothing was written: decide again from the current count")]
    PartitionCountChanged {
        /// The topic.
        topic: String,
        /// Its partition count now.
        current: u32,
    },
    /// The request itself is invalid (a TTL out of range, partition states that do not match
    /// the topic record...). Nothing was sent.
    #[error("invalid metadata request: {0}")]
    Invalid(String),
    /// Too few live brokers to place a topic's replicas.
    #[error(transparent)]
    Placement(#[from] PlacementError),
}

/// The metadata store: registrations, topics and partition states, with compare-and-swap and
/// watches. See the module docs for the promises every implementation keeps.
pub trait MetaStore: Send + Sync + Debug {
    /// Registers this broker under a lease of `ttl` (between [`REGISTRATION_TTL_MIN`] and
    /// [`REGISTRATION_TTL_MAX`]), kept alive in the background by the returned handle. Fails
    /// with `AlreadyExists` while another registration of the same node id is live (another
    /// broker with this id runs, or a previous process died less than its TTL ago).
    fn register_broker(
        &self,
        registration: BrokerRegistration,
        ttl: Duration,
    ) -> BoxFuture<'static, Result<BrokerLease, MetaError>>;

    /// The brokers whose registration is live, by node id.
    fn live_brokers(&self) -> BoxFuture<'static, Result<Vec<BrokerRegistration>, MetaError>>;

    /// The live registration of `node_id` with its lease (`None`: nobody holds the node id).
    /// A broker whose registration is refused with `AlreadyExists` reads it to learn who holds
    /// the node id, and watches its lease's remaining TTL to tell a live holder (it renews) from
    /// a dead one (its lease runs out).
    fn broker_registration(
        &self,
        node_id: NodeId,
    ) -> BoxFuture<'static, Result<Option<HeldRegistration>, MetaError>>;

    /// Revokes lease `lease_id` (the registration under it disappears at once); a lease already
    /// gone is not an error. Only for a lease this broker's own process or data directory
    /// holds: after etcd restarted, the lease of a registration this process gave up as lost may
    /// still be there, and waiting it out would keep the broker unregistered for its TTL.
    fn revoke_lease(&self, lease_id: i64) -> BoxFuture<'static, Result<(), MetaError>>;

    /// Creates `topic` and its partition states (`partitions[i]` is partition `i`) in one
    /// transaction, only if the topic does not exist (else `AlreadyExists`, nothing written).
    /// Returns the partition states with their revisions.
    fn create_topic(
        &self,
        topic: TopicRecord,
        partitions: Vec<PartitionState>,
    ) -> BoxFuture<'static, Result<Vec<Versioned<PartitionState>>, MetaError>>;

    /// Every topic, by name.
    fn topics(&self) -> BoxFuture<'static, Result<Vec<TopicRecord>, MetaError>>;

    /// Deletes `topic` and all its partition states in one transaction (`NotFound` if absent),
    /// and in the same transaction raises the name's tombstone to the highest leader epoch any
    /// of its partitions had (compared against the revisions read, so no election can raise an
    /// epoch past the recorded floor unseen). Returns the tombstone written. Past
    /// [`TOPIC_TOMBSTONES_MAX`] names, the lowest tombstones fold into the cluster-wide floor.
    ///
    /// [`MetaStore::create_topic`] starts a topic of a deleted name above its floor: whatever
    /// epochs the caller's partition states carry, each starts at `floor + 1` at least and the
    /// record's `first_leader_epoch` says where (compared against the tombstone read, so a
    /// concurrent delete cannot slip a higher floor in).
    fn delete_topic(&self, topic: &str) -> BoxFuture<'static, Result<TopicTombstone, MetaError>>;

    /// Replaces the config (segment size, flush policy, retention) of topic `topic` with
    /// `config` if it is still `expected`: a compare-and-swap of the topic record, so two
    /// concurrent changes cannot both be computed from the same config and one lost. Else
    /// `TopicConfigChanged` with the config now (`NotFound` if the topic is gone); nothing is
    /// written. Returns the record written; watches see it as `TopicCreated` with the new record
    /// (a topic record's put, as etcd reports it), which every broker applies to its local copy.
    fn alter_topic_config(
        &self,
        topic: &str,
        expected: TopicConfig,
        config: TopicConfig,
    ) -> BoxFuture<'static, Result<TopicRecord, MetaError>>;

    /// Grows topic `topic` from `expected_count` partitions to `expected_count +
    /// partitions.len()` in one transaction: the record's new partition count and the new
    /// partitions' states (`partitions[i]` is partition `expected_count + i`), only if the
    /// record's count is still `expected_count` (a compare-and-swap of the topic record, so two
    /// concurrent grows cannot both place partition `expected_count`; else
    /// `PartitionCountChanged` with the count now, `NotFound` if the topic is gone; nothing is
    /// written). Each new state's leader epoch is raised to the record's first leader epoch at
    /// least, so the new partitions of a re-created topic start above its name's deleted
    /// lineages as its first ones did. Returns the record written and the new states with their
    /// revisions; watches see `TopicCreated` with the new record and `PartitionChanged` for each
    /// new partition, which every broker's driver applies as it applies a created topic.
    fn create_partitions(
        &self,
        topic: &str,
        expected_count: u32,
        partitions: Vec<PartitionState>,
    ) -> BoxFuture<'static, Result<GrownTopic, MetaError>>;

    /// The fence floor of the name `topic`: its tombstone, or the cluster-wide floor of folded
    /// names when it has none (0 if no topic of the name was ever deleted and nothing folded).
    fn deleted_topic_floor(
        &self,
        topic: &str,
    ) -> BoxFuture<'static, Result<LeaderEpoch, MetaError>>;

    /// One partition's state and the revision a compare-and-swap must present.
    fn partition_state(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, Result<Versioned<PartitionState>, MetaError>>;

    /// Every partition state, by topic and index.
    fn partition_states(&self) -> BoxFuture<'static, Result<PartitionStates, MetaError>>;

    /// Replaces a partition's state with `state` if its revision is still `expected_revision`
    /// (else `Conflict` with the current state, or `NotFound` if the topic was deleted). Returns
    /// the new state with its new revision.
    fn compare_and_swap_partition(
        &self,
        partition: PartitionId,
        expected_revision: i64,
        state: PartitionState,
    ) -> BoxFuture<'static, Result<Versioned<PartitionState>, MetaError>>;

    /// A snapshot of everything, then every change after it on a channel of `capacity` events
    /// (at least 1); see [`MetaWatch`].
    fn watch(&self, capacity: usize) -> BoxFuture<'static, Result<MetaWatch, MetaError>>;
}

/// Reads the live brokers, places the topic's replicas over them ([`place_replicas`]) and
/// creates the topic with those partition states.
pub async fn create_topic_placed(
    store: &dyn MetaStore,
    topic: TopicRecord,
) -> Result<Vec<Versioned<PartitionState>>, MetaError> {
    let brokers = store.live_brokers().await?;
    let node_ids: Vec<NodeId> = brokers.iter().map(|broker| broker.node_id).collect();
    let states = place_replicas(
        &node_ids,
        &topic.name,
        topic.partition_count,
        topic.replication_factor,
        topic.min_insync,
    )?;
    store.create_topic(topic, states).await
}

/// Checks a registration TTL against its bounds.
pub(crate) fn validate_ttl(ttl: Duration) -> Result<(), MetaError> {
    if (REGISTRATION_TTL_MIN..=REGISTRATION_TTL_MAX).contains(&ttl) {
        Ok(())
    } else {
        Err(MetaError::Invalid(format!(
            "registration TTL {ttl:?} must be between {REGISTRATION_TTL_MIN:?} and \
             {REGISTRATION_TTL_MAX:?}"
        )))
    }
}

/// Checks a topic record and the partition states that go with it, before anything is sent.
pub(crate) fn validate_new_topic(
    topic: &TopicRecord,
    partitions: &[PartitionState],
) -> Result<(), MetaError> {
    layout::validate_name("topic name", &topic.name)?;
    if topic.partition_count == 0 || topic.partition_count > CLUSTER_PARTITIONS_PER_TOPIC_MAX {
        return Err(MetaError::Invalid(format!(
            "topic {} has {} partitions; a cluster topic has 1 to \
             {CLUSTER_PARTITIONS_PER_TOPIC_MAX} (one etcd transaction writes them all)",
            topic.name, topic.partition_count
        )));
    }
    if topic.replication_factor == 0 || topic.replication_factor > REPLICATION_FACTOR_MAX {
        return Err(MetaError::Invalid(format!(
            "replication factor {} must be 1 to {REPLICATION_FACTOR_MAX}",
            topic.replication_factor
        )));
    }
    if topic.min_insync == 0 || topic.min_insync > topic.replication_factor {
        return Err(MetaError::Invalid(format!(
            "min_insync {} must be 1 to the replication factor {}",
            topic.min_insync, topic.replication_factor
        )));
    }
    if partitions.len() != topic.partition_count as usize {
        return Err(MetaError::Invalid(format!(
            "topic {} has {} partitions but {} partition states were given",
            topic.name,
            topic.partition_count,
            partitions.len()
        )));
    }
    for (index, state) in partitions.iter().enumerate() {
        if state.replicas.len() != usize::from(topic.replication_factor) {
            return Err(MetaError::Invalid(format!(
                "partition {}/{index} has {} replicas, the replication factor is {}",
                topic.name,
                state.replicas.len(),
                topic.replication_factor
            )));
        }
    }
    Ok(())
}

/// Checks a grow of `record` (read from the store) from `expected_count` partitions by the
/// states `partitions`, and raises each state's leader epoch to the record's first one: the
/// shared part of every store's [`MetaStore::create_partitions`].
pub(crate) fn prepare_new_partitions(
    record: &TopicRecord,
    expected_count: u32,
    partitions: &mut [PartitionState],
) -> Result<TopicRecord, MetaError> {
    if record.partition_count != expected_count {
        return Err(MetaError::PartitionCountChanged {
            topic: record.name.clone(),
            current: record.partition_count,
        });
    }
    let added = u32::try_from(partitions.len()).unwrap_or(u32::MAX);
    let count = expected_count.saturating_add(added);
    if added == 0 || count > CLUSTER_PARTITIONS_PER_TOPIC_MAX {
        return Err(MetaError::Invalid(format!(
            "topic {} would have {count} partitions; a cluster topic grows by at least one, to \
             at most {CLUSTER_PARTITIONS_PER_TOPIC_MAX} (one etcd transaction writes them all)",
            record.name
        )));
    }
    let first = record.first_leader_epoch();
    for (index, state) in partitions.iter_mut().enumerate() {
        if state.replicas.len() != usize::from(record.replication_factor) {
            return Err(MetaError::Invalid(format!(
                "partition {}/{} has {} replicas, the replication factor is {}",
                record.name,
                expected_count as usize + index,
                state.replicas.len(),
                record.replication_factor
            )));
        }
        state.leader_epoch = state.leader_epoch.max(first);
    }
    let mut grown = record.clone();
    grown.partition_count = count;
    Ok(grown)
}

/// Reads the live brokers and grows `topic` (as read, with `partition_count` partitions) to
/// `count` partitions, placed as a topic of `count` partitions would be ([`place_replicas`]:
/// its first `partition_count` placements are the existing partitions', so the new ones
/// continue the same spread), starting at the record's first leader epoch.
pub async fn create_partitions_placed(
    store: &dyn MetaStore,
    topic: &TopicRecord,
    count: u32,
) -> Result<GrownTopic, MetaError> {
    let brokers = store.live_brokers().await?;
    let node_ids: Vec<NodeId> = brokers.iter().map(|broker| broker.node_id).collect();
    let states = place_replicas(
        &node_ids,
        &topic.name,
        count,
        topic.replication_factor,
        topic.min_insync,
    )?;
    let new_states = states
        .into_iter()
        .skip(topic.partition_count as usize)
        .collect();
    store
        .create_partitions(&topic.name, topic.partition_count, new_states)
        .await
}

/// Checks a watch's channel capacity.
pub(crate) fn validate_watch_capacity(capacity: usize) -> Result<(), MetaError> {
    if capacity == 0 {
        return Err(MetaError::Invalid(
            "a watch needs room for at least one event".into(),
        ));
    }
    Ok(())
}

/// Decodes a JSON value stored at `key`.
#[cfg(feature = "etcd")]
pub(crate) fn decode_value<T: serde::de::DeserializeOwned>(
    key: &str,
    value: &[u8],
) -> Result<T, MetaError> {
    serde_json::from_slice(value).map_err(|error| MetaError::Corrupt {
        key: key.to_owned(),
        reason: error.to_string(),
    })
}

/// Encodes a value as JSON (it cannot fail for these types: no maps with non-string keys).
#[cfg(feature = "etcd")]
pub(crate) fn encode_value<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("metadata values serialize to JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(replicas: Vec<NodeId>) -> PartitionState {
        PartitionState {
            leader: replicas.first().copied(),
            isr: replicas.clone(),
            replicas,
            leader_epoch: 1,
            min_insync: 1,
        }
    }

    /// A topic whose partition states do not match its record is refused before anything is
    /// written.
    #[test]
    fn mismatched_topic_and_states_are_refused() {
        let topic = TopicRecord::new("orders", 2, 2, TopicConfig::default());
        assert!(validate_new_topic(&topic, &[state(vec![1, 2])]).is_err());
        assert!(validate_new_topic(&topic, &[state(vec![1, 2]), state(vec![1])]).is_err());
        assert!(validate_new_topic(&topic, &[state(vec![1, 2]), state(vec![2, 1])]).is_ok());
        let bad_name = TopicRecord::new("a/b", 1, 1, TopicConfig::default());
        assert!(validate_new_topic(&bad_name, &[state(vec![1])]).is_err());
        let too_many = TopicRecord::new(
            "big",
            CLUSTER_PARTITIONS_PER_TOPIC_MAX + 1,
            1,
            TopicConfig::default(),
        );
        assert!(validate_new_topic(&too_many, &[]).is_err());
    }

    /// `min_insync` defaults to `min(2, replication_factor)`.
    #[test]
    fn min_insync_defaults_to_two_at_most() {
        assert_eq!(
            TopicRecord::new("t", 1, 1, TopicConfig::default()).min_insync,
            1
        );
        assert_eq!(
            TopicRecord::new("t", 1, 3, TopicConfig::default()).min_insync,
            2
        );
    }

    /// Registration TTLs outside their bounds are refused.
    #[test]
    fn ttl_bounds_are_checked() {
        assert!(validate_ttl(Duration::from_millis(999)).is_err());
        assert!(validate_ttl(REGISTRATION_TTL_MIN).is_ok());
        assert!(validate_ttl(REGISTRATION_TTL_MAX + Duration::from_secs(1)).is_err());
    }
}
