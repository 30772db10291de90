//! AddPartitionsToTxn (key 24), v0..=4: partitions join a producer's transaction.
//!
//! Each partition's lease is acquired for the transactional id's holder `kafka-txn:T` and its
//! epoch recorded durably before the answer (`crate::broker::transactions::coordinator`): the
//! transaction's records are then written through the fence with that epoch.
//! - A partition leased by a native holder is `CONCURRENT_TRANSACTIONS` (retriable) until that
//!   lease ends: a transaction never fences a lease holder silently. An unknown partition is
//!   `UNKNOWN_TOPIC_OR_PARTITION`. Other partitions of the request are still added (Kafka
//!   answers per partition too, and the client retries the refused ones).
//! - A request-wide refusal (an older producer epoch, another producer id, a transaction
//!   completing) is given to every partition, as Kafka does.
//! - v4 (KIP-890, several transactions per request, Kafka's broker-to-broker form) is answered
//!   per transaction; `verify_only` checks that the partitions are in the transaction without
//!   adding any (`INVALID_TXN_STATE` for those that are not).
//! - On a cluster the transactional id's coordinator answers (the leader of its offsets
//!   partition); another broker `NOT_COORDINATOR`. Each partition joins the transactions'
//!   lease at its leader, wherever that is.

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, TopicName, TransactionalId,
};
use kafka_protocol::ResponseError;

use super::super::authorization::{each, TOPIC_REFUSED};
use super::super::errors::{coordinator_error, fenced_code};
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// AddPartitionsToTxn as the listener serves it.
pub struct AddPartitionsToTxn;

impl KafkaApi for AddPartitionsToTxn {
    type Request = AddPartitionsToTxnRequest;
    const KEY: ApiKey = ApiKey::AddPartitionsToTxn;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 4;

    /// `produce` on every topic added (v0..=3's and every transaction's of v4).
    fn authorize(
        access: &Access,
        request: &AddPartitionsToTxnRequest,
    ) -> Result<(), NotAuthorized> {
        each(
            access,
            Operation::Produce,
            request
                .v3_and_below_topics
                .iter()
                .chain(
                    request
                        .transactions
                        .iter()
                        .flat_map(|transaction| transaction.topics.iter()),
                )
                .map(|topic| topic.name.as_str()),
        )
    }

    /// Every partition `TOPIC_AUTHORIZATION_FAILED`.
    fn refuse(
        _refusal: &AclRefusal<'_>,
        request: &AddPartitionsToTxnRequest,
    ) -> Option<ResponseBody> {
        Some(ResponseBody::message(refused(request, TOPIC_REFUSED)))
    }

    fn start(call: Call<'_>, request: AddPartitionsToTxnRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// The first version that knows `PRODUCER_FENCED`.
const FIRST_FENCED_VERSION: i16 = 2;

/// Answers an AddPartitionsToTxn request.
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: AddPartitionsToTxnRequest,
) -> KafkaResponse {
    let body = if version <= 3 {
        let topics = add(
            &service,
            version,
            &request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id.0,
            request.v3_and_below_producer_epoch,
            false,
            &request.v3_and_below_topics,
        )
        .await;
        AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topics)
    } else {
        let mut results = Vec::with_capacity(request.transactions.len());
        for transaction in &request.transactions {
            let topics = add(
                &service,
                version,
                &transaction.transactional_id,
                transaction.producer_id.0,
                transaction.producer_epoch,
                transaction.verify_only,
                &transaction.topics,
            )
            .await;
            results.push(
                AddPartitionsToTxnResult::default()
                    .with_transactional_id(transaction.transactional_id.clone())
                    .with_topic_results(topics),
            );
        }
        AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
    };
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::AddPartitionsToTxn,
        api_version: version,
        body: ResponseBody::message(body),
    }
}

/// Adds (or, `verify_only`, checks) one transaction's partitions; the per-topic results.
async fn add(
    service: &Arc<BrokerService>,
    version: i16,
    transactional_id: &TransactionalId,
    producer_id: i64,
    producer_epoch: i16,
    verify_only: bool,
    topics: &[AddPartitionsToTxnTopic],
) -> Vec<AddPartitionsToTxnTopicResult> {
    let requested: Vec<(String, i32)> = topics
        .iter()
        .flat_map(|topic| {
            topic
                .partitions
                .iter()
                .map(|partition| (topic.name.to_string(), *partition))
        })
        .collect();
    let coordinator = service.transactions();
    let codes: Vec<i16> = match verify_only {
        true => {
            let state = coordinator.get(transactional_id.as_str());
            requested
                .iter()
                .map(|(topic, partition)| {
                    let known = state.as_ref().is_some_and(|state| {
                        state
                            .produce_epoch(producer_id, producer_epoch, topic, *partition)
                            .is_ok()
                    });
                    if known {
                        0
                    } else {
                        ResponseError::InvalidTxnState.code()
                    }
                })
                .collect()
        }
        false => {
            match coordinator
                .add_partitions(transactional_id.as_str(),
                    producer_id,
                    producer_epoch,
                    requested.clone(),
                )
                .await
            {
                Ok(results) => results
                    .into_iter()
                    .map(|(_, result)| match result {
                        Ok(()) => 0,
                        Err(error) => {
                            tracing::debug!(transactional_id = %transactional_id.as_str(), %error, "partition not added to the transaction");
                            coordinator_error(&error, fenced_code(version, FIRST_FENCED_VERSION))
                                .code()
                        }
                    })
                    .collect(),
                Err(error) => {
                    tracing::info!(transactional_id = %transactional_id.as_str(), %error, "AddPartitionsToTxn refused");
                    let code =
                        coordinator_error(&error, fenced_code(version, FIRST_FENCED_VERSION))
                            .code();
                    vec![code; requested.len()]
                }
            }
        }
    };
    let mut codes = codes.into_iter();
    topic_results(topics, || codes.next().unwrap_or(0))
}

/// Per-topic results of `topics`, each partition's code from `code` in request order.
fn topic_results(
    topics: &[AddPartitionsToTxnTopic],
    mut code: impl FnMut() -> i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|topic| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(TopicName(topic.name.0.clone()))
                .with_results_by_partition(
                    topic
                        .partitions
                        .iter()
                        .map(|partition| {
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(*partition)
                                .with_partition_error_code(code())
                        })
                        .collect(),
                )
        })
        .collect()
}

/// The answer giving every partition of every transaction of `request` the same `code` (an
/// ACL refusal), in the request's version's layout.
pub fn refused(request: &AddPartitionsToTxnRequest, code: i16) -> AddPartitionsToTxnResponse {
    AddPartitionsToTxnResponse::default()
        .with_results_by_topic_v3_and_below(topic_results(&request.v3_and_below_topics, || code))
        .with_results_by_transaction(
            request
                .transactions
                .iter()
                .map(|transaction| {
                    AddPartitionsToTxnResult::default()
                        .with_transactional_id(transaction.transactional_id.clone())
                        .with_topic_results(topic_results(&transaction.topics, || code))
                })
                .collect(),
        )
}
