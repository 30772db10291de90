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

mod follower_task;
mod leading;
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

use leading::Role;
pub use view::ClusterState;

use super::ClusterError;
use crate::broker::{Broker, BrokerError};
use crate::cluster::meta::{
    BrokerLease, MetaError, MetaEvent, MetaStore, PartitionId, TopicRecord,
};
use crate::cluster::replication::election::{ElectionDecision, Elector};
use crate::cluster::replication::{LiveBrokers, ReplicationConfig};
use crate::cluster::{BrokerRegistration, NodeId, PartitionState, Versioned};
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
pub use crate::broker::producer_ids::{CLUSTER_NODE_ID_MAX, PRODUCER_ID_LOCAL_BITS};

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
    broker: Arc<Broker>,
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
    /// A driver for `broker` in the cluster kept in `store`. Nothing runs until
    /// [`ClusterDriver::start`]; requests reach it once the broker's service joined it
    /// ([`BrokerService::join_cluster`](crate::broker::BrokerService::join_cluster)).
    pub fn new(
        config: ClusterConfig,
        store: Arc<dyn MetaStore>,
        broker: Arc<Broker>,
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
        Ok(Arc::new(Self {
            config,
            incarnation: rand::random::<u64>() | 1,
            store,
            broker,
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
        let broker = Arc::clone(&self.broker);
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
        let partition = match self.broker.partition(&id.topic, id.partition) {
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
    async fn elect(
        self: Arc<Self>,
        replica: Arc<Replica>,
        proposal: crate::cluster::replication::Proposal,
    ) {
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
        let start = crate::cluster::replication::leader::LeaderStart {
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

    /// Applies a leader engine's output: raise the high watermark, answer waiters, send a
    /// proposal or a re-read, stop leading when deposed.
    fn apply_leader_output(
        self: &Arc<Self>,
        replica: &Arc<Replica>,
        role: &mut Role,
        output: crate::cluster::replication::leader::LeaderOutput,
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
        epoch: crate::cluster::LeaderEpoch,
        proposal: crate::cluster::replication::Proposal,
    ) {
        use crate::cluster::replication::CasOutcome;
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
    fn spawn_reread(self: &Arc<Self>, replica: &Arc<Replica>, epoch: crate::cluster::LeaderEpoch) {
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
}

/// Merges a later engine output into an earlier one.
fn merge(
    into: &mut crate::cluster::replication::leader::LeaderOutput,
    later: crate::cluster::replication::leader::LeaderOutput,
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
