//! ApiVersions (key 18), v0..=4: the handler list ([`super::HANDLERS`]: each API's key and
//! versions), and the KIP-511 fallback for a version we do not have. Answered before SASL
//! authentication too, as Kafka does, so a client can learn the SASL versions.
//!
//! v3+ requests carry the client's software name and version; Kafka refuses names outside
//! `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?` with `INVALID_REQUEST`, and so do we, so a
//! client tested against us behaves the same against Kafka. v4 differs from v3 only in allowing
//! a supported feature's minimum version to be 0; we list no features, so they answer alike.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::ResponseError;

use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{Call, KafkaApi};
use super::HANDLERS;
use crate::server::protocol::Started;

/// ApiVersions as the listener serves it: no ACL, open before authentication.
pub struct ApiVersions;

impl KafkaApi for ApiVersions {
    type Request = ApiVersionsRequest;
    const KEY: ApiKey = ApiKey::ApiVersions;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 4;
    const BEFORE_AUTHENTICATION: bool = true;

    fn start(call: Call<'_>, request: ApiVersionsRequest) -> Started<KafkaResponse> {
        Started::ready(handle(call.correlation_id, call.version, &request))
    }
}

/// Longest client software name or version accepted (Kafka has no limit; this is generous).
pub const MAX_CLIENT_SOFTWARE_BYTES: usize = 256;

/// The answer to a supported ApiVersions request.
pub fn handle(correlation_id: i32, version: i16, request: &ApiVersionsRequest) -> KafkaResponse {
    let valid = version < 3
        || (valid_software_field(&request.client_software_name)
            && valid_software_field(&request.client_software_version));
    let error = if valid {
        0
    } else {
        tracing::debug!(
            name = %request.client_software_name.as_str(),
            version = %request.client_software_version.as_str(),
            "ApiVersions with an invalid client software name or version"
        );
        ResponseError::InvalidRequest.code()
    };
    response(correlation_id, version, error)
}

/// The KIP-511 answer to an ApiVersions version we do not implement: `UNSUPPORTED_VERSION` and
/// the table, in a v0 body, so the client retries with the newest version both sides have.
pub fn unsupported(correlation_id: i32) -> KafkaResponse {
    response(correlation_id, 0, ResponseError::UnsupportedVersion.code())
}

fn response(correlation_id: i32, version: i16, error_code: i16) -> KafkaResponse {
    let api_keys = HANDLERS
        .iter()
        .map(|handler| {
            ApiVersion::default()
                .with_api_key(handler.key as i16)
                .with_min_version(handler.min_version)
                .with_max_version(handler.max_version)
        })
        .collect();
    let body = ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys);
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::ApiVersions,
        api_version: version,
        body: ResponseBody::message(body),
    }
}

/// Kafka's rule for client software names and versions:
/// `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`.
fn valid_software_field(value: &str) -> bool {
    let bytes = value.as_bytes();
    let edge = |byte: &u8| byte.is_ascii_alphanumeric();
    let inner = |byte: &u8| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.');
    !bytes.is_empty()
        && bytes.len() <= MAX_CLIENT_SOFTWARE_BYTES
        && bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
        && bytes.iter().all(inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names Kafka accepts are accepted; empty, edged with punctuation, or other bytes are not.
    #[test]
    fn client_software_names_follow_kafkas_rule() {
        for good in ["librdkafka", "apache-kafka-java", "2.0.2", "a"] {
            assert!(valid_software_field(good), "{good}");
        }
        for bad in ["", "-x", "x.", "with space", "ünïcode"] {
            assert!(!valid_software_field(bad), "{bad}");
        }
    }
}
