//! AddOffsetsToTxn (key 25), v0..=3: a consumer group's offsets will be committed with the
//! producer's transaction (the first half of `sendOffsetsToTransaction`).
//!
//! The coordinator records the group in the transaction's durable state; the offsets follow in
//! TxnOffsetCommit (sent to the group's coordinator, which is this broker standalone) and are
//! applied to the group's committed offsets when the transaction commits, dropped when it
//! aborts. Refusals as for AddPartitionsToTxn; `PRODUCER_FENCED` from v2.

use std::sync::Arc;

use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, ApiKey};
use kafka_protocol::ResponseError;

use super::super::errors::{coordinator_error, fenced_code};
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// AddOffsetsToTxn as the listener serves it.
pub struct AddOffsetsToTxn;

impl KafkaApi for AddOffsetsToTxn {
    type Request = AddOffsetsToTxnRequest;
    const KEY: ApiKey = ApiKey::AddOffsetsToTxn;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 3;

    /// `produce` on some topic (fencelog has no transactional-id ACLs).
    fn authorize(access: &Access, _request: &AddOffsetsToTxnRequest) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Produce)
    }

    /// `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`.
    fn refuse(
        _refusal: &AclRefusal<'_>,
        _request: &AddOffsetsToTxnRequest,
    ) -> Option<ResponseBody> {
        Some(ResponseBody::message(
            AddOffsetsToTxnResponse::default()
                .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code()),
        ))
    }

    fn start(call: Call<'_>, request: AddOffsetsToTxnRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// Answers an AddOffsetsToTxn request.
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: AddOffsetsToTxnRequest,
) -> KafkaResponse {
    let code = match service
        .transactions()
        .add_offsets(
            request.transactional_id.as_str(),
            request.producer_id.0,
            request.producer_epoch,
            request.group_id.as_str(),
        )
        .await
    {
        Ok(()) => 0,
        Err(error) => {
            tracing::info!(transactional_id = %request.transactional_id.as_str(), %error, "AddOffsetsToTxn refused");
            coordinator_error(&error, fenced_code(version, 2)).code()
        }
    };
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::AddOffsetsToTxn,
        api_version: version,
        body: ResponseBody::message(AddOffsetsToTxnResponse::default().with_error_code(code)),
    }
}
