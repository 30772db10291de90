//! Adding partitions to a topic (native `CreatePartitions`, key 18) on a standalone server: the
//! new partitions are served at once and survive a restart, partitions are only ever added,
//! and a grow interrupted before `topic.json` recorded it leaves a topic that opens as it was.

use crate::support::doc_examples;

use std::time::Duration;

use crate::support::batch;
use doc_examples::*;
use fencelog::client::{Client, ClientError};
use fencelog::domain::TopicConfig;
use fencelog::protocol::{ApiKey, ErrorCode, Request, RequestFrame, Response, ResponseFrame};
use fencelog::testing::TestServer;

#[test]
fn doc_example_create_partitions() {
    // Proves: the CreatePartitions example of docs/protocol.md is what the encoder writes and
    // the decoder reads, request and response, and the key is 18.
    let request = RequestFrame::new(
        17,
        Request::CreatePartitions {
            name: "orders".into(),
            partition_count: 6,
            validate_only: false,
        },
    );
    assert_eq!(request.request.api_key(), ApiKey::CreatePartitions);
    assert_eq!(ApiKey::CreatePartitions.as_u16(), 18);
    let body = check_doc_example(
        "CreatePartitions request",
        encode_request(&request),
        "00 00 00 15 00 12 00 00 00 00 00 11 00 06 6f 72\n\
         64 65 72 73 00 00 00 06 00",
    );
    assert_eq!(RequestFrame::decode(body), Ok(request));

    let response = ResponseFrame::ok(17, Response::CreatePartitions { partition_count: 6 });
    let body = check_doc_example(
        "CreatePartitions response",
        encode_response(&response),
        "00 00 00 0a 00 00 00 11 00 00 00 00 00 06",
    );
    assert_eq!(
        ResponseFrame::decode(ApiKey::CreatePartitions, body).unwrap(),
        response
    );
}

#[test]
fn a_validate_only_other_than_zero_or_one_is_a_malformed_request() {
    // Proves: `validate_only` 2 is refused by the decoder (the server answers INVALID_REQUEST).
    let mut bytes = from_hex(
        "00 00 00 15 00 12 00 00 00 00 00 11 00 06 6f 72\n\
         64 65 72 73 00 00 00 06 02",
    );
    let body = bytes.split_off(4);
    assert!(RequestFrame::decode(body.into()).is_err());
}

fn assert_invalid<T: std::fmt::Debug>(result: Result<T, ClientError>, what: &str) {
    match result {
        Err(ClientError::Server {
            code: ErrorCode::InvalidConfig,
            message,
        }) => assert!(message.contains("partition"), "{what}: {message}"),
        other => panic!("{what}: expected INVALID_CONFIG, got {other:?}"),
    }
}

#[tokio::test]
async fn a_grown_topic_serves_its_new_partitions_at_once_and_after_a_restart() {
    // Proves: growing a 3-partition topic to 6 lists 6 partitions in Metadata at once; partition
    // 5 takes a write and serves it back; the same count, a smaller one, one above the limit
    // and an unknown topic are refused (nothing changes); after a restart the topic opens with
    // 6 partitions and partition 5 still holds its record.
    let server = TestServer::start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("grown", 3, TopicConfig::default())
        .await
        .unwrap();
    assert_eq!(client.create_partitions("grown", 6).await.unwrap(), 6);
    let topics = client.metadata(&["grown"]).await.unwrap();
    assert_eq!(topics[0].partitions, 6);
    let lease = client
        .acquire_lease("grown", 5, "writer", Duration::from_secs(30))
        .await
        .unwrap();
    client
        .produce("grown", 5, batch(lease.epoch, "five"))
        .await
        .unwrap();
    let fetched = client
        .fetch("grown", 5, 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(fetched.records[0].value.as_deref(), Some(&b"five"[..]));

    assert_invalid(client.create_partitions("grown", 6).await, "same count");
    assert_invalid(client.create_partitions("grown", 4).await, "shrink");
    assert_invalid(
        client
            .create_partitions("grown", fencelog::broker::MAX_PARTITIONS_PER_TOPIC + 1)
            .await,
        "above the limit",
    );
    assert!(matches!(
        client.create_partitions("missing", 2).await,
        Err(ClientError::Server {
            code: ErrorCode::UnknownTopic,
            ..
        })
    ));
    assert_eq!(
        server.broker().topic("grown").unwrap().partitions().len(),
        6
    );

    drop(client);
    let server = server.restart().await.unwrap();
    assert_eq!(
        server.broker().topic("grown").unwrap().partitions().len(),
        6
    );
    let client = Client::connect(server.addr()).await.unwrap();
    let fetched = client
        .fetch("grown", 5, 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(fetched.records[0].value.as_deref(), Some(&b"five"[..]));
}

#[tokio::test]
async fn a_grow_interrupted_before_topic_json_leaves_the_topic_as_it_was() {
    // Proves: the crash window of a grow (new partition directories created, `topic.json` not
    // yet rewritten) leaves a topic that opens with its old count, and the next grow reuses
    // the leftover directories and succeeds.
    let server = TestServer::start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("interrupted", 2, TopicConfig::default())
        .await
        .unwrap();
    drop(client);
    let topic_dir = server.data_dir().join("topics").join("interrupted");
    for leftover in ["2", "3"] {
        std::fs::create_dir_all(topic_dir.join(leftover)).unwrap();
    }
    let server = server.restart().await.unwrap();
    assert_eq!(
        server
            .broker()
            .topic("interrupted")
            .unwrap()
            .partitions()
            .len(),
        2
    );
    let client = Client::connect(server.addr()).await.unwrap();
    assert_eq!(client.create_partitions("interrupted", 4).await.unwrap(), 4);
    client
        .produce("interrupted", 3, batch(0, "after"))
        .await
        .expect_err("epoch 0 is granted to nobody standalone");
    let lease = client
        .acquire_lease("interrupted", 3, "writer", Duration::from_secs(30))
        .await
        .unwrap();
    client
        .produce("interrupted", 3, batch(lease.epoch, "after"))
        .await
        .unwrap();
}

#[test]
fn new_partitions_of_a_recreated_topic_start_above_the_deleted_ones_floor() {
    // Proves: a topic re-created under a deleted name (whose partitions reached epoch 5) and
    // then grown gives its new partitions the same creation epoch 6 as its first ones, so a
    // holder of the deleted topic's partition 1 is fenced there too; the grow survives a
    // reopen of the data directory.
    let data = tempfile::tempdir().unwrap();
    let broker = fencelog::broker::Broker::open(data.path()).unwrap();
    broker
        .create_topic("orders", 2, TopicConfig::default())
        .unwrap();
    broker
        .partition("orders", 1)
        .unwrap()
        .install_epoch(5)
        .unwrap();
    broker.delete_topic("orders").unwrap().remove_files();
    broker
        .create_topic("orders", 1, TopicConfig::default())
        .unwrap();
    let grown = broker.add_partitions("orders", 3).unwrap();
    assert_eq!(grown.partitions().len(), 3);
    for partition in 0..3 {
        assert_eq!(
            broker
                .partition("orders", partition)
                .unwrap()
                .current_epoch(),
            6,
            "partition {partition}"
        );
    }
    drop(grown);
    drop(broker);
    let broker = fencelog::broker::Broker::open(data.path()).unwrap();
    assert_eq!(broker.topic("orders").unwrap().partitions().len(), 3);
    assert_eq!(broker.partition("orders", 2).unwrap().current_epoch(), 6);
}
