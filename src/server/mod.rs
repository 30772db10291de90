//! The TCP server: listeners whose accept loops share one connection limit, one task per
//! connection running the generic connection loop for its listener's protocol, the broker
//! service's maintenance, and graceful shutdown that drains connections and syncs every
//! partition.
//!
//! * [`protocol`]: the [`Protocol`] trait a listener's wire protocol implements.
//! * [`connection`]: the connection loop every protocol shares (limits, backpressure, timeouts,
//!   response order, drain).
//! * [`frame_reader`]: request frames read off a connection, their memory paid for as their
//!   bytes arrive, every refusal with the request's correlation id; a large native produce's
//!   batch moved from the socket into a pipe instead of memory (the one-copy produce path).
//! * [`writer`]: vectored response writes.
//! * [`tls`]: TLS on every listener ([`ServerConfig::tls`]), the handshake in the connection's
//!   own task.
//! * [`native`]: fencelog's own protocol, translated into broker service calls.
//! * `kafka`: Kafka's protocol (feature `kafka`, on by default), a second listener started only
//!   when asked for (`run_with_kafka`), with the Kafka record batch conversion.
//! * [`prometheus`]: `GET /metrics`, the scrape endpoint.
//! * [`node`]: the composition root: a whole broker from its configuration.

mod connection;
pub mod descriptors;
pub mod frame_reader;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod memory_budget;
pub mod native;
pub mod node;
pub mod prometheus;
pub mod protocol;
pub mod tls;
mod writer;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{broadcast, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

#[cfg(feature = "kafka")]
pub use kafka::{KafkaConfig, KafkaProtocol};
pub use native::{
    to_error_response, NativeProtocol, DEFAULT_SPLICE_MIN_FRAME_BYTES,
    SPLICE_MIN_FRAME_BYTES_WHEN_ON,
};
pub use node::{ClusterMembership, Listeners, Node, NodeConfig};
pub use protocol::{AfterEncode, Protocol, Started};
pub use tls::{ServerTls, TLS_HANDSHAKE_TIMEOUT};

use crate::broker::BrokerService;
use crate::domain::{ConfigError, Quantity};
use crate::protocol::DEFAULT_MAX_FRAME_BYTES;
use connection::Refusal;

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
    /// TLS on every listener (native and Kafka) when set; plain TCP otherwise.
    pub tls: Option<ServerTls>,
    /// Authentication and ACLs (`serve --auth`); `None` serves every connection unchecked.
    pub security: Option<Arc<crate::auth::Security>>,
    /// The memory request frames are read into, all connections of all listeners together
    /// (`serve --max-buffer-bytes`; clones of this config share it). A frame waits for its
    /// share (the connection stops reading) and is refused with `RESOURCE_EXHAUSTED` after
    /// `buffer_wait`, or at once when it is larger than the whole budget.
    pub memory_budget: memory_budget::MemoryBudget,
    /// Longest a frame waits for its share of `memory_budget`.
    pub buffer_wait: Duration,
    /// Memory each connection reads request frames into before it draws on `memory_budget`
    /// (`serve --connection-buffer-bytes`): small requests never wait for memory others hold.
    pub connection_buffer_bytes: usize,
    /// Largest frame a connection may send before it authenticates, on a server with
    /// `security` (`serve --max-unauthenticated-frame-bytes`); a larger one is refused and the
    /// connection closed.
    pub max_unauthenticated_frame_bytes: usize,
    /// Longest a frame may take to arrive whole once its first byte has (`serve
    /// --partial-frame-timeout-ms`); then it is refused and the connection closed.
    pub partial_frame_timeout: Duration,
    /// The `host:port` clients are told to reach this broker at (`serve --advertise`); `None`:
    /// the native listener's bound address.
    pub advertised_addr: Option<String>,
    /// Smallest native `Produce` frame whose batch is spliced from a plain TCP socket into the
    /// segment file instead of being read into memory (`serve --splice-min-bytes`; 0, the
    /// default: never), on a standalone broker: the one-copy produce path.
    pub splice_min_frame_bytes: usize,
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
            tls: None,
            security: None,
            memory_budget: memory_budget::MemoryBudget::new(
                memory_budget::DEFAULT_MAX_BUFFER_BYTES,
            ),
            buffer_wait: Duration::from_millis(memory_budget::DEFAULT_BUFFER_WAIT_MS),
            connection_buffer_bytes: memory_budget::DEFAULT_CONNECTION_BUFFER_BYTES,
            max_unauthenticated_frame_bytes: frame_reader::DEFAULT_MAX_UNAUTHENTICATED_FRAME_BYTES,
            partial_frame_timeout: Duration::from_millis(
                frame_reader::DEFAULT_PARTIAL_FRAME_TIMEOUT_MS,
            ),
            advertised_addr: None,
            splice_min_frame_bytes: native::DEFAULT_SPLICE_MIN_FRAME_BYTES,
        }
    }
}

/// Largest `max_frame_bytes`: a frame's length prefix is a `u32`.
pub const MAX_FRAME_BYTES_LIMIT: usize = u32::MAX as usize;
/// Smallest `connection_buffer_bytes`: a request header with its length prefix.
pub const MIN_CONNECTION_BUFFER_BYTES: usize = 12;
/// Largest `max_connections` and `max_in_flight`: each is a semaphore's permits.
pub const MAX_PERMITS_LIMIT: usize = Semaphore::MAX_PERMITS;

impl ServerConfig {
    /// Checks the limits: at least one connection, one request in flight and one byte per frame
    /// and per fetch, positive write and idle timeouts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let permits = |field, value| {
            ConfigError::check_range(
                field,
                Quantity::count(value),
                Quantity::Count(1),
                Quantity::count(MAX_PERMITS_LIMIT),
            )
        };
        permits("max_connections", self.max_connections)?;
        permits("max_in_flight", self.max_in_flight)?;
        ConfigError::check_range(
            "max_frame_bytes",
            Quantity::bytes(self.max_frame_bytes),
            Quantity::Bytes(1),
            Quantity::bytes(MAX_FRAME_BYTES_LIMIT),
        )?;
        ConfigError::check_range(
            "max_fetch_bytes",
            Quantity::Bytes(u64::from(self.max_fetch_bytes)),
            Quantity::Bytes(1),
            Quantity::Bytes(u64::from(u32::MAX)),
        )?;
        ConfigError::check_range(
            "connection_buffer_bytes",
            Quantity::bytes(self.connection_buffer_bytes),
            Quantity::bytes(MIN_CONNECTION_BUFFER_BYTES),
            Quantity::bytes(MAX_PERMITS_LIMIT),
        )?;
        ConfigError::check_range(
            "max_unauthenticated_frame_bytes",
            Quantity::bytes(self.max_unauthenticated_frame_bytes),
            Quantity::Bytes(1),
            Quantity::bytes(MAX_FRAME_BYTES_LIMIT),
        )?;
        let positive = |field, value| ConfigError::check_positive(field, Quantity::duration(value));
        positive("write_timeout", self.write_timeout)?;
        positive("idle_timeout", self.idle_timeout)?;
        positive("partial_frame_timeout", self.partial_frame_timeout)
    }
}

/// A bound Kafka listener and its settings.
#[cfg(feature = "kafka")]
#[derive(Debug)]
pub struct KafkaListener {
    /// The socket Kafka clients connect to.
    pub listener: TcpListener,
    /// What it advertises, and its frame limit.
    pub config: KafkaConfig,
}

/// Runs the native-protocol server on `listener` until `shutdown` completes, then drains
/// connections (each finishes the requests it has read), stops maintenance, and syncs every
/// partition.
pub async fn run(
    listener: TcpListener,
    service: Arc<BrokerService>,
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    serve(listener, None, service, config, shutdown).await
}

/// [`run`], plus a Kafka listener when `kafka` is given. Both accept loops share the
/// connection limit and the stop signal; maintenance and the final sync stay single. The
/// Kafka listener's frames are limited by its own [`KafkaConfig::max_frame_bytes`].
#[cfg(feature = "kafka")]
pub async fn run_with_kafka(
    listener: TcpListener,
    kafka: Option<KafkaListener>,
    service: Arc<BrokerService>,
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    serve(listener, kafka, service, config, shutdown).await
}

/// Without the `kafka` feature there is no Kafka listener to give.
#[cfg(not(feature = "kafka"))]
type KafkaListener = std::convert::Infallible;

/// Every listener until `shutdown` (see [`run`] and `run_with_kafka`).
async fn serve(
    listener: TcpListener,
    kafka: Option<KafkaListener>,
    service: Arc<BrokerService>,
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    config
        .validate()
        .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidInput, error))?;
    #[cfg(feature = "kafka")]
    if let Some(kafka) = &kafka {
        kafka
            .config
            .validate()
            .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidInput, error))?;
    }
    let config = Arc::new(config);
    let local: SocketAddr = listener.local_addr()?;
    info!(addr = %local, data_dir = %service.broker().data_dir().display(), tls = config.tls.is_some(), auth = config.security.is_some(), "fencelog listening");
    let (stop, _) = broadcast::channel::<()>(1);
    let connections = Arc::new(Semaphore::new(config.max_connections));
    // The service was assembled with its transactions recovered (`BrokerService::standalone`),
    // so no connection sees a restart's half-done transactions.
    let maintenance = service.start_maintenance();
    let native = Arc::new(NativeProtocol::new(Arc::clone(&config)).listening_on(local));
    #[cfg(not(feature = "kafka"))]
    let _no_kafka_listener = kafka;
    #[cfg_attr(not(feature = "kafka"), allow(unused_mut))]
    let mut accepting = vec![tokio::spawn(accept_loop(
        listener,
        native,
        Arc::clone(&service),
        Arc::clone(&config),
        Arc::clone(&connections),
        stop.subscribe(),
    ))];
    #[cfg(feature = "kafka")]
    if let Some(kafka) = kafka {
        let kafka_local = kafka.listener.local_addr()?;
        info!(
            addr = %kafka_local,
            advertised = %format!("{}:{}", kafka.config.advertised_host, kafka.config.advertised_port),
            "Kafka listener listening"
        );
        let kafka_server = Arc::new(ServerConfig {
            max_frame_bytes: kafka.config.max_frame_bytes,
            ..ServerConfig::clone(&config)
        });
        accepting.push(tokio::spawn(accept_loop(
            kafka.listener,
            Arc::new(
                KafkaProtocol::new(Arc::new(kafka.config))
                    .with_native_listener(
                        config
                            .advertised_addr
                            .clone()
                            .unwrap_or_else(|| local.to_string()),
                    )
                    .with_security(config.security.clone())
                    .with_fetch_memory(memory_budget::FetchMemory {
                        budget: config.memory_budget.clone(),
                        wait: config.buffer_wait,
                    }),
            ),
            Arc::clone(&service),
            kafka_server,
            connections,
            stop.subscribe(),
        )));
    }
    shutdown.await;
    info!("shutting down: draining connections");
    // Pending long polls answer now, so draining does not wait for their max_wait.
    service.begin_shutdown();
    // Every accept loop and connection sees the signal; a send error only means none is left.
    let _ = stop.send(());
    for accept in accepting {
        if let Err(error) = accept.await {
            warn!(%error, "accept loop failed");
        }
    }
    // Stop maintenance before the final sync so no handle on the broker (and so on the data
    // directory lock) outlives `run`.
    maintenance.stop().await;
    match service.sync_all().await {
        Ok(()) => info!("all partitions synced; bye"),
        Err(error) => warn!(%error, "sync at shutdown failed"),
    }
    Ok(())
}

/// How often, at most, the accept loop warns that it refuses connections: a flood of refused
/// clients must not become a flood of log lines (each is counted in
/// `fencelog_connections_refused_total` and logged at debug).
const REFUSAL_WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// Warns of refused connections at most once per [`REFUSAL_WARNING_INTERVAL`], with the count
/// since the last warning.
#[derive(Debug, Default)]
struct RefusalReport {
    last_warning: Option<std::time::Instant>,
    unreported: u64,
}

impl RefusalReport {
    fn refused(&mut self, listener: &str, refusal: Refusal) {
        self.unreported += 1;
        let now = std::time::Instant::now();
        if self
            .last_warning
            .is_none_or(|last| now.duration_since(last) >= REFUSAL_WARNING_INTERVAL)
        {
            warn!(
                listener,
                refused = self.unreported,
                "refusing connections: {refusal}"
            );
            self.last_warning = Some(now);
            self.unreported = 0;
        }
    }
}

/// Accepts connections for one listener until `stop`, then waits for its connections to drain.
/// The connection semaphore is shared by every listener of the server.
pub async fn accept_loop<P: Protocol>(
    listener: TcpListener,
    protocol: Arc<P>,
    service: Arc<BrokerService>,
    config: Arc<ServerConfig>,
    connections: Arc<Semaphore>,
    mut stop: broadcast::Receiver<()>,
) {
    let mut tasks = JoinSet::new();
    let metrics = service.metrics().listener(protocol.name(), P::api_name);
    let mut spare = descriptors::SpareDescriptor::new();
    let mut refusals = RefusalReport::default();
    loop {
        tokio::select! {
            // The stop wins when both are ready (see `connection_stop` for the rest of the race).
            biased;
            _ = stop.recv() => break,
            accepted = listener.accept() => {
                let (socket, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(error) if descriptors::is_out_of_descriptors(&error) && spare.release() => {
                        // Out of descriptors: refuse the waiting client with the spare's.
                        debug!(%error, protocol = protocol.name(), "out of file descriptors; refusing a connection if one waits");
                        // EMFILE says nothing about the backlog: take a waiting client if there
                        // is one, never wait for one without the spare. The refusal is awaited
                        // here (bounded by the TLS refusal's timeouts): the spare can only be
                        // opened again once the refused socket is closed.
                        if let Some(Ok((socket, peer))) = futures::FutureExt::now_or_never(listener.accept()) {
                            metrics.connection_refused();
                            refusals.refused(protocol.name(), Refusal::OutOfDescriptors);
                            tls::refuse_socket(
                                Arc::clone(&protocol),
                                socket,
                                peer,
                                Arc::clone(&config),
                                stop.resubscribe(),
                                Refusal::OutOfDescriptors,
                            )
                            .await;
                        }
                        spare.restore();
                        continue;
                    }
                    Err(error) => {
                        // Out of descriptors and the like: back off instead of spinning.
                        warn!(%error, protocol = protocol.name(), "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if let Err(error) = socket.set_nodelay(true) {
                    warn!(%peer, %error, "could not set TCP_NODELAY");
                }
                let Some(connection_stop) = connection_stop(&mut stop) else {
                    // Stopping: the socket closes here, unserved.
                    break;
                };
                match Arc::clone(&connections).try_acquire_owned() {
                    Ok(permit) => {
                        let open = metrics.connection_opened();
                        let serve = tls::serve_socket(
                            Arc::clone(&protocol),
                            socket,
                            peer,
                            Arc::clone(&service),
                            Arc::clone(&config),
                            connection_stop,
                        );
                        tasks.spawn(async move {
                            serve.await;
                            drop((permit, open));
                        });
                    }
                    Err(_) => {
                        metrics.connection_refused();
                        let refusal = Refusal::ConnectionLimit(config.max_connections);
                        refusals.refused(protocol.name(), refusal);
                        tasks.spawn(tls::refuse_socket(
                            Arc::clone(&protocol),
                            socket,
                            peer,
                            Arc::clone(&config),
                            connection_stop,
                            refusal,
                        ));
                    }
                }
                // Reap finished connection tasks so the set stays bounded by live connections.
                while tasks.try_join_next().is_some() {}
            }
        }
    }
    drop(listener);
    while tasks.join_next().await.is_some() {}
}

/// A stop receiver for a connection just accepted, or `None` when the stop was already sent.
///
/// A resubscribed receiver sees only what is sent after it was made: a connection accepted as
/// the stop was being sent would get a receiver that never hears it, and the accept loop would
/// wait for that connection forever at shutdown (seen once in about thirty runs of a client
/// test that shuts its server down right after connecting). So the new receiver is made first,
/// then the loop's own receiver (subscribed before any send) is asked: a stop sent before the
/// resubscription is seen there, one sent after it reaches the connection.
fn connection_stop(stop: &mut broadcast::Receiver<()>) -> Option<broadcast::Receiver<()>> {
    let connection_stop = stop.resubscribe();
    match stop.try_recv() {
        Err(broadcast::error::TryRecvError::Empty) => Some(connection_stop),
        // Sent (or the sender is gone, or messages were lost: stopping all the same).
        _ => None,
    }
}
