//! A cluster of brokers in one process, coordinated through the in-memory metadata store
//! (etcd's transaction and watch semantics without an etcd process), for failover tests.
//!
//! Every broker is a [`Node`] started by the same composition root as `fencelog serve --etcd`,
//! on its own temporary directory and ephemeral loopback port. The timers are short so that a
//! crash is taken over within seconds ([`TEST_REGISTRATION_TTL`]), and brokers with odd ids
//! pipeline their followers' fetches while even ones do not, so both ways run in every scenario.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{bind_listener, local_address};
use crate::broker::cluster::{ClusterConfig, ClusterDriver};
use crate::broker::{BrokerError, BrokerService};
use crate::cluster::meta::{MemoryMetaStore, MetaStore};
use crate::domain::NodeId;
use crate::server::{ClusterMembership, Listeners, Node, NodeConfig};

/// Registration TTL of a test cluster's brokers: a crashed broker's partitions move this long
/// after it stopped renewing.
pub const TEST_REGISTRATION_TTL: Duration = Duration::from_secs(2);
/// How long [`TestCluster::start`] waits for every broker to register.
pub const TEST_CLUSTER_START_WAIT: Duration = Duration::from_secs(20);

/// One broker of a [`TestCluster`].
#[derive(Debug)]
pub struct TestClusterNode {
    id: NodeId,
    addr: SocketAddr,
    service: Arc<BrokerService>,
    node: Option<Node>,
    _dir: tempfile::TempDir,
}

impl TestClusterNode {
    /// Its node id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Where clients reach its native listener.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its broker service (to inspect its local replicas).
    pub fn service(&self) -> &Arc<BrokerService> {
        &self.service
    }

    /// Its cluster driver (`None` once it crashed or stopped).
    pub fn driver(&self) -> Option<&Arc<ClusterDriver>> {
        self.node.as_ref().and_then(Node::driver)
    }

    /// Whether it still runs.
    pub fn is_running(&self) -> bool {
        self.node.is_some()
    }

    /// This broker's local log end of `topic`/`partition` (0 when it has no such replica).
    pub fn log_end(&self, topic: &str, partition: u32) -> u64 {
        self.service
            .broker()
            .partition(topic, partition)
            .map_or(0, |partition| partition.log_end_offset())
    }

    /// Stops it as a crash looks to the others: nothing is revoked, its registration lapses
    /// after its TTL.
    pub async fn crash(&mut self) {
        if let Some(node) = self.node.take() {
            node.crash().await;
        }
    }

    /// Stops it gracefully: it steps down and revokes its registration first.
    pub async fn shutdown(&mut self) {
        if let Some(node) = self.node.take() {
            let _ = node.shutdown().await;
        }
    }
}

/// Brokers over one in-memory metadata store.
#[derive(Debug)]
pub struct TestCluster {
    store: Arc<dyn MetaStore>,
    nodes: Vec<TestClusterNode>,
}

impl TestCluster {
    /// Starts `size` brokers (node ids 1 to `size`) with the test timers, and waits until every
    /// one is registered.
    pub async fn start(size: u32) -> Result<Self, BrokerError> {
        Self::start_with(size, |_, _| {}).await
    }

    /// [`TestCluster::start`], with each broker's cluster settings changed by `configure`
    /// (given its node id) before it starts.
    pub async fn start_with(
        size: u32,
        configure: impl Fn(NodeId, &mut ClusterConfig),
    ) -> Result<Self, BrokerError> {
        let store: Arc<dyn MetaStore> = Arc::new(MemoryMetaStore::new());
        let mut nodes = Vec::new();
        for id in 1..=size {
            nodes.push(start_node(id, &store, &configure).await?);
        }
        let cluster = Self { store, nodes };
        cluster.wait_registered(size as usize).await?;
        Ok(cluster)
    }

    /// The metadata store.
    pub fn store(&self) -> &Arc<dyn MetaStore> {
        &self.store
    }

    /// Every broker, in node id order (crashed ones included).
    pub fn nodes(&self) -> &[TestClusterNode] {
        &self.nodes
    }

    /// Every broker, to crash or stop some.
    pub fn nodes_mut(&mut self) -> &mut [TestClusterNode] {
        &mut self.nodes
    }

    /// The broker with node id `id`.
    ///
    /// # Panics
    ///
    /// If there is none.
    pub fn node(&mut self, id: NodeId) -> &mut TestClusterNode {
        self.nodes
            .iter_mut()
            .find(|node| node.id == id)
            .expect("no broker with that node id")
    }

    /// The native addresses of the brokers still running (a client's bootstrap list).
    pub fn addrs(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|node| node.is_running())
            .map(|node| node.addr.to_string())
            .collect()
    }

    /// A client of the running brokers (their addresses as its bootstrap list), with a request
    /// timeout of 10 s: long enough for a leader election in the test timers.
    pub async fn client(&self) -> Result<crate::client::Client, crate::client::ClientError> {
        crate::client::Client::builder()
            .addrs(self.addrs())
            .request_timeout(Duration::from_secs(10))
            .connect()
            .await
    }

    /// Starts the crashed or stopped broker `id` again on its data directory (a new port and
    /// incarnation, as a restarted process has), with the test timers. Its old process's
    /// last tasks may still hold the directory's lock for a moment; it waits for them (up to
    /// [`TEST_CLUSTER_START_WAIT`]).
    ///
    /// # Panics
    ///
    /// If there is no broker `id`, or it still runs.
    pub async fn restart(&mut self, id: NodeId) -> Result<(), BrokerError> {
        let index = self
            .nodes
            .iter()
            .position(|node| node.id == id)
            .expect("no broker with that node id");
        assert!(!self.nodes[index].is_running(), "broker {id} still runs");
        let TestClusterNode {
            _dir: mut dir,
            service,
            ..
        } = self.nodes.remove(index);
        drop(service);
        let deadline = Instant::now() + TEST_CLUSTER_START_WAIT;
        loop {
            match start_node_in(id, &self.store, &|_, _| {}, dir).await {
                Ok(node) => {
                    self.nodes.insert(index, node);
                    return Ok(());
                }
                Err((BrokerError::Locked(_), back)) if Instant::now() < deadline => {
                    dir = back;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err((error, _)) => return Err(error),
            }
        }
    }

    async fn wait_registered(&self, count: usize) -> Result<(), BrokerError> {
        let deadline = Instant::now() + TEST_CLUSTER_START_WAIT;
        loop {
            if self
                .store
                .live_brokers()
                .await
                .is_ok_and(|brokers| brokers.len() == count)
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(BrokerError::InvalidConfig(format!(
                    "the test cluster's {count} brokers did not all register within {TEST_CLUSTER_START_WAIT:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn start_node(
    id: NodeId,
    store: &Arc<dyn MetaStore>,
    configure: &impl Fn(NodeId, &mut ClusterConfig),
) -> Result<TestClusterNode, BrokerError> {
    let dir = tempfile::tempdir().map_err(|source| BrokerError::Io {
        context: "create temporary directory".into(),
        source,
    })?;
    start_node_in(id, store, configure, dir)
        .await
        .map_err(|(error, _)| error)
}

/// Starts broker `id` on `dir`; on failure gives the directory back (to try again).
async fn start_node_in(
    id: NodeId,
    store: &Arc<dyn MetaStore>,
    configure: &impl Fn(NodeId, &mut ClusterConfig),
    dir: tempfile::TempDir,
) -> Result<TestClusterNode, (BrokerError, tempfile::TempDir)> {
    match start_node_on(id, store, configure, dir.path()).await {
        Ok((addr, service, node)) => Ok(TestClusterNode {
            id,
            addr,
            service,
            node: Some(node),
            _dir: dir,
        }),
        Err(error) => Err((error, dir)),
    }
}

async fn start_node_on(
    id: NodeId,
    store: &Arc<dyn MetaStore>,
    configure: &impl Fn(NodeId, &mut ClusterConfig),
    dir: &std::path::Path,
) -> Result<(SocketAddr, Arc<BrokerService>, Node), BrokerError> {
    let listener = bind_listener(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = local_address(&listener)?;
    let mut cluster = ClusterConfig::new(id, addr.to_string());
    cluster.registration_ttl = TEST_REGISTRATION_TTL;
    cluster.replication.replica_lag_max_ms = 1_000;
    cluster.replication.election_backoff_ms = 200;
    cluster.replication.acks_all_timeout_ms = 5_000;
    cluster.replication.pipelined_fetches = id % 2 == 1;
    configure(id, &mut cluster);
    let mut config = NodeConfig::new(dir);
    config.broker.node_id = id;
    config.cluster = Some(ClusterMembership {
        config: cluster,
        store: Arc::clone(store),
    });
    let node = Node::start(config, Listeners::native(listener)).await?;
    Ok((addr, Arc::clone(node.service()), node))
}
