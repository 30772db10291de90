//! Fetch (key 1), v4..=12: reads each partition from its fetch offset and serves the stored
//! batches as Kafka record batches v2, long-polling when nothing is there yet: a Kafka batch kept
//! as it arrived (magic 2) from the log's own bytes, each its own part of the vectored write; a
//! native batch converted (`crate::server::kafka::batches::to_kafka_parts`).
//!
//! What a Kafka consumer sees, and why:
//! - Whole batches: a fetch offset inside a batch returns the whole batch (clients skip the
//!   records before their offset, as with Kafka). An empty answer is an empty `records` field.
//! - Transactions: `last_stable_offset` is the partition's (the high watermark when no
//!   transaction is open), in every answer. With `isolation_level` 1 (read_committed) a read
//!   stops before the last stable offset (whole batches: the last stable offset is always a
//!   batch boundary) and `aborted_transactions` lists the aborted transactions whose records
//!   fall in what is returned, so the client drops them; with 0 (read_uncommitted) everything
//!   up to the high watermark is returned and `aborted_transactions` is empty. Markers (control
//!   batches) are returned as Kafka control batches, which clients never show as records.
//!   `preferred_read_replica` is -1.
//! - **No fetch sessions** (KIP-227): the answer's `session_id` is 0, which tells the client to
//!   keep sending full fetch requests.
//! - Long poll (`fetch.min.bytes`, `fetch.max.wait.ms`): while the partitions asked for hold
//!   fewer than `min_bytes` (at least 1, at most the answer's `max_bytes`) past their fetch
//!   offsets, the request waits until they do or `max_wait_ms` (clamped to the server's limit)
//!   passes, then answers with what there is. Bytes are counted as stored (fencelog's batches,
//!   a little larger or smaller than the Kafka batches they become). A partition that cannot be
//!   read (not the leader, an offset out of range) ends the wait at once with its error.
//! - Size: each partition returns at most `partition_max_bytes`, the whole answer at most
//!   `max_bytes` (clamped to the server's fetch limit), except that the first batch of the first
//!   partition with data is returned whole (KIP-74), so a consumer always progresses.
//! - In a cluster only the leader serves (`NOT_LEADER_OR_FOLLOWER`), consumers see up to the
//!   high watermark, and `current_leader_epoch` (v9+) is checked (`FENCED_LEADER_EPOCH`,
//!   `UNKNOWN_LEADER_EPOCH`), so a consumer that missed a failover refreshes its metadata.
//! - An offset outside the log is `OFFSET_OUT_OF_RANGE` for that partition, with the log start
//!   and high watermark so the client can reset.
//! - Memory: converted batches are heap buffers (kept ones are the log's mapped bytes), so each
//!   read first reserves its byte limit from the server's memory budget (after the long poll: a
//!   waiting consumer holds nothing) and keeps only what the answer uses until it is encoded. A fetch that cannot get its share
//!   within the budget's wait is answered with offsets and no records (the client fetches
//!   again), never with an unbounded allocation.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, ProducerId};
use kafka_protocol::ResponseError;

use super::super::authorization::{each, TOPIC_REFUSED};
use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::batch::batches_below;
use crate::broker::{BrokerService, FetchRequest as Read};
use crate::server::kafka::batches::to_kafka_parts;
use crate::server::kafka::fetch_encoding::RecordParts;
use crate::server::memory_budget::{FetchMemory, Reservation};
use crate::server::protocol::Started;

/// Fetch as the listener serves it.
pub struct Fetch;

impl KafkaApi for Fetch {
    type Request = FetchRequest;
    const KEY: ApiKey = ApiKey::Fetch;
    const MIN_VERSION: i16 = 4;
    const MAX_VERSION: i16 = 12;

    /// `consume` on every topic of the request.
    fn authorize(access: &Access, request: &FetchRequest) -> Result<(), NotAuthorized> {
        each(
            access,
            Operation::Consume,
            request.topics.iter().map(|topic| topic.topic.as_str()),
        )
    }

    /// Every partition `TOPIC_AUTHORIZATION_FAILED`, with no records.
    fn refuse(_refusal: &AclRefusal<'_>, request: &FetchRequest) -> Option<ResponseBody> {
        let responses = request
            .topics
            .iter()
            .map(|topic| {
                FetchableTopicResponse::default()
                    .with_topic(topic.topic.clone())
                    .with_topic_id(topic.topic_id)
                    .with_partitions(
                        topic
                            .partitions
                            .iter()
                            .map(|partition| {
                                PartitionData::default()
                                    .with_partition_index(partition.partition)
                                    .with_error_code(TOPIC_REFUSED)
                                    .with_high_watermark(-1)
                            })
                            .collect(),
                    )
            })
            .collect();
        let body = FetchResponse::default().with_responses(responses);
        Some(ResponseBody::Fetch(body, None, RecordParts::default()))
    }

    fn start(call: Call<'_>, request: FetchRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.session.fetch_memory.clone(),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// Longest a Kafka fetch may wait for data.
pub const MAX_FETCH_WAIT: Duration = Duration::from_secs(30);
/// Most bytes one Kafka fetch answer carries (beyond the first batch, always returned whole).
pub const MAX_FETCH_BYTES: usize = 64 * 1024 * 1024;

/// Kafka's `isolation_level` of a read_committed consumer.
pub const READ_COMMITTED: i8 = 1;

/// One partition asked for.
struct Wanted {
    topic: usize,
    partition: i32,
    offset: i64,
    max_bytes: usize,
    /// The leader epoch the client's metadata showed (-1: unchecked).
    current_leader_epoch: i32,
}

/// Answers a fetch, waiting up to `max_wait_ms` when nothing is there yet.
pub async fn handle(
    service: Arc<BrokerService>,
    fetch_memory: Option<FetchMemory>,
    correlation_id: i32,
    version: i16,
    request: FetchRequest,
) -> KafkaResponse {
    let max_wait = Duration::from_millis(request.max_wait_ms.max(0) as u64).min(MAX_FETCH_WAIT);
    let max_bytes = usize::try_from(request.max_bytes)
        .unwrap_or(0)
        .clamp(1, MAX_FETCH_BYTES);
    let names: Vec<_> = request
        .topics
        .iter()
        .map(|topic| topic.topic.clone())
        .collect();
    let wanted: Vec<Wanted> = request
        .topics
        .iter()
        .enumerate()
        .flat_map(|(topic, fetch_topic)| {
            fetch_topic.partitions.iter().map(move |partition| Wanted {
                topic,
                partition: partition.partition,
                offset: partition.fetch_offset,
                max_bytes: usize::try_from(partition.partition_max_bytes).unwrap_or(0),
                current_leader_epoch: partition.current_leader_epoch,
            })
        })
        .collect();
    let committed = request.isolation_level == READ_COMMITTED;
    let read_all = || {
        budgeted_read_all(
            &service,
            fetch_memory.as_ref(),
            &names,
            &wanted,
            max_bytes,
            committed,
        )
    };
    let ((mut answers, mut parts), mut held) = read_all().await;
    let min_bytes = usize::try_from(request.min_bytes)
        .unwrap_or(0)
        .clamp(1, max_bytes);
    if records_bytes(&answers, &parts) < min_bytes && !max_wait.is_zero() && !wanted.is_empty() {
        drop(held);
        wait_for_bytes(&service, &names, &wanted, min_bytes, max_wait).await;
        ((answers, parts), held) = read_all().await;
    }
    if let Some(held) = held.as_mut() {
        held.shrink_to(records_bytes(&answers, &parts));
    }
    let mut topics: Vec<FetchableTopicResponse> = names
        .iter()
        .map(|name| FetchableTopicResponse::default().with_topic(name.clone()))
        .collect();
    for (want, answer) in wanted.iter().zip(answers) {
        topics[want.topic].partitions.push(answer);
    }
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::Fetch,
        api_version: version,
        body: ResponseBody::Fetch(
            FetchResponse::default()
                .with_session_id(0)
                .with_responses(topics),
            held,
            parts,
        ),
    }
}

/// Bytes of records in the answers.
fn records_bytes(answers: &[PartitionData], parts: &RecordParts) -> usize {
    answers
        .iter()
        .filter_map(|answer| answer.records.as_ref())
        .map(|records| records.len())
        .sum::<usize>()
        + parts.bytes()
}

/// The largest share of the memory budget one fetch reserves, as a divisor of the budget: a
/// consumer asking for more than a quarter of it reads a quarter, so one fetch never waits on
/// its own request frame's share, nor starves every other connection's frames.
pub const FETCH_SHARE_OF_BUDGET_DIVISOR: usize = 4;

/// [`read_all`] within a share of the memory budget, reserved first (`max_bytes`, at most
/// [`FETCH_SHARE_OF_BUDGET_DIVISOR`]th of the budget); without a share in time, the offsets
/// alone.
async fn budgeted_read_all(
    service: &BrokerService,
    fetch_memory: Option<&FetchMemory>,
    names: &[kafka_protocol::messages::TopicName],
    wanted: &[Wanted],
    max_bytes: usize,
    committed: bool,
) -> ((Vec<PartitionData>, RecordParts), Option<Reservation>) {
    let Some(memory) = fetch_memory else {
        return (read_all(service, names, wanted, max_bytes, committed), None);
    };
    let share = max_bytes.min(memory.budget.total() / FETCH_SHARE_OF_BUDGET_DIVISOR);
    match memory.budget.reserve(share, memory.wait).await {
        Ok(reservation) => (
            read_all(service, names, wanted, share, committed),
            Some(reservation),
        ),
        Err(error) => {
            tracing::warn!(%error, "Kafka fetch answered without records: memory budget exhausted");
            (
                (offsets_only(service, names, wanted), RecordParts::default()),
                None,
            )
        }
    }
}

/// Every wanted partition's offsets, without records.
fn offsets_only(
    service: &BrokerService,
    names: &[kafka_protocol::messages::TopicName],
    wanted: &[Wanted],
) -> Vec<PartitionData> {
    wanted
        .iter()
        .map(|want| {
            let answer = PartitionData::default()
                .with_partition_index(want.partition)
                .with_preferred_read_replica(kafka_protocol::messages::BrokerId(-1))
                .with_aborted_transactions(Some(Vec::new()))
                .with_records(Some(Default::default()));
            let offsets = u32::try_from(want.partition).map_or(NO_OFFSETS, |partition| {
                current_offsets(service, &names[want.topic].0, partition)
            });
            with_offsets(answer, offsets)
        })
        .collect()
}

/// Reads every wanted partition once, without waiting, within the byte budget. A partition
/// whose records are several buffers (stored Kafka batches served as they are stored, between
/// converted ones) has them in the [`RecordParts`], its `records` empty.
fn read_all(
    service: &BrokerService,
    names: &[kafka_protocol::messages::TopicName],
    wanted: &[Wanted],
    max_bytes: usize,
    committed: bool,
) -> (Vec<PartitionData>, RecordParts) {
    let mut budget = max_bytes;
    let mut first_with_data = true;
    let mut split = RecordParts::default();
    let answers = wanted
        .iter()
        .enumerate()
        .map(|(index, want)| {
            let answer = PartitionData::default()
                .with_partition_index(want.partition)
                .with_preferred_read_replica(kafka_protocol::messages::BrokerId(-1))
                .with_aborted_transactions(Some(Vec::new()));
            let (Ok(partition), Ok(offset)) =
                (u32::try_from(want.partition), u64::try_from(want.offset))
            else {
                return with_offsets(answer, NO_OFFSETS)
                    .with_error_code(ResponseError::OffsetOutOfRange.code())
                    .with_records(Some(Default::default()));
            };
            let topic = names[want.topic].0.to_string();
            if let Err(error) =
                super::leader_epoch::check(service, &topic, partition, want.current_leader_epoch)
            {
                return with_offsets(answer, current_offsets(service, &topic, partition))
                    .with_error_code(error.code())
                    .with_records(Some(Default::default()));
            }
            let limit = want.max_bytes.min(budget);
            if limit == 0 && !first_with_data {
                return with_offsets(answer, current_offsets(service, &topic, partition))
                    .with_records(Some(Default::default()));
            }
            let read = service.reads().read_now(Read {
                topic: topic.clone(),
                partition,
                offset,
                max_bytes: limit.max(1),
                max_wait: Duration::ZERO,
            });
            let read = read.and_then(|mut read| {
                let last_stable = service.reads().last_stable_offset(&topic, partition)?;
                let mut aborted = Vec::new();
                if committed {
                    read.batches = batches_below(std::mem::take(&mut read.batches), last_stable);
                    if !read.batches.is_empty() {
                        aborted = service
                            .reads().aborted_transactions(&topic, partition, offset, last_stable)?
                            .into_iter()
                            .map(|aborted| {
                                AbortedTransaction::default()
                                    .with_producer_id(ProducerId(aborted.producer_id))
                                    .with_first_offset(aborted.first_offset as i64)
                            })
                            .collect();
                    }
                }
                Ok((read, last_stable, aborted))
            });
            match read {
                Ok((read, last_stable, aborted)) => {
                    let mut parts = Vec::new();
                    if let Err(error) = to_kafka_parts(&read.batches, &mut parts) {
                        tracing::error!(%topic, partition, %error, "stored batches could not be served as Kafka batches");
                        return answer
                            .with_error_code(ResponseError::CorruptMessage.code())
                            .with_records(Some(Default::default()));
                    }
                    let bytes: usize = parts.iter().map(Bytes::len).sum();
                    if bytes > 0 {
                        first_with_data = false;
                        budget = budget.saturating_sub(bytes);
                    }
                    let records = match parts.len() {
                        0 => Bytes::new(),
                        1 => parts.pop().expect("one part"),
                        _ => {
                            split.insert(index, parts);
                            Bytes::new()
                        }
                    };
                    let offsets = Offsets {
                        log_start: read.log_start_offset as i64,
                        high_watermark: read.high_watermark as i64,
                        last_stable: last_stable.min(read.high_watermark) as i64,
                    };
                    with_offsets(answer, offsets)
                        .with_aborted_transactions(Some(aborted))
                        .with_records(Some(records))
                }
                Err(error) => {
                    with_offsets(answer, current_offsets(service, &topic, partition))
                        .with_error_code(kafka_error(&error).code())
                        .with_records(Some(Default::default()))
                }
            }
        })
        .collect();
    (answers, split)
}

/// The offsets an answer carries.
#[derive(Debug, Clone, Copy)]
struct Offsets {
    log_start: i64,
    high_watermark: i64,
    last_stable: i64,
}

/// The offsets of a partition that does not exist.
const NO_OFFSETS: Offsets = Offsets {
    log_start: -1,
    high_watermark: -1,
    last_stable: -1,
};

/// A partition's offsets now, or -1s if it does not exist.
fn current_offsets(service: &BrokerService, topic: &str, partition: u32) -> Offsets {
    let Ok(offsets) = service.reads().list_offsets(topic, partition) else {
        return NO_OFFSETS;
    };
    let last_stable = service
        .reads()
        .last_stable_offset(topic, partition)
        .map_or(offsets.latest, |last_stable| {
            last_stable.min(offsets.latest)
        });
    Offsets {
        log_start: offsets.earliest as i64,
        high_watermark: offsets.latest as i64,
        last_stable: last_stable as i64,
    }
}

/// The answer with its offsets.
fn with_offsets(answer: PartitionData, offsets: Offsets) -> PartitionData {
    answer
        .with_high_watermark(offsets.high_watermark)
        .with_last_stable_offset(offsets.last_stable)
        .with_log_start_offset(offsets.log_start)
}

/// Waits until the wanted partitions hold at least `min_bytes` of stored batches past their
/// fetch offsets, one of them cannot be read (the answer then carries its error at once), the
/// server shuts down, or `max_wait` passes. Counts stored bytes, which the reads return without
/// copying; the converted answer is read once, after the wait.
async fn wait_for_bytes(
    service: &Arc<BrokerService>,
    names: &[kafka_protocol::messages::TopicName],
    wanted: &[Wanted],
    min_bytes: usize,
    max_wait: Duration,
) {
    let mut partitions = Vec::with_capacity(wanted.len());
    for want in wanted {
        let (Ok(partition), Ok(offset)) =
            (u32::try_from(want.partition), u64::try_from(want.offset))
        else {
            return;
        };
        let topic = names[want.topic].0.as_str();
        partitions.push((topic, partition, offset, want.max_bytes.max(1)));
    }
    service
        .reads()
        .wait_for_bytes(&partitions, min_bytes, max_wait)
        .await;
}
