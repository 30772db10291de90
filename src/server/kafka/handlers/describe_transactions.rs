//! DescribeTransactions (key 65), v0: the coordinator's state of each named transactional id
//! (`kafka-transactions describe`, the AdminClient's `describeTransactions`).
//!
//! State, producer id and epoch, timeout, start time (-1 when no transaction is open) and the
//! partitions of the open transaction. An id the coordinator does not know is
//! `TRANSACTIONAL_ID_NOT_FOUND`; a cluster broker that does not coordinate the id (does not
//! lead its offsets partition) answers `NOT_COORDINATOR` (it did not look, so it must not say
//! the id does not exist).
//! No ACL beyond authentication (fencelog has no transactional-id ACLs).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    ApiKey, DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{Call, KafkaApi};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// DescribeTransactions as the listener serves it: authentication only (fencelog has no transactional-id ACLs).
pub struct DescribeTransactions;

impl KafkaApi for DescribeTransactions {
    type Request = DescribeTransactionsRequest;
    const KEY: ApiKey = ApiKey::DescribeTransactions;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 0;

    fn start(call: Call<'_>, request: DescribeTransactionsRequest) -> Started<KafkaResponse> {
        Started::ready(handle(
            call.service,
            call.correlation_id,
            call.version,
            &request,
        ))
    }
}

/// The answer to a DescribeTransactions request (immediate).
pub fn handle(
    service: &Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: &DescribeTransactionsRequest,
) -> KafkaResponse {
    let states = request
        .transactional_ids
        .iter()
        .map(|id| {
            let described = TransactionState::default()
                .with_transactional_id(id.clone())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_transaction_start_time_ms(-1);
            let coordinator = service.transactions();
            if !coordinator.coordinates(id.as_str()) {
                return described.with_error_code(ResponseError::NotCoordinator.code());
            }
            let Some(state) = coordinator.get(id.as_str()) else {
                return described.with_error_code(ResponseError::TransactionalIdNotFound.code());
            };
            let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for partition in &state.partitions {
                topics
                    .entry(partition.topic.as_str())
                    .or_default()
                    .push(partition.partition);
            }
            described
                .with_transaction_state(StrBytes::from_static_str(state.state.kafka_name()))
                .with_transaction_timeout_ms(i32::try_from(state.timeout_ms).unwrap_or(i32::MAX))
                .with_transaction_start_time_ms(state.start_ms)
                .with_producer_id(ProducerId(state.producer_id))
                .with_producer_epoch(state.producer_epoch)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(topic, partitions)| {
                            TopicData::default()
                                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                                .with_partitions(partitions)
                        })
                        .collect(),
                )
        })
        .collect();
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::DescribeTransactions,
        api_version: version,
        body: ResponseBody::message(
            DescribeTransactionsResponse::default().with_transaction_states(states),
        ),
    }
}
