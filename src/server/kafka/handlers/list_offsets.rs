//! ListOffsets (key 2), v1..=7: a partition's earliest offset (timestamp -2), its latest
//! (-1), or the first offset whose record timestamp is at or after a given time.
//!
//! - Latest is the high watermark for `isolation_level` 0 (read_uncommitted) and the last
//!   stable offset for 1 (read_committed): a read_committed consumer that resets to latest
//!   starts where it may read (the offset of the oldest open transaction, if any).
//! - By timestamp, the answer is the first record at or after the time: its offset and its own
//!   timestamp, as Kafka answers (a consumer's `offsetsForTimes` shows that record's time); no
//!   record that recent is offset -1 and timestamp -1.
//! - Max timestamp (-3, v7, KIP-734): the first visible record with the largest timestamp, its
//!   offset and timestamp (offset -1, timestamp -1 for an empty partition); found from the
//!   segments' largest timestamps and the batch headers of the active segment. Other negative
//!   timestamps (-4, -5 belong to v8+) are `INVALID_REQUEST`.
//! - The leader epoch (v4+) is the partition's as Metadata shows it (-1 standalone); in a
//!   cluster `current_leader_epoch` is checked (`FENCED_LEADER_EPOCH`, `UNKNOWN_LEADER_EPOCH`)
//!   and only the leader answers (`NOT_LEADER_OR_FOLLOWER`).

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ApiKey, ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::ResponseError;

use super::super::authorization::{each, TOPIC_REFUSED};
use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::{BrokerError, BrokerService};
use crate::server::protocol::Started;

/// ListOffsets as the listener serves it.
pub struct ListOffsets;

impl KafkaApi for ListOffsets {
    type Request = ListOffsetsRequest;
    const KEY: ApiKey = ApiKey::ListOffsets;
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 7;

    /// `consume` on every topic of the request.
    fn authorize(access: &Access, request: &ListOffsetsRequest) -> Result<(), NotAuthorized> {
        each(
            access,
            Operation::Consume,
            request.topics.iter().map(|topic| topic.name.as_str()),
        )
    }

    /// Every partition `TOPIC_AUTHORIZATION_FAILED`, offset and timestamp -1.
    fn refuse(_refusal: &AclRefusal<'_>, request: &ListOffsetsRequest) -> Option<ResponseBody> {
        let topics = request
            .topics
            .iter()
            .map(|topic| {
                ListOffsetsTopicResponse::default()
                    .with_name(topic.name.clone())
                    .with_partitions(
                        topic
                            .partitions
                            .iter()
                            .map(|partition| {
                                ListOffsetsPartitionResponse::default()
                                    .with_partition_index(partition.partition_index)
                                    .with_error_code(TOPIC_REFUSED)
                                    .with_offset(-1)
                                    .with_timestamp(-1)
                            })
                            .collect(),
                    )
            })
            .collect();
        Some(ResponseBody::message(
            ListOffsetsResponse::default().with_topics(topics),
        ))
    }

    fn start(call: Call<'_>, request: ListOffsetsRequest) -> Started<KafkaResponse> {
        Started::ready(handle(
            call.service,
            call.correlation_id,
            call.version,
            &request,
        ))
    }
}

/// Kafka's "latest offset" timestamp.
pub const LATEST_TIMESTAMP: i64 = -1;
/// Kafka's "earliest offset" timestamp.
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// Kafka's "offset of the largest timestamp" (v7+).
pub const MAX_TIMESTAMP: i64 = -3;

/// The answer to a ListOffsets request.
pub fn handle(
    service: &BrokerService,
    correlation_id: i32,
    version: i16,
    request: &ListOffsetsRequest,
) -> KafkaResponse {
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let name = topic.name.0.as_str();
            let partitions = topic
                .partitions
                .iter()
                .map(|partition| {
                    let answer = ListOffsetsPartitionResponse::default()
                        .with_partition_index(partition.partition_index);
                    let Ok(index) = u32::try_from(partition.partition_index) else {
                        return answer
                            .with_leader_epoch(-1)
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    };
                    let known = super::leader_epoch::known(service, name, index);
                    let answer = answer.with_leader_epoch(super::leader_epoch::shown(known));
                    if let Err(error) =
                        super::leader_epoch::check_known(known, partition.current_leader_epoch)
                    {
                        return answer.with_error_code(error.code());
                    }
                    match offset(
                        service,
                        name,
                        partition.partition_index,
                        partition.timestamp,
                        request.isolation_level == super::fetch::READ_COMMITTED,
                    ) {
                        Ok((timestamp, offset)) => {
                            answer.with_timestamp(timestamp).with_offset(offset)
                        }
                        Err(error) => answer.with_error_code(error.code()),
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::ListOffsets,
        api_version: version,
        body: ResponseBody::message(ListOffsetsResponse::default().with_topics(topics)),
    }
}

/// The (timestamp, offset) answered for one partition.
fn offset(
    service: &BrokerService,
    topic: &str,
    partition: i32,
    timestamp: i64,
    committed: bool,
) -> Result<(i64, i64), ResponseError> {
    let partition = u32::try_from(partition).map_err(|_| ResponseError::UnknownTopicOrPartition)?;
    let broker_error = |error: BrokerError| kafka_error(&error);
    let to_i64 = |offset: u64| i64::try_from(offset).unwrap_or(i64::MAX);
    match timestamp {
        EARLIEST_TIMESTAMP | LATEST_TIMESTAMP => {
            let offsets = service
                .reads()
                .list_offsets(topic, partition)
                .map_err(broker_error)?;
            let offset = if timestamp == EARLIEST_TIMESTAMP {
                offsets.earliest
            } else if committed {
                service
                    .reads()
                    .last_stable_offset(topic, partition)
                    .map_err(broker_error)?
                    .min(offsets.latest)
            } else {
                offsets.latest
            };
            Ok((-1, to_i64(offset)))
        }
        MAX_TIMESTAMP => Ok(
            match service
                .reads()
                .record_of_max_timestamp(topic, partition)
                .map_err(broker_error)?
            {
                Some((offset, found)) => (found, to_i64(offset)),
                None => (-1, -1),
            },
        ),
        timestamp if timestamp < 0 => Err(ResponseError::InvalidRequest),
        timestamp => Ok(
            match service
                .reads()
                .record_for_timestamp(topic, partition, timestamp)
                .map_err(broker_error)?
            {
                Some((offset, found)) => (found, to_i64(offset)),
                None => (-1, -1),
            },
        ),
    }
}
