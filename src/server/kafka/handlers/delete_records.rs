//! DeleteRecords (key 21), v0..=2: moves each named partition's log start (low watermark) up to
//! the given offset through the broker service, durably, one partition after the other, each
//! with its own result.
//!
//! What a client sees, and why:
//! - Offset -1 means "the high watermark" (every record consumers can see goes), as in Kafka.
//!   An offset past the high watermark, or below -1, is `OFFSET_OUT_OF_RANGE` (1) and changes
//!   nothing; an offset at or below the current log start changes nothing and answers the
//!   current log start (the log start never moves back).
//! - The answer's `low_watermark` is the partition's log start after the request: ListOffsets
//!   earliest (-2) answers it from then on, and a fetch below it is `OFFSET_OUT_OF_RANGE` (the
//!   consumer resets as its `auto.offset.reset` says). A fetch inside the first remaining batch
//!   gets that whole batch; clients skip the records before the offset they asked for.
//! - No such topic or partition: `UNKNOWN_TOPIC_OR_PARTITION` (3); in a cluster a broker that
//!   does not lead the partition: `NOT_LEADER_OR_FOLLOWER` (6). The other partitions still run.
//! - Authorization: Kafka asks DELETE on the topic; fencelog's `admin` on the topic is what
//!   deleting a topic needs too, so it is the operation checked (`TOPIC_AUTHORIZATION_FAILED`,
//!   29, for every partition of the request when one topic is refused: see `authorization`).
//! - `timeout_ms` needs nothing: each partition's answer comes once its new log start is durable
//!   on its leader. In a cluster, followers adopt it from their next fetch; Kafka instead waits
//!   (up to the timeout) until every in-sync replica's low watermark reached it. See
//!   `docs/replication.md` for what that means across a failover.

use std::sync::Arc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{ApiKey, DeleteRecordsRequest, DeleteRecordsResponse};
use kafka_protocol::ResponseError;

use super::super::authorization::{each, TOPIC_REFUSED};
use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::BrokerService;
use crate::domain::DELETE_UP_TO_HIGH_WATERMARK;
use crate::server::protocol::Started;

/// DeleteRecords as the listener serves it.
pub struct DeleteRecords;

impl KafkaApi for DeleteRecords {
    type Request = DeleteRecordsRequest;
    const KEY: ApiKey = ApiKey::DeleteRecords;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 2;

    /// `admin` on every topic named (Kafka asks DELETE on the topic; fencelog's `admin` on it
    /// is what deletes a topic too).
    fn authorize(access: &Access, request: &DeleteRecordsRequest) -> Result<(), NotAuthorized> {
        each(
            access,
            Operation::Admin,
            request.topics.iter().map(|topic| topic.name.as_str()),
        )
    }

    /// Every partition `TOPIC_AUTHORIZATION_FAILED`, low watermark -1.
    fn refuse(_refusal: &AclRefusal<'_>, request: &DeleteRecordsRequest) -> Option<ResponseBody> {
        let topics = request
            .topics
            .iter()
            .map(|topic| {
                DeleteRecordsTopicResult::default()
                    .with_name(topic.name.clone())
                    .with_partitions(
                        topic
                            .partitions
                            .iter()
                            .map(|partition| {
                                DeleteRecordsPartitionResult::default()
                                    .with_partition_index(partition.partition_index)
                                    .with_low_watermark(-1)
                                    .with_error_code(TOPIC_REFUSED)
                            })
                            .collect(),
                    )
            })
            .collect();
        Some(ResponseBody::message(
            DeleteRecordsResponse::default().with_topics(topics),
        ))
    }

    fn start(call: Call<'_>, request: DeleteRecordsRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// Kafka's "delete up to the high watermark" offset.
pub const HIGH_WATERMARK_OFFSET: i64 = -1;

/// Deletes the requested records; the answer lists each topic and partition in request order.
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: DeleteRecordsRequest,
) -> KafkaResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let name = topic.name.0.as_str();
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for partition in &topic.partitions {
            partitions.push(
                delete_one(&service, name, partition.partition_index, partition.offset).await,
            );
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions),
        );
    }
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::DeleteRecords,
        api_version: version,
        body: ResponseBody::message(DeleteRecordsResponse::default().with_topics(topics)),
    }
}

/// One partition's result.
async fn delete_one(
    service: &BrokerService,
    topic: &str,
    partition_index: i32,
    offset: i64,
) -> DeleteRecordsPartitionResult {
    let refused = |error: ResponseError| {
        DeleteRecordsPartitionResult::default()
            .with_partition_index(partition_index)
            .with_low_watermark(-1)
            .with_error_code(error.code())
    };
    let Ok(partition) = u32::try_from(partition_index) else {
        return refused(ResponseError::UnknownTopicOrPartition);
    };
    let offset = match offset {
        HIGH_WATERMARK_OFFSET => DELETE_UP_TO_HIGH_WATERMARK,
        offset => match u64::try_from(offset) {
            Ok(offset) => offset,
            Err(_) => return refused(ResponseError::OffsetOutOfRange),
        },
    };
    match service
        .reads()
        .delete_records(topic, partition, offset)
        .await
    {
        Ok(low_watermark) => DeleteRecordsPartitionResult::default()
            .with_partition_index(partition_index)
            .with_low_watermark(i64::try_from(low_watermark).unwrap_or(i64::MAX)),
        Err(error) => refused(kafka_error(&error)),
    }
}
