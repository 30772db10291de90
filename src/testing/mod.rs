//! An in-process fencelog server, and a three-broker cluster, for your own integration tests.
//!
//! Both start their brokers through the one composition root that `fencelog serve` uses
//! ([`Node::start`]), so what a test exercises is what is served.
//!
//! [`TestServer::builder`] says how (limits, TLS, a Kafka listener, a manual lease clock, a data
//! directory to keep, a node id); [`TestServer::start`] is the builder's defaults. A server opens
//! a broker on a fresh temporary directory (or the one [`TestServerBuilder::data_dir`] names),
//! listens on an ephemeral loopback port and serves until the `TestServer` is dropped (or
//! [`TestServer::shutdown`] is awaited). [`TestServer::restart`] stops it and starts a new server
//! on the *same* directory, so tests can check what survives a restart (topics, data, epochs).
//!
//! Leases expire by the server's clock. [`TestServerBuilder::manual_clock`] gives the server a
//! [`ManualClock`] that only [`TestServer::advance`] moves, so a test can let a holder's lease
//! lapse without sleeping past its TTL.
//!
//! [`TestServerBuilder::tls`] serves TLS with the certificate it is given.
//! [`TestServer::serve_metrics`] adds a Prometheus endpoint on another ephemeral port.
//!
//! `TestServerBuilder::kafka` (feature `kafka`) also serves Kafka's wire protocol on a second
//! ephemeral port ([`TestServer::kafka_addr`]), advertised as itself, so a Kafka client can be
//! pointed at it.
//!
//! [`TestCluster`] runs three brokers over the in-memory metadata store (etcd's semantics without
//! an etcd process), for failover tests: crash one, and the others take over.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let server = fencelog::testing::TestServer::builder()
//!     .manual_clock()
//!     .start()
//!     .await?;
//! let addr = server.addr(); // connect a client here
//! # let _ = addr;
//! # Ok(()) }
//! ```

mod cluster;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::TcpListener;

pub use cluster::{TestCluster, TestClusterNode};

use crate::broker::{Broker, BrokerConfig, BrokerError, BrokerService};
use crate::clock::{Clock, ManualClock, SystemClock};
use crate::domain::NodeId;
use crate::server::prometheus::{MetricsEndpoint, MetricsEndpointConfig};
#[cfg(feature = "kafka")]
use crate::server::{KafkaConfig, KafkaListener};
use crate::server::{Listeners, Node, NodeConfig, ServerConfig, ServerTls};

/// A Kafka listener's settings (feature `kafka`); without it a server has none to keep.
#[cfg(feature = "kafka")]
type KafkaSettings = KafkaConfig;
#[cfg(not(feature = "kafka"))]
type KafkaSettings = std::convert::Infallible;

/// How a [`TestServer`] starts. Every setting has the default `fencelog serve` has, but the
/// listeners, which bind ephemeral loopback ports.
#[derive(Debug, Clone, Default)]
pub struct TestServerBuilder {
    config: ServerConfig,
    broker_config: BrokerConfig,
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    kafka: Option<KafkaSettings>,
    manual_clock: bool,
    data_dir: Option<PathBuf>,
    addr: Option<SocketAddr>,
    /// Where a restarted server binds its Kafka listener again (`None`: an ephemeral port).
    kafka_addr: Option<SocketAddr>,
}

impl TestServerBuilder {
    /// The listeners' limits, TLS and authentication.
    pub fn server_config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }

    /// Leases, groups and the node id.
    pub fn broker_config(mut self, broker_config: BrokerConfig) -> Self {
        self.broker_config = broker_config;
        self
    }

    /// This broker's node id (`serve --node-id`).
    pub fn node_id(mut self, node_id: NodeId) -> Self {
        self.broker_config.node_id = node_id;
        self
    }

    /// TLS on the native listener (and the Kafka one, when there is one).
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.config.tls = Some(tls);
        self
    }

    /// Also serve Kafka's protocol on an ephemeral loopback port ([`TestServer::kafka_addr`]).
    #[cfg(feature = "kafka")]
    pub fn kafka(self) -> Self {
        self.kafka_config(KafkaConfig::advertising(SocketAddr::from((
            [127, 0, 0, 1],
            0,
        ))))
    }

    /// Also serve Kafka's protocol with `kafka`'s settings; its advertised host and port are
    /// replaced by the ephemeral loopback address the listener gets.
    #[cfg(feature = "kafka")]
    pub fn kafka_config(mut self, kafka: KafkaConfig) -> Self {
        self.kafka = Some(kafka);
        self
    }

    /// Leases expire by a [`ManualClock`]: time stands still for them until
    /// [`TestServer::advance`] moves it.
    pub fn manual_clock(mut self) -> Self {
        self.manual_clock = true;
        self
    }

    /// Serve `data_dir` (kept after the server stops) instead of a new temporary directory.
    pub fn data_dir(mut self, data_dir: &Path) -> Self {
        self.data_dir = Some(data_dir.to_path_buf());
        self
    }

    /// Listen on `addr` instead of an ephemeral loopback port.
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = Some(addr);
        self
    }

    /// Starts the server.
    pub async fn start(self) -> Result<TestServer, BrokerError> {
        let (data_dir, temporary) = match &self.data_dir {
            Some(data_dir) => (data_dir.clone(), None),
            None => {
                let temporary = tempfile::tempdir().map_err(|source| BrokerError::Io {
                    context: "create temporary directory".into(),
                    source,
                })?;
                (temporary.path().to_path_buf(), Some(temporary))
            }
        };
        let manual_clock = self.manual_clock.then(|| Arc::new(ManualClock::new()));
        let mut server = TestServer::start_on(data_dir, self, manual_clock).await?;
        server._temporary = temporary;
        Ok(server)
    }
}

/// A running in-process server on a temporary directory.
#[derive(Debug)]
pub struct TestServer {
    node: Option<Node>,
    addr: SocketAddr,
    service: Arc<BrokerService>,
    manual_clock: Option<Arc<ManualClock>>,
    /// What it was started with, for [`TestServer::restart`].
    settings: TestServerBuilder,
    data_dir: PathBuf,
    /// The Kafka listener's settings (advertised address replaced by the bound one) and address.
    kafka: Option<(KafkaSettings, SocketAddr)>,
    _temporary: Option<tempfile::TempDir>,
}

impl TestServer {
    /// How to start a server: limits, TLS, Kafka, clock, directory, node id.
    pub fn builder() -> TestServerBuilder {
        TestServerBuilder::default()
    }

    /// Starts a server with default limits on a new temporary directory.
    pub async fn start() -> Result<Self, BrokerError> {
        Self::builder().start().await
    }

    /// Moves the lease clock forward by `by` (a server started with a manual clock); leases
    /// whose TTL has passed are then expired.
    ///
    /// # Panics
    ///
    /// If the server runs on the system clock.
    pub fn advance(&self, by: std::time::Duration) {
        self.manual_clock
            .as_ref()
            .expect("advance needs a server started with a manual clock")
            .advance(by);
    }

    async fn start_on(
        data_dir: PathBuf,
        settings: TestServerBuilder,
        manual_clock: Option<Arc<ManualClock>>,
    ) -> Result<Self, BrokerError> {
        let clock: Arc<dyn Clock> = match &manual_clock {
            Some(clock) => Arc::clone(clock) as Arc<dyn Clock>,
            None => Arc::new(SystemClock),
        };
        let bind = settings
            .addr
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let listener = bind_listener(bind).await?;
        let addr = local_address(&listener)?;
        #[cfg_attr(not(feature = "kafka"), allow(unused_mut))]
        let mut listeners = Listeners::native(listener);
        #[cfg_attr(not(feature = "kafka"), allow(unused_mut))]
        let mut kafka: Option<(KafkaSettings, SocketAddr)> = None;
        #[cfg(feature = "kafka")]
        if let Some(mut kafka_config) = settings.kafka.clone() {
            // A restart keeps the Kafka port it had.
            let bind = settings
                .kafka_addr
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
            let listener = bind_listener(bind).await?;
            let bound = local_address(&listener)?;
            kafka_config.advertised_host = bound.ip().to_string();
            kafka_config.advertised_port = bound.port();
            listeners.kafka = Some(KafkaListener {
                listener,
                config: kafka_config.clone(),
            });
            kafka = Some((kafka_config, bound));
        }
        let config = NodeConfig {
            data_dir: data_dir.clone(),
            broker: settings.broker_config.clone(),
            server: settings.config.clone(),
            clock,
            cluster: None,
        };
        let node = Node::start(config, listeners).await?;
        Ok(Self {
            addr,
            service: Arc::clone(node.service()),
            node: Some(node),
            manual_clock,
            settings,
            data_dir,
            kafka,
            _temporary: None,
        })
    }

    /// The address Kafka clients connect to (and the one Metadata advertises).
    ///
    /// # Panics
    ///
    /// If the server was not started with a Kafka listener.
    #[cfg(feature = "kafka")]
    pub fn kafka_addr(&self) -> SocketAddr {
        self.kafka
            .as_ref()
            .map(|(_, addr)| *addr)
            .expect("kafka_addr needs a server started with a Kafka listener")
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The broker behind the server (to inspect partitions directly).
    pub fn broker(&self) -> &Arc<Broker> {
        self.service.broker()
    }

    /// The broker service behind the server.
    pub fn service(&self) -> &Arc<BrokerService> {
        &self.service
    }

    /// Starts a Prometheus endpoint for this server on an ephemeral loopback port
    /// ([`MetricsEndpoint::addr`]`/metrics`); it stops when the returned handle is dropped.
    pub async fn serve_metrics(&self) -> Result<MetricsEndpoint, BrokerError> {
        let listener = bind_listener(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        // The same TLS as the server's other listeners, as `serve` gives it.
        let config = MetricsEndpointConfig {
            tls: self.settings.config.tls.clone(),
            ..MetricsEndpointConfig::default()
        };
        MetricsEndpoint::start(listener, &self.service, config).map_err(|error| BrokerError::Io {
            context: "start the metrics endpoint".into(),
            source: std::io::Error::other(error),
        })
    }

    /// Stops the server gracefully: connections drain, partitions are synced.
    pub async fn shutdown(mut self) {
        self.stop_inner().await;
    }

    async fn stop_inner(&mut self) {
        if let Some(node) = self.node.take() {
            let _ = node.shutdown().await;
        }
    }

    /// Stops the server and starts a new one on the same directory and ports.
    pub async fn restart(mut self) -> Result<Self, BrokerError> {
        self.stop_inner().await;
        let temporary = self._temporary.take();
        let mut settings = self.settings.clone();
        settings.addr = Some(self.addr);
        settings.kafka_addr = self.kafka.as_ref().map(|(_, bound)| *bound);
        let data_dir = self.data_dir.clone();
        let clock = self.manual_clock.clone();
        // Drop our broker handle so the data directory lock is released before reopening.
        drop(self);
        let mut restarted = Self::start_on(data_dir, settings, clock).await?;
        restarted._temporary = temporary;
        Ok(restarted)
    }
}

pub(crate) async fn bind_listener(bind: SocketAddr) -> Result<TcpListener, BrokerError> {
    TcpListener::bind(bind)
        .await
        .map_err(|source| BrokerError::Io {
            context: format!("bind {bind}"),
            source,
        })
}

pub(crate) fn local_address(listener: &TcpListener) -> Result<SocketAddr, BrokerError> {
    listener.local_addr().map_err(|source| BrokerError::Io {
        context: "read local address".into(),
        source,
    })
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let Some(node) = self.node.take() else {
            return;
        };
        // The temporary directory goes once the server has stopped (or, at the latest, when
        // the runtime shuts down): removed at once, it raced the server's own tasks, which could
        // write into it again, and left small directories in the system's temp dir behind.
        let temporary = self._temporary.take();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let _ = node.shutdown().await;
                    drop(temporary);
                });
            }
            Err(_) => drop(node),
        }
    }
}
