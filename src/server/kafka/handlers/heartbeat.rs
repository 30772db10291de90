//! Heartbeat (key 12), v0..=4: a member of a stable group says it is alive within its session
//! timeout; a member that stops is removed and the group rebalances.
//!
//! What a client sees: no error while the group is stable (or waiting for the leader's sync);
//! `REBALANCE_IN_PROGRESS` (27) while the group waits for its members to rejoin (the member must
//! join again); `ILLEGAL_GENERATION` (22) for an old generation, `UNKNOWN_MEMBER_ID` (25) for a
//! member that left or expired. `group.instance.id` (v3+) is accepted and not used.

use kafka_protocol::messages::{ApiKey, HeartbeatRequest, HeartbeatResponse};

use std::sync::Arc;

use super::super::errors::{group_error, kafka_error};
use super::super::response::{KafkaResponse, ResponseBody};
use crate::broker::BrokerService;

/// The answer to a Heartbeat request (immediate: a heartbeat never waits, except on a cluster
/// for the group's new coordinator to load the group, or to learn it is not the coordinator:
/// `NOT_COORDINATOR`).
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: HeartbeatRequest,
) -> KafkaResponse {
    let group_id = request.group_id.0.as_str();
    let error_code = match service.groups().require_coordinator(group_id).await {
        Err(refused) => kafka_error(&refused).code(),
        Ok(()) => match service.groups().coordinator().heartbeat(
            group_id,
            request.generation_id,
            request.member_id.as_str(),
        ) {
            Ok(()) => 0,
            Err(error) => group_error(&error).code(),
        },
    };
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::Heartbeat,
        api_version: version,
        body: ResponseBody::Heartbeat(HeartbeatResponse::default().with_error_code(error_code)),
    }
}
