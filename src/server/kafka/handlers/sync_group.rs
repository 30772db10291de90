//! SyncGroup (key 14), v0..=5: after a join, every member syncs; the leader's sync brings each
//! member's assignment, and every member's sync is answered with its own part once the leader's
//! has arrived (so a follower's response may wait for the leader's request).
//!
//! What a client sees:
//! - The assignment bytes are relayed as the leader sent them: the coordinator does not read
//!   them (a member the leader gave nothing gets an empty assignment).
//! - A sync of another generation is `ILLEGAL_GENERATION` (22), of an unknown member
//!   `UNKNOWN_MEMBER_ID` (25), during a new rebalance `REBALANCE_IN_PROGRESS` (27): rejoin.
//! - v5's `protocol_type` and `protocol_name` are echoed from the request on success (they are
//!   what the member's join answered, which is what clients check them against); null on error.
//! - `group.instance.id` (v3+) is accepted and not used.

use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, SyncGroupRequest, SyncGroupResponse};

use super::super::authorization::group_refused;
use super::super::errors::group_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::coordinator::SyncRequest;
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// SyncGroup as the listener serves it.
pub struct SyncGroup;

impl KafkaApi for SyncGroup {
    type Request = SyncGroupRequest;
    const KEY: ApiKey = ApiKey::SyncGroup;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 5;

    /// `consume` on some topic (fencelog has no group ACLs: a consumer may use groups).
    fn authorize(access: &Access, _request: &SyncGroupRequest) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Consume)
    }

    /// `GROUP_AUTHORIZATION_FAILED`.
    fn refuse(_refusal: &AclRefusal<'_>, _request: &SyncGroupRequest) -> Option<ResponseBody> {
        Some(ResponseBody::message(
            SyncGroupResponse::default().with_error_code(group_refused()),
        ))
    }

    fn start(call: Call<'_>, request: SyncGroupRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// Syncs the member; resolves with its assignment (or the refusal).
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: SyncGroupRequest,
) -> KafkaResponse {
    let sync = SyncRequest {
        group_id: request.group_id.0.to_string(),
        generation_id: request.generation_id,
        member_id: request.member_id.to_string(),
        assignments: request
            .assignments
            .into_iter()
            .map(|assignment| (assignment.member_id.to_string(), assignment.assignment))
            .collect(),
    };
    if let Err(refused) = service.groups().require_coordinator(&sync.group_id).await {
        let code = super::super::errors::kafka_error(&refused).code();
        return KafkaResponse {
            correlation_id,
            api_key: ApiKey::SyncGroup,
            api_version: version,
            body: ResponseBody::message(SyncGroupResponse::default().with_error_code(code)),
        };
    }
    let body = match service.groups().coordinator().sync(sync).await {
        Ok(assignment) => SyncGroupResponse::default()
            .with_protocol_type(request.protocol_type)
            .with_protocol_name(request.protocol_name)
            .with_assignment(assignment),
        Err(error) => SyncGroupResponse::default().with_error_code(group_error(&error).code()),
    };
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::SyncGroup,
        api_version: version,
        body: ResponseBody::message(body),
    }
}
