//! LeaveGroup (key 13), v0..=5: members leave a group at once (a consumer closing), and the
//! others rebalance without waiting for a session to expire.
//!
//! What a client sees:
//! - v0..=2 name one member; its error (`UNKNOWN_MEMBER_ID`, 25, if it is not a member) is the
//!   response's.
//! - v3+ name several members (KIP-345); each gets its own error code, and the response's is
//!   none. A member named only by its `group.instance.id` (empty member id) is not found:
//!   static members are not tracked by instance id, so it is `UNKNOWN_MEMBER_ID`.
//! - The `reason` (v5) is logged.

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{ApiKey, LeaveGroupRequest, LeaveGroupResponse};

use std::sync::Arc;

use super::super::authorization::group_refused;
use super::super::errors::{group_error, kafka_error};
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// LeaveGroup as the listener serves it.
pub struct LeaveGroup;

impl KafkaApi for LeaveGroup {
    type Request = LeaveGroupRequest;
    const KEY: ApiKey = ApiKey::LeaveGroup;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 5;

    /// `consume` on some topic (fencelog has no group ACLs: a consumer may use groups).
    fn authorize(access: &Access, _request: &LeaveGroupRequest) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Consume)
    }

    /// `GROUP_AUTHORIZATION_FAILED`.
    fn refuse(_refusal: &AclRefusal<'_>, _request: &LeaveGroupRequest) -> Option<ResponseBody> {
        Some(ResponseBody::message(
            LeaveGroupResponse::default().with_error_code(group_refused()),
        ))
    }

    fn start(call: Call<'_>, request: LeaveGroupRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// The answer to a LeaveGroup request (immediate: the rest of the group rebalances after it).
/// On a cluster, a broker that does not coordinate the group answers `NOT_COORDINATOR`.
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: LeaveGroupRequest,
) -> KafkaResponse {
    let group_id = request.group_id.0.as_str();
    if let Err(refused) = service.groups().require_coordinator(group_id).await {
        return KafkaResponse {
            correlation_id,
            api_key: ApiKey::LeaveGroup,
            api_version: version,
            body: ResponseBody::message(
                LeaveGroupResponse::default().with_error_code(kafka_error(&refused).code()),
            ),
        };
    }
    let coordinator = service.groups().coordinator();
    let code = |result: &Result<(), _>| match result {
        Ok(()) => 0,
        Err(error) => group_error(error).code(),
    };
    let body = if version < 3 {
        let results = coordinator
            .leave(group_id, &[request.member_id.to_string()])
            .await;
        let error_code = results.first().map_or(0, code);
        LeaveGroupResponse::default().with_error_code(error_code)
    } else {
        let member_ids: Vec<String> = request
            .members
            .iter()
            .map(|member| member.member_id.to_string())
            .collect();
        for member in &request.members {
            if let Some(reason) = member.reason.as_deref() {
                tracing::debug!(group = group_id, member_id = %member.member_id, reason, "LeaveGroup");
            }
        }
        let results = match member_ids.is_empty() {
            true => Vec::new(),
            false => coordinator.leave(group_id, &member_ids).await,
        };
        let members = request
            .members
            .iter()
            .zip(&results)
            .map(|(member, result)| {
                MemberResponse::default()
                    .with_member_id(member.member_id.clone())
                    .with_group_instance_id(member.group_instance_id.clone())
                    .with_error_code(code(result))
            })
            .collect();
        LeaveGroupResponse::default().with_members(members)
    };
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::LeaveGroup,
        api_version: version,
        body: ResponseBody::message(body),
    }
}
