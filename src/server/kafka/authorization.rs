//! ACL checks on the Kafka listener, before a request reaches its handler: the same
//! [`Access`] (principal, operation, topic) the native listener asks, with Kafka's error codes.
//!
//! Choices a Kafka client can observe:
//! - A request is checked whole before anything runs: if any topic in it is refused, every
//!   topic-partition of the request is answered `TOPIC_AUTHORIZATION_FAILED` (29) and nothing is
//!   appended, read or committed. (Kafka's broker answers per partition and runs the allowed
//!   ones; all-or-nothing is simpler to reason about and a client handles it the same way.)
//! - Group APIs without a topic (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//!   ConsumerGroupDescribe) need `consume` on some topic; ConsumerGroupHeartbeat also needs
//!   `consume` on every topic it subscribes to (Kafka's DESCRIBE on the topics); else `GROUP_AUTHORIZATION_FAILED` (30); InitProducerId needs
//!   `produce` on some topic, else `CLUSTER_AUTHORIZATION_FAILED` (31), as Kafka's
//!   IdempotentWrite check answers. The transaction APIs: AddPartitionsToTxn needs `produce` on
//!   each topic (`TOPIC_AUTHORIZATION_FAILED`), EndTxn and AddOffsetsToTxn `produce` on some
//!   topic, TxnOffsetCommit that and `consume` on each topic whose position it commits
//!   (`TRANSACTIONAL_ID_AUTHORIZATION_FAILED` / `TOPIC_AUTHORIZATION_FAILED`); fencelog has no
//!   transactional-id ACLs, so DescribeTransactions and ListTransactions need authentication
//!   only.
//! - An `acks=0` produce that is refused closes the connection (there is no response to carry
//!   the error; Kafka does the same).
//! - The config APIs (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs) are checked per
//!   resource in their handlers: describing a topic needs some operation on it, altering it
//!   `admin` on it (`TOPIC_AUTHORIZATION_FAILED`); a broker resource needs `admin` somewhere
//!   (`CLUSTER_AUTHORIZATION_FAILED`). The other resources of the request still run.
//!   CreatePartitions likewise, per topic in its handler: growing a topic needs `admin` on it
//!   (Kafka's ALTER).
//! - DescribeLogDirs, DescribeProducers and the ACL APIs are checked by their handlers:
//!   DescribeLogDirs needs `admin` on some topic (`CLUSTER_AUTHORIZATION_FAILED`),
//!   DescribeProducers `consume` on each topic (`TOPIC_AUTHORIZATION_FAILED` for its
//!   partitions), DescribeAcls `admin` on some topic and CreateAcls/DeleteAcls a super user
//!   ([`acl_api_security`]); without `--auth` the ACL APIs answer `SECURITY_DISABLED`.
//! - Metadata of all topics leaves out the topics the principal may not see (no operation on
//!   them); named topics it may not see are answered `TOPIC_AUTHORIZATION_FAILED`.

use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, ApiKey, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatResponse,
    CreateTopicsResponse, DeleteGroupsResponse, DeleteRecordsResponse, DeleteTopicsResponse,
    DescribeGroupsResponse, EndTxnResponse, FetchResponse, FindCoordinatorResponse,
    HeartbeatResponse, InitProducerIdResponse, JoinGroupResponse, LeaveGroupResponse,
    ListGroupsResponse, ListOffsetsResponse, MetadataRequest, OffsetCommitResponse,
    OffsetDeleteResponse, OffsetFetchResponse, OffsetForLeaderEpochResponse, ProduceResponse,
    ProducerId, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::handlers::{add_partitions_to_txn, txn_offset_commit};
use super::request::RequestBody;
use super::response::{KafkaResponse, ResponseBody};
use crate::auth::{Access, NotAuthorized, Operation, Security};
use crate::server::protocol::Started;

const TOPIC_REFUSED: i16 = 29;
/// A name only a grant on every topic (`*`) matches: what deleting a topic by id needs.
const ANY_TOPIC: &str = "*";

/// The refusal of a request the connection may not make, or `None` to let it run.
pub fn refuse(
    access: &Access,
    correlation_id: i32,
    version: i16,
    body: &RequestBody,
) -> Option<Started<KafkaResponse>> {
    access.principal()?;
    let refused = check(access, body).err()?;
    tracing::info!(%refused, "Kafka request refused by ACL");
    let message = Some(StrBytes::from_string(refused.to_string()));
    let group_refused = ResponseError::GroupAuthorizationFailed.code();
    let (api_key, body) = match body {
        RequestBody::Produce(request) => {
            if request.acks == 0 {
                return Some(Started {
                    response: None,
                    close: true,
                });
            }
            let responses = request
                .topic_data
                .iter()
                .map(|topic| {
                    TopicProduceResponse::default()
                        .with_name(topic.name.clone())
                        .with_partition_responses(
                            topic
                                .partition_data
                                .iter()
                                .map(|partition| {
                                    PartitionProduceResponse::default()
                                        .with_index(partition.index)
                                        .with_error_code(TOPIC_REFUSED)
                                        .with_base_offset(-1)
                                        .with_error_message(message.clone())
                                })
                                .collect(),
                        )
                })
                .collect();
            let body = ProduceResponse::default().with_responses(responses);
            (ApiKey::Produce, ResponseBody::Produce(body))
        }
        RequestBody::Fetch(request) => {
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
            (
                ApiKey::Fetch,
                ResponseBody::Fetch(body, None, Default::default()),
            )
        }
        RequestBody::ListOffsets(request) => {
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
            let body = ListOffsetsResponse::default().with_topics(topics);
            (ApiKey::ListOffsets, ResponseBody::ListOffsets(body))
        }
        RequestBody::OffsetForLeaderEpoch(request) => {
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
            let body = OffsetForLeaderEpochResponse::default().with_topics(topics);
            (
                ApiKey::OffsetForLeaderEpoch,
                ResponseBody::OffsetForLeaderEpoch(body),
            )
        }
        RequestBody::CreateTopics(request) => {
            let topics = request
                .topics
                .iter()
                .map(|topic| {
                    CreatableTopicResult::default()
                        .with_name(topic.name.clone())
                        .with_error_code(TOPIC_REFUSED)
                        .with_error_message(message.clone())
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                })
                .collect();
            let body = CreateTopicsResponse::default().with_topics(topics);
            (ApiKey::CreateTopics, ResponseBody::CreateTopics(body))
        }
        RequestBody::OffsetCommit(request) => {
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
            let body = OffsetCommitResponse::default().with_topics(topics);
            (ApiKey::OffsetCommit, ResponseBody::OffsetCommit(body))
        }
        RequestBody::OffsetFetch(request) => {
            let code = if access.check_somewhere(Operation::Consume).is_err() {
                group_refused
            } else {
                TOPIC_REFUSED
            };
            let body = if version >= 8 {
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
            } else if version >= 2 {
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
            (ApiKey::OffsetFetch, ResponseBody::OffsetFetch(body))
        }
        RequestBody::InitProducerId(_) => {
            let body = InitProducerIdResponse::default()
                .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            (ApiKey::InitProducerId, ResponseBody::InitProducerId(body))
        }
        RequestBody::DeleteTopics(request) => {
            let named = request.topic_names.iter().map(|name| {
                DeletableTopicResult::default()
                    .with_name(Some(name.clone()))
                    .with_error_code(TOPIC_REFUSED)
            });
            let by_state = request.topics.iter().map(|topic| {
                DeletableTopicResult::default()
                    .with_name(topic.name.clone())
                    .with_topic_id(topic.topic_id)
                    .with_error_code(TOPIC_REFUSED)
                    .with_error_message(message.clone())
            });
            let body =
                DeleteTopicsResponse::default().with_responses(named.chain(by_state).collect());
            (ApiKey::DeleteTopics, ResponseBody::DeleteTopics(body))
        }
        RequestBody::DeleteRecords(request) => {
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
            let body = DeleteRecordsResponse::default().with_topics(topics);
            (ApiKey::DeleteRecords, ResponseBody::DeleteRecords(body))
        }
        RequestBody::DescribeGroups(request) => {
            let groups = request
                .groups
                .iter()
                .map(|group| {
                    DescribedGroup::default()
                        .with_group_id(group.clone())
                        .with_error_code(group_refused)
                })
                .collect();
            let body = DescribeGroupsResponse::default().with_groups(groups);
            (ApiKey::DescribeGroups, ResponseBody::DescribeGroups(body))
        }
        RequestBody::ListGroups(_) => {
            let body = ListGroupsResponse::default().with_error_code(group_refused);
            (ApiKey::ListGroups, ResponseBody::ListGroups(body))
        }
        RequestBody::FindCoordinator(_) => {
            let body = FindCoordinatorResponse::default()
                .with_error_code(group_refused)
                .with_error_message(message.clone());
            (ApiKey::FindCoordinator, ResponseBody::FindCoordinator(body))
        }
        RequestBody::JoinGroup(_) => {
            let body = JoinGroupResponse::default().with_error_code(group_refused);
            (ApiKey::JoinGroup, ResponseBody::JoinGroup(body))
        }
        RequestBody::SyncGroup(_) => {
            let body = SyncGroupResponse::default().with_error_code(group_refused);
            (ApiKey::SyncGroup, ResponseBody::SyncGroup(body))
        }
        RequestBody::Heartbeat(_) => {
            let body = HeartbeatResponse::default().with_error_code(group_refused);
            (ApiKey::Heartbeat, ResponseBody::Heartbeat(body))
        }
        RequestBody::LeaveGroup(_) => {
            let body = LeaveGroupResponse::default().with_error_code(group_refused);
            (ApiKey::LeaveGroup, ResponseBody::LeaveGroup(body))
        }
        RequestBody::ConsumerGroupHeartbeat(_) => {
            let code = match access.check_somewhere(Operation::Consume) {
                Err(_) => group_refused,
                Ok(()) => TOPIC_REFUSED,
            };
            let body = ConsumerGroupHeartbeatResponse::default()
                .with_error_code(code)
                .with_error_message(message.clone());
            (
                ApiKey::ConsumerGroupHeartbeat,
                ResponseBody::ConsumerGroupHeartbeat(body),
            )
        }
        RequestBody::ConsumerGroupDescribe(request) => {
            let groups = request
                .group_ids
                .iter()
                .map(|group| {
                    kafka_protocol::messages::consumer_group_describe_response::DescribedGroup::default()
                        .with_group_id(group.clone())
                        .with_error_code(group_refused)
                        .with_error_message(message.clone())
                })
                .collect();
            let body = ConsumerGroupDescribeResponse::default().with_groups(groups);
            (
                ApiKey::ConsumerGroupDescribe,
                ResponseBody::ConsumerGroupDescribe(body),
            )
        }
        RequestBody::DeleteGroups(request) => {
            let results = request
                .groups_names
                .iter()
                .map(|group| {
                    DeletableGroupResult::default()
                        .with_group_id(group.clone())
                        .with_error_code(group_refused)
                })
                .collect();
            let body = DeleteGroupsResponse::default().with_results(results);
            (ApiKey::DeleteGroups, ResponseBody::DeleteGroups(body))
        }
        RequestBody::OffsetDelete(_) => {
            let code = if access.check_somewhere(Operation::Admin).is_err() {
                group_refused
            } else {
                TOPIC_REFUSED
            };
            let body = OffsetDeleteResponse::default().with_error_code(code);
            (ApiKey::OffsetDelete, ResponseBody::OffsetDelete(body))
        }
        RequestBody::EndTxn(_) => {
            let body = EndTxnResponse::default()
                .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            (ApiKey::EndTxn, ResponseBody::EndTxn(body))
        }
        RequestBody::AddOffsetsToTxn(_) => {
            let body = AddOffsetsToTxnResponse::default()
                .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
            (ApiKey::AddOffsetsToTxn, ResponseBody::AddOffsetsToTxn(body))
        }
        RequestBody::AddPartitionsToTxn(request) => (
            ApiKey::AddPartitionsToTxn,
            ResponseBody::AddPartitionsToTxn(add_partitions_to_txn::refused(
                request,
                TOPIC_REFUSED,
            )),
        ),
        RequestBody::TxnOffsetCommit(request) => (
            ApiKey::TxnOffsetCommit,
            ResponseBody::TxnOffsetCommit(txn_offset_commit::answered(request, TOPIC_REFUSED)),
        ),
        // `check` lets these through; a refusal cannot reach here.
        RequestBody::ApiVersions(_)
        | RequestBody::DescribeCluster(_)
        | RequestBody::ListTransactions(_)
        | RequestBody::DescribeTransactions(_)
        | RequestBody::Metadata(_)
        | RequestBody::DescribeConfigs(_)
        | RequestBody::DescribeLogDirs(_)
        | RequestBody::DescribeProducers(_)
        | RequestBody::DescribeAcls(_)
        | RequestBody::CreateAcls(_)
        | RequestBody::DeleteAcls(_)
        | RequestBody::AlterConfigs(_)
        | RequestBody::IncrementalAlterConfigs(_)
        | RequestBody::CreatePartitions(_)
        | RequestBody::SaslHandshake(_)
        | RequestBody::SaslAuthenticate(_) => return None,
    };
    Some(Started::ready(KafkaResponse {
        correlation_id,
        api_key,
        api_version: version,
        body,
    }))
}

/// Checks every topic of a request (all must pass), or the operation on some topic for the
/// requests that name none.
fn check(access: &Access, body: &RequestBody) -> Result<(), NotAuthorized> {
    let each = |operation: Operation, topics: &mut dyn Iterator<Item = &str>| {
        for topic in topics {
            access.check(operation, topic)?;
        }
        Ok(())
    };
    match body {
        // The config APIs are checked per resource by their handlers.
        RequestBody::ApiVersions(_)
        | RequestBody::DescribeCluster(_)
        | RequestBody::ListTransactions(_)
        | RequestBody::DescribeTransactions(_)
        | RequestBody::Metadata(_)
        | RequestBody::DescribeConfigs(_)
        | RequestBody::DescribeLogDirs(_)
        | RequestBody::DescribeProducers(_)
        | RequestBody::DescribeAcls(_)
        | RequestBody::CreateAcls(_)
        | RequestBody::DeleteAcls(_)
        | RequestBody::AlterConfigs(_)
        | RequestBody::IncrementalAlterConfigs(_)
        | RequestBody::CreatePartitions(_)
        | RequestBody::SaslHandshake(_)
        | RequestBody::SaslAuthenticate(_) => Ok(()),
        RequestBody::Produce(request) => each(
            Operation::Produce,
            &mut request.topic_data.iter().map(|topic| topic.name.as_str()),
        ),
        RequestBody::Fetch(request) => each(
            Operation::Consume,
            &mut request.topics.iter().map(|topic| topic.topic.as_str()),
        ),
        RequestBody::ListOffsets(request) => each(
            Operation::Consume,
            &mut request.topics.iter().map(|topic| topic.name.as_str()),
        ),
        RequestBody::OffsetForLeaderEpoch(request) => each(
            Operation::Consume,
            &mut request.topics.iter().map(|topic| topic.topic.as_str()),
        ),
        RequestBody::CreateTopics(request) => each(
            Operation::Create,
            &mut request.topics.iter().map(|topic| topic.name.as_str()),
        ),
        RequestBody::OffsetCommit(request) => {
            access.check_somewhere(Operation::Consume)?;
            each(
                Operation::Consume,
                &mut request.topics.iter().map(|topic| topic.name.as_str()),
            )
        }
        RequestBody::OffsetFetch(request) => {
            access.check_somewhere(Operation::Consume)?;
            each(
                Operation::Consume,
                &mut request
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
        RequestBody::InitProducerId(_)
        | RequestBody::EndTxn(_)
        | RequestBody::AddOffsetsToTxn(_) => access.check_somewhere(Operation::Produce),
        RequestBody::AddPartitionsToTxn(request) => each(
            Operation::Produce,
            &mut request
                .v3_and_below_topics
                .iter()
                .chain(
                    request
                        .transactions
                        .iter()
                        .flat_map(|txn| txn.topics.iter()),
                )
                .map(|topic| topic.name.as_str()),
        ),
        RequestBody::TxnOffsetCommit(request) => {
            access.check_somewhere(Operation::Produce)?;
            each(
                Operation::Consume,
                &mut request.topics.iter().map(|topic| topic.name.as_str()),
            )
        }
        RequestBody::DeleteTopics(request) => {
            each(
                Operation::Admin,
                &mut request.topic_names.iter().map(|name| name.as_str()),
            )?;
            for topic in &request.topics {
                match &topic.name {
                    Some(name) => access.check_delete_topic(name)?,
                    // A topic named by id only (v6): which topic it is is not known before the
                    // handler resolves it, so only `admin` on every topic may delete by id.
                    None => access.check_delete_topic(ANY_TOPIC)?,
                }
            }
            Ok(())
        }
        // Kafka asks DELETE on the topic; fencelog's `admin` on it is what deletes a topic too.
        RequestBody::DeleteRecords(request) => each(
            Operation::Admin,
            &mut request.topics.iter().map(|topic| topic.name.as_str()),
        ),
        RequestBody::DescribeGroups(_) | RequestBody::ListGroups(_) => {
            access.check_somewhere(Operation::Consume)
        }
        // Kafka asks DELETE on the group; fencelog has no group ACLs, so deleting a group (or
        // its offsets) is an admin's: `admin` on some topic, and `consume` on each topic whose
        // offsets go.
        RequestBody::DeleteGroups(_) => access.check_somewhere(Operation::Admin),
        RequestBody::OffsetDelete(request) => {
            access.check_somewhere(Operation::Admin)?;
            each(
                Operation::Consume,
                &mut request.topics.iter().map(|topic| topic.name.as_str()),
            )
        }
        RequestBody::ConsumerGroupHeartbeat(request) => {
            access.check_somewhere(Operation::Consume)?;
            each(
                Operation::Consume,
                &mut request
                    .subscribed_topic_names
                    .iter()
                    .flatten()
                    .map(|topic| topic.as_str()),
            )
        }
        RequestBody::FindCoordinator(_)
        | RequestBody::ConsumerGroupDescribe(_)
        | RequestBody::JoinGroup(_)
        | RequestBody::SyncGroup(_)
        | RequestBody::Heartbeat(_)
        | RequestBody::LeaveGroup(_) => access.check_somewhere(Operation::Consume),
    }
}

/// What an ACL API may use: the server's [`Security`], or the error code and message to
/// answer with. Without `--auth` there are no ACLs (`SECURITY_DISABLED`). Describing them needs
/// `admin` on some topic (Kafka: DESCRIBE on the cluster); changing them needs a super user
/// (Kafka: ALTER on the cluster), because a grant can give any right on any topic: a principal
/// allowed to change ACLs can give itself everything, so only one that has everything may.
pub fn acl_api_security(
    access: &Access,
    change: bool,
) -> Result<std::sync::Arc<Security>, (i16, String)> {
    let Some(security) = access.security() else {
        return Err((
            ResponseError::SecurityDisabled.code(),
            "this server runs without --auth, so it has no ACLs: start it with `serve --auth` (and users) to use them".to_owned(),
        ));
    };
    let checked = if change {
        access.check_super_user("the ACLs")
    } else {
        access.check_somewhere(Operation::Admin)
    };
    if let Err(refused) = checked {
        tracing::info!(%refused, "Kafka ACL request refused");
        return Err((
            ResponseError::ClusterAuthorizationFailed.code(),
            refused.to_string(),
        ));
    }
    Ok(std::sync::Arc::clone(security))
}

/// Whether a Metadata request asks for every topic.
pub fn lists_all_topics(request: &MetadataRequest) -> bool {
    request.topics.as_ref().is_none_or(Vec::is_empty)
}

/// Leaves out of (all topics) or refuses in (named topics) a Metadata answer the topics the
/// connection may not see.
pub fn filter_metadata(
    access: &Access,
    all_topics: bool,
    mut response: KafkaResponse,
) -> KafkaResponse {
    if access.principal().is_none() {
        return response;
    }
    if let ResponseBody::Metadata(body) = &mut response.body {
        let visible = |name: Option<&str>| name.is_none_or(|name| access.may_see(name));
        if all_topics {
            body.topics
                .retain(|topic| visible(topic.name.as_ref().map(|name| name.as_str())));
        } else {
            for topic in &mut body.topics {
                if !visible(topic.name.as_ref().map(|name| name.as_str())) {
                    topic.error_code = TOPIC_REFUSED;
                    topic.partitions.clear();
                }
            }
        }
    }
    response
}
