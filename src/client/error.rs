//! [`ClientError`], the one error type of every client call, and what callers ask of it
//! (`is_fencing`, `is_retriable`, the wire code behind it).
//!
//! It lives apart from the calls that return it because every part of the client (connections,
//! routing, the producer and consumer) builds and inspects it: one place says what each
//! failure means and which of them are worth retrying.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::batch::BatchError;
use crate::domain::{LeaderEpoch, NodeId};
use crate::protocol::{ErrorCode, ErrorDetails, ErrorResponse, Outcome, ProtocolError};

/// Everything that can go wrong in a client call, typed so that callers can act on it.
///
/// The fencing-related variants ([`Fenced`](Self::Fenced), [`UnknownEpoch`](Self::UnknownEpoch),
/// [`LeaseLost`](Self::LeaseLost)) mean "stop writing with this epoch"; they are never worth
/// retrying as they are. Server errors without a dedicated variant arrive as
/// [`Server`](Self::Server) with their [`ErrorCode`].
// One failure is reported to every request it concerns (all requests in flight on a failed
// connection, all sends of a fenced producer), hence `Clone`. The I/O errors are shared behind an
// `Arc`, since `std::io::Error` itself cannot be cloned.
#[derive(Debug, Clone, thiserror::Error)]
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
    #[error("{}", lease_lost_message(*current_epoch, holder, *expires_in))]
    LeaseLost {
        /// The partition's current epoch as reported by the server.
        current_epoch: u64,
        /// Who holds the partition's live lease, whose id is not the one given (mistyped, or
        /// superseded); empty when no lease is live, or from a server that does not say.
        holder: String,
        /// Time until that live lease expires unless renewed, as of the answer (zero when
        /// `holder` is empty).
        expires_in: Duration,
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
    /// (retention or DeleteRecords removed it) or beyond the high watermark. Seek into `earliest..=latest`.
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
    /// A produce was sent and no answer came (its connection failed, or the producer stopped
    /// for another reason while it was on the wire): the server may or may not have appended
    /// it, and sending it again without a producer id could append it twice. Read the partition
    /// (or use an idempotent [`Producer`](super::Producer), whose resends are safe) to find out.
    #[error("outcome unknown: the produce was sent but no answer came ({cause}); it may or may not have been appended")]
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
    Io(#[source] Arc<std::io::Error>),
    /// The address could not be resolved.
    #[error("cannot resolve address: {source}")]
    Resolve {
        /// The resolver's error.
        source: Arc<std::io::Error>,
    },
    /// No connection could be made.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address tried (the last one, if it resolved to several).
        addr: SocketAddr,
        /// Why it failed.
        source: Arc<std::io::Error>,
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
    /// producer's batches land in order or not at all.
    /// [`Producer::resume`](super::Producer::resume) starts again.
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
            ErrorCode::LeaseLost => {
                let (holder, expires_in) = match error.details {
                    Some(ErrorDetails::LeaseLost {
                        holder,
                        expires_in_ms,
                    }) => (holder, Duration::from_millis(expires_in_ms)),
                    _ => (String::new(), Duration::ZERO),
                };
                ClientError::LeaseLost {
                    current_epoch: error.current_epoch,
                    holder,
                    expires_in,
                }
            }
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

    /// What this error says about a produced batch: [`Outcome::NotWritten`],
    /// [`Outcome::Written`] or [`Outcome::Unknown`]. Server answers follow the one table,
    /// [`ErrorCode::outcome`]; a request that was sent and got no answer (a timeout, a broken
    /// connection, [`ClientError::OutcomeUnknown`]) is unknown; a record behind a failed batch
    /// ([`ClientError::ProducerHalted`]) was not written when that batch was not (the server
    /// refuses the gap), and is unknown otherwise (it may have been on the wire already).
    /// Errors raised before anything was sent (bad arguments, no connection) are not written.
    pub fn outcome(&self) -> Outcome {
        match self {
            ClientError::Timeout { .. }
            | ClientError::Disconnected
            | ClientError::Io(_)
            | ClientError::Protocol(_)
            | ClientError::OutcomeUnknown { .. } => Outcome::Unknown,
            ClientError::ProducerHalted { cause } => match cause.outcome() {
                Outcome::NotWritten => Outcome::NotWritten,
                Outcome::Written | Outcome::Unknown => Outcome::Unknown,
            },
            // Only sends the producer never put on the wire fail with these.
            ClientError::Closed | ClientError::LeaseExpired { .. } => Outcome::NotWritten,
            other => other.code().map_or(Outcome::NotWritten, ErrorCode::outcome),
        }
    }

    /// Whether this answer to a produce speaks for every earlier send of the same batch too
    /// (see [`ErrorCode::covers_earlier_sends`]).
    pub fn covers_earlier_sends(&self) -> bool {
        self.code().is_some_and(ErrorCode::covers_earlier_sends)
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

/// [`ClientError::LeaseLost`]'s message: where the partition is, and while another lease is
/// live, that the lease id given is not that lease's, and whose lease it is.
fn lease_lost_message(current_epoch: u64, holder: &str, expires_in: Duration) -> String {
    if holder.is_empty() {
        return format!(
            "lease lost: the partition is at epoch {current_epoch}; acquire a new lease"
        );
    }
    format!(
        "lease lost: the lease id does not match the live lease, which {holder:?} holds at epoch {current_epoch} for another {} ms (the id is mistyped, or a newer lease superseded yours); acquire a new lease once it ends",
        expires_in.as_millis()
    )
}

impl From<std::io::Error> for ClientError {
    fn from(error: std::io::Error) -> Self {
        ClientError::Io(Arc::new(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_shares_the_io_error_and_says_the_same() {
        let error = ClientError::from(std::io::Error::from_raw_os_error(libc::ECONNRESET));
        let copy = error.clone();
        assert_eq!(copy.to_string(), error.to_string());
        match (&error, &copy) {
            (ClientError::Io(original), ClientError::Io(shared)) => {
                assert!(Arc::ptr_eq(original, shared));
                assert_eq!(shared.raw_os_error(), Some(libc::ECONNRESET));
            }
            other => panic!("expected two Io errors, got {other:?}"),
        }
        assert!(copy.is_retriable());
        assert!(std::error::Error::source(&copy).is_some());
    }

    #[test]
    fn a_clone_of_a_protocol_io_error_shares_it() {
        // ProtocolError derives Clone too: the transport error inside is shared, not copied
        // by kind and message, so its OS error code survives.
        let error = ClientError::Protocol(ProtocolError::from(std::io::Error::from_raw_os_error(
            libc::EPIPE,
        )));
        match (&error, &error.clone()) {
            (
                ClientError::Protocol(ProtocolError::Io(original)),
                ClientError::Protocol(ProtocolError::Io(shared)),
            ) => {
                assert!(Arc::ptr_eq(original, shared));
                assert_eq!(shared.raw_os_error(), Some(libc::EPIPE));
            }
            other => panic!("expected two protocol Io errors, got {other:?}"),
        }
    }

    #[test]
    fn the_messages_of_the_io_variants_name_the_io_error() {
        let io = |message: &str| Arc::new(std::io::Error::other(message.to_owned()));
        let connect = ClientError::Connect {
            addr: SocketAddr::from(([127, 0, 0, 1], 1)),
            source: io("refused"),
        };
        assert_eq!(
            connect.to_string(),
            "cannot connect to 127.0.0.1:1: refused"
        );
        let resolve = ClientError::Resolve {
            source: io("no such host"),
        };
        assert_eq!(
            resolve.clone().to_string(),
            "cannot resolve address: no such host"
        );
        assert_eq!(
            ClientError::Io(io("reset")).to_string(),
            "connection error: reset"
        );
        let protocol = ClientError::Protocol(ProtocolError::Malformed("short".into()));
        assert_eq!(
            protocol.clone().to_string(),
            "protocol error: malformed frame: short"
        );
    }
}
