//! The Kafka listener's admin and KIP-848 APIs, each in every version it advertises, spoken
//! with requests encoded by `kafka-protocol`'s client-side encoder: DescribeLogDirs,
//! DescribeProducers, the ACL APIs without `--auth`, ConsumerGroupHeartbeat and
//! ConsumerGroupDescribe, and CreatePartitions.

use crate::support::kafka;

use fencelog::server::kafka::versions::supported;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, OffsetCommitRequest,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::kafka_protocol::{
    assert_still_serving, kafka_batch, kafka_server, name, produce_request, topic_with_records,
};
use kafka::KafkaConnection;

/// DescribeLogDirs in every advertised version (1..=4): one log directory, the data directory
/// as an absolute path, with each partition's bytes of log data (a partition with records has
/// some, an empty one none), offset lag 0, not a future replica; v4 adds the filesystem's total
/// and usable bytes. A topics filter keeps the named partitions; an unknown topic is left out.
#[tokio::test]
async fn describe_log_dirs_reports_the_data_directory_and_partition_sizes_in_every_version() {
    use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
    use kafka_protocol::messages::DescribeLogDirsRequest;
    let server = kafka_server().await;
    topic_with_records(&server, "sized", 2, &["one", "two", "three"]).await;
    let expected_dir = std::path::absolute(server.data_dir()).unwrap();
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 1..=4i16 {
        let response = connection
            .call(
                version,
                &DescribeLogDirsRequest::default().with_topics(None),
            )
            .await;
        assert_eq!(response.error_code, 0, "v{version}");
        assert_eq!(response.results.len(), 1, "v{version}");
        let dir = &response.results[0];
        assert_eq!(dir.error_code, 0);
        assert_eq!(dir.log_dir.as_str(), expected_dir.display().to_string());
        let topic = dir
            .topics
            .iter()
            .find(|topic| topic.name.0.as_str() == "sized")
            .expect("the topic is listed");
        let sizes: Vec<(i32, i64, i64, bool)> = topic
            .partitions
            .iter()
            .map(|p| {
                (
                    p.partition_index,
                    p.partition_size,
                    p.offset_lag,
                    p.is_future_key,
                )
            })
            .collect();
        assert_eq!(sizes.len(), 2, "v{version}");
        assert!(sizes[0].1 > 0, "v{version}: {sizes:?}");
        assert_eq!(sizes[1], (1, 0, 0, false), "v{version}");
        assert_eq!((sizes[0].2, sizes[0].3), (0, false));
        if version >= 4 {
            assert!(dir.total_bytes > 0 && dir.usable_bytes >= 0, "{dir:?}");
            assert!(dir.usable_bytes <= dir.total_bytes);
        }
        let filtered = DescribeLogDirsRequest::default().with_topics(Some(vec![
            DescribableLogDirTopic::default()
                .with_topic(name("sized"))
                .with_partitions(vec![1]),
            DescribableLogDirTopic::default()
                .with_topic(name("missing"))
                .with_partitions(vec![0]),
        ]));
        let response = connection.call(version, &filtered).await;
        let topics = &response.results[0].topics;
        assert_eq!(topics.len(), 1, "v{version}");
        assert_eq!(topics[0].partitions.len(), 1);
        assert_eq!(topics[0].partitions[0].partition_index, 1);
    }
}

/// DescribeProducers in its one advertised version (0): a partition lists the idempotent
/// producer that wrote it (its id, producer epoch 0, the last sequence of its batch; no
/// timestamp, coordinator epoch or transaction: -1), a partition nobody wrote idempotently
/// lists none, and an unknown partition is UNKNOWN_TOPIC_OR_PARTITION.
#[tokio::test]
async fn describe_producers_lists_a_partitions_idempotent_producers() {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::{
        DescribeProducersRequest, InitProducerIdRequest, ProduceRequest,
    };
    let server = kafka_server().await;
    topic_with_records(&server, "producers", 2, &[]).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let init = connection
        .call::<InitProducerIdRequest>(4, &InitProducerIdRequest::default())
        .await;
    let values = ["a".to_string(), "b".to_string(), "c".to_string()];
    let batch = kafka_batch(&values, Some((init.producer_id.0, 0)));
    let response = connection
        .call::<ProduceRequest>(9, &produce_request("producers", batch))
        .await;
    assert_eq!(response.responses[0].partition_responses[0].error_code, 0);
    let request = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(name("producers"))
        .with_partition_indexes(vec![0, 1, 7])]);
    let response = connection.call(0, &request).await;
    let partitions = &response.topics[0].partitions;
    assert_eq!(partitions.len(), 3);
    assert_eq!(partitions[0].error_code, 0);
    let producers: Vec<(i64, i32, i32, i64, i32, i64)> = partitions[0]
        .active_producers
        .iter()
        .map(|p| {
            (
                p.producer_id.0,
                p.producer_epoch,
                p.last_sequence,
                p.last_timestamp,
                p.coordinator_epoch,
                p.current_txn_start_offset,
            )
        })
        .collect();
    assert_eq!(producers, vec![(init.producer_id.0, 0, 2, -1, -1, -1)]);
    assert_eq!(partitions[1].error_code, 0);
    assert!(partitions[1].active_producers.is_empty());
    assert_eq!(partitions[2].error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION");
}

/// DescribeAcls, CreateAcls and DeleteAcls in every advertised version (1..=3) on a server
/// without `--auth`: SECURITY_DISABLED (54) with a message saying how to turn ACLs on, for the
/// request (describe) or each binding and filter (create, delete); nothing is written.
#[tokio::test]
async fn acl_apis_answer_security_disabled_without_auth_in_every_version() {
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
    use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 1..=3i16 {
        let describe = DescribeAclsRequest::default()
            .with_resource_type_filter(1)
            .with_pattern_type_filter(1)
            .with_operation(1)
            .with_permission_type(1);
        let response = connection.call(version, &describe).await;
        assert_eq!(response.error_code, 54, "v{version}");
        let message = response.error_message.expect("a message");
        assert!(message.contains("--auth"), "{message}");
        let creation = AclCreation::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("orders"))
            .with_resource_pattern_type(3)
            .with_principal(StrBytes::from_static_str("User:alice"))
            .with_host(StrBytes::from_static_str("*"))
            .with_operation(3)
            .with_permission_type(3);
        let response = connection
            .call(
                version,
                &CreateAclsRequest::default().with_creations(vec![creation.clone(), creation]),
            )
            .await;
        let codes: Vec<i16> = response.results.iter().map(|r| r.error_code).collect();
        assert_eq!(codes, vec![54, 54], "v{version}");
        let filter = DeleteAclsFilter::default()
            .with_resource_type_filter(1)
            .with_pattern_type_filter(1)
            .with_operation(1)
            .with_permission_type(1);
        let response = connection
            .call(
                version,
                &DeleteAclsRequest::default().with_filters(vec![filter]),
            )
            .await;
        assert_eq!(response.filter_results.len(), 1);
        assert_eq!(response.filter_results[0].error_code, 54, "v{version}");
    }
    assert!(!server.data_dir().join("acls.json").exists());
    assert_still_serving(&server).await;
}

fn group_id(id: &str) -> kafka_protocol::messages::GroupId {
    kafka_protocol::messages::GroupId(StrBytes::from_string(id.to_string()))
}

fn consumer_join(member_id: &str, topic: &str) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(group_id("raw-848"))
        .with_member_id(StrBytes::from_string(member_id.to_string()))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_string(
            topic.to_string(),
        ))]))
        .with_topic_partitions(Some(Vec::<TopicPartitions>::new()))
}

/// Proves, in every advertised version of ConsumerGroupHeartbeat and ConsumerGroupDescribe:
/// a member joins and gets every partition (topics by id) in epoch 1, the group describes as
/// `Stable` with that member, a stale commit (an older epoch) is `STALE_MEMBER_EPOCH`, the
/// member leaves with epoch -1, and an unknown assignor is `UNSUPPORTED_ASSIGNOR`; a classic
/// JoinGroup cannot take a consumer-protocol group's id; ListGroups lists the group as a
/// `consumer` group, DescribeGroups and DeleteGroups refuse it.
#[tokio::test]
async fn heartbeat_and_describe_work_in_every_version() {
    let server = kafka_server().await;
    topic_with_records(&server, "raw-848", 2, &[]).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let heartbeat = supported(ApiKey::ConsumerGroupHeartbeat).expect("advertised");
    let describe = supported(ApiKey::ConsumerGroupDescribe).expect("advertised");
    assert_eq!(supported(ApiKey::OffsetCommit).unwrap().max_version, 9);
    assert_eq!(supported(ApiKey::OffsetFetch).unwrap().max_version, 9);
    for version in heartbeat.min_version..=heartbeat.max_version {
        let member = format!("member-v{version}");
        let joined = connection
            .call(version, &consumer_join(&member, "raw-848"))
            .await;
        assert_eq!(joined.error_code, 0, "v{version}: {joined:?}");
        assert!(joined.member_epoch >= 1, "v{version}: {joined:?}");
        assert!(joined.heartbeat_interval_ms > 0);
        let assignment = joined.assignment.expect("an assignment on join");
        assert_eq!(assignment.topic_partitions.len(), 1);
        assert_eq!(assignment.topic_partitions[0].partitions, vec![0, 1]);
        for describe_version in describe.min_version..=describe.max_version {
            let described = connection
                .call(
                    describe_version,
                    &ConsumerGroupDescribeRequest::default()
                        .with_group_ids(vec![group_id("raw-848"), group_id("no-such-848")]),
                )
                .await;
            let found = &described.groups[0];
            assert_eq!(found.error_code, 0, "{found:?}");
            assert_eq!(found.group_state.as_str(), "Stable");
            assert_eq!(found.assignor_name.as_str(), "uniform");
            assert_eq!(found.members.len(), 1);
            assert_eq!(found.members[0].member_id.as_str(), member);
            assert_eq!(described.groups[1].error_code, 69, "GROUP_ID_NOT_FOUND");
        }
        let stale = OffsetCommitRequest::default()
            .with_group_id(group_id("raw-848"))
            .with_member_id(StrBytes::from_string(member.clone()))
            .with_generation_id_or_member_epoch(joined.member_epoch - 1)
            .with_topics(vec![
                kafka_protocol::messages::offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("raw-848")))
                    .with_partitions(vec![
                        kafka_protocol::messages::offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(0),
                    ]),
            ]);
        let refused = connection.call(9, &stale).await;
        assert_eq!(
            refused.topics[0].partitions[0].error_code, 113,
            "STALE_MEMBER_EPOCH"
        );
        let current = stale
            .clone()
            .with_generation_id_or_member_epoch(joined.member_epoch);
        let accepted = connection.call(9, &current).await;
        assert_eq!(accepted.topics[0].partitions[0].error_code, 0);
        // The admin APIs see a consumer-protocol group as one: ListGroups lists it with type
        // `consumer`, DescribeGroups (classic only) and DeleteGroups (it has members) refuse.
        let listed = connection
            .call(5, &kafka_protocol::messages::ListGroupsRequest::default())
            .await;
        let group = listed
            .groups
            .iter()
            .find(|group| group.group_id.0.as_str() == "raw-848")
            .expect("listed");
        assert_eq!(group.protocol_type.as_str(), "consumer");
        assert_eq!(group.group_type.as_str(), "consumer");
        assert_eq!(group.group_state.as_str(), "Stable");
        let described = connection
            .call(
                5,
                &kafka_protocol::messages::DescribeGroupsRequest::default()
                    .with_groups(vec![group_id("raw-848")]),
            )
            .await;
        assert_eq!(described.groups[0].error_code, 69, "GROUP_ID_NOT_FOUND");
        let deleted = connection
            .call(
                2,
                &kafka_protocol::messages::DeleteGroupsRequest::default()
                    .with_groups_names(vec![group_id("raw-848")]),
            )
            .await;
        assert_eq!(deleted.results[0].error_code, 68, "NON_EMPTY_GROUP");
        let classic = connection
            .call(
                5,
                &kafka_protocol::messages::JoinGroupRequest::default()
                    .with_group_id(group_id("raw-848"))
                    .with_session_timeout_ms(10_000)
                    .with_rebalance_timeout_ms(10_000)
                    .with_protocol_type(StrBytes::from_static_str("consumer"))
                    .with_protocols(vec![
                        kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol::default()
                            .with_name(StrBytes::from_static_str("range")),
                    ]),
            )
            .await;
        assert_eq!(classic.error_code, 23, "INCONSISTENT_GROUP_PROTOCOL");
        let leave = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(group_id("raw-848"))
            .with_member_id(StrBytes::from_string(member.clone()))
            .with_member_epoch(-1);
        let left = connection.call(version, &leave).await;
        assert_eq!((left.error_code, left.member_epoch), (0, -1), "{left:?}");
        let bad = consumer_join(&member, "raw-848")
            .with_server_assignor(Some(StrBytes::from_static_str("nonesuch")));
        let refused = connection.call(version, &bad).await;
        assert_eq!(refused.error_code, 112, "UNSUPPORTED_ASSIGNOR");
    }
}

/// CreatePartitions in every advertised version (0..=3): a topic grows to the total asked, at
/// once in the broker and durably; `validate_only` changes nothing; the same count, a smaller
/// one, and one above the per-topic limit are `INVALID_PARTITIONS` (37); an unknown topic is
/// `UNKNOWN_TOPIC_OR_PARTITION` (3); explicit assignments and a topic named twice are
/// `INVALID_REQUEST` (42, the duplicate answered once); each refusal carries a message.
#[tokio::test]
async fn create_partitions_grows_and_refuses_per_topic_in_every_version() {
    use kafka_protocol::messages::create_partitions_request::{
        CreatePartitionsAssignment, CreatePartitionsTopic,
    };
    use kafka_protocol::messages::{BrokerId, CreatePartitionsRequest};
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let grow = |topic: &str, count: i32| {
        CreatePartitionsTopic::default()
            .with_name(name(topic))
            .with_count(count)
    };
    for version in 0..=3i16 {
        let grown = format!("grown-{version}");
        let kept = format!("kept-{version}");
        let assigned = format!("assigned-{version}");
        for topic in [&grown, &kept, &assigned] {
            topic_with_records(&server, topic, 3, &[]).await;
        }
        let request = CreatePartitionsRequest::default()
            .with_timeout_ms(1_000)
            .with_topics(vec![
                grow(&grown, 6),
                grow(&kept, 3),
                grow(&format!("{kept}-x"), 2),
                grow(&assigned, 4).with_assignments(Some(vec![
                    CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(0)]),
                ])),
                grow("twice", 2),
                grow("twice", 3),
            ]);
        let response = connection.call(version, &request).await;
        let names: Vec<&str> = response.results.iter().map(|r| r.name.0.as_str()).collect();
        let codes: Vec<i16> = response.results.iter().map(|r| r.error_code).collect();
        assert_eq!(
            names,
            [
                grown.as_str(),
                kept.as_str(),
                &format!("{kept}-x"),
                assigned.as_str(),
                "twice",
            ],
            "v{version}: one result per name"
        );
        assert_eq!(codes, [0, 37, 3, 42, 42], "v{version}");
        for refused in &response.results[1..] {
            assert!(
                refused.error_message.is_some(),
                "v{version}: a message says why"
            );
        }
        assert_eq!(server.broker().topic(&grown).unwrap().partitions().len(), 6);
        assert_eq!(server.broker().topic(&kept).unwrap().partitions().len(), 3);
        assert_eq!(
            server.broker().topic(&assigned).unwrap().partitions().len(),
            3
        );

        // Shrinking and a count above the limit are refused; validate_only changes nothing.
        let refused = CreatePartitionsRequest::default().with_topics(vec![grow(&grown, 4)]);
        let response = connection.call(version, &refused).await;
        assert_eq!(response.results[0].error_code, 37, "v{version}: shrink");
        let above = CreatePartitionsRequest::default().with_topics(vec![grow(&grown, 10_001)]);
        let response = connection.call(version, &above).await;
        assert_eq!(response.results[0].error_code, 37, "v{version}: limit");
        let dry = CreatePartitionsRequest::default()
            .with_validate_only(true)
            .with_topics(vec![grow(&kept, 5)]);
        let response = connection.call(version, &dry).await;
        assert_eq!(response.results[0].error_code, 0, "v{version}");
        assert_eq!(
            server.broker().topic(&kept).unwrap().partitions().len(),
            3,
            "validate_only grew nothing"
        );
    }
    assert_still_serving(&server).await;
}
