//! The async client: [`Client`] for every API of the protocol, [`Producer`] for a lease-holding
//! writer that batches records and keeps its lease alive, [`Consumer`] for reading a partition.
//!
//! One [`Client`] is one TCP connection shared by every clone of it. Requests from many tasks are
//! pipelined on it and matched to their responses by correlation id. Errors are typed so callers
//! can act on them: above all [`ClientError::Fenced`], which means a newer writer exists and this
//! one must stop.
//!
//! The server answers the requests of one connection in the order it received them, so a
//! long-polling fetch delays the responses queued behind it. Give a long-polling [`Consumer`] its
//! own [`Client`] when the latency of other requests matters.

mod connection;
mod consumer;
mod offsets;
mod producer;
mod producer_id;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::ToSocketAddrs;

use crate::batch::{decode_batches_into, BatchError};
use crate::protocol::{
    ApiVersionRange, ErrorCode, ErrorResponse, ProtocolError, Request, Response, TopicConfig,
    TopicMetadata, DEFAULT_MAX_FRAME_BYTES,
};

pub use crate::batch::{BatchBuilder, Record};
pub use consumer::{Consumer, DEFAULT_CONSUMER_MAX_BYTES};
pub use offsets::CommittedOffset;
pub use producer::{
    Producer, ProducerBuilder, ProducerConfig, ProducerStats, SendError, DEFAULT_DELIVERY_TIMEOUT,
};
pub use producer_id::ProducerId;

use connection::Connection;

/// Default most requests in flight on one connection.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;
/// Default time allowed to establish the TCP connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time allowed for a request, from queueing to response.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Extra time a fetch is allowed beyond its `max_wait`.
pub const DEFAULT_FETCH_SLACK: Duration = Duration::from_secs(5);

/// Everything that can go wrong in a client call, typed so that callers can act on it.
///
/// The fencing-related variants ([`Fenced`](Self::Fenced), [`UnknownEpoch`](Self::UnknownEpoch),
/// [`LeaseLost`](Self::LeaseLost)) mean "stop writing with this epoch"; they are never worth
/// retrying as they are. Server errors without a dedicated variant arrive as
/// [`Server`](Self::Server) with their [`ErrorCode`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The write's epoch is older than the partition's current epoch: a newer writer holds the
    /// partition. This writer has lost it for good.
    #[error("fenced: epoch {epoch} < current {current}")]
    Fenced {
        /// The stale epoch that was rejected.
        epoch: u64,
        /// The partition's current epoch.
        current: u64,
    },
    /// The write's epoch was never granted on this partition (newer than the current one, or 0).
    #[error(
        "unknown epoch: epoch {epoch} was never granted on this partition (current {current})"
    )]
    UnknownEpoch {
        /// The epoch that was rejected.
        epoch: u64,
        /// The partition's current epoch.
        current: u64,
    },
    /// The lease expired, was released or superseded, or the lease id is not the live lease's.
    #[error("lease lost: the partition is at epoch {current_epoch}; acquire a new lease")]
    LeaseLost {
        /// The partition's current epoch as reported by the server.
        current_epoch: u64,
    },
    /// Someone holds a live lease on the partition; retry after its TTL.
    #[error("lease held: {message}")]
    LeaseHeld {
        /// The server's explanation (names the holder and the time left).
        message: String,
        /// The epoch of the live lease.
        current_epoch: u64,
    },
    /// Any other error answered by the server.
    #[error("{code}: {message}")]
    Server {
        /// The wire error code.
        code: ErrorCode,
        /// The server's explanation.
        message: String,
    },
    /// The server's bytes did not follow the protocol, or a request could not be encoded.
    #[error("protocol error: {0}")]
    Protocol(ProtocolError),
    /// The connection failed while in use.
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
    /// The address could not be resolved.
    #[error("cannot resolve address: {source}")]
    Resolve {
        /// The resolver's error.
        source: std::io::Error,
    },
    /// No connection could be made.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address tried (the last one, if it resolved to several).
        addr: SocketAddr,
        /// Why it failed.
        source: std::io::Error,
    },
    /// No response within the time allowed. The request's outcome is unknown (a produce may or
    /// may not have been appended).
    #[error("request timed out after {after:?}")]
    Timeout {
        /// The time allowed.
        after: Duration,
    },
    /// The connection is closed; requests in flight have an unknown outcome.
    #[error("connection closed by the server")]
    Disconnected,
    /// A fetched batch failed its integrity check on the client.
    #[error("corrupt batch in fetch response: {0}")]
    CorruptBatch(#[from] BatchError),
    /// The producer was closed.
    #[error("producer is closed")]
    Closed,
    /// A caller-supplied value is unusable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An earlier batch of this idempotent producer failed, so this one was not sent: a
    /// producer's batches land in order or not at all. [`Producer::resume`] starts again.
    #[error("not sent: an earlier batch of this producer failed ({cause})")]
    ProducerHalted {
        /// Why the earlier batch failed.
        cause: Box<ClientError>,
    },
    /// The producer could not renew its lease for a whole TTL (the server was unreachable), so
    /// the lease may have expired and another writer may hold the partition: stop leader work.
    #[error("lease not renewed for {unconfirmed_for:?} (its TTL): it may have expired; acquire a new lease")]
    LeaseExpired {
        /// How long since the lease was last confirmed.
        unconfirmed_for: Duration,
    },
}

impl ClientError {
    /// Turns a server error body into the matching variant.
    pub fn from_error_response(error: ErrorResponse) -> ClientError {
        match error.code {
            ErrorCode::Fenced => ClientError::Fenced {
                epoch: error.epoch,
                current: error.current_epoch,
            },
            ErrorCode::UnknownEpoch => ClientError::UnknownEpoch {
                epoch: error.epoch,
                current: error.current_epoch,
            },
            ErrorCode::LeaseLost => ClientError::LeaseLost {
                current_epoch: error.current_epoch,
            },
            ErrorCode::LeaseHeld => ClientError::LeaseHeld {
                message: error.message,
                current_epoch: error.current_epoch,
            },
            code => ClientError::Server {
                code,
                message: error.message,
            },
        }
    }

    /// True when a write was rejected because a newer writer exists.
    pub fn is_fenced(&self) -> bool {
        matches!(self, ClientError::Fenced { .. })
    }

    /// True for the errors that end a writer's right to write with its epoch: `Fenced`,
    /// `UnknownEpoch` and `LeaseLost`. The writer must acquire a new lease to continue.
    pub fn is_fencing(&self) -> bool {
        matches!(
            self,
            ClientError::Fenced { .. }
                | ClientError::UnknownEpoch { .. }
                | ClientError::LeaseLost { .. }
                | ClientError::LeaseExpired { .. }
        )
    }

    /// The wire error code behind this error, if the server sent one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Fenced { .. } => Some(ErrorCode::Fenced),
            ClientError::UnknownEpoch { .. } => Some(ErrorCode::UnknownEpoch),
            ClientError::LeaseLost { .. } => Some(ErrorCode::LeaseLost),
            ClientError::LeaseHeld { .. } => Some(ErrorCode::LeaseHeld),
            ClientError::Server { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the same request may succeed later without changes: retriable server codes
    /// (`LEASE_HELD`, `STORAGE_ERROR`, ...) and transport failures (after reconnecting).
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Timeout { .. }
            | ClientError::Disconnected
            | ClientError::Io(_)
            | ClientError::Connect { .. } => true,
            other => other.code().is_some_and(ErrorCode::is_retriable),
        }
    }
}

fn copy_io(error: &std::io::Error) -> std::io::Error {
    std::io::Error::new(error.kind(), error.to_string())
}

fn copy_protocol(error: &ProtocolError) -> ProtocolError {
    match error {
        ProtocolError::FrameTooLarge { declared, max } => ProtocolError::FrameTooLarge {
            declared: *declared,
            max: *max,
        },
        ProtocolError::EmptyFrame => ProtocolError::EmptyFrame,
        ProtocolError::Io(error) => ProtocolError::Io(copy_io(error)),
        ProtocolError::Malformed(message) => ProtocolError::Malformed(message.clone()),
        ProtocolError::UnknownErrorCode { code, message } => ProtocolError::UnknownErrorCode {
            code: *code,
            message: message.clone(),
        },
        ProtocolError::Unencodable(message) => ProtocolError::Unencodable(message.clone()),
    }
}

/// One failure is reported to every request it concerns (all requests in flight on a failed
/// connection, all sends of a fenced producer), hence `Clone`. I/O errors are copied by kind and
/// message, since `std::io::Error` itself cannot be cloned.
impl Clone for ClientError {
    fn clone(&self) -> Self {
        match self {
            ClientError::Fenced { epoch, current } => ClientError::Fenced {
                epoch: *epoch,
                current: *current,
            },
            ClientError::UnknownEpoch { epoch, current } => ClientError::UnknownEpoch {
                epoch: *epoch,
                current: *current,
            },
            ClientError::LeaseLost { current_epoch } => ClientError::LeaseLost {
                current_epoch: *current_epoch,
            },
            ClientError::LeaseHeld {
                message,
                current_epoch,
            } => ClientError::LeaseHeld {
                message: message.clone(),
                current_epoch: *current_epoch,
            },
            ClientError::Server { code, message } => ClientError::Server {
                code: *code,
                message: message.clone(),
            },
            ClientError::Protocol(error) => ClientError::Protocol(copy_protocol(error)),
            ClientError::Io(error) => ClientError::Io(copy_io(error)),
            ClientError::Resolve { source } => ClientError::Resolve {
                source: copy_io(source),
            },
            ClientError::Connect { addr, source } => ClientError::Connect {
                addr: *addr,
                source: copy_io(source),
            },
            ClientError::Timeout { after } => ClientError::Timeout { after: *after },
            ClientError::Disconnected => ClientError::Disconnected,
            ClientError::CorruptBatch(error) => ClientError::CorruptBatch(error.clone()),
            ClientError::Closed => ClientError::Closed,
            ClientError::InvalidArgument(message) => ClientError::InvalidArgument(message.clone()),
            ClientError::ProducerHalted { cause } => ClientError::ProducerHalted {
                cause: cause.clone(),
            },
            ClientError::LeaseExpired { unconfirmed_for } => ClientError::LeaseExpired {
                unconfirmed_for: *unconfirmed_for,
            },
        }
    }
}

/// Limits and timeouts of a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Time allowed to establish the TCP connection (per resolved address).
    pub connect_timeout: Duration,
    /// Time allowed for a request, from queueing to its response.
    pub request_timeout: Duration,
    /// A fetch is allowed `max(request_timeout, max_wait + fetch_slack)`.
    pub fetch_slack: Duration,
    /// Most requests in flight on the connection; more callers wait for a slot.
    pub max_in_flight: usize,
    /// Largest frame sent or accepted; at least the server's limit.
    pub max_frame_bytes: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            fetch_slack: DEFAULT_FETCH_SLACK,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
        }
    }
}

/// A granted lease: the epoch to stamp into batches and the secret to renew and release it.
///
/// `Debug` redacts the lease id, which is a bearer credential.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The fencing token for every batch written under this lease.
    pub epoch: u64,
    /// Secret proving ownership on renew and release.
    pub lease_id: u128,
    /// Granted duration in milliseconds.
    pub ttl_ms: u64,
}

impl Lease {
    /// The lease id as 32 lowercase hex digits, the form the CLI prints and accepts.
    pub fn lease_id_hex(&self) -> String {
        format_lease_id(self.lease_id)
    }

    /// The granted duration.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("epoch", &self.epoch)
            .field("lease_id", &"<redacted>")
            .field("ttl_ms", &self.ttl_ms)
            .finish()
    }
}

/// Formats a lease id as 32 lowercase hex digits.
pub fn format_lease_id(lease_id: u128) -> String {
    format!("{lease_id:032x}")
}

/// Parses a lease id written as up to 32 hex digits (an optional `0x` prefix is accepted).
pub fn parse_lease_id(text: &str) -> Result<u128, ClientError> {
    let digits = text.trim();
    let digits = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
        .unwrap_or(digits);
    if digits.is_empty() || digits.len() > 32 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ClientError::InvalidArgument(format!(
            "lease id {text:?} is not 32 hex digits"
        )));
    }
    u128::from_str_radix(digits, 16)
        .map_err(|error| ClientError::InvalidArgument(format!("lease id {text:?}: {error}")))
}

/// The answer to a lease renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenewedLease {
    /// The lease's epoch (unchanged by renewal).
    pub epoch: u64,
    /// The lease now expires this many ms after the server received the renewal.
    pub ttl_ms: u64,
}

/// The answer to a produce: where the batch landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceAck {
    /// Offset of the batch's first record.
    pub base_offset: u64,
    /// Offset of its last record.
    pub last_offset: u64,
    /// The partition's next offset after the append.
    pub log_end_offset: u64,
}

/// The answer to a fetch, with the batches already split into records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResult {
    /// One past the last offset readers can see.
    pub high_watermark: u64,
    /// Oldest offset still stored.
    pub log_start_offset: u64,
    /// Records from the requested offset on (none below it), in offset order.
    pub records: Vec<Record>,
}

/// A partition's offset range and epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    /// Oldest offset still stored.
    pub earliest: u64,
    /// Next offset to be written (the log end offset).
    pub latest: u64,
    /// The partition's current epoch (0 if never leased).
    pub epoch: u64,
}

/// The answer to `ApiVersions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// Server software and version, e.g. `fencelog 0.1.0`.
    pub server: String,
    /// The API versions the server supports.
    pub apis: Vec<ApiVersionRange>,
}

/// An async fencelog client: one pipelined TCP connection, shared by all its clones.
///
/// `Client` is cheap to clone (an `Arc`), `Send` and `Sync`; requests from many tasks travel
/// concurrently on the one connection, at most [`ClientConfig::max_in_flight`] at a time. The
/// connection closes when the last clone is dropped. There is no automatic reconnection: after
/// [`ClientError::Disconnected`] (or any connection failure) every call fails with that error,
/// and a new `Client` must be connected.
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
    connection: Arc<Connection>,
    config: Arc<ClientConfig>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("peer", &self.connection.peer())
            .finish_non_exhaustive()
    }
}

/// Extracts the expected variant of a response; anything else cannot come from a correct
/// server (responses are decoded by the API of the request they answer).
macro_rules! expect_response {
    ($response:expr, $pattern:pat => $value:expr) => {
        match $response {
            $pattern => Ok($value),
            other => Err(ClientError::Protocol(ProtocolError::Malformed(format!(
                "unexpected {} response",
                other.api_key()
            )))),
        }
    };
}

impl Client {
    /// Connects with the default [`ClientConfig`].
    pub async fn connect(addr: impl ToSocketAddrs) -> Result<Client, ClientError> {
        Self::connect_with(addr, ClientConfig::default()).await
    }

    /// Connects with the given limits and timeouts.
    pub async fn connect_with(
        addr: impl ToSocketAddrs,
        config: ClientConfig,
    ) -> Result<Client, ClientError> {
        let addrs: Vec<SocketAddr> =
            tokio::time::timeout(config.connect_timeout, tokio::net::lookup_host(addr))
                .await
                .map_err(|_| ClientError::Resolve {
                    source: std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer within {:?}", config.connect_timeout),
                    ),
                })?
                .map_err(|source| ClientError::Resolve { source })?
                .collect();
        let connection = Connection::open(addrs, &config).await?;
        Ok(Client {
            connection: Arc::new(connection),
            config: Arc::new(config),
        })
    }

    /// The server's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.connection.peer()
    }

    /// The configuration this client was connected with.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    async fn call(&self, request: Request) -> Result<Response, ClientError> {
        self.connection
            .call(request, self.config.request_timeout)
            .await
    }

    /// The server's software version and supported API versions.
    pub async fn api_versions(&self) -> Result<ServerInfo, ClientError> {
        let response = self.call(Request::ApiVersions).await?;
        expect_response!(response, Response::ApiVersions { server, apis } => ServerInfo { server, apis })
    }

    /// Creates a topic with `partitions` partitions.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        config: TopicConfig,
    ) -> Result<(), ClientError> {
        let response = self
            .call(Request::CreateTopic {
                name: name.to_owned(),
                partitions,
                config,
            })
            .await?;
        expect_response!(response, Response::CreateTopic => ())
    }

    /// Describes the named topics, in the order asked; an empty list means all topics (sorted
    /// by name). Fails with `UNKNOWN_TOPIC` if any named topic does not exist.
    pub async fn metadata<S: AsRef<str>>(
        &self,
        topics: &[S],
    ) -> Result<Vec<TopicMetadata>, ClientError> {
        let topics = topics.iter().map(|t| t.as_ref().to_owned()).collect();
        let response = self.call(Request::Metadata { topics }).await?;
        expect_response!(response, Response::Metadata { topics } => topics)
    }

    /// Describes every topic, sorted by name.
    pub async fn list_topics(&self) -> Result<Vec<TopicMetadata>, ClientError> {
        self.metadata::<&str>(&[]).await
    }

    /// Acquires the write lease of a partition. Fails with [`ClientError::LeaseHeld`] while
    /// another live lease exists.
    pub async fn acquire_lease(
        &self,
        topic: &str,
        partition: u32,
        holder: &str,
        ttl: Duration,
    ) -> Result<Lease, ClientError> {
        let response = self
            .call(Request::AcquireLease {
                topic: topic.to_owned(),
                partition,
                holder: holder.to_owned(),
                ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            })
            .await?;
        expect_response!(response, Response::AcquireLease { epoch, lease_id, ttl_ms } => Lease { epoch, lease_id, ttl_ms })
    }

    /// Extends a live lease by its TTL. Fails with [`ClientError::LeaseLost`] if it is gone.
    pub async fn renew_lease(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
    ) -> Result<RenewedLease, ClientError> {
        let response = self
            .call(Request::RenewLease {
                topic: topic.to_owned(),
                partition,
                lease_id,
            })
            .await?;
        expect_response!(response, Response::RenewLease { epoch, ttl_ms } => RenewedLease { epoch, ttl_ms })
    }

    /// Ends a live lease at once, so another writer can acquire the partition.
    pub async fn release_lease(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
    ) -> Result<(), ClientError> {
        let response = self
            .call(Request::ReleaseLease {
                topic: topic.to_owned(),
                partition,
                lease_id,
            })
            .await?;
        expect_response!(response, Response::ReleaseLease => ())
    }

    /// Appends one record batch (built with [`BatchBuilder`], epoch in its header).
    ///
    /// Fails with [`ClientError::Fenced`] if a newer epoch exists; the batch was not written.
    pub async fn produce(
        &self,
        topic: &str,
        partition: u32,
        batch: Bytes,
    ) -> Result<ProduceAck, ClientError> {
        let response = self
            .call(Request::Produce {
                topic: topic.to_owned(),
                partition,
                batch,
            })
            .await?;
        expect_response!(response, Response::Produce { base_offset, last_offset, log_end_offset } => ProduceAck { base_offset, last_offset, log_end_offset })
    }

    /// Puts a produce on the wire and returns the future of its acknowledgement. Produces
    /// started one after another (each `start_produce` awaited before the next) are sent, and so
    /// appended, in that order, however their acknowledgements are awaited: this is how the
    /// [`Producer`] pipelines batches without reordering them.
    pub(crate) async fn start_produce(
        &self,
        topic: &str,
        partition: u32,
        batch: Bytes,
    ) -> Result<
        impl std::future::Future<Output = Result<ProduceAck, ClientError>> + Send + 'static,
        ClientError,
    > {
        let timeout = self.config.request_timeout;
        let request = Request::Produce {
            topic: topic.to_owned(),
            partition,
            batch,
        };
        let slot = tokio::time::timeout(timeout, self.connection.enqueue(request))
            .await
            .map_err(|_| ClientError::Timeout { after: timeout })??;
        let connection = Arc::clone(&self.connection);
        Ok(async move {
            let response = tokio::time::timeout(timeout, connection.response(slot))
                .await
                .map_err(|_| ClientError::Timeout { after: timeout })??;
            expect_response!(response, Response::Produce { base_offset, last_offset, log_end_offset } => ProduceAck { base_offset, last_offset, log_end_offset })
        })
    }

    /// Reads records from `offset` on: at least the batch holding `offset` if it exists, then
    /// more while the batches fit in `max_bytes`. If nothing is available yet, the server waits
    /// up to `max_wait` for new records (long polling) and may answer with none.
    ///
    /// Each batch's CRC is checked again here; records below `offset` (the first batch may
    /// start earlier) are dropped.
    pub async fn fetch(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait: Duration,
    ) -> Result<FetchResult, ClientError> {
        let max_wait_ms = u32::try_from(max_wait.as_millis()).unwrap_or(u32::MAX);
        let timeout = self
            .config
            .request_timeout
            .max(Duration::from_millis(max_wait_ms.into()) + self.config.fetch_slack);
        let response = self
            .connection
            .call(
                Request::Fetch {
                    topic: topic.to_owned(),
                    partition,
                    offset,
                    max_bytes,
                    max_wait_ms,
                },
                timeout,
            )
            .await?;
        let (high_watermark, log_start_offset, batches) = expect_response!(response,
            Response::Fetch { high_watermark, log_start_offset, batches } => (high_watermark, log_start_offset, batches))?;
        let mut records = Vec::new();
        for chunk in batches {
            decode_batches_into(chunk, &mut records)?;
        }
        records.retain(|record| record.offset >= offset);
        Ok(FetchResult {
            high_watermark,
            log_start_offset,
            records,
        })
    }

    /// A partition's offset range and current epoch.
    pub async fn list_offsets(&self, topic: &str, partition: u32) -> Result<Offsets, ClientError> {
        let response = self
            .call(Request::ListOffsets {
                topic: topic.to_owned(),
                partition,
            })
            .await?;
        expect_response!(response, Response::ListOffsets { earliest, latest, epoch } => Offsets { earliest, latest, epoch })
    }
}
