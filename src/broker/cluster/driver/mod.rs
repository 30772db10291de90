//! The broker's side of a cluster (`fencelog serve --node-id N --etcd URL`): registration, the
//! metadata watch, and for every partition this broker holds a replica of, the replication
//! engine (`super::replication`) driven with real I/O.
//!
//! The driver is the I/O shell around the sans-I/O [`ReplicaNode`] of each local replica
//! (`crate::cluster::replication::node`, the same code the deterministic simulation runs): it
//! decides nothing itself. One task owns the loop ([`ClusterDriver::run`]): it keeps the
//! registration alive (registering again after a loss), applies the watch's events to a local
//! view of the store, creates the cluster's topics in the local data directory, and every tick
//! steps each local replica's node with the registration, the state last read, what the log made
//! durable and the tick itself; `effects.rs` carries out what the node asks (compare-and-swaps,
//! re-reads, taking over the log, follower tasks, answers to waiting producers). Requests reach
//! the nodes through the replica manager (`check_produce`, `await_commit`,
//! `serve_replica_fetch`, `serve_epoch_end`, `require_leader`, `create_topic`). The driver reads
//! time only through its [`Clock`].
//!
//! What is safe rests on the engines and the fence, not on this loop's timing: a leader
//! acknowledges only while its registration is valid by its own conservative clock, the high
//! watermark is the lowest log end over the ISR, and every replicated append passes the
//! leader-epoch check in the follower's segment writer. This module only has to deliver inputs
//! and apply outputs; being late makes it slow, never wrong.

mod claim;
mod effects;
mod follower_task;
mod lineage;
mod log_limit;
mod replica;
mod requests;
mod serve;
mod topics;
mod view;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub use claim::NodeIdInUse;
pub(crate) use replica::Replica;
pub use view::ClusterState;

use super::ClusterError;
use crate::broker::{Broker, BrokerError};
use crate::clock::Clock;
use crate::cluster::backoff::NextAttempt;
use crate::cluster::meta::{BrokerLease, MetaEvent, MetaStore, PartitionId, TopicRecord};
use crate::cluster::replication::node::{Input, ReplicaNode, ReplicaNodeConfig};
use crate::cluster::replication::ReplicationConfig;
use crate::cluster::{BrokerRegistration, NodeId, PartitionState, Versioned};

/// Default of [`ClusterConfig::registration_ttl`].
pub const DEFAULT_REGISTRATION_TTL: Duration = Duration::from_secs(6);
/// Default of [`ClusterConfig::tick`].
pub const DEFAULT_TICK: Duration = Duration::from_millis(100);
/// Default of [`ClusterConfig::replica_fetch_max_wait`].
pub const DEFAULT_REPLICA_FETCH_MAX_WAIT: Duration = Duration::from_millis(500);
/// Default of [`ClusterConfig::replica_fetch_max_bytes`]: about one bench batch (1,000 records
/// of 1 KiB). A follower receives a fetch's bytes and then writes them; 4 MiB answers ran
/// 25-30% slower at 15-30% more CPU per byte on a 2-core machine than 1 MiB ones (the
/// second copy read them back from memory, not from the cache: `tools/cluster-bench`,
/// docs/benchmarks.md).
pub const DEFAULT_REPLICA_FETCH_MAX_BYTES: u32 = 1 << 20;
/// Default of [`ClusterConfig::topic_ready_wait`].
pub const DEFAULT_TOPIC_READY_WAIT: Duration = Duration::from_secs(10);
/// Most replicas a cluster topic gets when its creator names no replication factor.
pub const DEFAULT_REPLICATION_FACTOR_MAX: u16 = 3;
pub use crate::broker::producer_ids::{CLUSTER_NODE_ID_MAX, PRODUCER_ID_LOCAL_BITS};

/// Capacity of the metadata watch's event channel.
const WATCH_CAPACITY: usize = 4096;
/// First wait before the loop tries again to register, to open the metadata watch or to read a
/// deleted topic's fence floor, after etcd did not answer (each wait jittered: see `crate::cluster::backoff`).
pub const STORE_RETRY_BASE: Duration = Duration::from_millis(100);
/// Longest wait between two such tries: while etcd is gone, the loop asks it about once a
/// second or two (it asked every tick before), and once it is back the broker registers and
/// watches again within this long (the watch task's own cap, `WATCH_RETRY_MAX`, is the same).
pub const STORE_RETRY_CAP: Duration = Duration::from_secs(2);

/// How a broker takes part in a cluster. Every timer has a name and a default.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// This broker's node id (`serve --node-id`).
    pub node_id: NodeId,
    /// Where clients and other brokers reach its native listener.
    pub native_addr: String,
    /// Where Kafka clients reach its Kafka listener (`HOST:PORT`), when it has one: registered
    /// beside the native address, so every broker's Kafka Metadata can name it.
    pub kafka_addr: Option<String>,
    /// The registration's TTL: a crashed broker's partitions are taken over this long after it
    /// stopped renewing (less on its own side: it stops acknowledging earlier).
    pub registration_ttl: Duration,
    /// How often the loop reconciles every replica and ticks the leader engines.
    pub tick: Duration,
    /// Longest a leader holds a follower's fetch when it has nothing new.
    pub replica_fetch_max_wait: Duration,
    /// Most bytes of batches per follower fetch.
    pub replica_fetch_max_bytes: u32,
    /// How long `CreateTopic` waits for the new topic's leaders to be elected.
    pub topic_ready_wait: Duration,
    /// The replication engine's limits and timers.
    pub replication: ReplicationConfig,
    /// Where this broker reaches another's native listener when not at the address that broker
    /// advertises (`serve --peer-addr NODE=HOST:PORT`): a NAT, or a fault-injection proxy on one
    /// broker-to-broker link.
    pub peer_addrs: HashMap<NodeId, String>,
    /// What followers authenticate to their leaders with on a cluster run with `--auth`
    /// (`serve --broker-user`); `None`: they connect without authenticating.
    pub peer_credentials: Option<crate::client::Credentials>,
    /// How the cluster's offsets topic (committed offsets and group membership) is made.
    pub offsets: super::offsets_config::OffsetsTopicConfig,
    /// TLS of every connection this broker opens to another (a follower's to its leader) when
    /// the brokers serve TLS (`serve --tls-cert` with `--peer-tls-ca`); `None`: plain TCP.
    pub peer_tls: Option<crate::client::TlsClientConfig>,
}

impl ClusterConfig {
    /// The defaults for broker `node_id` reachable at `native_addr`.
    pub fn new(node_id: NodeId, native_addr: impl Into<String>) -> Self {
        Self {
            node_id,
            native_addr: native_addr.into(),
            kafka_addr: None,
            registration_ttl: DEFAULT_REGISTRATION_TTL,
            tick: DEFAULT_TICK,
            replica_fetch_max_wait: DEFAULT_REPLICA_FETCH_MAX_WAIT,
            replica_fetch_max_bytes: DEFAULT_REPLICA_FETCH_MAX_BYTES,
            topic_ready_wait: DEFAULT_TOPIC_READY_WAIT,
            replication: ReplicationConfig::default(),
            peer_addrs: HashMap::new(),
            peer_credentials: None,
            offsets: Default::default(),
            peer_tls: None,
        }
    }
}

/// A broker's membership of a cluster. See the module docs.
#[derive(Debug)]
pub struct ClusterDriver {
    config: ClusterConfig,
    incarnation: u64,
    store: Arc<dyn MetaStore>,
    broker: Arc<Broker>,
    /// Every time the driver reads (the nodes' milliseconds, the registration's deadline).
    clock: Arc<dyn Clock>,
    started: Instant,
    state: Mutex<ClusterState>,
    replicas: Mutex<HashMap<PartitionId, Arc<Replica>>>,
    lease: Mutex<Option<Arc<BrokerLease>>>,
    /// Wakes the loop before its next tick (a follower wants a re-read, an election settled).
    wake: Notify,
    /// Signalled whenever the view changes (a `CreateTopic` waits on it).
    view_changed: tokio::sync::watch::Sender<u64>,
    stop: CancellationToken,
    next_waiter: std::sync::atomic::AtomicU64,
    /// Local topics the store has no record of, examined and kept (`lineage.rs`).
    kept_absent: Mutex<std::collections::HashSet<String>>,
    /// What the broker service forgets of a deleted local topic: its leases and metrics.
    service_state: lineage::ServiceState,
    /// Set once this process held its node id: until then it opens no replica (a second
    /// process with a live broker's node id must not follow, lead or delete anything).
    ever_registered: std::sync::atomic::AtomicBool,
    /// Set when another live broker holds this node id: the driver stopped (`claim.rs`).
    refused: tokio::sync::watch::Sender<Option<NodeIdInUse>>,
    /// Repeats of a failed registration or watch, logged at most once per interval.
    register_failures: Mutex<log_limit::RepeatLimiter>,
    watch_failures: Mutex<log_limit::RepeatLimiter>,
    /// When the loop may next try to register after a failed try.
    register_retry: Mutex<NextAttempt>,
    /// When the loop may next read a deleted topic's fence floor after a failed read
    /// (`lineage.rs`).
    floor_retry: Mutex<NextAttempt>,
}

impl ClusterDriver {
    /// A driver for `broker` in the cluster kept in `store`, reading time from `clock` (the
    /// registration's deadline must be on the same clock: give the store the same one), whose
    /// broker grants leases through `leases` and counts in `metrics` (both forget a topic when
    /// its local copy is deleted: a cluster delete, or a returning broker's leftover). Nothing
    /// runs until [`ClusterDriver::start`]. Built by the broker service's cluster assembly
    /// (`BrokerService::clustered`).
    pub fn with_clock(
        config: ClusterConfig,
        store: Arc<dyn MetaStore>,
        broker: Arc<Broker>,
        clock: Arc<dyn Clock>,
        leases: Arc<dyn crate::lease::LeaseAuthority>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Result<Arc<Self>, ClusterError> {
        config
            .replication
            .validate()
            .map_err(|error| ClusterError::Unsupported(error.to_string()))?;
        if config.node_id > CLUSTER_NODE_ID_MAX {
            return Err(ClusterError::Unsupported(format!(
                "node id {} is above {CLUSTER_NODE_ID_MAX} in a cluster (producer ids carry the node id)",
                config.node_id
            )));
        }
        let started = clock.now();
        Ok(Arc::new(Self {
            config,
            incarnation: rand::random::<u64>() | 1,
            store,
            broker,
            clock,
            started,
            state: Mutex::new(ClusterState::default()),
            replicas: Mutex::new(HashMap::new()),
            lease: Mutex::new(None),
            wake: Notify::new(),
            view_changed: tokio::sync::watch::Sender::new(0),
            stop: CancellationToken::new(),
            next_waiter: std::sync::atomic::AtomicU64::new(1),
            kept_absent: Mutex::new(std::collections::HashSet::new()),
            service_state: lineage::ServiceState { leases, metrics },
            ever_registered: std::sync::atomic::AtomicBool::new(false),
            refused: tokio::sync::watch::Sender::new(None),
            register_failures: Mutex::new(log_limit::RepeatLimiter::new(
                log_limit::REPEATED_LOG_INTERVAL,
            )),
            watch_failures: Mutex::new(log_limit::RepeatLimiter::new(
                log_limit::REPEATED_LOG_INTERVAL,
            )),
            register_retry: Mutex::new(NextAttempt::new(STORE_RETRY_BASE, STORE_RETRY_CAP)),
            floor_retry: Mutex::new(NextAttempt::new(STORE_RETRY_BASE, STORE_RETRY_CAP)),
        }))
    }

    /// Starts the loop on the current runtime. It runs until [`ClusterDriver::shutdown`].
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let driver = Arc::clone(self);
        tokio::spawn(async move { driver.run().await })
    }

    /// Stops the loop and every follower task, deposes every leader (its waiters fail) and
    /// revokes the registration, so others take over at once rather than after the TTL.
    pub async fn shutdown(self: &Arc<Self>) {
        self.stop.cancel();
        for replica in self.replicas_snapshot() {
            self.stop_replica(&replica);
        }
        let lease = self
            .lease
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(lease) = lease {
            match Arc::try_unwrap(lease) {
                Ok(lease) => {
                    if let Err(error) = lease.close().await {
                        warn!(%error, "could not revoke the registration; it lapses after its TTL");
                    }
                }
                Err(_) => debug!("registration still shared; it is revoked when dropped"),
            }
        }
    }

    /// Stops as a crash would look to the others: the loop and every role stop, and the
    /// registration is neither renewed nor revoked (the store expires it after its TTL). For
    /// tests and fault injection.
    pub fn abandon(self: &Arc<Self>) {
        self.stop.cancel();
        for replica in self.replicas_snapshot() {
            self.stop_replica(&replica);
        }
        let lease = self
            .lease
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(lease) = lease.and_then(|lease| Arc::try_unwrap(lease).ok()) {
            lease.abandon();
        }
    }

    /// This broker's node id.
    pub fn node_id(&self) -> NodeId {
        self.config.node_id
    }

    /// Resolves when the driver stopped because another live broker holds this node id
    /// (`claim.rs`); the broker should then exit with that error. Pending for ever otherwise.
    pub async fn refused(&self) -> NodeIdInUse {
        let mut refused = self.refused.subscribe();
        loop {
            if let Some(error) = refused.borrow_and_update().clone() {
                return error;
            }
            if refused.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Stops for good: another live broker holds this node id. Nothing of this process was
    /// registered, so there is nothing to revoke.
    fn refuse(self: &Arc<Self>, error: NodeIdInUse) {
        tracing::error!(%error, "refusing to join the cluster");
        self.stop.cancel();
        for replica in self.replicas_snapshot() {
            self.stop_replica(&replica);
        }
        self.refused.send_replace(Some(error));
    }

    /// This process's incarnation (random per start).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Milliseconds on this driver's monotonic clock (the engines' time).
    fn now_ms(&self) -> u64 {
        self.ms_of(self.clock.now())
    }

    fn ms_of(&self, instant: Instant) -> u64 {
        instant
            .saturating_duration_since(self.started)
            .as_millis()
            .try_into()
            .unwrap_or(u64::MAX)
    }

    /// The lease id of the registration held (0: none): a leader counts only the renewals of
    /// the registration it was elected under.
    fn registration_id(&self) -> u64 {
        let lease = self.lease.lock().unwrap_or_else(PoisonError::into_inner);
        lease.as_ref().map_or(0, |lease| lease.lease_id() as u64)
    }

    /// The registration's local deadline in engine milliseconds (0: not registered).
    fn registration_valid_until_ms(&self) -> u64 {
        let lease = self.lease.lock().unwrap_or_else(PoisonError::into_inner);
        lease
            .as_ref()
            .and_then(|lease| lease.valid_until())
            .map_or(0, |until| self.ms_of(until))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ClusterState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn replicas_snapshot(&self) -> Vec<Arc<Replica>> {
        self.replicas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    fn replica(&self, topic: &str, partition: u32) -> Option<Arc<Replica>> {
        self.replicas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&PartitionId::new(topic, partition))
            .cloned()
    }

    /// A copy of the view of the store (for `cluster status` and tests).
    pub fn cluster_state(&self) -> ClusterState {
        self.state().clone()
    }

    // ----- the loop -----

    async fn run(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.config.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut events = None;
        let mut watch_retry = NextAttempt::new(STORE_RETRY_BASE, STORE_RETRY_CAP);
        loop {
            if self.stop.is_cancelled() {
                return;
            }
            self.keep_registered().await;
            if self.stop.is_cancelled() {
                return;
            }
            if events.is_none() && watch_retry.is_due(tokio::time::Instant::now()) {
                match self.store.watch(WATCH_CAPACITY).await {
                    Ok(watch) => {
                        watch_retry.succeeded();
                        self.limiter(&self.watch_failures).reset();
                        self.apply_event(MetaEvent::Resync(Box::new(watch.snapshot)));
                        events = Some(watch.events);
                    }
                    Err(error) => {
                        watch_retry.failed(tokio::time::Instant::now());
                        if let Some(repeats) =
                            self.limiter(&self.watch_failures).admit(Instant::now())
                        {
                            warn!(%error, repeats, "cannot watch the metadata store; retrying");
                        }
                    }
                }
            }
            // Not before this process held its node id: see `ever_registered`.
            if self
                .ever_registered
                .load(std::sync::atomic::Ordering::Acquire)
            {
                self.reconcile_all(events.is_some()).await;
            }
            tokio::select! {
                () = self.stop.cancelled() => return,
                _ = tick.tick() => {}
                () = self.wake.notified() => {}
                event = next_event(&mut events) => match event {
                    Some(event) => {
                        self.apply_event(event);
                        // Take whatever else is queued before reconciling.
                        while let Some(Ok(event)) = events.as_mut().map(|e| e.try_recv()) {
                            self.apply_event(event);
                        }
                    }
                    None => {
                        warn!("the metadata watch ended; watching again");
                        events = None;
                        watch_retry.failed(tokio::time::Instant::now());
                    }
                },
            }
        }
    }

    fn register_retry(&self) -> std::sync::MutexGuard<'_, NextAttempt> {
        self.register_retry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn floor_retry(&self) -> std::sync::MutexGuard<'_, NextAttempt> {
        self.floor_retry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn limiter<'a>(
        &self,
        limiter: &'a Mutex<log_limit::RepeatLimiter>,
    ) -> std::sync::MutexGuard<'a, log_limit::RepeatLimiter> {
        limiter.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers (again) when no registration is held or the held one was lost, by claiming
    /// the node id (`claim.rs`): this process's own lease that the store kept is revoked and
    /// replaced at once; another live process's refuses this broker for good.
    async fn keep_registered(self: &Arc<Self>) {
        {
            let mut lease = self.lease.lock().unwrap_or_else(PoisonError::into_inner);
            match lease.as_ref() {
                Some(held) if held.is_valid() => return,
                Some(held) => {
                    warn!(loss = ?held.loss(), "registration lost: every partition this broker leads stops acknowledging; registering again");
                    *lease = None;
                }
                None => {}
            }
        }
        if !self.register_retry().is_due(tokio::time::Instant::now()) {
            return;
        }
        let registration = BrokerRegistration {
            node_id: self.config.node_id,
            native_addr: self.config.native_addr.clone(),
            kafka_addr: self.config.kafka_addr.clone(),
            incarnation: self.incarnation,
            registered_at_ms: u64::try_from(crate::batch::now_ms()).ok(),
        };
        let claimant = claim::Claimant {
            store: &self.store,
            clock: &self.clock,
            stop: &self.stop,
            ttl: self.config.registration_ttl,
        };
        match claimant.claim(&registration).await {
            claim::Claim::Registered(lease) => {
                self.register_retry().succeeded();
                let failed_before = self.limiter(&self.register_failures).reset();
                info!(
                    node_id = self.config.node_id,
                    lease = lease.lease_id(),
                    failed_before,
                    "registered in the cluster"
                );
                *self.lease.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(lease));
                self.ever_registered
                    .store(true, std::sync::atomic::Ordering::Release);
            }
            claim::Claim::Refused(error) => self.refuse(error),
            claim::Claim::NotNow(reason) => {
                self.register_retry().failed(tokio::time::Instant::now());
                if let Some(repeats) = self.limiter(&self.register_failures).admit(Instant::now()) {
                    warn!(%reason, repeats, "cannot register; retrying");
                }
            }
        }
    }

    /// Records a partition state this broker read or wrote itself (the watch may tell later).
    fn observe_partition(&self, id: &PartitionId, versioned: &Versioned<PartitionState>) {
        if self.state().observe_partition(id, versioned) {
            self.view_changed.send_modify(|generation| *generation += 1);
        }
    }

    fn apply_event(&self, event: MetaEvent) {
        if let MetaEvent::Resync(_) = &event {
            self.kept_absent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
        }
        let changed = self.state().apply(event);
        if changed {
            self.view_changed.send_modify(|generation| *generation += 1);
        }
    }

    /// Brings every local replica in line with the view: deletes local copies of deleted or
    /// older topics (`lineage.rs`; of topics the store lacks only once the view is `synced`),
    /// creates missing local topics, stops the replicas this broker no longer holds, and steps
    /// each one it holds with the registration, the state last read, what its log made durable,
    /// and the tick.
    async fn reconcile_all(self: &Arc<Self>, synced: bool) {
        let (topics, partitions, live) = {
            let state = self.state();
            (
                state.topics.values().cloned().collect::<Vec<_>>(),
                state.partitions.clone(),
                state.live_brokers(),
            )
        };
        self.reconcile_local_topics(&topics, synced).await;
        let mut wanted = Vec::new();
        for (id, versioned) in &partitions {
            if versioned.value.replicas.contains(&self.config.node_id) {
                if let Some(replica) = self.open_replica(id) {
                    wanted.push((replica, versioned.clone()));
                }
            }
        }
        // Replicas of deleted topics (or moved away) stop.
        let gone: Vec<Arc<Replica>> = {
            let mut replicas = self.replicas.lock().unwrap_or_else(PoisonError::into_inner);
            let gone_ids: Vec<PartitionId> = replicas
                .keys()
                .filter(|id| {
                    !partitions
                        .get(*id)
                        .is_some_and(|state| state.value.replicas.contains(&self.config.node_id))
                })
                .cloned()
                .collect();
            gone_ids
                .iter()
                .filter_map(|id| replicas.remove(id))
                .collect()
        };
        for replica in gone {
            self.stop_replica(&replica);
        }
        let registration = Input::Registration {
            registration: self.registration_id(),
            valid_until_ms: self.registration_valid_until_ms(),
        };
        for (replica, state) in wanted {
            let durable_end_offset = replica.partition.acknowledged_end_offset();
            let inputs = [
                registration.clone(),
                Input::View {
                    state,
                    live: live.clone(),
                },
                Input::LocalDurable { durable_end_offset },
                Input::Tick,
            ];
            self.step_each(&replica, inputs);
        }
    }

    /// Creates `topic` in the local data directory if it is not there yet.
    async fn ensure_local_topic(&self, topic: &TopicRecord) {
        let broker = Arc::clone(&self.broker);
        if let Ok(local) = broker.topic(&topic.name) {
            if *local.config() != topic.config {
                self.apply_topic_config(topic).await;
            }
            if local.partitions().len() < topic.partition_count as usize {
                self.grow_local_topic(topic).await;
            }
            return;
        }
        let record = topic.clone();
        let created = tokio::task::spawn_blocking(move || {
            broker.create_topic(&record.name, record.partition_count, record.config)
        })
        .await;
        match created {
            Ok(Ok(_)) | Ok(Err(BrokerError::TopicExists(_))) => {
                info!(topic = %topic.name, "created the cluster topic locally");
            }
            Ok(Err(error)) => {
                warn!(topic = %topic.name, %error, "cannot create the cluster topic locally")
            }
            Err(error) => warn!(topic = %topic.name, %error, "creating the topic locally panicked"),
        }
    }

    /// Adds the partitions a grown topic record has and the local copy lacks (durably: see
    /// [`crate::broker::Broker::add_partitions`]); its replicas then start on the next round.
    /// The local copy only grows from the view, which only moves forward, so it never has more
    /// partitions than the record (more is an older lineage's copy: `lineage.rs`).
    async fn grow_local_topic(&self, topic: &TopicRecord) {
        let broker = Arc::clone(&self.broker);
        let (name, count) = (topic.name.clone(), topic.partition_count);
        let grown = tokio::task::spawn_blocking(move || broker.add_partitions(&name, count)).await;
        match grown {
            Ok(Ok(_)) => {
                info!(topic = %topic.name, partitions = count, "added the cluster topic's new partitions locally");
                self.view_changed.send_modify(|generation| *generation += 1);
            }
            Ok(Err(error)) => {
                warn!(topic = %topic.name, %error, "cannot add the cluster topic's new partitions locally")
            }
            Err(error) => {
                warn!(topic = %topic.name, %error, "adding partitions locally panicked")
            }
        }
    }

    /// Applies a changed topic record's config to the local copy (durably, and to its open
    /// partitions: see [`crate::broker::Broker::alter_topic_config`]).
    pub(super) async fn apply_topic_config(&self, topic: &TopicRecord) {
        let broker = Arc::clone(&self.broker);
        let (name, config) = (topic.name.clone(), topic.config);
        let applied =
            tokio::task::spawn_blocking(move || broker.alter_topic_config(&name, |_| Ok(config)))
                .await;
        match applied {
            Ok(Ok(_)) => {
                info!(topic = %topic.name, config = ?topic.config, "applied the cluster topic's changed config locally")
            }
            Ok(Err(error)) => {
                warn!(topic = %topic.name, %error, "cannot apply the cluster topic's changed config locally")
            }
            Err(error) => {
                warn!(topic = %topic.name, %error, "applying the topic config locally panicked")
            }
        }
    }

    /// The local replica of `id`, opened on first use.
    fn open_replica(&self, id: &PartitionId) -> Option<Arc<Replica>> {
        if let Some(replica) = self
            .replicas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
        {
            return Some(Arc::clone(replica));
        }
        let partition = match self.broker.partition(&id.topic, id.partition) {
            Ok(partition) => partition,
            Err(error) => {
                debug!(partition = %id, %error, "local replica not available");
                return None;
            }
        };
        // Never open a deleted lineage's files for the topic in the store (their removal
        // failed, or has not run yet): they would be served or replicated into it.
        let record = self.state().topics.get(&id.topic).cloned();
        if let (Some(record), Ok(local)) = (record, self.broker.topic(&id.topic)) {
            let epochs = lineage::local_epochs(&local);
            if let Some(reason) = crate::cluster::replication::lineage::older_lineage(
                local.partitions().len(),
                &epochs,
                &record,
            ) {
                debug!(partition = %id, %reason, "local replica is of an older lineage; not opened");
                return None;
            }
        }
        let node = ReplicaNode::new(ReplicaNodeConfig::new(
            self.config.node_id,
            self.incarnation,
            self.config.replication.clone(),
        ));
        let mut replicas = self.replicas.lock().unwrap_or_else(PoisonError::into_inner);
        let replica = replicas
            .entry(id.clone())
            .or_insert_with(|| Arc::new(Replica::new(id.clone(), partition, node)));
        Some(Arc::clone(replica))
    }
}

async fn next_event(
    events: &mut Option<tokio::sync::mpsc::Receiver<MetaEvent>>,
) -> Option<MetaEvent> {
    match events {
        Some(events) => events.recv().await,
        None => std::future::pending().await,
    }
}
