//! SaslAuthenticate (key 36), v0..=2: carries the SCRAM-SHA-256 messages after a
//! SaslHandshake v1 (KIP-152), with Kafka headers and error codes. The state machine and the
//! choices a client sees are described in [`super::super::sasl`].
//!
//! Answered before authentication (it is how a client authenticates); a failed exchange is
//! answered `SASL_AUTHENTICATION_FAILED` and closes the connection, as Kafka's broker does.

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::response::{KafkaResponse, ResponseBody};
use super::super::sasl::SaslSession;
use super::api::{Call, KafkaApi};
use crate::auth::AuthenticationError;
use crate::server::protocol::Started;

/// SaslAuthenticate as the listener serves it: a SASL step, open before authentication.
pub struct SaslAuthenticate;

impl KafkaApi for SaslAuthenticate {
    type Request = SaslAuthenticateRequest;
    const KEY: ApiKey = ApiKey::SaslAuthenticate;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 2;
    const BEFORE_AUTHENTICATION: bool = true;

    fn start(call: Call<'_>, request: SaslAuthenticateRequest) -> Started<KafkaResponse> {
        authenticate(
            &mut call.session.sasl,
            call.correlation_id,
            call.version,
            &request,
        )
    }
}

/// Answers SaslAuthenticate: the first carries the client-first message, the second the
/// client-final one. A failure is answered and the connection closed.
pub fn authenticate(
    session: &mut SaslSession,
    correlation_id: i32,
    version: i16,
    request: &SaslAuthenticateRequest,
) -> Started<KafkaResponse> {
    let handshaken = session.handshaken();
    let authentication = &mut session.authentication;
    let result = if !authentication.is_enabled() || !handshaken {
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
            body: ResponseBody::message(body),
        })
    }
}
