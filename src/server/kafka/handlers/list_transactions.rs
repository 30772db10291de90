//! ListTransactions (key 66), v0..=1: the transactional ids this broker coordinates (Kafka's
//! `kafka-transactions list`, the Java AdminClient's `listTransactions`).
//!
//! - Every id the coordinator knows, with its producer id and state, filtered by state,
//!   producer id and (v1) by running longer than `duration_filter` ms (an open transaction
//!   only; -1: no filter), as Kafka's coordinator filters.
//! - A state filter that is not one of Kafka's transaction states is echoed back in
//!   `unknown_state_filters`, as Kafka's broker does, so a typo is visible to the caller.
//! - On a cluster a broker lists the ids it coordinates (those of the offsets partitions it
//!   leads), as Kafka's brokers do; the AdminClient asks every broker.
//! - No ACL beyond authentication: fencelog has no transactional-id ACLs.

use std::sync::Arc;

use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ApiKey, ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{Call, KafkaApi};
use crate::broker::transactions::coordinator::now_ms;
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// ListTransactions as the listener serves it: authentication only (fencelog has no transactional-id ACLs).
pub struct ListTransactions;

impl KafkaApi for ListTransactions {
    type Request = ListTransactionsRequest;
    const KEY: ApiKey = ApiKey::ListTransactions;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 1;

    fn start(call: Call<'_>, request: ListTransactionsRequest) -> Started<KafkaResponse> {
        Started::ready(handle(
            call.service,
            call.correlation_id,
            call.version,
            &request,
        ))
    }
}

/// Kafka's transaction states (`TransactionState` in its coordinator), as the filter spells them.
const KNOWN_STATES: &[&str] = &[
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
];

/// The answer to a ListTransactions request (immediate).
pub fn handle(
    service: &Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: &ListTransactionsRequest,
) -> KafkaResponse {
    let unknown = request
        .state_filters
        .iter()
        .filter(|state| !KNOWN_STATES.contains(&state.as_str()))
        .cloned()
        .collect();
    let now = now_ms();
    let mut listed: Vec<TransactionState> = service
        .transactions()
        .all()
        .into_iter()
        .filter(|state| {
            request.state_filters.is_empty()
                || request
                    .state_filters
                    .iter()
                    .any(|filter| filter.as_str() == state.state.kafka_name())
        })
        .filter(|state| {
            request.producer_id_filters.is_empty()
                || request
                    .producer_id_filters
                    .iter()
                    .any(|filter| filter.0 == state.producer_id)
        })
        .filter(|state| {
            request.duration_filter < 0
                || (state.start_ms >= 0 && now - state.start_ms > request.duration_filter)
        })
        .map(|state| {
            TransactionState::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(
                    state.transactional_id,
                )))
                .with_producer_id(ProducerId(state.producer_id))
                .with_transaction_state(StrBytes::from_static_str(state.state.kafka_name()))
        })
        .collect();
    listed.sort_by(|a, b| a.transactional_id.as_str().cmp(b.transactional_id.as_str()));
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::ListTransactions,
        api_version: version,
        body: ResponseBody::message(
            ListTransactionsResponse::default()
                .with_unknown_state_filters(unknown)
                .with_transaction_states(listed),
        ),
    }
}
