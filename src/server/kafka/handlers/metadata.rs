//! Metadata (key 3), v0..=12: this broker as the only broker, leader and controller, and the
//! requested topics with their partitions.
//!
//! Choices a client can see:
//! - Topics are never created by Metadata (`allow_auto_topic_creation` is ignored): an unknown
//!   topic is `UNKNOWN_TOPIC_OR_PARTITION`, an invalid name `INVALID_TOPIC_EXCEPTION`, an
//!   unknown topic id (v10+) `UNKNOWN_TOPIC_ID`.
//! - Every partition's leader, replica and in-sync replica is this broker's node id.
//! - The leader epoch (v7+) is -1, "unknown": fencelog's fencing epoch is a `u64` that moves
//!   with lease grants, not with leadership, and a client that saw it would send it back as
//!   `current_leader_epoch` for a check the listener does not make. With -1 clients skip that
//!   check.
//! - Topic ids (v10+) are derived from the name ([`super::super::topic_id`]).
//! - Authorized operations (v8+) are left at Kafka's "not requested" value.
//! - Which topics: v0 lists all topics for an empty array; v1+ for a null array (an empty one
//!   asks for none).

use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{ApiKey, BrokerId, MetadataRequest, MetadataResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::super::config::KafkaConfig;
use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::super::topic_id::{topic_id, topic_name};
use crate::broker::{validate_topic_name, BrokerService, Topic};

/// The answer to a Metadata request.
pub fn handle(
    service: &BrokerService,
    config: &KafkaConfig,
    correlation_id: i32,
    version: i16,
    request: &MetadataRequest,
) -> KafkaResponse {
    let node = kafka_broker_id(service);
    let broker = MetadataResponseBroker::default()
        .with_node_id(node)
        .with_host(StrBytes::from_string(config.advertised_host.clone()))
        .with_port(i32::from(config.advertised_port));
    let mut body = MetadataResponse::default()
        .with_brokers(vec![broker])
        .with_controller_id(node)
        .with_topics(topics(service, node, version, request));
    if version >= 2 {
        body.cluster_id = Some(StrBytes::from_string(config.cluster_id.clone()));
    }
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::Metadata,
        api_version: version,
        body: ResponseBody::Metadata(body),
    }
}

fn topics(
    service: &BrokerService,
    node: BrokerId,
    version: i16,
    request: &MetadataRequest,
) -> Vec<MetadataResponseTopic> {
    let all = match &request.topics {
        None => true,
        Some(topics) => version == 0 && topics.is_empty(),
    };
    if all {
        return service
            .broker()
            .topics()
            .iter()
            .map(|topic| described(topic, node))
            .collect();
    }
    let mut known: Option<Vec<Arc<Topic>>> = None;
    request
        .topics
        .iter()
        .flatten()
        .map(|wanted| match &wanted.name {
            Some(name) => by_name(service, node, name.0.as_str()),
            None => {
                let topics = known.get_or_insert_with(|| service.broker().topics());
                by_id(topics, node, wanted.topic_id)
            }
        })
        .collect()
}

fn by_name(service: &BrokerService, node: BrokerId, name: &str) -> MetadataResponseTopic {
    if validate_topic_name(name).is_err() {
        return failed(
            Some(name),
            Uuid::nil(),
            ResponseError::InvalidTopicException,
        );
    }
    match service.broker().topic(name) {
        Ok(topic) => described(&topic, node),
        Err(error) => failed(Some(name), Uuid::nil(), kafka_error(&error)),
    }
}

fn by_id(topics: &[Arc<Topic>], node: BrokerId, id: Uuid) -> MetadataResponseTopic {
    topics
        .iter()
        .find(|topic| topic_id(topic.name()) == id)
        .map(|topic| described(topic, node))
        .unwrap_or_else(|| failed(None, id, ResponseError::UnknownTopicId))
}

fn failed(name: Option<&str>, id: Uuid, error: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(error.code())
        .with_name(name.map(topic_name))
        .with_topic_id(id)
}

fn described(topic: &Topic, node: BrokerId) -> MetadataResponseTopic {
    let count = i32::try_from(topic.partitions().len()).unwrap_or(i32::MAX);
    let partitions = (0..count)
        .map(|index| {
            MetadataResponsePartition::default()
                .with_partition_index(index)
                .with_leader_id(node)
                .with_leader_epoch(-1)
                .with_replica_nodes(vec![node])
                .with_isr_nodes(vec![node])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(topic.name())))
        .with_topic_id(topic_id(topic.name()))
        .with_partitions(partitions)
}

/// This broker's id in Kafka's protocol: its node id (`serve --node-id`), the same number every
/// listener reports. Kafka's ids are signed; `serve` refuses a node id above `i32::MAX` with
/// `--kafka-listen`, so the clamp is never reached there.
pub(in crate::server::kafka) fn kafka_broker_id(service: &BrokerService) -> BrokerId {
    BrokerId(i32::try_from(service.node_id()).unwrap_or(i32::MAX))
}
