//! CreatePartitions (key 37), v0..=3: grows each named topic to the partition count asked (the
//! new total, as Kafka counts it) through the broker service, durably, one topic after the
//! other, each with its own result.
//!
//! What a Kafka client can observe, and why:
//! - A grown topic's new partitions are in Metadata, take writes and serve reads as soon as the
//!   answer arrives: standalone they are created and opened before `topic.json` records the new
//!   count; in a cluster the answer waits (up to the cluster's topic-ready wait) until each new
//!   partition has an elected leader ([`crate::broker::BrokerService::create_partitions`]).
//! - `INVALID_PARTITIONS` (37): a count not above the topic's current one (partitions are only
//!   ever added, as in Kafka), or above fencelog's per-topic limit (10000 standalone,
//!   [`crate::broker::MAX_PARTITIONS_PER_TOPIC`]; 127 on a cluster, where one etcd transaction
//!   writes them all). The message says which.
//! - `UNKNOWN_TOPIC_OR_PARTITION` (3): no such topic. `INVALID_REQUEST` (42): explicit replica
//!   `assignments` (fencelog places replicas itself, as CreateTopics refuses them; the message
//!   says so; a null or empty array is no assignment), and a topic named more than once in the request (one result for the name, as
//!   Kafka answers "Duplicate topic in request").
//! - Needs `admin` on the topic (Kafka's ALTER), else `TOPIC_AUTHORIZATION_FAILED` (29) for it;
//!   the other topics of the request still run, as Kafka does.
//! - `validate_only` checks everything (the topic, the count, on a cluster that the live
//!   brokers can hold the replicas) and changes nothing.
//! - `timeout_ms` is not used: the grow is durable before the answer.
//! - The cluster's internal offsets topic cannot be grown by clients (its error's message says
//!   so).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{ApiKey, CreatePartitionsRequest, CreatePartitionsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{Call, KafkaApi};
use crate::auth::{Access, Operation};
use crate::broker::{validate_topic_name, BrokerError, BrokerService};
use crate::server::protocol::Started;

/// CreatePartitions as the listener serves it: checked per topic by its handler (`admin` on it, Kafka's ALTER).
pub struct CreatePartitions;

impl KafkaApi for CreatePartitions {
    type Request = CreatePartitionsRequest;
    const KEY: ApiKey = ApiKey::CreatePartitions;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 3;

    fn start(call: Call<'_>, request: CreatePartitionsRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.access,
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// Grows the requested topics; the answer lists each name once, in request order.
pub async fn handle(
    service: Arc<BrokerService>,
    access: Access,
    correlation_id: i32,
    version: i16,
    request: CreatePartitionsRequest,
) -> KafkaResponse {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for topic in &request.topics {
        *seen.entry(topic.name.0.as_str()).or_default() += 1;
    }
    let mut answered: HashSet<&str> = HashSet::new();
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let name = topic.name.0.as_str();
        if !answered.insert(name) {
            continue;
        }
        let outcome = if seen[name] > 1 {
            Err((
                ResponseError::InvalidRequest,
                format!("Duplicate topic in request: {name:?} appears more than once"),
            ))
        } else {
            grow(&service, &access, topic, request.validate_only).await
        };
        let result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
        results.push(match outcome {
            Ok(()) => result,
            Err((error, message)) => result
                .with_error_code(error.code())
                .with_error_message(Some(StrBytes::from_string(message))),
        });
    }
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::CreatePartitions,
        api_version: version,
        body: ResponseBody::message(CreatePartitionsResponse::default().with_results(results)),
    }
}

/// Grows one topic (or only checks that it could grow).
async fn grow(
    service: &Arc<BrokerService>,
    access: &Access,
    topic: &CreatePartitionsTopic,
    validate_only: bool,
) -> Result<(), (ResponseError, String)> {
    let name = topic.name.0.as_str();
    if let Err(refused) = access.check(Operation::Admin, name) {
        return Err((ResponseError::TopicAuthorizationFailed, refused.to_string()));
    }
    if validate_topic_name(name).is_err() {
        return Err((
            ResponseError::UnknownTopicOrPartition,
            BrokerError::UnknownTopic(name.to_owned()).to_string(),
        ));
    }
    // Null is what clients send without assignments; an empty array asks for nothing either.
    if topic
        .assignments
        .as_ref()
        .is_some_and(|assignments| !assignments.is_empty())
    {
        return Err((
            ResponseError::InvalidRequest,
            "explicit replica assignments are not supported: fencelog places the new \
             partitions' replicas itself (send the count without assignments)"
                .to_owned(),
        ));
    }
    let count = u32::try_from(topic.count).map_err(|_| {
        (
            ResponseError::InvalidPartitions,
            format!(
                "topic {name:?}: a partition count of {} is not possible; ask for the new total, \
                 above the current count",
                topic.count
            ),
        )
    })?;
    service
        .topics()
        .create_partitions(name.to_owned(), count, validate_only)
        .await
        .map(drop)
        .map_err(|error| (kafka_error(&error), error.to_string()))
}
