//! The broker's side of a cluster (`fencelog serve --node-id N --etcd URL`): registration, the
//! metadata watch, and for every partition this broker holds a replica of, the replication
//! engine (`super::replication`) driven with real I/O.
//!
//! One task owns the loop ([`ClusterDriver::run`]): it keeps the registration alive (registering
//! again after a loss), applies the watch's events to a local view of the store, creates the
//! cluster's topics in the local data directory, and every tick reconciles each local replica
//! with the state last read: run the elector, start or stop a follower task, feed the leader
//! engine the time, the registration's deadline and the partition state. Requests reach the
//! engines through the methods the native handler calls (`check_produce`, `await_commit`,
//! `serve_replica_fetch`, `serve_epoch_end`, `require_leader`, `create_topic`).
//!
//! What is safe rests on the engines and the fence, not on this loop's timing: a leader
//! acknowledges only while its registration is valid by its own conservative clock, the high
//! watermark is the lowest log end over the ISR, and every replicated append passes the
//! leader-epoch check in the follower's segment writer. This module only has to deliver inputs
//! and apply outputs; being late makes it slow, never wrong.

mod error;
mod follower_task;
mod leading;
mod serve;
mod view;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub use error::ClusterError;
use leading::Role;
pub use view::ClusterState;

use super::meta::{
    create_topic_placed, BrokerLease, MetaError, MetaEvent, MetaStore, PartitionId, TopicRecord,
    INITIAL_LEADER_EPOCH,
};
use super::replication::election::{ElectionDecision, Elector};
use super::replication::{LiveBrokers, ReplicationConfig};
use super::{BrokerRegistration, NodeId, PartitionState, Versioned};
use crate::broker::{BrokerError, BrokerService};
use crate::domain::TopicConfig;
use crate::protocol::BrokerMetadata;
use crate::server::native::ClusterView;
use crate::storage::Partition;

/// Default of [`ClusterConfig::registration_ttl`].
pub const REGISTRATION_TTL_DEFAULT: Duration = Duration::from_secs(6);
/// Default of [`ClusterConfig::tick`].
pub const TICK_DEFAULT: Duration = Duration::from_millis(100);
/// Default of [`ClusterConfig::replica_fetch_max_wait`].
pub const REPLICA_FETCH_MAX_WAIT_DEFAULT: Duration = Duration::from_millis(500);
/// Default of [`ClusterConfig::replica_fetch_max_bytes`].
pub const REPLICA_FETCH_MAX_BYTES_DEFAULT: u32 = 4 << 20;
/// Default of [`ClusterConfig::topic_ready_wait`].
pub const TOPIC_READY_WAIT_DEFAULT: Duration = Duration::from_secs(10);
/// Most replicas a cluster topic gets when its creator names no replication factor.
pub const DEFAULT_REPLICATION_FACTOR_MAX: u16 = 3;
/// Highest node id a cluster broker may have: producer ids a broker hands out carry its node id
/// above [`PRODUCER_ID_LOCAL_BITS`] bits, so ids from different brokers never collide (a
/// producer whose partition's leader moves keeps its id) and stay positive.
pub const CLUSTER_NODE_ID_MAX: u32 = (1 << 22) - 1;
/// Bits of a cluster producer id that count the ids one broker handed out.
pub const PRODUCER_ID_LOCAL_BITS: u32 = 40;

/// Capacity of the metadata watch's event channel.
const WATCH_CAPACITY: usize = 4096;
/// How long a failed store call or a refused registration waits before the next try.
const RETRY_DELAY: Duration = Duration::from_millis(500);

/// How a broker takes part in a cluster. Every timer has a name and a default.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// This broker's node id (`serve --node-id`).
    pub node_id: NodeId,
    /// Where clients and other brokers reach its native listener.
    pub native_addr: String,
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
}

impl ClusterConfig {
    /// The defaults for broker `node_id` reachable at `native_addr`.
    pub fn new(node_id: NodeId, native_addr: impl Into<String>) -> Self {
        Self {
            node_id,
            native_addr: native_addr.into(),
            registration_ttl: REGISTRATION_TTL_DEFAULT,
            tick: TICK_DEFAULT,
            replica_fetch_max_wait: REPLICA_FETCH_MAX_WAIT_DEFAULT,
            replica_fetch_max_bytes: REPLICA_FETCH_MAX_BYTES_DEFAULT,
            topic_ready_wait: TOPIC_READY_WAIT_DEFAULT,
            replication: ReplicationConfig::default(),
            peer_addrs: HashMap::new(),
        }
    }
}

/// One local replica: the partition's log and the role this broker plays for it.
#[derive(Debug)]
pub(crate) struct Replica {
    id: PartitionId,
    partition: Arc<Partition>,
    role: Mutex<Role>,
    elector: Mutex<Elector>,
    /// An election compare-and-swap (or the take-over after it) is under way.
    electing: std::sync::atomic::AtomicBool,
}

impl Replica {
    fn role(&self) -> std::sync::MutexGuard<'_, Role> {
        self.role.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A broker's membership of a cluster. See the module docs.
#[derive(Debug)]
pub struct ClusterDriver {
    config: ClusterConfig,
    incarnation: u64,
    store: Arc<dyn MetaStore>,
    service: Arc<BrokerService>,
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
}

impl ClusterDriver {
    /// A driver for `service`'s broker in the cluster kept in `store`. Nothing runs until
    /// [`ClusterDriver::start`].
    pub fn new(
        config: ClusterConfig,
        store: Arc<dyn MetaStore>,
        service: Arc<BrokerService>,
    ) -> Result<Arc<Self>, ClusterError> {
        config
            .replication
            .validate()
            .map_err(|error| ClusterError::Unsupported(error.to_string()))?;
        service.set_cluster_node(config.node_id);
        Ok(Arc::new(Self {
            config,
            incarnation: rand::random::<u64>() | 1,
            store,
            service,
            started: Instant::now(),
            state: Mutex::new(ClusterState::default()),
            replicas: Mutex::new(HashMap::new()),
            lease: Mutex::new(None),
            wake: Notify::new(),
            view_changed: tokio::sync::watch::Sender::new(0),
            stop: CancellationToken::new(),
            next_waiter: std::sync::atomic::AtomicU64::new(1),
        }))
    }

    /// Starts the loop on the current runtime. It runs until [`ClusterDriver::shutdown`].
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let driver = Arc::clone(self);
        tokio::spawn(async move { driver.run().await })
    }

    /// Stops the loop and every follower task, deposes every leader (its waiters fail) and
    /// revokes the registration, so others take over at once rather than after the TTL.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        let replicas: Vec<Arc<Replica>> = self.replicas_snapshot();
        for replica in replicas {
            let mut role = replica.role();
            role.stop();
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
    pub fn abandon(&self) {
        self.stop.cancel();
        for replica in self.replicas_snapshot() {
            replica.role().stop();
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

    /// This process's incarnation (random per start).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Milliseconds on this driver's monotonic clock (the engines' time).
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn ms_of(&self, instant: Instant) -> u64 {
        instant
            .saturating_duration_since(self.started)
            .as_millis()
            .try_into()
            .unwrap_or(u64::MAX)
    }

    /// The registration's local deadline in engine milliseconds (0: not registered).
    /// The lease id of the registration held (0: none): a leader counts only the renewals of
    /// the registration it was elected under.
    fn registration_id(&self) -> u64 {
        let lease = self.lease.lock().unwrap_or_else(PoisonError::into_inner);
        lease.as_ref().map_or(0, |lease| lease.lease_id() as u64)
    }

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
        loop {
            if self.stop.is_cancelled() {
                return;
            }
            self.keep_registered().await;
            if events.is_none() {
                match self.store.watch(WATCH_CAPACITY).await {
                    Ok(watch) => {
                        self.apply_event(MetaEvent::Resync(Box::new(watch.snapshot)));
                        events = Some(watch.events);
                    }
                    Err(error) => {
                        warn!(%error, "cannot watch the metadata store; retrying");
                    }
                }
            }
            self.reconcile_all().await;
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
                        tokio::time::sleep(RETRY_DELAY).await;
                    }
                },
            }
        }
    }

    /// Registers (again) when no registration is held or the held one was lost.
    async fn keep_registered(&self) {
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
        let registration = BrokerRegistration {
            node_id: self.config.node_id,
            native_addr: self.config.native_addr.clone(),
            kafka_addr: None,
            incarnation: self.incarnation,
        };
        let registered = tokio::time::timeout(
            self.config.registration_ttl,
            self.store
                .register_broker(registration, self.config.registration_ttl),
        )
        .await;
        match registered {
            Ok(Ok(lease)) => {
                info!(
                    node_id = self.config.node_id,
                    lease = lease.lease_id(),
                    "registered in the cluster"
                );
                *self.lease.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(lease));
            }
            Ok(Err(MetaError::AlreadyExists { what })) => {
                debug!(%what, "a registration of this node id is still live (a previous process?); waiting for it to lapse");
            }
            Ok(Err(error)) => warn!(%error, "cannot register"),
            Err(_) => warn!("registering timed out"),
        }
    }

    /// Records a partition state this broker read or wrote itself (the watch may tell later).
    fn observe_partition(&self, id: &PartitionId, versioned: &Versioned<PartitionState>) {
        if self.state().observe_partition(id, versioned) {
            self.view_changed.send_modify(|generation| *generation += 1);
        }
    }

    fn apply_event(&self, event: MetaEvent) {
        let changed = self.state().apply(event);
        if changed {
            self.view_changed.send_modify(|generation| *generation += 1);
        }
    }

    /// Brings every local replica in line with the view: creates missing local topics, then
    /// reconciles each partition this broker holds a replica of.
    async fn reconcile_all(self: &Arc<Self>) {
        let (topics, partitions, live) = {
            let state = self.state();
            (
                state.topics.values().cloned().collect::<Vec<_>>(),
                state.partitions.clone(),
                state.live_brokers(),
            )
        };
        for topic in &topics {
            self.ensure_local_topic(topic).await;
        }
        let mut wanted = Vec::new();
        for (id, versioned) in &partitions {
            if versioned.value.replicas.contains(&self.config.node_id) {
                if let Some(replica) = self.open_replica(id) {
                    wanted.push((replica, versioned.clone()));
                }
            }
        }
        // Replicas of deleted topics (or moved away) stop.
        {
            let mut replicas = self.replicas.lock().unwrap_or_else(PoisonError::into_inner);
            replicas.retain(|id, replica| {
                let keep = partitions
                    .get(id)
                    .is_some_and(|state| state.value.replicas.contains(&self.config.node_id));
                if !keep {
                    replica.role().stop();
                }
                keep
            });
        }
        let registered_until = self.registration_valid_until_ms();
        let registration = self.registration_id();
        for (replica, state) in wanted {
            self.reconcile(&replica, &state, &live, registration, registered_until);
        }
    }

    /// Creates `topic` in the local data directory if it is not there yet.
    async fn ensure_local_topic(&self, topic: &TopicRecord) {
        let broker = Arc::clone(self.service.broker());
        if broker.topic(&topic.name).is_ok() {
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

    /// The local replica of `id`, opened on first use.
    fn open_replica(&self, id: &PartitionId) -> Option<Arc<Replica>> {
        let mut replicas = self.replicas.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(replica) = replicas.get(id) {
            return Some(Arc::clone(replica));
        }
        let partition = match self.service.broker().partition(&id.topic, id.partition) {
            Ok(partition) => partition,
            Err(error) => {
                debug!(partition = %id, %error, "local replica not available");
                return None;
            }
        };
        let replica = Arc::new(Replica {
            id: id.clone(),
            partition,
            role: Mutex::new(Role::Idle),
            elector: Mutex::new(Elector::new(
                self.config.node_id,
                self.config.replication.election_backoff_ms,
            )),
            electing: std::sync::atomic::AtomicBool::new(false),
        });
        replicas.insert(id.clone(), Arc::clone(&replica));
        Some(replica)
    }

    /// One replica against the state last read (see the module docs).
    fn reconcile(
        self: &Arc<Self>,
        replica: &Arc<Replica>,
        state: &Versioned<PartitionState>,
        live: &LiveBrokers,
        registration: u64,
        registered_until: u64,
    ) {
        use std::sync::atomic::Ordering;
        let now = self.now_ms();
        let registered = now < registered_until;
        let leading = {
            let mut role = replica.role();
            match &mut *role {
                Role::Leader(leader) => {
                    leader
                        .engine
                        .on_registration_renewed(registration, registered_until);
                    let mut output = leader.engine.on_partition_read(now, state);
                    if !output.deposed {
                        // What the flush policy made durable since (a sync that finished
                        // after its produce was answered); then timers and ISR changes.
                        let durable = replica.partition.acknowledged_end_offset();
                        merge(&mut output, leader.engine.on_local_durable(now, durable));
                    }
                    if !output.deposed {
                        let tick = leader.engine.on_tick(now, live);
                        merge(&mut output, tick);
                    }
                    self.apply_leader_output(replica, &mut role, output);
                }
                Role::Follower(follower) => {
                    if state.value.leader != Some(follower.leader)
                        || state.value.leader_epoch != follower.leader_epoch
                        || follower.is_finished()
                    {
                        role.stop();
                    }
                }
                Role::Idle => {}
            }
            role.leading_epoch()
        };
        if replica.electing.load(Ordering::Acquire) {
            return;
        }
        let decision = replica
            .elector
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .decide(now, state, live, leading, registered);
        match decision {
            ElectionDecision::Propose(proposal) => {
                replica.electing.store(true, Ordering::Release);
                let driver = Arc::clone(self);
                let replica = Arc::clone(replica);
                tokio::spawn(async move { driver.elect(replica, proposal).await });
                return;
            }
            ElectionDecision::Wait { .. } | ElectionDecision::Nothing => {}
        }
        let mut role = replica.role();
        if let (Role::Idle, Some(leader)) = (&*role, state.value.leader) {
            if leader != self.config.node_id {
                *role = Role::Follower(follower_task::spawn(
                    Arc::clone(self),
                    Arc::clone(replica),
                    leader,
                    state.value.leader_epoch,
                ));
            }
        }
    }

    /// Proposes this broker as leader; on success takes over the log in the new epoch.
    async fn elect(self: Arc<Self>, replica: Arc<Replica>, proposal: super::replication::Proposal) {
        use std::sync::atomic::Ordering;
        let epoch = proposal.state.leader_epoch;
        info!(partition = %replica.id, epoch, "proposing this broker as leader");
        let result = self
            .store
            .compare_and_swap_partition(
                replica.id.clone(),
                proposal.expected_revision,
                proposal.state,
            )
            .await;
        match result {
            Ok(versioned) => {
                self.observe_partition(&replica.id, &versioned);
                self.take_over(&replica, versioned).await;
            }
            Err(MetaError::Conflict { current, .. }) => {
                debug!(partition = %replica.id, "lost the election");
                self.observe_partition(&replica.id, &current);
            }
            Err(error) => warn!(partition = %replica.id, %error, "election proposal failed"),
        }
        replica.electing.store(false, Ordering::Release);
        self.wake.notify_one();
    }

    /// Won `versioned`: the log installs the epoch (durably) before anything is served in it.
    async fn take_over(&self, replica: &Arc<Replica>, versioned: Versioned<PartitionState>) {
        let epoch = versioned.value.leader_epoch;
        replica.role().stop();
        let partition = Arc::clone(&replica.partition);
        let installed = tokio::task::spawn_blocking(move || partition.become_leader(epoch)).await;
        match installed {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                warn!(partition = %replica.id, epoch, %error, "cannot take over as leader");
                return;
            }
            Err(error) => {
                warn!(partition = %replica.id, epoch, %error, "taking over panicked");
                return;
            }
        }
        let start = super::replication::leader::LeaderStart {
            partition: versioned,
            log_end_offset: replica.partition.log_end_offset(),
            durable_end_offset: replica.partition.acknowledged_end_offset(),
            high_watermark: replica.partition.high_watermark(),
            now_ms: self.now_ms(),
            registration_valid_until_ms: self.registration_valid_until_ms(),
            registration: self.registration_id(),
        };
        match leading::Leading::start(self.config.node_id, self.config.replication.clone(), start) {
            Ok(leading) => {
                info!(
                    partition = %replica.id,
                    epoch,
                    from_offset = leading.engine.epoch_start_offset(),
                    "leading"
                );
                *replica.role() = Role::Leader(Box::new(leading));
            }
            Err(error) => warn!(partition = %replica.id, %error, "cannot start leading"),
        }
    }

    fn next_waiter_id(&self) -> u64 {
        self.next_waiter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    // ----- what requests ask -----

    /// The leader this broker knows for `topic`/`partition`, as a `NOT_LEADER` (or
    /// `LEADER_NOT_AVAILABLE`) refusal, or `UnknownTopic`.
    fn not_leading(&self, topic: &str, partition: u32) -> BrokerError {
        let state = self.state();
        let Some(versioned) = state.partitions.get(&PartitionId::new(topic, partition)) else {
            return if state.topics.contains_key(topic) {
                BrokerError::UnknownPartition {
                    topic: topic.to_owned(),
                    partition,
                    count: state.topics[topic].partition_count,
                }
            } else {
                BrokerError::UnknownTopic(topic.to_owned())
            };
        };
        let epoch = versioned.value.leader_epoch;
        match versioned.value.leader {
            Some(leader) if leader != self.config.node_id => {
                let address = state.brokers.get(&leader).map(|b| b.native_addr.clone());
                ClusterError::NotLeader {
                    topic: topic.to_owned(),
                    partition,
                    leader: address.map(|address| (leader, address)),
                    leader_epoch: epoch,
                }
                .into()
            }
            _ => ClusterError::LeaderNotAvailable {
                topic: topic.to_owned(),
                partition,
                leader_epoch: epoch,
            }
            .into(),
        }
    }

    /// Ok when this broker leads `topic`/`partition` now (reads, leases, offsets); else who
    /// does.
    pub fn require_leader(&self, topic: &str, partition: u32) -> Result<(), BrokerError> {
        let now = self.now_ms();
        match self.replica(topic, partition) {
            Some(replica) if replica.role().is_leading(now) => Ok(()),
            _ => Err(self.not_leading(topic, partition)),
        }
    }

    /// Before a produce is written: this broker must lead the partition, and for `acks=all`
    /// the ISR must be at least `min_insync` (nothing is written otherwise).
    pub fn check_produce(
        &self,
        topic: &str,
        partition: u32,
        acks_all: bool,
    ) -> Result<(), BrokerError> {
        let now = self.now_ms();
        let Some(replica) = self.replica(topic, partition) else {
            return Err(self.not_leading(topic, partition));
        };
        let mut role = replica.role();
        let Role::Leader(leader) = &mut *role else {
            drop(role);
            return Err(self.not_leading(topic, partition));
        };
        if !acks_all {
            return if leader.engine.can_acknowledge(now) {
                Ok(())
            } else {
                drop(role);
                Err(self.not_leading(topic, partition))
            };
        }
        use super::replication::leader::ProduceRefusal;
        match leader.engine.check_produce(now) {
            Ok(()) => Ok(()),
            Err(ProduceRefusal::NotLeader) => {
                drop(role);
                Err(self.not_leading(topic, partition))
            }
            Err(ProduceRefusal::NotEnoughReplicas { isr, min_insync }) => {
                Err(ClusterError::NotEnoughReplicas {
                    topic: topic.to_owned(),
                    partition,
                    isr,
                    min_insync,
                }
                .into())
            }
            Err(ProduceRefusal::TooManyWaiters { waiting }) => Err(ClusterError::TooManyWaiters {
                topic: topic.to_owned(),
                partition,
                waiting,
            }
            .into()),
        }
    }

    /// After a produce was appended (and made durable under the flush policy) with its last
    /// record at `last_offset`: with `acks_all`, waits until the high watermark passes it (every
    /// in-sync replica has it); without, tells the engine the log grew. Fails with
    /// [`ClusterError::NotAcknowledged`] when this broker was deposed, the write timed out or
    /// the ISR shrank below `min_insync`.
    pub async fn await_commit(
        self: &Arc<Self>,
        topic: &str,
        partition: u32,
        last_offset: u64,
        acks_all: bool,
    ) -> Result<(), BrokerError> {
        let not_acknowledged = |cause| ClusterError::NotAcknowledged {
            topic: topic.to_owned(),
            partition,
            last_offset,
            cause,
        };
        let Some(replica) = self.replica(topic, partition) else {
            return Err(not_acknowledged(super::replication::leader::AcksAllError::Deposed).into());
        };
        let answer = {
            let now = self.now_ms();
            let mut role = replica.role();
            let Role::Leader(leader) = &mut *role else {
                return Err(
                    not_acknowledged(super::replication::leader::AcksAllError::Deposed).into(),
                );
            };
            let durable = replica.partition.acknowledged_end_offset();
            if !acks_all {
                let output = leader.engine.on_local_durable(now, durable);
                self.apply_leader_output(&replica, &mut role, output);
                return Ok(());
            }
            if !leader.engine.can_acknowledge(now) {
                return Err(
                    not_acknowledged(super::replication::leader::AcksAllError::Deposed).into(),
                );
            }
            if last_offset < leader.engine.high_watermark() {
                // Committed already (a concurrent produce's progress carried it over).
                return Ok(());
            }
            let id = self.next_waiter_id();
            let (answer, waiter) = tokio::sync::oneshot::channel();
            leader.waiters.insert(id, answer);
            let mut output = leader.engine.on_appended(now, id, last_offset);
            if !output.deposed {
                merge(&mut output, leader.engine.on_local_durable(now, durable));
            }
            self.apply_leader_output(&replica, &mut role, output);
            waiter
        };
        match answer.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(cause)) => Err(not_acknowledged(cause).into()),
            Err(_) => {
                Err(not_acknowledged(super::replication::leader::AcksAllError::Deposed).into())
            }
        }
    }

    /// Applies a leader engine's output: raise the high watermark, answer waiters, send a
    /// proposal or a re-read, stop leading when deposed.
    fn apply_leader_output(
        self: &Arc<Self>,
        replica: &Arc<Replica>,
        role: &mut Role,
        output: super::replication::leader::LeaderOutput,
    ) {
        let Role::Leader(leader) = role else {
            return;
        };
        if let Some(high_watermark) = output.high_watermark {
            replica.partition.advance_high_watermark(high_watermark);
        }
        for completion in output.completions {
            if let Some(answer) = leader.waiters.remove(&completion.id) {
                let _ = answer.send(completion.result);
            }
        }
        if let Some(proposal) = output.proposal {
            self.spawn_isr_change(replica, leader.engine.epoch(), proposal);
        }
        if output.reread && !output.deposed {
            self.spawn_reread(replica, leader.engine.epoch());
        }
        if output.deposed {
            info!(partition = %replica.id, epoch = leader.engine.epoch(), "deposed: no longer leading");
            role.stop();
            self.wake.notify_one();
        }
    }

    /// Sends an ISR change by compare-and-swap and tells the engine what became of it.
    fn spawn_isr_change(
        self: &Arc<Self>,
        replica: &Arc<Replica>,
        epoch: super::LeaderEpoch,
        proposal: super::replication::Proposal,
    ) {
        use super::replication::CasOutcome;
        let store = Arc::clone(&self.store);
        let replica = Arc::clone(replica);
        let driver = Arc::clone(self);
        info!(partition = %replica.id, isr = ?proposal.state.isr, "proposing an ISR change");
        tokio::spawn(async move {
            let result = tokio::time::timeout(
                Duration::from_secs(5),
                store.compare_and_swap_partition(
                    replica.id.clone(),
                    proposal.expected_revision,
                    proposal.state,
                ),
            )
            .await;
            let outcome = match result {
                Ok(Ok(versioned)) => {
                    driver.observe_partition(&replica.id, &versioned);
                    CasOutcome::Applied {
                        revision: versioned.revision,
                    }
                }
                Ok(Err(MetaError::Conflict { current, .. })) => {
                    driver.observe_partition(&replica.id, &current);
                    CasOutcome::Conflict
                }
                Ok(Err(_)) | Err(_) => CasOutcome::Unknown,
            };
            let now = driver.now_ms();
            let mut role = replica.role();
            if let Role::Leader(leader) = &mut *role {
                if leader.engine.epoch() == epoch {
                    let output = leader.engine.on_cas_outcome(now, outcome);
                    driver.apply_leader_output(&replica, &mut role, output);
                }
            }
        });
    }

    /// Re-reads a partition state for its leader engine.
    fn spawn_reread(self: &Arc<Self>, replica: &Arc<Replica>, epoch: super::LeaderEpoch) {
        let store = Arc::clone(&self.store);
        let replica = Arc::clone(replica);
        let driver = Arc::clone(self);
        tokio::spawn(async move {
            let read = loop {
                match store.partition_state(replica.id.clone()).await {
                    Ok(read) => break read,
                    Err(MetaError::NotFound { .. }) => return,
                    Err(_) if !driver.stop.is_cancelled() => tokio::time::sleep(RETRY_DELAY).await,
                    Err(_) => return,
                }
            };
            driver.observe_partition(&replica.id, &read);
            let now = driver.now_ms();
            let mut role = replica.role();
            if let Role::Leader(leader) = &mut *role {
                if leader.engine.epoch() == epoch {
                    let output = leader.engine.on_partition_read(now, &read);
                    driver.apply_leader_output(&replica, &mut role, output);
                }
            }
        });
    }

    /// Creates a cluster topic: places its replicas over the live brokers, writes it to the
    /// store in one transaction, and waits (up to `topic_ready_wait`) until every partition has
    /// an elected leader, so the creator can produce at once.
    pub async fn create_topic(
        &self,
        name: String,
        partitions: u32,
        config: TopicConfig,
        replication: Option<crate::protocol::Replication>,
    ) -> Result<(), BrokerError> {
        let live = self.state().brokers.len().max(1);
        let factor = match &replication {
            Some(replication) => replication.factor,
            None => DEFAULT_REPLICATION_FACTOR_MAX.min(live as u16),
        };
        let mut record = TopicRecord::new(name.clone(), partitions, factor, config);
        if let Some(min_insync) = replication.as_ref().and_then(|r| r.min_insync) {
            record.min_insync = min_insync;
        }
        let created = create_topic_placed(self.store.as_ref(), record).await;
        match created {
            Ok(_) => {}
            Err(MetaError::AlreadyExists { .. }) => return Err(BrokerError::TopicExists(name)),
            Err(MetaError::Invalid(reason)) => return Err(BrokerError::InvalidConfig(reason)),
            Err(MetaError::Placement(error)) => {
                return Err(BrokerError::InvalidConfig(error.to_string()))
            }
            Err(error) => return Err(ClusterError::Meta(error).into()),
        }
        let mut changes = self.view_changed.subscribe();
        let ready = async {
            loop {
                if self.topic_ready(&name, partitions) {
                    return;
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout(self.config.topic_ready_wait, ready)
            .await
            .is_err()
        {
            warn!(topic = %name, "created, but not every partition had elected a leader in time");
        }
        Ok(())
    }

    /// Whether every partition of `topic` has a leader that took over (it re-elects itself
    /// above the placement's initial epoch before it serves).
    fn topic_ready(&self, topic: &str, partitions: u32) -> bool {
        let state = self.state();
        (0..partitions).all(|index| {
            state
                .partitions
                .get(&PartitionId::new(topic, index))
                .is_some_and(|p| {
                    p.value.leader.is_some() && p.value.leader_epoch > INITIAL_LEADER_EPOCH
                })
        })
    }

    /// Deleting a cluster topic is refused for now: every broker would have to move its copy
    /// aside, and a topic re-created under the name must start its leader epochs above the old
    /// one's producer epochs (else the new leaders' bases would not fence the old lineage's
    /// grants). Until both are built, nothing is deleted.
    pub async fn delete_topic(&self, name: &str) -> Result<(), BrokerError> {
        Err(ClusterError::Unsupported(format!(
            "deleting topic {name}: deleting a topic of a cluster is not supported yet; nothing was deleted"
        ))
        .into())
    }
}

/// A producer id broker `node_id` allocated locally (`local`), made unique in the cluster.
pub fn cluster_producer_id(node_id: NodeId, local: i64) -> i64 {
    (i64::from(node_id) << PRODUCER_ID_LOCAL_BITS) | (local & ((1 << PRODUCER_ID_LOCAL_BITS) - 1))
}

/// Merges a later engine output into an earlier one.
fn merge(
    into: &mut super::replication::leader::LeaderOutput,
    later: super::replication::leader::LeaderOutput,
) {
    into.completions.extend(later.completions);
    if later.high_watermark.is_some() {
        into.high_watermark = later.high_watermark;
    }
    if later.proposal.is_some() {
        into.proposal = later.proposal;
    }
    into.reread |= later.reread;
    into.deposed |= later.deposed;
}

async fn next_event(
    events: &mut Option<tokio::sync::mpsc::Receiver<MetaEvent>>,
) -> Option<MetaEvent> {
    match events {
        Some(events) => events.recv().await,
        None => std::future::pending().await,
    }
}

impl ClusterView for ClusterDriver {
    fn is_cluster(&self) -> bool {
        true
    }

    fn node_id(&self) -> NodeId {
        self.config.node_id
    }

    fn brokers(&self) -> Vec<BrokerMetadata> {
        self.state()
            .brokers
            .values()
            .map(|broker| BrokerMetadata {
                node_id: broker.node_id,
                address: broker.native_addr.clone(),
            })
            .collect()
    }

    fn partition_state(&self, topic: &str, partition: u32) -> PartitionState {
        self.state()
            .partitions
            .get(&PartitionId::new(topic, partition))
            .map(|versioned| versioned.value.clone())
            .unwrap_or(PartitionState {
                replicas: Vec::new(),
                leader: None,
                leader_epoch: 0,
                isr: Vec::new(),
                min_insync: 1,
            })
    }
}
