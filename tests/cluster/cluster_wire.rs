//! The cluster on the native wire: `Metadata` version 1, `Produce` version 1 (`acks`),
//! `CreateTopic` version 1 (replication factor), `ReplicaFetch` (key 15), `LeaderEpochEnd`
//! (key 16) and the error codes 35..=41, with the `NOT_LEADER` leader hint.
//!
//! Three kinds of checks: the worked hex examples of `docs/protocol.md` are exactly what the
//! encoder writes and decode back to the same values; every new message round-trips and every
//! truncation of it is a typed error; and a standalone server answers the new requests as the
//! document says (one broker leading everything in leader epoch 0, `CLUSTER_REQUIRED` for what
//! needs a cluster).

use crate::support::doc_examples;
use crate::support::raw_protocol;

use bytes::{Bytes, BytesMut};
use fencelog::batch::BatchBuilder;
use fencelog::broker::BrokerConfig;
use fencelog::protocol::{
    Acks, ApiKey, BrokerMetadata, ClusterMetadata, EpochEnd, ErrorCode, ErrorDetails,
    ErrorResponse, LeaderEpochEndPartition, LeaderEpochQuery, PartitionMetadata, ProtocolError,
    ReplicaFetch, ReplicaFetchPartition, ReplicaFetchedPartition, Replication, Request,
    RequestDecodeErrorKind, RequestFrame, Response, ResponseFrame, TopicConfig, TopicMetadata,
    FRAME_LENGTH_BYTES,
};
use fencelog::server::ServerConfig;
use fencelog::testing::TestServer;

use doc_examples::{check_doc_example, encode_request, encode_response, PROTOCOL_DOC};
use raw_protocol::RawClient;

/// The batch of the document's idempotent-produce example (magic 3, producer 1000, lease epoch
/// 4, one record `hi`).
fn example_batch() -> Bytes {
    let mut builder = BatchBuilder::with_producer(4, 1000, 0);
    builder.push(1_700_000_000_000, None, Some(b"hi"));
    builder.finish_with_sequence(0)
}

fn orders_metadata() -> TopicMetadata {
    TopicMetadata {
        name: "orders".into(),
        partitions: 1,
        config: TopicConfig::default(),
    }
}

/// The request frames of the document's examples, by name.
fn example_requests() -> Vec<(&'static str, RequestFrame)> {
    vec![
        (
            "Metadata v1 request",
            RequestFrame::new(
                30,
                Request::Metadata {
                    topics: vec!["orders".into()],
                    cluster: true,
                },
            ),
        ),
        (
            "Produce v1 request",
            RequestFrame::new(
                31,
                Request::Produce {
                    topic: "orders".into(),
                    partition: 0,
                    batch: example_batch(),
                    acks: Some(Acks::All),
                },
            ),
        ),
        (
            "CreateTopic v1 request",
            RequestFrame::new(
                32,
                Request::CreateTopic {
                    name: "orders".into(),
                    partitions: 3,
                    config: TopicConfig::default(),
                    replication: Some(Replication {
                        factor: 3,
                        min_insync: Some(2),
                    }),
                },
            ),
        ),
        (
            "ReplicaFetch request",
            RequestFrame::new(
                34,
                Request::ReplicaFetch(ReplicaFetch {
                    follower: 2,
                    follower_incarnation: 0x1122334455667788,
                    leader_epoch: 5,
                    max_wait_ms: 500,
                    min_bytes: 1,
                    max_bytes: 1_048_576,
                    partitions: vec![ReplicaFetchPartition {
                        topic: "orders".into(),
                        partition: 3,
                        fetch_offset: 42,
                        log_end_offset: None,
                    }],
                }),
            ),
        ),
        (
            "ReplicaFetch v1 request",
            RequestFrame::new(
                36,
                Request::ReplicaFetch(ReplicaFetch {
                    follower: 2,
                    follower_incarnation: 0x1122334455667788,
                    leader_epoch: 5,
                    max_wait_ms: 500,
                    min_bytes: 1,
                    max_bytes: 1_048_576,
                    partitions: vec![ReplicaFetchPartition {
                        topic: "orders".into(),
                        partition: 3,
                        fetch_offset: 64,
                        log_end_offset: Some(42),
                    }],
                }),
            ),
        ),
        (
            "LeaderEpochEnd request",
            RequestFrame::new(
                35,
                Request::LeaderEpochEnd {
                    partitions: vec![LeaderEpochQuery {
                        topic: "orders".into(),
                        partition: 3,
                        current_leader_epoch: 5,
                        epoch: 4,
                    }],
                },
            ),
        ),
    ]
}

/// The response frames of the document's examples, by name, with the API and version of the
/// request they answer.
fn example_responses() -> Vec<(&'static str, ApiKey, u16, ResponseFrame)> {
    vec![
        (
            "Metadata v1 response",
            ApiKey::Metadata,
            1,
            ResponseFrame::ok(
                30,
                Response::Metadata {
                    topics: vec![orders_metadata()],
                    cluster: Some(ClusterMetadata {
                        brokers: vec![BrokerMetadata {
                            node_id: 0,
                            address: "127.0.0.1:7171".into(),
                        }],
                        partitions: vec![PartitionMetadata {
                            topic: "orders".into(),
                            partition: 0,
                            leader: Some(0),
                            leader_epoch: 0,
                            replicas: vec![0],
                            isr: vec![0],
                            high_watermark: 42,
                        }],
                    }),
                },
            ),
        ),
        (
            "NOT_LEADER response",
            ApiKey::Produce,
            1,
            ResponseFrame::error(
                31,
                ErrorResponse::not_leader("orders", 3, Some((2, "127.0.0.1:7002".into())), 5),
            ),
        ),
        (
            "CLUSTER_REQUIRED response",
            ApiKey::CreateTopic,
            1,
            ResponseFrame::error(
                32,
                ErrorResponse::new(ErrorCode::ClusterRequired, "needs a cluster"),
            ),
        ),
        (
            "ReplicaFetch response",
            ApiKey::ReplicaFetch,
            0,
            ResponseFrame::ok(
                34,
                Response::ReplicaFetch {
                    partitions: vec![ReplicaFetchedPartition {
                        topic: "orders".into(),
                        partition: 3,
                        error: ErrorCode::None,
                        high_watermark: 40,
                        log_start_offset: 0,
                        records_epoch: 5,
                        batches: vec![Bytes::from_static(b"BATCHES!")],
                    }],
                },
            ),
        ),
        (
            "LeaderEpochEnd response",
            ApiKey::LeaderEpochEnd,
            0,
            ResponseFrame::ok(
                35,
                Response::LeaderEpochEnd {
                    partitions: vec![LeaderEpochEndPartition {
                        topic: "orders".into(),
                        partition: 3,
                        error: ErrorCode::None,
                        end: Some(EpochEnd {
                            epoch: 4,
                            end_offset: 37,
                        }),
                    }],
                },
            ),
        ),
    ]
}

/// The hex blocks the document shows for the examples, in the order of the lists above.
const EXAMPLE_HEX: [&str; 11] = [
    // Metadata v1 request
    "00 00 00 12 00 02 00 01 00 00 00 1e 00 01 00 06\n\
         6f 72 64 65 72 73",
    // Produce v1 request
    "00 00 00 6e 00 06 00 01 00 00 00 1f 00 06 6f 72\n\
         64 65 72 73 00 00 00 00 00 00 00 54 00 00 00 00\n\
         00 00 00 00 00 00 00 54 8a c9 be 16 03 00 00 00\n\
         00 00 00 00 00 00 00 04 00 00 00 01 00 00 01 8b\n\
         cf e5 68 00 00 00 01 8b cf e5 68 00 00 00 00 00\n\
         00 00 03 e8 00 00 00 00 00 00 00 00 00 00 00 10\n\
         00 00 00 00 ff ff ff ff 00 00 00 02 68 69 00 00\n\
         ff ff",
    // CreateTopic v1 request
    "00 00 00 39 00 01 00 01 00 00 00 20 00 06 6f 72\n\
         64 65 72 73 00 00 00 03 00 00 00 00 04 00 00 00\n\
         02 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00\n\
         00 00 00 00 00 00 00 00 00 00 03 00 02",
    // ReplicaFetch request
    "00 00 00 3c 00 0f 00 00 00 00 00 22 00 00 00 02\n\
         11 22 33 44 55 66 77 88 00 00 00 05 00 00 01 f4\n\
         00 00 00 01 00 10 00 00 00 00 00 01 00 06 6f 72\n\
         64 65 72 73 00 00 00 03 00 00 00 00 00 00 00 2a",
    // ReplicaFetch v1 request
    "00 00 00 44 00 0f 00 01 00 00 00 24 00 00 00 02\n\
         11 22 33 44 55 66 77 88 00 00 00 05 00 00 01 f4\n\
         00 00 00 01 00 10 00 00 00 00 00 01 00 06 6f 72\n\
         64 65 72 73 00 00 00 03 00 00 00 00 00 00 00 40\n\
         00 00 00 00 00 00 00 2a",
    // LeaderEpochEnd request
    "00 00 00 20 00 10 00 00 00 00 00 23 00 00 00 01\n\
         00 06 6f 72 64 65 72 73 00 00 00 03 00 00 00 05\n\
         00 00 00 04",
    // Metadata v1 response
    "00 00 00 7b 00 00 00 1e 00 00 00 00 00 01 00 06\n\
         6f 72 64 65 72 73 00 00 00 01 00 00 00 00 04 00\n\
         00 00 02 00 00 00 00 00 00 00 00 00 00 00 00 00\n\
         00 00 00 00 00 00 00 00 00 00 00 00 00 00 01 00\n\
         00 00 00 00 0e 31 32 37 2e 30 2e 30 2e 31 3a 37\n\
         31 37 31 00 00 00 01 00 06 6f 72 64 65 72 73 00\n\
         00 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00\n\
         00 00 01 00 00 00 00 00 00 00 00 00 00 00 2a",
    // NOT_LEADER response
    "00 00 00 7b 00 00 00 1f 00 23 00 4b 6e 6f 74 20\n\
         74 68 65 20 6c 65 61 64 65 72 20 6f 66 20 6f 72\n\
         64 65 72 73 2f 33 3a 20 6e 6f 64 65 20 32 20 61\n\
         74 20 31 32 37 2e 30 2e 30 2e 31 3a 37 30 30 32\n\
         20 6c 65 61 64 73 20 28 6c 65 61 64 65 72 20 65\n\
         70 6f 63 68 20 35 29 00 00 00 00 00 00 00 00 00\n\
         00 00 00 00 00 00 00 00 00 00 02 00 0e 31 32 37\n\
         2e 30 2e 30 2e 31 3a 37 30 30 32 00 00 00 05",
    // CLUSTER_REQUIRED response
    "00 00 00 27 00 00 00 20 00 29 00 0f 6e 65 65 64\n\
         73 20 61 20 63 6c 75 73 74 65 72 00 00 00 00 00\n\
         00 00 00 00 00 00 00 00 00 00 00",
    // ReplicaFetch response
    "00 00 00 38 00 00 00 22 00 00 00 00 00 01 00 06\n\
         6f 72 64 65 72 73 00 00 00 03 00 00 00 00 00 00\n\
         00 00 00 28 00 00 00 00 00 00 00 00 00 00 00 05\n\
         00 00 00 08 42 41 54 43 48 45 53 21",
    // LeaderEpochEnd response
    "00 00 00 24 00 00 00 23 00 00 00 00 00 01 00 06\n\
         6f 72 64 65 72 73 00 00 00 03 00 00 00 00 00 04\n\
         00 00 00 00 00 00 00 25",
];

#[test]
fn the_documents_cluster_examples_are_what_the_codec_writes_and_reads() {
    // Proves: every hex block of the cluster examples in docs/protocol.md is exactly the
    // encoder's output, and decodes back to the value it was made from.
    let requests = example_requests();
    let (request_hex, response_hex) = EXAMPLE_HEX.split_at(requests.len());
    for ((name, frame), hex) in requests.into_iter().zip(request_hex) {
        let body = check_doc_example(name, encode_request(&frame), hex);
        assert_eq!(RequestFrame::decode(body), Ok(frame), "{name}");
    }
    for ((name, api, version, frame), hex) in example_responses().into_iter().zip(response_hex) {
        let bytes = encode_response(&frame);
        // The server writes responses vectored (a ReplicaFetch's batches as they are): the
        // same bytes.
        let mut parts = Vec::new();
        frame
            .encode_vectored(&mut BytesMut::new(), &mut parts)
            .expect("encodable response");
        assert_eq!(parts.concat(), &bytes[..], "{name} vectored");
        let body = check_doc_example(name, bytes, hex);
        assert_eq!(
            ResponseFrame::decode_version(api, version, body).unwrap(),
            frame,
            "{name}"
        );
    }
}

#[test]
fn every_truncation_of_a_cluster_message_is_a_typed_error() {
    // Proves: cutting any new request or response anywhere gives a typed error (never a panic,
    // never a wrong value): `Truncated` with the correlation id for a request, `Malformed` for a
    // response whose header was read.
    for (name, frame) in example_requests() {
        let bytes = encode_request(&frame).freeze();
        let body = bytes.slice(FRAME_LENGTH_BYTES..);
        for cut in 8..body.len() {
            let error = RequestFrame::decode(body.slice(..cut)).unwrap_err();
            assert_eq!(
                error.kind,
                RequestDecodeErrorKind::Truncated,
                "{name} cut at {cut}"
            );
            assert_eq!(error.correlation_id, Some(frame.correlation_id));
        }
    }
    for (name, api, version, frame) in example_responses() {
        let bytes = encode_response(&frame).freeze();
        let body = bytes.slice(FRAME_LENGTH_BYTES..);
        // An error body may end after `current_epoch` (an older server): only cuts inside the
        // common fields or inside the details are malformed.
        for cut in 6..body.len() {
            match ResponseFrame::decode_version(api, version, body.slice(..cut)) {
                Err(ProtocolError::Malformed(_)) => {}
                Ok(decoded) if frame.result.is_err() => {
                    assert!(
                        decoded.result.unwrap_err().details.is_none(),
                        "{name} {cut}"
                    );
                }
                other => panic!("{name} cut at {cut}: {other:?}"),
            }
        }
    }
}

#[test]
fn cluster_messages_round_trip_with_every_optional_field() {
    // Proves: the sentinels (no leader, no epoch end) and the version-0 forms survive a round
    // trip, and the version follows from the optional fields.
    let responses = [
        (
            ApiKey::Metadata,
            0,
            Response::Metadata {
                topics: vec![orders_metadata()],
                cluster: None,
            },
        ),
        (
            ApiKey::Metadata,
            1,
            Response::Metadata {
                topics: vec![],
                cluster: Some(ClusterMetadata {
                    brokers: vec![],
                    partitions: vec![PartitionMetadata {
                        topic: "t".into(),
                        partition: 9,
                        leader: None,
                        leader_epoch: 7,
                        replicas: vec![1, 2, 3],
                        isr: vec![],
                        high_watermark: u64::MAX,
                    }],
                }),
            },
        ),
        (
            ApiKey::LeaderEpochEnd,
            0,
            Response::LeaderEpochEnd {
                partitions: vec![LeaderEpochEndPartition {
                    topic: "t".into(),
                    partition: 1,
                    error: ErrorCode::NotLeader,
                    end: None,
                }],
            },
        ),
    ];
    for (api, version, response) in responses {
        let frame = ResponseFrame::ok(3, response);
        let body = encode_response(&frame).freeze().slice(FRAME_LENGTH_BYTES..);
        assert_eq!(
            ResponseFrame::decode_version(api, version, body).unwrap(),
            frame
        );
    }
    let unknown_leader = ResponseFrame::error(4, ErrorResponse::not_leader("t", 0, None, 3));
    let body = encode_response(&unknown_leader)
        .freeze()
        .slice(FRAME_LENGTH_BYTES..);
    let decoded = ResponseFrame::decode(ApiKey::Fetch, body).unwrap();
    assert_eq!(decoded, unknown_leader);
    let error = decoded.result.unwrap_err();
    assert!(error.message.contains("no leader is known"), "{error}");
    assert_eq!(
        error.details,
        Some(ErrorDetails::NotLeader {
            leader: None,
            address: String::new(),
            leader_epoch: 3
        })
    );
    for (request, version) in [
        (
            Request::Metadata {
                topics: vec![],
                cluster: false,
            },
            0,
        ),
        (
            Request::Produce {
                topic: "t".into(),
                partition: 0,
                batch: Bytes::from_static(b"b"),
                acks: Some(Acks::Leader),
            },
            1,
        ),
        (
            Request::CreateTopic {
                name: "t".into(),
                partitions: 1,
                config: TopicConfig::default(),
                replication: Some(Replication {
                    factor: 1,
                    min_insync: None,
                }),
            },
            1,
        ),
    ] {
        assert_eq!(request.api_version(), version, "{request:?}");
        let frame = RequestFrame::new(5, request);
        let body = encode_request(&frame).freeze().slice(FRAME_LENGTH_BYTES..);
        assert_eq!(RequestFrame::decode(body), Ok(frame));
    }
}

#[test]
fn a_produce_with_acks_zero_or_a_replica_list_too_long_is_refused_typed() {
    // Proves: out-of-domain values are typed decoding errors: `acks` 0 (not offered) and a
    // node list longer than the protocol allows.
    let frame = RequestFrame::new(
        6,
        Request::Produce {
            topic: "t".into(),
            partition: 0,
            batch: Bytes::from_static(b"b"),
            acks: Some(Acks::All),
        },
    );
    let mut bytes = encode_request(&frame).to_vec();
    let last = bytes.len();
    bytes[last - 2..].copy_from_slice(&0u16.to_be_bytes());
    let error = RequestFrame::decode(Bytes::from(bytes).slice(FRAME_LENGTH_BYTES..)).unwrap_err();
    assert!(
        matches!(error.kind, RequestDecodeErrorKind::Invalid(_)),
        "{error}"
    );
    assert!(error.detail.contains("acks 0 is not offered"), "{error}");

    let too_many = ResponseFrame::ok(
        7,
        Response::Metadata {
            topics: vec![],
            cluster: Some(ClusterMetadata {
                brokers: vec![],
                partitions: vec![PartitionMetadata {
                    topic: "t".into(),
                    partition: 0,
                    leader: None,
                    leader_epoch: 0,
                    replicas: vec![1; fencelog::protocol::MAX_REPLICA_LIST + 1],
                    isr: vec![],
                    high_watermark: 0,
                }],
            }),
        },
    );
    let mut buf = BytesMut::new();
    assert!(matches!(
        too_many.encode(&mut buf),
        Err(ProtocolError::Unencodable(_))
    ));
    assert!(buf.is_empty());
}

#[test]
fn the_documents_api_and_error_tables_list_the_cluster_additions() {
    // Proves: section 5's table lists keys 15 and 16 and the new versions, and section 7 lists
    // codes 35..=41 with the names and retriability the code has.
    for row in [
        "| 1         | `CreateTopic`  | 0–1",
        "| 2         | `Metadata`     | 0–1",
        "| 6         | `Produce`      | 0–1",
        "| 15        | `ReplicaFetch` | 0",
        "| 16        | `LeaderEpochEnd` | 0",
    ] {
        assert!(PROTOCOL_DOC.contains(row), "missing API row {row:?}");
    }
    for value in 35..=41u16 {
        let code = ErrorCode::from_u16(value).expect("a known code");
        let retriable = if code.is_retriable() { "yes" } else { "no" };
        let row_start = format!("| {value}   | `{}`", code.name());
        let row = PROTOCOL_DOC
            .lines()
            .find(|line| line.starts_with(&row_start))
            .unwrap_or_else(|| panic!("section 7 has no row for {value} {}", code.name()));
        let columns: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(columns[3], retriable, "{row}");
    }
}

/// A standalone server on an ephemeral port, as node 7.
async fn standalone() -> TestServer {
    let broker_config = BrokerConfig {
        node_id: 7,
        ..BrokerConfig::default()
    };
    TestServer::builder()
        .broker_config(broker_config)
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_standalone_server_describes_itself_as_a_one_broker_cluster() {
    // Proves: Metadata v1 from a standalone server lists one broker (its node id, its bound
    // address) leading every partition in leader epoch 0 with replicas = isr = [itself], and the
    // high watermark; version 0 is answered as before.
    let server = standalone().await;
    let mut client = RawClient::connect(server.addr()).await;
    client
        .create_topic("orders", 2, TopicConfig::default())
        .await
        .unwrap();
    let epoch = client.acquire("orders", 1).await.unwrap();
    let mut batch = BatchBuilder::new(epoch);
    batch.push(0, None, Some(b"a"));
    batch.push(0, None, Some(b"b"));
    client.produce("orders", 1, batch.finish()).await.unwrap();
    let v1 = client
        .call(Request::Metadata {
            topics: vec![],
            cluster: true,
        })
        .await
        .unwrap();
    let Response::Metadata {
        topics,
        cluster: Some(cluster),
    } = v1
    else {
        panic!("expected a version-1 answer, got {v1:?}");
    };
    assert_eq!(topics.len(), 1);
    assert_eq!(
        cluster.brokers,
        [BrokerMetadata {
            node_id: 7,
            address: server.addr().to_string()
        }]
    );
    let high_watermarks: Vec<(u32, u64)> = cluster
        .partitions
        .iter()
        .map(|partition| (partition.partition, partition.high_watermark))
        .collect();
    assert_eq!(high_watermarks, [(0, 0), (1, 2)]);
    for partition in &cluster.partitions {
        assert_eq!(partition.topic, "orders");
        assert_eq!(partition.leader, Some(7));
        assert_eq!(partition.leader_epoch, 0);
        assert_eq!(partition.replicas, [7]);
        assert_eq!(partition.isr, [7]);
    }
    let v0 = client
        .call(Request::Metadata {
            topics: vec![],
            cluster: false,
        })
        .await
        .unwrap();
    assert!(matches!(v0, Response::Metadata { cluster: None, .. }));
}

#[tokio::test]
async fn an_advertised_address_is_what_metadata_reports() {
    // Proves: `ServerConfig::advertised_addr` (serve --advertise) replaces the bound address.
    let config = ServerConfig {
        advertised_addr: Some("broker-0.example:7171".into()),
        ..ServerConfig::default()
    };
    let server = TestServer::builder()
        .server_config(config)
        .start()
        .await
        .unwrap();
    let mut client = RawClient::connect(server.addr()).await;
    let answer = client
        .call(Request::Metadata {
            topics: vec![],
            cluster: true,
        })
        .await
        .unwrap();
    let Response::Metadata {
        cluster: Some(cluster),
        ..
    } = answer
    else {
        panic!("expected a version-1 answer");
    };
    assert_eq!(cluster.brokers[0].address, "broker-0.example:7171");
    assert_eq!(cluster.brokers[0].node_id, 0);
}

#[tokio::test]
async fn a_standalone_server_refuses_what_needs_a_cluster_and_nothing_else() {
    // Proves: ReplicaFetch, LeaderEpochEnd and a replication factor above 1 get
    // CLUSTER_REQUIRED with a message saying what to do; factor 1 creates the topic; factor 0 or
    // min_insync above the factor is INVALID_CONFIG; the connection stays usable throughout.
    let server = standalone().await;
    let mut client = RawClient::connect(server.addr()).await;
    let create = |name: &str, factor, min_insync| Request::CreateTopic {
        name: name.into(),
        partitions: 1,
        config: TopicConfig::default(),
        replication: Some(Replication { factor, min_insync }),
    };
    let refused = client
        .call(create("replicated", 3, None))
        .await
        .unwrap_err();
    assert_eq!(refused.code, ErrorCode::ClusterRequired);
    assert!(
        refused
            .message
            .contains("replication factor 3 needs a cluster: start the brokers with --etcd"),
        "{refused}"
    );
    for (factor, min_insync) in [(0, None), (1, Some(2))] {
        let invalid = client
            .call(create("invalid", factor, min_insync))
            .await
            .unwrap_err();
        assert_eq!(invalid.code, ErrorCode::InvalidConfig, "{invalid}");
    }
    client.call(create("single", 1, Some(1))).await.unwrap();
    let fetch = Request::ReplicaFetch(ReplicaFetch {
        follower: 1,
        follower_incarnation: 9,
        leader_epoch: 0,
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes: 1024,
        partitions: vec![ReplicaFetchPartition {
            topic: "single".into(),
            partition: 0,
            fetch_offset: 0,
            log_end_offset: None,
        }],
    });
    let epoch_end = Request::LeaderEpochEnd {
        partitions: vec![LeaderEpochQuery {
            topic: "single".into(),
            partition: 0,
            current_leader_epoch: 0,
            epoch: 0,
        }],
    };
    for request in [fetch, epoch_end] {
        let refused = client.call(request).await.unwrap_err();
        assert_eq!(refused.code, ErrorCode::ClusterRequired);
        assert!(
            refused.message.contains("not part of a cluster"),
            "{refused}"
        );
    }
    let (_, latest, _) = client.list_offsets("single", 0).await;
    assert_eq!(latest, 0, "the connection still works");
}

#[tokio::test]
async fn a_standalone_server_appends_under_either_acks() {
    // Proves: Produce version 1 with acks all or leader appends as version 0 does on a
    // standalone server (the leader is the only replica).
    let server = standalone().await;
    let mut client = RawClient::connect(server.addr()).await;
    client
        .create_topic("orders", 1, TopicConfig::default())
        .await
        .unwrap();
    let epoch = client.acquire("orders", 0).await.unwrap();
    for (index, acks) in [Acks::All, Acks::Leader].into_iter().enumerate() {
        let mut batch = BatchBuilder::new(epoch);
        batch.push(0, None, Some(b"x"));
        let answer = client
            .call(Request::Produce {
                topic: "orders".into(),
                partition: 0,
                batch: batch.finish(),
                acks: Some(acks),
            })
            .await
            .unwrap();
        assert!(
            matches!(answer, Response::Produce { base_offset, .. } if base_offset == index as u64),
            "{answer:?}"
        );
    }
}

#[tokio::test]
async fn api_versions_lists_the_cluster_apis_and_versions() {
    // Proves: ApiVersions advertises keys 15 (version 1) and 16 (version 0) and version 1 of
    // CreateTopic, Metadata and Produce: exactly what is implemented and tested here.
    let server = standalone().await;
    let mut client = RawClient::connect(server.addr()).await;
    let Response::ApiVersions { apis, .. } = client.call(Request::ApiVersions).await.unwrap()
    else {
        panic!("expected ApiVersions");
    };
    let max = |key: ApiKey| {
        apis.iter()
            .find(|range| range.api_key == key.as_u16())
            .map(|range| range.max_version)
    };
    assert_eq!(max(ApiKey::CreateTopic), Some(1));
    assert_eq!(max(ApiKey::Metadata), Some(1));
    assert_eq!(max(ApiKey::Produce), Some(1));
    assert_eq!(max(ApiKey::ReplicaFetch), Some(1));
    assert_eq!(max(ApiKey::LeaderEpochEnd), Some(0));
}
