//! OffsetForLeaderEpoch (key 23), v2..=4: where a leader epoch ended in this leader's log
//! (KIP-101, KIP-320). A consumer that lived through a failover asks it for the epoch of the
//! last record it consumed; an end offset below its position means the new leader does not hold
//! what it read past there (a truncation), which the client reports (Java's
//! `LogTruncationException`) instead of skipping silently.
//!
//! - The answer is the largest epoch at or below the one asked and the offset where it ended
//!   (the start of the next epoch in the history, or the log end for the latest), from the same
//!   leader-epoch history the followers truncate by. Every epoch in the history above the one
//!   asked: epoch -1 and end offset -1 (Kafka's `UNDEFINED`).
//! - Only the leader answers (`NOT_LEADER_OR_FOLLOWER`); `current_leader_epoch` is checked as
//!   Fetch checks it.
//! - Standalone there is one leader epoch, 0, for the whole log: any epoch asked at or above 0
//!   ends at the log end offset.
//! - `replica_id` is not used: fencelog's followers ask over the native protocol
//!   (`LeaderEpochEnd`), so every asker here is a consumer.

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{ApiKey, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use kafka_protocol::ResponseError;

use super::super::authorization::{each, TOPIC_REFUSED};
use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// OffsetForLeaderEpoch as the listener serves it.
pub struct OffsetForLeaderEpoch;

impl KafkaApi for OffsetForLeaderEpoch {
    type Request = OffsetForLeaderEpochRequest;
    const KEY: ApiKey = ApiKey::OffsetForLeaderEpoch;
    const MIN_VERSION: i16 = 2;
    const MAX_VERSION: i16 = 4;

    /// `consume` on every topic of the request.
    fn authorize(
        access: &Access,
        request: &OffsetForLeaderEpochRequest,
    ) -> Result<(), NotAuthorized> {
        each(
            access,
            Operation::Consume,
            request.topics.iter().map(|topic| topic.topic.as_str()),
        )
    }

    /// Every partition `TOPIC_AUTHORIZATION_FAILED`, leader epoch and end offset -1.
    fn refuse(
        _refusal: &AclRefusal<'_>,
        request: &OffsetForLeaderEpochRequest,
    ) -> Option<ResponseBody> {
        let topics = request
            .topics
            .iter()
            .map(|topic| {
                OffsetForLeaderTopicResult::default()
                    .with_topic(topic.topic.clone())
                    .with_partitions(
                        topic
                            .partitions
                            .iter()
                            .map(|partition| {
                                EpochEndOffset::default()
                                    .with_partition(partition.partition)
                                    .with_error_code(TOPIC_REFUSED)
                                    .with_leader_epoch(-1)
                                    .with_end_offset(-1)
                            })
                            .collect(),
                    )
            })
            .collect();
        Some(ResponseBody::message(
            OffsetForLeaderEpochResponse::default().with_topics(topics),
        ))
    }

    fn start(call: Call<'_>, request: OffsetForLeaderEpochRequest) -> Started<KafkaResponse> {
        Started::ready(handle(
            call.service,
            call.correlation_id,
            call.version,
            &request,
        ))
    }
}

/// The answer to an OffsetForLeaderEpoch request.
pub fn handle(
    service: &BrokerService,
    correlation_id: i32,
    version: i16,
    request: &OffsetForLeaderEpochRequest,
) -> KafkaResponse {
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let name = topic.topic.0.as_str();
            let partitions = topic
                .partitions
                .iter()
                .map(|partition| {
                    let answer = EpochEndOffset::default()
                        .with_partition(partition.partition)
                        .with_leader_epoch(-1)
                        .with_end_offset(-1);
                    match end(
                        service,
                        name,
                        partition.partition,
                        partition.current_leader_epoch,
                        partition.leader_epoch,
                    ) {
                        Ok(Some((epoch, end_offset))) => {
                            answer.with_leader_epoch(epoch).with_end_offset(end_offset)
                        }
                        Ok(None) => answer,
                        Err(error) => answer.with_error_code(error.code()),
                    }
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(topic.topic.clone())
                .with_partitions(partitions)
        })
        .collect();
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::OffsetForLeaderEpoch,
        api_version: version,
        body: ResponseBody::message(OffsetForLeaderEpochResponse::default().with_topics(topics)),
    }
}

/// `(epoch, end offset)` for one partition, `None` when every epoch of the history is above
/// the one asked.
fn end(
    service: &BrokerService,
    topic: &str,
    partition: i32,
    current_leader_epoch: i32,
    leader_epoch: i32,
) -> Result<Option<(i32, i64)>, ResponseError> {
    let partition = u32::try_from(partition).map_err(|_| ResponseError::UnknownTopicOrPartition)?;
    super::leader_epoch::check(service, topic, partition, current_leader_epoch)?;
    service
        .replica_manager()
        .require_leader(topic, partition)
        .map_err(|error| kafka_error(&error))?;
    let Ok(asked) = u32::try_from(leader_epoch) else {
        return Ok(None);
    };
    let to_i64 = |offset: u64| i64::try_from(offset).unwrap_or(i64::MAX);
    let log = service
        .broker()
        .partition(topic, partition)
        .map_err(|error| kafka_error(&error))?;
    if !service.replica_manager().is_cluster() {
        return Ok(Some((0, to_i64(log.log_end_offset()))));
    }
    Ok(log
        .end_offset_for_epoch(asked)
        .map(|(epoch, end)| (i32::try_from(epoch).unwrap_or(i32::MAX), to_i64(end))))
}
