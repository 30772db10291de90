//! How failures travel: the body of a failed response ([`ErrorResponse`]), and the error a
//! malformed request decodes to ([`RequestDecodeError`]), which knows how to become one.
//!
//! The error body has one layout for every API (`message, epoch, current_epoch`), so any client
//! can read any failure. A few codes carry more, as [`ErrorDetails`] appended *after* those
//! fields (`LEASE_HELD`: who holds the lease and for how long; `OFFSET_OUT_OF_RANGE`: the range
//! to move into), so a caller can act on them without parsing the message. The decoder reads the
//! details of the codes it knows and ignores any bytes after the fields it knows, which is what
//! lets a later server add details without breaking this client.
//!
//! A request that cannot be parsed is still answered whenever its header was readable, with the
//! request's correlation id and an error code chosen from what went wrong, so that one bad
//! request does not cost a client its connection and every other request in flight on it.

use std::fmt;

use bytes::{BufMut, BytesMut};

use super::node::{put_node, read_node};
use super::wire::{put_str16, str16_len, Reader, WireError};
use super::{ApiKey, ErrorCode, ProtocolError, ResponseFrame};
use crate::domain::{LeaderEpoch, NodeId};

/// The body of a failed response.
///
/// It also implements [`std::error::Error`] so a client can hand it to its
/// caller as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorResponse {
    /// Why the request failed; never [`ErrorCode::None`].
    pub code: ErrorCode,
    /// Human-readable explanation. Encoding cuts it (at a character
    /// boundary) to the 65535 bytes a `string16` can hold rather than fail to
    /// report an error.
    pub message: String,
    /// For `FENCED`, `UNKNOWN_EPOCH` and `LEASE_LOST`: the epoch that was
    /// rejected; otherwise 0.
    pub epoch: u64,
    /// For `FENCED`, `UNKNOWN_EPOCH`, `LEASE_LOST` and `LEASE_HELD`: the partition's
    /// current epoch; otherwise 0.
    pub current_epoch: u64,
    /// The fields some codes carry after the common body; `None` when the code has none, or
    /// when an older server did not send them. Written only when they match `code`.
    pub details: Option<ErrorDetails>,
}

/// Fields an error body carries after `current_epoch`, for the codes that have them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorDetails {
    /// For `LEASE_HELD`: `holder string16, expires_in_ms u64`.
    LeaseHeld {
        /// Who holds the live lease.
        holder: String,
        /// Milliseconds until that lease expires unless it is renewed.
        expires_in_ms: u64,
    },
    /// For `LEASE_LOST` from RenewLease or ReleaseLease while the partition has a live lease
    /// whose id is not the one given (mistyped, or the caller's lease was superseded):
    /// `holder string16, expires_in_ms u64`, the live lease's, as for `LEASE_HELD`. Absent when
    /// no lease is live.
    LeaseLost {
        /// Who holds the live lease.
        holder: String,
        /// Milliseconds until that lease expires unless it is renewed.
        expires_in_ms: u64,
    },
    /// For `OFFSET_OUT_OF_RANGE`: `offset u64, earliest u64, latest u64`.
    OffsetOutOfRange {
        /// The offset asked for.
        offset: u64,
        /// The log start offset: the oldest offset still stored.
        earliest: u64,
        /// The high watermark: the largest offset a fetch may ask for.
        latest: u64,
    },
    /// For `NOT_LEADER`: `leader u32` (`0xffffffff`: not known), `leader_address string16`
    /// (empty when not known), `leader_epoch u32`: the leader the answering broker knows, so
    /// the client can send the request there without asking for metadata first.
    NotLeader {
        /// The leader's node id, if the broker knows one.
        leader: Option<NodeId>,
        /// `host:port` of the leader's native listener (empty when `leader` is `None`).
        address: String,
        /// The leader epoch the broker knows the leader by.
        leader_epoch: LeaderEpoch,
    },
}

impl ErrorDetails {
    /// The error code these details belong to.
    pub fn code(&self) -> ErrorCode {
        match self {
            ErrorDetails::LeaseHeld { .. } => ErrorCode::LeaseHeld,
            ErrorDetails::LeaseLost { .. } => ErrorCode::LeaseLost,
            ErrorDetails::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            ErrorDetails::NotLeader { .. } => ErrorCode::NotLeader,
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            ErrorDetails::LeaseHeld { holder, .. } | ErrorDetails::LeaseLost { holder, .. } => {
                str16_len(truncate_to_char_boundary(holder, usize::from(u16::MAX))) + 8
            }
            ErrorDetails::OffsetOutOfRange { .. } => 8 + 8 + 8,
            ErrorDetails::NotLeader { address, .. } => {
                4 + str16_len(truncate_to_char_boundary(address, usize::from(u16::MAX))) + 4
            }
        }
    }

    fn encode(&self, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        match self {
            ErrorDetails::LeaseHeld {
                holder,
                expires_in_ms,
            }
            | ErrorDetails::LeaseLost {
                holder,
                expires_in_ms,
            } => {
                put_str16(
                    dst,
                    "holder",
                    truncate_to_char_boundary(holder, usize::from(u16::MAX)),
                )?;
                dst.put_u64(*expires_in_ms);
            }
            ErrorDetails::OffsetOutOfRange {
                offset,
                earliest,
                latest,
            } => {
                dst.put_u64(*offset);
                dst.put_u64(*earliest);
                dst.put_u64(*latest);
            }
            ErrorDetails::NotLeader {
                leader,
                address,
                leader_epoch,
            } => {
                put_node(dst, *leader);
                put_str16(
                    dst,
                    "leader_address",
                    truncate_to_char_boundary(address, usize::from(u16::MAX)),
                )?;
                dst.put_u32(*leader_epoch);
            }
        }
        Ok(())
    }

    /// Reads the details of `code` if the body has any left; `None` for codes without details
    /// and for bodies that end after `current_epoch` (an older server).
    fn decode(code: ErrorCode, r: &mut Reader) -> Result<Option<ErrorDetails>, WireError> {
        if r.is_empty() {
            return Ok(None);
        }
        let details = match code {
            ErrorCode::LeaseHeld => ErrorDetails::LeaseHeld {
                holder: r.string16("holder")?,
                expires_in_ms: r.u64("expires_in_ms")?,
            },
            ErrorCode::LeaseLost => ErrorDetails::LeaseLost {
                holder: r.string16("holder")?,
                expires_in_ms: r.u64("expires_in_ms")?,
            },
            ErrorCode::OffsetOutOfRange => ErrorDetails::OffsetOutOfRange {
                offset: r.u64("offset")?,
                earliest: r.u64("earliest")?,
                latest: r.u64("latest")?,
            },
            ErrorCode::NotLeader => ErrorDetails::NotLeader {
                leader: read_node(r, "leader")?,
                address: r.string16("leader_address")?,
                leader_epoch: r.u32("leader_epoch")?,
            },
            _ => return Ok(None),
        };
        Ok(Some(details))
    }
}

impl ErrorResponse {
    /// An error without epoch information.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorResponse {
        ErrorResponse {
            code,
            message: message.into(),
            epoch: 0,
            current_epoch: 0,
            details: None,
        }
    }

    /// An epoch-related error (`FENCED`, `UNKNOWN_EPOCH`, `LEASE_LOST`)
    /// reporting the rejected and the current epoch, so the client can tell
    /// how far behind (or ahead) it is.
    pub fn with_epochs(
        code: ErrorCode,
        message: impl Into<String>,
        epoch: u64,
        current_epoch: u64,
    ) -> ErrorResponse {
        ErrorResponse {
            code,
            message: message.into(),
            epoch,
            current_epoch,
            details: None,
        }
    }

    /// `LEASE_HELD`: someone else's lease on the partition is live, at `current_epoch`, held by
    /// `holder` for another `expires_in_ms`.
    pub fn lease_held(
        message: impl Into<String>,
        current_epoch: u64,
        holder: impl Into<String>,
        expires_in_ms: u64,
    ) -> ErrorResponse {
        ErrorResponse {
            details: Some(ErrorDetails::LeaseHeld {
                holder: holder.into(),
                expires_in_ms,
            }),
            ..ErrorResponse::with_epochs(ErrorCode::LeaseHeld, message, 0, current_epoch)
        }
    }

    /// `LEASE_LOST` from RenewLease or ReleaseLease: the partition is at `current_epoch`, and
    /// `live` (holder, milliseconds left) is its live lease, whose id is not the one given.
    pub fn lease_lost(
        message: impl Into<String>,
        current_epoch: u64,
        live: Option<(String, u64)>,
    ) -> ErrorResponse {
        ErrorResponse {
            details: live.map(|(holder, expires_in_ms)| ErrorDetails::LeaseLost {
                holder,
                expires_in_ms,
            }),
            ..ErrorResponse::with_epochs(ErrorCode::LeaseLost, message, 0, current_epoch)
        }
    }

    /// `OFFSET_OUT_OF_RANGE`: `offset` is outside `[earliest, latest]`.
    pub fn offset_out_of_range(
        message: impl Into<String>,
        offset: u64,
        earliest: u64,
        latest: u64,
    ) -> ErrorResponse {
        ErrorResponse {
            details: Some(ErrorDetails::OffsetOutOfRange {
                offset,
                earliest,
                latest,
            }),
            ..ErrorResponse::new(ErrorCode::OffsetOutOfRange, message)
        }
    }

    /// `NOT_LEADER` for `topic`/`partition`, naming the leader this broker knows (if any) in
    /// the details and in the message, e.g. "not the leader of orders/3: node 2 at
    /// 127.0.0.1:7002 leads (leader epoch 5)".
    pub fn not_leader(
        topic: &str,
        partition: u32,
        leader: Option<(NodeId, String)>,
        leader_epoch: LeaderEpoch,
    ) -> ErrorResponse {
        let message = match &leader {
            Some((node, address)) => format!(
                "not the leader of {topic}/{partition}: node {node} at {address} leads (leader epoch {leader_epoch})"
            ),
            None => format!(
                "not the leader of {topic}/{partition}, and no leader is known (leader epoch {leader_epoch}); refresh the metadata and retry"
            ),
        };
        let (leader, address) = match leader {
            Some((node, address)) => (Some(node), address),
            None => (None, String::new()),
        };
        ErrorResponse {
            details: Some(ErrorDetails::NotLeader {
                leader,
                address,
                leader_epoch,
            }),
            ..ErrorResponse::new(ErrorCode::NotLeader, message)
        }
    }

    /// The details that go on the wire: only those that belong to this code.
    fn wire_details(&self) -> Option<&ErrorDetails> {
        self.details
            .as_ref()
            .filter(|details| details.code() == self.code)
    }

    /// The message as sent: cut to what a `string16` holds.
    fn wire_message(&self) -> &str {
        truncate_to_char_boundary(&self.message, usize::from(u16::MAX))
    }

    /// Exact size of the body [`encode_body`](Self::encode_body) writes.
    pub(in crate::protocol) fn body_len(&self) -> usize {
        str16_len(self.wire_message()) + 8 + 8 + self.wire_details().map_or(0, |d| d.encoded_len())
    }

    /// Appends the error body, `message string16, epoch u64, current_epoch u64`, then the
    /// code's details if it has any (the error code is part of the response header).
    pub(in crate::protocol) fn encode_body(&self, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        put_str16(dst, "message", self.wire_message())?;
        dst.put_u64(self.epoch);
        dst.put_u64(self.current_epoch);
        if let Some(details) = self.wire_details() {
            details.encode(dst)?;
        }
        Ok(())
    }

    /// Reads an error body for the raw `code` (the rest of the frame after the response header).
    /// Bytes after the fields this build knows are ignored: a newer server may append details.
    /// An unknown code fails with [`ProtocolError::UnknownErrorCode`], keeping the message.
    pub(in crate::protocol) fn decode_body(
        code: u16,
        mut r: Reader,
    ) -> Result<ErrorResponse, DecodeBodyError> {
        let message = r.string16("message")?;
        let epoch = r.u64("epoch")?;
        let current_epoch = r.u64("current_epoch")?;
        let Some(code) = ErrorCode::from_u16(code) else {
            return Err(DecodeBodyError::UnknownCode { code, message });
        };
        let details = ErrorDetails::decode(code, &mut r)?;
        Ok(ErrorResponse {
            code,
            message,
            epoch,
            current_epoch,
            details,
        })
    }
}

/// Why an error body could not be read.
pub(in crate::protocol) enum DecodeBodyError {
    /// A field was malformed.
    Wire(WireError),
    /// The body was readable but its code is unknown to this build.
    UnknownCode {
        /// The raw code.
        code: u16,
        /// The message the body carried.
        message: String,
    },
}

impl From<WireError> for DecodeBodyError {
    fn from(error: WireError) -> Self {
        DecodeBodyError::Wire(error)
    }
}

impl ErrorResponse {}

impl fmt::Display for ErrorResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        if self.code.carries_epochs() {
            write!(
                f,
                " (epoch {}, current epoch {})",
                self.epoch, self.current_epoch
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for ErrorResponse {}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn truncate_to_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Why a request frame could not be parsed, with as much of its header as
/// was readable so the server can still answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestDecodeError {
    /// The request's correlation id; `Some` when the 8-byte header was
    /// complete. When `None` the server cannot address its answer and should
    /// reply with correlation id 0 and close the connection.
    pub correlation_id: Option<u32>,
    /// The raw api key, when at least its two bytes were present.
    pub api_key: Option<u16>,
    /// What went wrong, coarsely, for choosing the error code.
    pub kind: RequestDecodeErrorKind,
    /// A human-readable explanation, suitable as the error message sent back.
    pub detail: String,
}

/// Classification of a [`RequestDecodeError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestDecodeErrorKind {
    /// The frame ended before a field (or the header) was complete.
    Truncated,
    /// The header's api key is not known.
    UnknownApi(u16),
    /// The API is known but not in this version.
    UnsupportedVersion {
        /// The API.
        api_key: ApiKey,
        /// The requested version.
        version: u16,
    },
    /// The body was complete but bytes were left over after it.
    TrailingBytes,
    /// A string field was not valid UTF-8.
    InvalidUtf8,
    /// A field held a value outside its domain.
    Invalid(String),
}

impl RequestDecodeError {
    /// The error code to answer with: `UNKNOWN_API`, `UNSUPPORTED_VERSION`,
    /// or `INVALID_REQUEST` for everything else.
    pub fn error_code(&self) -> ErrorCode {
        match self.kind {
            RequestDecodeErrorKind::UnknownApi(_) => ErrorCode::UnknownApi,
            RequestDecodeErrorKind::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
            RequestDecodeErrorKind::Truncated
            | RequestDecodeErrorKind::TrailingBytes
            | RequestDecodeErrorKind::InvalidUtf8
            | RequestDecodeErrorKind::Invalid(_) => ErrorCode::InvalidRequest,
        }
    }

    /// Whether the connection should be closed after answering: only when the
    /// header was unreadable, because then the client cannot match the answer
    /// to a request. Every other malformed request leaves the framing intact.
    pub fn must_close_connection(&self) -> bool {
        self.correlation_id.is_none()
    }

    /// The response the server should send: the error code above, this
    /// error's detail as message, and the correlation id (0 if unknown).
    pub fn to_response(&self) -> ResponseFrame {
        ResponseFrame::error(
            self.correlation_id.unwrap_or(0),
            ErrorResponse::new(self.error_code(), self.detail.clone()),
        )
    }
}

impl fmt::Display for RequestDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cannot decode request")?;
        if let Some(id) = self.correlation_id {
            write!(f, " (correlation id {id})")?;
        }
        write!(f, ": {}", self.detail)
    }
}

impl std::error::Error for RequestDecodeError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// LEASE_LOST carries the live lease's holder and time left when one is live, and nothing
    /// after `current_epoch` when none is: both read back as they were written.
    #[test]
    fn lease_lost_details_round_trip_and_are_absent_without_a_live_lease() {
        for live in [Some(("writer-2".to_owned(), 9_500)), None] {
            let error = ErrorResponse::lease_lost("lease lost", 5, live.clone());
            let mut body = BytesMut::new();
            error.encode_body(&mut body).unwrap();
            assert_eq!(body.len(), error.body_len());
            let decoded = ErrorResponse::decode_body(
                ErrorCode::LeaseLost.as_u16(),
                super::super::wire::Reader::new(body.freeze()),
            )
            .unwrap_or_else(|_| panic!("decode {live:?}"));
            assert_eq!(decoded, error);
            assert_eq!(decoded.current_epoch, 5);
            assert_eq!(
                decoded.details,
                live.map(|(holder, expires_in_ms)| ErrorDetails::LeaseLost {
                    holder,
                    expires_in_ms
                })
            );
        }
    }

    #[test]
    fn messages_are_cut_at_character_boundaries() {
        assert_eq!(truncate_to_char_boundary("abc", 5), "abc");
        assert_eq!(truncate_to_char_boundary("aé", 2), "a");
        assert_eq!(truncate_to_char_boundary("aé", 3), "aé");
    }

    #[test]
    fn only_an_unreadable_header_closes_the_connection() {
        let error = RequestDecodeError {
            correlation_id: Some(7),
            api_key: Some(99),
            kind: RequestDecodeErrorKind::UnknownApi(99),
            detail: "unknown api key 99".to_owned(),
        };
        assert!(!error.must_close_connection());
        let response = error.to_response();
        assert_eq!(response.correlation_id, 7);
        assert_eq!(response.result.unwrap_err().code, ErrorCode::UnknownApi);
        let headless = RequestDecodeError {
            correlation_id: None,
            kind: RequestDecodeErrorKind::Truncated,
            ..error
        };
        assert!(headless.must_close_connection());
        assert_eq!(headless.error_code(), ErrorCode::InvalidRequest);
        assert_eq!(headless.to_response().correlation_id, 0);
    }
}
