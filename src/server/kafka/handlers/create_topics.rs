//! CreateTopics (key 19), v2..=7: creates each topic through the broker service, durably,
//! one after the other, each with its own result.
//!
//! What is accepted, and why:
//! - `replication_factor` 1 or -1 (the broker default): there is one broker. Others are
//!   `INVALID_REPLICATION_FACTOR`; explicit replica `assignments` are
//!   `INVALID_REPLICA_ASSIGNMENT`.
//! - `num_partitions` -1 means [`DEFAULT_KAFKA_PARTITIONS`] (Kafka's `num.partitions`
//!   default); 0 or below -1 is `INVALID_PARTITIONS`; above the broker's limit `INVALID_CONFIG`.
//! - Configs: `retention.ms` and `retention.bytes` (-1: unlimited; a positive value), and
//!   `segment.bytes` map to fencelog's topic settings; `cleanup.policy=delete` is accepted as
//!   what fencelog does anyway. Every other config, a null value, or a value fencelog cannot
//!   honour (0, compaction) is `INVALID_CONFIG` with a message naming it: a silently ignored
//!   setting would be a broken promise. Topics get fencelog's default flush policy.
//! - `validate_only` checks everything, including that the name is free, and creates nothing.
//! - A name given twice in one request is `INVALID_REQUEST` for each of them, as in Kafka.
//! - `timeout_ms` is not used: creation is synchronous and durable before the answer.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::super::topic_id::topic_id;
use crate::broker::{validate_topic_name, BrokerError, BrokerService, MAX_PARTITIONS_PER_TOPIC};
use crate::domain::TopicConfig;

/// Partitions of a topic created with `num_partitions` -1 (Kafka's `num.partitions` default).
pub const DEFAULT_KAFKA_PARTITIONS: u32 = 1;

/// A topic creation refused before the broker is asked.
struct Refusal {
    error: ResponseError,
    message: String,
}

impl Refusal {
    fn new(error: ResponseError, message: impl Into<String>) -> Self {
        Self {
            error,
            message: message.into(),
        }
    }
}

/// Creates the requested topics; the answer lists each with its outcome.
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: CreateTopicsRequest,
) -> KafkaResponse {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for topic in &request.topics {
        *seen.entry(topic.name.0.as_str()).or_default() += 1;
    }
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let name = topic.name.0.as_str();
        let outcome = if seen[name] > 1 {
            Err(Refusal::new(
                ResponseError::InvalidRequest,
                format!("topic {name:?} appears more than once in the request"),
            ))
        } else {
            create(&service, topic, request.validate_only).await
        };
        results.push(result(topic, outcome));
    }
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::CreateTopics,
        api_version: version,
        body: ResponseBody::CreateTopics(CreateTopicsResponse::default().with_topics(results)),
    }
}

fn result(topic: &CreatableTopic, outcome: Result<u32, Refusal>) -> CreatableTopicResult {
    let answer = CreatableTopicResult::default().with_name(topic.name.clone());
    match outcome {
        Ok(partitions) => answer
            .with_topic_id(topic_id(topic.name.0.as_str()))
            .with_num_partitions(i32::try_from(partitions).unwrap_or(i32::MAX))
            .with_replication_factor(1),
        Err(refusal) => answer
            .with_error_code(refusal.error.code())
            .with_error_message(Some(StrBytes::from_string(refusal.message))),
    }
}

/// Creates one topic (or only checks it), returning its partition count.
async fn create(
    service: &Arc<BrokerService>,
    topic: &CreatableTopic,
    validate_only: bool,
) -> Result<u32, Refusal> {
    let name = topic.name.0.as_str();
    validate_topic_name(name)
        .map_err(|error| Refusal::new(ResponseError::InvalidTopicException, error.to_string()))?;
    if !matches!(topic.replication_factor, 1 | -1) {
        return Err(Refusal::new(
            ResponseError::InvalidReplicationFactor,
            format!(
                "replication factor {} is not possible: this is a single fencelog broker (use 1 or -1)",
                topic.replication_factor
            ),
        ));
    }
    if !topic.assignments.is_empty() {
        return Err(Refusal::new(
            ResponseError::InvalidReplicaAssignment,
            "explicit replica assignments are not supported: this is a single fencelog broker",
        ));
    }
    let partitions =
        match topic.num_partitions {
            -1 => DEFAULT_KAFKA_PARTITIONS,
            count => u32::try_from(count)
                .ok()
                .filter(|&count| count > 0)
                .ok_or_else(|| {
                    Refusal::new(
                ResponseError::InvalidPartitions,
                format!("number of partitions {count} must be at least 1 (or -1 for the default)"),
            )
                })?,
        };
    let config = topic_config(topic)?;
    let refused = |error: BrokerError| Refusal::new(kafka_error(&error), error.to_string());
    if validate_only {
        if service.broker().topic(name).is_ok() {
            return Err(refused(BrokerError::TopicExists(name.to_string())));
        }
        if partitions > MAX_PARTITIONS_PER_TOPIC {
            return Err(refused(BrokerError::InvalidConfig(format!(
                "partitions {partitions} is outside 1..={MAX_PARTITIONS_PER_TOPIC}"
            ))));
        }
        crate::broker::partition_config(&config, partitions)
            .validate()
            .map_err(|message| refused(BrokerError::InvalidConfig(message)))?;
        return Ok(partitions);
    }
    service
        .create_topic(name.to_string(), partitions, config)
        .await
        .map_err(refused)?;
    Ok(partitions)
}

/// fencelog's settings for the topic's Kafka configs.
fn topic_config(topic: &CreatableTopic) -> Result<TopicConfig, Refusal> {
    let mut config = TopicConfig::default();
    for entry in &topic.configs {
        let name = entry.name.as_str();
        let invalid = |why: &str| {
            Refusal::new(
                ResponseError::InvalidConfig,
                format!("config {name}: {why}"),
            )
        };
        let Some(value) = entry.value.as_ref().map(|value| value.as_str()) else {
            return Err(invalid("a value is required"));
        };
        match name {
            "retention.ms" => config.retention_ms = unlimited_or_positive(value).map_err(|why| invalid(&why))?,
            "retention.bytes" => config.retention_bytes = unlimited_or_positive(value).map_err(|why| invalid(&why))?,
            "segment.bytes" => {
                config.segment_bytes = match unlimited_or_positive(value).map_err(|why| invalid(&why))? {
                    Some(bytes) => bytes,
                    None => return Err(invalid("must be a positive number of bytes")),
                }
            }
            "cleanup.policy" if value == "delete" => {}
            "cleanup.policy" => return Err(invalid("fencelog only deletes old segments (delete); compaction is not supported")),
            _ => return Err(invalid("not supported by fencelog (supported: retention.ms, retention.bytes, segment.bytes, cleanup.policy=delete)")),
        }
    }
    Ok(config)
}

/// -1 is unlimited (`None`); a positive number is itself; anything else is refused.
fn unlimited_or_positive(value: &str) -> Result<Option<u64>, String> {
    match value.trim().parse::<i64>() {
        Ok(-1) => Ok(None),
        Ok(number) if number > 0 => Ok(Some(number as u64)),
        Ok(number) => Err(format!(
            "{number} is not supported (use -1 for unlimited or a positive number)"
        )),
        Err(_) => Err(format!("{value:?} is not a number")),
    }
}
