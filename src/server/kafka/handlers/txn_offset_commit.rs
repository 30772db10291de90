//! TxnOffsetCommit (key 28), v0..=3: a consumer group's positions committed with a transaction
//! (the second half of `sendOffsetsToTransaction`).
//!
//! The positions are held in the transaction's durable state and applied to the group's
//! committed offsets when the transaction commits (dropped if it aborts), so a
//! consume-transform-produce loop's input positions move exactly when its output becomes
//! visible.
//! - The group must have been added with AddOffsetsToTxn first (`INVALID_TXN_STATE`); an older
//!   producer epoch is `PRODUCER_FENCED` (v3+) or `INVALID_PRODUCER_EPOCH`; an unknown
//!   partition `UNKNOWN_TOPIC_OR_PARTITION`. The whole request is one update: every partition
//!   gets the same answer.
//! - v3 (KIP-447) carries the consumer's member id and generation: when it sends them (a member
//!   id, or a generation of 0 or more), they are checked as OffsetCommit checks them
//!   (`ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID`, `REBALANCE_IN_PROGRESS`; for a
//!   consumer-protocol group `STALE_MEMBER_EPOCH`, `FENCED_MEMBER_EPOCH`), so a consumer that
//!   lost its partitions to a rebalance cannot commit their positions with its output. Without
//!   them (v0..=2, or `assign()` consumers) only the producer epoch fences.

use std::sync::Arc;

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{ApiKey, TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use kafka_protocol::ResponseError;

use super::super::authorization::{each, TOPIC_REFUSED};
use super::super::errors::{coordinator_error, fenced_code, kafka_error};
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use super::offset_commit::check_member;
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::transactions::{OffsetsRefusal, PeerError, PendingOffset};
use crate::broker::BrokerService;
use crate::protocol::ErrorCode;
use crate::server::protocol::Started;

/// TxnOffsetCommit as the listener serves it.
pub struct TxnOffsetCommit;

impl KafkaApi for TxnOffsetCommit {
    type Request = TxnOffsetCommitRequest;
    const KEY: ApiKey = ApiKey::TxnOffsetCommit;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 3;

    /// `produce` on some topic (the transaction) and `consume` on every topic whose position
    /// it commits.
    fn authorize(access: &Access, request: &TxnOffsetCommitRequest) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Produce)?;
        each(
            access,
            Operation::Consume,
            request.topics.iter().map(|topic| topic.name.as_str()),
        )
    }

    /// Every partition `TOPIC_AUTHORIZATION_FAILED`.
    fn refuse(_refusal: &AclRefusal<'_>, request: &TxnOffsetCommitRequest) -> Option<ResponseBody> {
        Some(ResponseBody::message(answered(request, TOPIC_REFUSED)))
    }

    fn start(call: Call<'_>, request: TxnOffsetCommitRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// Answers a TxnOffsetCommit request.
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: TxnOffsetCommitRequest,
) -> KafkaResponse {
    let unknown = request.topics.iter().find_map(|topic| {
        topic.partitions.iter().find_map(|partition| {
            let known = u32::try_from(partition.partition_index).is_ok_and(|index| {
                service
                    .groups()
                    .partition_exists(topic.name.as_str(), index)
            });
            (!known || partition.committed_offset < 0).then_some(())
        })
    });
    // The group's coordinator answers (on a cluster the leader of the group's offsets
    // partition; standalone this broker).
    let not_coordinator = match service
        .groups()
        .require_coordinator(request.group_id.as_str())
        .await
    {
        Ok(()) => None,
        Err(error) => Some(kafka_error(&error).code()),
    };
    let coordinator = service.transactions();
    let code = match member_refusal(&service, version, &request) {
        _ if not_coordinator.is_some() => not_coordinator.unwrap_or_default(),
        _ if unknown.is_some() => ResponseError::UnknownTopicOrPartition.code(),
        Some(refused) => refused,
        None => {
            let offsets: Vec<(String, i32, PendingOffset)> = request
                .topics
                .iter()
                .flat_map(|topic| {
                    topic.partitions.iter().map(|partition| {
                        (
                            topic.name.to_string(),
                            partition.partition_index,
                            PendingOffset {
                                offset: partition.committed_offset,
                                leader_epoch: partition.committed_leader_epoch,
                                metadata: partition
                                    .committed_metadata
                                    .as_ref()
                                    .map(|metadata| metadata.to_string()),
                            },
                        )
                    })
                })
                .collect();
            let id = request.transactional_id.as_str();
            let (producer_id, producer_epoch) = (request.producer_id.0, request.producer_epoch);
            let group = request.group_id.as_str();
            match coordinator
                .txn_offset_commit(id, (producer_id, producer_epoch), group, offsets)
                .await
            {
                Ok(()) => 0,
                // The transactional id's coordinator may be another broker (on a cluster).
                Err(OffsetsRefusal::Elsewhere(error)) => {
                    tracing::info!(transactional_id = %id, %error, "TxnOffsetCommit refused by the transaction's coordinator");
                    handed_over_refused(&error, version)
                }
                Err(OffsetsRefusal::Here(error)) => {
                    tracing::info!(transactional_id = %id, %error, "TxnOffsetCommit refused");
                    coordinator_error(&error, fenced_code(version, 3)).code()
                }
            }
        }
    };
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::TxnOffsetCommit,
        api_version: version,
        body: ResponseBody::message(answered(&request, code)),
    }
}

/// The Kafka code of the transactional id's coordinator's refusal of positions handed over
/// on a cluster: its own refusal as TxnOffsetCommit names it, or `COORDINATOR_NOT_AVAILABLE`
/// (retriable) when it could not be reached.
fn handed_over_refused(error: &PeerError, version: i16) -> i16 {
    let code = match error.code {
        Some(ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch) => {
            fenced_code(version, 3)
        }
        Some(ErrorCode::InvalidTransactionState) => ResponseError::InvalidTxnState,
        Some(ErrorCode::ConcurrentTransactions) => ResponseError::ConcurrentTransactions,
        Some(ErrorCode::UnknownTopic | ErrorCode::UnknownPartition) => {
            ResponseError::UnknownTopicOrPartition
        }
        _ => ResponseError::CoordinatorNotAvailable,
    };
    code.code()
}

/// KIP-447's check of the consumer behind a v3 request that names its member or generation:
/// the refusal's code, if the group refuses.
fn member_refusal(
    service: &BrokerService,
    version: i16,
    request: &TxnOffsetCommitRequest,
) -> Option<i16> {
    if version < 3 || (request.member_id.is_empty() && request.generation_id < 0) {
        return None;
    }
    let committing: Vec<(&str, u32)> = request
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().filter_map(|partition| {
                let index = u32::try_from(partition.partition_index).ok()?;
                Some((topic.name.0.as_str(), index))
            })
        })
        .collect();
    check_member(
        service,
        request.group_id.as_str(),
        request.member_id.as_str(),
        request.generation_id,
        &committing,
    )
    .err()
}

/// The answer giving every partition of `request` the same `code` (the whole request is one
/// update; an ACL refusal is whole too).
pub fn answered(request: &TxnOffsetCommitRequest, code: i16) -> TxnOffsetCommitResponse {
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            TxnOffsetCommitResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(
                    topic
                        .partitions
                        .iter()
                        .map(|partition| {
                            TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(partition.partition_index)
                                .with_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}
