//! ListTransactions (key 66), v0..=1: the transactions the broker coordinates (Kafka's
//! `kafka-transactions list`, the Java AdminClient's `listTransactions`).
//!
//! fencelog has no transactions yet (InitProducerId hands out idempotent producer ids only), so
//! the list is always empty: that is the truthful answer, and it lets operators' tools that list
//! transactions before doing anything else work against fencelog.
//!
//! - The filters (states, producer ids, v1's minimum duration) are accepted; none can match.
//! - A state filter that is not one of Kafka's transaction states is echoed back in
//!   `unknown_state_filters`, as Kafka's broker does, so a typo is visible to the caller.
//! - No ACL beyond authentication: Kafka filters the list by DESCRIBE on each transactional id,
//!   and an empty list has nothing to filter.

use kafka_protocol::messages::{ApiKey, ListTransactionsRequest, ListTransactionsResponse};

use super::super::response::{KafkaResponse, ResponseBody};

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

/// The answer to a ListTransactions request (immediate): no transactions.
pub fn handle(
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
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::ListTransactions,
        api_version: version,
        body: ResponseBody::ListTransactions(
            ListTransactionsResponse::default().with_unknown_state_filters(unknown),
        ),
    }
}
