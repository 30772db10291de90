//! FindCoordinator (key 10), v0..=3: which broker coordinates a group. This broker is the
//! coordinator of every group (it is the only broker), answered at its advertised address.
//!
//! - `key_type` 0 (a consumer group): this broker, whatever the group id (a group id is
//!   checked where it is used: JoinGroup, OffsetCommit, ...).
//! - `key_type` 1 (a transactional id): `COORDINATOR_NOT_AVAILABLE` with a message saying that
//!   transactions are not implemented; a transactional producer keeps looking and then times
//!   out, as it would against a Kafka cluster without a transaction coordinator.
//! - Any other key type (share groups are 2 in newer Kafka): `INVALID_REQUEST`.
//! - v4+ (several keys per request, KIP-699) is not advertised.

use kafka_protocol::messages::{ApiKey, BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::response::{KafkaResponse, ResponseBody};
use super::super::KafkaConfig;

/// A consumer group's coordinator.
pub const KEY_TYPE_GROUP: i8 = 0;
/// A transactional producer's coordinator.
pub const KEY_TYPE_TRANSACTION: i8 = 1;

/// The answer to a FindCoordinator request.
pub fn handle(
    config: &KafkaConfig,
    node: BrokerId,
    correlation_id: i32,
    version: i16,
    request: &FindCoordinatorRequest,
) -> KafkaResponse {
    let refused = |error: ResponseError, message: &str| {
        let response = FindCoordinatorResponse::default()
            .with_error_code(error.code())
            .with_node_id(BrokerId(-1))
            .with_port(-1);
        match version {
            0 => response,
            _ => response.with_error_message(Some(StrBytes::from_string(message.to_string()))),
        }
    };
    let body = match request.key_type {
        KEY_TYPE_GROUP => FindCoordinatorResponse::default()
            .with_node_id(node)
            .with_host(StrBytes::from_string(config.advertised_host.clone()))
            .with_port(i32::from(config.advertised_port)),
        KEY_TYPE_TRANSACTION => refused(
            ResponseError::CoordinatorNotAvailable,
            "transactions are not implemented by this fencelog broker",
        ),
        other => refused(
            ResponseError::InvalidRequest,
            &format!("unknown coordinator key type {other} (0: group, 1: transaction)"),
        ),
    };
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::FindCoordinator,
        api_version: version,
        body: ResponseBody::FindCoordinator(body),
    }
}
