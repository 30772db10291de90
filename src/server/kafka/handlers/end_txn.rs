//! EndTxn (key 26), v0..=3: commit or abort the producer's transaction.
//!
//! The outcome is decided and made durable first (`PrepareCommit`/`PrepareAbort`); the
//! coordinator then waits for the transaction's produces still in flight, writes a commit or
//! abort marker through the fence on every partition of the transaction (with the lease epoch
//! it holds there, `acks=all`), applies the pending offsets of a commit, releases the leases and
//! answers. If a marker cannot be written now the answer is still success (the outcome is
//! durable and the coordinator's timeout task writes the marker again until it lands, as
//! Kafka's coordinator writes its markers after answering); read_committed readers see the
//! transaction once it does.
//! - An older producer epoch: `PRODUCER_FENCED` (v2+) or `INVALID_PRODUCER_EPOCH`: fatal.
//! - A retry of an EndTxn that completed the same way: success. Abort with nothing added:
//!   success. Commit with nothing added, or the opposite of a completed outcome:
//!   `INVALID_TXN_STATE`.

use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, EndTxnRequest, EndTxnResponse, ProducerId};
use kafka_protocol::ResponseError;

use super::super::errors::{coordinator_error, fenced_code};
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// EndTxn as the listener serves it.
pub struct EndTxn;

impl KafkaApi for EndTxn {
    type Request = EndTxnRequest;
    const KEY: ApiKey = ApiKey::EndTxn;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 3;

    /// `produce` on some topic (fencelog has no transactional-id ACLs).
    fn authorize(access: &Access, _request: &EndTxnRequest) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Produce)
    }

    /// `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`, producer id and epoch -1.
    fn refuse(_refusal: &AclRefusal<'_>, _request: &EndTxnRequest) -> Option<ResponseBody> {
        Some(ResponseBody::message(
            EndTxnResponse::default()
                .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ))
    }

    fn start(call: Call<'_>, request: EndTxnRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// Answers an EndTxn request.
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: EndTxnRequest,
) -> KafkaResponse {
    let code = match service
        .transactions()
        .end(
            request.transactional_id.as_str(),
            request.producer_id.0,
            request.producer_epoch,
            request.committed,
        )
        .await
    {
        Ok(()) => 0,
        Err(error) => {
            tracing::info!(transactional_id = %request.transactional_id.as_str(), %error, "EndTxn refused");
            coordinator_error(&error, fenced_code(version, 2)).code()
        }
    };
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::EndTxn,
        api_version: version,
        body: ResponseBody::message(
            EndTxnResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
    }
}
