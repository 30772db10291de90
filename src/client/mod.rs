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
//!
//! The server answers the requests of one connection in the order it received them, so a
//! long-polling fetch delays the responses queued behind it. Give a long-polling [`Consumer`] its
//! own [`Client`] when the latency of other requests matters.

mod authenticate;
mod builder;
mod connection;
mod consumer;
mod metadata_cache;
mod offsets;
mod producer;
mod producer_id;
mod reconnect;
mod retry;
mod routing;
mod tls;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::ToSocketAddrs;
use tokio::time::Instant;

use crate::batch::{decode_batches_into, BatchError};
use crate::domain::{LeaderEpoch, NodeId};
use crate::protocol::{
    Acks, ApiVersionRange, BrokerMetadata, ErrorCode, ErrorDetails, ErrorResponse,
    PartitionMetadata, ProtocolError, Replication, Request, Response, TopicConfig, TopicMetadata,
    DEFAULT_MAX_FRAME_BYTES, NO_OFFSET_FOR_TIMESTAMP,
};

pub use crate::batch::{BatchBuilder, Record};
pub use authenticate::Credentials;
pub use builder::ClientBuilder;
pub use consumer::{
    Consumer, ConsumerBuilder, StartAt, DEFAULT_CONSUMER_MAX_BYTES, DEFAULT_CONSUMER_MAX_WAIT,
};
pub use metadata_cache::{MAX_CACHED_PARTITIONS, METADATA_MAX_AGE};
pub use offsets::CommittedOffset;
pub use producer::{
    Producer, ProducerBuilder, ProducerConfig, ProducerStats, SendError, DEFAULT_DELIVERY_TIMEOUT,
};
pub use producer_id::ProducerId;
pub use routing::{MAX_BROKER_CONNECTIONS, MAX_ROUTING_ATTEMPTS};
pub use tls::TlsClientConfig;

use reconnect::Endpoint;
use retry::RetryDelay;
use routing::Routing;

/// Default most requests in flight on one connection.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;
/// Default time allowed to establish the TCP connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time allowed for a request, from queueing to response.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Extra time a fetch is allowed beyond its `max_wait`.
pub const DEFAULT_FETCH_SLACK: Duration = Duration::from_secs(5);
/// Default pause after the first failed reconnect attempt (then doubled, with jitter).
pub const DEFAULT_RECONNECT_BACKOFF_INITIAL: Duration = Duration::from_millis(50);
/// Default longest pause between reconnect attempts.
pub const DEFAULT_RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Default most time one call spends reconnecting before it fails with the last connect error.
pub const DEFAULT_RECONNECT_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// Someone holds a live lease on the partition; retry after `expires_in`.
    #[error("lease held: {message}")]
    LeaseHeld {
        /// The server's explanation (names the holder and the time left).
        message: String,
        /// Who holds the live lease (empty from a server that does not send it).
        holder: String,
        /// Time until the live lease expires unless renewed, as of the answer (zero from a
        /// server that does not send it).
        expires_in: Duration,
        /// The epoch of the live lease.
        current_epoch: u64,
    },
    /// A fetch asked for an offset outside the partition's readable range: below the log start
    /// (retention removed it) or beyond the high watermark. Seek into `earliest..=latest`.
    #[error("offset {offset} is out of range: the partition holds offsets {earliest}..{latest}")]
    OffsetOutOfRange {
        /// The offset asked for.
        offset: u64,
        /// The log start offset: the oldest offset still stored.
        earliest: u64,
        /// The high watermark: the next offset to be readable.
        latest: u64,
    },
    /// The broker asked does not lead the partition. `leader` and `address` name the leader it
    /// knows (`None` and empty when it knows none); the client sends the request there by
    /// itself, so a caller sees this only when the leader kept moving for every attempt.
    #[error("NOT_LEADER: {message}")]
    NotLeader {
        /// The server's explanation, naming the leader.
        message: String,
        /// The leader's node id, if known.
        leader: Option<NodeId>,
        /// `host:port` of the leader (empty when not known).
        address: String,
        /// The leader epoch the broker knows the leader by.
        leader_epoch: LeaderEpoch,
    },
    /// A produce (not from an idempotent producer) lost its connection after it was sent: the
    /// server may or may not have appended it, and sending it again could append it twice. Read
    /// the partition (or use an idempotent [`Producer`], whose resends are safe) to find out.
    #[error("outcome unknown: the produce was sent but its connection failed before the answer ({cause}); it may or may not have been appended")]
    OutcomeUnknown {
        /// The transport failure.
        cause: Box<ClientError>,
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
    /// TLS failed with the server: a certificate this client does not trust, a server that
    /// does not speak TLS (or speaks it to a client without TLS), a client certificate the
    /// server refused. Not retriable as it is: the reason says what to change.
    #[error("TLS with {addr} failed: {reason}")]
    Tls {
        /// The server's address.
        addr: SocketAddr,
        /// What went wrong, and what to do about it.
        reason: String,
    },
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
    /// The server refused the credentials (wrong user name or password: it does not say which),
    /// or, with `--auth`, no credentials were given. Not retriable: fix the credentials.
    #[error("{message}")]
    AuthenticationFailed {
        /// The server's (or the client's own) explanation.
        message: String,
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
            ErrorCode::LeaseHeld => {
                let (holder, expires_in) = match error.details {
                    Some(ErrorDetails::LeaseHeld {
                        holder,
                        expires_in_ms,
                    }) => (holder, Duration::from_millis(expires_in_ms)),
                    _ => (String::new(), Duration::ZERO),
                };
                ClientError::LeaseHeld {
                    message: error.message,
                    holder,
                    expires_in,
                    current_epoch: error.current_epoch,
                }
            }
            ErrorCode::OffsetOutOfRange => match error.details {
                Some(ErrorDetails::OffsetOutOfRange {
                    offset,
                    earliest,
                    latest,
                }) => ClientError::OffsetOutOfRange {
                    offset,
                    earliest,
                    latest,
                },
                // A server that predates the details: the message is all there is.
                _ => ClientError::Server {
                    code: ErrorCode::OffsetOutOfRange,
                    message: error.message,
                },
            },
            ErrorCode::NotLeader => {
                let (leader, address, leader_epoch) = match error.details {
                    Some(ErrorDetails::NotLeader {
                        leader,
                        address,
                        leader_epoch,
                    }) => (leader, address, leader_epoch),
                    _ => (None, String::new(), 0),
                };
                ClientError::NotLeader {
                    message: error.message,
                    leader,
                    address,
                    leader_epoch,
                }
            }
            ErrorCode::AuthenticationFailed | ErrorCode::AuthenticationRequired => {
                ClientError::AuthenticationFailed {
                    message: format!("{}: {}", error.code, error.message),
                }
            }
            code => ClientError::Server {
                code,
                message: error.message,
            },
        }
    }

    /// True when the server refused the credentials (or asked for some): not retriable.
    pub fn is_authentication_failure(&self) -> bool {
        matches!(self, ClientError::AuthenticationFailed { .. })
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
            ClientError::OffsetOutOfRange { .. } => Some(ErrorCode::OffsetOutOfRange),
            ClientError::NotLeader { .. } => Some(ErrorCode::NotLeader),
            ClientError::Server { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// True when a produce's outcome is unknown: it was sent, and its connection failed before
    /// the answer ([`ClientError::OutcomeUnknown`]).
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, ClientError::OutcomeUnknown { .. })
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
                holder,
                expires_in,
                current_epoch,
            } => ClientError::LeaseHeld {
                message: message.clone(),
                holder: holder.clone(),
                expires_in: *expires_in,
                current_epoch: *current_epoch,
            },
            ClientError::OffsetOutOfRange {
                offset,
                earliest,
                latest,
            } => ClientError::OffsetOutOfRange {
                offset: *offset,
                earliest: *earliest,
                latest: *latest,
            },
            ClientError::Server { code, message } => ClientError::Server {
                code: *code,
                message: message.clone(),
            },
            ClientError::NotLeader {
                message,
                leader,
                address,
                leader_epoch,
            } => ClientError::NotLeader {
                message: message.clone(),
                leader: *leader,
                address: address.clone(),
                leader_epoch: *leader_epoch,
            },
            ClientError::OutcomeUnknown { cause } => ClientError::OutcomeUnknown {
                cause: cause.clone(),
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
            ClientError::Tls { addr, reason } => ClientError::Tls {
                addr: *addr,
                reason: reason.clone(),
            },
            ClientError::CorruptBatch(error) => ClientError::CorruptBatch(error.clone()),
            ClientError::Closed => ClientError::Closed,
            ClientError::InvalidArgument(message) => ClientError::InvalidArgument(message.clone()),
            ClientError::ProducerHalted { cause } => ClientError::ProducerHalted {
                cause: cause.clone(),
            },
            ClientError::LeaseExpired { unconfirmed_for } => ClientError::LeaseExpired {
                unconfirmed_for: *unconfirmed_for,
            },
            ClientError::AuthenticationFailed { message } => ClientError::AuthenticationFailed {
                message: message.clone(),
            },
        }
    }
}

/// Limits and timeouts of a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Time allowed to establish the TCP connection (per resolved address), and as much again
    /// for the TLS handshake when [`tls`](Self::tls) is set.
    pub connect_timeout: Duration,
    /// Time allowed for a request, from queueing to its response.
    pub request_timeout: Duration,
    /// A fetch is allowed `max(request_timeout, max_wait + fetch_slack)`.
    pub fetch_slack: Duration,
    /// Most requests in flight on the connection; more callers wait for a slot.
    pub max_in_flight: usize,
    /// Largest frame sent or accepted; at least the server's limit.
    pub max_frame_bytes: usize,
    /// Pause after the first failed reconnect attempt; doubled after each further failure.
    pub reconnect_backoff_initial: Duration,
    /// Longest pause between reconnect attempts.
    pub reconnect_backoff_max: Duration,
    /// Most time one call spends reconnecting before it fails with the last connect error.
    pub reconnect_timeout: Duration,
    /// TLS with every server connected to when set (the handshake is part of connecting, within
    /// `connect_timeout`); plain TCP otherwise.
    pub tls: Option<TlsClientConfig>,
    /// User name and password for servers with `--auth`: the client authenticates (SCRAM-SHA-256)
    /// on every new connection before using it. `None` connects without authenticating.
    pub credentials: Option<Credentials>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            fetch_slack: DEFAULT_FETCH_SLACK,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            reconnect_backoff_initial: DEFAULT_RECONNECT_BACKOFF_INITIAL,
            reconnect_backoff_max: DEFAULT_RECONNECT_BACKOFF_MAX,
            reconnect_timeout: DEFAULT_RECONNECT_TIMEOUT,
            tls: None,
            credentials: None,
        }
    }
}

impl ClientConfig {
    /// Checks the reconnect values: the initial backoff must be positive and the cap at least
    /// the initial backoff.
    pub fn validate(&self) -> Result<(), ClientError> {
        if self.reconnect_backoff_initial.is_zero() {
            return Err(ClientError::InvalidArgument(
                "reconnect_backoff_initial must be positive".to_owned(),
            ));
        }
        if self.reconnect_backoff_max < self.reconnect_backoff_initial {
            return Err(ClientError::InvalidArgument(
                "reconnect_backoff_max must be at least reconnect_backoff_initial".to_owned(),
            ));
        }
        Ok(())
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

/// A fetch answer whose batches are not checked or decoded yet (see [`Client::fetch_batches`]):
/// a consumer can ask for the next range ([`next_offset`](Self::next_offset), read from the
/// batch headers alone) before it spends the time to [`decode`](Self::decode) this one, so
/// that the server sends while the consumer decodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedBatches {
    /// One past the last offset readers can see.
    pub high_watermark: u64,
    /// Oldest offset still stored.
    pub log_start_offset: u64,
    /// The offset the fetch asked for (records below it are dropped by `decode`).
    pub offset: u64,
    /// The stored batches as received, unchecked.
    pub batches: Vec<Bytes>,
}

impl FetchedBatches {
    /// The offset after the last record the batches hold, read from their headers without
    /// checking them: where the next fetch starts. `None` when there are no batches or their
    /// framing is unreadable (then [`decode`](Self::decode) says what is wrong). A batch whose
    /// CRC turns out bad still fails `decode`: a consumer that fetched ahead from this offset
    /// discards that answer with the error.
    pub fn next_offset(&self) -> Option<u64> {
        let mut next = None;
        for chunk in &self.batches {
            let mut rest: &[u8] = chunk;
            while !rest.is_empty() {
                let header = crate::batch::BatchHeader::parse(rest)?;
                let length = header.batch_length as usize;
                if length < crate::batch::HEADER_BYTES || length > rest.len() {
                    return None;
                }
                next = Some(
                    header
                        .base_offset
                        .checked_add(u64::from(header.record_count))?,
                );
                rest = &rest[length..];
            }
        }
        next
    }

    /// Checks every batch (length and CRC) and splits them into records from the requested
    /// offset on.
    pub fn decode(self) -> Result<FetchResult, ClientError> {
        let mut records = Vec::new();
        for chunk in self.batches {
            decode_batches_into(chunk, &mut records)?;
        }
        records.retain(|record| record.offset >= self.offset);
        Ok(FetchResult {
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start_offset,
            records,
        })
    }
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

/// The answer to [`Client::cluster_metadata`]: the cluster as the answering broker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    /// The topics described.
    pub topics: Vec<TopicMetadata>,
    /// The live brokers (a standalone server: itself).
    pub brokers: Vec<BrokerMetadata>,
    /// Each partition of those topics: leader, leader epoch, replicas, ISR, high watermark.
    pub partitions: Vec<PartitionMetadata>,
}

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
                    source: std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer within {:?}", config.connect_timeout),
                    ),
                })?
                .map_err(|source| ClientError::Resolve { source })?
                .map(|addr| addr.to_string())
                .collect();
        if addrs.is_empty() {
            return Err(ClientError::Resolve {
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the address resolved to nothing",
                ),
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
        config.validate()?;
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

    /// Sends any request on the bootstrap connection and returns its response (an error
    /// response as [`ClientError::Server`]), within `timeout`, without routing. For brokers'
    /// replication (a follower's `ReplicaFetch` and `LeaderEpochEnd` to its leader) and tools.
    pub async fn request(
        &self,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, ClientError> {
        self.call_within(request, timeout).await
    }

    async fn call(&self, request: Request) -> Result<Response, ClientError> {
        self.call_within(request, self.config().request_timeout)
            .await
    }

    /// Sends `request` on the bootstrap connection (see [`call_on`]).
    async fn call_within(
        &self,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, ClientError> {
        call_on(&self.endpoint, request, timeout).await
    }

    /// Sends a request about `topic`/`partition` to the partition's leader as the client knows
    /// it (the bootstrap connection until it knows better), following `NOT_LEADER` hints and
    /// sending the request again when that is safe (`retry::may_resend`), at most
    /// [`MAX_ROUTING_ATTEMPTS`] times within `timeout`. A produce that is not idempotent and
    /// lost its connection after being sent fails with [`ClientError::OutcomeUnknown`].
    async fn call_partition(
        &self,
        topic: &str,
        partition: u32,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, ClientError> {
        let deadline = Instant::now() + timeout;
        let idempotent = retry::is_idempotent(&request);
        let is_produce = request.api_key() == crate::protocol::ApiKey::Produce;
        let mut delay = RetryDelay::new(self.config());
        let mut attempt = 0;
        loop {
            attempt += 1;
            let sent = match self.routing.endpoint_for(topic, partition, deadline).await {
                // Nothing was sent: any request may go again once the view is refreshed.
                Err(error) => Err((error, false)),
                Ok(endpoint) => {
                    let remaining = routing::remaining(deadline);
                    call_on(&endpoint, request.clone(), remaining)
                        .await
                        .map_err(|error| match error {
                            // The caller's budget is the whole request's, not this attempt's.
                            ClientError::Timeout { .. } => {
                                (ClientError::Timeout { after: timeout }, true)
                            }
                            other => (other, true),
                        })
                }
            };
            let (error, was_sent) = match sent {
                Ok(response) => return Ok(response),
                Err(failed) => failed,
            };
            self.routing.learn(topic, partition, &error);
            let again = if was_sent {
                retry::may_resend(&error, idempotent)
            } else {
                self.routing.routes()
            };
            if !again || attempt >= MAX_ROUTING_ATTEMPTS || !delay.wait(deadline).await {
                if was_sent && is_produce && !idempotent && retry::is_transport_failure(&error) {
                    return Err(ClientError::OutcomeUnknown {
                        cause: Box::new(error),
                    });
                }
                return Err(error);
            }
            tracing::debug!(%error, topic, partition, attempt, "sending the request again");
        }
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
                replication: None,
            })
            .await?;
        expect_response!(response, Response::CreateTopic => ())
    }

    /// Creates a topic whose partitions are each held by `replication.factor` brokers
    /// (`CreateTopic` version 1). A standalone server accepts only a factor of 1 and refuses
    /// more with `CLUSTER_REQUIRED` ("replication needs a cluster: start the brokers with
    /// --etcd").
    pub async fn create_replicated_topic(
        &self,
        name: &str,
        partitions: u32,
        config: TopicConfig,
        replication: Replication,
    ) -> Result<(), ClientError> {
        let response = self
            .call(Request::CreateTopic {
                name: name.to_owned(),
                partitions,
                config,
                replication: Some(replication),
            })
            .await?;
        expect_response!(response, Response::CreateTopic => ())
    }

    /// Deletes a topic with its data, leases and every group's committed offsets for it. Fails
    /// with `UNKNOWN_TOPIC` if there is none. Not repeated after a lost connection (a repeat would
    /// answer `UNKNOWN_TOPIC` for the topic the first attempt deleted).
    pub async fn delete_topic(&self, name: &str) -> Result<(), ClientError> {
        let response = self
            .call(Request::DeleteTopic {
                name: name.to_owned(),
            })
            .await?;
        expect_response!(response, Response::DeleteTopic => ())
    }

    /// Describes the named topics, in the order asked; an empty list means all topics (sorted
    /// by name). Fails with `UNKNOWN_TOPIC` if any named topic does not exist.
    pub async fn metadata<S: AsRef<str>>(
        &self,
        topics: &[S],
    ) -> Result<Vec<TopicMetadata>, ClientError> {
        let topics = topics.iter().map(|t| t.as_ref().to_owned()).collect();
        let response = self
            .call(Request::Metadata {
                topics,
                cluster: false,
            })
            .await?;
        expect_response!(response, Response::Metadata { topics, .. } => topics)
    }

    /// Describes the cluster (`Metadata` version 1), as the bootstrap server that answers sees
    /// it: the brokers, and each partition of the named topics (all when empty) with its leader,
    /// leader epoch, replicas, in-sync replicas and high watermark. A standalone server is one
    /// broker leading everything in leader epoch 0. The client's routing learns from the answer.
    pub async fn cluster_metadata<S: AsRef<str>>(
        &self,
        topics: &[S],
    ) -> Result<ClusterInfo, ClientError> {
        let topics = topics.iter().map(|t| t.as_ref().to_owned()).collect();
        let deadline = Instant::now() + self.config().request_timeout;
        let answer = self.routing.describe(topics, deadline).await?;
        Ok(ClusterInfo {
            topics: answer.topics,
            brokers: answer.cluster.brokers,
            partitions: answer.cluster.partitions,
        })
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
        let request = Request::AcquireLease {
            topic: topic.to_owned(),
            partition,
            holder: holder.to_owned(),
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        };
        let response = self.call_routed(topic, partition, request).await?;
        expect_response!(response, Response::AcquireLease { epoch, lease_id, ttl_ms } => Lease { epoch, lease_id, ttl_ms })
    }

    /// Extends a live lease by its TTL. Fails with [`ClientError::LeaseLost`] if it is gone.
    pub async fn renew_lease(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
    ) -> Result<RenewedLease, ClientError> {
        let request = Request::RenewLease {
            topic: topic.to_owned(),
            partition,
            lease_id,
        };
        let response = self.call_routed(topic, partition, request).await?;
        expect_response!(response, Response::RenewLease { epoch, ttl_ms } => RenewedLease { epoch, ttl_ms })
    }

    /// Ends a live lease at once, so another writer can acquire the partition.
    pub async fn release_lease(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
    ) -> Result<(), ClientError> {
        let request = Request::ReleaseLease {
            topic: topic.to_owned(),
            partition,
            lease_id,
        };
        let response = self.call_routed(topic, partition, request).await?;
        expect_response!(response, Response::ReleaseLease => ())
    }

    /// Sends a request about `topic`/`partition` to its leader within the request timeout.
    async fn call_routed(
        &self,
        topic: &str,
        partition: u32,
        request: Request,
    ) -> Result<Response, ClientError> {
        let timeout = self.config().request_timeout;
        self.call_partition(topic, partition, request, timeout)
            .await
    }

    /// Appends one record batch (built with [`BatchBuilder`], epoch in its header), sent to the
    /// partition's leader, acknowledged with the default `acks`: `all` on a partition the client
    /// knows is replicated, else the broker's default (the same rule, decided by the broker).
    ///
    /// Fails with [`ClientError::Fenced`] if a newer epoch exists; the batch was not written.
    /// A batch of an idempotent producer (magic 3) is sent again after a lost connection; any
    /// other batch then fails with [`ClientError::OutcomeUnknown`].
    pub async fn produce(
        &self,
        topic: &str,
        partition: u32,
        batch: Bytes,
    ) -> Result<ProduceAck, ClientError> {
        let acks = self.routing.default_acks(topic, partition);
        self.produce_acks(topic, partition, batch, acks).await
    }

    /// [`produce`](Self::produce) acknowledged as `acks` says (`Produce` version 1): `Leader`
    /// once the leader has the batch, `All` once every in-sync replica has it. A standalone
    /// server treats both alike (it is the only replica).
    pub async fn produce_with_acks(
        &self,
        topic: &str,
        partition: u32,
        batch: Bytes,
        acks: Acks,
    ) -> Result<ProduceAck, ClientError> {
        self.produce_acks(topic, partition, batch, Some(acks)).await
    }

    async fn produce_acks(
        &self,
        topic: &str,
        partition: u32,
        batch: Bytes,
        acks: Option<Acks>,
    ) -> Result<ProduceAck, ClientError> {
        let request = Request::Produce {
            topic: topic.to_owned(),
            partition,
            batch,
            acks,
        };
        let response = self.call_routed(topic, partition, request).await?;
        expect_response!(response, Response::Produce { base_offset, last_offset, log_end_offset } => ProduceAck { base_offset, last_offset, log_end_offset })
    }

    /// Puts a produce on the wire and returns the future of its acknowledgement. Produces
    /// started one after another (each `start_produce` awaited before the next) are sent, and so
    /// appended, in that order, however their acknowledgements are awaited: this is how the
    /// [`Producer`] pipelines batches without reordering them.
    ///
    /// If the connection is dead this reconnects first (within the request timeout). A produce
    /// already on the wire when its connection fails is not sent again: its acknowledgement
    /// fails with the transport error, and the produces started after it go on the new
    /// connection. The server orders appends per connection only, so the caller that retries
    /// the failed one must expect it after those (sequence numbers are what make that safe).
    pub(crate) async fn start_produce(
        &self,
        topic: &str,
        partition: u32,
        batch: Bytes,
        acks: Option<Acks>,
    ) -> Result<
        impl std::future::Future<Output = Result<ProduceAck, ClientError>> + Send + 'static,
        ClientError,
    > {
        let timeout = self.config().request_timeout;
        let deadline = Instant::now() + timeout;
        let mut delay = RetryDelay::new(self.config());
        let acks = acks.or_else(|| self.routing.default_acks(topic, partition));
        let mut request = Request::Produce {
            topic: topic.to_owned(),
            partition,
            batch,
            acks,
        };
        let endpoint = self
            .routing
            .endpoint_for(topic, partition, deadline)
            .await?;
        let (connection, slot) = loop {
            let connection = endpoint.connection(deadline).await?;
            match tokio::time::timeout_at(deadline, connection.enqueue(request)).await {
                Err(_) => return Err(ClientError::Timeout { after: timeout }),
                Ok(Ok(slot)) => break (connection, slot),
                // Refused unsent: safe to put on the next connection, still in order.
                Ok(Err(not_sent)) => {
                    request = not_sent.request;
                    if !delay.wait(deadline).await {
                        return Err(not_sent.error);
                    }
                }
            }
        };
        let routing = Arc::clone(&self.routing);
        let topic = topic.to_owned();
        Ok(async move {
            let response = tokio::time::timeout(timeout, connection.response(slot))
                .await
                .map_err(|_| ClientError::Timeout { after: timeout })?
                // A new leader, or a lost connection to one: the next batch goes where it leads.
                .inspect_err(|error| routing.learn(&topic, partition, error))?;
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
        self.fetch_batches(topic, partition, offset, max_bytes, max_wait)
            .await?
            .decode()
    }

    /// [`fetch`](Self::fetch) without the check and decoding of the batches, which the caller
    /// does with [`FetchedBatches::decode`] (after asking for the next range, if it likes).
    pub async fn fetch_batches(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait: Duration,
    ) -> Result<FetchedBatches, ClientError> {
        let max_wait_ms = u32::try_from(max_wait.as_millis()).unwrap_or(u32::MAX);
        let config = self.config();
        let timeout = config
            .request_timeout
            .max(Duration::from_millis(max_wait_ms.into()) + config.fetch_slack);
        let request = Request::Fetch {
            topic: topic.to_owned(),
            partition,
            offset,
            max_bytes,
            max_wait_ms,
        };
        let response = self
            .call_partition(topic, partition, request, timeout)
            .await?;
        expect_response!(response,
        Response::Fetch { high_watermark, log_start_offset, batches } => FetchedBatches {
            high_watermark,
            log_start_offset,
            offset,
            batches,
        })
    }

    /// A partition's offset range and current epoch.
    pub async fn list_offsets(&self, topic: &str, partition: u32) -> Result<Offsets, ClientError> {
        let request = Request::ListOffsets {
            topic: topic.to_owned(),
            partition,
            timestamp: None,
        };
        let response = self.call_routed(topic, partition, request).await?;
        expect_response!(response, Response::ListOffsets { earliest, latest, epoch, .. } => Offsets { earliest, latest, epoch })
    }

    /// The first offset whose record timestamp is at or after `timestamp` (ms since the Unix
    /// epoch), or `None` if no record is that recent. Timestamps are the producers', so they
    /// need not grow with offsets: this is the *smallest* such offset.
    ///
    /// Uses `ListOffsets` version 1; a server that only knows version 0 answers
    /// `UNSUPPORTED_VERSION` (as [`ClientError::Server`]).
    pub async fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> Result<Option<u64>, ClientError> {
        let request = Request::ListOffsets {
            topic: topic.to_owned(),
            partition,
            timestamp: Some(timestamp),
        };
        let response = self.call_routed(topic, partition, request).await?;
        let found = expect_response!(response,
            Response::ListOffsets { offset_for_timestamp: Some(found), .. } => found)?;
        if found == NO_OFFSET_FOR_TIMESTAMP {
            return Ok(None);
        }
        u64::try_from(found).map(Some).map_err(|_| {
            ClientError::Protocol(ProtocolError::Malformed(format!(
                "ListOffsets offset_for_timestamp {found} is neither an offset nor -1"
            )))
        })
    }
}

/// Sends `request` on a live connection of `endpoint` (reconnecting if needed) and waits for its
/// response, all within `timeout`. A request refused unsent by a dead connection is sent on the
/// next; one that failed with its connection is sent again only if its API is safe to repeat.
pub(crate) async fn call_on(
    endpoint: &Endpoint,
    request: Request,
    timeout: Duration,
) -> Result<Response, ClientError> {
    let deadline = Instant::now() + timeout;
    let timed_out = || ClientError::Timeout { after: timeout };
    let repeatable = retry::safe_to_retry(request.api_key());
    let mut delay = RetryDelay::new(endpoint.config());
    let mut request = Some(request);
    loop {
        let connection = endpoint.connection(deadline).await?;
        let Some(unsent) = request.take() else {
            return Err(ClientError::Disconnected);
        };
        let outgoing = if repeatable {
            let copy = unsent.clone();
            request = Some(unsent);
            copy
        } else {
            unsent
        };
        let slot = match tokio::time::timeout_at(deadline, connection.enqueue(outgoing)).await {
            Err(_) => return Err(timed_out()),
            Ok(Ok(slot)) => slot,
            Ok(Err(not_sent)) => {
                request = Some(not_sent.request);
                if !delay.wait(deadline).await {
                    return Err(not_sent.error);
                }
                continue;
            }
        };
        let error = match tokio::time::timeout_at(deadline, connection.response(slot)).await {
            Err(_) => return Err(timed_out()),
            Ok(Ok(response)) => return Ok(response),
            Ok(Err(error)) => error,
        };
        if !(repeatable && retry::is_transport_failure(&error)) {
            return Err(error);
        }
        tracing::debug!(%error, "request failed with its connection; retrying");
        if !delay.wait(deadline).await {
            return Err(error);
        }
    }
}
