//! DescribeProducers (key 61), v0: the idempotent producers a partition remembers (Kafka's
//! `kafka-transactions describe-producers`, the AdminClient's `describeProducers`).
//!
//! What a client sees, per partition:
//! - Its producer state (`storage::producer_state`, the state that makes a producer's retries
//!   land once): each producer's id, current producer epoch and last sequence number.
//!   `last_timestamp` is -1: fencelog's producer state keeps sequences and offsets, not
//!   timestamps. `current_txn_start_offset` is the first offset of the producer's open
//!   transaction in the partition (-1: none open), which `kafka-transactions find-hanging`
//!   reads; `coordinator_epoch` is 0 for a producer with an open transaction (a standalone
//!   broker's one coordinator; `STANDALONE_COORDINATOR_EPOCH`), -1 otherwise.
//! - Only the partition's leader answers; any other broker of a cluster says
//!   `NOT_LEADER_OR_FOLLOWER`, as Kafka's does. An unknown topic or partition:
//!   `UNKNOWN_TOPIC_OR_PARTITION`.
//! - ACL: Kafka asks READ on the topic; fencelog asks `consume` on it. A topic refused is
//!   answered `TOPIC_AUTHORIZATION_FAILED` for each of its partitions; the other topics run.

use std::sync::Arc;

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{
    ApiKey, DescribeProducersRequest, DescribeProducersResponse, ProducerId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{Call, KafkaApi};
use crate::auth::{Access, Operation};
use crate::broker::transactions::markers::STANDALONE_COORDINATOR_EPOCH;
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// DescribeProducers as the listener serves it: checked per topic by its handler (`consume` on it).
pub struct DescribeProducers;

impl KafkaApi for DescribeProducers {
    type Request = DescribeProducersRequest;
    const KEY: ApiKey = ApiKey::DescribeProducers;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 0;

    fn start(call: Call<'_>, request: DescribeProducersRequest) -> Started<KafkaResponse> {
        Started::ready(handle(
            call.service,
            &call.access,
            call.correlation_id,
            call.version,
            &request,
        ))
    }
}

/// One partition's answer.
fn partition_response(service: &BrokerService, topic: &str, index: i32) -> PartitionResponse {
    let answer = PartitionResponse::default().with_partition_index(index);
    let Ok(partition) = u32::try_from(index) else {
        return answer.with_error_code(ResponseError::UnknownTopicOrPartition.code());
    };
    let open = service
        .reads()
        .open_transactions(topic, partition)
        .unwrap_or_default();
    match service.reads().active_producers(topic, partition) {
        Ok(producers) => answer.with_active_producers(
            producers
                .into_iter()
                .map(|producer| {
                    let started = open
                        .iter()
                        .find(|transaction| transaction.producer_id == producer.producer_id)
                        .map_or(-1, |transaction| {
                            i64::try_from(transaction.first_offset).unwrap_or(i64::MAX)
                        });
                    ProducerState::default()
                        .with_producer_id(ProducerId(producer.producer_id))
                        .with_producer_epoch(i32::from(producer.producer_epoch))
                        .with_last_sequence(producer.last_sequence)
                        .with_last_timestamp(-1)
                        .with_coordinator_epoch(if started >= 0 {
                            STANDALONE_COORDINATOR_EPOCH
                        } else {
                            -1
                        })
                        .with_current_txn_start_offset(started)
                })
                .collect(),
        ),
        Err(error) => answer
            .with_error_code(kafka_error(&error).code())
            .with_error_message(Some(StrBytes::from_string(error.to_string()))),
    }
}

/// Answers a DescribeProducers request (immediate: the state is in memory).
pub fn handle(
    service: &Arc<BrokerService>,
    access: &Access,
    correlation_id: i32,
    version: i16,
    request: &DescribeProducersRequest,
) -> KafkaResponse {
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let name = topic.name.as_str();
            let refused = access.check(Operation::Consume, name).err();
            let partitions = topic
                .partition_indexes
                .iter()
                .map(|&index| match &refused {
                    Some(refused) => PartitionResponse::default()
                        .with_partition_index(index)
                        .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                        .with_error_message(Some(StrBytes::from_string(refused.to_string()))),
                    None => partition_response(service, name, index),
                })
                .collect();
            TopicResponse::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::DescribeProducers,
        api_version: version,
        body: ResponseBody::message(DescribeProducersResponse::default().with_topics(topics)),
    }
}
