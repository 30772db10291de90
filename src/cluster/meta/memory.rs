//! The metadata store in memory, with etcd's semantics: one revision counter bumped by every
//! transaction, compare-and-swap on a partition's revision, leases that expire by an injected
//! [`Clock`] and take their registration keys with them, and watches with the same snapshot,
//! event order and `Resync` as the etcd store.
//!
//! Why it exists: in-process tests of a broker cluster (and a test that wants a lease to expire
//! without waiting for it) should not need an etcd process. It is a stand-in, not a simulation
//! of etcd's failures: it never becomes unavailable and never compacts.
//!
//! Leases expire lazily: every operation (a keep-alive included) first removes the leases whose
//! deadline passed by the clock, with their registrations, and tells the watches. A test that
//! moved a [`crate::clock::ManualClock`] calls [`MemoryMetaStore::expire_leases`] to have the
//! watches see it without another operation.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::mpsc;

use super::registration::LeaseKeepAlive;
use super::watch::{MetaEvent, MetaSnapshot, MetaWatch};
use super::{
    prepare_new_partitions, start_above_floor, validate_new_topic, validate_ttl,
    validate_watch_capacity, BrokerLease, GrownTopic, HeldRegistration, MetaError, MetaStore,
    PartitionId, PartitionStates, TopicRecord, TopicTombstone, TOPIC_TOMBSTONES_MAX,
};
use crate::clock::{Clock, SystemClock};
use crate::cluster::{BrokerRegistration, LeaderEpoch, NodeId, PartitionState, Versioned};
use crate::domain::TopicConfig;

/// A metadata store in memory; cheap to clone (clones share the store).
#[derive(Clone)]
pub struct MemoryMetaStore {
    shared: Arc<Shared>,
}

struct Shared {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct Lease {
    ttl: Duration,
    expires_at: Instant,
}

struct Watcher {
    id: u64,
    sender: mpsc::Sender<MetaEvent>,
    /// The channel overflowed: events are dropped until the `Resync` is delivered.
    resync_pending: bool,
}

#[derive(Default)]
struct State {
    revision: i64,
    next_lease_id: i64,
    next_watcher_id: u64,
    leases: BTreeMap<i64, Lease>,
    brokers: BTreeMap<NodeId, (BrokerRegistration, i64)>,
    topics: BTreeMap<String, TopicRecord>,
    partitions: BTreeMap<PartitionId, Versioned<PartitionState>>,
    /// The fence floor of each deleted topic name (`deleted-topics/<name>`).
    tombstones: BTreeMap<String, LeaderEpoch>,
    /// The floor of every deleted name folded out of `tombstones` (`deleted-topics-floor`).
    folded_floor: LeaderEpoch,
    watchers: Vec<Watcher>,
}

impl fmt::Debug for MemoryMetaStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("MemoryMetaStore")
            .field("revision", &state.revision)
            .field("brokers", &state.brokers.len())
            .field("topics", &state.topics.len())
            .finish()
    }
}

impl Default for MemoryMetaStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryMetaStore {
    /// An empty store whose leases expire by the system's monotonic clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store whose leases expire by `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            shared: Arc::new(Shared {
                clock,
                state: Mutex::new(State {
                    // etcd's first revision with data is 2 (1 is the empty store); start alike.
                    revision: 1,
                    next_lease_id: 1,
                    ..State::default()
                }),
            }),
        }
    }

    /// The store's current revision.
    pub fn revision(&self) -> i64 {
        self.shared.lock().revision
    }

    /// Removes the leases whose TTL passed by the clock, with their registrations, and tells
    /// the watches (every operation does this first; call it after moving a manual clock).
    pub fn expire_leases(&self) {
        let mut state = self.shared.lock();
        self.shared.expire(&mut state);
    }

    /// Runs `operation` on the state after expiring leases, and delivers the events it returns.
    fn apply<T>(
        &self,
        operation: impl FnOnce(&mut State, Instant) -> Result<(T, Vec<MetaEvent>), MetaError>,
    ) -> Result<T, MetaError> {
        let mut state = self.shared.lock();
        self.shared.expire(&mut state);
        let now = self.shared.clock.now();
        let (result, events) = operation(&mut state, now)?;
        self.shared.deliver(&mut state, events);
        Ok(result)
    }

    fn read<T>(&self, read: impl FnOnce(&State) -> T) -> T {
        let mut state = self.shared.lock();
        self.shared.expire(&mut state);
        read(&state)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn expire(self: &Arc<Self>, state: &mut State) {
        let now = self.clock.now();
        let expired: Vec<i64> = state
            .leases
            .iter()
            .filter(|(_, lease)| lease.expires_at <= now)
            .map(|(&id, _)| id)
            .collect();
        for lease_id in expired {
            let events = state.revoke(lease_id);
            self.deliver(state, events);
        }
    }

    /// Sends `events` to every watcher; a full channel switches the watcher to a pending
    /// `Resync`, a closed one is forgotten.
    fn deliver(self: &Arc<Self>, state: &mut State, events: Vec<MetaEvent>) {
        if events.is_empty() {
            return;
        }
        state.watchers.retain_mut(|watcher| {
            if watcher.resync_pending {
                return !watcher.sender.is_closed();
            }
            for event in &events {
                match watcher.sender.try_send(event.clone()) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        // Without a runtime to wait for room on, the watch ends (its receiver
                        // sees the end of the channel).
                        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                            return false;
                        };
                        watcher.resync_pending = true;
                        self.spawn_resync(&runtime, watcher.id, watcher.sender.clone());
                        return true;
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => return false,
                }
            }
            true
        });
    }

    /// Delivers a `Resync` to watcher `id` as soon as its channel has room: the snapshot is
    /// taken under the lock, with the room already reserved, so no event falls between.
    fn spawn_resync(
        self: &Arc<Self>,
        runtime: &tokio::runtime::Handle,
        id: u64,
        sender: mpsc::Sender<MetaEvent>,
    ) {
        let shared = Arc::clone(self);
        runtime.spawn(async move {
            let Ok(permit) = sender.reserve().await else {
                shared.lock().watchers.retain(|watcher| watcher.id != id);
                return;
            };
            let mut state = shared.lock();
            shared.expire(&mut state);
            let snapshot = state.snapshot();
            if let Some(watcher) = state.watchers.iter_mut().find(|w| w.id == id) {
                watcher.resync_pending = false;
                permit.send(MetaEvent::Resync(Box::new(snapshot)));
            }
        });
    }
}

impl State {
    fn next_revision(&mut self) -> i64 {
        self.revision += 1;
        self.revision
    }

    /// Removes a lease and the registrations under it.
    fn revoke(&mut self, lease_id: i64) -> Vec<MetaEvent> {
        if self.leases.remove(&lease_id).is_none() {
            return Vec::new();
        }
        let gone: Vec<NodeId> = self
            .brokers
            .iter()
            .filter(|(_, (_, lease))| *lease == lease_id)
            .map(|(&node_id, _)| node_id)
            .collect();
        if gone.is_empty() {
            return Vec::new();
        }
        self.next_revision();
        gone.into_iter()
            .map(|node_id| {
                self.brokers.remove(&node_id);
                MetaEvent::BrokerDown(node_id)
            })
            .collect()
    }

    /// The fence floor of the name `topic` (its tombstone, else the folded floor).
    fn floor(&self, topic: &str) -> LeaderEpoch {
        self.tombstones
            .get(topic)
            .copied()
            .unwrap_or(self.folded_floor)
    }

    /// Raises `topic`'s tombstone to `floor` (never lowers it), folding the lowest other
    /// tombstones into the folded floor past [`TOPIC_TOMBSTONES_MAX`]. Returns the floor kept.
    fn raise_tombstone(&mut self, topic: &str, floor: LeaderEpoch) -> LeaderEpoch {
        let floor = floor.max(self.floor(topic));
        self.tombstones.insert(topic.to_owned(), floor);
        while self.tombstones.len() > TOPIC_TOMBSTONES_MAX {
            let lowest = self
                .tombstones
                .iter()
                .filter(|(name, _)| name.as_str() != topic)
                .min_by_key(|(_, floor)| **floor)
                .map(|(name, floor)| (name.clone(), *floor))
                .expect("more than one tombstone");
            self.tombstones.remove(&lowest.0);
            self.folded_floor = self.folded_floor.max(lowest.1);
        }
        floor
    }

    fn snapshot(&self) -> MetaSnapshot {
        MetaSnapshot {
            revision: self.revision,
            brokers: self.brokers.values().map(|(r, _)| r.clone()).collect(),
            topics: self.topics.values().cloned().collect(),
            partitions: self
                .partitions
                .iter()
                .map(|(id, state)| (id.clone(), state.clone()))
                .collect(),
        }
    }
}

/// Renews and revokes one lease of a memory store.
struct MemoryKeeper {
    store: MemoryMetaStore,
    lease_id: i64,
}

impl LeaseKeepAlive for MemoryKeeper {
    fn keep_alive(&mut self) -> BoxFuture<'_, Result<Option<Duration>, MetaError>> {
        let renewed = self.store.apply(|state, now| {
            let renewed = state.leases.get_mut(&self.lease_id).map(|lease| {
                lease.expires_at = now + lease.ttl;
                lease.ttl
            });
            Ok((renewed, Vec::new()))
        });
        Box::pin(async move { renewed })
    }

    fn revoke(&mut self) -> BoxFuture<'_, Result<(), MetaError>> {
        let lease_id = self.lease_id;
        let result = self
            .store
            .apply(|state, _| Ok(((), state.revoke(lease_id))));
        Box::pin(async move { result })
    }
}

impl MetaStore for MemoryMetaStore {
    fn register_broker(
        &self,
        registration: BrokerRegistration,
        ttl: Duration,
    ) -> BoxFuture<'static, Result<BrokerLease, MetaError>> {
        let store = self.clone();
        Box::pin(async move {
            validate_ttl(ttl)?;
            let (lease_id, granted_at) = store.apply(|state, now| {
                let node_id = registration.node_id;
                if let Some((current, _)) = state.brokers.get(&node_id) {
                    return Err(MetaError::AlreadyExists {
                        what: format!(
                            "broker {node_id} (registered by incarnation {} at {})",
                            current.incarnation, current.native_addr
                        ),
                    });
                }
                let lease_id = state.next_lease_id;
                state.next_lease_id += 1;
                state.leases.insert(
                    lease_id,
                    Lease {
                        ttl,
                        expires_at: now + ttl,
                    },
                );
                state.next_revision();
                state
                    .brokers
                    .insert(node_id, (registration.clone(), lease_id));
                Ok((
                    (lease_id, now),
                    vec![MetaEvent::BrokerUp(registration.clone())],
                ))
            })?;
            let keeper = MemoryKeeper {
                store: store.clone(),
                lease_id,
            };
            Ok(BrokerLease::start(
                registration,
                lease_id,
                store.shared.clock.clone(),
                ttl,
                granted_at,
                ttl,
                keeper,
            ))
        })
    }

    fn live_brokers(&self) -> BoxFuture<'static, Result<Vec<BrokerRegistration>, MetaError>> {
        let brokers = self.read(|state| state.brokers.values().map(|(r, _)| r.clone()).collect());
        Box::pin(async move { Ok(brokers) })
    }

    fn broker_registration(
        &self,
        node_id: NodeId,
    ) -> BoxFuture<'static, Result<Option<HeldRegistration>, MetaError>> {
        let now = self.shared.clock.now();
        let held = self.read(|state| {
            let (registration, lease_id) = state.brokers.get(&node_id)?;
            let lease = state.leases.get(lease_id)?;
            Some(HeldRegistration {
                registration: registration.clone(),
                lease_id: *lease_id,
                granted_ttl: lease.ttl,
                remaining_ttl: lease.expires_at.saturating_duration_since(now),
            })
        });
        Box::pin(async move { Ok(held) })
    }

    fn revoke_lease(&self, lease_id: i64) -> BoxFuture<'static, Result<(), MetaError>> {
        let result = self.apply(|state, _| Ok(((), state.revoke(lease_id))));
        Box::pin(async move { result })
    }

    fn create_topic(
        &self,
        mut topic: TopicRecord,
        mut partitions: Vec<PartitionState>,
    ) -> BoxFuture<'static, Result<Vec<Versioned<PartitionState>>, MetaError>> {
        let store = self.clone();
        Box::pin(async move {
            validate_new_topic(&topic, &partitions)?;
            store.apply(|state, _| {
                if state.topics.contains_key(&topic.name) {
                    return Err(MetaError::AlreadyExists {
                        what: format!("topic {}", topic.name),
                    });
                }
                let floor = state.floor(&topic.name);
                start_above_floor(&mut topic, &mut partitions, floor)?;
                let revision = state.next_revision();
                let mut events = vec![MetaEvent::TopicCreated(topic.clone())];
                let mut created = Vec::with_capacity(partitions.len());
                for (index, value) in partitions.into_iter().enumerate() {
                    let id = PartitionId::new(&topic.name, index as u32);
                    let versioned = Versioned { value, revision };
                    state.partitions.insert(id.clone(), versioned.clone());
                    events.push(MetaEvent::PartitionChanged {
                        partition: id,
                        state: versioned.clone(),
                    });
                    created.push(versioned);
                }
                state.topics.insert(topic.name.clone(), topic);
                Ok((created, events))
            })
        })
    }

    fn topics(&self) -> BoxFuture<'static, Result<Vec<TopicRecord>, MetaError>> {
        let topics = self.read(|state| state.topics.values().cloned().collect());
        Box::pin(async move { Ok(topics) })
    }

    fn delete_topic(&self, topic: &str) -> BoxFuture<'static, Result<TopicTombstone, MetaError>> {
        let topic = topic.to_owned();
        let result = self.apply(|state, _| {
            let Some(record) = state.topics.remove(&topic) else {
                return Err(MetaError::NotFound {
                    what: format!("topic {topic}"),
                });
            };
            state.next_revision();
            // One critical section is etcd's one transaction: no election can slip between the
            // epochs read here and the tombstone written.
            let highest = state
                .partitions
                .iter()
                .filter(|(id, _)| id.topic == topic)
                .map(|(_, versioned)| versioned.value.leader_epoch)
                .max()
                .unwrap_or(0)
                .max(record.first_leader_epoch());
            state.partitions.retain(|id, _| id.topic != topic);
            let leader_epoch_floor = state.raise_tombstone(&topic, highest);
            Ok((
                TopicTombstone { leader_epoch_floor },
                vec![MetaEvent::TopicDeleted(topic.clone())],
            ))
        });
        Box::pin(async move { result })
    }

    fn alter_topic_config(
        &self,
        topic: &str,
        expected: TopicConfig,
        config: TopicConfig,
    ) -> BoxFuture<'static, Result<TopicRecord, MetaError>> {
        let topic = topic.to_owned();
        let result = self.apply(|state, _| {
            let Some(record) = state.topics.get(&topic) else {
                return Err(MetaError::NotFound {
                    what: format!("topic {topic}"),
                });
            };
            if record.config != expected {
                return Err(MetaError::TopicConfigChanged {
                    topic: topic.clone(),
                    current: record.config,
                });
            }
            let mut record = record.clone();
            record.config = config;
            state.next_revision();
            state.topics.insert(topic.clone(), record.clone());
            Ok((record.clone(), vec![MetaEvent::TopicCreated(record)]))
        });
        Box::pin(async move { result })
    }

    fn create_partitions(
        &self,
        topic: &str,
        expected_count: u32,
        mut partitions: Vec<PartitionState>,
    ) -> BoxFuture<'static, Result<GrownTopic, MetaError>> {
        let topic = topic.to_owned();
        // One critical section is etcd's one transaction: the count compared is the count
        // replaced, and no other grow can place the same partition indexes.
        let result = self.apply(|state, _| {
            let Some(record) = state.topics.get(&topic) else {
                return Err(MetaError::NotFound {
                    what: format!("topic {topic}"),
                });
            };
            let grown = prepare_new_partitions(record, expected_count, &mut partitions)?;
            let revision = state.next_revision();
            let mut events = vec![MetaEvent::TopicCreated(grown.clone())];
            let mut created = Vec::with_capacity(partitions.len());
            for (offset, value) in partitions.into_iter().enumerate() {
                let index = expected_count + u32::try_from(offset).expect("at most 127 new");
                let id = PartitionId::new(&topic, index);
                let versioned = Versioned { value, revision };
                state.partitions.insert(id.clone(), versioned.clone());
                events.push(MetaEvent::PartitionChanged {
                    partition: id,
                    state: versioned.clone(),
                });
                created.push(versioned);
            }
            state.topics.insert(topic.clone(), grown.clone());
            Ok(((grown, created), events))
        });
        Box::pin(async move { result })
    }

    fn deleted_topic_floor(
        &self,
        topic: &str,
    ) -> BoxFuture<'static, Result<LeaderEpoch, MetaError>> {
        let floor = self.read(|state| state.floor(topic));
        Box::pin(async move { Ok(floor) })
    }

    fn partition_state(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, Result<Versioned<PartitionState>, MetaError>> {
        let found = self.read(|state| state.partitions.get(&partition).cloned());
        Box::pin(async move {
            found.ok_or_else(|| MetaError::NotFound {
                what: format!("partition {partition}"),
            })
        })
    }

    fn partition_states(&self) -> BoxFuture<'static, Result<PartitionStates, MetaError>> {
        let states = self.read(|state| {
            state
                .partitions
                .iter()
                .map(|(id, state)| (id.clone(), state.clone()))
                .collect()
        });
        Box::pin(async move { Ok(states) })
    }

    fn compare_and_swap_partition(
        &self,
        partition: PartitionId,
        expected_revision: i64,
        value: PartitionState,
    ) -> BoxFuture<'static, Result<Versioned<PartitionState>, MetaError>> {
        let result = self.apply(|state, _| {
            let current = match state.partitions.get(&partition) {
                None => {
                    return Err(MetaError::NotFound {
                        what: format!("partition {partition}"),
                    })
                }
                Some(current) if current.revision != expected_revision => {
                    return Err(MetaError::Conflict {
                        partition: partition.clone(),
                        expected_revision,
                        current: Box::new(current.clone()),
                    })
                }
                Some(_) => Versioned {
                    value,
                    revision: state.next_revision(),
                },
            };
            state.partitions.insert(partition.clone(), current.clone());
            let event = MetaEvent::PartitionChanged {
                partition: partition.clone(),
                state: current.clone(),
            };
            Ok((current, vec![event]))
        });
        Box::pin(async move { result })
    }

    fn watch(&self, capacity: usize) -> BoxFuture<'static, Result<MetaWatch, MetaError>> {
        let store = self.clone();
        Box::pin(async move {
            validate_watch_capacity(capacity)?;
            let mut state = store.shared.lock();
            store.shared.expire(&mut state);
            let (sender, events) = mpsc::channel(capacity);
            let id = state.next_watcher_id;
            state.next_watcher_id += 1;
            state.watchers.push(Watcher {
                id,
                sender,
                resync_pending: false,
            });
            Ok(MetaWatch {
                snapshot: state.snapshot(),
                events,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::domain::TopicConfig;

    fn registration(node_id: NodeId) -> BrokerRegistration {
        BrokerRegistration {
            node_id,
            native_addr: format!("127.0.0.1:{}", 9000 + node_id),
            kafka_addr: None,
            incarnation: u64::from(node_id) * 11,
            registered_at_ms: None,
        }
    }

    /// A lease whose TTL passed by the injected clock takes its registration with it, and the
    /// watch sees the broker go down.
    #[tokio::test]
    async fn leases_expire_by_the_injected_clock() {
        let clock = Arc::new(ManualClock::new());
        let store = MemoryMetaStore::with_clock(clock.clone());
        let lease = store
            .register_broker(registration(1), Duration::from_secs(10))
            .await
            .unwrap();
        let mut watch = store.watch(8).await.unwrap();
        assert_eq!(watch.snapshot.brokers, vec![registration(1)]);
        clock.advance(Duration::from_secs(10));
        store.expire_leases();
        assert_eq!(watch.events.recv().await, Some(MetaEvent::BrokerDown(1)));
        assert!(store.live_brokers().await.unwrap().is_empty());
        assert!(!lease.is_valid());
    }

    /// A watch whose channel overflows gets one `Resync` with everything, then events again.
    #[tokio::test]
    async fn overflowing_watch_gets_a_resync() {
        let store = MemoryMetaStore::new();
        let mut watch = store.watch(1).await.unwrap();
        for n in 0..3 {
            let topic = TopicRecord::new(format!("t{n}"), 1, 1, TopicConfig::default());
            let state = PartitionState {
                replicas: vec![1],
                leader: Some(1),
                leader_epoch: 1,
                isr: vec![1],
                min_insync: 1,
            };
            store.create_topic(topic, vec![state]).await.unwrap();
        }
        assert!(matches!(
            watch.events.recv().await,
            Some(MetaEvent::TopicCreated(_))
        ));
        let Some(MetaEvent::Resync(snapshot)) = watch.events.recv().await else {
            panic!("expected a resync");
        };
        assert_eq!(snapshot.topics.len(), 3);
        assert_eq!(snapshot.revision, store.revision());
        store.delete_topic("t0").await.unwrap();
        assert_eq!(
            watch.events.recv().await,
            Some(MetaEvent::TopicDeleted("t0".into()))
        );
    }

    fn placed(replicas: Vec<NodeId>, leader_epoch: LeaderEpoch) -> PartitionState {
        PartitionState {
            leader: replicas.first().copied(),
            isr: replicas.clone(),
            replicas,
            leader_epoch,
            min_insync: 1,
        }
    }

    /// A delete records the highest leader epoch of the topic's partitions as its name's
    /// floor; a topic re-created under the name starts every partition above it and says so
    /// in its record; the floor never goes down over further deletes; an election on a
    /// deleted partition finds nothing to change.
    #[tokio::test]
    async fn a_recreated_topic_starts_above_every_epoch_of_the_deleted_one() {
        let store = MemoryMetaStore::new();
        let topic = TopicRecord::new("t", 2, 1, TopicConfig::default());
        let created = store
            .create_topic(topic.clone(), vec![placed(vec![1], 1), placed(vec![2], 1)])
            .await
            .unwrap();
        let id = PartitionId::new("t", 1);
        store
            .compare_and_swap_partition(id.clone(), created[1].revision, placed(vec![2], 7))
            .await
            .unwrap();
        assert_eq!(store.deleted_topic_floor("t").await.unwrap(), 0);
        let tombstone = store.delete_topic("t").await.unwrap();
        assert_eq!(tombstone.leader_epoch_floor, 7);
        assert_eq!(store.deleted_topic_floor("t").await.unwrap(), 7);
        assert!(matches!(
            store
                .compare_and_swap_partition(id, created[1].revision, placed(vec![2], 8))
                .await,
            Err(MetaError::NotFound { .. })
        ));

        let again = store
            .create_topic(topic.clone(), vec![placed(vec![1], 1), placed(vec![2], 1)])
            .await
            .unwrap();
        assert!(again.iter().all(|state| state.value.leader_epoch == 8));
        let record = store.topics().await.unwrap().remove(0);
        assert_eq!(record.first_leader_epoch(), 8);
        // The re-created topic's own epochs raise the floor on its delete; the floor of a
        // lineage that went no higher than the previous floor stays where it was.
        assert_eq!(store.delete_topic("t").await.unwrap().leader_epoch_floor, 8);
        store
            .create_topic(topic, vec![placed(vec![1], 1), placed(vec![2], 1)])
            .await
            .unwrap();
        assert_eq!(store.delete_topic("t").await.unwrap().leader_epoch_floor, 9);
        assert_eq!(store.deleted_topic_floor("t").await.unwrap(), 9);
        assert!(matches!(
            store.delete_topic("t").await,
            Err(MetaError::NotFound { .. })
        ));
    }

    /// The new partitions of a re-created topic start at its first leader epoch (above the
    /// deleted lineage's floor), not at the epoch the caller placed them at; a grow from a stale
    /// count, with the wrong number of replicas, or of nothing, writes nothing.
    #[tokio::test]
    async fn new_partitions_of_a_recreated_topic_start_above_the_deleted_lineage() {
        let store = MemoryMetaStore::new();
        let topic = TopicRecord::new("t", 1, 1, TopicConfig::default());
        store
            .create_topic(topic.clone(), vec![placed(vec![1], 7)])
            .await
            .unwrap();
        assert_eq!(store.delete_topic("t").await.unwrap().leader_epoch_floor, 7);
        store
            .create_topic(topic, vec![placed(vec![1], 1)])
            .await
            .unwrap();
        let (record, created) = store
            .create_partitions("t", 1, vec![placed(vec![1], 1), placed(vec![1], 1)])
            .await
            .unwrap();
        assert_eq!(record.partition_count, 3);
        assert_eq!(record.first_leader_epoch(), 8);
        assert!(created.iter().all(|state| state.value.leader_epoch == 8));
        let revision = store.revision();
        assert!(matches!(
            store
                .create_partitions("t", 1, vec![placed(vec![1], 1)])
                .await,
            Err(MetaError::PartitionCountChanged { current: 3, .. })
        ));
        assert!(matches!(
            store
                .create_partitions("t", 3, vec![placed(vec![1, 2], 1)])
                .await,
            Err(MetaError::Invalid(_))
        ));
        assert!(matches!(
            store.create_partitions("t", 3, vec![]).await,
            Err(MetaError::Invalid(_))
        ));
        assert_eq!(store.revision(), revision, "nothing written");
    }

    /// Past `TOPIC_TOMBSTONES_MAX` deleted names, the lowest tombstones fold into the
    /// cluster-wide floor: no name's floor goes down, a name never deleted reads the folded
    /// floor, and a re-created folded name still starts above its old epochs.
    #[tokio::test]
    async fn tombstones_past_the_limit_fold_without_lowering_any_floor() {
        let store = MemoryMetaStore::new();
        let names = TOPIC_TOMBSTONES_MAX + 3;
        for index in 0..names {
            let name = format!("n{index}");
            let epoch = LeaderEpoch::try_from(index).unwrap() + 1;
            let topic = TopicRecord::new(name.clone(), 1, 1, TopicConfig::default());
            store
                .create_topic(topic, vec![placed(vec![1], epoch)])
                .await
                .unwrap();
            store.delete_topic(&name).await.unwrap();
        }
        {
            // A block, not `drop`: clippy's await_holding_lock sees only scopes.
            let state = store.shared.lock();
            assert_eq!(state.tombstones.len(), TOPIC_TOMBSTONES_MAX);
            assert_eq!(state.folded_floor, 3, "n0, n1 and n2 folded");
        }
        for index in 0..names {
            let floor = store
                .deleted_topic_floor(&format!("n{index}"))
                .await
                .unwrap();
            assert!(
                floor > LeaderEpoch::try_from(index).unwrap(),
                "n{index}: {floor}"
            );
        }
        assert_eq!(store.deleted_topic_floor("never").await.unwrap(), 3);
        let topic = TopicRecord::new("n0", 1, 1, TopicConfig::default());
        let recreated = store
            .create_topic(topic, vec![placed(vec![1], 1)])
            .await
            .unwrap();
        assert_eq!(recreated[0].value.leader_epoch, 4);
    }
}
