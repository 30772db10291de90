//! What a listener's protocol supplies to the generic connection loop.
//!
//! The loop ([`super::connection`]) owns everything that must behave the same whatever the
//! protocol: the frame-size limit checked before allocation, the in-flight limit (backpressure
//! by not reading), idle and write timeouts, responses written in request order, and graceful
//! drain on shutdown. A protocol only turns a frame into a pending response (decode, call the
//! [`BrokerService`], map errors) and a response into bytes. Both fencelog's protocol and
//! Kafka's frame messages with a 4-byte big-endian length followed by the same 8 header bytes
//! (`api_key`, `api_version`, `correlation_id`), so the loop reads frames with one
//! [`super::frame_reader::FrameReader`] for both.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;

use super::frame_reader::{FrameHeader, FrameRefusal, FrameTail, SpliceRule};
use crate::broker::BrokerService;

/// What a frame started: the response to write when it is ready (in request order), if the
/// request gets one, and whether the connection closes after it.
pub struct Started<R> {
    /// The response, or `None` for a request that is never answered (Kafka's `acks=0`).
    pub response: Option<BoxFuture<'static, R>>,
    /// Stop reading after this request (the stream cannot be trusted any more).
    pub close: bool,
}

impl<R: Send + 'static> Started<R> {
    /// A response that is already known.
    pub fn ready(response: R) -> Self {
        Self {
            response: Some(Box::pin(futures::future::ready(response))),
            close: false,
        }
    }

    /// A response that a future will produce; the connection reads on meanwhile.
    pub fn later(response: impl std::future::Future<Output = R> + Send + 'static) -> Self {
        Self {
            response: Some(Box::pin(response)),
            close: false,
        }
    }
}

/// What the connection does after a response is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterEncode {
    /// Keep serving the connection.
    Continue,
    /// Write what was encoded before this response, then close: the response could not be
    /// encoded and the protocol has no error the client could match to its request (Kafka
    /// clients match responses to requests by order, so a skipped response would be misread).
    Close,
}

/// A wire protocol served by the generic connection loop.
pub trait Protocol: Send + Sync + 'static {
    /// What the protocol keeps per connection (the produce queue, authentication state, ...).
    type Session: Send + 'static;
    /// A response, before encoding.
    type Response: Send + 'static;

    /// The protocol's name, for logs (and the `listener` label of the metrics).
    fn name(&self) -> &'static str;

    /// The name of the API with this key (a request frame's first two bytes), for the `api`
    /// label of the request latency metric; `None` for a key the protocol does not know.
    fn api_name(api_key: u16) -> Option<String>
    where
        Self: Sized,
    {
        let _ = api_key;
        None
    }

    /// State for a new connection from `peer`.
    fn open_session(&self, service: &Arc<BrokerService>, peer: SocketAddr) -> Self::Session;

    /// Starts the request in one frame (the length prefix removed). Work that must happen in
    /// request order (appends) happens now; the rest may run in the returned future.
    fn start(
        &self,
        service: &Arc<BrokerService>,
        session: &mut Self::Session,
        frame: Bytes,
    ) -> Started<Self::Response>;

    /// Which request frames may be read only in part on a plain TCP connection, their last
    /// bytes left on the socket to be spliced into a segment (the one-copy produce path; see
    /// [`super::frame_reader`]); `None`, the default, reads every frame whole.
    fn splice_rule(&self) -> Option<SpliceRule> {
        None
    }

    /// Starts the request in a frame whose batch was read into a pipe (one that
    /// [`Self::splice_rule`] recognised): `head` is its bytes before the batch's piped ones
    /// (the length prefix removed), `tail` the pipe and the frame's bytes after them. The
    /// default, for a protocol without a splice rule (which is never handed one), closes the
    /// connection.
    fn start_spliced(
        &self,
        service: &Arc<BrokerService>,
        session: &mut Self::Session,
        head: Bytes,
        tail: FrameTail,
    ) -> Started<Self::Response> {
        let _ = (service, session, head, tail);
        Started {
            response: None,
            close: true,
        }
    }

    /// What the listener speaks, for the messages a client of another protocol gets (an HTTP
    /// client is answered `400` naming it), e.g. "fencelog's native protocol".
    fn speaks(&self) -> &'static str;

    /// Whether the connection must authenticate before it may send more than small frames
    /// ([`super::frame_reader`]'s `max_unauthenticated_frame_bytes`).
    fn must_authenticate(&self, session: &Self::Session) -> bool {
        let _ = session;
        false
    }

    /// The answer to a frame refused before it was read whole (too large, empty, too large
    /// before authentication, no memory, not finished in time), with the correlation id of
    /// `header` when it arrived; the connection closes after it. `None` where the protocol
    /// has no answer the client could read.
    fn refuse_frame(
        &self,
        header: Option<FrameHeader>,
        refusal: &FrameRefusal,
    ) -> Option<Self::Response>;

    /// Whether [`Self::refuse_frame`] can answer at all: if not, a frame is judged on its
    /// length without waiting for its header (there is no correlation id to answer with).
    fn answers_refused_frames(&self) -> bool {
        true
    }

    /// The answer to a connection refused at accept (beyond the server's connection limit, or
    /// with the process out of descriptors), if the protocol has one.
    fn too_many_connections(&self, refusal: Refusal) -> Option<Self::Response>;

    /// Encodes a response as a list of byte chunks (written with one vectored write), small
    /// parts built in `scratch`. A response that cannot be encoded within `max_frame_bytes` is
    /// replaced by an error the client can read, or, where the protocol has none, nothing is
    /// added and [`AfterEncode::Close`] ends the connection.
    fn encode(
        &self,
        response: Self::Response,
        max_frame_bytes: usize,
        scratch: &mut BytesMut,
        parts: &mut Vec<Bytes>,
    ) -> AfterEncode;
}

/// Why a connection is refused as soon as it is accepted: the message its client reads says
/// which limit to raise (`--max-connections` or the process's open-file limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The server's `max_connections` are open.
    ConnectionLimit(usize),
    /// The process ran out of file descriptors (its open-file limit, `ulimit -n`).
    OutOfDescriptors,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::ConnectionLimit(max) => write!(
                f,
                "the server already has its maximum of {max} connections; retry later"
            ),
            Refusal::OutOfDescriptors => f.write_str(
                "the server is out of file descriptors (its open-file limit, not its connection \
                 limit); retry later",
            ),
        }
    }
}
