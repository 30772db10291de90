//! OffsetFetch (key 9), v1..=9: a group's committed positions, from the committed-offset store
//! both listeners share (what `fencelog consume --group G` committed is read here too).
//!
//! What a client sees:
//! - A partition the group never committed is offset -1 with empty metadata and no error.
//! - A partition that does not exist is `UNKNOWN_TOPIC_OR_PARTITION` (3), offset -1.
//! - Null topics (v2+) ask for every partition the group committed.
//! - A group-level failure (an invalid group id: `INVALID_GROUP_ID`, 24; a damaged store file:
//!   `CORRUPT_MESSAGE`, 2) is the response's error code from v2 (the group's from v8) and each
//!   requested partition's (v1 has no response-level code).
//! - The leader epoch (v5+) is -1 (unknown). With `require_stable` (v7+; a read_committed
//!   consumer sets it), a partition whose position an unfinished transaction will commit
//!   (TxnOffsetCommit, not yet committed or aborted) is `UNSTABLE_OFFSET_COMMIT` (88,
//!   retriable), as Kafka answers: the consumer retries rather than resume from the position
//!   before that transaction and process its input twice.
//! - v8 asks for several groups at once; each is answered on its own.
//! - v9 carries the member id and epoch of a consumer-protocol (KIP-848) member: for such a
//!   group they are checked as for a commit (`UNKNOWN_MEMBER_ID`, 25; `STALE_MEMBER_EPOCH`,
//!   113; `FENCED_MEMBER_EPOCH`, 110, as the group's error, no topics). A null member id (an
//!   admin) is not checked; neither is any member id of a classic group.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{ApiKey, OffsetFetchRequest, OffsetFetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::authorization::{each, group_refused, TOPIC_REFUSED};
use super::super::errors::{consumer_group_error, kafka_error};
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::{BrokerService, CommittedOffset};
use crate::server::protocol::Started;

/// OffsetFetch as the listener serves it.
pub struct OffsetFetch;

impl KafkaApi for OffsetFetch {
    type Request = OffsetFetchRequest;
    const KEY: ApiKey = ApiKey::OffsetFetch;
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 9;

    /// `consume` on some topic (the group) and on every topic it names (v0..=7's topics and
    /// v8+'s groups' topics).
    fn authorize(access: &Access, request: &OffsetFetchRequest) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Consume)?;
        each(
            access,
            Operation::Consume,
            request
                .topics
                .iter()
                .flatten()
                .map(|topic| topic.name.as_str())
                .chain(
                    request
                        .groups
                        .iter()
                        .flat_map(|group| group.topics.iter().flatten())
                        .map(|topic| topic.name.as_str()),
                ),
        )
    }

    /// `GROUP_AUTHORIZATION_FAILED` without `consume` anywhere, else
    /// `TOPIC_AUTHORIZATION_FAILED`: per group (v8+), for the request (v2..=7) or per
    /// partition (v1, which has no top-level error).
    fn refuse(refusal: &AclRefusal<'_>, request: &OffsetFetchRequest) -> Option<ResponseBody> {
        let code = if refusal.access.check_somewhere(Operation::Consume).is_err() {
            group_refused()
        } else {
            TOPIC_REFUSED
        };
        let body = if refusal.version >= 8 {
            let groups = request
                .groups
                .iter()
                .map(|group| {
                    OffsetFetchResponseGroup::default()
                        .with_group_id(group.group_id.clone())
                        .with_error_code(code)
                })
                .collect();
            OffsetFetchResponse::default().with_groups(groups)
        } else if refusal.version >= 2 {
            OffsetFetchResponse::default().with_error_code(code)
        } else {
            let topics = request
                .topics
                .iter()
                .flatten()
                .map(|topic| {
                    OffsetFetchResponseTopic::default()
                        .with_name(topic.name.clone())
                        .with_partitions(
                            topic
                                .partition_indexes
                                .iter()
                                .map(|index| {
                                    OffsetFetchResponsePartition::default()
                                        .with_partition_index(*index)
                                        .with_committed_offset(-1)
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect();
            OffsetFetchResponse::default().with_topics(topics)
        };
        Some(ResponseBody::message(body))
    }

    fn start(call: Call<'_>, request: OffsetFetchRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// One partition's answer.
struct PartitionAnswer {
    partition_index: i32,
    offset: i64,
    metadata: String,
    error_code: i16,
}

/// One group's answer: its error code and its partitions by topic, in order.
struct GroupAnswer {
    error_code: i16,
    topics: Vec<(TopicName, Vec<PartitionAnswer>)>,
}

/// The answer to an OffsetFetch request (from memory; on a cluster each group's coordinator
/// may first load the group's offsets partition, or answer `NOT_COORDINATOR`).
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: OffsetFetchRequest,
) -> KafkaResponse {
    let service = service.as_ref();
    let body = if version >= 8 {
        let mut groups = Vec::with_capacity(request.groups.len());
        for group in &request.groups {
            let topics = group.topics.as_ref().map(|topics| {
                topics
                    .iter()
                    .map(|topic| (topic.name.clone(), topic.partition_indexes.clone()))
                    .collect()
            });
            let member = group.member_id.as_ref().filter(|id| !id.is_empty());
            let refused = member.and_then(|member_id| {
                service.groups().consumer_groups().check_offsets(
                    group.group_id.0.as_str(),
                    member_id.as_str(),
                    group.member_epoch,
                    None,
                    std::time::Instant::now(),
                )
            });
            let answer = match refused {
                Some(Err(error)) => GroupAnswer {
                    error_code: consumer_group_error(&error).code(),
                    topics: Vec::new(),
                },
                _ => {
                    fetch_group(
                        service,
                        group.group_id.0.as_str(),
                        topics,
                        request.require_stable,
                    )
                    .await
                }
            };
            groups.push(
                OffsetFetchResponseGroup::default()
                    .with_group_id(group.group_id.clone())
                    .with_error_code(answer.error_code)
                    .with_topics(topics_v8(answer.topics)),
            );
        }
        OffsetFetchResponse::default().with_groups(groups)
    } else {
        let topics = request.topics.as_ref().map(|topics| {
            topics
                .iter()
                .map(|topic| (topic.name.clone(), topic.partition_indexes.clone()))
                .collect()
        });
        let answer = fetch_group(
            service,
            request.group_id.0.as_str(),
            topics,
            version >= 7 && request.require_stable,
        )
        .await;
        let response = OffsetFetchResponse::default().with_topics(topics_v1(answer.topics));
        match version {
            1 => response,
            _ => response.with_error_code(answer.error_code),
        }
    };
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::OffsetFetch,
        api_version: version,
        body: ResponseBody::message(body),
    }
}

/// The group's committed offsets for `topics` (every committed partition when `None`).
async fn fetch_group(
    service: &BrokerService,
    group: &str,
    topics: Option<Vec<(TopicName, Vec<i32>)>>,
    require_stable: bool,
) -> GroupAnswer {
    let (error_code, committed) = match service.groups().committed_offsets(group).await {
        Ok(committed) => (0, committed.into_iter().collect::<HashMap<_, _>>()),
        Err(error) => (kafka_error(&error).code(), HashMap::new()),
    };
    let topics = match topics {
        Some(topics) => topics,
        None => {
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for (topic, partition) in committed.keys() {
                let index = i32::try_from(*partition).unwrap_or(i32::MAX);
                by_topic.entry(topic.as_str()).or_default().push(index);
            }
            by_topic
                .into_iter()
                .map(|(topic, mut partitions)| {
                    partitions.sort_unstable();
                    let name = TopicName(StrBytes::from_string(topic.to_string()));
                    (name, partitions)
                })
                .collect()
        }
    };
    let topics = topics
        .into_iter()
        .map(|(name, partitions)| {
            let answers = partitions
                .into_iter()
                .map(|index| match error_code {
                    0 if require_stable && unstable(service, group, name.0.as_str(), index) => {
                        not_found(index, ResponseError::UnstableOffsetCommit.code())
                    }
                    0 => partition_answer(service, &committed, name.0.as_str(), index),
                    code => not_found(index, code),
                })
                .collect();
            (name, answers)
        })
        .collect();
    GroupAnswer { error_code, topics }
}

/// Whether an unfinished transaction will commit `group`'s position on the partition.
fn unstable(service: &BrokerService, group: &str, topic: &str, partition: i32) -> bool {
    service
        .transactions()
        .has_pending_offset(group, topic, partition)
}

fn partition_answer(
    service: &BrokerService,
    committed: &HashMap<(String, u32), CommittedOffset>,
    topic: &str,
    partition_index: i32,
) -> PartitionAnswer {
    let unknown = || {
        not_found(
            partition_index,
            ResponseError::UnknownTopicOrPartition.code(),
        )
    };
    let Ok(partition) = u32::try_from(partition_index) else {
        return unknown();
    };
    if !service.groups().partition_exists(topic, partition) {
        return unknown();
    }
    match committed.get(&(topic.to_string(), partition)) {
        Some(offset) => PartitionAnswer {
            partition_index,
            offset: i64::try_from(offset.offset).unwrap_or(i64::MAX),
            metadata: offset.metadata.clone(),
            error_code: 0,
        },
        None => not_found(partition_index, 0),
    }
}

fn not_found(partition_index: i32, error_code: i16) -> PartitionAnswer {
    PartitionAnswer {
        partition_index,
        offset: -1,
        metadata: String::new(),
        error_code,
    }
}

fn topics_v1(topics: Vec<(TopicName, Vec<PartitionAnswer>)>) -> Vec<OffsetFetchResponseTopic> {
    topics
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|answer| {
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(answer.partition_index)
                        .with_committed_offset(answer.offset)
                        .with_metadata(Some(StrBytes::from_string(answer.metadata)))
                        .with_error_code(answer.error_code)
                })
                .collect();
            OffsetFetchResponseTopic::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect()
}

fn topics_v8(topics: Vec<(TopicName, Vec<PartitionAnswer>)>) -> Vec<OffsetFetchResponseTopics> {
    topics
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|answer| {
                    OffsetFetchResponsePartitions::default()
                        .with_partition_index(answer.partition_index)
                        .with_committed_offset(answer.offset)
                        .with_metadata(Some(StrBytes::from_string(answer.metadata)))
                        .with_error_code(answer.error_code)
                })
                .collect();
            OffsetFetchResponseTopics::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect()
}
