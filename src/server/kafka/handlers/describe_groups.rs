//! DescribeGroups (key 15), v0..=5: an admin asks for groups by id and gets each one's state,
//! protocol and members (Kafka's `kafka-consumer-groups --describe`, kafka-python's
//! `describe_groups`, confluent-kafka's `describe_consumer_groups`, kafkajs' `describeGroups`).
//!
//! Answered from the coordinator's memory ([`GroupCoordinator::describe`]) and, for a group
//! without members, from the committed-offset store. What a client sees, as from Kafka's own
//! coordinator:
//! - A group with members: its state (`PreparingRebalance`, `CompletingRebalance`, `Stable`),
//!   protocol type, and each member's id, `group.instance.id` (v4+), client id and host
//!   (`/` then the IP address). The chosen protocol (assignor), each member's subscription
//!   metadata and assignment are given only once the group is `Stable` (empty before).
//! - A group with committed offsets and no members: `Empty`, protocol type empty, no members.
//! - A group fencelog does not know: `Dead`, no error (as Kafka answers v0..=5).
//! - A consumer-protocol (KIP-848) group with members: `GROUP_ID_NOT_FOUND` (69), as Kafka
//!   answers ("not a classic group"); ConsumerGroupDescribe describes it.
//! - `include_authorized_operations` (v3+): there is no authorization, so every group
//!   operation (READ, DELETE, DESCRIBE) is allowed; not asked for, Kafka's "omitted" value.
//!
//! [`GroupCoordinator::describe`]: crate::broker::coordinator::GroupCoordinator::describe

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{ApiKey, DescribeGroupsRequest, DescribeGroupsResponse, GroupId};
use kafka_protocol::protocol::StrBytes;

use std::sync::Arc;

use super::super::authorization::group_refused;
use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::coordinator::{GroupDescription, GroupState};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// DescribeGroups as the listener serves it.
pub struct DescribeGroups;

impl KafkaApi for DescribeGroups {
    type Request = DescribeGroupsRequest;
    const KEY: ApiKey = ApiKey::DescribeGroups;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 5;

    /// `consume` on some topic (fencelog has no group ACLs).
    fn authorize(access: &Access, _request: &DescribeGroupsRequest) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Consume)
    }

    /// Every group `GROUP_AUTHORIZATION_FAILED`.
    fn refuse(_refusal: &AclRefusal<'_>, request: &DescribeGroupsRequest) -> Option<ResponseBody> {
        let groups = request
            .groups
            .iter()
            .map(|group| {
                DescribedGroup::default()
                    .with_group_id(group.clone())
                    .with_error_code(group_refused())
            })
            .collect();
        Some(ResponseBody::message(
            DescribeGroupsResponse::default().with_groups(groups),
        ))
    }

    fn start(call: Call<'_>, request: DescribeGroupsRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// Kafka's `authorized_operations` when the client did not ask for them.
pub const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;
/// Every operation on a group (bits of Kafka's ACL operation codes: READ 3, DELETE 6,
/// DESCRIBE 8): what an admin may do without an authorizer.
pub const ALL_GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8);

/// The answer to a DescribeGroups request (it reads state; on a cluster a group's new
/// coordinator may load it first, and a group coordinated elsewhere is `NOT_COORDINATOR`).
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: DescribeGroupsRequest,
) -> KafkaResponse {
    let authorized_operations = match version >= 3 && request.include_authorized_operations {
        true => ALL_GROUP_OPERATIONS,
        false => AUTHORIZED_OPERATIONS_OMITTED,
    };
    let mut groups = Vec::with_capacity(request.groups.len());
    for group_id in &request.groups {
        if let Err(refused) = service
            .groups()
            .require_coordinator(group_id.0.as_str())
            .await
        {
            groups.push(
                DescribedGroup::default()
                    .with_group_id(group_id.clone())
                    .with_error_code(kafka_error(&refused).code())
                    .with_authorized_operations(authorized_operations),
            );
            continue;
        }
        if service
            .groups()
            .consumer_groups()
            .has_members(group_id.0.as_str())
        {
            groups.push(
                DescribedGroup::default()
                    .with_group_id(group_id.clone())
                    .with_error_code(kafka_protocol::ResponseError::GroupIdNotFound.code())
                    .with_authorized_operations(authorized_operations),
            );
            continue;
        }
        let description = describe(&service, group_id.0.as_str()).await;
        groups.push(
            described(version, description).with_authorized_operations(authorized_operations),
        );
    }
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::DescribeGroups,
        api_version: version,
        body: ResponseBody::message(DescribeGroupsResponse::default().with_groups(groups)),
    }
}

/// The group as the coordinator knows it, else `Empty` if it has committed offsets, else
/// `Dead`.
async fn describe(service: &BrokerService, group_id: &str) -> GroupDescription {
    if let Some(description) = service.groups().coordinator().describe(group_id) {
        return description;
    }
    let state = match service.groups().has_committed_offsets(group_id).await {
        true => GroupState::Empty,
        false => GroupState::Dead,
    };
    GroupDescription {
        group_id: group_id.to_string(),
        state,
        generation: 0,
        protocol_type: String::new(),
        protocol: String::new(),
        members: Vec::new(),
    }
}

fn described(version: i16, description: GroupDescription) -> DescribedGroup {
    let members = description
        .members
        .into_iter()
        .map(|member| {
            DescribedGroupMember::default()
                .with_member_id(StrBytes::from_string(member.member_id))
                // v4+ only; older versions have no field for it.
                .with_group_instance_id(match version >= 4 {
                    true => member.group_instance_id.map(StrBytes::from_string),
                    false => None,
                })
                .with_client_id(StrBytes::from_string(member.client_id))
                .with_client_host(StrBytes::from_string(member.client_host))
                .with_member_metadata(member.metadata)
                .with_member_assignment(member.assignment)
        })
        .collect();
    DescribedGroup::default()
        .with_group_id(GroupId(StrBytes::from_string(description.group_id)))
        .with_group_state(StrBytes::from_static_str(description.state.kafka_name()))
        .with_protocol_type(StrBytes::from_string(description.protocol_type))
        .with_protocol_data(StrBytes::from_string(description.protocol))
        .with_members(members)
}
