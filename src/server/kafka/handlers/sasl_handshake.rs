//! SaslHandshake (key 17), v0..=1: names the SASL mechanism (SCRAM-SHA-256 only). After v1
//! the tokens come in SaslAuthenticate requests; after v0 as raw frames, which
//! [`super::super::sasl`] reads before any Kafka decoding (the state machine and the choices a
//! client sees are described there).
//!
//! Always advertised, as Kafka's brokers do on every listener, and answered before
//! authentication; on a server without `--auth` it answers `ILLEGAL_SASL_STATE`.

use kafka_protocol::messages::{ApiKey, SaslHandshakeRequest, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::response::{KafkaResponse, ResponseBody};
use super::super::sasl::SaslSession;
use super::api::{Call, KafkaApi};
use crate::auth::{AuthenticationError, MECHANISM};
use crate::server::protocol::Started;

/// SaslHandshake as the listener serves it: a SASL step, open before authentication.
pub struct SaslHandshake;

impl KafkaApi for SaslHandshake {
    type Request = SaslHandshakeRequest;
    const KEY: ApiKey = ApiKey::SaslHandshake;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 1;
    const BEFORE_AUTHENTICATION: bool = true;

    fn start(call: Call<'_>, request: SaslHandshakeRequest) -> Started<KafkaResponse> {
        handshake(
            &mut call.session.sasl,
            call.correlation_id,
            call.version,
            &request,
        )
    }
}

/// Answers SaslHandshake: after v1 the tokens come in SaslAuthenticate requests, after v0 as
/// raw frames ([`super::super::sasl::raw_token`]).
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
            session.chose_mechanism(version);
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
        body: ResponseBody::message(body),
    })
}
