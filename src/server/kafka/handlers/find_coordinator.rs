//! FindCoordinator (key 10), v0..=3: which broker coordinates a group.
//!
//! - `key_type` 0 (a consumer group): standalone, this broker, whatever the group id (a group
//!   id is checked where it is used: JoinGroup, OffsetCommit, ...). In a cluster, the leader of
//!   the group's partition of the offsets topic (`__consumer_offsets`, chosen by Java's
//!   `String.hashCode` of the group id as Kafka chooses it; see `crate::broker::offsets_topic`),
//!   created by the first request that needs it. `COORDINATOR_NOT_AVAILABLE` (retriable) while
//!   the partition has no leader, the topic cannot be created yet (too few live brokers for its
//!   replication factor), or the leader has no Kafka listener registered.
//! - `key_type` 1 (a transactional id): its transaction coordinator
//!   (`crate::broker::transactions`), found as a group of that name would be: this broker
//!   standalone, the leader of the id's offsets partition in a cluster (the id's state lives
//!   there, docs/kafka.md "Transactions on a cluster").
//! - Any other key type (share groups are 2 in newer Kafka): `INVALID_REQUEST`.
//! - v4+ (several keys per request, KIP-699) is not advertised.

use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{ApiKey, BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use std::sync::Arc;

use super::super::authorization::group_refused;
use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use super::metadata;
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// FindCoordinator as the listener serves it.
pub struct FindCoordinator;

impl KafkaApi for FindCoordinator {
    type Request = FindCoordinatorRequest;
    const KEY: ApiKey = ApiKey::FindCoordinator;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 3;

    /// `consume` on some topic (fencelog has no group ACLs: a consumer may use groups).
    fn authorize(access: &Access, _request: &FindCoordinatorRequest) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Consume)
    }

    /// `GROUP_AUTHORIZATION_FAILED` with the reason.
    fn refuse(refusal: &AclRefusal<'_>, _request: &FindCoordinatorRequest) -> Option<ResponseBody> {
        Some(ResponseBody::message(
            FindCoordinatorResponse::default()
                .with_error_code(group_refused())
                .with_error_message(refusal.message()),
        ))
    }

    fn start(call: Call<'_>, request: FindCoordinatorRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            metadata::brokers(call.service, call.config),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// A consumer group's coordinator.
pub const KEY_TYPE_GROUP: i8 = 0;
/// A transactional producer's coordinator.
pub const KEY_TYPE_TRANSACTION: i8 = 1;

/// The answer to a FindCoordinator request.
///
/// `brokers` are the brokers Metadata lists now (read before the answer may wait for the
/// offsets topic to be created).
pub async fn handle(
    service: Arc<BrokerService>,
    brokers: Vec<MetadataResponseBroker>,
    correlation_id: i32,
    version: i16,
    request: FindCoordinatorRequest,
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
        // A transactional id lives where a group of that name would: its offsets partition.
        KEY_TYPE_GROUP | KEY_TYPE_TRANSACTION => {
            let what = match request.key_type {
                KEY_TYPE_GROUP => "group",
                _ => "transactional id",
            };
            match service.groups().coordinator_of(request.key.as_str()).await {
                Err(error) => refused(kafka_error(&error), &error.to_string()),
                Ok(node_id) => {
                    match brokers.iter().find(|broker| broker.node_id.0 == node_id as i32) {
                        Some(broker) => FindCoordinatorResponse::default()
                            .with_node_id(broker.node_id)
                            .with_host(broker.host.clone())
                            .with_port(broker.port),
                        None => refused(
                            ResponseError::CoordinatorNotAvailable,
                            &format!("the {what}'s coordinator, broker {node_id}, has no Kafka listener registered"),
                        ),
                    }
                }
            }
        }
        other => refused(
            ResponseError::InvalidRequest,
            &format!("unknown coordinator key type {other} (0: group, 1: transaction)"),
        ),
    };
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::FindCoordinator,
        api_version: version,
        body: ResponseBody::message(body),
    }
}
