//! The native fencelog protocol as a listener: decoding frames into [`RequestFrame`]s, handing
//! each to [`handler`], which translates it into a [`BrokerService`] call, and encoding the
//! [`ResponseFrame`]s (`docs/protocol.md` is the byte-level contract).

mod authentication;
mod errors;
mod fetch;
mod handler;
mod refusals;
mod spliced;
mod transactions;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

pub use errors::to_error_response;
pub use spliced::{DEFAULT_SPLICE_MIN_FRAME_BYTES, SPLICE_MIN_FRAME_BYTES_WHEN_ON};

use super::connection::Refusal;
use super::frame_reader::{FrameHeader, FrameRefusal, FrameTail, SpliceRule};
use super::protocol::{AfterEncode, Protocol, Started};
use super::ServerConfig;
use crate::auth::{ConnectionAuthentication, Security};
use crate::broker::produce_queue::ProduceQueue;
use crate::broker::BrokerService;
use crate::protocol::{ErrorCode, ErrorResponse, ProtocolError, RequestFrame, ResponseFrame};

/// fencelog's own protocol.
#[derive(Debug)]
pub struct NativeProtocol {
    config: Arc<ServerConfig>,
    /// Where clients reach this listener (`--advertise`, else the bound address): how a
    /// standalone broker names itself in `Metadata` version 1.
    advertised: String,
}

impl NativeProtocol {
    /// The protocol under these limits (fetch sizes and waits are clamped to them), with
    /// authentication when `config.security` is set, reached at `config.advertised_addr`.
    pub fn new(config: Arc<ServerConfig>) -> Self {
        let advertised = config.advertised_addr.clone().unwrap_or_default();
        Self { config, advertised }
    }

    /// A standalone broker without `advertised_addr` advertises `local`, the address its
    /// listener is bound to (so `127.0.0.1:0` advertises the port it got).
    pub fn listening_on(mut self, local: SocketAddr) -> Self {
        if self.config.advertised_addr.is_none() {
            self.advertised = local.to_string();
        }
        self
    }

    fn security(&self) -> Option<Arc<Security>> {
        self.config.security.clone()
    }
}

/// What the native listener keeps per connection.
#[derive(Debug)]
pub struct NativeSession {
    /// The connection's produces, appended in request order.
    pub produce_queue: ProduceQueue,
    /// Who the connection is (with `--auth`), and its SCRAM exchange.
    pub authentication: ConnectionAuthentication,
    /// The client's address, for logs.
    pub peer: SocketAddr,
    /// Whether a request was read on the connection (only a first frame is checked for a
    /// Kafka client that reached the wrong listener).
    pub started: bool,
}

impl Protocol for NativeProtocol {
    type Session = NativeSession;
    type Response = ResponseFrame;

    fn name(&self) -> &'static str {
        "native"
    }

    fn api_name(api_key: u16) -> Option<String> {
        crate::protocol::ApiKey::from_u16(api_key).map(|key| key.name().to_string())
    }

    fn open_session(&self, service: &Arc<BrokerService>, peer: SocketAddr) -> NativeSession {
        NativeSession {
            produce_queue: service.producing().queue(),
            authentication: ConnectionAuthentication::new(self.security()),
            peer,
            started: false,
        }
    }

    fn start(
        &self,
        service: &Arc<BrokerService>,
        session: &mut NativeSession,
        frame: Bytes,
    ) -> Started<ResponseFrame> {
        let first = !std::mem::replace(&mut session.started, true);
        match RequestFrame::decode(frame.clone()) {
            Ok(request) => {
                if let Some(answered) =
                    authentication::intercept(&mut session.authentication, &request)
                {
                    return answered;
                }
                let access = session.authentication.access();
                if let Err(refused) = authentication::authorize(&access, &request.request) {
                    return authentication::refusal(request.correlation_id, &refused);
                }
                let response = handler::start(
                    service,
                    &self.config,
                    &self.advertised,
                    &session.produce_queue,
                    request,
                );
                Started {
                    response: Some(authentication::filter_metadata(access, response)),
                    close: false,
                }
            }
            Err(_) if first && crate::protocol::wrong_port::looks_like_kafka_request(&frame) => {
                // A Kafka client cannot read a native answer: say it here, and close.
                tracing::info!(
                    peer = %session.peer,
                    "a Kafka client reached fencelog's native listener; closing connection (point Kafka clients at the Kafka listener, `serve --kafka-listen ADDR`)"
                );
                Started {
                    response: None,
                    close: true,
                }
            }
            Err(error) => {
                tracing::debug!(%error, "malformed request");
                Started {
                    close: error.must_close_connection(),
                    ..Started::ready(error.to_response())
                }
            }
        }
    }

    fn splice_rule(&self) -> Option<SpliceRule> {
        let min_frame_bytes = self.config.splice_min_frame_bytes;
        (min_frame_bytes > 0).then_some(SpliceRule {
            min_frame_bytes,
            judge: spliced::judge,
        })
    }

    fn start_spliced(
        &self,
        service: &Arc<BrokerService>,
        session: &mut NativeSession,
        head: Bytes,
        tail: FrameTail,
    ) -> Started<ResponseFrame> {
        session.started = true;
        let access = session.authentication.access();
        spliced::start(service, &session.produce_queue, &access, head, tail)
    }

    fn speaks(&self) -> &'static str {
        "fencelog's native binary protocol (docs/protocol.md)"
    }

    fn must_authenticate(&self, session: &NativeSession) -> bool {
        session.authentication.is_required()
    }

    fn refuse_frame(
        &self,
        header: Option<FrameHeader>,
        refusal: &FrameRefusal,
    ) -> Option<ResponseFrame> {
        let code = match refusal {
            FrameRefusal::TooLarge { .. } => ErrorCode::FrameTooLarge,
            FrameRefusal::Empty | FrameRefusal::Incomplete { .. } => ErrorCode::InvalidRequest,
            FrameRefusal::Unauthenticated { .. } => ErrorCode::AuthenticationRequired,
            FrameRefusal::Budget(_) => ErrorCode::ResourceExhausted,
        };
        // A frame whose header never arrived is not a request: there is nobody to answer but
        // for an empty frame, whose client is told with correlation id 0 (it sent none).
        let correlation_id = match (header, refusal) {
            (Some(header), _) => header.correlation_id,
            (None, FrameRefusal::Empty) => 0,
            (None, _) => return None,
        };
        Some(ResponseFrame::error(
            correlation_id,
            ErrorResponse::new(code, refusal.to_string()),
        ))
    }

    fn too_many_connections(&self, refusal: Refusal) -> Option<ResponseFrame> {
        Some(ResponseFrame::error(
            0,
            ErrorResponse::new(ErrorCode::TooManyConnections, refusal.to_string()),
        ))
    }

    fn encode(
        &self,
        response: ResponseFrame,
        max_frame_bytes: usize,
        scratch: &mut BytesMut,
        parts: &mut Vec<Bytes>,
    ) -> AfterEncode {
        let correlation_id = response.correlation_id;
        let result =
            if response.encoded_len() - crate::protocol::FRAME_LENGTH_BYTES > max_frame_bytes {
                Err(ProtocolError::FrameTooLarge {
                    declared: response.encoded_len(),
                    max: max_frame_bytes,
                })
            } else {
                response.encode_vectored(scratch, parts)
            };
        if let Err(error) = result {
            // The client still gets a response for its correlation id.
            tracing::error!(%error, correlation_id, "response could not be encoded");
            // A failed encoding leaves `scratch` and `parts` as they were (`encode_vectored`
            // truncates what it wrote), so only the fallback reaches the stream.
            let fallback = ResponseFrame::error(
                correlation_id,
                ErrorResponse::new(
                    ErrorCode::Internal,
                    format!("response could not be encoded: {error}"),
                ),
            );
            fallback
                .encode_vectored(scratch, parts)
                .expect("a short error response always encodes");
        }
        // The native protocol always has an error response to send instead.
        AfterEncode::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::super::writer::ResponseWriter;
    use super::*;
    use crate::protocol::Response;

    /// The vectored bytes are exactly what the plain encoder writes, for a fetch, a replica fetch
    /// and others.
    #[tokio::test]
    async fn vectored_output_matches_the_plain_encoding() {
        let responses = vec![
            ResponseFrame::ok(
                7,
                Response::Fetch {
                    high_watermark: 10,
                    log_start_offset: 2,
                    batches: vec![Bytes::from_static(b"abc"), Bytes::from_static(b"defgh")],
                    committed: None,
                },
            ),
            ResponseFrame::ok(8, Response::ReleaseLease),
            ResponseFrame::ok(
                9,
                Response::ReplicaFetch {
                    partitions: vec![crate::protocol::ReplicaFetchedPartition {
                        topic: "t".into(),
                        partition: 0,
                        error: ErrorCode::None,
                        high_watermark: 10,
                        log_start_offset: 0,
                        records_epoch: 1,
                        batches: vec![Bytes::from_static(b"ab"), Bytes::from_static(b"cde")],
                    }],
                },
            ),
        ];
        let mut expected = BytesMut::new();
        for response in &responses {
            response.encode(&mut expected).unwrap();
        }
        let protocol = NativeProtocol::new(Arc::new(ServerConfig::default()));
        let mut writer = ResponseWriter::new(Vec::new(), 1 << 20);
        for response in responses {
            assert_eq!(writer.push(&protocol, response), AfterEncode::Continue);
        }
        writer.flush().await.unwrap();
        assert_eq!(writer.sink(), &expected.to_vec());
    }

    /// A response that fails part-way through encoding (an error message is fine, a topic name
    /// over 65535 bytes is not) is replaced by one whole `INTERNAL` error frame: none of its
    /// partial bytes reach the stream.
    #[tokio::test]
    async fn a_response_that_cannot_be_encoded_leaves_no_partial_bytes() {
        let unencodable = ResponseFrame::ok(
            9,
            Response::Metadata {
                topics: vec![crate::protocol::TopicMetadata {
                    name: "x".repeat(70_000),
                    partitions: 1,
                    config: Default::default(),
                }],
                cluster: None,
            },
        );
        let protocol = NativeProtocol::new(Arc::new(ServerConfig::default()));
        let mut writer = ResponseWriter::new(Vec::new(), 1 << 20);
        assert_eq!(writer.push(&protocol, unencodable), AfterEncode::Continue);
        writer.flush().await.unwrap();
        let written = Bytes::from(writer.sink().clone());
        let length = u32::from_be_bytes(written[..4].try_into().unwrap()) as usize;
        assert_eq!(written.len(), 4 + length, "exactly one frame");
        let frame =
            ResponseFrame::decode(crate::protocol::ApiKey::Metadata, written.slice(4..)).unwrap();
        assert_eq!(frame.correlation_id, 9);
        assert!(matches!(frame.result, Err(ref error) if error.code == ErrorCode::Internal));
    }
}
