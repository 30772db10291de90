//! The Kafka listener, spoken to with requests encoded by `kafka-protocol`'s client-side
//! encoder: every API and every version it advertises (KIP-848's ConsumerGroupHeartbeat and
//! ConsumerGroupDescribe included), the KIP-511 ApiVersions fallback,
//! responses in request order, and hostile input (short, truncated and oversized frames, a bad
//! header, unknown APIs and versions, counts far beyond the frame) that closes only the
//! offending connection.

use crate::support::kafka;

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use fencelog::batch::BatchBuilder;
use fencelog::client::Client;
use fencelog::domain::TopicConfig;
use fencelog::server::kafka::versions::{supported, SUPPORTED_APIS};
use fencelog::server::KafkaConfig;
use fencelog::testing::TestServer;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest, CreateTopicsRequest, ListOffsetsRequest, MetadataRequest,
    OffsetCommitRequest, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};

use kafka::{kafka_batch_of, kafka_record, KafkaConnection, TIMEOUT};

async fn kafka_server() -> TestServer {
    TestServer::builder()
        .kafka()
        .start()
        .await
        .expect("start server")
}

/// Creates `topic` through the native client and appends `values` with timestamps 1000, 1001, …
async fn topic_with_records(server: &TestServer, topic: &str, partitions: u32, values: &[&str]) {
    let client = Client::connect(server.addr()).await.expect("connect");
    client
        .create_topic(topic, partitions, TopicConfig::default())
        .await
        .expect("create topic");
    if values.is_empty() {
        return;
    }
    let lease = client
        .acquire_lease(topic, 0, "writer", Duration::from_secs(30))
        .await
        .expect("lease");
    let mut builder = BatchBuilder::new(lease.epoch);
    for (index, value) in values.iter().enumerate() {
        builder.push(1_000 + index as i64, None, Some(value.as_bytes()));
    }
    client
        .produce(topic, 0, builder.finish())
        .await
        .expect("produce");
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// Asserts the server answers a fresh connection (it survived whatever the test sent).
async fn assert_still_serving(server: &TestServer) {
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let response = connection.call(0, &ApiVersionsRequest::default()).await;
    assert_eq!(response.error_code, 0);
}

/// The versions table (`src/server/kafka/versions.rs`), as ApiVersions lists it.
fn advertised_table() -> Vec<(i16, i16, i16)> {
    SUPPORTED_APIS
        .iter()
        .map(|api| (api.key as i16, api.min_version, api.max_version))
        .collect()
}

/// Every ApiVersions version answers the same table: the listener's versions table, row for row
/// in API key order (each API's test file checks the literal ranges it exercises).
#[tokio::test]
async fn api_versions_lists_exactly_the_implemented_table_in_every_version() {
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 0..=4 {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("fencelog-test"))
            .with_client_software_version(StrBytes::from_static_str("1.0"));
        let response = connection.call(version, &request).await;
        assert_eq!(response.error_code, 0, "v{version}");
        let table: Vec<(i16, i16, i16)> = response
            .api_keys
            .iter()
            .map(|api| (api.api_key, api.min_version, api.max_version))
            .collect();
        assert_eq!(table, advertised_table(), "v{version}");
    }
}

/// ApiVersions v3+ refuses a client software name outside Kafka's pattern, as Kafka does.
#[tokio::test]
async fn api_versions_v3_refuses_an_invalid_client_software_name() {
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let request = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("bad name!"))
        .with_client_software_version(StrBytes::from_static_str("1.0"));
    let response = connection.call(3, &request).await;
    assert_eq!(response.error_code, 42, "INVALID_REQUEST");
}

/// KIP-511: an ApiVersions version the listener does not have is answered in v0 (header and
/// body) with UNSUPPORTED_VERSION and the table, and the connection stays open.
#[tokio::test]
async fn an_unknown_api_versions_version_gets_the_table_in_v0_with_unsupported_version() {
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    // A future version whose body we cannot know: only the prefix matters.
    let mut frame = BytesMut::new();
    frame.put_u32(12);
    frame.put_i16(ApiKey::ApiVersions as i16);
    frame.put_i16(77);
    frame.put_i32(4242);
    frame.put_u32(0xdead_beef);
    connection.write(&frame).await;
    let mut response = connection.read_frame().await.expect("an answer");
    assert_eq!(
        response.get_i32(),
        4242,
        "v0 header: the correlation id alone"
    );
    let body = ApiVersionsResponse::decode(&mut response, 0).expect("v0 body");
    assert!(response.is_empty());
    assert_eq!(body.error_code, 35, "UNSUPPORTED_VERSION");
    assert_eq!(body.api_keys.len(), advertised_table().len());
    assert_still_open(&mut connection).await;
}

async fn assert_still_open(connection: &mut KafkaConnection) {
    let response = connection.call(2, &ApiVersionsRequest::default()).await;
    assert_eq!(response.error_code, 0);
}

/// Metadata in every advertised version: this broker at its advertised address as the only
/// broker and controller, every topic with its partitions led by it, topic ids (v10+) derived
/// from the name, an unknown topic answered UNKNOWN_TOPIC_OR_PARTITION and not created.
#[tokio::test]
async fn metadata_describes_the_broker_and_topics_in_every_version() {
    let server = kafka_server().await;
    topic_with_records(&server, "orders", 3, &[]).await;
    topic_with_records(&server, "audit", 1, &[]).await;
    let kafka = server.kafka_addr();
    let mut connection = KafkaConnection::connect(kafka).await;
    let mut ids = Vec::new();
    for version in 0..=12 {
        // All topics: an empty array in v0, null from v1.
        let all = if version == 0 {
            MetadataRequest::default().with_topics(Some(Vec::new()))
        } else {
            MetadataRequest::default().with_topics(None)
        };
        let response = connection.call(version, &all).await;
        assert_eq!(response.brokers.len(), 1, "v{version}");
        let broker = &response.brokers[0];
        assert_eq!(broker.node_id.0, 0);
        assert_eq!(broker.host.as_str(), kafka.ip().to_string());
        assert_eq!(broker.port, i32::from(kafka.port()));
        if version >= 1 {
            assert_eq!(response.controller_id.0, 0);
        }
        if version >= 2 {
            assert_eq!(
                response.cluster_id.as_ref().map(|id| id.as_str()),
                Some("fencelog")
            );
        }
        let names: Vec<&str> = response
            .topics
            .iter()
            .map(|topic| topic.name.as_ref().unwrap().0.as_str())
            .collect();
        assert_eq!(names, ["audit", "orders"], "v{version}");
        let orders = &response.topics[1];
        assert_eq!(orders.error_code, 0);
        assert_eq!(orders.partitions.len(), 3);
        for (index, partition) in orders.partitions.iter().enumerate() {
            assert_eq!(partition.partition_index, index as i32);
            assert_eq!(partition.leader_id.0, 0);
            assert_eq!(
                partition
                    .replica_nodes
                    .iter()
                    .map(|n| n.0)
                    .collect::<Vec<_>>(),
                [0]
            );
            assert_eq!(
                partition.isr_nodes.iter().map(|n| n.0).collect::<Vec<_>>(),
                [0]
            );
            if version >= 7 {
                assert_eq!(partition.leader_epoch, -1);
            }
        }
        if version >= 10 {
            assert!(!orders.topic_id.is_nil());
            ids.push(orders.topic_id);
        }

        // Named, with one unknown topic that must not be created.
        // allow_auto_topic_creation is true by default (and always true before v4).
        let named = MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(name("orders"))),
            MetadataRequestTopic::default().with_name(Some(name("missing"))),
        ]));
        let response = connection.call(version, &named).await;
        assert_eq!(response.topics.len(), 2);
        assert_eq!(response.topics[0].error_code, 0);
        assert_eq!(
            response.topics[1].error_code, 3,
            "UNKNOWN_TOPIC_OR_PARTITION"
        );
        assert!(response.topics[1].partitions.is_empty());
        assert!(
            server.broker().topic("missing").is_err(),
            "not auto-created"
        );

        // From v1 an empty array asks for no topics.
        if version >= 1 {
            let none = MetadataRequest::default().with_topics(Some(Vec::new()));
            let response = connection.call(version, &none).await;
            assert!(response.topics.is_empty(), "v{version}");
        }
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "the topic id is the same in every response");

    // v10+: a topic asked for by id alone.
    let by_id = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default()
            .with_name(None)
            .with_topic_id(ids[0]),
        MetadataRequestTopic::default()
            .with_name(None)
            .with_topic_id(uuid::Uuid::from_u128(7)),
    ]));
    let response = connection.call(12, &by_id).await;
    assert_eq!(
        response.topics[0].name.as_ref().unwrap().0.as_str(),
        "orders"
    );
    assert_eq!(response.topics[1].error_code, 100, "UNKNOWN_TOPIC_ID");
}

/// ListOffsets in every advertised version: earliest, latest, by timestamp, no record that
/// recent, max timestamp (v7), unknown partitions.
#[tokio::test]
async fn list_offsets_answers_earliest_latest_and_by_timestamp_in_every_version() {
    let server = kafka_server().await;
    topic_with_records(&server, "events", 2, &["a", "b", "c"]).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 1..=7 {
        let ask = |partition: i32, timestamp: i64| {
            ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(timestamp)
        };
        let mut partitions = vec![
            ask(0, -2),
            ask(0, -1),
            ask(0, 1_001),
            ask(0, 999),
            ask(0, 5_000),
            ask(1, -1),
            ask(9, -1),
        ];
        if version >= 7 {
            partitions.push(ask(0, -3));
            partitions.push(ask(1, -3));
        }
        let request = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(name("events"))
                    .with_partitions(partitions),
                ListOffsetsTopic::default()
                    .with_name(name("nope"))
                    .with_partitions(vec![ask(0, -1)]),
            ]);
        let response = connection.call(version, &request).await;
        let events = &response.topics[0].partitions;
        let answer: Vec<(i16, i64, i64)> = events
            .iter()
            .map(|p| (p.error_code, p.timestamp, p.offset))
            .collect();
        let mut expected = vec![
            (0, -1, 0),    // earliest
            (0, -1, 3),    // latest
            (0, 1_001, 1), // first record at or after 1001, with its own timestamp
            (0, 1_000, 0), // asked earlier than any: the first record, its timestamp
            (0, -1, -1),   // nothing that recent
            (0, -1, 0),    // empty partition
            (3, -1, -1),   // unknown partition
        ];
        if version >= 7 {
            expected.push((0, 1_002, 2)); // max timestamp: the record with the largest
            expected.push((0, -1, -1)); // max timestamp of an empty partition
        }
        assert_eq!(answer, expected, "v{version}");
        assert_eq!(response.topics[1].partitions[0].error_code, 3, "v{version}");
    }
}

/// CreateTopics in every advertised version creates durably and answers per topic: defaults,
/// configs mapped, and each refusal with its Kafka code and a message.
#[tokio::test]
async fn create_topics_creates_and_refuses_per_topic_in_every_version() {
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 2..=7 {
        let topic = |name_: &str, partitions: i32, replication: i16| {
            CreatableTopic::default()
                .with_name(name(name_))
                .with_num_partitions(partitions)
                .with_replication_factor(replication)
        };
        let config = |key: &'static str, value: &'static str| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_static_str(key))
                .with_value(Some(StrBytes::from_static_str(value)))
        };
        let created = format!("created-{version}");
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(1_000)
            .with_topics(vec![
                topic(&created, 2, 1).with_configs(vec![
                    config("retention.ms", "60000"),
                    config("retention.bytes", "-1"),
                    config("cleanup.policy", "delete"),
                ]),
                topic(&format!("default-{version}"), -1, -1),
                topic(&format!("replicated-{version}"), 1, 3),
                topic(&format!("configured-{version}"), 1, 1)
                    .with_configs(vec![config("compression.type", "zstd")]),
                topic(&format!("zero-{version}"), 0, 1),
                topic("bad/name", 1, 1),
                topic("twice", 1, 1),
                topic("twice", 1, 1),
            ]);
        let response = connection.call(version, &request).await;
        let codes: Vec<i16> = response.topics.iter().map(|t| t.error_code).collect();
        assert_eq!(codes, [0, 0, 38, 40, 37, 17, 42, 42], "v{version}");
        for refused in &response.topics[2..] {
            assert!(
                refused.error_message.is_some(),
                "v{version}: a message says why"
            );
        }
        if version >= 5 {
            assert_eq!(response.topics[0].num_partitions, 2);
            assert_eq!(response.topics[0].replication_factor, 1);
        }
        if version >= 7 {
            assert!(!response.topics[0].topic_id.is_nil());
        }
        let stored = server.broker().topic(&created).expect("created");
        assert_eq!(stored.partitions().len(), 2);
        assert_eq!(stored.config().retention_ms, Some(60_000));
        assert_eq!(stored.config().retention_bytes, None);
        let default = server
            .broker()
            .topic(&format!("default-{version}"))
            .expect("created with defaults");
        assert_eq!(default.partitions().len(), 1);

        // Again: it exists now. And validate_only creates nothing.
        let again = CreateTopicsRequest::default().with_topics(vec![topic(&created, 1, 1)]);
        let response = connection.call(version, &again).await;
        assert_eq!(response.topics[0].error_code, 36, "TOPIC_ALREADY_EXISTS");
        let dry = format!("dry-{version}");
        let validate = CreateTopicsRequest::default()
            .with_validate_only(true)
            .with_topics(vec![topic(&dry, 4, 1)]);
        let response = connection.call(version, &validate).await;
        assert_eq!(response.topics[0].error_code, 0);
        assert!(
            server.broker().topic(&dry).is_err(),
            "validate_only created nothing"
        );
    }
}

/// Pipelined requests are answered in the order they were sent, a slow CreateTopics before
/// quick Metadata and ApiVersions included. (Unlike Kafka's broker, which handles one request
/// per connection at a time, the requests may run concurrently: only the answers are ordered.)
#[tokio::test]
async fn pipelined_responses_come_back_in_request_order() {
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let create = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(name("pipelined"))
        .with_num_partitions(8)
        .with_replication_factor(1)]);
    let first = connection.send(7, &create).await;
    let second = connection
        .send(12, &MetadataRequest::default().with_topics(None))
        .await;
    let third = connection.send(3, &ApiVersionsRequest::default()).await;
    let created = connection.receive::<CreateTopicsRequest>(first, 7).await;
    assert_eq!(created.topics[0].error_code, 0);
    connection.receive::<MetadataRequest>(second, 12).await;
    connection.receive::<ApiVersionsRequest>(third, 3).await;
}

/// The reproducer of kafka-protocol-rs PR #152: a Metadata v0 request whose topic array
/// declares 0x033c0c00 (54 million) entries in an 8-byte body. Unpatched, the decoder reserves
/// about 3.6 GiB up front; patched, it is refused at once, only that connection closes. The
/// same with `i32::MAX` entries (about 150 GiB, beyond any overcommit).
#[tokio::test]
async fn a_count_far_beyond_the_frame_is_refused_quickly() {
    let server = kafka_server().await;
    for count in [0x033c_0c00_u32, 0x7fff_ffff] {
        let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
        let mut payload = BytesMut::new();
        payload.put_i16(ApiKey::Metadata as i16);
        payload.put_i16(0);
        payload.put_i32(1);
        payload.put_i16(-1); // null client id
        payload.put_u32(count); // the topic array's count ...
        payload.extend_from_slice(&[0x00, 0xb6, 0x00, 0x00]); // ... and 8 bytes of body in all
        let mut frame = BytesMut::new();
        frame.put_u32(payload.len() as u32);
        frame.extend_from_slice(&payload);
        let started = std::time::Instant::now();
        connection.write(&frame).await;
        connection.assert_closed().await;
        assert!(started.elapsed() < Duration::from_secs(5), "count {count}");
    }
    assert_still_serving(&server).await;
}

/// The same count in a flexible (compact) array and a string length beyond the frame are
/// refused the same way.
#[tokio::test]
async fn compact_counts_and_lengths_beyond_the_frame_are_refused() {
    let server = kafka_server().await;
    for body in [
        // Metadata v12 (header v2): compact topic array of u32::MAX - 1 entries.
        &[0xff, 0xff, 0xff, 0xff, 0x0f][..],
        // Compact topic array of 2 entries whose first topic id is cut short.
        &[0x03, 0x00, 0x01][..],
    ] {
        let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
        let mut payload = BytesMut::new();
        payload.put_i16(ApiKey::Metadata as i16);
        payload.put_i16(12);
        payload.put_i32(1);
        payload.put_i16(-1); // null client id
        payload.put_u8(0); // no tagged fields
        payload.extend_from_slice(body);
        let mut frame = BytesMut::new();
        frame.put_u32(payload.len() as u32);
        frame.extend_from_slice(&payload);
        connection.write(&frame).await;
        connection.assert_closed().await;
    }
    assert_still_serving(&server).await;
}

/// Frames the listener cannot answer close their connection only: shorter than the header
/// prefix, an unknown API key, an API not implemented (Produce), a version outside the range,
/// a client id longer than the frame, a body cut short.
#[tokio::test]
async fn unanswerable_frames_close_only_their_connection() {
    let server = kafka_server().await;
    let mut cut_short = KafkaConnection::frame(1, 12, &MetadataRequest::default()).to_vec();
    cut_short.truncate(cut_short.len() - 2);
    let new_length = (cut_short.len() - 4) as u32;
    cut_short[..4].copy_from_slice(&new_length.to_be_bytes());
    let frames: Vec<(&str, Vec<u8>)> = vec![
        ("shorter than the prefix", vec![0, 0, 0, 3, 0, 18, 0]),
        ("unknown API key", prefix_frame(999, 0, &[])),
        (
            "not implemented",
            prefix_frame(ApiKey::Produce as i16, 9, &[0xff, 0xff]),
        ),
        (
            "version out of range",
            prefix_frame(ApiKey::Metadata as i16, 13, &[0xff, 0xff]),
        ),
        (
            "version below range",
            prefix_frame(ApiKey::ListOffsets as i16, 0, &[0xff, 0xff]),
        ),
        (
            "client id beyond the frame",
            prefix_frame(ApiKey::Metadata as i16, 1, &[0x7f, 0xff]),
        ),
        ("body cut short", cut_short),
    ];
    let mut bystander = KafkaConnection::connect(server.kafka_addr()).await;
    for (what, frame) in frames {
        let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
        connection.write(&frame).await;
        tokio::time::timeout(TIMEOUT, connection.assert_closed())
            .await
            .unwrap_or_else(|_| panic!("{what}: not closed"));
        assert_still_open(&mut bystander).await;
    }
    assert_still_serving(&server).await;
}

/// A frame of the API key, version and correlation id followed by `rest`.
fn prefix_frame(api_key: i16, version: i16, rest: &[u8]) -> Vec<u8> {
    let mut frame = BytesMut::new();
    frame.put_u32((8 + rest.len()) as u32);
    frame.put_i16(api_key);
    frame.put_i16(version);
    frame.put_i32(1);
    frame.extend_from_slice(rest);
    frame.to_vec()
}

/// A declared frame size above the Kafka listener's limit closes the connection before any of
/// the frame is read or allocated; a frame just under it is read.
#[tokio::test]
async fn a_frame_over_the_kafka_limit_closes_the_connection_before_it_is_read() {
    let kafka = KafkaConfig {
        max_frame_bytes: 1024,
        ..KafkaConfig::advertising("127.0.0.1:1".parse().unwrap())
    };
    let server = TestServer::builder()
        .kafka_config(kafka)
        .start()
        .await
        .expect("start");
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    connection.write(&[0x7f, 0xff, 0xff, 0xff]).await; // 2 GiB declared
    connection.assert_closed().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    connection.write(&1025u32.to_be_bytes()).await;
    connection.assert_closed().await;
    assert_still_serving(&server).await;
}

/// A truncated frame (fewer bytes than declared, then silence) holds only its own connection;
/// others are served meanwhile.
#[tokio::test]
async fn a_truncated_frame_does_not_block_other_connections() {
    let server = kafka_server().await;
    let mut stalled = KafkaConnection::connect(server.kafka_addr()).await;
    stalled.write(&[0, 0, 1, 0, 0, 3, 0, 1]).await; // 256 declared, 4 sent
    assert_still_serving(&server).await;
    drop(stalled);
}

/// The native listener keeps working next to the Kafka one, and a server started without a
/// Kafka listener has none.
#[tokio::test]
async fn the_native_listener_is_unchanged_and_kafka_is_off_unless_asked() {
    let server = kafka_server().await;
    let client = Client::connect(server.addr()).await.expect("connect");
    client.api_versions().await.expect("native api versions");
    let plain = TestServer::start().await.expect("start");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| plain.kafka_addr()));
    assert!(result.is_err(), "no Kafka listener unless asked for");
}

/// The Kafka listener comes back on the same port after a restart, topics intact.
#[tokio::test]
async fn the_kafka_listener_survives_a_restart_on_the_same_port() {
    let server = kafka_server().await;
    topic_with_records(&server, "kept", 1, &["x"]).await;
    let before = server.kafka_addr();
    let server = server.restart().await.expect("restart");
    assert_eq!(server.kafka_addr(), before);
    let mut connection = KafkaConnection::connect(before).await;
    let response = connection
        .call(12, &MetadataRequest::default().with_topics(None))
        .await;
    assert_eq!(response.topics.len(), 1);
}

/// One Kafka record batch v2 (uncompressed) of `values`, optionally of an idempotent producer.
fn kafka_batch(values: &[String], producer: Option<(i64, i32)>) -> Bytes {
    let records: Vec<_> = values
        .iter()
        .enumerate()
        .map(|(index, value)| kafka_record(index as i64, &format!("key-{value}"), value, producer))
        .collect();
    kafka_batch_of(&records, kafka_protocol::records::Compression::None)
}

fn produce_request(topic: &str, records: Bytes) -> kafka_protocol::messages::ProduceRequest {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    kafka_protocol::messages::ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])])
}

/// Produce in every advertised version appends (offsets in order, an idempotent retry answered
/// with its first offset), and Fetch in every advertised version returns them as Kafka batches.
#[tokio::test]
async fn produce_and_fetch_in_every_version() {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{FetchRequest, InitProducerIdRequest, ProduceRequest};
    use kafka_protocol::records::RecordBatchDecoder;

    let server = kafka_server().await;
    topic_with_records(&server, "orders", 1, &[]).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let mut expected = Vec::new();
    for version in 3..=11 {
        let values: Vec<String> = (0..2).map(|i| format!("v{version}-{i}")).collect();
        let request = produce_request("orders", kafka_batch(&values, None));
        let response = connection.call::<ProduceRequest>(version, &request).await;
        let partition = &response.responses[0].partition_responses[0];
        assert_eq!(partition.error_code, 0, "v{version}");
        assert_eq!(partition.base_offset, expected.len() as i64, "v{version}");
        expected.extend(values);
    }
    // An idempotent producer's batch, sent twice, lands once.
    let init = connection
        .call::<InitProducerIdRequest>(4, &InitProducerIdRequest::default())
        .await;
    assert_eq!(init.error_code, 0);
    let idempotent = kafka_batch(&["once".to_string()], Some((init.producer_id.0, 0)));
    for _ in 0..2 {
        let response = connection
            .call::<ProduceRequest>(9, &produce_request("orders", idempotent.clone()))
            .await;
        assert_eq!(
            response.responses[0].partition_responses[0].base_offset,
            expected.len() as i64
        );
    }
    expected.push("once".into());
    for version in 4..=12 {
        let request = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("orders")))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)])]);
        let response = connection.call::<FetchRequest>(version, &request).await;
        let partition = &response.responses[0].partitions[0];
        assert_eq!(partition.error_code, 0, "v{version}");
        assert_eq!(partition.high_watermark, expected.len() as i64);
        let mut records = partition.records.clone().expect("records");
        let values: Vec<String> = RecordBatchDecoder::decode_all(&mut records)
            .expect("Kafka batches")
            .into_iter()
            .flat_map(|set| set.records)
            .map(|record| String::from_utf8(record.value.unwrap().to_vec()).unwrap())
            .collect();
        assert_eq!(values, expected, "v{version}");
    }
}

/// InitProducerId in every advertised version: a fresh id each time, epoch 0; a transactional
/// id keeps its producer id and gets the next epoch each time (which fences the previous
/// instance); a transaction timeout above the limit is INVALID_TRANSACTION_TIMEOUT.
#[tokio::test]
async fn init_producer_id_in_every_version() {
    use kafka_protocol::messages::{InitProducerIdRequest, TransactionalId};
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let mut ids = Vec::new();
    for version in 0..=4 {
        let response = connection
            .call::<InitProducerIdRequest>(version, &InitProducerIdRequest::default())
            .await;
        assert_eq!(
            (response.error_code, response.producer_epoch),
            (0, 0),
            "v{version}"
        );
        ids.push(response.producer_id.0);
    }
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(unique, ids);
    let transactional = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx"))))
        .with_transaction_timeout_ms(60_000);
    let mut granted = Vec::new();
    for version in 0..=4 {
        let response = connection
            .call::<InitProducerIdRequest>(version, &transactional)
            .await;
        assert_eq!(response.error_code, 0, "v{version}");
        granted.push((response.producer_id.0, response.producer_epoch));
    }
    let first = granted[0].0;
    assert!(!ids.contains(&first), "a producer id of its own");
    assert_eq!(
        granted,
        (0..=4).map(|epoch| (first, epoch)).collect::<Vec<_>>(),
        "one producer id, the epoch bumped by each instance"
    );
    let too_long = transactional.with_transaction_timeout_ms(3_600_000);
    let response = connection.call::<InitProducerIdRequest>(4, &too_long).await;
    assert_eq!(response.error_code, 50, "INVALID_TRANSACTION_TIMEOUT");
}

/// A restarted server keeps a Kafka idempotent producer's state (a retry of its last batch is
/// still answered with the first offset, not appended again) and the committed offsets.
#[tokio::test]
async fn producer_state_and_committed_offsets_survive_a_restart() {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::{
        GroupId, InitProducerIdRequest, OffsetCommitRequest, OffsetFetchRequest, ProduceRequest,
    };

    let server = kafka_server().await;
    topic_with_records(&server, "orders", 1, &[]).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let init = connection
        .call::<InitProducerIdRequest>(4, &InitProducerIdRequest::default())
        .await;
    let batch = kafka_batch(&["a".into(), "b".into()], Some((init.producer_id.0, 0)));
    let first = connection
        .call::<ProduceRequest>(9, &produce_request("orders", batch.clone()))
        .await;
    assert_eq!(first.responses[0].partition_responses[0].base_offset, 0);
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("billing")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("orders")))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(2)])]);
    let committed = connection.call::<OffsetCommitRequest>(8, &commit).await;
    assert_eq!(committed.topics[0].partitions[0].error_code, 0);
    drop(connection);

    let server = server.restart().await.expect("restart");
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let retry = connection
        .call::<ProduceRequest>(9, &produce_request("orders", batch))
        .await;
    let partition = &retry.responses[0].partition_responses[0];
    assert_eq!((partition.error_code, partition.base_offset), (0, 0));
    let fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("billing")))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("orders")))
            .with_partition_indexes(vec![0])]));
    let fetched = connection.call::<OffsetFetchRequest>(7, &fetch).await;
    assert_eq!(fetched.topics[0].partitions[0].committed_offset, 2);
    let client = Client::connect(server.addr()).await.expect("connect");
    assert_eq!(
        client.list_offsets("orders", 0).await.unwrap().latest,
        2,
        "the retry after the restart appended nothing"
    );
}

/// A Kafka idempotent producer's retry of a batch it wrote before the partition's first lease
/// grant (its answer was lost) gets the batch's original offset, not INVALID_PRODUCER_EPOCH,
/// and appends nothing; its *new* batches are refused with INVALID_PRODUCER_EPOCH (not written).
#[tokio::test]
async fn an_idempotent_retry_across_the_first_lease_grant_gets_its_offset() {
    use kafka_protocol::messages::{InitProducerIdRequest, ProduceRequest};

    let server = kafka_server().await;
    topic_with_records(&server, "orders", 1, &[]).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let init = connection
        .call::<InitProducerIdRequest>(4, &InitProducerIdRequest::default())
        .await;
    let batch = kafka_batch(&["a".into(), "b".into()], Some((init.producer_id.0, 0)));
    let first = connection
        .call::<ProduceRequest>(9, &produce_request("orders", batch.clone()))
        .await;
    assert_eq!(first.responses[0].partition_responses[0].base_offset, 0);
    let client = Client::connect(server.addr()).await.expect("connect");
    client
        .acquire_lease("orders", 0, "owner", std::time::Duration::from_secs(30))
        .await
        .expect("lease");
    let retry = connection
        .call::<ProduceRequest>(9, &produce_request("orders", batch))
        .await;
    let partition = &retry.responses[0].partition_responses[0];
    assert_eq!((partition.error_code, partition.base_offset), (0, 0));
    let next = kafka_batch(&["c".into()], Some((init.producer_id.0, 2)));
    let refused = connection
        .call::<ProduceRequest>(9, &produce_request("orders", next))
        .await;
    assert_eq!(
        refused.responses[0].partition_responses[0].error_code, 47,
        "INVALID_PRODUCER_EPOCH"
    );
    assert_eq!(client.list_offsets("orders", 0).await.unwrap().latest, 2);
}

/// A transactional batch from a producer that named no transactional id is refused
/// (`TRANSACTIONAL_ID_AUTHORIZATION_FAILED`, 53) and nothing lands: in the log it would open a
/// transaction no marker closes, and read_committed readers would stop there for good.
#[tokio::test]
async fn a_transactional_batch_without_a_transactional_id_is_refused() {
    use kafka_protocol::messages::{InitProducerIdRequest, ProduceRequest};

    let server = kafka_server().await;
    topic_with_records(&server, "orders", 1, &[]).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let init = connection
        .call::<InitProducerIdRequest>(4, &InitProducerIdRequest::default())
        .await;
    let mut record =
        crate::support::kafka::kafka_record(0, "k", "v", Some((init.producer_id.0, 0)));
    record.transactional = true;
    let batch = crate::support::kafka::kafka_batch_of(
        &[record],
        kafka_protocol::records::Compression::None,
    );
    let response = connection
        .call::<ProduceRequest>(9, &produce_request("orders", batch))
        .await;
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, 53, "{partition:?}");
    let client = Client::connect(server.addr()).await.expect("connect");
    assert_eq!(client.list_offsets("orders", 0).await.unwrap().latest, 0);
    assert_still_serving(&server).await;
}

/// OffsetForLeaderEpoch in every advertised version, standalone: one leader epoch (0) for the
/// whole log, so any epoch asked ends at the log end; an unknown partition or topic is refused
/// per partition.
#[tokio::test]
async fn offset_for_leader_epoch_answers_the_log_end_in_every_version() {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::OffsetForLeaderEpochRequest;
    let server = kafka_server().await;
    topic_with_records(&server, "epochs", 1, &["a", "b", "c"]).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 2..=4 {
        let ask = |partition: i32, epoch: i32| {
            OffsetForLeaderPartition::default()
                .with_partition(partition)
                .with_current_leader_epoch(-1)
                .with_leader_epoch(epoch)
        };
        let request = OffsetForLeaderEpochRequest::default()
            .with_replica_id((-1).into())
            .with_topics(vec![
                OffsetForLeaderTopic::default()
                    .with_topic(name("epochs"))
                    .with_partitions(vec![ask(0, 0), ask(0, 7), ask(4, 0)]),
                OffsetForLeaderTopic::default()
                    .with_topic(name("nope"))
                    .with_partitions(vec![ask(0, 0)]),
            ]);
        let response = connection.call(version, &request).await;
        let answer: Vec<(i16, i32, i64)> = response.topics[0]
            .partitions
            .iter()
            .map(|p| (p.error_code, p.leader_epoch, p.end_offset))
            .collect();
        assert_eq!(
            answer,
            vec![(0, 0, 3), (0, 0, 3), (3, -1, -1)],
            "v{version}"
        );
        assert_eq!(response.topics[1].partitions[0].error_code, 3, "v{version}");
    }
}

/// `fetch.min.bytes`: a fetch asking for more bytes than the partition holds waits for more
/// records (here produced after it was sent, on another connection) rather than answering with
/// the few there are; `min_bytes` 1 answers at once with what is there.
#[tokio::test]
async fn fetch_waits_for_min_bytes() {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{FetchRequest, ProduceRequest};
    use kafka_protocol::records::RecordBatchDecoder;

    let server = kafka_server().await;
    topic_with_records(&server, "waits", 1, &[]).await;
    let mut producer = KafkaConnection::connect(server.kafka_addr()).await;
    let first = producer
        .call::<ProduceRequest>(
            9,
            &produce_request("waits", kafka_batch(&["a".into()], None)),
        )
        .await;
    assert_eq!(first.responses[0].partition_responses[0].error_code, 0);
    let fetch = |min_bytes: i32| {
        FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(20_000)
            .with_min_bytes(min_bytes)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("waits")))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)])])
    };
    let values_of = |response: &kafka_protocol::messages::FetchResponse| -> Vec<String> {
        let mut records = response.responses[0].partitions[0]
            .records
            .clone()
            .unwrap_or_default();
        RecordBatchDecoder::decode_all(&mut records)
            .expect("Kafka batches")
            .into_iter()
            .flat_map(|set| set.records)
            .map(|record| String::from_utf8(record.value.unwrap().to_vec()).unwrap())
            .collect()
    };
    let mut consumer = KafkaConnection::connect(server.kafka_addr()).await;
    let at_once = consumer.call::<FetchRequest>(12, &fetch(1)).await;
    assert_eq!(values_of(&at_once), vec!["a".to_string()]);

    let pending = consumer.send::<FetchRequest>(12, &fetch(2_000)).await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let big: Vec<String> = (0..4)
        .map(|i| format!("{i}-{}", "x".repeat(1_000)))
        .collect();
    let produced = producer
        .call::<ProduceRequest>(9, &produce_request("waits", kafka_batch(&big, None)))
        .await;
    assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);
    let waited = consumer.receive::<FetchRequest>(pending, 12).await;
    let values = values_of(&waited);
    assert_eq!(
        values.len(),
        5,
        "the fetch waited for min_bytes: {values:?}"
    );
}

/// ListTransactions in every advertised version (0..=1): a server no transactional producer has
/// used lists none, whatever the filters; an unknown state filter is echoed back (as Kafka does).
#[tokio::test]
async fn list_transactions_is_empty_in_every_version() {
    use kafka_protocol::messages::{ListTransactionsRequest, ProducerId};
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 0..=1i16 {
        let all = connection
            .call(version, &ListTransactionsRequest::default())
            .await;
        assert_eq!(all.error_code, 0, "v{version}");
        assert!(all.transaction_states.is_empty(), "v{version}");
        assert!(all.unknown_state_filters.is_empty(), "v{version}");
        let mut filtered = ListTransactionsRequest::default()
            .with_state_filters(vec![
                StrBytes::from_static_str("Ongoing"),
                StrBytes::from_static_str("Bogus"),
            ])
            .with_producer_id_filters(vec![ProducerId(7)]);
        if version >= 1 {
            filtered = filtered.with_duration_filter(60_000);
        }
        let response = connection.call(version, &filtered).await;
        assert_eq!(response.error_code, 0, "v{version}");
        assert!(response.transaction_states.is_empty(), "v{version}");
        assert_eq!(
            response.unknown_state_filters,
            vec![StrBytes::from_static_str("Bogus")],
            "v{version}"
        );
    }
    assert_still_serving(&server).await;
}

/// DeleteRecords in every advertised version (0..=2): the low watermark moves to the offset
/// (inside a batch too), ListOffsets earliest then answers it and a fetch below it is
/// OFFSET_OUT_OF_RANGE; it never moves back; -1 is the high watermark; past the high watermark,
/// unknown partitions and unknown topics are refused per partition, the others still run.
#[tokio::test]
async fn delete_records_moves_the_low_watermark_in_every_version() {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{DeleteRecordsRequest, FetchRequest};

    let server = kafka_server().await;
    let values: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 0..=2i16 {
        let topic = format!("trimmed-{version}");
        topic_with_records(&server, &topic, 2, &values).await;
        let ask = |partition: i32, offset: i64| {
            DeleteRecordsPartition::default()
                .with_partition_index(partition)
                .with_offset(offset)
        };
        let delete = |partitions: Vec<DeleteRecordsPartition>| {
            DeleteRecordsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![
                    DeleteRecordsTopic::default()
                        .with_name(name(&topic))
                        .with_partitions(partitions),
                    DeleteRecordsTopic::default()
                        .with_name(name("nope"))
                        .with_partitions(vec![ask(0, 0)]),
                ])
        };
        let request = delete(vec![
            ask(0, 5),
            ask(1, 1),
            ask(1, -1),
            ask(0, -2),
            ask(9, 0),
        ]);
        let response = connection.call(version, &request).await;
        let answers: Vec<(i32, i16, i64)> = response.topics[0]
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.error_code, p.low_watermark))
            .collect();
        let expected = vec![
            (0, 0, 5),  // inside the one batch of ten records
            (1, 1, -1), // the empty partition's high watermark is 0: out of range
            (1, 0, 0),  // -1: up to the high watermark (0)
            (0, 1, -1), // below -1: out of range
            (9, 3, -1), // no such partition
        ];
        assert_eq!(answers, expected, "v{version}");
        assert_eq!(response.topics[1].partitions[0].error_code, 3, "v{version}");

        let earliest = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name(&topic))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(-2)])]);
        let offsets = connection.call(1, &earliest).await;
        assert_eq!(offsets.topics[0].partitions[0].offset, 5, "v{version}");

        let fetch = |offset: i64| {
            FetchRequest::default()
                .with_replica_id(kafka_protocol::messages::BrokerId(-1))
                .with_max_wait_ms(0)
                .with_min_bytes(1)
                .with_max_bytes(1 << 20)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(name(&topic))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20)])])
        };
        let below = connection.call(11, &fetch(0)).await;
        assert_eq!(below.responses[0].partitions[0].error_code, 1, "v{version}");
        let at = connection.call(11, &fetch(5)).await;
        let partition = &at.responses[0].partitions[0];
        assert_eq!(partition.error_code, 0, "v{version}");
        assert_eq!(partition.log_start_offset, 5, "v{version}");
        assert!(partition.records.as_ref().is_some_and(|r| !r.is_empty()));

        let back = connection.call(version, &delete(vec![ask(0, 2)])).await;
        assert_eq!(
            (
                back.topics[0].partitions[0].error_code,
                back.topics[0].partitions[0].low_watermark
            ),
            (0, 5),
            "v{version}: never back"
        );
        let all = connection.call(version, &delete(vec![ask(0, -1)])).await;
        assert_eq!(all.topics[0].partitions[0].low_watermark, 10, "v{version}");
    }
    assert_still_serving(&server).await;
}

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
