//! FindCoordinator (key 10), v0..=3: which broker coordinates a group.
//!
//! - `key_type` 0 (a consumer group): standalone, this broker, whatever the group id (a group
//!   id is checked where it is used: JoinGroup, OffsetCommit, ...). In a cluster, one of the
//!   brokers Metadata lists, chosen by the group id alone (Java's `String.hashCode` modulo their
//!   number, in node id order, as Kafka picks a group's offsets partition), so every member of
//!   a group is sent to the same broker whichever broker it asked. Groups and their committed
//!   offsets live on that broker (not replicated yet: see `docs/replication.md`).
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
use crate::broker::BrokerService;

/// A consumer group's coordinator.
pub const KEY_TYPE_GROUP: i8 = 0;
/// A transactional producer's coordinator.
pub const KEY_TYPE_TRANSACTION: i8 = 1;

/// The answer to a FindCoordinator request.
pub fn handle(
    service: &BrokerService,
    config: &KafkaConfig,
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
        KEY_TYPE_GROUP => {
            let brokers = super::metadata::brokers(service, config);
            let index = java_string_hash(request.key.as_str()).unsigned_abs() as usize
                % brokers.len().max(1);
            match brokers.get(index) {
                Some(broker) => FindCoordinatorResponse::default()
                    .with_node_id(broker.node_id)
                    .with_host(broker.host.clone())
                    .with_port(broker.port),
                None => refused(
                    ResponseError::CoordinatorNotAvailable,
                    "no broker is available to coordinate groups",
                ),
            }
        }
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

/// Java's `String.hashCode`: `s[0]*31^(n-1) + ... + s[n-1]` over UTF-16 code units, wrapping.
fn java_string_hash(text: &str) -> i32 {
    text.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

#[cfg(test)]
mod tests {
    use super::java_string_hash;

    /// The values Java computes.
    #[test]
    fn hash_is_javas() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("hello world, this wraps"), 1_020_677_791);
    }
}
