//! The async client: [`Client`] for every API of the protocol, [`Producer`] for a lease-holding
//! writer that batches records and keeps its lease alive, [`Consumer`] for reading a partition.
//!
//! One [`Client`] is one live TCP connection shared by every clone of it. Requests from many tasks
//! are pipelined on it and matched to their responses by correlation id. Errors are typed so
//! callers can act on them: above all [`ClientError::Fenced`], which means a newer writer exists
//! and this one must stop.
//!
//! With [`ClientBuilder::tls`] ([`TlsClientConfig`]) every connection, reconnects included, is
//! TLS, each server's certificate checked against the host of the address dialled.
//!
//! # Connection failures and reconnection
//!
//! A client knows a list of bootstrap addresses ([`ClientBuilder::addrs`]) and keeps one
//! connection at a time. When that connection fails (the server closed it, an I/O error, a
//! connection-level error such as `TOO_MANY_CONNECTIONS`):
//!
//! * the requests in flight on it fail, as their outcome is unknown: the server may or may not
//!   have carried them out;
//! * the *next* request opens a new connection, trying the addresses in turn, with capped
//!   exponential backoff and jitter between failed attempts
//!   ([`ClientConfig::reconnect_backoff_initial`], [`ClientConfig::reconnect_backoff_max`]).
//!   Concurrent callers share one reconnect attempt. One call reconnects for at most
//!   [`ClientConfig::reconnect_timeout`] (and never past its request timeout), then fails with
//!   the last connect error;
//! * requests whose repetition is harmless (`ApiVersions`, `Metadata`, `Fetch`, `ListOffsets`,
//!   `RenewLease`, `ReleaseLease`) are sent again automatically after such a failure, within
//!   their request timeout. `CreateTopic`, `AcquireLease` and `Produce` are not (a repeat could
//!   report `TOPIC_EXISTS` for the caller's own topic, lock the caller out with its own unknown
//!   lease, or append a batch twice): they fail with the transport error and the caller decides.
//!   A request the dead connection refused before sending it is sent on the new one, whatever
//!   its API, since the server never saw it.
//!
//! A request that times out does not fail the connection: the server still answers it, in order.
//! A server that stops answering does (a gray failure: frozen, wedged, it still accepts TCP
//! connections): when the oldest unanswered request on a connection is one the server answers
//! from memory (`ApiVersions`, `Metadata`, `ListOffsets`, `InitProducerId`, authentication) and
//! waits past [`ClientConfig::attempt_timeout`], or a fetch waits past its `max_wait` plus
//! [`ClientConfig::fetch_slack`], the connection is failed as above, so those requests move to
//! the next address (`liveness`). A request the server may hold (a produce, a lease grant, a topic
//! creation, a fetch, ...) is written only on a connection whose server has answered something on
//! it (authentication, a prompt request, or an `ApiVersions` sent first for the purpose), so a
//! frozen server never receives one: unsent, it goes to the next address too.
//!
//! The server answers the requests of one connection in the order it received them, so a
//! long-polling fetch delays the responses queued behind it. Give a long-polling [`Consumer`] its
//! own [`Client`] when the latency of other requests matters.

mod admin;
mod authenticate;
mod builder;
mod calls;
mod config;
mod connection;
mod consumer;
mod error;
mod fetch;
mod leases;
mod liveness;
mod metadata_cache;
mod offsets;
mod produce;
mod producer;
mod producer_id;
mod reconnect;
mod retry;
mod routing;
mod tls;
mod transaction;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::ToSocketAddrs;

pub use crate::batch::{BatchBuilder, Record};
pub use crate::protocol::Outcome;
pub use admin::{ClusterInfo, ServerInfo};
pub use authenticate::Credentials;
pub use builder::ClientBuilder;
pub use config::{
    ClientConfig, DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FETCH_SLACK,
    DEFAULT_MAX_IN_FLIGHT, DEFAULT_RECONNECT_BACKOFF_INITIAL, DEFAULT_RECONNECT_BACKOFF_MAX,
    DEFAULT_RECONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT,
};
pub use consumer::{
    Consumer, ConsumerBuilder, StartAt, DEFAULT_CONSUMER_MAX_BYTES, DEFAULT_CONSUMER_MAX_WAIT,
};
pub use error::ClientError;
pub use fetch::{FetchResult, FetchedBatches, Offsets};
pub use leases::{format_lease_id, parse_lease_id, Lease, RenewedLease};
pub use metadata_cache::{MAX_CACHED_PARTITIONS, METADATA_MAX_AGE};
pub use offsets::CommittedOffset;
pub use produce::ProduceAck;
pub use producer::{
    Producer, ProducerBuilder, ProducerConfig, ProducerStats, SendError, DEFAULT_BATCH_BYTES,
    DEFAULT_BATCH_RECORDS, DEFAULT_DELIVERY_TIMEOUT, DEFAULT_LINGER, DEFAULT_MAX_PENDING_RECORDS,
    DEFAULT_PRODUCER_MAX_IN_FLIGHT,
};
pub use producer_id::ProducerId;
pub use routing::{MAX_BROKER_CONNECTIONS, MAX_ROUTING_ATTEMPTS};
pub use tls::TlsClientConfig;
pub use transaction::TransactionalProducer;

pub(crate) use calls::call_on;
use reconnect::Endpoint;
use routing::Routing;

/// An async fencelog client: one pipelined TCP connection at a time, shared by all its clones,
/// replaced when it fails (see the [module documentation](self) for what is retried).
///
/// `Client` is cheap to clone (an `Arc`), `Send` and `Sync`; requests from many tasks travel
/// concurrently on the one connection, at most [`ClientConfig::max_in_flight`] at a time. The
/// connection closes when the last clone is dropped. When the connection fails, the requests in
/// flight on it fail ([`ClientError::Disconnected`], [`ClientError::Io`]: their outcome is
/// unknown) and the next request reconnects, to any of the bootstrap addresses given to
/// [`Client::builder`].
///
/// ```
/// use std::time::Duration;
/// use fencelog::client::{BatchBuilder, Client, ClientError};
/// use fencelog::protocol::TopicConfig;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = fencelog::testing::TestServer::start().await?;
/// let client = Client::connect(server.addr()).await?;
/// client.create_topic("orders", 1, TopicConfig::default()).await?;
///
/// // Become the writer of orders/0 and append a batch stamped with the epoch.
/// let lease = client.acquire_lease("orders", 0, "writer-1", Duration::from_secs(10)).await?;
/// let mut batch = BatchBuilder::new(lease.epoch);
/// batch.push(fencelog::batch::now_ms(), Some(b"id-1"), Some(b"hello"));
/// let ack = client.produce("orders", 0, batch.finish()).await?;
/// assert_eq!(ack.base_offset, 0);
///
/// // A new writer takes over; the old epoch is fenced.
/// client.release_lease("orders", 0, lease.lease_id).await?;
/// let newer = client.acquire_lease("orders", 0, "writer-2", Duration::from_secs(10)).await?;
/// let mut stale = BatchBuilder::new(lease.epoch);
/// stale.push(0, None, Some(b"late"));
/// match client.produce("orders", 0, stale.finish()).await {
///     Err(ClientError::Fenced { epoch, current }) => assert_eq!((epoch, current), (1, newer.epoch)),
///     other => panic!("expected fenced, got {other:?}"),
/// }
///
/// let fetched = client.fetch("orders", 0, 0, 1 << 20, Duration::ZERO).await?;
/// assert_eq!(fetched.records[0].value.as_deref(), Some(&b"hello"[..]));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    endpoint: Arc<Endpoint>,
    /// Where each partition's requests go (its leader, in a cluster), and what the client knows
    /// of the cluster.
    routing: Arc<Routing>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("peer", &self.endpoint.peer())
            .field("addrs", &self.endpoint.addrs())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects with the default [`ClientConfig`].
    pub async fn connect(addr: impl ToSocketAddrs) -> Result<Client, ClientError> {
        Self::connect_with(addr, ClientConfig::default()).await
    }

    /// Connects with the given limits and timeouts. `addr` is resolved once, here: its
    /// addresses become the bootstrap list that reconnects use (give names to
    /// [`Client::builder`] to have them resolved again at every reconnect).
    pub async fn connect_with(
        addr: impl ToSocketAddrs,
        config: ClientConfig,
    ) -> Result<Client, ClientError> {
        let addrs: Vec<String> =
            tokio::time::timeout(config.connect_timeout, tokio::net::lookup_host(addr))
                .await
                .map_err(|_| ClientError::Resolve {
                    source: Arc::new(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer within {:?}", config.connect_timeout),
                    )),
                })?
                .map_err(|source| ClientError::Resolve {
                    source: Arc::new(source),
                })?
                .map(|addr| addr.to_string())
                .collect();
        if addrs.is_empty() {
            return Err(ClientError::Resolve {
                source: Arc::new(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the address resolved to nothing",
                )),
            });
        }
        Self::connect_to(addrs, config).await
    }

    /// A builder: several bootstrap addresses, timeouts, backoffs.
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelog::client::Client;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = fencelog::testing::TestServer::start().await?;
    /// let client = Client::builder()
    ///     .addrs([server.addr().to_string(), "127.0.0.1:1".to_string()])
    ///     .request_timeout(Duration::from_secs(5))
    ///     .connect()
    ///     .await?;
    /// client.api_versions().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// Connects to the first of `addrs` (unresolved `host:port` strings) that accepts.
    pub(crate) async fn connect_to(
        addrs: Vec<String>,
        config: ClientConfig,
    ) -> Result<Client, ClientError> {
        config
            .validate()
            .map_err(|error| ClientError::InvalidArgument(error.to_string()))?;
        let endpoint = Arc::new(Endpoint::connect(addrs, config).await?);
        Ok(Client {
            routing: Arc::new(Routing::new(Arc::clone(&endpoint))),
            endpoint,
        })
    }

    /// The address of the server of the current (or last) connection.
    pub fn peer_addr(&self) -> SocketAddr {
        self.endpoint.peer()
    }

    /// The bootstrap addresses, as given (or as `connect` resolved them).
    pub fn bootstrap_addrs(&self) -> &[String] {
        self.endpoint.addrs()
    }

    /// The configuration this client was connected with.
    pub fn config(&self) -> &ClientConfig {
        self.endpoint.config()
    }
}
