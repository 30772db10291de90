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
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::response::{KafkaResponse, ResponseBody};
use crate::auth::{AuthenticationError, ConnectionAuthentication, MECHANISM};
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
}

/// Whether a request of `api_key` may be answered before authentication.
pub fn allowed_before_authentication(api_key: ApiKey) -> bool {
    matches!(
        api_key,
        ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
    )
}

/// Closes the connection if it must authenticate first and `api_key` is not a SASL step.
pub fn gate(session: &SaslSession, api_key: ApiKey) -> Option<Started<KafkaResponse>> {
    if session.authentication.is_required() && !allowed_before_authentication(api_key) {
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

/// Answers SaslHandshake: after v1 the tokens come in SaslAuthenticate requests, after v0 as
/// raw frames ([`raw_token`]).
pub fn handshake(
    session: &mut SaslSession,
    correlation_id: i32,
    version: i16,
    request: &SaslHandshakeRequest,
) -> Started<KafkaResponse> {
    let error = match session
        .authentication
        .check_mechanism(request.mechanism.as_str())
    {
        Ok(()) => {
            if version == 0 {
                session.raw_tokens = true;
            } else {
                session.handshaken = true;
            }
            None
        }
        Err(AuthenticationError::UnsupportedMechanism(_)) => {
            Some(ResponseError::UnsupportedSaslMechanism)
        }
        Err(_) => Some(ResponseError::IllegalSaslState),
    };
    let body = SaslHandshakeResponse::default()
        .with_error_code(error.map_or(0, |error| error.code()))
        .with_mechanisms(vec![StrBytes::from_static_str(MECHANISM)]);
    Started::ready(KafkaResponse {
        correlation_id,
        api_key: ApiKey::SaslHandshake,
        api_version: version,
        body: ResponseBody::SaslHandshake(body),
    })
}

/// Answers SaslAuthenticate: the first carries the client-first message, the second the
/// client-final one. A failure is answered and the connection closed.
pub fn authenticate(
    session: &mut SaslSession,
    correlation_id: i32,
    version: i16,
    request: &SaslAuthenticateRequest,
) -> Started<KafkaResponse> {
    let authentication = &mut session.authentication;
    let result = if !authentication.is_enabled() || !session.handshaken {
        Err(AuthenticationError::NotStarted)
    } else if authentication.in_exchange() {
        authentication.finish(&request.auth_bytes)
    } else {
        authentication.start(&request.auth_bytes)
    };
    let (body, close) = match result {
        Ok(message) => (
            SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(message)),
            false,
        ),
        Err(error) => {
            let code = if error.is_state_error() {
                ResponseError::IllegalSaslState
            } else {
                ResponseError::SaslAuthenticationFailed
            };
            let message = if authentication.is_enabled() || !error.is_state_error() {
                error.to_string()
            } else {
                AuthenticationError::NotEnabled.to_string()
            };
            (
                SaslAuthenticateResponse::default()
                    .with_error_code(code.code())
                    .with_error_message(Some(StrBytes::from_string(message))),
                // Kafka closes after a failed authentication; a server without --auth keeps
                // the connection (nothing is at stake).
                authentication.is_enabled(),
            )
        }
    };
    Started {
        close,
        ..Started::ready(KafkaResponse {
            correlation_id,
            api_key: ApiKey::SaslAuthenticate,
            api_version: version,
            body: ResponseBody::SaslAuthenticate(body),
        })
    }
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
