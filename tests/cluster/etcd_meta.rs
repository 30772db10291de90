//! The metadata store against a real etcd (started by the test, skipped with a note where the
//! `etcd` binary is missing) and, with the same test bodies, against the in-memory store: both
//! must keep the same promises (registrations under a lease, compare-and-swap on revisions,
//! topics created whole and only once, watches that miss nothing or say `Resync`).
//! The etcd-only tests at the end cover what the memory store cannot fail at: an etcd restart,
//! compaction, a corrupt value, an unreachable endpoint.

use crate::support::etcd;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelog::cluster::meta::{
    place_replicas, MemoryMetaStore, MetaError, MetaEvent, MetaStore, MetaWatch, PartitionId,
    RegistrationLoss, TopicRecord,
};
use fencelog::cluster::{BrokerRegistration, NodeId, PartitionState};
use fencelog::domain::TopicConfig;

#[cfg(feature = "etcd")]
use etcd::EtcdServer;
#[cfg(feature = "etcd")]
use fencelog::cluster::meta::{EtcdConfig, EtcdMetaStore};

/// The shortest registration TTL: etcd (started with 500 ms elections) honours it.
const SHORT_TTL: Duration = Duration::from_secs(1);

/// Long enough that only a revoke (never an expiry) can explain a registration vanishing.
const LONG_TTL: Duration = Duration::from_secs(30);

/// How long a test waits for something that should happen in about a TTL.
const PATIENCE: Duration = Duration::from_secs(8);

/// A store under test, with what it takes to let its leases expire.
enum Backend {
    Memory(MemoryMetaStore),
    #[cfg(feature = "etcd")]
    Etcd {
        store: EtcdMetaStore,
        /// Kept for the test's length: dropping it kills etcd.
        _server: EtcdServer,
    },
}

impl Backend {
    fn memory() -> Self {
        Backend::Memory(MemoryMetaStore::new())
    }

    #[cfg(feature = "etcd")]
    async fn etcd(test: &str) -> Option<Self> {
        let server = tokio::task::spawn_blocking({
            let test = test.to_owned();
            move || EtcdServer::start_or_skip(&test)
        })
        .await
        .unwrap()?;
        let config = EtcdConfig::new([server.endpoint()]).with_cluster_name("test-cluster");
        let store = EtcdMetaStore::connect(config)
            .await
            .expect("connect to etcd");
        Some(Backend::Etcd {
            store,
            _server: server,
        })
    }

    fn store(&self) -> &dyn MetaStore {
        match self {
            Backend::Memory(store) => store,
            #[cfg(feature = "etcd")]
            Backend::Etcd { store, .. } => store,
        }
    }

    /// Lets the store act on time: etcd expires leases by itself; the memory store does it on
    /// its next operation, or here.
    fn tick(&self) {
        match self {
            Backend::Memory(store) => store.expire_leases(),
            #[cfg(feature = "etcd")]
            Backend::Etcd { .. } => {}
        }
    }

    /// Waits until `condition` holds on the store (ticking it), for at most [`PATIENCE`].
    async fn eventually<F, Fut>(&self, what: &str, mut condition: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + PATIENCE;
        loop {
            self.tick();
            if condition().await {
                return;
            }
            assert!(Instant::now() < deadline, "not within {PATIENCE:?}: {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The next event of `watch` (ticking the store meanwhile), within [`PATIENCE`].
    async fn next_event(&self, watch: &mut MetaWatch) -> MetaEvent {
        let deadline = Instant::now() + PATIENCE;
        loop {
            self.tick();
            match tokio::time::timeout(Duration::from_millis(100), watch.events.recv()).await {
                Ok(Some(event)) => return event,
                Ok(None) => panic!("the watch ended"),
                Err(_elapsed) => {
                    assert!(Instant::now() < deadline, "no event within {PATIENCE:?}");
                }
            }
        }
    }

    async fn live(&self) -> Vec<NodeId> {
        let brokers = self.store().live_brokers().await.unwrap();
        brokers.iter().map(|broker| broker.node_id).collect()
    }
}

fn registration(node_id: NodeId) -> BrokerRegistration {
    BrokerRegistration {
        node_id,
        native_addr: format!("127.0.0.1:{}", 9100 + node_id),
        kafka_addr: node_id
            .is_multiple_of(2)
            .then(|| format!("127.0.0.1:{}", 9200 + node_id)),
        incarnation: 1000 + u64::from(node_id),
        registered_at_ms: Some(1_700_000_000_000),
    }
}

fn topic(name: &str, partitions: u32) -> (TopicRecord, Vec<PartitionState>) {
    let record = TopicRecord::new(name, partitions, 3, TopicConfig::default());
    let states = place_replicas(&[1, 2, 3], name, partitions, 3, record.min_insync).unwrap();
    (record, states)
}

// ---- The shared test bodies ----

/// Registered brokers are listed; a second registration of a live node id is refused; a
/// broker whose handle was abandoned (no revoke, as in a crash) is gone after its TTL while
/// one kept alive stays; closing revokes at once.
async fn registration_expires_after_ttl_without_revoke(backend: &Backend) {
    let store = backend.store();
    let crashed = store
        .register_broker(registration(1), SHORT_TTL)
        .await
        .unwrap();
    let kept = store
        .register_broker(registration(2), SHORT_TTL)
        .await
        .unwrap();
    assert_eq!(
        store.live_brokers().await.unwrap(),
        vec![registration(1), registration(2)]
    );
    let duplicate = store.register_broker(registration(1), SHORT_TTL).await;
    assert!(
        matches!(&duplicate, Err(MetaError::AlreadyExists { what }) if what.contains("broker 1")),
        "{duplicate:?}"
    );
    assert!(crashed.is_valid() && kept.is_valid());

    let abandoned_at = Instant::now();
    crashed.abandon();
    backend
        .eventually("the abandoned registration expires", || async {
            backend.live().await == vec![2]
        })
        .await;
    assert!(
        abandoned_at.elapsed() >= SHORT_TTL * 8 / 10,
        "gone before its TTL: {:?}",
        abandoned_at.elapsed()
    );
    // Past the TTL several times over, the kept registration holds.
    tokio::time::sleep(SHORT_TTL).await;
    backend.tick();
    assert_eq!(backend.live().await, vec![2]);
    assert!(kept.is_valid(), "{:?}", kept.loss());

    kept.close().await.unwrap();
    assert!(backend.live().await.is_empty());
}

/// Dropping the handle revokes the registration long before its TTL, and a handle whose lease
/// is revoked learns that it lost it.
async fn dropping_the_handle_revokes_at_once(backend: &Backend) {
    let store = backend.store();
    let lease = store
        .register_broker(registration(5), LONG_TTL)
        .await
        .unwrap();
    assert_eq!(backend.live().await, vec![5]);
    drop(lease);
    backend
        .eventually("the dropped registration is revoked", || async {
            backend.live().await.is_empty()
        })
        .await;
    // The node id is free again.
    let again = store
        .register_broker(registration(5), LONG_TTL)
        .await
        .unwrap();
    assert!(again.valid_until().is_some());
    again.close().await.unwrap();
}

/// A compare-and-swap against the revision read wins once; a second one against the same
/// (now stale) revision loses with the current state and revision; a partition that does not
/// exist is `NotFound`.
async fn compare_and_swap_wins_once_and_conflict_returns_current(backend: &Backend) {
    let store = backend.store();
    let (record, states) = topic("orders", 2);
    store.create_topic(record, states).await.unwrap();
    let id = PartitionId::new("orders", 1);
    let read = store.partition_state(id.clone()).await.unwrap();

    let mut moved = read.value.clone();
    moved.leader = Some(moved.replicas[1]);
    moved.leader_epoch += 1;
    moved.isr.retain(|&node| node != read.value.replicas[0]);
    let written = store
        .compare_and_swap_partition(id.clone(), read.revision, moved.clone())
        .await
        .unwrap();
    assert_eq!(written.value, moved);
    assert!(written.revision > read.revision);
    assert_eq!(store.partition_state(id.clone()).await.unwrap(), written);

    let mut rival = read.value.clone();
    rival.leader_epoch += 1;
    match store
        .compare_and_swap_partition(id.clone(), read.revision, rival)
        .await
    {
        Err(MetaError::Conflict {
            partition,
            expected_revision,
            current,
        }) => {
            assert_eq!(partition, id);
            assert_eq!(expected_revision, read.revision);
            assert_eq!(*current, written);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(store.partition_state(id.clone()).await.unwrap(), written);

    let missing = PartitionId::new("orders", 7);
    assert!(matches!(
        store
            .compare_and_swap_partition(missing.clone(), written.revision, moved.clone())
            .await,
        Err(MetaError::NotFound { .. })
    ));
    assert!(matches!(
        store.partition_state(missing).await,
        Err(MetaError::NotFound { .. })
    ));
}

/// A topic appears whole (record and every partition state, at one revision) and only once;
/// a refused creation writes nothing; a delete removes it whole; a deleted topic's partition
/// is never re-created by a compare-and-swap.
async fn create_topic_is_atomic_and_only_if_absent(backend: &Backend) {
    let store = backend.store();
    let (record, states) = topic("events", 3);
    let created = store
        .create_topic(record.clone(), states.clone())
        .await
        .unwrap();
    assert_eq!(created.len(), 3);
    assert!(created.iter().all(|s| s.revision == created[0].revision));
    assert_eq!(store.topics().await.unwrap(), vec![record.clone()]);
    let all = store.partition_states().await.unwrap();
    let expected: Vec<(PartitionId, PartitionState)> = (0..3)
        .map(|index| {
            (
                PartitionId::new("events", index),
                states[index as usize].clone(),
            )
        })
        .collect();
    let read: Vec<(PartitionId, PartitionState)> = all
        .iter()
        .map(|(id, s)| (id.clone(), s.value.clone()))
        .collect();
    assert_eq!(read, expected);

    // Again, with other settings: refused, nothing changes.
    let (bigger, bigger_states) = topic("events", 5);
    let again = store.create_topic(bigger, bigger_states).await;
    assert!(
        matches!(&again, Err(MetaError::AlreadyExists { what }) if what == "topic events"),
        "{again:?}"
    );
    assert_eq!(store.topics().await.unwrap(), vec![record.clone()]);
    assert_eq!(store.partition_states().await.unwrap(), all);

    // States that do not match the record: refused before anything is written.
    let (other, mut other_states) = topic("other", 2);
    other_states.pop();
    assert!(matches!(
        store.create_topic(other, other_states).await,
        Err(MetaError::Invalid(_))
    ));
    assert_eq!(store.topics().await.unwrap(), vec![record.clone()]);

    store.delete_topic("events").await.unwrap();
    assert!(store.topics().await.unwrap().is_empty());
    assert!(store.partition_states().await.unwrap().is_empty());
    assert!(matches!(
        store.delete_topic("events").await,
        Err(MetaError::NotFound { .. })
    ));
    assert!(matches!(
        store
            .compare_and_swap_partition(
                PartitionId::new("events", 0),
                created[0].revision,
                states[0].clone()
            )
            .await,
        Err(MetaError::NotFound { .. })
    ));
    assert!(store.partition_states().await.unwrap().is_empty());

    // The name can be used again.
    store.create_topic(record, states).await.unwrap();
}

/// A watch starts from a snapshot (brokers, topics, partition states, revision) and then
/// delivers, in order: partition changes with their new revisions, a broker going down when
/// its lease lapses, a broker coming up, a topic created (record before partitions) and
/// deleted.
async fn watch_delivers_broker_down_and_partition_changes(backend: &Backend) {
    let store = backend.store();
    let steady = store
        .register_broker(registration(1), SHORT_TTL)
        .await
        .unwrap();
    let doomed = store
        .register_broker(registration(2), SHORT_TTL)
        .await
        .unwrap();
    let (record, states) = topic("audit", 2);
    store.create_topic(record.clone(), states).await.unwrap();

    let mut watch = store.watch(64).await.unwrap();
    let snapshot = &watch.snapshot;
    assert_eq!(snapshot.brokers, vec![registration(1), registration(2)]);
    assert_eq!(snapshot.topics, vec![record]);
    assert_eq!(snapshot.partitions.len(), 2);
    assert!(snapshot
        .partitions
        .iter()
        .all(|(_, state)| state.revision <= snapshot.revision));

    let (id, read) = snapshot.partitions[0].clone();
    let mut changed = read.value.clone();
    changed.isr.truncate(2);
    let written = store
        .compare_and_swap_partition(id.clone(), read.revision, changed)
        .await
        .unwrap();
    assert!(written.revision > snapshot.revision);
    assert_eq!(
        backend.next_event(&mut watch).await,
        MetaEvent::PartitionChanged {
            partition: id,
            state: written
        }
    );

    doomed.abandon();
    assert_eq!(
        backend.next_event(&mut watch).await,
        MetaEvent::BrokerDown(2)
    );

    let newcomer = store
        .register_broker(registration(3), SHORT_TTL)
        .await
        .unwrap();
    assert_eq!(
        backend.next_event(&mut watch).await,
        MetaEvent::BrokerUp(registration(3))
    );

    let (second, second_states) = topic("second", 1);
    store
        .create_topic(second.clone(), second_states)
        .await
        .unwrap();
    assert_eq!(
        backend.next_event(&mut watch).await,
        MetaEvent::TopicCreated(second)
    );
    assert!(matches!(
        backend.next_event(&mut watch).await,
        MetaEvent::PartitionChanged { partition, .. } if partition == PartitionId::new("second", 0)
    ));
    store.delete_topic("second").await.unwrap();
    assert_eq!(
        backend.next_event(&mut watch).await,
        MetaEvent::TopicDeleted("second".into())
    );
    assert!(steady.is_valid(), "{:?}", steady.loss());
    steady.close().await.unwrap();
    newcomer.close().await.unwrap();
}

/// A watcher that does not read falls behind: once its channel is full it gets a `Resync` with
/// the state after what it missed, and a consumer that applies events and resyncs in order ends
/// at the store's state, without ever holding more than the channel's capacity.
async fn slow_watcher_gets_a_resync(backend: &Backend) {
    let store = backend.store();
    let (record, states) = topic("busy", 1);
    store.create_topic(record, states).await.unwrap();
    let id = PartitionId::new("busy", 0);
    let mut watch = store.watch(2).await.unwrap();
    let mut current = store.partition_state(id.clone()).await.unwrap();
    for _ in 0..10 {
        let mut next = current.value.clone();
        next.leader_epoch += 1;
        current = store
            .compare_and_swap_partition(id.clone(), current.revision, next)
            .await
            .unwrap();
    }
    // etcd streams the ten changes to the watch task asynchronously: give it time to meet the
    // full channel before this consumer starts reading (on a loaded machine a consumer that
    // reads at once may keep up, and then no resync is owed).
    let deadline = Instant::now() + Duration::from_secs(10);
    while watch.events.len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut view = watch.snapshot.partitions.clone();
    let mut resyncs = 0;
    let mut events_before_first_resync = 0;
    while view != vec![(id.clone(), current.clone())] {
        match backend.next_event(&mut watch).await {
            MetaEvent::Resync(snapshot) => {
                resyncs += 1;
                view = snapshot.partitions;
            }
            MetaEvent::PartitionChanged { partition, state } => {
                if resyncs == 0 {
                    events_before_first_resync += 1;
                }
                assert_eq!(partition, id);
                view = vec![(partition, state)];
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        resyncs >= 1,
        "ten changes into a channel of two without a resync"
    );
    assert!(events_before_first_resync <= 2);

    // Changes after that arrive again (as events, or in a resync if still behind).
    let mut next = current.value.clone();
    next.leader_epoch += 1;
    let after = store
        .compare_and_swap_partition(id.clone(), current.revision, next)
        .await
        .unwrap();
    while view != vec![(id.clone(), after.clone())] {
        match backend.next_event(&mut watch).await {
            MetaEvent::Resync(snapshot) => view = snapshot.partitions,
            MetaEvent::PartitionChanged { partition, state } => view = vec![(partition, state)],
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// A topic config change is a compare-and-swap of the topic record: it wins from the config
/// read, loses (`TopicConfigChanged` with the config now, nothing written) from a stale one,
/// is `NotFound` for a missing topic, leaves the partition states alone, and a watch delivers
/// the new record as `TopicCreated`.
async fn alter_topic_config_is_a_compare_and_swap(backend: &Backend) {
    let store = backend.store();
    let (record, states) = topic("configured", 2);
    store.create_topic(record.clone(), states).await.unwrap();
    let partitions = store.partition_states().await.unwrap();
    let mut watch = store.watch(16).await.unwrap();
    let altered = TopicConfig {
        retention_ms: Some(3_600_000),
        ..record.config
    };
    let written = store
        .alter_topic_config("configured", record.config, altered)
        .await
        .unwrap();
    assert_eq!(written.config, altered);
    assert_eq!(written.partition_count, record.partition_count);
    assert_eq!(store.topics().await.unwrap(), vec![written.clone()]);
    assert_eq!(
        store.partition_states().await.unwrap(),
        partitions,
        "untouched"
    );
    let stale = store
        .alter_topic_config("configured", record.config, TopicConfig::default())
        .await;
    assert!(
        matches!(&stale, Err(MetaError::TopicConfigChanged { current, .. }) if *current == altered),
        "{stale:?}"
    );
    assert_eq!(store.topics().await.unwrap(), vec![written.clone()]);
    let missing = store
        .alter_topic_config("missing", record.config, altered)
        .await;
    assert!(
        matches!(missing, Err(MetaError::NotFound { .. })),
        "{missing:?}"
    );
    loop {
        match backend.next_event(&mut watch).await {
            MetaEvent::TopicCreated(seen) => {
                assert_eq!(seen, written);
                break;
            }
            MetaEvent::Resync(snapshot) if snapshot.topics == vec![written.clone()] => break,
            _ => {}
        }
    }
}

/// Adding partitions is one transaction compared against the partition count read: it writes
/// the record's new count and the new partitions' states (at the topic's first leader epoch at
/// least, old partitions untouched); a grow computed from a stale count loses
/// (`PartitionCountChanged` with the count now, nothing written); a missing topic is
/// `NotFound`; a watch delivers the new record and the new partitions.
async fn create_partitions_is_a_compare_and_swap_of_the_count(backend: &Backend) {
    let store = backend.store();
    let (record, states) = topic("grown", 2);
    store.create_topic(record.clone(), states).await.unwrap();
    let before = store.partition_states().await.unwrap();
    let mut watch = store.watch(16).await.unwrap();
    let placed = place_replicas(&[1, 2, 3], "grown", 4, 3, record.min_insync).unwrap();
    let new_states: Vec<PartitionState> = placed[2..].to_vec();
    let (written, created) = store
        .create_partitions("grown", 2, new_states.clone())
        .await
        .unwrap();
    assert_eq!(written.partition_count, 4);
    assert_eq!(written.config, record.config);
    assert_eq!(written.first_leader_epoch, record.first_leader_epoch);
    assert_eq!(store.topics().await.unwrap(), vec![written.clone()]);
    assert_eq!(created.len(), 2);
    assert!(created
        .iter()
        .all(|state| state.value.leader_epoch >= record.first_leader_epoch()));
    let after = store.partition_states().await.unwrap();
    assert_eq!(after.len(), 4);
    assert_eq!(&after[..2], &before[..], "old partitions untouched");
    assert_eq!(after[2].0, PartitionId::new("grown", 2));
    assert_eq!(after[3].1.value.replicas, new_states[1].replicas);

    // Another grow placed from the old count loses; nothing is written.
    let stale = store
        .create_partitions("grown", 2, new_states.clone())
        .await;
    assert!(
        matches!(
            &stale,
            Err(MetaError::PartitionCountChanged { current: 4, .. })
        ),
        "{stale:?}"
    );
    assert_eq!(store.partition_states().await.unwrap(), after);
    let missing = store.create_partitions("missing", 1, new_states).await;
    assert!(
        matches!(missing, Err(MetaError::NotFound { .. })),
        "{missing:?}"
    );
    let mut seen_record = false;
    let mut seen_partitions = 0;
    while !(seen_record && seen_partitions == 2) {
        match backend.next_event(&mut watch).await {
            MetaEvent::TopicCreated(seen) => {
                assert_eq!(seen, written);
                seen_record = true;
            }
            MetaEvent::PartitionChanged { partition, .. } => {
                assert!(partition.partition >= 2, "{partition}");
                seen_partitions += 1;
            }
            MetaEvent::Resync(snapshot) if snapshot.topics == vec![written.clone()] => break,
            _ => {}
        }
    }
}

/// Config changes and grows of one topic, made at once, all land: each alter re-reads on
/// `TopicConfigChanged` and each grow on `PartitionCountChanged` (the caller's answer to a
/// change that came first), while a change whose record was rewritten by another kind of
/// change (its own precondition still true) is read and tried again inside the store, after a
/// backoff wait; none gives up as `Contended` and none is lost.
async fn racing_changes_of_one_topic_retry_and_all_land(backend: &Backend) {
    const ALTERS: u64 = 4;
    const GROWS: u32 = 4;
    let store = backend.store();
    let (record, states) = topic("raced", 1);
    store.create_topic(record.clone(), states).await.unwrap();
    let alters = futures::future::join_all((0..ALTERS).map(|_| raise_retention_by_one(store)));
    let grows = futures::future::join_all((0..GROWS).map(|_| grow_by_one(store)));
    futures::future::join(alters, grows).await;
    let end = raced_topic(store).await;
    assert_eq!(end.config.retention_ms, Some(ALTERS), "{end:?}");
    assert_eq!(end.partition_count, 1 + GROWS, "{end:?}");
    let partitions = store.partition_states().await.unwrap();
    assert_eq!(partitions.len(), (1 + GROWS) as usize);
}

/// The record of the topic `raced`.
async fn raced_topic(store: &dyn MetaStore) -> TopicRecord {
    let topics = store.topics().await.unwrap();
    topics
        .into_iter()
        .find(|topic| topic.name == "raced")
        .unwrap()
}

/// Raises `raced`'s retention by one millisecond, re-reading while other alters come first.
async fn raise_retention_by_one(store: &dyn MetaStore) {
    loop {
        let read = raced_topic(store).await;
        let config = TopicConfig {
            retention_ms: Some(read.config.retention_ms.unwrap_or(0) + 1),
            ..read.config
        };
        match store.alter_topic_config("raced", read.config, config).await {
            Ok(_) => return,
            Err(MetaError::TopicConfigChanged { .. }) => {}
            Err(error) => panic!("alter: {error:?}"),
        }
    }
}

/// Adds one partition to `raced`, re-reading while other grows come first.
async fn grow_by_one(store: &dyn MetaStore) {
    loop {
        let read = raced_topic(store).await;
        let count = read.partition_count;
        let placed = place_replicas(&[1, 2, 3], "raced", count + 1, 3, read.min_insync).unwrap();
        let new_state = placed[count as usize..].to_vec();
        match store.create_partitions("raced", count, new_state).await {
            Ok(_) => return,
            Err(MetaError::PartitionCountChanged { .. }) => {}
            Err(error) => panic!("grow: {error:?}"),
        }
    }
}

/// Runs each shared body against a fresh memory store and a fresh etcd.
/// The registration of a node id is read with its lease: the holder's value, its lease id, the
/// granted TTL, and a remaining TTL that a renewal raises again (what a broker claiming the node
/// id watches); a node id nobody holds reads `None`; revoking the lease removes the
/// registration at once, and revoking a lease already gone is no error.
async fn a_registration_is_read_with_its_lease_and_revoked_by_lease_id(backend: &Backend) {
    let store = backend.store();
    assert!(store.broker_registration(5).await.unwrap().is_none());
    let lease = store
        .register_broker(registration(5), LONG_TTL)
        .await
        .unwrap();
    let held = store.broker_registration(5).await.unwrap().expect("held");
    assert_eq!(held.registration, registration(5));
    assert_eq!(held.lease_id, lease.lease_id());
    assert_eq!(held.granted_ttl, LONG_TTL);
    assert!(held.remaining_ttl <= LONG_TTL && held.remaining_ttl >= LONG_TTL / 2);
    store.revoke_lease(held.lease_id).await.unwrap();
    backend.tick();
    assert!(store.broker_registration(5).await.unwrap().is_none());
    assert!(!backend.live().await.contains(&5));
    store.revoke_lease(held.lease_id).await.unwrap();
    // The handle learns the lease is gone at its next renewal; nothing else is needed.
    drop(lease);
}

macro_rules! on_both_stores {
    ($($body:ident),* $(,)?) => {
        mod memory_store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $body() {
                    super::$body(&super::Backend::memory()).await;
                }
            )*
        }
        #[cfg(feature = "etcd")]
        mod etcd_store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $body() {
                    let Some(backend) = super::Backend::etcd(stringify!($body)).await else {
                        return;
                    };
                    super::$body(&backend).await;
                }
            )*
        }
    };
}

on_both_stores!(
    registration_expires_after_ttl_without_revoke,
    a_registration_is_read_with_its_lease_and_revoked_by_lease_id,
    dropping_the_handle_revokes_at_once,
    compare_and_swap_wins_once_and_conflict_returns_current,
    create_topic_is_atomic_and_only_if_absent,
    watch_delivers_broker_down_and_partition_changes,
    slow_watcher_gets_a_resync,
    alter_topic_config_is_a_compare_and_swap,
    create_partitions_is_a_compare_and_swap_of_the_count,
    racing_changes_of_one_topic_retry_and_all_land,
);

// ---- etcd only ----

#[cfg(feature = "etcd")]
mod etcd_only {
    use super::*;

    /// Across an etcd restart (SIGKILL, same data): requests fail as `Unavailable` naming the
    /// endpoint while it is down, then succeed again on the same store; the registration
    /// survives (its keep-alive stream re-opens); the watch re-opens where it stopped and
    /// delivers the changes made after the restart, nothing twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn store_reconnects_across_an_etcd_restart() {
        let Some(mut server) = EtcdServer::start_or_skip("store_reconnects_across_an_etcd_restart")
        else {
            return;
        };
        let mut config = EtcdConfig::new([server.endpoint()]);
        config.request_timeout = Duration::from_secs(1);
        let store = EtcdMetaStore::connect(config).await.unwrap();
        let lease = store
            .register_broker(registration(1), Duration::from_secs(6))
            .await
            .unwrap();
        let (record, states) = topic("durable", 1);
        store.create_topic(record.clone(), states).await.unwrap();
        let mut watch = store.watch(64).await.unwrap();

        server.kill();
        match store.topics().await {
            Err(MetaError::Unavailable { endpoints, .. }) => {
                assert_eq!(endpoints, server.endpoint())
            }
            other => panic!("expected unavailable, got {other:?}"),
        }
        let server = tokio::task::spawn_blocking(move || {
            server.start_again().expect("restart etcd");
            server
        })
        .await
        .unwrap();

        // The same store works again once the client has reconnected.
        let deadline = Instant::now() + PATIENCE;
        let topics = loop {
            match store.topics().await {
                Ok(topics) => break topics,
                Err(error) => {
                    assert!(Instant::now() < deadline, "no reconnect: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        assert_eq!(topics, vec![record]);

        let id = PartitionId::new("durable", 0);
        let read = store.partition_state(id.clone()).await.unwrap();
        let mut changed = read.value.clone();
        changed.leader_epoch += 1;
        let written = store
            .compare_and_swap_partition(id.clone(), read.revision, changed)
            .await
            .unwrap();
        let backend_events = tokio::time::timeout(PATIENCE, watch.events.recv())
            .await
            .expect("the watch delivers after the restart")
            .expect("the watch is open");
        assert_eq!(
            backend_events,
            MetaEvent::PartitionChanged {
                partition: id,
                state: written
            }
        );

        // Keep-alives resumed: the registration outlives its TTL.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(lease.is_valid(), "{:?}", lease.loss());
        let live = store.live_brokers().await.unwrap();
        assert_eq!(live, vec![registration(1)]);
        lease.close().await.unwrap();
        drop(server);
    }

    /// A watch resumed from a revision etcd compacted away starts with a `Resync` carrying the
    /// current state, then follows normally.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn watch_after_a_compacted_revision_resyncs() {
        let Some(server) = EtcdServer::start_or_skip("watch_after_a_compacted_revision_resyncs")
        else {
            return;
        };
        let store = EtcdMetaStore::connect(EtcdConfig::new([server.endpoint()]))
            .await
            .unwrap();
        let (record, states) = topic("old", 1);
        let created = store.create_topic(record, states).await.unwrap();
        let id = PartitionId::new("old", 0);
        let mut current = created[0].clone();
        for _ in 0..3 {
            let mut next = current.value.clone();
            next.leader_epoch += 1;
            current = store
                .compare_and_swap_partition(id.clone(), current.revision, next)
                .await
                .unwrap();
        }
        let mut client = etcd_client::Client::connect([server.endpoint()], None)
            .await
            .unwrap();
        client.compact(current.revision, None).await.unwrap();

        let mut events = store.watch_after(created[0].revision, 8).unwrap();
        let first = tokio::time::timeout(PATIENCE, events.recv()).await.unwrap();
        let Some(MetaEvent::Resync(snapshot)) = first else {
            panic!("expected a resync, got {first:?}");
        };
        assert_eq!(snapshot.partitions, vec![(id.clone(), current.clone())]);
        let mut next = current.value.clone();
        next.leader_epoch += 1;
        let after = store
            .compare_and_swap_partition(id.clone(), current.revision, next)
            .await
            .unwrap();
        let event = tokio::time::timeout(PATIENCE, events.recv()).await.unwrap();
        assert_eq!(
            event,
            Some(MetaEvent::PartitionChanged {
                partition: id,
                state: after
            })
        );
    }

    /// A value that is not fencelog's JSON is reported as `Corrupt`, naming the key to fix.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_corrupt_value_is_reported_with_its_key() {
        let Some(server) = EtcdServer::start_or_skip("a_corrupt_value_is_reported_with_its_key")
        else {
            return;
        };
        let store = EtcdMetaStore::connect(EtcdConfig::new([server.endpoint()]))
            .await
            .unwrap();
        let (record, states) = topic("bent", 1);
        store.create_topic(record, states).await.unwrap();
        let id = PartitionId::new("bent", 0);
        let key = store.layout().partition_key(&id);
        let mut client = etcd_client::Client::connect([server.endpoint()], None)
            .await
            .unwrap();
        client.put(key.clone(), "{not json", None).await.unwrap();
        match store.partition_state(id).await {
            Err(error @ MetaError::Corrupt { .. }) => {
                assert!(error.to_string().contains(&key), "{error}")
            }
            other => panic!("expected corrupt, got {other:?}"),
        }
        assert!(matches!(
            store.watch(8).await,
            Err(MetaError::Corrupt { .. })
        ));
    }

    /// Connecting where no etcd listens fails promptly as `Unavailable`, naming the endpoint.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unreachable_etcd_is_unavailable_naming_the_endpoint() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let endpoint = format!("http://127.0.0.1:{port}");
        let mut config = EtcdConfig::new([endpoint.clone()]);
        config.request_timeout = Duration::from_secs(1);
        let started = Instant::now();
        match EtcdMetaStore::connect(config).await {
            Err(error @ MetaError::Unavailable { .. }) => {
                assert!(error.to_string().contains(&endpoint), "{error}");
            }
            other => panic!("expected unavailable, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    /// A registration whose lease etcd revoked behind its back learns it: the next keep-alive
    /// hears "gone" and the handle reports `Expired`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lease_revoked_elsewhere_is_noticed_as_expired() {
        let Some(server) =
            EtcdServer::start_or_skip("a_lease_revoked_elsewhere_is_noticed_as_expired")
        else {
            return;
        };
        let store = EtcdMetaStore::connect(EtcdConfig::new([server.endpoint()]))
            .await
            .unwrap();
        let lease = store
            .register_broker(registration(4), Duration::from_secs(3))
            .await
            .unwrap();
        let mut client = etcd_client::Client::connect([server.endpoint()], None)
            .await
            .unwrap();
        client.lease_revoke(lease.lease_id()).await.unwrap();
        let loss = tokio::time::timeout(PATIENCE, lease.lost()).await.unwrap();
        assert_eq!(loss, RegistrationLoss::Expired);
        assert!(!lease.is_valid());
        assert!(store.live_brokers().await.unwrap().is_empty());
    }
}

/// The memory store with a manual clock: leases expire exactly when the injected clock says.
#[tokio::test]
async fn memory_leases_follow_the_injected_clock() {
    let clock = Arc::new(fencelog::clock::ManualClock::new());
    let store = MemoryMetaStore::with_clock(clock.clone());
    let lease = store
        .register_broker(registration(9), Duration::from_secs(60))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(59));
    store.expire_leases();
    assert_eq!(store.live_brokers().await.unwrap().len(), 1);
    clock.advance(Duration::from_secs(1));
    assert!(store.live_brokers().await.unwrap().is_empty());
    assert_eq!(lease.lost().await, RegistrationLoss::DeadlinePassed);
}
