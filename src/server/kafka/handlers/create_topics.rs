//! CreateTopics (key 19), v2..=7: creates each topic through the broker service, durably,
//! one after the other, each with its own result.
//!
//! What is accepted, and why:
//! - `replication_factor`: -1 is the broker default (standalone 1; in a cluster
//!   `min(3, live brokers)`). Standalone only 1 is possible; in a cluster any factor up to the
//!   live brokers, placed as `fencelog topic create --replication-factor` places it (the
//!   answer waits until every partition has an elected leader). Others are
//!   `INVALID_REPLICATION_FACTOR`; explicit replica `assignments` are
//!   `INVALID_REPLICA_ASSIGNMENT` (placement is the cluster's).
//! - `num_partitions` -1 means [`DEFAULT_KAFKA_PARTITIONS`] (Kafka's `num.partitions`
//!   default); 0 or below -1 is `INVALID_PARTITIONS`; above the broker's limit `INVALID_CONFIG`.
//! - Configs: `retention.ms` and `retention.bytes` (-1: unlimited; a positive value), and
//!   `segment.bytes` map to fencelog's topic settings; `min.insync.replicas` is the partitions'
//!   `min_insync` (`--min-insync`; at most the factor); `cleanup.policy=delete` is accepted as
//!   what fencelog does anyway. Every other config, a null value, or a value fencelog cannot
//!   honour (0, compaction) is `INVALID_CONFIG` with a message naming it: a silently ignored
//!   setting would be a broken promise. Topics get fencelog's default flush policy.
//! - `validate_only` checks everything, including that the name is free, and creates nothing.
//! - A name given twice in one request is `INVALID_REQUEST` for each of them, as in Kafka.
//! - `timeout_ms` is not used: creation is synchronous and durable before the answer.
//! - v5+: a created (or validated) topic's answer carries its configs, as DescribeConfigs
//!   reports them ([`super::super::configs`]).

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::authorization::{each, TOPIC_REFUSED};
use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::super::topic_id::topic_id;
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::{validate_topic_name, BrokerError, BrokerService, MAX_PARTITIONS_PER_TOPIC};
use crate::domain::{Replication, TopicConfig};
use crate::server::protocol::Started;

/// CreateTopics as the listener serves it.
pub struct CreateTopics;

impl KafkaApi for CreateTopics {
    type Request = CreateTopicsRequest;
    const KEY: ApiKey = ApiKey::CreateTopics;
    const MIN_VERSION: i16 = 2;
    const MAX_VERSION: i16 = 7;

    /// `create` on every topic named.
    fn authorize(access: &Access, request: &CreateTopicsRequest) -> Result<(), NotAuthorized> {
        each(
            access,
            Operation::Create,
            request.topics.iter().map(|topic| topic.name.as_str()),
        )
    }

    /// Every topic `TOPIC_AUTHORIZATION_FAILED` with the reason, its partitions and
    /// replication factor -1.
    fn refuse(refusal: &AclRefusal<'_>, request: &CreateTopicsRequest) -> Option<ResponseBody> {
        let message = refusal.message();
        let topics = request
            .topics
            .iter()
            .map(|topic| {
                CreatableTopicResult::default()
                    .with_name(topic.name.clone())
                    .with_error_code(TOPIC_REFUSED)
                    .with_error_message(message.clone())
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
            })
            .collect();
        Some(ResponseBody::message(
            CreateTopicsResponse::default().with_topics(topics),
        ))
    }

    fn start(call: Call<'_>, request: CreateTopicsRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

pub use super::super::configs::DEFAULT_KAFKA_PARTITIONS;

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
        body: ResponseBody::message(CreateTopicsResponse::default().with_topics(results)),
    }
}

/// What a created (or validated) topic got.
struct Created {
    partitions: u32,
    replication_factor: u16,
    config: TopicConfig,
    min_insync: u16,
}

fn result(topic: &CreatableTopic, outcome: Result<Created, Refusal>) -> CreatableTopicResult {
    let answer = CreatableTopicResult::default().with_name(topic.name.clone());
    match outcome {
        Ok(created) => {
            let default_min_insync = if created.replication_factor > 1 {
                created.replication_factor.min(2)
            } else {
                1
            };
            let configs = super::super::configs::topic_configs(
                &created.config,
                created.min_insync,
                default_min_insync,
            )
            .into_iter()
            .map(|entry| {
                CreatableTopicConfigs::default()
                    .with_name(StrBytes::from_static_str(entry.name))
                    .with_value(Some(StrBytes::from_string(entry.value)))
                    .with_read_only(entry.read_only)
                    .with_config_source(entry.source as i8)
                    .with_is_sensitive(false)
            })
            .collect();
            answer
                .with_topic_id(topic_id(topic.name.0.as_str()))
                .with_num_partitions(i32::try_from(created.partitions).unwrap_or(i32::MAX))
                .with_replication_factor(
                    i16::try_from(created.replication_factor).unwrap_or(i16::MAX),
                )
                .with_configs(Some(configs))
        }
        Err(refusal) => answer
            .with_error_code(refusal.error.code())
            .with_error_message(Some(StrBytes::from_string(refusal.message))),
    }
}

/// Creates one topic (or only checks it), returning what it got.
async fn create(
    service: &Arc<BrokerService>,
    topic: &CreatableTopic,
    validate_only: bool,
) -> Result<Created, Refusal> {
    let name = topic.name.0.as_str();
    validate_topic_name(name)
        .map_err(|error| Refusal::new(ResponseError::InvalidTopicException, error.to_string()))?;
    let factor = service
        .replica_manager()
        .replication_factor(topic.replication_factor)
        .map_err(|reason| Refusal::new(ResponseError::InvalidReplicationFactor, reason))?;
    if !topic.assignments.is_empty() {
        return Err(Refusal::new(
            ResponseError::InvalidReplicaAssignment,
            "explicit replica assignments are not supported: fencelog places replicas itself",
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
    let (config, min_insync) = topic_config(topic)?;
    let replication = Replication { factor, min_insync };
    if let Some(invalid) = replication.invalid() {
        return Err(Refusal::new(ResponseError::InvalidConfig, invalid));
    }
    if let Some(reason) = service.replica_manager().unplaceable(factor) {
        return Err(Refusal::new(
            ResponseError::InvalidReplicationFactor,
            reason,
        ));
    }
    let created = Created {
        partitions,
        replication_factor: factor,
        config,
        min_insync: min_insync
            .unwrap_or_else(|| service.replica_manager().default_min_insync(factor)),
    };
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
            .map_err(|error| refused(BrokerError::InvalidConfig(error.to_string())))?;
        return Ok(created);
    }
    service
        .topics()
        .create_topic(name.to_string(), partitions, config, Some(replication))
        .await
        .map_err(refused)?;
    Ok(created)
}

/// fencelog's settings for the topic's Kafka configs, and its `min.insync.replicas`.
fn topic_config(topic: &CreatableTopic) -> Result<(TopicConfig, Option<u16>), Refusal> {
    let mut config = TopicConfig::default();
    let mut min_insync = None;
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
            "min.insync.replicas" => {
                min_insync = Some(
                    value
                        .trim()
                        .parse::<u16>()
                        .ok()
                        .filter(|count| *count >= 1)
                        .ok_or_else(|| invalid("must be a number of replicas, at least 1"))?,
                )
            }
            "cleanup.policy" if value == "delete" => {}
            "cleanup.policy" => return Err(invalid("fencelog only deletes old segments (delete); compaction is not supported")),
            _ => return Err(invalid("not supported by fencelog (supported: retention.ms, retention.bytes, segment.bytes, min.insync.replicas, cleanup.policy=delete)")),
        }
    }
    Ok((config, min_insync))
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
