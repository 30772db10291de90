//! An in-process fencelog server for your own integration tests.
//!
//! [`TestServer::start`] opens a broker on a fresh temporary directory, listens on an ephemeral
//! loopback port and serves until the `TestServer` is dropped (or [`TestServer::shutdown`] is
//! awaited). [`TestServer::restart`] stops it and starts a new server on the *same* directory, so
//! tests can check what survives a restart (topics, data, epochs).
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

use crate::broker::{Broker, BrokerConfig, BrokerError};
use crate::server::{self, ServerConfig};

/// A running in-process server on a temporary directory.
#[derive(Debug)]
pub struct TestServer {
    addr: SocketAddr,
    broker: Arc<Broker>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    config: ServerConfig,
    broker_config: BrokerConfig,
    data_dir: PathBuf,
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
        let temporary = tempfile::tempdir().map_err(|source| BrokerError::Io {
            context: "create temporary directory".into(),
            source,
        })?;
        let data_dir = temporary.path().to_path_buf();
        let mut server = Self::start_in(&data_dir, config, broker_config, None).await?;
        server._temporary = Some(temporary);
        Ok(server)
    }

    /// Starts a server on an existing data directory (kept after the server stops).
    pub async fn start_in(
        data_dir: &Path,
        config: ServerConfig,
        broker_config: BrokerConfig,
        addr: Option<SocketAddr>,
    ) -> Result<Self, BrokerError> {
        let directory = data_dir.to_path_buf();
        let opened_config = broker_config.clone();
        let broker = tokio::task::spawn_blocking(move || Broker::open(&directory, opened_config))
            .await
            .expect("broker open task panicked")?;
        let broker = Arc::new(broker);
        let bind = addr.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let listener = TcpListener::bind(bind)
            .await
            .map_err(|source| BrokerError::Io {
                context: format!("bind {bind}"),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| BrokerError::Io {
            context: "read local address".into(),
            source,
        })?;
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(server::run(
            listener,
            Arc::clone(&broker),
            config.clone(),
            async {
                let _ = stopped.await;
            },
        ));
        Ok(Self {
            addr,
            broker,
            stop: Some(stop),
            task: Some(task),
            config,
            broker_config,
            data_dir: data_dir.to_path_buf(),
            _temporary: None,
        })
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
        &self.broker
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
        drop(self);
        let mut restarted = Self::start_in(&data_dir, config, broker_config, Some(addr)).await?;
        restarted._temporary = temporary;
        Ok(restarted)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
