//! InitProducerId (key 22), v0..=4: a producer id for an idempotent producer.
//!
//! - Without a `transactional_id` (an idempotent producer): a new producer id from the broker's
//!   durably reserved blocks (the same ids the native `InitProducerId` hands out), producer
//!   epoch 0, as Kafka's broker answers such a request. A producer that asks again with its id
//!   and epoch (v3+, KIP-360) also gets a new id: the partition's producer state accepts the new
//!   id from sequence 0, so nothing is lost.
//! - With a `transactional_id` (a transactional producer): the transaction coordinator's stable
//!   producer id for the id and a new producer epoch (`crate::broker::transactions`). An open
//!   transaction of the previous instance is aborted first (its partitions re-granted, so the
//!   old instance is fenced at the segment writer, then its abort markers written), so the
//!   answer may take one marker write; if that cannot finish now the client is told
//!   `CONCURRENT_TRANSACTIONS` and retries. A `transaction_timeout_ms` outside 1..=15 min is
//!   `INVALID_TRANSACTION_TIMEOUT`. On a cluster the id's coordinator answers (the leader of
//!   its offsets partition, where its state is stored with `acks=all`); another broker
//!   `NOT_COORDINATOR`.

use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::ResponseError;

use super::super::errors::{coordinator_error, fenced_code, kafka_error};
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// InitProducerId as the listener serves it.
pub struct InitProducerId;

impl KafkaApi for InitProducerId {
    type Request = InitProducerIdRequest;
    const KEY: ApiKey = ApiKey::InitProducerId;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 4;

    /// `produce` on some topic (Kafka's IdempotentWrite on the cluster).
    fn authorize(access: &Access, _request: &InitProducerIdRequest) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Produce)
    }

    /// `CLUSTER_AUTHORIZATION_FAILED`, as Kafka's IdempotentWrite check answers; no producer id.
    fn refuse(_refusal: &AclRefusal<'_>, _request: &InitProducerIdRequest) -> Option<ResponseBody> {
        Some(ResponseBody::message(
            InitProducerIdResponse::default()
                .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ))
    }

    fn start(call: Call<'_>, request: InitProducerIdRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// Answers an InitProducerId request.
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: InitProducerIdRequest,
) -> KafkaResponse {
    let refused = |error: ResponseError| {
        InitProducerIdResponse::default()
            .with_error_code(error.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    let transactional = request
        .transactional_id
        .as_ref()
        .is_some_and(|id| !id.0.is_empty());
    let body = if transactional {
        let id = request
            .transactional_id
            .as_ref()
            .map(|id| id.0.to_string())
            .unwrap_or_default();
        match service
            .transactions()
            .init_producer_id(
                &id,
                i64::from(request.transaction_timeout_ms),
                (request.producer_id.0 >= 0)
                    .then_some((request.producer_id.0, request.producer_epoch)),
            )
            .await
        {
            Ok((producer_id, producer_epoch)) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(producer_epoch),
            Err(error) => {
                tracing::info!(transactional_id = %id, %error, "InitProducerId refused");
                refused(coordinator_error(&error, fenced_code(version, 4)))
            }
        }
    } else {
        match service.init_producer_id().await {
            Ok((producer_id, producer_epoch)) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(producer_epoch),
            Err(error) => refused(kafka_error(&error)),
        }
    };
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::InitProducerId,
        api_version: version,
        body: ResponseBody::message(body),
    }
}
