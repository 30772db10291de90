//! ConsumerGroupHeartbeat (key 68), v0..=1: a member of a KIP-848 consumer-protocol group
//! (`group.protocol=consumer`) joins (epoch 0), heartbeats, and leaves (epoch -1, or -2 for a
//! static member) with one API; the coordinator
//! ([`ConsumerGroups`](crate::broker::consumer_groups::ConsumerGroups)) computes assignments
//! server-side and answers each member's epoch and, when it changed, its assignment.
//!
//! What a client sees:
//! - Topics are named by id (the ids Metadata v10+ reports, [`super::super::topic_id`]); an
//!   owned partition of a topic id this broker does not know is ignored (a deleted topic).
//! - The heartbeat interval is the broker's (5 s by default); the session timeout is the
//!   broker's (45 s); the member's rebalance timeout bounds how long it may take to revoke.
//! - v0 clients may send an empty member id on join: the broker generates one (v1 clients
//!   generate their own; an empty one is `INVALID_REQUEST`).
//! - Errors, with a message saying what to do: `UNKNOWN_MEMBER_ID` (25) and
//!   `FENCED_MEMBER_EPOCH` (110) (join again with epoch 0: also what members see after the
//!   coordinator restarted or moved, as membership is held in memory),
//!   `UNRELEASED_INSTANCE_ID` (111), `GROUP_MAX_SIZE_REACHED` (81), `UNSUPPORTED_ASSIGNOR`
//!   (112; `uniform` and `range` exist), `INVALID_REQUEST` (42; also for a topic regex
//!   subscription, which this broker does not support), `GROUP_ID_NOT_FOUND` (69) for a
//!   group id a classic group with members uses, `NOT_COORDINATOR` (16) on a broker that does
//!   not coordinate the group.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment as WireAssignment, TopicPartitions,
};
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::super::authorization::{each, group_refused, TOPIC_REFUSED};
use super::super::errors::{consumer_group_error, kafka_error};
use super::super::response::{KafkaResponse, ResponseBody};
use super::super::topic_id::topic_id;
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::consumer_groups::{Assignment, ConsumerGroupError, HeartbeatRequest};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// ConsumerGroupHeartbeat as the listener serves it.
pub struct ConsumerGroupHeartbeat;

impl KafkaApi for ConsumerGroupHeartbeat {
    type Request = ConsumerGroupHeartbeatRequest;
    const KEY: ApiKey = ApiKey::ConsumerGroupHeartbeat;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 1;

    /// `consume` on some topic (the group) and on every topic it subscribes to (Kafka's
    /// DESCRIBE on the topics).
    fn authorize(
        access: &Access,
        request: &ConsumerGroupHeartbeatRequest,
    ) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Consume)?;
        each(
            access,
            Operation::Consume,
            request
                .subscribed_topic_names
                .iter()
                .flatten()
                .map(|topic| topic.as_str()),
        )
    }

    /// `GROUP_AUTHORIZATION_FAILED` without `consume` anywhere, else
    /// `TOPIC_AUTHORIZATION_FAILED`; with the reason.
    fn refuse(
        refusal: &AclRefusal<'_>,
        _request: &ConsumerGroupHeartbeatRequest,
    ) -> Option<ResponseBody> {
        let code = match refusal.access.check_somewhere(Operation::Consume) {
            Err(_) => group_refused(),
            Ok(()) => TOPIC_REFUSED,
        };
        Some(ResponseBody::message(
            ConsumerGroupHeartbeatResponse::default()
                .with_error_code(code)
                .with_error_message(refusal.message()),
        ))
    }

    fn start(call: Call<'_>, request: ConsumerGroupHeartbeatRequest) -> Started<KafkaResponse> {
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

/// The answer to a ConsumerGroupHeartbeat (immediate: it never waits, except on a cluster for
/// the group's new coordinator to load the group).
pub async fn handle(
    service: Arc<BrokerService>,
    client_id: String,
    peer: SocketAddr,
    correlation_id: i32,
    version: i16,
    request: ConsumerGroupHeartbeatRequest,
) -> KafkaResponse {
    let body = answer(&service, client_id, peer, version, request).await;
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::ConsumerGroupHeartbeat,
        api_version: version,
        body: ResponseBody::message(body),
    }
}

async fn answer(
    service: &BrokerService,
    client_id: String,
    peer: SocketAddr,
    version: i16,
    request: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let group_id = request.group_id.0.to_string();
    if let Err(refused) = service.groups().require_coordinator(&group_id).await {
        let error = kafka_error(&refused);
        return refused_with(error.code(), refused.to_string());
    }
    let classic = service
        .groups()
        .coordinator()
        .describe(&group_id)
        .is_some_and(|group| !group.members.is_empty());
    if classic {
        let error = ConsumerGroupError::ClassicGroup { group_id };
        return refused_with(consumer_group_error(&error).code(), error.to_string());
    }
    let topics = service.reads().topic_partition_counts();
    let names: HashMap<Uuid, &String> = topics.keys().map(|name| (topic_id(name), name)).collect();
    let mut member_id = request.member_id.to_string();
    if member_id.is_empty() && version == 0 && request.member_epoch == 0 {
        member_id = format!("{:032x}", rand::random::<u128>());
    }
    let owned = request.topic_partitions.as_ref().map(|topics| {
        let mut owned = Assignment::new();
        for topic in topics {
            let Some(name) = names.get(&topic.topic_id) else {
                continue;
            };
            for partition in &topic.partitions {
                if let Ok(partition) = u32::try_from(*partition) {
                    crate::broker::consumer_groups::assignment::insert(&mut owned, name, partition);
                }
            }
        }
        owned
    });
    let heartbeat = HeartbeatRequest {
        group_id,
        member_id,
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.map(|id| id.to_string()),
        rack_id: request.rack_id.map(|id| id.to_string()),
        rebalance_timeout: u64::try_from(request.rebalance_timeout_ms)
            .ok()
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis),
        subscribed_topic_names: request
            .subscribed_topic_names
            .map(|names| names.iter().map(|name| name.0.to_string()).collect()),
        subscribed_topic_regex: request
            .subscribed_topic_regex
            .map(|regex| regex.to_string()),
        server_assignor: request.server_assignor.map(|name| name.to_string()),
        owned,
        client_id,
        client_host: super::join_group::client_host(peer),
    };
    match service
        .groups()
        .consumer_groups()
        .heartbeat(heartbeat, &topics, Instant::now())
    {
        Err(error) => refused_with(consumer_group_error(&error).code(), error.to_string()),
        Ok(answer) => {
            let assignment = answer.assignment.map(|assignment| {
                let topic_partitions = assignment
                    .iter()
                    .map(|(topic, partitions)| {
                        TopicPartitions::default()
                            .with_topic_id(topic_id(topic))
                            .with_partitions(
                                partitions
                                    .iter()
                                    .map(|p| i32::try_from(*p).unwrap_or(i32::MAX))
                                    .collect(),
                            )
                    })
                    .collect();
                WireAssignment::default().with_topic_partitions(topic_partitions)
            });
            ConsumerGroupHeartbeatResponse::default()
                .with_member_id(Some(StrBytes::from_string(answer.member_id)))
                .with_member_epoch(answer.member_epoch)
                .with_heartbeat_interval_ms(
                    i32::try_from(answer.heartbeat_interval.as_millis()).unwrap_or(i32::MAX),
                )
                .with_assignment(assignment)
        }
    }
}

fn refused_with(code: i16, message: String) -> ConsumerGroupHeartbeatResponse {
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(code)
        .with_error_message(Some(StrBytes::from_string(message)))
}
