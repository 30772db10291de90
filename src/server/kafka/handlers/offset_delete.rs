//! OffsetDelete (key 47), v0: an admin deletes a group's committed offsets of some partitions
//! (Kafka's `kafka-consumer-groups --delete-offsets`, the Java AdminClient's
//! `deleteConsumerGroupOffsets`).
//!
//! What a client sees, as Kafka's group coordinator answers:
//! - A group with neither members nor committed offsets: `GROUP_ID_NOT_FOUND` (69) for the
//!   whole request. On a cluster, a group this broker does not coordinate: `NOT_COORDINATOR`.
//! - A group without members: every named partition's offset is deleted (a partition the group
//!   never committed is no error), durably, before the answer.
//! - A consumer group (protocol type `consumer`) with members: a partition of a topic some
//!   member subscribes to answers `GROUP_SUBSCRIBED_TO_TOPIC` (86) and keeps its offset; the
//!   others are deleted. A member whose subscription cannot be read counts as subscribed to
//!   every topic (nothing it may read is deleted under it).
//! - A group with members of another protocol type: `NON_EMPTY_GROUP` (68) for the request.
//! - A partition of a topic that does not exist: `UNKNOWN_TOPIC_OR_PARTITION` (3).
//! - A failed write answers its error for the request (nothing is half deleted: one write).

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Buf;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, ConsumerProtocolSubscription, OffsetDeleteRequest, OffsetDeleteResponse,
};
use kafka_protocol::protocol::Decodable;
use kafka_protocol::ResponseError;

use super::super::authorization::{each, group_refused, TOPIC_REFUSED};
use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::coordinator::GroupSubscriptions;
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// OffsetDelete as the listener serves it.
pub struct OffsetDelete;

impl KafkaApi for OffsetDelete {
    type Request = OffsetDeleteRequest;
    const KEY: ApiKey = ApiKey::OffsetDelete;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 0;

    /// `admin` on some topic (deleting a group's offsets is an admin's, as deleting the group
    /// is) and `consume` on each topic whose offsets go.
    fn authorize(access: &Access, request: &OffsetDeleteRequest) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Admin)?;
        each(
            access,
            Operation::Consume,
            request.topics.iter().map(|topic| topic.name.as_str()),
        )
    }

    /// `GROUP_AUTHORIZATION_FAILED` without `admin` anywhere, else `TOPIC_AUTHORIZATION_FAILED`.
    fn refuse(refusal: &AclRefusal<'_>, _request: &OffsetDeleteRequest) -> Option<ResponseBody> {
        let code = if refusal.access.check_somewhere(Operation::Admin).is_err() {
            group_refused()
        } else {
            TOPIC_REFUSED
        };
        Some(ResponseBody::message(
            OffsetDeleteResponse::default().with_error_code(code),
        ))
    }

    fn start(call: Call<'_>, request: OffsetDeleteRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// The protocol type of Kafka's consumers.
const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// Which topics an active group's members read.
enum Subscribed {
    /// None: every offset may go (no members).
    Nothing,
    /// These topics (a consumer group).
    Topics(HashSet<String>),
    /// Every topic (a member's subscription cannot be read).
    Everything,
    /// Not a consumer group: its offsets are not for an admin to pick through.
    NotConsumerGroup,
}

/// Deletes the requested offsets that may go; the answer names each partition's outcome.
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: OffsetDeleteRequest,
) -> KafkaResponse {
    let group = request.group_id.as_str().to_owned();
    let answer = |body: OffsetDeleteResponse| KafkaResponse {
        correlation_id,
        api_key: ApiKey::OffsetDelete,
        api_version: version,
        body: ResponseBody::message(body),
    };
    let whole = |code: i16| answer(OffsetDeleteResponse::default().with_error_code(code));
    if let Err(error) = service.groups().require_coordinator(&group).await {
        return whole(kafka_error(&error).code());
    }
    let subscribed = match service.groups().coordinator().subscriptions(&group) {
        None => Subscribed::Nothing,
        Some(subscriptions) => subscribed_topics(&subscriptions),
    };
    if matches!(subscribed, Subscribed::NotConsumerGroup) {
        return whole(ResponseError::NonEmptyGroup.code());
    }
    let mut to_delete = Vec::new();
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let name = topic.name.as_str();
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for partition in &topic.partitions {
            let index = partition.partition_index;
            let code = match u32::try_from(index) {
                Ok(number) if service.groups().partition_exists(name, number) => {
                    match &subscribed {
                        Subscribed::Everything => ResponseError::GroupSubscribedToTopic.code(),
                        Subscribed::Topics(topics) if topics.contains(name) => {
                            ResponseError::GroupSubscribedToTopic.code()
                        }
                        _ => {
                            to_delete.push((name.to_owned(), number));
                            0
                        }
                    }
                }
                _ => ResponseError::UnknownTopicOrPartition.code(),
            };
            partitions.push(
                OffsetDeleteResponsePartition::default()
                    .with_partition_index(index)
                    .with_error_code(code),
            );
        }
        topics.push(
            OffsetDeleteResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions),
        );
    }
    if let Err(error) = service
        .groups()
        .delete_committed_offsets(&group, to_delete)
        .await
    {
        tracing::debug!(%group, %error, "OffsetDelete refused");
        return whole(kafka_error(&error).code());
    }
    answer(OffsetDeleteResponse::default().with_topics(topics))
}

/// The topics an active group reads (see [`Subscribed`]).
fn subscribed_topics(subscriptions: &GroupSubscriptions) -> Subscribed {
    if subscriptions.metadata.is_empty() {
        return Subscribed::Nothing;
    }
    if subscriptions.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL_TYPE) {
        return Subscribed::NotConsumerGroup;
    }
    let mut topics = HashSet::new();
    for metadata in &subscriptions.metadata {
        match decode_subscription(metadata) {
            Some(subscription) => {
                topics.extend(subscription.topics.iter().map(|topic| topic.to_string()))
            }
            None => return Subscribed::Everything,
        }
    }
    Subscribed::Topics(topics)
}

/// A consumer's subscription: its version (`i16`), then the body in that version.
fn decode_subscription(metadata: &bytes::Bytes) -> Option<ConsumerProtocolSubscription> {
    let mut buf = metadata.clone();
    if buf.remaining() < 2 {
        return None;
    }
    let version = buf.get_i16().clamp(0, 3);
    ConsumerProtocolSubscription::decode(&mut buf, version).ok()
}
