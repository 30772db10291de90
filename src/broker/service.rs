//! The broker service: what any listener can ask of the broker, in protocol-neutral terms.
//!
//! A listener (the native protocol today, Kafka's next) decodes a request, calls one method here
//! and encodes what it returns; it holds no broker logic of its own. The service owns what both
//! would otherwise copy: request-ordered two-phase produce ([`ProduceQueue`]), the long-poll
//! fetch, leases through a [`LeaseAuthority`], topic admin and metadata, consumer groups'
//! committed offsets ([`super::groups`]), and the maintenance tasks ([`super::maintenance`]).
//!
//! A produce carries its epoch explicitly ([`ProduceRequest::epoch`]): each listener finds it
//! where its protocol puts it (fencelog's batch header, a Kafka batch's producer epoch), and the
//! partition's fence checks that value in the segment writer.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::batch::BatchParts;
use bytes::Bytes;
use futures::future::BoxFuture;

use super::cluster::{ClusterDriver, ClusterError, ReplicaManager};
use super::consumer_groups::ConsumerGroups;
use super::coordinator::{CoordinatorConfig, GroupCoordinator};
use super::groups::{PartitionCommits, PartitionKey};
use super::maintenance::Maintenance;
use super::offsets_topic::ReplicatedOffsets;
use super::produce_queue::{Acknowledgement, ProduceQueue};
use super::spliced_produce::SplicedProduce;
use super::transactions::TransactionCoordinator;
use super::{Broker, BrokerError, CommittedOffset, DeletedTopic, GroupOffsetsError, Topic};
use crate::clock::{Clock, SystemClock};
use crate::domain::{Acks, Epoch, NodeId, Replication, TopicConfig};
use crate::lease::{
    AuthorityError, Grant, LeaseAuthority, LeaseConfig, LeaseTarget, LocalLeaseAuthority, Renewed,
};
use crate::metrics::Metrics;
use crate::protocol::{LeaderEpochQuery, ReplicaFetch, Response};
use crate::storage::{
    Appended, Partition, PendingAppend, ReadResult, StorageError, WriteCredential,
};

/// One batch to append.
#[derive(Debug, Clone)]
pub struct ProduceRequest {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// What the writer presents to the partition's fence (a lease's epoch, or none), checked
    /// before anything else.
    pub credential: WriteCredential,
    /// The batch in fencelog's stored format (its header carries the credential's epoch): one
    /// buffer, or a Kafka batch kept as it arrived and its envelope (see
    /// [`crate::batch::BatchParts`]).
    pub batch: BatchParts,
    /// The guard of the transaction verification this broker, a replicated partition's
    /// leader, recorded before asking the transaction's coordinator (see
    /// [`crate::storage::verification`]); `None` for every other write.
    pub verification: Option<u64>,
}

/// An append's wait for its acknowledgement, then for its commit under `acks` (every in-sync
/// replica for `acks=all`).
fn committed(
    replicas: ReplicaManager,
    topic: String,
    partition: u32,
    acknowledged: Acknowledgement,
    acks: Acks,
) -> Acknowledgement {
    Box::pin(async move {
        let appended = acknowledged.await?;
        replicas
            .await_commit(&topic, partition, appended.last_offset, acks)
            .await?;
        Ok(appended)
    })
}

/// A read, waiting up to `max_wait` for data at `offset` to exist.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// First offset wanted.
    pub offset: u64,
    /// Most bytes returned (at least one whole batch is returned if any is there).
    pub max_bytes: usize,
    /// Longest to wait when nothing at `offset` is visible yet (already clamped by the listener).
    pub max_wait: Duration,
}

/// Where a partition's log starts and ends, and its current epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// First offset still kept.
    pub earliest: u64,
    /// The high watermark: the next offset to be written and made visible.
    pub latest: u64,
    /// The epoch the fence enforces.
    pub epoch: u64,
}

/// The broker's operations for every listener; a cheap `Arc` shared by all connections.
#[derive(Debug)]
pub struct BrokerService {
    broker: Arc<Broker>,
    leases: Arc<dyn LeaseAuthority>,
    /// Settings of the group coordinator, started on first use.
    coordinator_config: CoordinatorConfig,
    /// Started by the first group request (inside the runtime, as its ticker task needs).
    coordinator: OnceLock<Arc<GroupCoordinator>>,
    /// The consumer-protocol (KIP-848) groups, created on first use with the coordinator
    /// settings' `consumer` part.
    consumer_groups: OnceLock<ConsumerGroups>,
    /// Server-wide metrics (listeners); partitions count their own.
    metrics: Arc<Metrics>,
    /// Set when the server shuts down: pending long polls answer at once.
    stopping: tokio::sync::watch::Sender<bool>,
    /// This broker's node id (`serve --node-id`): in Metadata, in every producer id it hands
    /// out in a cluster, in the cluster's records.
    node_id: NodeId,
    /// The cluster this broker is a member of, once joined ([`BrokerService::join_cluster`]);
    /// unset: standalone. The replica manager answers from it.
    cluster: OnceLock<Arc<ClusterDriver>>,
    /// In a cluster: committed offsets and group membership in the replicated offsets topic
    /// (set with the cluster); standalone they stay in the broker's `groups/` directory.
    offsets: OnceLock<Arc<ReplicatedOffsets>>,
    /// The transaction coordinator, once started ([`BrokerService::start_transactions`]):
    /// standalone brokers only for now.
    transactions: OnceLock<Arc<TransactionCoordinator>>,
}

/// One position of a group to commit: topic, partition, offset and metadata.
pub type OffsetToCommit = (String, u32, CommittedOffset);

/// How far a committed position may go (the listeners' protocols differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitBound {
    /// Not past the partition's high watermark where this broker can tell (standalone): the
    /// native protocol's rule, which catches a consumer committing what it never read.
    HighWatermark,
    /// Any offset of an existing partition: Kafka's OffsetCommit, which tools use to set a
    /// group's position ahead (`kafka-consumer-groups --reset-offsets --to-offset`).
    Existence,
}

/// What [`BrokerService::commit_offsets`] did.
#[derive(Debug)]
pub struct OffsetCommits {
    /// Each position's own check, in request order; the `Ok` ones were written.
    pub checked: Vec<Result<(), BrokerError>>,
    /// The one durable write of every position that passed its check (`Ok` if there was none).
    pub written: Result<(), BrokerError>,
}

impl BrokerService {
    /// A service over `broker` granting leases through `leases`.
    pub fn new(broker: Arc<Broker>, leases: Arc<dyn LeaseAuthority>) -> Self {
        Self {
            broker,
            leases,
            coordinator_config: CoordinatorConfig::default(),
            coordinator: OnceLock::new(),
            consumer_groups: OnceLock::new(),
            metrics: Arc::default(),
            stopping: tokio::sync::watch::Sender::new(false),
            node_id: 0,
            cluster: OnceLock::new(),
            offsets: OnceLock::new(),
            transactions: OnceLock::new(),
        }
    }

    /// The same service for broker `node_id` (`serve --node-id`; 0 unless given).
    pub fn with_node_id(mut self, node_id: NodeId) -> Self {
        self.node_id = node_id;
        self
    }

    /// This broker's node id.
    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// Makes this broker a member of `driver`'s cluster: from now on the replica manager answers
    /// from it for every listener (who leads, `acks`, where topics are made), and producer ids
    /// carry the node id above
    /// [`PRODUCER_ID_LOCAL_BITS`](super::producer_ids::PRODUCER_ID_LOCAL_BITS) bits. Once only,
    /// before serving, and with the driver of this broker's node id.
    pub fn join_cluster(&self, driver: Arc<ClusterDriver>) -> Result<(), BrokerError> {
        if driver.node_id() != self.node_id {
            return Err(BrokerError::InvalidConfig(format!(
                "the cluster driver is node {} but this broker is node {}: one node id names the broker everywhere",
                driver.node_id(),
                self.node_id
            )));
        }
        driver.attach_service(Arc::clone(&self.leases), Arc::clone(&self.metrics));
        let limits = *self.broker.group_offsets().config();
        let offsets = Arc::new(ReplicatedOffsets::new(
            Arc::clone(&self.broker),
            Arc::clone(&driver),
            limits,
        ));
        self.cluster.set(driver).map_err(|_| {
            BrokerError::InvalidConfig("this broker already joined a cluster".into())
        })?;
        if let Some(coordinator) = self.coordinator.get() {
            offsets.attach(coordinator);
        }
        let _ = self.offsets.set(offsets);
        Ok(())
    }

    /// The replica manager: this broker's part in the cluster, which decides what every
    /// listener's requests mean here (see [`super::cluster`]).
    pub fn replica_manager(&self) -> ReplicaManager {
        match self.cluster.get() {
            Some(driver) => ReplicaManager::Clustered(Arc::clone(driver)),
            None => ReplicaManager::Standalone {
                node_id: self.node_id,
            },
        }
    }

    /// The credential a native batch stamped with `epoch` presents (see
    /// [`ReplicaManager::native_credential`]).
    pub fn native_credential(&self, epoch: Epoch) -> WriteCredential {
        self.replica_manager().native_credential(epoch)
    }

    /// Tells the service that the server is shutting down: every pending long poll (and every
    /// later one) answers at once with what it has, so a graceful shutdown does not wait for
    /// fetches' `max_wait`.
    pub fn begin_shutdown(&self) {
        self.stopping.send_replace(true);
    }

    /// Completes once [`BrokerService::begin_shutdown`] was called (at once if it was).
    pub async fn shutting_down(&self) {
        let mut stopping = self.stopping.subscribe();
        // An error means the sender is gone, which cannot happen while `self` lives.
        let _ = stopping.wait_for(|stopping| *stopping).await;
    }

    /// The same service whose group coordinator, once started, has these settings.
    pub fn with_coordinator_config(mut self, config: CoordinatorConfig) -> Self {
        self.coordinator_config = config;
        self
    }

    /// The standalone service: leases from a local table with these TTL bounds, expired by the
    /// system clock.
    pub fn standalone(broker: Arc<Broker>, lease: LeaseConfig) -> Self {
        Self::with_clock(broker, lease, Arc::new(SystemClock))
    }

    /// The standalone service with leases expired by `clock` (tests advance a
    /// [`crate::clock::ManualClock`] instead of sleeping).
    pub fn with_clock(broker: Arc<Broker>, lease: LeaseConfig, clock: Arc<dyn Clock>) -> Self {
        Self::new(broker, Arc::new(LocalLeaseAuthority::new(lease, clock)))
    }

    /// The topics and partitions behind the service.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The lease authority.
    pub fn leases(&self) -> &Arc<dyn LeaseAuthority> {
        &self.leases
    }

    /// The server-wide metrics (what the metrics endpoint exposes besides each partition's).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The consumer-group coordinator (membership and generations of Kafka's classic group
    /// protocol), started on first use. Must be called inside a tokio runtime: the coordinator's
    /// ticker task checks session and rebalance deadlines. It stops when the service is dropped;
    /// its groups live in the offsets partitions on a cluster, in `DATA/groups/` standalone
    /// (loaded here, so a restart keeps stable groups stable).
    pub fn group_coordinator(&self) -> &Arc<GroupCoordinator> {
        self.coordinator.get_or_init(|| {
            let coordinator = GroupCoordinator::start(self.coordinator_config.clone());
            match (self.offsets.get(), self.cluster.get()) {
                (Some(offsets), _) => offsets.attach(&coordinator),
                // Joining a cluster right now: `join_cluster` attaches the offsets topic.
                (None, Some(_)) => {}
                (None, None) => coordinator.store_in(
                    Arc::clone(self.broker.group_memberships()) as _,
                    self.broker.take_loaded_memberships(),
                ),
            }
            coordinator
        })
    }

    /// The coordinator of consumer-protocol (KIP-848) groups: membership in memory only (see
    /// [`ConsumerGroups`]); their committed offsets are in the same store as classic groups'.
    /// On a cluster it answers for the groups whose offsets partition this broker leads
    /// ([`Self::require_coordinator`] first, as for classic groups).
    pub fn consumer_groups(&self) -> &ConsumerGroups {
        self.consumer_groups
            .get_or_init(|| ConsumerGroups::new(self.coordinator_config.consumer.clone()))
    }

    /// Every topic this broker knows and its partition count (what consumer-protocol
    /// subscriptions resolve against).
    pub fn topic_partition_counts(&self) -> std::collections::BTreeMap<String, u32> {
        self.broker
            .topics()
            .iter()
            .map(|topic| {
                let count = u32::try_from(topic.partitions().len()).unwrap_or(u32::MAX);
                (topic.name().to_owned(), count)
            })
            .collect()
    }

    /// Ok when this broker coordinates `group` (standalone: always). In a cluster the
    /// coordinator is the leader of the group's offsets partition
    /// ([`super::offsets_topic`]); another broker answers `NotCoordinator` naming it, and a
    /// broker that just took the partition over loads it first.
    pub async fn require_coordinator(&self, group: &str) -> Result<(), BrokerError> {
        match self.offsets.get() {
            None => Ok(()),
            Some(offsets) => {
                offsets
                    .require_coordinator(self.group_coordinator(), group)
                    .await
            }
        }
    }

    /// The cluster's replicated offsets topic (committed offsets, group membership and, for
    /// the transaction coordinator on a cluster, transaction state); `None` standalone.
    pub fn replicated_offsets(&self) -> Option<&Arc<ReplicatedOffsets>> {
        self.offsets.get()
    }

    /// The node id of the broker coordinating `group`: this one standalone; on a cluster the
    /// leader of the group's offsets partition.
    pub async fn coordinator_of(&self, group: &str) -> Result<NodeId, BrokerError> {
        match self.offsets.get() {
            None => Ok(self.node_id),
            Some(offsets) => offsets.coordinator_of(group).await,
        }
    }

    /// Refuses a client's `operation` on the cluster's internal offsets topic (standalone a
    /// topic of that name is an ordinary topic).
    fn refuse_internal(&self, topic: &str, operation: &'static str) -> Result<(), BrokerError> {
        match self.offsets.get().is_some() && topic == super::offsets_topic::OFFSETS_TOPIC {
            true => Err(ClusterError::InternalTopic {
                topic: topic.to_owned(),
                operation,
            }
            .into()),
            false => Ok(()),
        }
    }

    /// The names of the groups holding committed offsets that this broker coordinates, sorted.
    pub fn group_names(&self) -> Vec<String> {
        match self.offsets.get() {
            None => self.broker.group_offsets().group_names(),
            Some(offsets) => offsets.group_names(),
        }
    }

    /// Whether `group` holds committed offsets (on a cluster, as its coordinator loaded them).
    pub async fn has_committed_offsets(&self, group: &str) -> bool {
        match self.offsets.get() {
            None => self.broker.group_offsets().has_group(group),
            Some(_) => self
                .committed_offsets(group)
                .await
                .is_ok_and(|commits| !commits.is_empty()),
        }
    }

    /// A connection's produce queue: its produces append in the order they are submitted.
    pub fn produce_queue(self: &Arc<Self>) -> ProduceQueue {
        ProduceQueue::new(Arc::clone(self))
    }

    /// Starts the transaction coordinator. Standalone: loads the transaction states of the
    /// data directory, completes what a restart interrupted (before any client is served: call
    /// it before accepting connections), and starts its timeout task. In a cluster (after
    /// [`join_cluster`](Self::join_cluster)): the states live in the offsets topic, and the
    /// timeout task takes over the ids of each offsets partition this broker comes to lead
    /// (completing prepared outcomes, leasing open transactions again or timing them out).
    /// Once only.
    pub async fn start_transactions(self: &Arc<Self>) -> Result<(), BrokerError> {
        if self.transactions.get().is_some() {
            return Ok(());
        }
        if let (Some(driver), Some(offsets)) = (self.cluster.get(), self.offsets.get()) {
            let registry = crate::broker::transactions::TransactionRegistry::replicated(
                Arc::clone(offsets),
                Arc::clone(self.group_coordinator()),
            );
            let partitions = Arc::new(crate::broker::transactions::ClusterPartitions::new(
                Arc::clone(driver),
            ));
            let coordinator = Arc::new(TransactionCoordinator::replicated(registry, partitions));
            coordinator.start_timeouts(self);
            let _ = self.transactions.set(coordinator);
            return Ok(());
        }
        let data = self.broker.data_dir().to_path_buf();
        let coordinator = Arc::new(
            blocking(move || {
                TransactionCoordinator::open(&data).map_err(|source| BrokerError::Io {
                    context: "read the transaction states".into(),
                    source,
                })
            })
            .await?,
        );
        coordinator.recover(self).await;
        coordinator.start_timeouts(self);
        let _ = self.transactions.set(coordinator);
        Ok(())
    }

    /// The transaction coordinator, if this broker runs one.
    pub fn transactions(&self) -> Option<&Arc<TransactionCoordinator>> {
        self.transactions.get()
    }

    /// Starts interval syncs and retention; they stop when the returned handle is stopped.
    pub fn start_maintenance(self: &Arc<Self>) -> Maintenance {
        Maintenance::start(Arc::clone(&self.broker))
    }

    /// One produce, for every listener: the replica manager checks that this broker may take
    /// it (`acks=all` needs `min_insync` in-sync replicas before anything is written), the
    /// connection's `queue` appends it *now* in request order, and the returned future waits for
    /// its acknowledgement under the flush policy and then, with `acks=all`, for every in-sync
    /// replica (`None`: the broker's default, [`ReplicaManager::default_acks`]).
    pub fn produce(
        &self,
        queue: &ProduceQueue,
        request: ProduceRequest,
        acks: Option<Acks>,
    ) -> BoxFuture<'static, Result<Appended, BrokerError>> {
        let (topic, partition) = (request.topic.clone(), request.partition);
        self.produce_through(topic, partition, acks, || queue.produce(request))
    }

    /// [`produce`](Self::produce) of a batch whose last bytes are in a pipe, not in memory (the
    /// one-copy produce path: [`crate::broker::spliced_produce`]): the same checks, order,
    /// fence and acknowledgement.
    pub fn produce_spliced(
        &self,
        queue: &ProduceQueue,
        request: SplicedProduce,
        acks: Option<Acks>,
    ) -> BoxFuture<'static, Result<Appended, BrokerError>> {
        let (topic, partition) = (request.topic.clone(), request.partition);
        self.produce_through(topic, partition, acks, || queue.produce_spliced(request))
    }

    /// The replica manager's part of a produce around `append` (the connection queue's append
    /// of the batch, in request order).
    fn produce_through(
        &self,
        topic: String,
        partition: u32,
        acks: Option<Acks>,
        append: impl FnOnce() -> Acknowledgement,
    ) -> BoxFuture<'static, Result<Appended, BrokerError>> {
        let replicas = self.replica_manager();
        if let ReplicaManager::Standalone { .. } = replicas {
            // The leader is the only replica: its acknowledgement is the commit, whatever `acks`.
            return append();
        }
        let acks = acks.unwrap_or_else(|| replicas.default_acks());
        if let Err(refused) = self
            .refuse_internal(&topic, "produced to")
            .and_then(|()| replicas.check_produce(&topic, partition, acks))
        {
            return Box::pin(futures::future::ready(Err(refused)));
        }
        let acknowledged = append();
        committed(replicas, topic, partition, acknowledged, acks)
    }

    /// [`produce`](Self::produce) of one partition's batches that a replicated leader must
    /// verify first (a Kafka transaction's first batches there): the replica manager's checks
    /// now, the appends in request order once `ready` answers with the verification's guard
    /// ([`ProduceQueue::produce_after`]), each acknowledged as `produce` does. A cluster
    /// broker's path only.
    pub fn produce_verified<E: Send + 'static>(
        &self,
        queue: &ProduceQueue,
        ready: BoxFuture<'static, Result<u64, E>>,
        requests: Vec<ProduceRequest>,
        acks: Acks,
    ) -> Result<BoxFuture<'static, Result<Vec<Acknowledgement>, E>>, BrokerError> {
        let replicas = self.replica_manager();
        let mut partitions = Vec::with_capacity(requests.len());
        for request in &requests {
            self.refuse_internal(&request.topic, "produced to")?;
            replicas.check_produce(&request.topic, request.partition, acks)?;
            partitions.push((request.topic.clone(), request.partition));
        }
        let appended = queue.produce_after(ready, requests);
        Ok(Box::pin(async move {
            let acknowledgements = appended.await?;
            Ok(acknowledgements
                .into_iter()
                .zip(partitions)
                .map(|(acknowledged, (topic, partition))| {
                    committed(replicas.clone(), topic, partition, acknowledged, acks)
                })
                .collect())
        }))
    }

    /// Appends a batch *now* (the fence check and the copy fix its offsets) and returns the wait
    /// for its acknowledgement: a group-commit sync on the blocking pool under flush `always`,
    /// nothing otherwise. The one produce path: [`ProduceQueue`] calls it in request order.
    pub(crate) fn begin_produce(
        &self,
        request: &ProduceRequest,
    ) -> BoxFuture<'static, Result<Appended, BrokerError>> {
        let started = self
            .broker
            .partition(&request.topic, request.partition)
            .and_then(|target| {
                Ok((
                    target.append_pending_verified(
                        request.credential,
                        request.batch.slices(),
                        request.verification,
                    )?,
                    target,
                ))
            });
        Self::acknowledgement(started)
    }

    /// [`begin_produce`](Self::begin_produce) of a batch whose last bytes are in a pipe (see
    /// [`crate::broker::spliced_produce`]): the same fence, checks and acknowledgement, the
    /// bytes spliced into the segment file.
    pub(crate) fn begin_spliced_produce(
        &self,
        request: SplicedProduce,
    ) -> BoxFuture<'static, Result<Appended, BrokerError>> {
        let started = self
            .broker
            .partition(&request.topic, request.partition)
            .and_then(|target| Ok((request.append_to(&target)?, target)));
        Self::acknowledgement(started)
    }

    /// The wait for an append's acknowledgement under its partition's flush policy: a
    /// group-commit sync on the blocking pool under flush `always`, nothing otherwise.
    fn acknowledgement(
        started: Result<(PendingAppend, Arc<Partition>), BrokerError>,
    ) -> BoxFuture<'static, Result<Appended, BrokerError>> {
        match started {
            Err(error) => Box::pin(futures::future::ready(Err(error))),
            Ok((pending, target)) if target.acknowledge_blocks() => {
                Box::pin(blocking(move || Ok(target.acknowledge(pending)?)))
            }
            Ok((pending, target)) => Box::pin(futures::future::ready(
                target.acknowledge(pending).map_err(BrokerError::from),
            )),
        }
    }

    /// Reads from `offset`; when nothing there is visible yet, waits (long poll) until the high
    /// watermark moves past it or `max_wait` passes, then answers with what there is. What it
    /// returns is counted as fetched.
    pub async fn fetch(&self, request: FetchRequest) -> Result<ReadResult, BrokerError> {
        self.replica_manager()
            .require_leader(&request.topic, request.partition)?;
        let target = self.broker.partition(&request.topic, request.partition)?;
        let result = self.wait_for_data(request).await?;
        target.metrics().fetched_batches(&result.batches);
        Ok(result)
    }

    /// [`BrokerService::fetch`] for a read_committed reader (the native Fetch version 1): the
    /// batches below the partition's last stable offset, without transaction markers and
    /// aborted transactions' batches, and where the reader goes on. Waits up to `max_wait` while
    /// nothing at `offset` is committed yet (an open transaction holds the last stable offset
    /// back), so a reader behind one does not spin.
    pub async fn fetch_committed(
        &self,
        request: FetchRequest,
    ) -> Result<(ReadResult, crate::protocol::CommittedRead), BrokerError> {
        self.replica_manager()
            .require_leader(&request.topic, request.partition)?;
        let target = self.broker.partition(&request.topic, request.partition)?;
        let mut changes = target.subscribe();
        let deadline = tokio::time::Instant::now() + request.max_wait;
        loop {
            let last_stable = target.last_stable_offset();
            let mut read = target.read(request.offset, request.max_bytes)?;
            let aborted = target.aborted_transactions(request.offset, last_stable);
            let (batches, next) = crate::storage::committed_batches(
                std::mem::take(&mut read.batches),
                last_stable,
                &aborted,
            );
            let next_offset = next.unwrap_or(request.offset).max(request.offset);
            let answer = |mut read: ReadResult, batches: Vec<Bytes>| {
                target.metrics().fetched_batches(&batches);
                read.batches = batches;
                Ok((
                    read,
                    crate::protocol::CommittedRead {
                        last_stable_offset: last_stable,
                        next_offset,
                    },
                ))
            };
            if !batches.is_empty() || next_offset > request.offset {
                return answer(read, batches);
            }
            let changed = tokio::select! {
                changed = tokio::time::timeout_at(deadline, changes.changed()) => changed,
                () = self.shutting_down() => return answer(read, batches),
            };
            match changed {
                Ok(Ok(())) => continue,
                _ => return answer(read, batches),
            }
        }
    }

    /// The long poll of [`BrokerService::fetch`], without counting what it returns as fetched:
    /// for a listener that only waits for data here and reads it with
    /// [`BrokerService::read_now`] (Kafka's fetch of several partitions).
    pub async fn wait_for_data(&self, request: FetchRequest) -> Result<ReadResult, BrokerError> {
        let target = self.broker.partition(&request.topic, request.partition)?;
        let mut changes = target.subscribe();
        let deadline = tokio::time::Instant::now() + request.max_wait;
        loop {
            let result = target.read(request.offset, request.max_bytes)?;
            if !result.batches.is_empty() || request.offset < result.high_watermark {
                return Ok(result);
            }
            let changed = tokio::select! {
                changed = tokio::time::timeout_at(deadline, changes.changed()) => changed,
                () = self.shutting_down() => return Ok(target.read(request.offset, request.max_bytes)?),
            };
            match changed {
                Ok(Ok(())) => continue,
                _ => return Ok(target.read(request.offset, request.max_bytes)?),
            }
        }
    }

    /// Reads from `offset` at once, without waiting (see [`BrokerService::fetch`] for the long
    /// poll): listeners that wait on several partitions at a time read each with this.
    pub fn read_now(&self, request: FetchRequest) -> Result<ReadResult, BrokerError> {
        self.replica_manager()
            .require_leader(&request.topic, request.partition)?;
        let target = self.broker.partition(&request.topic, request.partition)?;
        let result = target.read(request.offset, request.max_bytes)?;
        target.metrics().fetched_batches(&result.batches);
        Ok(result)
    }

    /// Where a partition's log starts and ends, and its epoch.
    pub fn list_offsets(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<PartitionOffsets, BrokerError> {
        self.replica_manager().require_leader(topic, partition)?;
        let target = self.broker.partition(topic, partition)?;
        Ok(PartitionOffsets {
            earliest: target.log_start_offset(),
            latest: target.high_watermark(),
            epoch: target.current_epoch(),
        })
    }

    /// Deletes `topic/partition`'s records below `offset`
    /// ([`DELETE_UP_TO_HIGH_WATERMARK`](crate::domain::DELETE_UP_TO_HIGH_WATERMARK): below the
    /// high watermark) and returns the new low watermark (the log start). Only the partition's
    /// leader accepts it (else `NotLeader`); an offset past the high watermark is out of range
    /// and changes nothing; the log start never moves back. The answer comes once the new log
    /// start is durable on this broker; followers adopt it from their next fetch (see
    /// `docs/replication.md`). Off the async workers: it fsyncs and deletes files.
    pub async fn delete_records(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
    ) -> Result<u64, BrokerError> {
        self.replica_manager().require_leader(topic, partition)?;
        let target = self.broker.partition(topic, partition)?;
        blocking(move || {
            let offset = match offset {
                crate::domain::DELETE_UP_TO_HIGH_WATERMARK => target.high_watermark(),
                offset => offset,
            };
            Ok(target.delete_records_before(offset)?)
        })
        .await
    }

    /// The idempotent producers `topic/partition` remembers (Kafka's DescribeProducers): only
    /// its leader answers, as only the leader's state decides which retries land.
    pub fn active_producers(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Vec<crate::storage::producer_state::ActiveProducer>, BrokerError> {
        self.replica_manager().require_leader(topic, partition)?;
        Ok(self.broker.partition(topic, partition)?.active_producers())
    }

    /// A partition's last stable offset: what a read_committed reader may read up to (the high
    /// watermark when no transaction is open). Only the leader answers.
    pub fn last_stable_offset(&self, topic: &str, partition: u32) -> Result<u64, BrokerError> {
        self.replica_manager().require_leader(topic, partition)?;
        Ok(self
            .broker
            .partition(topic, partition)?
            .last_stable_offset())
    }

    /// The aborted transactions whose records fall in `[from, to)` of a partition, for a
    /// read_committed reader to drop. Only the leader answers.
    pub fn aborted_transactions(
        &self,
        topic: &str,
        partition: u32,
        from: u64,
        to: u64,
    ) -> Result<Vec<crate::storage::AbortedTransaction>, BrokerError> {
        self.replica_manager().require_leader(topic, partition)?;
        Ok(self
            .broker
            .partition(topic, partition)?
            .aborted_transactions(from, to))
    }

    /// The transactions open in a partition (DescribeProducers, DescribeTransactions). Only
    /// the leader answers.
    pub fn open_transactions(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Vec<crate::storage::OpenTransaction>, BrokerError> {
        self.replica_manager().require_leader(topic, partition)?;
        Ok(self.broker.partition(topic, partition)?.open_transactions())
    }

    /// A new producer id and its first session (producer epoch 0), for idempotent appends. Off
    /// the async workers: a new block of ids is reserved with an fsync now and then.
    pub async fn init_producer_id(&self) -> Result<(i64, i16), BrokerError> {
        let broker = Arc::clone(&self.broker);
        let producer_id = blocking(move || broker.allocate_producer_id()).await?;
        let producer_id = match self.cluster.get() {
            Some(_) => super::producer_ids::cluster_producer_id(self.node_id, producer_id),
            None => producer_id,
        };
        Ok((producer_id, 0))
    }

    /// Commits `group`'s position in `topic/partition` (the offset of the next record it will
    /// read) durably: `Ok` means it survives a crash (on a cluster: every in-sync replica of the
    /// group's offsets partition has it). The partition must exist and, standalone, the offset
    /// must not be past its high watermark; an offset below the log start is accepted (the
    /// consumer learns it is gone when it fetches there).
    pub async fn commit_offset(
        &self,
        group: String,
        topic: String,
        partition: u32,
        committed: CommittedOffset,
    ) -> Result<(), BrokerError> {
        let commits = self
            .commit_offsets(group, vec![(topic, partition, committed)])
            .await;
        match commits.checked.into_iter().next() {
            Some(Err(refused)) => Err(refused),
            _ => commits.written,
        }
    }

    /// Commits several of `group`'s positions in one durable write (Kafka's OffsetCommit).
    /// Each is checked on its own (the partition exists; standalone, the offset is not past its
    /// high watermark; the metadata is within the store's limit) and gets its own result, in
    /// request order; those that pass are written together, all or none, and
    /// [`OffsetCommits::written`] says how that went.
    ///
    /// On a cluster the coordinator need not hold a copy of the committed partitions, so only
    /// their existence is checked there (as Kafka does), and the write is one record of the
    /// group's offsets partition.
    pub async fn commit_offsets(
        &self,
        group: String,
        offsets: Vec<OffsetToCommit>,
    ) -> OffsetCommits {
        self.commit_offsets_within(group, offsets, CommitBound::HighWatermark)
            .await
    }

    /// [`BrokerService::commit_offsets`] with the bound of `bound` (Kafka's OffsetCommit passes
    /// [`CommitBound::Existence`]).
    pub async fn commit_offsets_within(
        &self,
        group: String,
        offsets: Vec<OffsetToCommit>,
        bound: CommitBound,
    ) -> OffsetCommits {
        let max_metadata_bytes = self.broker.group_offsets().config().max_metadata_bytes;
        let mut checked = Vec::with_capacity(offsets.len());
        let mut to_write = Vec::with_capacity(offsets.len());
        for (topic, partition, committed) in offsets {
            let check = self
                .commit_target_high_watermark(&topic, partition)
                .and_then(|high_watermark| {
                    if committed.metadata.len() > max_metadata_bytes {
                        return Err(BrokerError::GroupOffsets(
                            GroupOffsetsError::MetadataTooLarge {
                                bytes: committed.metadata.len(),
                                max: max_metadata_bytes,
                            },
                        ));
                    }
                    match high_watermark.filter(|_| bound == CommitBound::HighWatermark) {
                        Some(high_watermark) if committed.offset > high_watermark => {
                            Err(BrokerError::CommitOutOfRange {
                                topic: topic.clone(),
                                partition,
                                offset: committed.offset,
                                high_watermark,
                            })
                        }
                        _ => Ok(()),
                    }
                });
            if check.is_ok() {
                to_write.push(((topic, partition), committed));
            }
            checked.push(check);
        }
        let written = match (to_write.is_empty(), self.offsets.get()) {
            (true, _) => Ok(()),
            (false, Some(replicated)) => {
                replicated
                    .commit(self.group_coordinator(), &group, to_write)
                    .await
            }
            (false, None) => {
                let broker = Arc::clone(&self.broker);
                blocking(move || Ok(broker.group_offsets().commit_all(&group, to_write)?)).await
            }
        };
        OffsetCommits { checked, written }
    }

    /// Whether a position in `topic/partition` may be committed, and the high watermark it must
    /// not pass (`None` on a cluster, where the coordinator may hold no copy of it).
    fn commit_target_high_watermark(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Option<u64>, BrokerError> {
        match self.cluster.get() {
            None => Ok(Some(
                self.broker.partition(topic, partition)?.high_watermark(),
            )),
            Some(driver) => match driver.partition_count(topic) {
                None => Err(BrokerError::UnknownTopic(topic.to_owned())),
                Some(count) if partition >= count => Err(BrokerError::UnknownPartition {
                    topic: topic.to_owned(),
                    partition,
                    count,
                }),
                Some(_) => Ok(None),
            },
        }
    }

    /// Whether `topic/partition` exists (on a cluster: in the store's view, whether or not this
    /// broker holds a copy).
    pub fn partition_exists(&self, topic: &str, partition: u32) -> bool {
        self.commit_target_high_watermark(topic, partition).is_ok()
    }

    /// Deletes group `group` (Kafka's DeleteGroups): it must have no members; its committed
    /// offsets and (on a cluster) its membership snapshot are deleted durably. `GroupNotFound`
    /// if it has neither members nor committed offsets, `GroupNotEmpty` if it has members; on a
    /// cluster, only its coordinator deletes it.
    pub async fn delete_group(&self, group: &str) -> Result<(), BrokerError> {
        self.broker.group_offsets().check_group(group)?;
        self.require_coordinator(group).await?;
        if let Some(active) = self
            .consumer_groups()
            .describe(group, std::time::Instant::now())
        {
            return Err(BrokerError::GroupNotEmpty {
                group: group.to_owned(),
                members: active.members.len(),
            });
        }
        let known = self
            .group_coordinator()
            .remove_empty_group(group)
            .map_err(|refused| BrokerError::GroupNotEmpty {
                group: group.to_owned(),
                members: refused.members,
            })?;
        let has_offsets = self.has_committed_offsets(group).await;
        if !known && !has_offsets {
            return Err(BrokerError::GroupNotFound(group.to_owned()));
        }
        self.delete_offsets_of(group, None).await
    }

    /// Deletes `group`'s committed offsets of `partitions` (Kafka's OffsetDelete; the Kafka
    /// handler decides which partitions an active group may lose). `GroupNotFound` if the group
    /// has neither members nor committed offsets. Partitions it never committed are no error.
    pub async fn delete_committed_offsets(
        &self,
        group: &str,
        partitions: Vec<PartitionKey>,
    ) -> Result<(), BrokerError> {
        self.broker.group_offsets().check_group(group)?;
        self.require_coordinator(group).await?;
        let known = self.group_coordinator().describe(group).is_some();
        if !known && !self.has_committed_offsets(group).await {
            return Err(BrokerError::GroupNotFound(group.to_owned()));
        }
        if partitions.is_empty() {
            return Ok(());
        }
        self.delete_offsets_of(group, Some(partitions)).await
    }

    async fn delete_offsets_of(
        &self,
        group: &str,
        partitions: Option<Vec<PartitionKey>>,
    ) -> Result<(), BrokerError> {
        match self.offsets.get() {
            Some(replicated) => {
                replicated
                    .delete(self.group_coordinator(), group, partitions)
                    .await
            }
            None => {
                let broker = Arc::clone(&self.broker);
                let group = group.to_owned();
                blocking(move || {
                    broker
                        .group_offsets()
                        .delete(&group, partitions.as_deref())?;
                    Ok(())
                })
                .await
            }
        }
    }

    /// Every position `group` committed, by topic and partition (nothing committed: empty).
    pub async fn committed_offsets(&self, group: &str) -> Result<PartitionCommits, BrokerError> {
        match self.offsets.get() {
            None => Ok(self.broker.group_offsets().committed_all(group)?),
            Some(offsets) => offsets.committed_all(self.group_coordinator(), group).await,
        }
    }

    /// The offset `group` last committed for `topic/partition`, or `None` if it never did.
    pub async fn committed_offset(
        &self,
        group: &str,
        topic: &str,
        partition: u32,
    ) -> Result<Option<CommittedOffset>, BrokerError> {
        self.commit_target_high_watermark(topic, partition)?;
        match self.offsets.get() {
            None => Ok(self
                .broker
                .group_offsets()
                .committed(group, topic, partition)?),
            Some(offsets) => {
                offsets
                    .committed(self.group_coordinator(), group, topic, partition)
                    .await
            }
        }
    }

    /// The first offset whose record timestamp is at or after `timestamp` (ms), among visible
    /// records; `None` if none is that recent.
    pub fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> Result<Option<u64>, BrokerError> {
        let target = self.broker.partition(topic, partition)?;
        Ok(target.offset_for_timestamp(timestamp)?)
    }

    /// [`BrokerService::offset_for_timestamp`] with the found record's own timestamp (what
    /// Kafka's ListOffsets answers): at least `timestamp`, read from the record's batch.
    pub fn record_for_timestamp(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> Result<Option<(u64, i64)>, BrokerError> {
        let target = self.broker.partition(topic, partition)?;
        let Some(offset) = target.offset_for_timestamp(timestamp)? else {
            return Ok(None);
        };
        let read = target.read(offset, 1)?;
        let found = read
            .batches
            .first()
            .and_then(|batch| crate::batch::decode_batch(batch).ok())
            .and_then(|records| records.into_iter().find(|record| record.offset == offset))
            .map_or(timestamp, |record| record.timestamp.max(timestamp));
        Ok(Some((offset, found)))
    }

    /// The first visible offset holding `topic/partition`'s largest record timestamp, with that
    /// timestamp (Kafka's ListOffsets max timestamp); `None` if no record is visible.
    pub fn record_of_max_timestamp(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Option<(u64, i64)>, BrokerError> {
        let target = self.broker.partition(topic, partition)?;
        Ok(target.offset_of_max_timestamp()?)
    }

    /// Grants the partition's lease if it has no live one; the new epoch is installed durably in
    /// the partition's writer before this returns.
    pub async fn acquire_lease(
        &self,
        topic: &str,
        partition: u32,
        holder: String,
        ttl_ms: u64,
    ) -> Result<Grant, BrokerError> {
        self.refuse_internal(topic, "leased")?;
        let target = self.lease_target(topic, partition)?;
        let log = Arc::clone(&target.log);
        match self.leases.acquire(target, holder.clone(), ttl_ms).await {
            // The topic was deleted while the grant was being installed.
            Err(AuthorityError::Install { source, .. })
                if matches!(*source, StorageError::Deleted { .. }) =>
            {
                Err(BrokerError::UnknownTopic(topic.to_string()))
            }
            granted => {
                let grant = granted?;
                if grant.joined {
                    log.metrics().lease_renewed();
                } else {
                    log.metrics().lease_granted_to(grant.epoch, &holder);
                }
                Ok(grant)
            }
        }
    }

    /// Extends a live lease.
    pub async fn renew_lease(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
    ) -> Result<Renewed, BrokerError> {
        let target = self.lease_target(topic, partition)?;
        let log = Arc::clone(&target.log);
        let renewed = self.leases.renew(target, lease_id).await?;
        log.metrics().lease_renewed();
        Ok(renewed)
    }

    /// Ends a live lease at once.
    pub async fn release_lease(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
    ) -> Result<(), BrokerError> {
        let target = self.lease_target(topic, partition)?;
        Ok(self.leases.release(target, lease_id).await?)
    }

    /// The partition a lease request is for; only its leader grants, renews and releases.
    fn lease_target(&self, topic: &str, partition: u32) -> Result<LeaseTarget, BrokerError> {
        self.replica_manager().require_leader(topic, partition)?;
        let log: Arc<Partition> = self.broker.partition(topic, partition)?;
        Ok(LeaseTarget {
            topic: topic.to_string(),
            partition,
            log,
        })
    }

    /// Creates a topic durably (on the blocking pool: it creates and syncs files).
    pub async fn create_topic(
        &self,
        name: String,
        partitions: u32,
        config: TopicConfig,
    ) -> Result<Arc<Topic>, BrokerError> {
        let broker = Arc::clone(&self.broker);
        blocking(move || broker.create_topic(&name, partitions, config)).await
    }

    /// Creates a topic where this broker's mode keeps topics, with its replication settings
    /// (`None`: the mode's default): in a cluster through the metadata store, placed over the
    /// live brokers (waiting until its leaders are elected); standalone in the data directory,
    /// where only a factor of 1 can be honoured.
    pub async fn create_replicated_topic(
        &self,
        name: String,
        partitions: u32,
        config: TopicConfig,
        replication: Option<Replication>,
    ) -> Result<(), BrokerError> {
        if let Some(invalid) = replication.as_ref().and_then(Replication::invalid) {
            return Err(BrokerError::InvalidConfig(invalid));
        }
        match self.replica_manager() {
            ReplicaManager::Clustered(driver) => {
                self.refuse_internal(&name, "created")?;
                driver
                    .create_topic(name, partitions, config, replication)
                    .await
            }
            ReplicaManager::Standalone { .. } => {
                if let Some(replication) = replication.filter(|r| r.factor > 1) {
                    return Err(ClusterError::ClusterRequired(format!(
                        "replication factor {} needs a cluster: start the brokers with --etcd (this broker runs standalone and keeps one copy; use --replication-factor 1)",
                        replication.factor
                    ))
                    .into());
                }
                self.create_topic(name, partitions, config).await.map(drop)
            }
        }
    }

    /// Changes the live settings of a topic (segment size, retention): `change` computes the new
    /// config from the current one and refuses what cannot change (with
    /// `BrokerError::InvalidConfig` naming it). Standalone: durable in the topic's `topic.json`
    /// (written atomically) and applied to its open partitions before this returns. In a
    /// cluster: a compare-and-swap of the topic record in the metadata store, which every
    /// broker's driver applies to its local copy. `validate_only` checks and changes nothing.
    /// Returns the config in force after the change.
    pub async fn alter_topic_config(
        &self,
        name: String,
        change: TopicConfigChangeFn,
        validate_only: bool,
    ) -> Result<TopicConfig, BrokerError> {
        self.refuse_internal(&name, "altered")?;
        if let ReplicaManager::Clustered(driver) = self.replica_manager() {
            return driver
                .alter_topic_config(&name, &change, validate_only)
                .await;
        }
        let topic = self.broker.topic(&name)?;
        if validate_only {
            let config = change(topic.config())?;
            crate::broker::partition_config(&config, topic.partitions().len() as u32)
                .validate()
                .map_err(|error| BrokerError::InvalidConfig(error.to_string()))?;
            return Ok(config);
        }
        let broker = Arc::clone(&self.broker);
        blocking(move || broker.alter_topic_config(&name, |current| change(current)))
            .await
            .map(|topic| *topic.config())
    }

    /// Grows topic `name` to `partitions` partitions (the new total, as Kafka's CreatePartitions
    /// and `fencelog topic add-partitions --count` count) and returns the count it has after.
    /// Standalone: the new partitions are created and opened, then `topic.json` records the
    /// count durably ([`Broker::add_partitions`]), and metadata lists them before this returns.
    /// In a cluster: one transaction of the metadata store adds the new partitions' states
    /// (placed over the live brokers) and the new count to the topic record, compared against
    /// the record as read; every broker's driver then creates its replicas of them, and this
    /// waits (up to `topic_ready_wait`) until each new partition has an elected leader.
    ///
    /// A count not above the current one, or above the mode's limit ([`MAX_PARTITIONS_PER_TOPIC`]
    /// standalone, [`crate::cluster::meta::CLUSTER_PARTITIONS_PER_TOPIC_MAX`] in a cluster), is
    /// [`BrokerError::InvalidPartitions`]. `validate_only` checks and changes nothing.
    ///
    /// [`MAX_PARTITIONS_PER_TOPIC`]: super::MAX_PARTITIONS_PER_TOPIC
    pub async fn create_partitions(
        &self,
        name: String,
        partitions: u32,
        validate_only: bool,
    ) -> Result<u32, BrokerError> {
        self.refuse_internal(&name, "grown")?;
        if let ReplicaManager::Clustered(driver) = self.replica_manager() {
            return driver
                .create_partitions(&name, partitions, validate_only)
                .await;
        }
        let topic = self.broker.topic(&name)?;
        if validate_only {
            let current = u32::try_from(topic.partitions().len()).unwrap_or(u32::MAX);
            super::check_partition_growth(
                &name,
                current,
                partitions,
                super::MAX_PARTITIONS_PER_TOPIC,
            )?;
            return Ok(partitions);
        }
        let broker = Arc::clone(&self.broker);
        blocking(move || broker.add_partitions(&name, partitions))
            .await
            .map(|topic| u32::try_from(topic.partitions().len()).unwrap_or(u32::MAX))
    }

    /// Deletes a topic (see [`Broker::delete_topic`]): once this returns `Ok` the deletion and the
    /// name's fence floor are durable, the topic is no longer served (metadata, produce, fetch
    /// and leases answer UNKNOWN_TOPIC), its leases and committed offsets are forgotten. Its
    /// files are removed afterwards on the blocking pool, so deleting a big topic holds up
    /// neither the runtime nor the answer.
    pub async fn delete_topic(&self, name: String) -> Result<(), BrokerError> {
        self.refuse_internal(&name, "deleted")?;
        if let ReplicaManager::Clustered(driver) = self.replica_manager() {
            return driver.delete_topic(&name).await;
        }
        let topic = self.broker.topic(&name)?;
        let broker = Arc::clone(&self.broker);
        let deleted: DeletedTopic = blocking(move || broker.delete_topic(&name)).await?;
        self.leases.forget_topic(&deleted.name);
        self.metrics
            .forget_partitions(topic.open_partitions().map(|partition| partition.metrics()));
        tokio::task::spawn_blocking(move || deleted.remove_files());
        Ok(())
    }

    /// The named topics (all, sorted by name, when `names` is empty).
    pub fn metadata(&self, names: &[String]) -> Result<Vec<Arc<Topic>>, BrokerError> {
        if names.is_empty() {
            return Ok(self.broker.topics());
        }
        names.iter().map(|name| self.broker.topic(name)).collect()
    }

    /// This broker's high watermark of `topic`/`partition`, whether it leads it or not (for
    /// metadata; 0 for a partition that could not be opened).
    pub fn local_high_watermark(&self, topic: &str, partition: u32) -> u64 {
        self.broker
            .partition(topic, partition)
            .map_or(0, |target| target.high_watermark())
    }

    /// Answers a follower's `ReplicaFetch` (the leader's side of replication; a standalone
    /// broker has no replicas to serve).
    pub async fn serve_replica_fetch(&self, fetch: ReplicaFetch) -> Result<Response, BrokerError> {
        match self.replica_manager() {
            ReplicaManager::Clustered(driver) => Ok(driver.serve_replica_fetch(fetch).await),
            ReplicaManager::Standalone { .. } => Err(not_in_a_cluster("ReplicaFetch")),
        }
    }

    /// Answers a follower's `LeaderEpochEnd`: where each asked leader epoch ends in this
    /// leader's log.
    pub fn serve_epoch_end(
        &self,
        partitions: Vec<LeaderEpochQuery>,
    ) -> Result<Response, BrokerError> {
        match self.replica_manager() {
            ReplicaManager::Clustered(driver) => Ok(driver.serve_epoch_end(partitions)),
            ReplicaManager::Standalone { .. } => Err(not_in_a_cluster("LeaderEpochEnd")),
        }
    }

    /// Syncs every partition (graceful shutdown), on the blocking pool.
    pub async fn sync_all(&self) -> Result<(), BrokerError> {
        let broker = Arc::clone(&self.broker);
        blocking(move || broker.sync_all()).await
    }
}

/// How [`BrokerService::alter_topic_config`] computes a topic's new config from its current one
/// (refusing, with `BrokerError::InvalidConfig`, what cannot change). Called again if another
/// change came first (in a cluster).
pub type TopicConfigChangeFn =
    Arc<dyn Fn(&TopicConfig) -> Result<TopicConfig, BrokerError> + Send + Sync>;

/// The refusal of a replication API by a standalone broker.
fn not_in_a_cluster(api: &str) -> BrokerError {
    ClusterError::ClusterRequired(format!(
        "{api}: this broker is not part of a cluster (it was started without --etcd), so it has no replicas to serve"
    ))
    .into()
}

/// Runs blocking broker work on tokio's blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, BrokerError> + Send + 'static,
) -> Result<T, BrokerError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|join_error| {
            Err(BrokerError::Io {
                context: "broker task failed".into(),
                source: std::io::Error::other(join_error.to_string()),
            })
        })
}
