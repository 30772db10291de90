//! The broker service: what any listener can ask of the broker, as a small struct of parts
//! that the mode chose once, at assembly.
//!
//! A listener decodes a request, calls one part here and encodes what it returns; it decides
//! nothing. The parts, dependencies pointing down (Kafka's `BrokerServer` is the model):
//!
//! * [`ReplicaManager`]: who leads, what `acks` means, the commit wait (standalone or a
//!   cluster member).
//! * [`ReadPath`]: every read, through one leader rule and one long poll.
//! * [`ProducePath`]: every produce, through the connection's produce queue and the
//!   [`super::appender::Appender`].
//! * [`LeaseService`]: grants, renewals and releases, at the partition's leader.
//! * [`TopicAdmin`]: where topics are created, altered, grown and deleted ([`LocalTopics`] or
//!   [`ClusterTopics`]).
//! * [`GroupService`]: consumer groups over an [`OffsetStore`] ([`LocalOffsetStore`] or the
//!   replicated offsets topic).
//! * [`TransactionCoordinator`]: Kafka transactions, over the parts above.
//!
//! [`BrokerService::standalone`] and [`BrokerService::clustered`] are the only places that
//! know the mode: each builds the parts of its mode, in dependency order, and nothing after
//! asks again.

use std::sync::Arc;

use super::cluster::{ClusterConfig, ClusterDriver, ReplicaManager};
use super::consumer_groups::ConsumerGroups;
use super::coordinator::GroupCoordinator;
use super::group_service::{GroupService, LocalOffsetStore, OffsetStore};
use super::lease_service::LeaseService;
use super::maintenance::Maintenance;
use super::offsets_topic::{ReplicatedOffsetStore, ReplicatedOffsets};
use super::produce_path::ProducePath;
use super::producer_ids::ProducerIdSource;
use super::reads::ReadPath;
use super::shutdown::ShutdownSignal;
use super::topic_admin::{ClusterTopics, LocalTopics, TopicAdmin};
use super::transactions::{
    ClusterPartitions, LocalPartitions, TransactionCoordinator, TransactionParts,
    TransactionRegistry,
};
use super::{blocking, Broker, BrokerConfig, BrokerError};
use crate::clock::Clock;
use crate::cluster::meta::MetaStore;
use crate::domain::NodeId;
use crate::lease::{LeaseAuthority, LocalLeaseAuthority};
use crate::metrics::Metrics;

/// The broker's operations for every listener; one `Arc` shared by all connections.
#[derive(Debug)]
pub struct BrokerService {
    broker: Arc<Broker>,
    node_id: NodeId,
    replicas: ReplicaManager,
    reads: ReadPath,
    producing: ProducePath,
    leases: LeaseService,
    topics: Arc<dyn TopicAdmin>,
    groups: GroupService,
    transactions: Arc<TransactionCoordinator>,
    producer_ids: ProducerIdSource,
    /// Server-wide metrics (listeners); partitions count their own.
    metrics: Arc<Metrics>,
    shutdown: ShutdownSignal,
    /// On a cluster, the replicated offsets topic (tests and tools inspect it); `None`
    /// standalone. Nothing in the service asks for it.
    replicated_offsets: Option<Arc<ReplicatedOffsets>>,
}

/// The parts both modes build alike, around the mode's replica manager and topic admin.
struct CommonParts {
    replicas: ReplicaManager,
    reads: ReadPath,
    producing: ProducePath,
    leases: LeaseService,
    topics: Arc<dyn TopicAdmin>,
    groups: GroupService,
    shutdown: ShutdownSignal,
}

impl CommonParts {
    /// Reads, produces, leases and groups of `broker`, decided by `replicas`, with topics kept
    /// by `topics` and committed offsets by `store`.
    fn new(
        broker: &Arc<Broker>,
        config: &BrokerConfig,
        replicas: ReplicaManager,
        authority: Arc<dyn LeaseAuthority>,
        topics: Arc<dyn TopicAdmin>,
        groups: (Arc<GroupCoordinator>, Arc<dyn OffsetStore>),
    ) -> Self {
        let shutdown = ShutdownSignal::default();
        let reads = ReadPath::new(Arc::clone(broker), replicas.clone(), shutdown.clone());
        let producing = ProducePath::new(
            super::appender::Appender::new(Arc::clone(broker)),
            replicas.clone(),
            Arc::clone(&topics),
        );
        let leases = LeaseService::new(authority, reads.clone(), Arc::clone(&topics));
        let (coordinator, store) = groups;
        let groups = GroupService::new(
            coordinator,
            Arc::new(ConsumerGroups::new(config.coordinator.consumer.clone())),
            store,
            Arc::clone(&topics),
            *broker.group_offsets().config(),
        );
        Self {
            replicas,
            reads,
            producing,
            leases,
            topics,
            groups,
            shutdown,
        }
    }
}

impl CommonParts {
    /// What the transaction coordinator is given of these parts.
    fn transaction_parts(
        &self,
        broker: &Arc<Broker>,
        producer_ids: &ProducerIdSource,
    ) -> TransactionParts {
        TransactionParts {
            broker: Arc::clone(broker),
            producer_ids: producer_ids.clone(),
            groups: self.groups.clone(),
            reads: self.reads.clone(),
            leases: Arc::clone(self.leases.authority()),
        }
    }
}

impl BrokerService {
    /// The standalone broker over `broker`: leases from a local table expired by `clock`,
    /// topics and committed offsets in the data directory, and its transaction coordinator
    /// recovered (a restart's half-done transactions completed or leased again) before this
    /// returns, so before any client is served. Inside a tokio runtime (the coordinators start
    /// their timer tasks).
    pub async fn standalone(
        broker: Arc<Broker>,
        config: &BrokerConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Self>, BrokerError> {
        let node_id = config.node_id;
        let metrics = Arc::<Metrics>::default();
        let authority: Arc<dyn LeaseAuthority> =
            Arc::new(LocalLeaseAuthority::new(config.lease.clone(), clock));
        let topics = Arc::new(LocalTopics::new(
            Arc::clone(&broker),
            Arc::clone(&authority),
            Arc::clone(&metrics),
        ));
        let coordinator = GroupCoordinator::start(config.coordinator.clone());
        coordinator.store_in(
            Arc::clone(broker.group_memberships()) as _,
            broker.take_loaded_memberships(),
        );
        let store = Arc::new(LocalOffsetStore::new(Arc::clone(&broker), node_id));
        let parts = CommonParts::new(
            &broker,
            config,
            ReplicaManager::Standalone { node_id },
            authority,
            topics,
            (coordinator, store),
        );
        let producer_ids = ProducerIdSource::local(Arc::clone(&broker));
        let transaction_parts = parts.transaction_parts(&broker, &producer_ids);
        let partitions = LocalPartitions::new(
            parts.leases.clone(),
            parts.producing.clone(),
            parts.groups.clone(),
            Arc::clone(&broker),
        );
        let data = broker.data_dir().to_path_buf();
        let transactions = Arc::new(
            blocking(move || {
                TransactionCoordinator::open(&data, transaction_parts, partitions).map_err(
                    |source| BrokerError::Io {
                        context: "read the transaction states".into(),
                        source,
                    },
                )
            })
            .await?,
        );
        transactions.recover().await;
        transactions.start_timeouts();
        Ok(Arc::new(Self::assembled(
            broker,
            node_id,
            parts,
            transactions,
            producer_ids,
            metrics,
            None,
        )))
    }

    /// A member of the cluster kept in `store` over `broker`, and its cluster driver (not
    /// started: the caller starts it once the service is in place): the replica manager
    /// answers from the driver (who leads, `acks`, where topics are made), committed offsets,
    /// group membership and transaction states live in the replicated offsets topic, and
    /// producer ids carry the node id above
    /// [`PRODUCER_ID_LOCAL_BITS`](super::producer_ids::PRODUCER_ID_LOCAL_BITS) bits.
    pub async fn clustered(
        broker: Arc<Broker>,
        config: &BrokerConfig,
        clock: Arc<dyn Clock>,
        cluster: ClusterConfig,
        store: Arc<dyn MetaStore>,
    ) -> Result<(Arc<Self>, Arc<ClusterDriver>), BrokerError> {
        let node_id = config.node_id;
        if cluster.node_id != node_id {
            return Err(BrokerError::InvalidConfig(format!(
                "the cluster settings are node {} but this broker is node {node_id}: one node id names the broker everywhere",
                cluster.node_id,
            )));
        }
        let metrics = Arc::<Metrics>::default();
        let authority: Arc<dyn LeaseAuthority> = Arc::new(LocalLeaseAuthority::new(
            config.lease.clone(),
            Arc::clone(&clock),
        ));
        let driver = ClusterDriver::with_clock(
            cluster,
            store,
            Arc::clone(&broker),
            clock,
            Arc::clone(&authority),
            Arc::clone(&metrics),
        )?;
        let coordinator = GroupCoordinator::start(config.coordinator.clone());
        let offsets = Arc::new(ReplicatedOffsets::new(
            Arc::clone(&broker),
            Arc::clone(&driver),
            *broker.group_offsets().config(),
        ));
        let store = Arc::new(ReplicatedOffsetStore::new(
            Arc::clone(&offsets),
            Arc::clone(&coordinator),
        ));
        let parts = CommonParts::new(
            &broker,
            config,
            ReplicaManager::Clustered(Arc::clone(&driver)),
            authority,
            Arc::new(ClusterTopics::new(Arc::clone(&driver))),
            (Arc::clone(&coordinator), store),
        );
        let producer_ids = ProducerIdSource::cluster(Arc::clone(&broker), node_id);
        let transaction_parts = parts.transaction_parts(&broker, &producer_ids);
        let transactions = Arc::new(TransactionCoordinator::replicated(
            TransactionRegistry::replicated(Arc::clone(&offsets), coordinator),
            transaction_parts,
            Arc::new(ClusterPartitions::new(Arc::clone(&driver))),
        ));
        transactions.start_timeouts();
        let service = Self::assembled(
            broker,
            node_id,
            parts,
            transactions,
            producer_ids,
            metrics,
            Some(offsets),
        );
        Ok((Arc::new(service), driver))
    }

    fn assembled(
        broker: Arc<Broker>,
        node_id: NodeId,
        parts: CommonParts,
        transactions: Arc<TransactionCoordinator>,
        producer_ids: ProducerIdSource,
        metrics: Arc<Metrics>,
        replicated_offsets: Option<Arc<ReplicatedOffsets>>,
    ) -> Self {
        Self {
            broker,
            node_id,
            replicas: parts.replicas,
            reads: parts.reads,
            producing: parts.producing,
            leases: parts.leases,
            topics: parts.topics,
            groups: parts.groups,
            transactions,
            producer_ids,
            metrics,
            shutdown: parts.shutdown,
            replicated_offsets,
        }
    }

    /// This broker's node id.
    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// The replica manager: this broker's part in the cluster, which decides what every
    /// listener's requests mean here (see [`super::cluster`]). Listeners read it only where a
    /// reply shows the mode (Metadata, leader epochs).
    pub fn replica_manager(&self) -> &ReplicaManager {
        &self.replicas
    }

    /// Every read of a partition.
    pub fn reads(&self) -> &ReadPath {
        &self.reads
    }

    /// Every produce.
    pub fn producing(&self) -> &ProducePath {
        &self.producing
    }

    /// Grants, renewals and releases of leases.
    pub fn leases(&self) -> &LeaseService {
        &self.leases
    }

    /// Topic administration (create, alter, grow, delete).
    pub fn topics(&self) -> &dyn TopicAdmin {
        self.topics.as_ref()
    }

    /// Consumer groups: membership and committed offsets.
    pub fn groups(&self) -> &GroupService {
        &self.groups
    }

    /// The transaction coordinator (Kafka transactions and native atomic appends): every
    /// assembled broker runs one.
    pub fn transactions(&self) -> &Arc<TransactionCoordinator> {
        &self.transactions
    }

    /// The cluster's replicated offsets topic (committed offsets, group membership and
    /// transaction states); `None` standalone.
    pub fn replicated_offsets(&self) -> Option<&Arc<ReplicatedOffsets>> {
        self.replicated_offsets.as_ref()
    }

    /// The topics and partitions behind the service.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The server-wide metrics (what the metrics endpoint exposes besides each partition's).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// A new producer id and its first session (producer epoch 0), for idempotent appends.
    pub async fn init_producer_id(&self) -> Result<(i64, i16), BrokerError> {
        Ok((self.producer_ids.next().await?, 0))
    }

    /// Tells the service that the server is shutting down: every pending long poll (and every
    /// later one) answers at once with what it has, so a graceful shutdown does not wait for
    /// fetches' `max_wait`.
    pub fn begin_shutdown(&self) {
        self.shutdown.begin();
    }

    /// Completes once [`BrokerService::begin_shutdown`] was called (at once if it was).
    pub async fn shutting_down(&self) {
        self.shutdown.stopped().await;
    }

    /// Starts interval syncs and retention; they stop when the returned handle is stopped.
    pub fn start_maintenance(&self) -> Maintenance {
        Maintenance::start(Arc::clone(&self.broker))
    }

    /// Syncs every partition (graceful shutdown), on the blocking pool.
    pub async fn sync_all(&self) -> Result<(), BrokerError> {
        let broker = Arc::clone(&self.broker);
        blocking(move || broker.sync_all()).await
    }
}
