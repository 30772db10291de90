//! ConsumerGroupDescribe (key 69), v0..=1: an admin describes KIP-848 consumer-protocol
//! groups (`kafka-consumer-groups --describe`, confluent-kafka's `describe_consumer_groups`
//! on a consumer group): state (`Empty`, `Reconciling`, `Stable`), group and assignment
//! epochs, the assignor, and every member with its subscription, current and target
//! assignment (topics by id and name).
//!
//! What a client sees: a group this broker coordinates but that has no consumer-protocol
//! members is `GROUP_ID_NOT_FOUND` (69) (a classic group too: describe it with
//! DescribeGroups); `NOT_COORDINATOR` (16) on a broker that does not coordinate the group.
//! Authorized operations are not computed (left at Kafka's "not requested" value).

use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as WireAssignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::authorization::group_refused;
use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::super::topic_id::{topic_id, topic_name};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::consumer_groups::Assignment;
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// ConsumerGroupDescribe as the listener serves it.
pub struct ConsumerGroupDescribe;

impl KafkaApi for ConsumerGroupDescribe {
    type Request = ConsumerGroupDescribeRequest;
    const KEY: ApiKey = ApiKey::ConsumerGroupDescribe;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 1;

    /// `consume` on some topic (fencelog has no group ACLs).
    fn authorize(
        access: &Access,
        _request: &ConsumerGroupDescribeRequest,
    ) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Consume)
    }

    /// Every group `GROUP_AUTHORIZATION_FAILED` with the reason.
    fn refuse(
        refusal: &AclRefusal<'_>,
        request: &ConsumerGroupDescribeRequest,
    ) -> Option<ResponseBody> {
        let message = refusal.message();
        let groups = request
            .group_ids
            .iter()
            .map(|group| {
                DescribedGroup::default()
                    .with_group_id(group.clone())
                    .with_error_code(group_refused())
                    .with_error_message(message.clone())
            })
            .collect();
        Some(ResponseBody::message(
            ConsumerGroupDescribeResponse::default().with_groups(groups),
        ))
    }

    fn start(call: Call<'_>, request: ConsumerGroupDescribeRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// Kafka's "authorized operations not requested" value.
const NOT_REQUESTED: i32 = i32::MIN;

/// The answer to a ConsumerGroupDescribe (each group answered on its own).
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: ConsumerGroupDescribeRequest,
) -> KafkaResponse {
    let mut groups = Vec::with_capacity(request.group_ids.len());
    for group_id in &request.group_ids {
        let described = DescribedGroup::default()
            .with_group_id(group_id.clone())
            .with_authorized_operations(NOT_REQUESTED);
        let id = group_id.0.as_str();
        if let Err(refused) = service.groups().require_coordinator(id).await {
            groups.push(
                described
                    .with_error_code(kafka_error(&refused).code())
                    .with_error_message(Some(StrBytes::from_string(refused.to_string()))),
            );
            continue;
        }
        let Some(group) = service
            .groups()
            .consumer_groups()
            .describe(id, Instant::now())
        else {
            let message = format!("group {id} is not a consumer-protocol group with members");
            groups.push(
                described
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(StrBytes::from_string(message))),
            );
            continue;
        };
        let members = group
            .members
            .into_iter()
            .map(|member| {
                Member::default()
                    .with_member_id(StrBytes::from_string(member.member_id))
                    .with_instance_id(member.instance_id.map(StrBytes::from_string))
                    .with_rack_id(member.rack_id.map(StrBytes::from_string))
                    .with_member_epoch(member.member_epoch)
                    .with_client_id(StrBytes::from_string(member.client_id))
                    .with_client_host(StrBytes::from_string(member.client_host))
                    .with_subscribed_topic_names(
                        member
                            .subscribed_topics
                            .iter()
                            .map(|t| topic_name(t))
                            .collect(),
                    )
                    .with_assignment(wire(&member.assignment))
                    .with_target_assignment(wire(&member.target))
            })
            .map(|member| match version {
                // v1 tells consumer-protocol members (1) from classic ones (0).
                0 => member,
                _ => member.with_member_type(1),
            })
            .collect();
        groups.push(
            described
                .with_group_state(StrBytes::from_static_str(group.state.kafka_name()))
                .with_group_epoch(group.group_epoch)
                .with_assignment_epoch(group.assignment_epoch)
                .with_assignor_name(StrBytes::from_static_str(group.assignor.name()))
                .with_members(members),
        );
    }
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::ConsumerGroupDescribe,
        api_version: version,
        body: ResponseBody::message(ConsumerGroupDescribeResponse::default().with_groups(groups)),
    }
}

fn wire(assignment: &Assignment) -> WireAssignment {
    let topic_partitions = assignment
        .iter()
        .map(|(topic, partitions)| {
            TopicPartitions::default()
                .with_topic_id(topic_id(topic))
                .with_topic_name(topic_name(topic))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|p| i32::try_from(*p).unwrap_or(i32::MAX))
                        .collect(),
                )
        })
        .collect();
    WireAssignment::default().with_topic_partitions(topic_partitions)
}
