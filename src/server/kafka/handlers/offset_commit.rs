//! OffsetCommit (key 8), v2..=9: a group's positions stored durably, in the committed-offset
//! store both listeners share (an offset committed here is where `fencelog consume --group G`
//! resumes, and the other way round).
//!
//! What a client sees:
//! - The commit is checked against the group's membership first
//!   ([`GroupCoordinator::check_commit`](crate::broker::coordinator::GroupCoordinator::check_commit)):
//!   a member must commit in the group's current generation (`ILLEGAL_GENERATION`, 22;
//!   `UNKNOWN_MEMBER_ID`, 25; `REBALANCE_IN_PROGRESS`, 27, between a rebalance's join answer
//!   and the leader's assignment; accepted while the members rejoin, as Kafka does). On a
//!   cluster a broker that is not the group's coordinator answers `NOT_COORDINATOR` (16). A
//!   consumer outside any group (generation -1, empty member id, as `assign()`
//!   consumers send) may commit for a group without members. That refusal is every partition's
//!   error.
//! - A member of a consumer-protocol (KIP-848) group sends its member id and member epoch in
//!   the same fields (v9 is the version such members use; the check is the same in every
//!   version): an older epoch than its current one is `STALE_MEMBER_EPOCH` (113: heartbeat,
//!   then retry) unless the member has held every partition of the commit since that epoch
//!   (KIP-1251, see `ConsumerGroups::check_offsets`), a newer one `FENCED_MEMBER_EPOCH` (110), an unknown member
//!   `UNKNOWN_MEMBER_ID` (25), and so is a commit from outside the group while it has
//!   members. Offsets go to the same store as classic groups'.
//! - Each partition is then checked on its own: an unknown topic or partition is
//!   `UNKNOWN_TOPIC_OR_PARTITION` (3); a negative offset is `OFFSET_OUT_OF_RANGE` (1); an
//!   offset past the high watermark is accepted, as Kafka accepts it (tools set positions
//!   ahead; a consumer fetching there learns the range); metadata over 4096 bytes is
//!   `OFFSET_METADATA_TOO_LARGE` (12). The partitions that pass are written in one durable write
//!   (fsync before the answer); a failed write is `KAFKA_STORAGE_ERROR` (56) for each of them.
//! - Committed offsets never expire: `retention_time_ms` (v2..=4) is ignored, and so are the
//!   leader epoch (v6+) and `group.instance.id` (v7+). A null metadata is stored as empty.

use std::sync::Arc;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{ApiKey, OffsetCommitRequest, OffsetCommitResponse};
use kafka_protocol::ResponseError;

use super::super::authorization::{each, TOPIC_REFUSED};
use super::super::errors::{consumer_group_error, group_error, kafka_error};
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::CommitBound;
use crate::broker::{BrokerService, CommittedOffset};
use crate::server::protocol::Started;

/// OffsetCommit as the listener serves it.
pub struct OffsetCommit;

impl KafkaApi for OffsetCommit {
    type Request = OffsetCommitRequest;
    const KEY: ApiKey = ApiKey::OffsetCommit;
    const MIN_VERSION: i16 = 2;
    const MAX_VERSION: i16 = 9;

    /// `consume` on some topic (the group) and on every topic whose position it commits.
    fn authorize(access: &Access, request: &OffsetCommitRequest) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Consume)?;
        each(
            access,
            Operation::Consume,
            request.topics.iter().map(|topic| topic.name.as_str()),
        )
    }

    /// Every partition `TOPIC_AUTHORIZATION_FAILED`.
    fn refuse(_refusal: &AclRefusal<'_>, request: &OffsetCommitRequest) -> Option<ResponseBody> {
        let topics = request
            .topics
            .iter()
            .map(|topic| {
                OffsetCommitResponseTopic::default()
                    .with_name(topic.name.clone())
                    .with_partitions(
                        topic
                            .partitions
                            .iter()
                            .map(|partition| {
                                OffsetCommitResponsePartition::default()
                                    .with_partition_index(partition.partition_index)
                                    .with_error_code(TOPIC_REFUSED)
                            })
                            .collect(),
                    )
            })
            .collect();
        Some(ResponseBody::message(
            OffsetCommitResponse::default().with_topics(topics),
        ))
    }

    fn start(call: Call<'_>, request: OffsetCommitRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// Commits the request's offsets; the answer has every partition's outcome.
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: OffsetCommitRequest,
) -> KafkaResponse {
    let codes = commit(&service, &request).await;
    let mut codes = codes.into_iter();
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|partition| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(partition.partition_index)
                        .with_error_code(codes.next().unwrap_or(0))
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::OffsetCommit,
        api_version: version,
        body: ResponseBody::message(OffsetCommitResponse::default().with_topics(topics)),
    }
}

/// Every partition's error code, in request order.
/// The group's check of a commit by `member_id` in generation (or member epoch) `epoch` of
/// `committing`: classic groups through the group coordinator, consumer-protocol (KIP-848)
/// groups through theirs. The Kafka error code of a refusal. TxnOffsetCommit v3 (KIP-447) runs
/// the same check.
pub(super) fn check_member(
    service: &BrokerService,
    group: &str,
    member_id: &str,
    epoch: i32,
    committing: &[(&str, u32)],
) -> Result<(), i16> {
    match service.groups().consumer_groups().check_offsets(
        group,
        member_id,
        epoch,
        Some(committing),
        std::time::Instant::now(),
    ) {
        Some(result) => result.map_err(|error| consumer_group_error(&error).code()),
        None => service
            .groups()
            .coordinator()
            .check_commit(group, epoch, member_id)
            .map_err(|error| group_error(&error).code()),
    }
}

async fn commit(service: &BrokerService, request: &OffsetCommitRequest) -> Vec<i16> {
    let group = request.group_id.0.as_str();
    if let Err(refused) = service.groups().require_coordinator(group).await {
        let code = kafka_error(&refused).code();
        let count = request.topics.iter().map(|t| t.partitions.len()).sum();
        return vec![code; count];
    }
    let partitions = request.topics.iter().flat_map(|topic| {
        topic
            .partitions
            .iter()
            .map(move |partition| (topic.name.0.as_str(), partition))
    });
    let member_id = request.member_id.as_str();
    let epoch = request.generation_id_or_member_epoch;
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
    if let Err(code) = check_member(service, group, member_id, epoch, &committing) {
        return partitions.map(|_| code).collect();
    }
    // Checks that need no broker call first; `None` marks the ones sent to the service.
    let mut codes: Vec<Option<i16>> = Vec::new();
    let mut to_commit = Vec::new();
    for (topic, partition) in partitions {
        let index = u32::try_from(partition.partition_index);
        let offset = u64::try_from(partition.committed_offset);
        match (index, offset) {
            (Err(_), _) => codes.push(Some(ResponseError::UnknownTopicOrPartition.code())),
            (_, Err(_)) => codes.push(Some(ResponseError::OffsetOutOfRange.code())),
            (Ok(index), Ok(offset)) => {
                let metadata = partition
                    .committed_metadata
                    .as_ref()
                    .map(|metadata| metadata.to_string())
                    .unwrap_or_default();
                to_commit.push((
                    topic.to_string(),
                    index,
                    CommittedOffset { offset, metadata },
                ));
                codes.push(None);
            }
        }
    }
    let commits = service
        .groups()
        .commit_offsets_within(group.to_string(), to_commit, CommitBound::Existence)
        .await;
    let written = commits.written.as_ref().map_err(kafka_error);
    let mut checked = commits.checked.iter().map(|check| match (check, written) {
        (Err(error), _) => kafka_error(error).code(),
        (Ok(()), Err(error)) => error.code(),
        (Ok(()), Ok(())) => 0,
    });
    codes
        .into_iter()
        .map(|code| code.unwrap_or_else(|| checked.next().unwrap_or(0)))
        .collect()
}
