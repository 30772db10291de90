//! SASL on the Kafka listener (KIP-152): SaslHandshake v1 names the mechanism, then
//! SaslAuthenticate requests carry the SCRAM-SHA-256 messages, driving the same per-connection
//! state machine as the native protocol ([`crate::auth::ConnectionAuthentication`]).
//!
//! What a Kafka client sees, and why:
//! - Both APIs are always advertised, as Kafka's brokers do on every listener. On a server
//!   without `--auth`, or after authentication, they answer `ILLEGAL_SASL_STATE` (Kafka's answer
//!   on a PLAINTEXT listener), so a client configured for SASL learns the mismatch at once.
//! - Only SaslHandshake v1 is implemented: v0 means the SASL tokens follow as raw frames without
//!   Kafka headers, which every client maintained since Kafka 1.0 replaced with v1 + SaslAuthenticate.
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

/// A Kafka connection's SASL state.
#[derive(Debug, Default)]
pub struct SaslSession {
    /// The SCRAM exchange and, once done, the principal.
    pub authentication: ConnectionAuthentication,
    /// Whether SaslHandshake chose the mechanism (SaslAuthenticate needs it first).
    handshaken: bool,
}

impl SaslSession {
    /// The state of a new connection.
    pub fn new(authentication: ConnectionAuthentication) -> Self {
        Self {
            authentication,
            handshaken: false,
        }
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

/// Answers SaslHandshake (v1).
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
            session.handshaken = true;
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
