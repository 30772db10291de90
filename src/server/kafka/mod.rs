//! The Kafka wire protocol as a second listener: Kafka clients (kcat, librdkafka, the Java
//! client, kafka-python) talk to the same [`BrokerService`] as fencelog's own protocol.
//!
//! The generic connection loop ([`super::connection`]) cuts frames (Kafka's are also
//! `i32`-size-prefixed) under [`KafkaConfig::max_frame_bytes`], keeps responses in request
//! order and applies the server's limits; this module decodes a frame ([`request`]), dispatches
//! it to the API's handler ([`handlers`]) and encodes the response ([`response`]). What it
//! advertises and serves is the one list of handlers, [`handlers::HANDLERS`], where each API
//! declares its versions, ACL rule and refusal answer beside its handler.
//!
//! A frame it cannot answer (unknown API, unsupported version other than ApiVersions',
//! malformed header or body) closes the connection after a log line, as Kafka's broker does:
//! Kafka has no error response that every API's client can read. The one exception is a
//! native fencelog client that reached this listener by mistake: a first frame that is not a
//! Kafka request but decodes as a native one is answered in the native format, naming the
//! native listener's address. The request decoder is the
//! vendored `kafka-protocol` crate, patched so that a count read from the wire cannot make it
//! reserve more than the frame could hold (`vendor/kafka-protocol/PATCHES.md`).
//!
//! * [`acl_mapping`]: Kafka ACL bindings ⇄ fencelog grants (the ACL APIs' one mapping).
//! * [`batches`]: Kafka record batches v2 ⇄ native batches (bounded decompression), apart from
//!   any framing, so the bench and the fuzz targets use it without a listener.
//! * [`config`]: advertised address, cluster id, frame limit (the node id is the broker's).
//! * [`versions`]: the APIs and versions implemented (a view of the handler list).
//! * [`request`], [`response`]: framing of headers and bodies.
//! * [`handlers`]: one file per API, and the list of them.
//! * [`authorization`]: what the APIs' ACL rules share.
//! * [`sasl`]: SASL authentication state and the gate before it.
//! * [`errors`]: broker errors as Kafka error codes.
//! * [`topic_id`]: topic UUIDs derived from names.

pub mod acl_mapping;
pub mod authorization;
pub mod batches;
pub mod config;
pub mod configs;
pub mod errors;
pub mod fetch_encoding;
pub mod handlers;
pub mod response;
pub mod sasl;
pub mod topic_id;
pub mod versions;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tracing::{debug, info};

pub use config::{KafkaConfig, KafkaConfigError, DEFAULT_KAFKA_MAX_FRAME_BYTES};
pub use handlers::request;
pub use request::KafkaRequestError;
pub use response::KafkaResponse;

use super::connection::Refusal;
use super::frame_reader::{FrameHeader, FrameRefusal};
use super::protocol::{AfterEncode, Protocol, Started};
use crate::auth::{ConnectionAuthentication, Security};
use crate::broker::produce_queue::ProduceQueue;
use crate::broker::BrokerService;
use crate::protocol::{ErrorCode, ErrorResponse, RequestFrame, ResponseFrame};
use crate::server::memory_budget::FetchMemory;

/// Kafka's protocol, served by the generic connection loop.
#[derive(Debug)]
pub struct KafkaProtocol {
    config: Arc<KafkaConfig>,
    security: Option<Arc<Security>>,
    fetch_memory: Option<FetchMemory>,
    /// Where the same server's native listener is, for the native clients that reach this one.
    native_listener: Option<String>,
}

impl KafkaProtocol {
    /// The protocol advertising what `config` says.
    pub fn new(config: Arc<KafkaConfig>) -> Self {
        Self {
            config,
            security: None,
            fetch_memory: None,
            native_listener: None,
        }
    }

    /// Names the native listener at `addr` to native clients that reach this listener by
    /// mistake.
    pub fn with_native_listener(mut self, addr: impl Into<String>) -> Self {
        self.native_listener = Some(addr.into());
        self
    }

    /// The native-format answer to a native client that reached this listener: an
    /// `INVALID_REQUEST` with its correlation id naming this listener and the native one,
    /// written after the size prefix as it is (the body kind that has no Kafka header).
    fn answer_native_client(
        &self,
        session: &KafkaSession,
        request: &RequestFrame,
    ) -> Started<KafkaResponse> {
        let native = match &self.native_listener {
            Some(addr) => format!("the native listener is at {addr}: point --addr there"),
            None => format!(
                "point --addr at its native listener (default port {})",
                crate::protocol::wrong_port::NATIVE_DEFAULT_PORT
            ),
        };
        let message = format!(
            "this is fencelog's Kafka listener (Kafka wire protocol), not its native protocol; {native}"
        );
        info!(
            peer = %session.peer,
            "a native fencelog client reached the Kafka listener; answered in the native format and closing: {message}"
        );
        let answer = ResponseFrame::error(
            request.correlation_id,
            ErrorResponse::new(ErrorCode::InvalidRequest, message),
        );
        let mut encoded = BytesMut::new();
        let response = answer.encode(&mut encoded).ok().map(|()| KafkaResponse {
            correlation_id: i32::from_be_bytes(request.correlation_id.to_be_bytes()),
            api_key: kafka_protocol::messages::ApiKey::ApiVersions,
            api_version: 0,
            body: response::ResponseBody::RawSaslToken(
                encoded
                    .freeze()
                    .slice(crate::protocol::FRAME_LENGTH_BYTES..),
            ),
        });
        Started {
            response: response.map(
                |response| -> futures::future::BoxFuture<'static, KafkaResponse> {
                    Box::pin(futures::future::ready(response))
                },
            ),
            close: true,
        }
    }

    /// With SASL authentication and ACLs (`serve --auth`) when `security` is set.
    pub fn with_security(mut self, security: Option<Arc<Security>>) -> Self {
        self.security = security;
        self
    }

    /// Counts the Kafka fetch answers' record buffers (heap, unlike the native listener's
    /// slices of mapped segments) against the server's memory budget.
    pub fn with_fetch_memory(mut self, fetch_memory: FetchMemory) -> Self {
        self.fetch_memory = Some(fetch_memory);
        self
    }
}

/// What the listener keeps per Kafka connection.
#[derive(Debug)]
pub struct KafkaSession {
    /// The client's address, for logs.
    pub peer: SocketAddr,
    /// The client id of the last request (Kafka clients send it in every header), for logs.
    pub client_id: Option<String>,
    /// The connection's produces, appended in request order (for the Produce handler).
    pub produce_queue: ProduceQueue,
    /// SASL authentication state and, once authenticated, the principal.
    pub sasl: sasl::SaslSession,
    /// The budget fetch answers' record buffers are counted against, if any.
    pub fetch_memory: Option<FetchMemory>,
    /// Whether a frame was read on the connection (only a first frame is checked for a native
    /// client that reached the wrong listener).
    pub started: bool,
}

impl Protocol for KafkaProtocol {
    type Session = KafkaSession;
    type Response = KafkaResponse;

    fn name(&self) -> &'static str {
        "kafka"
    }

    fn api_name(api_key: u16) -> Option<String> {
        let key = kafka_protocol::messages::ApiKey::try_from(i16::try_from(api_key).ok()?).ok()?;
        Some(format!("{key:?}"))
    }

    fn open_session(&self, service: &Arc<BrokerService>, peer: SocketAddr) -> KafkaSession {
        KafkaSession {
            peer,
            client_id: None,
            produce_queue: service.producing().queue(),
            sasl: sasl::SaslSession::new(ConnectionAuthentication::new(self.security.clone())),
            fetch_memory: self.fetch_memory.clone(),
            started: false,
        }
    }

    fn start(
        &self,
        service: &Arc<BrokerService>,
        session: &mut KafkaSession,
        frame: Bytes,
    ) -> Started<KafkaResponse> {
        let first = !std::mem::replace(&mut session.started, true);
        if session.sasl.expects_raw_token() {
            return sasl::raw_token(&mut session.sasl, frame);
        }
        match request::decode(frame.clone()) {
            Ok(request::Decoded::Request(request)) => {
                let client_id = request.header.client_id.as_ref().map(|id| id.as_str());
                if session.client_id.as_deref() != client_id {
                    session.client_id = client_id.map(str::to_string);
                }
                debug!(
                    peer = %session.peer,
                    client_id = session.client_id.as_deref().unwrap_or(""),
                    api_key = ?request.api_key,
                    api_version = request.header.request_api_version,
                    correlation_id = request.header.correlation_id,
                    "Kafka request"
                );
                handlers::start(service, &self.config, session, request)
            }
            Ok(request::Decoded::UnsupportedApiVersions {
                correlation_id,
                api_version,
            }) => {
                debug!(peer = %session.peer, api_version, "ApiVersions of an unsupported version: answering v0 with the table");
                Started::ready(handlers::api_versions::unsupported(correlation_id))
            }
            Err(_) if first && RequestFrame::decode(frame.clone()).is_ok() => {
                let request = RequestFrame::decode(frame).expect("decoded just above");
                self.answer_native_client(session, &request)
            }
            Err(error) => {
                // Logged at info: bad input from a client is the client's problem, and a flood
                // of it must not become a flood of warnings.
                info!(
                    peer = %session.peer,
                    client_id = session.client_id.as_deref().unwrap_or(""),
                    %error,
                    "Kafka request refused; closing connection"
                );
                Started {
                    response: None,
                    close: true,
                }
            }
        }
    }

    fn speaks(&self) -> &'static str {
        "the Kafka wire protocol"
    }

    fn must_authenticate(&self, session: &KafkaSession) -> bool {
        session.sasl.authentication.is_required()
    }

    fn answers_refused_frames(&self) -> bool {
        false
    }

    /// Kafka has no response to a frame it could not read: the connection just closes.
    fn refuse_frame(
        &self,
        _header: Option<FrameHeader>,
        _refusal: &FrameRefusal,
    ) -> Option<KafkaResponse> {
        None
    }

    /// Kafka has no "too many connections" response: the connection just closes.
    fn too_many_connections(&self, _refusal: Refusal) -> Option<KafkaResponse> {
        None
    }

    fn encode(
        &self,
        response: KafkaResponse,
        max_frame_bytes: usize,
        scratch: &mut BytesMut,
        parts: &mut Vec<Bytes>,
    ) -> AfterEncode {
        response.encode_into(max_frame_bytes, scratch, parts)
    }
}
