//! Consumer groups through the Kafka listener: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, OffsetCommit and OffsetFetch spoken with `kafka-protocol`'s client-side encoder in
//! every advertised version; a group of two members (then three, then two) at the protocol
//! level; committed offsets shared with the native listener and `fencelog consume --group`;
//! and kafka-python's `KafkaConsumer` splitting a topic between two members and resuming from
//! the committed offsets (skipped, with a note, without python3 or kafka-python).

use crate::support::kafka::{self, kafka_server_with_quick_groups};

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use fencelog::batch::BatchBuilder;
use fencelog::broker::{BrokerConfig, CoordinatorConfig};
use fencelog::client::Client;
use fencelog::domain::TopicConfig;
use fencelog::server::KafkaConfig;
use fencelog::testing::TestServer;
use kafka::KafkaConnection;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::join_group_response::JoinGroupResponse;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiVersionsRequest, DescribeGroupsRequest, FindCoordinatorRequest, GroupId, HeartbeatRequest,
    JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

/// A session timeout within the coordinator's default bounds (6 s to 30 min).
const SESSION_MS: i32 = 10_000;
/// Kafka error codes the tests expect.
const NONE: i16 = 0;
const OFFSET_OUT_OF_RANGE: i16 = 1;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const ILLEGAL_GENERATION: i16 = 22;
const INVALID_GROUP_ID: i16 = 24;
const UNKNOWN_MEMBER_ID: i16 = 25;
const INVALID_SESSION_TIMEOUT: i16 = 26;
const REBALANCE_IN_PROGRESS: i16 = 27;
const MEMBER_ID_REQUIRED: i16 = 79;

/// Creates `topic` and appends `records` records (`record-N`) to each partition natively.
async fn topic_with_records(server: &TestServer, topic: &str, partitions: u32, records: u32) {
    let client = Client::connect(server.addr()).await.expect("connect");
    client
        .create_topic(topic, partitions, TopicConfig::default())
        .await
        .expect("create topic");
    for partition in 0..partitions {
        append(&client, topic, partition, 0..records).await;
    }
}

async fn append(client: &Client, topic: &str, partition: u32, range: std::ops::Range<u32>) {
    if range.is_empty() {
        return;
    }
    let lease = client
        .acquire_lease(topic, partition, "writer", Duration::from_secs(30))
        .await
        .expect("lease");
    let mut builder = BatchBuilder::new(lease.epoch);
    for index in range {
        let value = format!("record-{index}");
        builder.push(1_000, None, Some(value.as_bytes()));
    }
    client
        .produce(topic, partition, builder.finish())
        .await
        .expect("produce");
    client
        .release_lease(topic, partition, lease.lease_id)
        .await
        .expect("release");
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

fn group(id: &str) -> GroupId {
    GroupId(text(id))
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(text(topic))
}

fn join_request(group_id: &str, member_id: &str, metadata: &'static [u8]) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(group(group_id))
        .with_session_timeout_ms(SESSION_MS)
        .with_rebalance_timeout_ms(5_000)
        .with_member_id(text(member_id))
        .with_protocol_type(text("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(text("range"))
            .with_metadata(Bytes::from_static(metadata))])
}

/// Joins as a new member the way a client of `version` does: from v4 the first join is answered
/// MEMBER_ID_REQUIRED with the id to join with.
async fn join_new(
    connection: &mut KafkaConnection,
    version: i16,
    group_id: &str,
    metadata: &'static [u8],
) -> JoinGroupResponse {
    let mut member_id = String::new();
    if version >= 4 {
        let first = connection
            .call(version, &join_request(group_id, "", metadata))
            .await;
        assert_eq!(first.error_code, MEMBER_ID_REQUIRED, "v{version}");
        assert!(
            !first.member_id.is_empty(),
            "v{version}: an id to join with"
        );
        assert_eq!(first.generation_id, -1);
        member_id = first.member_id.to_string();
    }
    let joined = connection
        .call(version, &join_request(group_id, &member_id, metadata))
        .await;
    assert_eq!(joined.error_code, NONE, "v{version}");
    if version >= 4 {
        assert_eq!(joined.member_id.as_str(), member_id);
    }
    joined
}

fn sync_request(
    group_id: &str,
    joined: &JoinGroupResponse,
    assignments: Vec<(&str, &'static [u8])>,
) -> SyncGroupRequest {
    SyncGroupRequest::default()
        .with_group_id(group(group_id))
        .with_generation_id(joined.generation_id)
        .with_member_id(joined.member_id.clone())
        .with_protocol_type(Some(text("consumer")))
        .with_protocol_name(Some(text("range")))
        .with_assignments(
            assignments
                .into_iter()
                .map(|(member, assignment)| {
                    SyncGroupRequestAssignment::default()
                        .with_member_id(text(member))
                        .with_assignment(Bytes::from_static(assignment))
                })
                .collect(),
        )
}

fn heartbeat_request(group_id: &str, joined: &JoinGroupResponse) -> HeartbeatRequest {
    HeartbeatRequest::default()
        .with_group_id(group(group_id))
        .with_generation_id(joined.generation_id)
        .with_member_id(joined.member_id.clone())
}

/// A LeaveGroup of `member_id` in the request form of `version` (one member before v3, a list
/// from v3).
fn leave_request(version: i16, group_id: &str, member_id: &str) -> LeaveGroupRequest {
    let request = LeaveGroupRequest::default().with_group_id(group(group_id));
    match version {
        0..=2 => request.with_member_id(text(member_id)),
        _ => request.with_members(vec![
            MemberIdentity::default().with_member_id(text(member_id))
        ]),
    }
}

fn commit_request(
    group_id: &str,
    generation_id: i32,
    member_id: &str,
    offsets: &[(&str, i32, i64)],
) -> OffsetCommitRequest {
    let topics = offsets
        .iter()
        .map(|(topic, partition, offset)| {
            OffsetCommitRequestTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(*partition)
                    .with_committed_offset(*offset)
                    .with_committed_metadata(Some(text("note")))])
        })
        .collect();
    OffsetCommitRequest::default()
        .with_group_id(group(group_id))
        .with_generation_id_or_member_epoch(generation_id)
        .with_member_id(text(member_id))
        .with_topics(topics)
}

/// Every partition's error code of a commit answer, in order.
fn commit_codes(response: &OffsetCommitResponse) -> Vec<i16> {
    response
        .topics
        .iter()
        .flat_map(|topic| {
            topic
                .partitions
                .iter()
                .map(|partition| partition.error_code)
        })
        .collect()
}

/// `(topic, partition, offset, metadata, error)` of an OffsetFetch answer of any version.
async fn fetch_offsets(
    connection: &mut KafkaConnection,
    version: i16,
    group_id: &str,
    topics: Option<&[(&str, &[i32])]>,
) -> (i16, Vec<(String, i32, i64, String, i16)>) {
    if version >= 8 {
        let topics = topics.map(|topics| {
            topics
                .iter()
                .map(|(topic, partitions)| {
                    OffsetFetchRequestTopics::default()
                        .with_name(topic_name(topic))
                        .with_partition_indexes(partitions.to_vec())
                })
                .collect()
        });
        let request =
            OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
                .with_group_id(group(group_id))
                .with_topics(topics)]);
        let response = connection.call(version, &request).await;
        assert_eq!(response.groups.len(), 1);
        let answer = &response.groups[0];
        assert_eq!(answer.group_id.0.as_str(), group_id);
        let rows = answer
            .topics
            .iter()
            .flat_map(|topic| {
                topic.partitions.iter().map(|partition| {
                    (
                        topic.name.0.to_string(),
                        partition.partition_index,
                        partition.committed_offset,
                        partition.metadata.as_deref().unwrap_or("").to_string(),
                        partition.error_code,
                    )
                })
            })
            .collect();
        return (answer.error_code, rows);
    }
    let topics = topics.map(|topics| {
        topics
            .iter()
            .map(|(topic, partitions)| {
                OffsetFetchRequestTopic::default()
                    .with_name(topic_name(topic))
                    .with_partition_indexes(partitions.to_vec())
            })
            .collect()
    });
    let request = OffsetFetchRequest::default()
        .with_group_id(group(group_id))
        .with_topics(topics);
    let response = connection.call(version, &request).await;
    let rows = response
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(|partition| {
                (
                    topic.name.0.to_string(),
                    partition.partition_index,
                    partition.committed_offset,
                    partition.metadata.as_deref().unwrap_or("").to_string(),
                    partition.error_code,
                )
            })
        })
        .collect();
    (response.error_code, rows)
}

/// ApiVersions lists the group APIs with exactly the versions implemented.
#[tokio::test]
async fn api_versions_advertises_the_group_apis() {
    let server = kafka_server_with_quick_groups().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let response = connection.call(3, &ApiVersionsRequest::default()).await;
    let table: Vec<(i16, i16, i16)> = response
        .api_keys
        .iter()
        .map(|api| (api.api_key, api.min_version, api.max_version))
        .filter(|(key, _, _)| (8..=14).contains(key))
        .collect();
    assert_eq!(
        table,
        vec![
            (8, 2, 9),
            (9, 1, 9),
            (10, 0, 3),
            (11, 0, 9),
            (12, 0, 4),
            (13, 0, 5),
            (14, 0, 5)
        ]
    );
}

/// FindCoordinator in every version names this broker at its advertised address for a group;
/// a transactional id too (a standalone broker is its own transaction coordinator), an unknown
/// key type INVALID_REQUEST.
#[tokio::test]
async fn find_coordinator_names_this_broker_in_every_version() {
    let server = kafka_server_with_quick_groups().await;
    let kafka = server.kafka_addr();
    let mut connection = KafkaConnection::connect(kafka).await;
    for version in 0..=3 {
        let request = FindCoordinatorRequest::default().with_key(text("orders-app"));
        let response = connection.call(version, &request).await;
        assert_eq!(response.error_code, NONE, "v{version}");
        assert_eq!(response.node_id.0, 0);
        assert_eq!(response.host.as_str(), kafka.ip().to_string());
        assert_eq!(response.port, i32::from(kafka.port()));
        if version >= 1 {
            let transactional = FindCoordinatorRequest::default()
                .with_key(text("tx-1"))
                .with_key_type(1);
            let response = connection.call(version, &transactional).await;
            assert_eq!(
                response.error_code, NONE,
                "v{version}: the transaction coordinator"
            );
            assert_eq!(response.node_id.0, 0);
            assert_eq!(response.port, i32::from(kafka.port()));
            let unknown = FindCoordinatorRequest::default()
                .with_key(text("x"))
                .with_key_type(7);
            let response = connection.call(version, &unknown).await;
            assert_eq!(response.error_code, 42, "v{version}: INVALID_REQUEST");
        }
    }
}

/// Every version of JoinGroup (with the MEMBER_ID_REQUIRED dance from v4), SyncGroup, Heartbeat
/// and LeaveGroup, one single-member group per JoinGroup version: the member leads generation 1,
/// sees its own metadata, gets back the assignment it gave itself, heartbeats, and leaves; after
/// leaving its heartbeat is UNKNOWN_MEMBER_ID.
#[tokio::test]
async fn a_single_member_group_works_in_every_version() {
    let server = kafka_server_with_quick_groups().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 0..=9i16 {
        let group_id = format!("solo-v{version}");
        let joined = join_new(&mut connection, version, &group_id, b"subscription").await;
        assert_eq!(joined.generation_id, 1, "v{version}");
        assert_eq!(joined.leader, joined.member_id, "v{version}");
        assert_eq!(joined.protocol_name.as_deref(), Some("range"), "v{version}");
        if version >= 7 {
            assert_eq!(joined.protocol_type.as_deref(), Some("consumer"));
        }
        assert_eq!(joined.members.len(), 1);
        assert_eq!(joined.members[0].member_id, joined.member_id);
        assert_eq!(&joined.members[0].metadata[..], b"subscription");
        assert!(!joined.skip_assignment);

        let sync_version = version.min(5);
        let member = joined.member_id.to_string();
        let synced = connection
            .call(
                sync_version,
                &sync_request(&group_id, &joined, vec![(&member, b"partition-0")]),
            )
            .await;
        assert_eq!(synced.error_code, NONE, "SyncGroup v{sync_version}");
        assert_eq!(&synced.assignment[..], b"partition-0");
        if sync_version >= 5 {
            assert_eq!(synced.protocol_name.as_deref(), Some("range"));
        }

        let heartbeat_version = version.min(4);
        let beat = connection
            .call(heartbeat_version, &heartbeat_request(&group_id, &joined))
            .await;
        assert_eq!(beat.error_code, NONE, "Heartbeat v{heartbeat_version}");
        let stale = heartbeat_request(&group_id, &joined).with_generation_id(7);
        let beat = connection.call(heartbeat_version, &stale).await;
        assert_eq!(beat.error_code, ILLEGAL_GENERATION);

        let leave_version = version.min(5);
        let left = connection
            .call(
                leave_version,
                &leave_request(leave_version, &group_id, &member),
            )
            .await;
        assert_eq!(left.error_code, NONE, "LeaveGroup v{leave_version}");
        if leave_version >= 3 {
            assert_eq!(left.members.len(), 1);
            assert_eq!(left.members[0].member_id.as_str(), member);
            assert_eq!(left.members[0].error_code, NONE);
        }
        let left_again = connection
            .call(
                leave_version,
                &leave_request(leave_version, &group_id, &member),
            )
            .await;
        let code = match leave_version {
            0..=2 => left_again.error_code,
            _ => left_again.members[0].error_code,
        };
        assert_eq!(code, UNKNOWN_MEMBER_ID, "LeaveGroup v{leave_version}");
        let beat = connection
            .call(heartbeat_version, &heartbeat_request(&group_id, &joined))
            .await;
        assert_eq!(beat.error_code, UNKNOWN_MEMBER_ID);
    }
}

/// Refusals of JoinGroup carry their Kafka codes: a session timeout outside the bounds, an empty
/// group id, a rejoin with an id the coordinator never gave.
#[tokio::test]
async fn join_group_refusals_have_their_codes() {
    let server = kafka_server_with_quick_groups().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let short = join_request("g", "", b"m").with_session_timeout_ms(100);
    let response = connection.call(5, &short).await;
    assert_eq!(response.error_code, INVALID_SESSION_TIMEOUT);
    assert_eq!(response.generation_id, -1);
    let response = connection.call(9, &join_request("", "", b"m")).await;
    assert_eq!(response.error_code, INVALID_GROUP_ID);
    assert_eq!(response.protocol_name, None, "null from v7");
    let response = connection
        .call(2, &join_request("g", "made-up", b"m"))
        .await;
    assert_eq!(response.error_code, UNKNOWN_MEMBER_ID);
    assert_eq!(
        response.protocol_name.as_deref(),
        Some(""),
        "empty before v7"
    );
}

/// A group of two members at the protocol level: they join one generation, the follower's
/// sync waits for the leader's assignment and gets its part; heartbeats pass; a third member's
/// join makes the others' heartbeats answer REBALANCE_IN_PROGRESS, they rejoin and generation 2
/// has three members; when the third leaves the other two rebalance into generation 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_share_a_group_and_rebalance_when_a_third_comes_and_goes() {
    let server = kafka_server_with_quick_groups().await;
    let kafka = server.kafka_addr();
    let group_id = "pair";
    let mut a = KafkaConnection::connect(kafka).await;
    let mut b = KafkaConnection::connect(kafka).await;
    let (joined_a, joined_b) = tokio::join!(
        join_new(&mut a, 7, group_id, b"meta-a"),
        join_new(&mut b, 3, group_id, b"meta-b"),
    );
    assert_eq!(joined_a.generation_id, 1);
    assert_eq!(joined_b.generation_id, 1);
    assert_eq!(joined_a.leader, joined_b.leader);
    let (leader, mut leader_connection, follower, mut follower_connection) =
        if joined_a.leader == joined_a.member_id {
            (joined_a, a, joined_b, b)
        } else {
            (joined_b, b, joined_a, a)
        };
    let mut metadata: Vec<(String, Vec<u8>)> = leader
        .members
        .iter()
        .map(|member| (member.member_id.to_string(), member.metadata.to_vec()))
        .collect();
    metadata.sort();
    assert_eq!(metadata.len(), 2, "the leader sees both members");
    assert!(follower.members.is_empty(), "followers see no members");

    // The follower syncs first: its answer waits for the leader's assignment.
    let follower_sync = follower_connection
        .send(3, &sync_request(group_id, &follower, Vec::new()))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let leader_id = leader.member_id.to_string();
    let follower_id = follower.member_id.to_string();
    let assignments = vec![
        (leader_id.as_str(), &b"p0"[..]),
        (follower_id.as_str(), &b"p1"[..]),
    ];
    let synced = leader_connection
        .call(5, &sync_request(group_id, &leader, assignments))
        .await;
    assert_eq!(synced.error_code, NONE);
    assert_eq!(&synced.assignment[..], b"p0");
    let synced = follower_connection
        .receive::<SyncGroupRequest>(follower_sync, 3)
        .await;
    assert_eq!(synced.error_code, NONE);
    assert_eq!(&synced.assignment[..], b"p1");
    for (connection, joined) in [
        (&mut leader_connection, &leader),
        (&mut follower_connection, &follower),
    ] {
        let beat = connection
            .call(4, &heartbeat_request(group_id, joined))
            .await;
        assert_eq!(beat.error_code, NONE);
    }

    // A third member: its join waits for the others to rejoin, which they learn by heartbeat.
    let mut c = KafkaConnection::connect(kafka).await;
    let first = c.call(9, &join_request(group_id, "", b"meta-c")).await;
    assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
    let third_join = c
        .send(9, &join_request(group_id, &first.member_id, b"meta-c"))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    for (connection, joined) in [
        (&mut leader_connection, &leader),
        (&mut follower_connection, &follower),
    ] {
        let beat = connection
            .call(2, &heartbeat_request(group_id, joined))
            .await;
        assert_eq!(beat.error_code, REBALANCE_IN_PROGRESS);
    }
    let rejoin = |joined: &JoinGroupResponse, meta: &'static [u8]| {
        join_request(group_id, joined.member_id.as_str(), meta)
    };
    let (leader_rejoin, follower_rejoin) =
        (rejoin(&leader, b"meta-a"), rejoin(&follower, b"meta-b"));
    let (leader2, follower2, third) = tokio::join!(
        leader_connection.call(7, &leader_rejoin),
        follower_connection.call(3, &follower_rejoin),
        c.receive::<JoinGroupRequest>(third_join, 9),
    );
    for joined in [&leader2, &follower2, &third] {
        assert_eq!(joined.error_code, NONE);
        assert_eq!(joined.generation_id, 2);
        assert_eq!(
            joined.leader, leader.member_id,
            "the leader stays the leader"
        );
    }
    assert_eq!(leader2.members.len(), 3);
    let third_id = third.member_id.to_string();
    let leader_sync = sync_request(
        group_id,
        &leader2,
        vec![
            (leader_id.as_str(), &b"p0"[..]),
            (third_id.as_str(), &b"p1"[..]),
        ],
    );
    let follower_sync = sync_request(group_id, &follower2, Vec::new());
    let third_sync = sync_request(group_id, &third, Vec::new());
    let (synced_leader, synced_follower, synced_third) = tokio::join!(
        leader_connection.call(5, &leader_sync),
        follower_connection.call(3, &follower_sync),
        c.call(5, &third_sync),
    );
    assert_eq!(&synced_leader.assignment[..], b"p0");
    assert_eq!(
        &synced_follower.assignment[..],
        b"",
        "nothing for the follower now"
    );
    assert_eq!(&synced_third.assignment[..], b"p1");

    // The third leaves: the others rebalance into generation 3.
    let left = c
        .call(5, &leave_request(5, group_id, third.member_id.as_str()))
        .await;
    assert_eq!(left.members[0].error_code, NONE);
    let beat = leader_connection
        .call(4, &heartbeat_request(group_id, &leader2))
        .await;
    assert_eq!(beat.error_code, REBALANCE_IN_PROGRESS);
    let (leader_rejoin, follower_rejoin) =
        (rejoin(&leader2, b"meta-a"), rejoin(&follower2, b"meta-b"));
    let (leader3, follower3) = tokio::join!(
        leader_connection.call(7, &leader_rejoin),
        follower_connection.call(3, &follower_rejoin),
    );
    assert_eq!(leader3.generation_id, 3);
    assert_eq!(follower3.generation_id, 3);
    assert_eq!(leader3.members.len(), 2);
}

/// OffsetCommit in every version (a consumer outside any group) and OffsetFetch in every
/// version read the same store: a committed offset and its metadata, -1 where nothing was
/// committed, UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist,
/// an offset past the high watermark accepted (as Kafka does), OFFSET_OUT_OF_RANGE for a negative
/// one, OFFSET_METADATA_TOO_LARGE for that
/// partition only; null topics (v2+) list everything
/// the group committed; v8 answers several groups in one request.
#[tokio::test]
async fn offsets_commit_and_fetch_in_every_version() {
    let server = kafka_server_with_quick_groups().await;
    topic_with_records(&server, "orders", 2, 3).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 2..=9i16 {
        let group_id = format!("simple-v{version}");
        let request = commit_request(
            &group_id,
            -1,
            "",
            &[
                ("orders", 0, 2),
                ("orders", 1, 4),
                ("orders", 7, 1),
                ("missing", 0, 1),
                ("orders", 1, -5),
            ],
        );
        let response = connection.call(version, &request).await;
        assert_eq!(
            commit_codes(&response),
            vec![
                NONE,
                NONE, // past the high watermark: accepted, as Kafka does
                UNKNOWN_TOPIC_OR_PARTITION,
                UNKNOWN_TOPIC_OR_PARTITION,
                OFFSET_OUT_OF_RANGE
            ],
            "OffsetCommit v{version}"
        );
    }
    // Metadata over the limit refuses only its own partition.
    let mut request = commit_request("simple-v2", -1, "", &[("orders", 0, 2), ("orders", 1, 1)]);
    request.topics[1].partitions[0].committed_metadata = Some(text(&"x".repeat(4097)));
    let response = connection.call(8, &request).await;
    assert_eq!(
        commit_codes(&response),
        vec![NONE, 12],
        "OFFSET_METADATA_TOO_LARGE"
    );
    for version in 1..=9i16 {
        let group_id = format!("simple-v{}", version.max(2));
        let asked: &[(&str, &[i32])] = &[("orders", &[0, 1, 9]), ("missing", &[0])];
        let (error, rows) = fetch_offsets(&mut connection, version, &group_id, Some(asked)).await;
        assert_eq!(error, NONE, "OffsetFetch v{version}");
        assert_eq!(
            rows,
            vec![
                ("orders".into(), 0, 2, "note".into(), NONE),
                ("orders".into(), 1, 4, "note".into(), NONE),
                (
                    "orders".into(),
                    9,
                    -1,
                    "".into(),
                    UNKNOWN_TOPIC_OR_PARTITION
                ),
                (
                    "missing".into(),
                    0,
                    -1,
                    "".into(),
                    UNKNOWN_TOPIC_OR_PARTITION
                ),
            ],
            "OffsetFetch v{version}"
        );
        if version >= 2 {
            let (error, rows) = fetch_offsets(&mut connection, version, &group_id, None).await;
            assert_eq!(error, NONE);
            assert_eq!(
                rows,
                vec![
                    ("orders".into(), 0, 2, "note".into(), NONE),
                    ("orders".into(), 1, 4, "note".into(), NONE)
                ]
            );
        }
    }
    // v8: several groups at once, each with its own answer.
    let request = OffsetFetchRequest::default().with_groups(vec![
        OffsetFetchRequestGroup::default()
            .with_group_id(group("simple-v2"))
            .with_topics(None),
        OffsetFetchRequestGroup::default()
            .with_group_id(group("never-committed"))
            .with_topics(None),
        OffsetFetchRequestGroup::default()
            .with_group_id(group(""))
            .with_topics(None),
    ]);
    let response = connection.call(8, &request).await;
    let answers: Vec<(String, i16, usize)> = response
        .groups
        .iter()
        .map(|answer| {
            (
                answer.group_id.0.to_string(),
                answer.error_code,
                answer.topics.len(),
            )
        })
        .collect();
    assert_eq!(
        answers,
        vec![
            ("simple-v2".into(), NONE, 1),
            ("never-committed".into(), NONE, 0),
            ("".into(), INVALID_GROUP_ID, 0),
        ]
    );
}

/// OffsetCommit checks the group's membership: a member commits in its current generation; an
/// old generation is ILLEGAL_GENERATION, an unknown member UNKNOWN_MEMBER_ID, a consumer outside
/// the group (generation -1) ILLEGAL_GENERATION while the group has members. As in Kafka, a
/// member's commit is accepted while the group prepares a rebalance (a revoke callback's
/// commit) and REBALANCE_IN_PROGRESS while it completes one. Every partition of a refused commit
/// carries the code and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_are_checked_against_the_group_generation() {
    let server = kafka_server_with_quick_groups().await;
    topic_with_records(&server, "orders", 2, 5).await;
    let kafka = server.kafka_addr();
    let mut member = KafkaConnection::connect(kafka).await;
    let joined = join_new(&mut member, 5, "app", b"m").await;
    let me = joined.member_id.to_string();
    let synced = member
        .call(3, &sync_request("app", &joined, vec![(&me, b"all")]))
        .await;
    assert_eq!(synced.error_code, NONE);
    let offsets = [("orders", 0, 3), ("orders", 1, 4)];
    let cases = [
        (joined.generation_id + 1, me.as_str(), ILLEGAL_GENERATION),
        (joined.generation_id, "someone-else", UNKNOWN_MEMBER_ID),
        (-1, "", ILLEGAL_GENERATION),
        (joined.generation_id, me.as_str(), NONE),
    ];
    for (generation, member_id, code) in cases {
        let response = member
            .call(8, &commit_request("app", generation, member_id, &offsets))
            .await;
        assert_eq!(
            commit_codes(&response),
            vec![code, code],
            "{generation} {member_id:?}"
        );
    }
    let (_, rows) = fetch_offsets(&mut member, 8, "app", None).await;
    let offsets: Vec<(i32, i64)> = rows.iter().map(|row| (row.1, row.2)).collect();
    assert_eq!(offsets, vec![(0, 3), (1, 4)]);

    // A second member's join starts a rebalance: the first member may still commit what it
    // processed (its revoke callback) before it rejoins.
    let mut other = KafkaConnection::connect(kafka).await;
    let pending = other.send(2, &join_request("app", "", b"m")).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let response = member
        .call(
            8,
            &commit_request("app", joined.generation_id, &me, &[("orders", 0, 5)]),
        )
        .await;
    assert_eq!(commit_codes(&response), vec![NONE]);
    let rejoined = member.call(5, &join_request("app", &me, b"m")).await;
    assert_eq!(rejoined.generation_id, joined.generation_id + 1);
    let joined_other = other.receive::<JoinGroupRequest>(pending, 2).await;
    assert_eq!(joined_other.generation_id, rejoined.generation_id);
    // Joined, not yet synced: the new generation's commits wait for the assignment.
    let response = member
        .call(
            8,
            &commit_request("app", rejoined.generation_id, &me, &[("orders", 0, 5)]),
        )
        .await;
    assert_eq!(commit_codes(&response), vec![REBALANCE_IN_PROGRESS]);
    let (_, rows) = fetch_offsets(&mut member, 8, "app", None).await;
    assert_eq!(
        rows[0].2, 5,
        "the commit made while preparing the rebalance is stored"
    );
}

/// One store, two listeners: what a group commits through Kafka is where `fencelog consume
/// --group` resumes, and what that consume commits is what Kafka's OffsetFetch answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_and_native_consumers_resume_from_each_others_commits() {
    let server = kafka_server_with_quick_groups().await;
    topic_with_records(&server, "events", 1, 6).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let response = connection
        .call(8, &commit_request("shared", -1, "", &[("events", 0, 4)]))
        .await;
    assert_eq!(commit_codes(&response), vec![NONE]);

    let client = Client::connect(server.addr()).await.expect("connect");
    let committed = client
        .committed_offset("shared", "events", 0)
        .await
        .expect("committed offset")
        .expect("committed through Kafka");
    assert_eq!((committed.offset, committed.metadata.as_str()), (4, "note"));

    let addr = server.addr().to_string();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(crate::support::BIN)
            .args(["consume", "events", "--partition", "0", "--group", "shared"])
            .args(["--addr", &addr])
            .env_remove("FENCELOG_ADDR")
            .env_remove("RUST_LOG")
            .output()
            .expect("run fencelog consume")
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "record-4\nrecord-5\n",
        "consume --group resumes at the offset committed through Kafka"
    );
    let asked: &[(&str, &[i32])] = &[("events", &[0])];
    let (_, rows) = fetch_offsets(&mut connection, 5, "shared", Some(asked)).await;
    assert_eq!(rows[0].2, 6, "Kafka reads the offset consume committed");
}

/// kafka-python's `KafkaConsumer`: two members of one group split a 2-partition topic and commit
/// (tools/kafka-clients/kafka_python_group.py, mode `split`); then, after more records arrive,
/// a restarted member resumes exactly at the committed offsets (mode `resume`). Skipped, with a
/// note, where python3 or kafka-python is missing (`pip install kafka-python`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_consumers_split_a_topic_and_resume_from_commits() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tools/kafka-clients/kafka_python_group.py"
    );
    let has_module = Command::new("python3")
        .args(["-c", "import kafka"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !has_module {
        eprintln!(
            "python3 or kafka-python not found: skipping the kafka-python group check (pip install kafka-python)"
        );
        return;
    }
    let server = kafka_server_with_quick_groups().await;
    topic_with_records(&server, "clicks", 2, 10).await;
    let bootstrap = server.kafka_addr().to_string();
    let run = |mode: &'static str| {
        let bootstrap = bootstrap.clone();
        tokio::task::spawn_blocking(move || {
            let output = Command::new("python3")
                .args([script, mode, &bootstrap, "clicks", "py-group"])
                .output()
                .expect("run python3");
            let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
            let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            assert!(
                output.status.success(),
                "kafka-python {mode} failed:\n{stdout}\n{stderr}"
            );
            serde_json::from_str::<serde_json::Value>(stdout.trim())
                .unwrap_or_else(|error| panic!("{error}: {stdout}\n{stderr}"))
        })
    };
    let split = run("split").await.unwrap();
    eprintln!("kafka-python split: {split}");
    let assignments = &split["assignments"];
    assert_eq!(
        assignments["a"].as_array().map(Vec::len),
        Some(1),
        "{split}"
    );
    assert_eq!(
        assignments["b"].as_array().map(Vec::len),
        Some(1),
        "{split}"
    );
    assert_ne!(assignments["a"], assignments["b"], "{split}");

    // Natively: the commits made through Kafka, then more records.
    let client = Client::connect(server.addr()).await.expect("connect");
    for partition in 0..2 {
        let committed = client
            .committed_offset("py-group", "clicks", partition)
            .await
            .expect("committed")
            .expect("kafka-python committed");
        assert_eq!(committed.offset, 10, "partition {partition}");
        append(&client, "clicks", partition, 10..15).await;
    }

    let resumed = run("resume").await.unwrap();
    eprintln!("kafka-python resume: {resumed}");
    for partition in ["0", "1"] {
        let offsets: Vec<u64> = resumed["consumed"][partition]
            .as_array()
            .unwrap_or_else(|| panic!("{resumed}"))
            .iter()
            .map(|offset| offset.as_u64().unwrap())
            .collect();
        assert_eq!(offsets, vec![10, 11, 12, 13, 14], "partition {partition}");
    }
    for partition in 0..2 {
        let committed = client
            .committed_offset("py-group", "clicks", partition)
            .await
            .expect("committed")
            .expect("kafka-python committed");
        assert_eq!(committed.offset, 15, "partition {partition}");
    }
}

/// ApiVersions lists the group admin APIs, DescribeGroups (15) and ListGroups (16), with exactly
/// the versions tested below.
#[tokio::test]
async fn api_versions_advertises_the_group_admin_apis() {
    let server = kafka_server_with_quick_groups().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let response = connection.call(3, &ApiVersionsRequest::default()).await;
    let table: Vec<(i16, i16, i16)> = response
        .api_keys
        .iter()
        .map(|api| (api.api_key, api.min_version, api.max_version))
        .filter(|(key, _, _)| (15..=16).contains(key))
        .collect();
    assert_eq!(table, vec![(15, 0, 5), (16, 0, 5)]);
}

/// A stable group of one member (with a `group.instance.id`), a group that has joined but not
/// synced, and a group known only by its committed offsets.
async fn groups_to_describe(server: &TestServer, connection: &mut KafkaConnection) {
    topic_with_records(server, "admin-topic", 1, 2).await;
    // A static member gets its id without the MEMBER_ID_REQUIRED round trip, as in Kafka.
    let joined = connection
        .call(
            5,
            &join_request("admin-stable", "", b"subscription")
                .with_group_instance_id(Some(text("instance-1"))),
        )
        .await;
    assert_eq!(joined.error_code, NONE);
    let member_id = joined.member_id.to_string();
    let synced = connection
        .call(
            5,
            &sync_request("admin-stable", &joined, vec![(&member_id, b"assignment")]),
        )
        .await;
    assert_eq!(synced.error_code, NONE);
    let joined = connection
        .call(1, &join_request("admin-joining", "", b"subscription"))
        .await;
    assert_eq!(joined.error_code, NONE);
    let committed = connection
        .call(
            2,
            &commit_request("admin-offsets", -1, "", &[("admin-topic", 0, 1)]),
        )
        .await;
    assert_eq!(commit_codes(&committed), vec![NONE]);
}

/// DescribeGroups in every version (0..=5): a stable group's state, protocol, and member with
/// its client id, host, metadata, assignment and (v4+) instance id; a group that joined but did
/// not sync is CompletingRebalance without protocol or metadata (as Kafka answers); a group with
/// only committed offsets is Empty; an unknown group is Dead without an error; the authorized
/// operations are given from v3 when asked for.
#[tokio::test]
async fn describe_groups_reports_every_state_in_every_version() {
    let server = kafka_server_with_quick_groups().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    groups_to_describe(&server, &mut connection).await;
    for version in 0..=5i16 {
        let request = DescribeGroupsRequest::default()
            .with_groups(
                [
                    "admin-stable",
                    "admin-joining",
                    "admin-offsets",
                    "admin-nobody",
                ]
                .map(group)
                .to_vec(),
            )
            .with_include_authorized_operations(version >= 3);
        let response = connection.call(version, &request).await;
        let groups = &response.groups;
        assert_eq!(groups.len(), 4, "v{version}");
        let states: Vec<&str> = groups.iter().map(|g| g.group_state.as_str()).collect();
        assert_eq!(
            states,
            ["Stable", "CompletingRebalance", "Empty", "Dead"],
            "v{version}"
        );
        assert!(groups.iter().all(|g| g.error_code == NONE), "v{version}");
        let stable = &groups[0];
        assert_eq!(stable.group_id.0.as_str(), "admin-stable");
        assert_eq!(stable.protocol_type.as_str(), "consumer");
        assert_eq!(stable.protocol_data.as_str(), "range");
        assert_eq!(stable.members.len(), 1);
        let member = &stable.members[0];
        assert!(member.member_id.starts_with("fencelog-test-"), "v{version}");
        assert_eq!(member.client_id.as_str(), "fencelog-test");
        assert_eq!(member.client_host.as_str(), "/127.0.0.1");
        assert_eq!(&member.member_metadata[..], b"subscription");
        assert_eq!(&member.member_assignment[..], b"assignment");
        let instance = (version >= 4).then_some("instance-1");
        assert_eq!(member.group_instance_id.as_deref(), instance, "v{version}");
        let joining = &groups[1];
        assert_eq!(joining.protocol_type.as_str(), "consumer");
        assert_eq!(joining.protocol_data.as_str(), "");
        assert_eq!(joining.members.len(), 1);
        assert!(joining.members[0].member_metadata.is_empty());
        for empty in &groups[2..] {
            assert_eq!(empty.protocol_type.as_str(), "");
            assert!(empty.members.is_empty());
        }
        let operations = match version {
            0..=2 => i32::MIN,
            _ => (1 << 3) | (1 << 6) | (1 << 8),
        };
        assert!(
            groups.iter().all(|g| g.authorized_operations == operations),
            "v{version}"
        );
    }
}

/// ListGroups in every version (0..=5) lists the groups with members and those with committed
/// offsets only, sorted, with their state from v4 and type `classic` from v5; the states filter
/// (v4+, any case) and the types filter (v5) select.
#[tokio::test]
async fn list_groups_lists_members_and_offsets_only_groups_in_every_version() {
    let server = kafka_server_with_quick_groups().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    groups_to_describe(&server, &mut connection).await;
    for version in 0..=5i16 {
        let response = connection
            .call(version, &ListGroupsRequest::default())
            .await;
        assert_eq!(response.error_code, NONE, "v{version}");
        let rows: Vec<(&str, &str, &str, &str)> = response
            .groups
            .iter()
            .map(|g| {
                (
                    g.group_id.0.as_str(),
                    g.protocol_type.as_str(),
                    g.group_state.as_str(),
                    g.group_type.as_str(),
                )
            })
            .collect();
        let (joining, offsets, stable) = match version {
            0..=3 => ("", "", ""),
            _ => ("CompletingRebalance", "Empty", "Stable"),
        };
        let kind = if version >= 5 { "classic" } else { "" };
        assert_eq!(
            rows,
            [
                ("admin-joining", "consumer", joining, kind),
                ("admin-offsets", "", offsets, kind),
                ("admin-stable", "consumer", stable, kind),
            ],
            "v{version}"
        );
        if version >= 4 {
            let filtered = ListGroupsRequest::default()
                .with_states_filter(vec![text("stable"), text("Empty")]);
            let response = connection.call(version, &filtered).await;
            let names: Vec<&str> = response
                .groups
                .iter()
                .map(|g| g.group_id.0.as_str())
                .collect();
            assert_eq!(names, ["admin-offsets", "admin-stable"], "v{version}");
        }
        if version >= 5 {
            let consumer_only =
                ListGroupsRequest::default().with_types_filter(vec![text("consumer")]);
            let response = connection.call(version, &consumer_only).await;
            assert!(response.groups.is_empty(), "no KIP-848 groups here");
            let classic = ListGroupsRequest::default().with_types_filter(vec![text("Classic")]);
            let response = connection.call(version, &classic).await;
            assert_eq!(response.groups.len(), 3);
        }
    }
}

/// A member that stops without leaving (a crashed consumer) is removed when its session
/// expires even while the group waits for its members to rejoin, as Kafka's coordinator does:
/// a new member's JoinGroup is answered after the stopped member's session timeout, not after
/// the longest rebalance timeout (`max.poll.interval.ms`, 5 min by default in the clients).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_member_does_not_hold_up_the_next_rebalance() {
    let broker = BrokerConfig {
        coordinator: CoordinatorConfig {
            initial_rebalance_delay: Duration::from_millis(100),
            min_session_timeout: Duration::from_millis(500),
            ..CoordinatorConfig::default()
        },
        ..BrokerConfig::default()
    };
    let kafka = KafkaConfig::advertising(SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = TestServer::builder()
        .broker_config(broker)
        .kafka_config(kafka)
        .start()
        .await
        .expect("start server");
    let mut crashed = KafkaConnection::connect(server.kafka_addr()).await;
    let request = join_request("crash", "", b"m")
        .with_session_timeout_ms(1_000)
        .with_rebalance_timeout_ms(60_000);
    let joined = crashed.call(3, &request).await;
    assert_eq!(joined.error_code, NONE);
    let member = joined.member_id.to_string();
    let synced = crashed
        .call(3, &sync_request("crash", &joined, vec![(&member, b"a")]))
        .await;
    assert_eq!(synced.error_code, NONE);
    drop(crashed); // no LeaveGroup, no more heartbeats

    let mut newcomer = KafkaConnection::connect(server.kafka_addr()).await;
    let started = std::time::Instant::now();
    let request = join_request("crash", "", b"m").with_rebalance_timeout_ms(60_000);
    let joined = newcomer.call(3, &request).await;
    assert_eq!(joined.error_code, NONE);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "answered after {:?}: the stopped member held the rebalance",
        started.elapsed()
    );
    assert_eq!(joined.generation_id, 2);
    assert_eq!(joined.leader, joined.member_id);
    assert_eq!(joined.members.len(), 1);
}

/// A static member (`group.instance.id`) that restarts without leaving (librdkafka's static
/// members never send LeaveGroup) joins again at once: its previous incarnation is replaced
/// instead of holding the rebalance until its session expires; the old member id is then
/// unknown. Static members get their id without MEMBER_ID_REQUIRED, as in Kafka.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_static_member_replaces_its_previous_incarnation() {
    let server = kafka_server_with_quick_groups().await;
    let mut first = KafkaConnection::connect(server.kafka_addr()).await;
    let request = join_request("static", "", b"m")
        .with_group_instance_id(Some(text("pod-1")))
        .with_rebalance_timeout_ms(60_000);
    let old = first.call(5, &request).await;
    assert_eq!(
        old.error_code, NONE,
        "no MEMBER_ID_REQUIRED for a static member"
    );
    let old_id = old.member_id.to_string();
    let synced = first
        .call(5, &sync_request("static", &old, vec![(&old_id, b"a")]))
        .await;
    assert_eq!(synced.error_code, NONE);
    drop(first);

    let mut restarted = KafkaConnection::connect(server.kafka_addr()).await;
    let started = std::time::Instant::now();
    let new = restarted.call(5, &request).await;
    assert_eq!(new.error_code, NONE);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered after {:?}: the old incarnation held the rebalance",
        started.elapsed()
    );
    assert_ne!(new.member_id.as_str(), old_id);
    assert_eq!(new.members.len(), 1);
    assert_eq!(new.members[0].group_instance_id.as_deref(), Some("pod-1"));
    let beat = restarted.call(4, &heartbeat_request("static", &old)).await;
    assert_eq!(beat.error_code, UNKNOWN_MEMBER_ID);
}

/// A consumer's subscription metadata (ConsumerProtocolSubscription v0) to `topics`.
fn subscription(topics: &[&str]) -> &'static [u8] {
    use kafka_protocol::messages::ConsumerProtocolSubscription;
    use kafka_protocol::protocol::Encodable;
    let mut out = bytes::BytesMut::new();
    out.extend_from_slice(&0i16.to_be_bytes());
    ConsumerProtocolSubscription::default()
        .with_topics(topics.iter().map(|topic| text(topic)).collect())
        .encode(&mut out, 0)
        .expect("encode the subscription");
    Box::leak(out.to_vec().into_boxed_slice())
}

/// A stable one-member consumer group subscribed to `topics`.
async fn stable_member(connection: &mut KafkaConnection, group_id: &str, topics: &[&str]) {
    let joined = connection
        .call(
            5,
            &join_request(group_id, "", subscription(topics))
                .with_group_instance_id(Some(text(&format!("{group_id}-instance")))),
        )
        .await;
    assert_eq!(joined.error_code, NONE);
    let member_id = joined.member_id.to_string();
    let synced = connection
        .call(
            5,
            &sync_request(group_id, &joined, vec![(&member_id, b"assignment")]),
        )
        .await;
    assert_eq!(synced.error_code, NONE);
}

/// ApiVersions lists DeleteGroups (42), OffsetDelete (47) and DescribeCluster (60) with exactly
/// the versions tested below.
#[tokio::test]
async fn api_versions_advertises_delete_groups_offset_delete_and_describe_cluster() {
    let server = kafka_server_with_quick_groups().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let response = connection.call(3, &ApiVersionsRequest::default()).await;
    let table: Vec<(i16, i16, i16)> = response
        .api_keys
        .iter()
        .map(|api| (api.api_key, api.min_version, api.max_version))
        .filter(|(key, _, _)| [42, 47, 60].contains(key))
        .collect();
    assert_eq!(table, vec![(42, 0, 2), (47, 0, 0), (60, 0, 2)]);
}

/// DeleteGroups in every version (0..=2): a group with committed offsets only is deleted (its
/// offsets are gone, and deleting it again finds nothing), a group with a member is
/// NON_EMPTY_GROUP and keeps its offsets, an unknown group is GROUP_ID_NOT_FOUND, an empty id is
/// INVALID_GROUP_ID; the results come in request order.
#[tokio::test]
async fn delete_groups_deletes_empty_groups_only_in_every_version() {
    const INVALID_GROUP_ID: i16 = 24;
    const NON_EMPTY_GROUP: i16 = 68;
    const GROUP_ID_NOT_FOUND: i16 = 69;
    use kafka_protocol::messages::DeleteGroupsRequest;
    let server = kafka_server_with_quick_groups().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    topic_with_records(&server, "deleted", 1, 2).await;
    let committed = connection
        .call(2, &commit_request("active", -1, "", &[("deleted", 0, 1)]))
        .await;
    assert_eq!(commit_codes(&committed), vec![NONE]);
    stable_member(&mut connection, "active", &["deleted"]).await;
    for version in 0..=2i16 {
        let committed = connection
            .call(2, &commit_request("idle", -1, "", &[("deleted", 0, 1)]))
            .await;
        assert_eq!(commit_codes(&committed), vec![NONE], "v{version}");
        let request = DeleteGroupsRequest::default()
            .with_groups_names(["idle", "active", "nobody", ""].map(group).to_vec());
        let response = connection.call(version, &request).await;
        let results: Vec<(&str, i16)> = response
            .results
            .iter()
            .map(|result| (result.group_id.0.as_str(), result.error_code))
            .collect();
        assert_eq!(
            results,
            vec![
                ("idle", NONE),
                ("active", NON_EMPTY_GROUP),
                ("nobody", GROUP_ID_NOT_FOUND),
                ("", INVALID_GROUP_ID)
            ],
            "v{version}"
        );
        let (_, idle) = fetch_offsets(&mut connection, 2, "idle", None).await;
        assert!(idle.is_empty(), "v{version}: {idle:?}");
        let (_, active) = fetch_offsets(&mut connection, 2, "active", None).await;
        assert_eq!(
            active.len(),
            1,
            "v{version}: the active group keeps its offsets"
        );
        let again = connection
            .call(
                version,
                &DeleteGroupsRequest::default().with_groups_names(vec![group("idle")]),
            )
            .await;
        assert_eq!(
            again.results[0].error_code, GROUP_ID_NOT_FOUND,
            "v{version}"
        );
    }
}

/// OffsetDelete (v0): a group without members loses the named partitions' offsets and keeps
/// the others; an active consumer group keeps the offsets of the topics it subscribes to
/// (GROUP_SUBSCRIBED_TO_TOPIC) and loses the others; an unknown partition is
/// UNKNOWN_TOPIC_OR_PARTITION; an unknown group is GROUP_ID_NOT_FOUND for the request.
#[tokio::test]
async fn offset_delete_spares_the_topics_an_active_group_reads() {
    const GROUP_ID_NOT_FOUND: i16 = 69;
    const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
    use kafka_protocol::messages::offset_delete_request::{
        OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
    };
    use kafka_protocol::messages::OffsetDeleteRequest;
    let server = kafka_server_with_quick_groups().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    topic_with_records(&server, "read", 2, 2).await;
    topic_with_records(&server, "unread", 1, 2).await;
    let request = |group_id: &str, partitions: &[(&str, i32)]| {
        OffsetDeleteRequest::default()
            .with_group_id(group(group_id))
            .with_topics(
                partitions
                    .iter()
                    .map(|(topic, partition)| {
                        OffsetDeleteRequestTopic::default()
                            .with_name(topic_name(topic))
                            .with_partitions(vec![OffsetDeleteRequestPartition::default()
                                .with_partition_index(*partition)])
                    })
                    .collect(),
            )
    };
    let codes = |response: &kafka_protocol::messages::OffsetDeleteResponse| -> Vec<i16> {
        response
            .topics
            .iter()
            .flat_map(|topic| topic.partitions.iter().map(|p| p.error_code))
            .collect()
    };
    let all = [("read", 0, 1), ("read", 1, 1), ("unread", 0, 2)];

    let committed = connection
        .call(2, &commit_request("idle", -1, "", &all))
        .await;
    assert_eq!(commit_codes(&committed), vec![NONE; 3]);
    let deleted = connection
        .call(
            0,
            &request("idle", &[("read", 0), ("unread", 0), ("read", 9)]),
        )
        .await;
    assert_eq!(deleted.error_code, NONE);
    assert_eq!(
        codes(&deleted),
        vec![NONE, NONE, UNKNOWN_TOPIC_OR_PARTITION]
    );
    let (_, left) = fetch_offsets(&mut connection, 2, "idle", None).await;
    let left: Vec<(String, i32)> = left.into_iter().map(|row| (row.0, row.1)).collect();
    assert_eq!(left, vec![("read".to_string(), 1)]);

    let committed = connection
        .call(2, &commit_request("reader", -1, "", &all))
        .await;
    assert_eq!(commit_codes(&committed), vec![NONE; 3]);
    stable_member(&mut connection, "reader", &["read"]).await;
    let deleted = connection
        .call(0, &request("reader", &[("read", 0), ("unread", 0)]))
        .await;
    assert_eq!(deleted.error_code, NONE);
    assert_eq!(codes(&deleted), vec![GROUP_SUBSCRIBED_TO_TOPIC, NONE]);
    let (_, left) = fetch_offsets(&mut connection, 2, "reader", None).await;
    let left: Vec<(String, i32)> = left.into_iter().map(|row| (row.0, row.1)).collect();
    assert_eq!(left, vec![("read".to_string(), 0), ("read".to_string(), 1)]);

    let unknown = connection.call(0, &request("nobody", &[("read", 0)])).await;
    assert_eq!(unknown.error_code, GROUP_ID_NOT_FOUND);
}

/// DescribeCluster in every version (0..=2): this broker as the one broker and controller, the
/// cluster id Metadata reports; v1+ answer the broker endpoint type and refuse the controller
/// endpoint type with UNSUPPORTED_ENDPOINT_TYPE.
#[tokio::test]
async fn describe_cluster_names_the_brokers_in_every_version() {
    use kafka_protocol::messages::{DescribeClusterRequest, MetadataRequest};
    let server = kafka_server_with_quick_groups().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let metadata = connection.call(12, &MetadataRequest::default()).await;
    for version in 0..=2i16 {
        let response = connection
            .call(version, &DescribeClusterRequest::default())
            .await;
        assert_eq!(response.error_code, NONE, "v{version}");
        assert_eq!(
            Some(&response.cluster_id),
            metadata.cluster_id.as_ref(),
            "v{version}"
        );
        assert_eq!(response.controller_id, metadata.controller_id);
        assert_eq!(response.brokers.len(), 1);
        let broker = &response.brokers[0];
        assert_eq!(broker.broker_id, metadata.brokers[0].node_id);
        assert_eq!(broker.host, metadata.brokers[0].host);
        assert_eq!(broker.port, i32::from(server.kafka_addr().port()));
        assert!(!broker.is_fenced);
        if version >= 1 {
            assert_eq!(response.endpoint_type, 1);
            let controllers = connection
                .call(
                    version,
                    &DescribeClusterRequest::default().with_endpoint_type(2),
                )
                .await;
            assert_eq!(controllers.error_code, 115, "v{version}");
            assert!(controllers.error_message.is_some());
        }
    }
}
