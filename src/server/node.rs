//! The one composition root: a broker assembled from its configuration, with its storage, lease
//! authority, replica manager (standalone or a member of a cluster), listeners, metrics endpoint
//! and maintenance, started and stopped as one.
//!
//! Why one function: `fencelog serve`, `fencelog::testing`'s servers and clusters, and the
//! in-process cluster tests each used to wire these parts by hand, and each wiring could differ
//! from the one that ships (a test cluster whose service never joined its driver, a server
//! whose Kafka listener reported another node id). Everything that runs a broker calls
//! [`Node::start`], so what is tested is what is served.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::warn;

use super::prometheus::{MetricsEndpoint, MetricsEndpointConfig};
#[cfg(feature = "kafka")]
use super::KafkaListener;
use super::ServerConfig;
use crate::broker::cluster::{ClusterConfig, ClusterDriver};
use crate::broker::{Broker, BrokerConfig, BrokerError, BrokerService};
use crate::clock::{Clock, SystemClock};
use crate::cluster::meta::MetaStore;
use crate::domain::ConfigError;

/// How a broker joins a cluster: its cluster settings and the metadata store (etcd, or the
/// in-memory store of tests and the simulation).
#[derive(Debug, Clone)]
pub struct ClusterMembership {
    /// Timers, limits and this broker's advertised address in the cluster. Its node id must be
    /// the broker's ([`BrokerConfig::node_id`]).
    pub config: ClusterConfig,
    /// Where the cluster's metadata lives.
    pub store: Arc<dyn MetaStore>,
}

/// Everything a broker is assembled from, apart from its sockets.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The data directory (created if missing; locked while the node runs).
    pub data_dir: PathBuf,
    /// Leases, groups and the node id.
    pub broker: BrokerConfig,
    /// The listeners' limits, TLS and authentication.
    pub server: ServerConfig,
    /// The lease clock, also the cluster driver's ([`SystemClock`] unless a test holds time
    /// still or jumps it).
    pub clock: Arc<dyn Clock>,
    /// `None`: standalone.
    pub cluster: Option<ClusterMembership>,
}

impl NodeConfig {
    /// A standalone broker on `data_dir` with every default.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            broker: BrokerConfig::default(),
            server: ServerConfig::default(),
            clock: Arc::new(SystemClock),
            cluster: None,
        }
    }
}

impl NodeConfig {
    /// Checks the broker's and the listeners' settings (the cluster's are checked by its
    /// driver, the Kafka listener's by the listener).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.broker.validate()?;
        self.server.validate()
    }
}

/// The sockets a node serves, bound by the caller (so `127.0.0.1:0` and address-in-use errors
/// are the caller's to report).
#[derive(Debug)]
pub struct Listeners {
    /// The native protocol's listener.
    pub native: TcpListener,
    /// Kafka's protocol, when asked for.
    #[cfg(feature = "kafka")]
    pub kafka: Option<KafkaListener>,
    /// `GET /metrics`, when asked for.
    pub metrics: Option<TcpListener>,
}

impl Listeners {
    /// The native listener alone.
    pub fn native(native: TcpListener) -> Self {
        Self {
            native,
            #[cfg(feature = "kafka")]
            kafka: None,
            metrics: None,
        }
    }
}

/// A running broker. Dropping it stops its listeners (as [`Node::crash`] without waiting).
#[derive(Debug)]
pub struct Node {
    service: Arc<BrokerService>,
    driver: Option<Arc<ClusterDriver>>,
    addr: SocketAddr,
    metrics: Option<MetricsEndpoint>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl Node {
    /// Opens the data directory, assembles the service (and, with `config.cluster`, joins the
    /// cluster and starts its driver), and starts serving every listener.
    pub async fn start(config: NodeConfig, listeners: Listeners) -> Result<Node, BrokerError> {
        config.validate()?;
        // Under --auth the console asks for a login and shows each user what its ACLs allow.
        let metrics_config = MetricsEndpointConfig {
            serve_api: true,
            login: config.server.security.clone(),
            tls: config.server.tls.clone(),
            ..MetricsEndpointConfig::default()
        };
        let directory = config.data_dir.clone();
        let broker = tokio::task::spawn_blocking(move || Broker::open(&directory))
            .await
            .map_err(|error| BrokerError::Io {
                context: "open the data directory".into(),
                source: std::io::Error::other(error.to_string()),
            })??;
        let broker = Arc::new(broker);
        // The mode is chosen here, once: each constructor builds its mode's parts.
        let (service, driver) = match config.cluster {
            None => (
                BrokerService::standalone(broker, &config.broker, config.clock).await?,
                None,
            ),
            Some(membership) => {
                #[cfg(feature = "kafka")]
                let membership = {
                    let mut membership = membership;
                    if let Some(kafka) = &listeners.kafka {
                        membership.config.kafka_addr = Some(kafka.config.advertised_address());
                    }
                    membership
                };
                let (service, driver) = BrokerService::clustered(
                    broker,
                    &config.broker,
                    config.clock,
                    membership.config,
                    membership.store,
                )
                .await?;
                driver.start();
                (service, Some(driver))
            }
        };
        let addr = listeners
            .native
            .local_addr()
            .map_err(|source| BrokerError::Io {
                context: "read the listener's address".into(),
                source,
            })?;
        let metrics = match listeners.metrics {
            Some(listener) => Some(
                MetricsEndpoint::start(listener, &service, metrics_config).map_err(|error| {
                    BrokerError::Io {
                        context: "start the metrics endpoint".into(),
                        source: std::io::Error::other(error),
                    }
                })?,
            ),
            None => None,
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let stopped = async {
            let _ = stopped.await;
        };
        #[cfg(feature = "kafka")]
        let served = super::run_with_kafka(
            listeners.native,
            listeners.kafka,
            Arc::clone(&service),
            config.server,
            stopped,
        );
        #[cfg(not(feature = "kafka"))]
        let served = super::run(
            listeners.native,
            Arc::clone(&service),
            config.server,
            stopped,
        );
        let task = tokio::spawn(served);
        Ok(Node {
            service,
            driver,
            addr,
            metrics,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The broker service (what every listener calls).
    pub fn service(&self) -> &Arc<BrokerService> {
        &self.service
    }

    /// The cluster driver, when this node is a member of a cluster.
    pub fn driver(&self) -> Option<&Arc<ClusterDriver>> {
        self.driver.as_ref()
    }

    /// Where the native listener is bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the metrics endpoint is bound, if it runs.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(MetricsEndpoint::addr)
    }

    /// Serves until `signal` completes, then shuts down gracefully; or returns at once with the
    /// server's error if it stops by itself first (a listener that cannot start), or with the
    /// cluster's refusal when another live broker holds this node id.
    pub async fn serve_until(
        mut self,
        signal: impl std::future::Future<Output = ()>,
    ) -> std::io::Result<()> {
        let mut task = self.task.take().expect("a started node has its task");
        let driver = self.driver.clone();
        let refused = async {
            match driver {
                Some(driver) => driver.refused().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ended = &mut task => {
                self.task = None;
                self.leave().await;
                return joined(ended);
            }
            error = refused => {
                self.task = Some(task);
                // Nothing of this process was registered: stop serving, and say why.
                self.driver = None;
                self.stop_serving().await?;
                return Err(std::io::Error::other(error.to_string()));
            }
            () = signal => {}
        }
        self.task = Some(task);
        self.shutdown().await
    }

    /// Stops gracefully: leaders step down and the registration is revoked (so the others take
    /// over at once), then connections drain and every partition is synced.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        self.leave().await;
        self.stop_serving().await
    }

    /// Stops as a crash looks to the rest of the cluster: nothing is revoked, the registration
    /// lapses after its TTL. The listeners close.
    pub async fn crash(mut self) {
        if let Some(driver) = self.driver.take() {
            driver.abandon();
        }
        if let Err(error) = self.stop_serving().await {
            warn!(%error, "the server failed while stopping");
        }
    }

    async fn leave(&mut self) {
        if let Some(driver) = self.driver.take() {
            driver.shutdown().await;
        }
    }

    async fn stop_serving(&mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let served = match self.task.take() {
            Some(task) => joined(task.await),
            None => Ok(()),
        };
        if let Some(metrics) = self.metrics.take() {
            metrics.stop().await;
        }
        served
    }
}

fn joined(ended: Result<std::io::Result<()>, tokio::task::JoinError>) -> std::io::Result<()> {
    ended.unwrap_or_else(|error| Err(std::io::Error::other(error.to_string())))
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(driver) = self.driver.take() {
            driver.abandon();
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults pass, and a setting out of range is refused with its name, value and range.
    #[test]
    fn a_node_config_names_the_setting_out_of_range() {
        let mut config = NodeConfig::new("unused");
        config.validate().unwrap();
        config.server.max_frame_bytes = 0;
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "max_frame_bytes 0 is out of range 1..=4294967295"
        );
        let mut config = NodeConfig::new("unused");
        config.broker.lease.min_ttl_ms = config.broker.lease.max_ttl_ms + 1;
        assert_eq!(config.validate().unwrap_err().field(), "min_ttl_ms");
    }
}
