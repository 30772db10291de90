//! The Kafka listener, spoken to with requests encoded by `kafka-protocol`'s client-side
//! encoder: Metadata, ListOffsets and CreateTopics in every version they advertise, responses in
//! request order, and hostile input (short, truncated and oversized frames, a bad header,
//! unknown APIs and versions, counts far beyond the frame) that closes only the offending
//! connection. The other APIs' versions are sent by `kafka_api_versions.rs` (ApiVersions and
//! the handler list), `kafka_protocol_records.rs` (produce, fetch, producers, transactions'
//! reads, record deletion) and `kafka_protocol_admin.rs` (log dirs, producers, ACLs, KIP-848,
//! partitions); the helpers they share are here.

use crate::support::kafka;

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use fencelog::batch::BatchBuilder;
use fencelog::client::Client;
use fencelog::domain::TopicConfig;
use fencelog::server::KafkaConfig;
use fencelog::testing::TestServer;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, CreateTopicsRequest, ListOffsetsRequest, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use kafka::{kafka_batch_of, kafka_record, KafkaConnection, TIMEOUT};

pub(crate) async fn kafka_server() -> TestServer {
    TestServer::builder()
        .kafka()
        .start()
        .await
        .expect("start server")
}

/// Creates `topic` through the native client and appends `values` with timestamps 1000, 1001, …
pub(crate) async fn topic_with_records(
    server: &TestServer,
    topic: &str,
    partitions: u32,
    values: &[&str],
) {
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

pub(crate) fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// Asserts the server answers a fresh connection (it survived whatever the test sent).
pub(crate) async fn assert_still_serving(server: &TestServer) {
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let response = connection.call(0, &ApiVersionsRequest::default()).await;
    assert_eq!(response.error_code, 0);
}

/// Asserts `connection` still answers (it survived whatever the test sent on it).
pub(crate) async fn assert_still_open(connection: &mut KafkaConnection) {
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
pub(crate) fn kafka_batch(values: &[String], producer: Option<(i64, i32)>) -> Bytes {
    let records: Vec<_> = values
        .iter()
        .enumerate()
        .map(|(index, value)| kafka_record(index as i64, &format!("key-{value}"), value, producer))
        .collect();
    kafka_batch_of(&records, kafka_protocol::records::Compression::None)
}

pub(crate) fn produce_request(
    topic: &str,
    records: Bytes,
) -> kafka_protocol::messages::ProduceRequest {
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
