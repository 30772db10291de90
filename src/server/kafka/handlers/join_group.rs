//! JoinGroup (key 11), v0..=9: a member joins (or rejoins) a consumer group through the
//! broker's [`GroupCoordinator`](crate::broker::coordinator::GroupCoordinator); the answer comes
//! when the rebalance it is part of completes, so the response is a future that may wait up to
//! the longest rebalance timeout of the group's members (responses after it on the same
//! connection wait too, as they do in Kafka).
//!
//! What a client sees:
//! - v4+: a new member (empty member id) is answered `MEMBER_ID_REQUIRED` (79) with its id and
//!   must join again with it (KIP-394); v0..=3 members get their id in the completed join.
//! - v0 has no rebalance timeout: the session timeout is used, as Kafka does.
//! - The session timeout must be within the coordinator's bounds (6 s to 30 min by default,
//!   Kafka's), else `INVALID_SESSION_TIMEOUT` (26).
//! - The leader's answer lists every member with its metadata for the chosen protocol (and its
//!   `group.instance.id` from v5); the others get an empty list. `skip_assignment` (v9) is
//!   always false: the leader always assigns.
//! - Static membership (`group.instance.id`, v5+): a static member gets its id at once (no
//!   `MEMBER_ID_REQUIRED`, as in Kafka), and an instance that restarts replaces its previous
//!   member at once; the group still rebalances (Kafka would skip that rebalance).
//! - Errors carry generation -1 and the member id the request sent (the new id for
//!   `MEMBER_ID_REQUIRED`); the protocol name is null from v7, empty before.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{ApiKey, JoinGroupRequest, JoinGroupResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::authorization::group_refused;
use super::super::errors::group_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::coordinator::{GroupError, JoinRequest, JoinResponse};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// JoinGroup as the listener serves it.
pub struct JoinGroup;

impl KafkaApi for JoinGroup {
    type Request = JoinGroupRequest;
    const KEY: ApiKey = ApiKey::JoinGroup;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 9;

    /// `consume` on some topic (fencelog has no group ACLs: a consumer may use groups).
    fn authorize(access: &Access, _request: &JoinGroupRequest) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Consume)
    }

    /// `GROUP_AUTHORIZATION_FAILED`.
    fn refuse(_refusal: &AclRefusal<'_>, _request: &JoinGroupRequest) -> Option<ResponseBody> {
        Some(ResponseBody::message(
            JoinGroupResponse::default().with_error_code(group_refused()),
        ))
    }

    fn start(call: Call<'_>, request: JoinGroupRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.session.client_id.clone().unwrap_or_default(),
            call.session.peer,
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// Joins the group; resolves when the rebalance completes (or the join is refused). `peer` is
/// the member's address, which DescribeGroups reports as its client host.
pub async fn handle(
    service: Arc<BrokerService>,
    client_id: String,
    peer: SocketAddr,
    correlation_id: i32,
    version: i16,
    request: JoinGroupRequest,
) -> KafkaResponse {
    let member_id = request.member_id.to_string();
    if let Some(reason) = request.reason.as_deref() {
        tracing::debug!(group = %request.group_id.0, %member_id, reason, "JoinGroup");
    }
    if let Err(refused) = service
        .groups()
        .require_coordinator(request.group_id.0.as_str())
        .await
    {
        let code = super::super::errors::kafka_error(&refused).code();
        return KafkaResponse {
            correlation_id,
            api_key: ApiKey::JoinGroup,
            api_version: version,
            body: ResponseBody::message(refused_with(version, member_id, code)),
        };
    }
    if service
        .groups()
        .consumer_groups()
        .has_members(request.group_id.0.as_str())
    {
        // The group id belongs to a consumer-protocol (KIP-848) group with members.
        let code = group_error(&GroupError::InconsistentGroupProtocol).code();
        return KafkaResponse {
            correlation_id,
            api_key: ApiKey::JoinGroup,
            api_version: version,
            body: ResponseBody::message(refused_with(version, member_id, code)),
        };
    }
    let outcome = service
        .groups()
        .coordinator()
        .join(join_request(client_id, client_host(peer), version, request))
        .await;
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::JoinGroup,
        api_version: version,
        body: ResponseBody::message(response(version, member_id, outcome)),
    }
}

/// A duration from a Kafka millisecond field; a negative one is zero (and refused where a
/// bound applies).
pub fn from_ms(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// A member's host as Kafka's coordinator reports it (`InetAddress.toString()`: `/` then the
/// IP address).
pub(super) fn client_host(peer: SocketAddr) -> String {
    format!("/{}", peer.ip())
}

fn join_request(
    client_id: String,
    client_host: String,
    version: i16,
    request: JoinGroupRequest,
) -> JoinRequest {
    let session_timeout = from_ms(request.session_timeout_ms);
    JoinRequest {
        group_id: request.group_id.0.to_string(),
        member_id: request.member_id.to_string(),
        group_instance_id: request.group_instance_id.map(|id| id.to_string()),
        client_id,
        client_host,
        session_timeout,
        rebalance_timeout: match version {
            0 => session_timeout,
            _ => from_ms(request.rebalance_timeout_ms),
        },
        protocol_type: request.protocol_type.to_string(),
        protocols: request
            .protocols
            .into_iter()
            .map(|protocol| (protocol.name.to_string(), protocol.metadata))
            .collect(),
        require_known_member_id: version >= 4,
    }
}

/// A refused join: the error, no generation, and the member id to use next.
fn refused_with(version: i16, member_id: String, error_code: i16) -> JoinGroupResponse {
    let protocol_name = (version < 7).then(StrBytes::default);
    JoinGroupResponse::default()
        .with_error_code(error_code)
        .with_generation_id(-1)
        .with_protocol_name(protocol_name)
        .with_member_id(StrBytes::from_string(member_id))
}

fn response(
    version: i16,
    member_id: String,
    outcome: Result<JoinResponse, GroupError>,
) -> JoinGroupResponse {
    let joined = match outcome {
        Ok(joined) => joined,
        Err(error) => {
            let member_id = match &error {
                GroupError::MemberIdRequired { member_id } => member_id.clone(),
                _ => member_id,
            };
            return refused_with(version, member_id, group_error(&error).code());
        }
    };
    let members = joined
        .members
        .into_iter()
        .map(|member| {
            JoinGroupResponseMember::default()
                .with_member_id(StrBytes::from_string(member.member_id))
                .with_group_instance_id(member.group_instance_id.map(StrBytes::from_string))
                .with_metadata(member.metadata)
        })
        .collect();
    JoinGroupResponse::default()
        .with_generation_id(joined.generation_id)
        .with_protocol_type(Some(StrBytes::from_string(joined.protocol_type)))
        .with_protocol_name(Some(StrBytes::from_string(joined.protocol_name)))
        .with_leader(StrBytes::from_string(joined.leader))
        .with_member_id(StrBytes::from_string(joined.member_id))
        .with_members(members)
}
