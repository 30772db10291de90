//! The fencelog wire protocol: length-prefixed binary frames carrying one
//! request or one response each, shared by the server and the client.
//!
//! It is split in two layers on purpose. [`FrameCodec`] (in `codec`) only cuts
//! a byte stream into frames and enforces the maximum frame size; it never
//! looks inside a frame. Parsing a frame body into a [`RequestFrame`] or
//! [`ResponseFrame`] (in `frame`) is a separate, fallible step, so a server
//! that receives a malformed body can still answer it with `INVALID_REQUEST`
//! and the request's correlation id instead of dropping the connection. The
//! byte-level contract lives in `docs/protocol.md`; this module implements it
//! and the tests in `tests/server/protocol_codec.rs` check the two agree.
//!
//! Module map: `wire` holds the bounds-checked reader and field writers every
//! message is built from; `api` the API keys and versions, and under `api/`
//! one file per API with its request and response bodies; `request` and
//! `response` the enums that dispatch to those files; `frame` the headers and
//! whole frames; `error_response` the failure bodies; `topic_config` the wire
//! form of the domain's topic configuration; `node` the cluster's node ids and lists (leaders,
//! replicas) as the cluster APIs carry them. The topic configuration and
//! flush policy themselves are domain types (`crate::domain`), re-exported
//! here because they travel in `CreateTopic` and `Metadata`.
#![warn(missing_docs)]

use std::sync::Arc;

mod api;
mod chunks;
mod codec;
mod error_code;
mod error_response;
mod frame;
mod node;
mod request;
mod response;
mod topic_config;
mod wire;
pub mod wrong_port;

pub use api::add_to_transaction::{TransactionPartition, TransactionProducer};
pub use api::api_versions::SERVER_SOFTWARE;
pub use api::create_topic::Replication;
pub use api::fetch::CommittedRead;
pub use api::leader_epoch_end::{EpochEnd, LeaderEpochEndPartition, LeaderEpochQuery};
pub use api::list_offsets::NO_OFFSET_FOR_TIMESTAMP;
pub use api::metadata::{BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata};
pub use api::produce::Acks;
pub use api::replica_fetch::{ReplicaFetch, ReplicaFetchPartition, ReplicaFetchedPartition};
pub use api::txn_offsets::TxnOffset;
pub use api::{ApiKey, ApiVersionRange};
pub use chunks::Chunks;
pub use codec::{FrameCodec, DEFAULT_MAX_FRAME_BYTES, FRAME_LENGTH_BYTES};
pub use error_code::{ErrorCode, Outcome};
pub use error_response::{ErrorDetails, ErrorResponse, RequestDecodeError, RequestDecodeErrorKind};
pub use frame::{RequestFrame, ResponseFrame, REQUEST_HEADER_BYTES, RESPONSE_HEADER_BYTES};
pub use node::{MAX_PARTITIONS_PER_REQUEST, MAX_REPLICA_LIST, NO_LEADER_EPOCH, NO_NODE};
pub use request::Request;
pub use response::Response;

pub use crate::domain::{
    FlushPolicy, ParseFlushPolicyError, TopicConfig, TopicConfigChange, DEFAULT_FLUSH_INTERVAL_MS,
};

/// Failures of the framing layer and of response parsing.
///
/// Request parsing has its own error type, [`RequestDecodeError`], because
/// the server needs the correlation id out of it to answer the request.
///
/// `Clone`, because the client reports one failure to every request it concerns; the I/O error
/// is shared behind an `Arc`, since `std::io::Error` itself cannot be cloned.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProtocolError {
    /// A frame's declared length exceeds the configured maximum. The stream
    /// cannot be resynchronised after this, so the connection must be closed.
    #[error(
        "frame of {declared} bytes exceeds the maximum of {max}; \
         raise max_frame_bytes on both ends or send smaller requests"
    )]
    FrameTooLarge {
        /// The length the peer declared (or that we were about to send).
        declared: usize,
        /// The configured maximum frame length.
        max: usize,
    },
    /// A frame declared a length of zero, which no valid message has.
    #[error("received a frame of length 0; every frame holds at least a header")]
    EmptyFrame,
    /// The underlying transport failed.
    #[error("i/o error on the connection: {0}")]
    Io(#[source] Arc<std::io::Error>),
    /// A response frame could not be parsed (truncated, trailing bytes,
    /// invalid UTF-8, out-of-range values); the peer is not speaking this
    /// protocol version correctly.
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// A response carried an error code this build does not know (probably a
    /// newer server). The error body was still readable, so its message is
    /// kept.
    #[error("server answered with unknown error code {code}: {message}")]
    UnknownErrorCode {
        /// The raw wire value.
        code: u16,
        /// The server's error message.
        message: String,
    },
    /// A message cannot be represented on the wire (a string longer than
    /// 65535 bytes, too many list entries, an error response whose code is
    /// `NONE`, ...). Nothing was written.
    #[error("cannot encode message: {0}")]
    Unencodable(String),
    /// The peer speaks another protocol (HTTP, TLS): the client reached the wrong port.
    #[error("{0}")]
    WrongPort(#[from] wrong_port::WrongPort),
}

/// Kept by hand (the variant holds an `Arc`), so `?` on an I/O error, and the codec's
/// `Decoder::Error: From<io::Error>` bound, still give [`ProtocolError::Io`].
impl From<std::io::Error> for ProtocolError {
    fn from(error: std::io::Error) -> Self {
        ProtocolError::Io(Arc::new(error))
    }
}

impl ProtocolError {
    /// The error code a server should answer with when this error occurs while
    /// reading a client's frames, if it should answer at all (it cannot for
    /// transport failures).
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            ProtocolError::FrameTooLarge { .. } => Some(ErrorCode::FrameTooLarge),
            ProtocolError::EmptyFrame | ProtocolError::Malformed(_) => {
                Some(ErrorCode::InvalidRequest)
            }
            ProtocolError::Io(_) | ProtocolError::WrongPort(_) => None,
            ProtocolError::UnknownErrorCode { .. } | ProtocolError::Unencodable(_) => {
                Some(ErrorCode::Internal)
            }
        }
    }
}
