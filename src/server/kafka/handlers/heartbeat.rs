//! Heartbeat (key 12), v0..=4: a member of a stable group says it is alive within its session
//! timeout; a member that stops is removed and the group rebalances.
//!
//! What a client sees: no error while the group is stable (or waiting for the leader's sync);
//! `REBALANCE_IN_PROGRESS` (27) while the group waits for its members to rejoin (the member must
//! join again); `ILLEGAL_GENERATION` (22) for an old generation, `UNKNOWN_MEMBER_ID` (25) for a
//! member that left or expired. `group.instance.id` (v3+) is accepted and not used.

use kafka_protocol::messages::{ApiKey, HeartbeatRequest, HeartbeatResponse};

use std::sync::Arc;

use super::super::authorization::group_refused;
use super::super::errors::{group_error, kafka_error};
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// Heartbeat as the listener serves it.
pub struct Heartbeat;

impl KafkaApi for Heartbeat {
    type Request = HeartbeatRequest;
    const KEY: ApiKey = ApiKey::Heartbeat;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 4;

    /// `consume` on some topic (fencelog has no group ACLs: a consumer may use groups).
    fn authorize(access: &Access, _request: &HeartbeatRequest) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Consume)
    }

    /// `GROUP_AUTHORIZATION_FAILED`.
    fn refuse(_refusal: &AclRefusal<'_>, _request: &HeartbeatRequest) -> Option<ResponseBody> {
        Some(ResponseBody::message(
            HeartbeatResponse::default().with_error_code(group_refused()),
        ))
    }

    fn start(call: Call<'_>, request: HeartbeatRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

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
        body: ResponseBody::message(HeartbeatResponse::default().with_error_code(error_code)),
    }
}
