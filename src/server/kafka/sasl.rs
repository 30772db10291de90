//! SASL on the Kafka listener: SaslHandshake names the mechanism, then the SCRAM-SHA-256
//! messages drive the same per-connection state machine as the native protocol
//! ([`crate::auth::ConnectionAuthentication`]). How the messages travel depends on the
//! handshake's version, as in Kafka's broker (`SaslServerAuthenticator`):
//! - v1 (KIP-152): in SaslAuthenticate requests, with Kafka headers and error codes.
//! - v0 (KIP-43): as raw frames, a 4-byte big-endian length then the SASL bytes, no Kafka
//!   header, answered the same way ([`raw_token`]); once authenticated, ordinary Kafka requests
//!   follow. v0 is implemented because librdkafka 2.0 (Debian's kcat) only enables SASL
//!   handshakes when v0 is in the advertised range (it then picks v1 when offered).
//!
//! What a Kafka client sees, and why:
//! - Both APIs are always advertised, as Kafka's brokers do on every listener. On a server
//!   without `--auth`, or after authentication, they answer `ILLEGAL_SASL_STATE` (Kafka's answer
//!   on a PLAINTEXT listener), so a client configured for SASL learns the mismatch at once.
//! - A raw token frame is bounded by [`MAX_RAW_SASL_TOKEN_BYTES`]; a larger one, a token that
//!   is not SCRAM, or a failed exchange closes the connection without an answer: v0 has no
//!   error response, and Kafka's broker closes it too.
//! - A mechanism other than SCRAM-SHA-256 gets `UNSUPPORTED_SASL_MECHANISM` with the list.
//! - A failed exchange (wrong password, unknown user: the message does not say which) gets
//!   `SASL_AUTHENTICATION_FAILED` and the connection closes, as Kafka's broker does.
//! - With `--auth`, any other request before authentication closes the connection (Kafka's
//!   behaviour: the broker does not read non-SASL requests before authentication).

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use super::response::{KafkaResponse, ResponseBody};
use crate::auth::ConnectionAuthentication;
use crate::server::protocol::Started;

/// The largest raw SASL token frame (after SaslHandshake v0) the listener reads: SCRAM messages
/// are a few hundred bytes, so anything near this is not a SCRAM client; the frame closes the
/// connection instead of being parsed.
pub const MAX_RAW_SASL_TOKEN_BYTES: usize = 64 * 1024;

/// A Kafka connection's SASL state.
#[derive(Debug, Default)]
pub struct SaslSession {
    /// The SCRAM exchange and, once done, the principal.
    pub authentication: ConnectionAuthentication,
    /// Whether SaslHandshake chose the mechanism (SaslAuthenticate needs it first).
    handshaken: bool,
    /// Whether a SaslHandshake v0 chose the mechanism and authentication is not done yet: the
    /// next frames are raw SASL tokens, not Kafka requests.
    raw_tokens: bool,
}

impl SaslSession {
    /// The state of a new connection.
    pub fn new(authentication: ConnectionAuthentication) -> Self {
        Self {
            authentication,
            handshaken: false,
            raw_tokens: false,
        }
    }

    /// Whether the next frame is a raw SASL token (after SaslHandshake v0) rather than a Kafka
    /// request.
    pub fn expects_raw_token(&self) -> bool {
        self.raw_tokens
    }

    /// Whether a SaslHandshake v1 chose the mechanism, so SaslAuthenticate may carry tokens.
    pub fn handshaken(&self) -> bool {
        self.handshaken
    }

    /// Records the mechanism chosen by a SaslHandshake: of `version` 0, the next frames are
    /// raw tokens; of version 1, SaslAuthenticate requests carry them.
    pub fn chose_mechanism(&mut self, version: i16) {
        if version == 0 {
            self.raw_tokens = true;
        } else {
            self.handshaken = true;
        }
    }
}

/// Closes the connection if it must authenticate first: called for every request but those
/// of the APIs that declare they run before authentication (the SASL steps and ApiVersions:
/// `KafkaApi::BEFORE_AUTHENTICATION`).
pub fn gate(session: &SaslSession, api_key: ApiKey) -> Option<Started<KafkaResponse>> {
    if session.authentication.is_required() {
        tracing::info!(
            ?api_key,
            "Kafka request before SASL authentication on a server with --auth; closing connection"
        );
        return Some(Started {
            response: None,
            close: true,
        });
    }
    None
}

/// Answers one raw SASL token frame after SaslHandshake v0: the client-first message gets the
/// server-first, the client-final the server-final, each as a raw frame; then the connection is
/// authenticated and reads Kafka requests again. Anything wrong closes the connection without
/// an answer (v0 has no way to say why; the log line does).
pub fn raw_token(session: &mut SaslSession, token: Bytes) -> Started<KafkaResponse> {
    let close = Started {
        response: None,
        close: true,
    };
    if token.len() > MAX_RAW_SASL_TOKEN_BYTES {
        tracing::info!(
            bytes = token.len(),
            limit = MAX_RAW_SASL_TOKEN_BYTES,
            "raw SASL token (after SaslHandshake v0) over the limit; closing connection"
        );
        session.raw_tokens = false;
        return close;
    }
    let authentication = &mut session.authentication;
    let result = if authentication.in_exchange() {
        authentication.finish(&token)
    } else {
        authentication.start(&token)
    };
    match result {
        Ok(message) => {
            // Done once the exchange is over: the principal is set and requests follow.
            session.raw_tokens = session.authentication.is_required();
            Started::ready(KafkaResponse {
                correlation_id: 0,
                api_key: ApiKey::SaslHandshake,
                api_version: 0,
                body: ResponseBody::RawSaslToken(Bytes::from(message)),
            })
        }
        Err(error) => {
            tracing::info!(%error, "SASL authentication (raw tokens after SaslHandshake v0) failed; closing connection");
            session.raw_tokens = false;
            close
        }
    }
}
