//! An in-process fencelog server for your own integration tests.
//!
//! [`TestServer::start`] opens a broker on a fresh temporary directory, listens on an ephemeral
//! loopback port and serves until the `TestServer` is dropped (or [`TestServer::shutdown`] is
//! awaited). [`TestServer::restart`] stops it and starts a new server on the *same* directory, so
//! tests can check what survives a restart (topics, data, epochs).
//!
//! Leases expire by the server's clock. [`TestServer::start_with_manual_clock`] gives the server
//! a [`ManualClock`] that only [`TestServer::advance`] moves, so a test can let a holder's lease
//! lapse without sleeping past its TTL.
//!
//! [`TestServer::start_with_tls`] serves TLS with the certificate it is given.
//! [`TestServer::serve_metrics`] adds a Prometheus endpoint on another ephemeral port.
//!
//! [`TestServer::start_with_kafka`] also serves Kafka's wire protocol on a second ephemeral
//! port ([`TestServer::kafka_addr`]), advertised as itself, so a Kafka client can be pointed at
//! it.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let server = fencelog::testing::TestServer::start().await?;
//! let addr = server.addr(); // connect a client here
//! # let _ = addr;
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::broker::{Broker, BrokerConfig, BrokerError, BrokerService};
use crate::clock::{Clock, ManualClock, SystemClock};
use crate::server::prometheus::{MetricsEndpoint, MetricsEndpointConfig};
use crate::server::{self, ServerConfig, ServerTls};
#[cfg(feature = "kafka")]
use crate::server::{KafkaConfig, KafkaListener};

/// A Kafka listener's settings (feature `kafka`); without it a server has none to keep.
#[cfg(feature = "kafka")]
type KafkaSettings = KafkaConfig;
#[cfg(not(feature = "kafka"))]
type KafkaSettings = std::convert::Infallible;

/// A running in-process server on a temporary directory.
#[derive(Debug)]
pub struct TestServer {
    addr: SocketAddr,
    service: Arc<BrokerService>,
    manual_clock: Option<Arc<ManualClock>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    config: ServerConfig,
    broker_config: BrokerConfig,
    data_dir: PathBuf,
    /// The Kafka listener's settings (advertised address replaced by the bound one) and address.
    kafka: Option<(KafkaSettings, SocketAddr)>,
    _temporary: Option<tempfile::TempDir>,
}

impl TestServer {
    /// Starts a server with default limits on a new temporary directory.
    pub async fn start() -> Result<Self, BrokerError> {
        Self::start_with(ServerConfig::default(), BrokerConfig::default()).await
    }

    /// Starts a server with the given limits on a new temporary directory.
    pub async fn start_with(
        config: ServerConfig,
        broker_config: BrokerConfig,
    ) -> Result<Self, BrokerError> {
        Self::start_temporary(config, broker_config, None, None).await
    }

    /// Starts a server with default limits whose listener serves TLS with `tls` (for a Kafka
    /// listener over TLS as well, give [`ServerConfig::tls`] to
    /// [`TestServer::start_with_kafka_config`]).
    pub async fn start_with_tls(tls: ServerTls) -> Result<Self, BrokerError> {
        let config = ServerConfig {
            tls: Some(tls),
            ..ServerConfig::default()
        };
        Self::start_with(config, BrokerConfig::default()).await
    }

    /// Starts a server with default limits that also serves Kafka's protocol on an ephemeral
    /// loopback port ([`TestServer::kafka_addr`]).
    #[cfg(feature = "kafka")]
    pub async fn start_with_kafka() -> Result<Self, BrokerError> {
        let kafka = KafkaConfig::advertising(SocketAddr::from(([127, 0, 0, 1], 0)));
        Self::start_with_kafka_config(ServerConfig::default(), BrokerConfig::default(), kafka).await
    }

    /// Starts a server with these limits that also serves Kafka's protocol with `kafka`'s
    /// settings; its advertised host and port are replaced by the ephemeral loopback address the
    /// listener gets.
    #[cfg(feature = "kafka")]
    pub async fn start_with_kafka_config(
        config: ServerConfig,
        broker_config: BrokerConfig,
        kafka: KafkaConfig,
    ) -> Result<Self, BrokerError> {
        let any_port = SocketAddr::from(([127, 0, 0, 1], 0));
        Self::start_temporary(config, broker_config, None, Some((kafka, any_port))).await
    }

    /// Starts a server with default limits on a new temporary directory whose leases expire by a
    /// [`ManualClock`]: time stands still for leases until [`TestServer::advance`] moves it.
    pub async fn start_with_manual_clock() -> Result<Self, BrokerError> {
        let clock = Arc::new(ManualClock::new());
        Self::start_temporary(
            ServerConfig::default(),
            BrokerConfig::default(),
            Some(clock),
            None,
        )
        .await
    }

    async fn start_temporary(
        config: ServerConfig,
        broker_config: BrokerConfig,
        manual_clock: Option<Arc<ManualClock>>,
        kafka: Option<(KafkaSettings, SocketAddr)>,
    ) -> Result<Self, BrokerError> {
        let temporary = tempfile::tempdir().map_err(|source| BrokerError::Io {
            context: "create temporary directory".into(),
            source,
        })?;
        let data_dir = temporary.path().to_path_buf();
        let mut server =
            Self::start_on(&data_dir, config, broker_config, None, manual_clock, kafka).await?;
        server._temporary = Some(temporary);
        Ok(server)
    }

    /// Moves the lease clock forward by `by` (a server started with
    /// [`TestServer::start_with_manual_clock`]); leases whose TTL has passed are then expired.
    ///
    /// # Panics
    ///
    /// If the server runs on the system clock.
    pub fn advance(&self, by: std::time::Duration) {
        self.manual_clock
            .as_ref()
            .expect("advance needs a server from TestServer::start_with_manual_clock")
            .advance(by);
    }

    /// Starts a server on an existing data directory (kept after the server stops).
    pub async fn start_in(
        data_dir: &Path,
        config: ServerConfig,
        broker_config: BrokerConfig,
        addr: Option<SocketAddr>,
    ) -> Result<Self, BrokerError> {
        Self::start_on(data_dir, config, broker_config, addr, None, None).await
    }

    async fn start_on(
        data_dir: &Path,
        config: ServerConfig,
        broker_config: BrokerConfig,
        addr: Option<SocketAddr>,
        manual_clock: Option<Arc<ManualClock>>,
        kafka: Option<(KafkaSettings, SocketAddr)>,
    ) -> Result<Self, BrokerError> {
        let directory = data_dir.to_path_buf();
        let broker = tokio::task::spawn_blocking(move || Broker::open(&directory))
            .await
            .expect("broker open task panicked")?;
        let clock: Arc<dyn Clock> = match &manual_clock {
            Some(clock) => Arc::clone(clock) as Arc<dyn Clock>,
            None => Arc::new(SystemClock),
        };
        let service = Arc::new(
            BrokerService::with_clock(Arc::new(broker), broker_config.lease.clone(), clock)
                .with_coordinator_config(broker_config.coordinator.clone())
                .with_node_id(broker_config.node_id),
        );
        let bind = addr.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let listener = bind_listener(bind).await?;
        let addr = local_address(&listener)?;
        #[cfg(feature = "kafka")]
        let (kafka_listener, kafka) = match kafka {
            None => (None, None),
            Some((mut kafka_config, bind)) => {
                let listener = bind_listener(bind).await?;
                let bound = local_address(&listener)?;
                kafka_config.advertised_host = bound.ip().to_string();
                kafka_config.advertised_port = bound.port();
                let kafka_listener = KafkaListener {
                    listener,
                    config: kafka_config.clone(),
                };
                (Some(kafka_listener), Some((kafka_config, bound)))
            }
        };
        let (stop, stopped) = oneshot::channel();
        #[cfg(not(feature = "kafka"))]
        let kafka: Option<(KafkaSettings, SocketAddr)> = kafka.and(None);
        #[cfg(feature = "kafka")]
        let task = tokio::spawn(server::run_with_kafka(
            listener,
            kafka_listener,
            Arc::clone(&service),
            config.clone(),
            async {
                let _ = stopped.await;
            },
        ));
        #[cfg(not(feature = "kafka"))]
        let task = tokio::spawn(server::run(
            listener,
            Arc::clone(&service),
            config.clone(),
            async {
                let _ = stopped.await;
            },
        ));
        Ok(Self {
            addr,
            service,
            manual_clock,
            stop: Some(stop),
            task: Some(task),
            config,
            broker_config,
            data_dir: data_dir.to_path_buf(),
            kafka,
            _temporary: None,
        })
    }

    /// The address Kafka clients connect to (and the one Metadata advertises).
    ///
    /// # Panics
    ///
    /// If the server was not started with a Kafka listener
    /// ([`TestServer::start_with_kafka`]).
    #[cfg(feature = "kafka")]
    pub fn kafka_addr(&self) -> SocketAddr {
        self.kafka
            .as_ref()
            .map(|(_, addr)| *addr)
            .expect("kafka_addr needs a server from TestServer::start_with_kafka")
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
        MetricsEndpoint::start(listener, &self.service, MetricsEndpointConfig::default()).map_err(
            |error| BrokerError::Io {
                context: "start the metrics endpoint".into(),
                source: std::io::Error::other(error),
            },
        )
    }

    /// Stops the server gracefully: connections drain, partitions are synced.
    pub async fn shutdown(mut self) {
        self.stop_inner().await;
    }

    async fn stop_inner(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Stops the server and starts a new one on the same directory and port.
    pub async fn restart(mut self) -> Result<Self, BrokerError> {
        self.stop_inner().await;
        let temporary = self._temporary.take();
        let addr = self.addr;
        // Drop our broker handle so the data directory lock is released before reopening.
        let (config, broker_config, data_dir) = (
            self.config.clone(),
            self.broker_config.clone(),
            self.data_dir.clone(),
        );
        let clock = self.manual_clock.clone();
        #[allow(clippy::clone_on_copy)] // without the `kafka` feature the settings are `Copy`
        let kafka = self.kafka.clone();
        drop(self);
        let mut restarted =
            Self::start_on(&data_dir, config, broker_config, Some(addr), clock, kafka).await?;
        restarted._temporary = temporary;
        Ok(restarted)
    }
}

async fn bind_listener(bind: SocketAddr) -> Result<TcpListener, BrokerError> {
    TcpListener::bind(bind)
        .await
        .map_err(|source| BrokerError::Io {
            context: format!("bind {bind}"),
            source,
        })
}

fn local_address(listener: &TcpListener) -> Result<SocketAddr, BrokerError> {
    listener.local_addr().map_err(|source| BrokerError::Io {
        context: "read local address".into(),
        source,
    })
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // The temporary directory goes once the server task has ended (or, at the latest, when
        // the runtime shuts down): removed at once, it raced the server's own tasks, which could
        // write into it again, and left small directories in the system's temp dir behind.
        if let (Some(task), Some(temporary)) = (self.task.take(), self._temporary.take()) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = task.await;
                    drop(temporary);
                });
            }
        }
    }
}
