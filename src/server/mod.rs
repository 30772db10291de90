//! The TCP server: an accept loop bounded by a connection semaphore, one task per connection
//! speaking framed requests, background tasks for interval flushes and retention, and graceful
//! shutdown that syncs every partition.

mod appender;
mod connection;
mod errors;
mod handler;
mod writer;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{broadcast, Semaphore};
use tracing::{info, warn};

pub use errors::to_error_response;

use crate::broker::Broker;
use crate::protocol::DEFAULT_MAX_FRAME_BYTES;

/// Default address: loopback only, so a fresh server is not exposed to the network.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7171";
/// Default most open connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default most requests in flight on one connection (pipelining depth).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;
/// Default longest a fetch may wait for new data.
pub const DEFAULT_MAX_FETCH_WAIT_MS: u32 = 30_000;
/// Default most bytes one fetch returns (kept below the frame limit).
pub const DEFAULT_MAX_FETCH_BYTES: u32 = 8 * 1024 * 1024;
/// Default longest a response write may block on a client that does not read.
pub const DEFAULT_WRITE_TIMEOUT_MS: u64 = 30_000;
/// Default longest a connection may sit with a partial frame or nothing at all.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 300_000;
/// How often retention runs. Often, because a partition written at a gigabyte per second fills
/// a segment in well under a second, and checking costs only a look at the segment list.
pub const RETENTION_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// Limits of a server. Every limit has a name, a default, and an error when it is hit.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Most open connections; beyond it new ones get `TOO_MANY_CONNECTIONS` and are closed.
    pub max_connections: usize,
    /// Most requests in flight per connection; beyond it the server stops reading (backpressure).
    pub max_in_flight: usize,
    /// Largest frame accepted, checked before anything is allocated.
    pub max_frame_bytes: usize,
    /// Longest a fetch may wait (a larger `max_wait_ms` is clamped).
    pub max_fetch_wait_ms: u32,
    /// Most bytes a fetch returns (a larger `max_bytes` is clamped).
    pub max_fetch_bytes: u32,
    /// A client that does not read its responses for this long is disconnected.
    pub write_timeout: Duration,
    /// A connection that sends no complete frame for this long is closed.
    pub idle_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_fetch_wait_ms: DEFAULT_MAX_FETCH_WAIT_MS,
            max_fetch_bytes: DEFAULT_MAX_FETCH_BYTES,
            write_timeout: Duration::from_millis(DEFAULT_WRITE_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(DEFAULT_IDLE_TIMEOUT_MS),
        }
    }
}

/// Runs the server on `listener` until `shutdown` completes, then drains connections (each
/// finishes the requests it has read), and syncs every partition.
pub async fn run(
    listener: TcpListener,
    broker: Arc<Broker>,
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let local: SocketAddr = listener.local_addr()?;
    info!(addr = %local, data_dir = %broker.data_dir().display(), "fencelog listening");
    let (stop, _) = broadcast::channel::<()>(1);
    let connections = Arc::new(Semaphore::new(config.max_connections));
    let config = Arc::new(config);
    let background = spawn_background(Arc::clone(&broker), stop.subscribe());
    let mut tasks = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let (socket, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(error) => {
                        // Out of descriptors and the like: back off instead of spinning.
                        warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = socket.set_nodelay(true);
                match Arc::clone(&connections).try_acquire_owned() {
                    Ok(permit) => {
                        let (broker, config, stop) = (Arc::clone(&broker), Arc::clone(&config), stop.subscribe());
                        tasks.spawn(async move {
                            connection::serve(socket, peer, broker, config, stop).await;
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        tasks.spawn(connection::refuse(socket, peer, config.max_connections));
                    }
                }
                // Reap finished connection tasks so the set stays bounded by live connections.
                while tasks.try_join_next().is_some() {}
            }
        }
    }
    info!("shutting down: draining connections");
    let _ = stop.send(());
    drop(listener);
    while tasks.join_next().await.is_some() {}
    // The background task sees the same stop signal; wait for it so no handle on the broker
    // (and so on the data directory lock) outlives `run`.
    let _ = background.await;
    let broker_for_sync = Arc::clone(&broker);
    match tokio::task::spawn_blocking(move || broker_for_sync.sync_all()).await {
        Ok(Ok(())) => info!("all partitions synced; bye"),
        Ok(Err(error)) => warn!(%error, "sync at shutdown failed"),
        Err(error) => warn!(%error, "sync task failed"),
    }
    Ok(())
}

/// Interval flushes and retention, on their own timers, off the request path.
fn spawn_background(
    broker: Arc<Broker>,
    mut stop: broadcast::Receiver<()>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut flush_tick = tokio::time::interval(Duration::from_millis(10));
        let mut retention_tick = tokio::time::interval(RETENTION_CHECK_INTERVAL);
        flush_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = stop.recv() => return,
                _ = flush_tick.tick() => {
                    let broker = Arc::clone(&broker);
                    let _ = tokio::task::spawn_blocking(move || broker.sync_due_interval_partitions(std::time::Instant::now())).await;
                }
                _ = retention_tick.tick() => {
                    let broker = Arc::clone(&broker);
                    let _ = tokio::task::spawn_blocking(move || broker.enforce_retention(crate::batch::now_ms())).await;
                }
            }
        }
    })
}
