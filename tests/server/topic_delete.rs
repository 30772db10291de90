//! Deleting topics (native `DeleteTopic`, key 12) as a black box: the topic stops being served at
//! once everywhere, its files leave the data directory durably, its committed offsets go with
//! it, a leftover of an interrupted delete is purged on open, and — the fence floor never goes
//! down — a topic deleted and re-created under the same name fences every holder of the old one,
//! across a restart, while still accepting writers without a lease until its first grant.

use crate::support::doc_examples;

use std::path::Path;
use std::time::Duration;

use crate::support::batch;
use doc_examples::*;
use fencelog::client::{Client, ClientError};
use fencelog::domain::TopicConfig;
use fencelog::protocol::{ApiKey, ErrorCode, Request, RequestFrame, Response, ResponseFrame};
use fencelog::storage::WriteCredential;
use fencelog::testing::TestServer;

fn assert_unknown_topic<T: std::fmt::Debug>(result: Result<T, ClientError>, what: &str) {
    match result {
        Err(ClientError::Server {
            code: ErrorCode::UnknownTopic,
            ..
        }) => {}
        other => panic!("{what}: expected UNKNOWN_TOPIC, got {other:?}"),
    }
}

/// Grants and releases leases on `topic/0` until the epoch is `epoch`.
async fn lease_up_to(client: &Client, topic: &str, epoch: u64) {
    loop {
        let lease = client
            .acquire_lease(topic, 0, "writer", Duration::from_secs(30))
            .await
            .expect("lease");
        if lease.epoch >= epoch {
            assert_eq!(lease.epoch, epoch);
            return;
        }
        client
            .release_lease(topic, 0, lease.lease_id)
            .await
            .expect("release");
    }
}

async fn wait_until_empty(directory: &Path) {
    for _ in 0..200 {
        let empty = std::fs::read_dir(directory)
            .map(|mut entries| entries.next().is_none())
            .unwrap_or(true);
        if empty {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{} still holds a deleted topic's files",
        directory.display()
    );
}

#[tokio::test]
async fn recreated_topic_fences_every_old_epoch_across_a_restart() {
    // Proves: epoch 5 granted on t/0, t deleted, the server restarted, t created again: a write
    // with epoch 5 is FENCED with both epochs in the answer, a write without a lease is
    // accepted (the new topic was never leased), and the next grant is above every old epoch.
    let server = TestServer::start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("t", 1, TopicConfig::default())
        .await
        .unwrap();
    lease_up_to(&client, "t", 5).await;
    client.produce("t", 0, batch(5, "old")).await.unwrap();
    client.delete_topic("t").await.unwrap();
    drop(client);

    let server = server.restart().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    assert_unknown_topic(client.metadata(&["t"]).await, "metadata after restart");
    client
        .create_topic("t", 1, TopicConfig::default())
        .await
        .unwrap();
    match client.produce("t", 0, batch(5, "zombie")).await {
        Err(error @ ClientError::Fenced { .. }) => {
            assert!(
                matches!(error, ClientError::Fenced { epoch: 5, current } if current > 5),
                "{error:?}"
            );
            let message = error.to_string();
            assert!(message.contains('5') && message.contains('6'), "{message}");
        }
        other => panic!("a holder of the deleted topic's epoch 5 was not fenced: {other:?}"),
    }

    let partition = server.broker().partition("t", 0).unwrap();
    assert_eq!(partition.creation_epoch(), 6);
    let pending = partition
        .append_pending_as(WriteCredential::Unleased, &batch(0, "unleased"))
        .expect("a writer without a lease is accepted before the first grant");
    assert_eq!(
        pending.offsets().base_offset,
        0,
        "the re-created log is empty"
    );
    partition.acknowledge(pending).unwrap();

    let lease = client
        .acquire_lease("t", 0, "new-writer", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(
        lease.epoch >= 6,
        "grant {} is not above epoch 5",
        lease.epoch
    );
    assert!(partition
        .append_pending_as(WriteCredential::Unleased, &batch(0, "late"))
        .is_err());
    client
        .produce("t", 0, batch(lease.epoch, "new"))
        .await
        .unwrap();

    // The floor stays after a second restart, now with the new topic's history on top.
    drop(client);
    drop(partition);
    let server = server.restart().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    let err = client
        .produce("t", 0, batch(5, "zombie"))
        .await
        .unwrap_err();
    assert!(err.is_fenced(), "{err:?}");
    assert_eq!(
        server.broker().partition("t", 0).unwrap().current_epoch(),
        lease.epoch
    );
}

#[tokio::test]
async fn a_deleted_topic_is_gone_everywhere_at_once() {
    // Proves: after DeleteTopic, metadata, produce, fetch, leases, offset commits and a second
    // delete answer UNKNOWN_TOPIC; the topic's directory has left `topics/` and its files leave
    // `deleted/`; a group's committed offset for it is forgotten; a re-created topic is empty.
    let server = TestServer::start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("gone", 2, TopicConfig::default())
        .await
        .unwrap();
    client
        .create_topic("kept", 1, TopicConfig::default())
        .await
        .unwrap();
    let lease = client
        .acquire_lease("gone", 0, "writer", Duration::from_secs(30))
        .await
        .unwrap();
    client
        .produce("gone", 0, batch(lease.epoch, "a"))
        .await
        .unwrap();
    client
        .commit_offset("billing", "gone", 0, 1, "")
        .await
        .unwrap();
    client
        .commit_offset("billing", "kept", 0, 0, "k")
        .await
        .unwrap();

    client.delete_topic("gone").await.unwrap();

    assert_unknown_topic(client.metadata(&["gone"]).await, "metadata");
    assert_unknown_topic(
        client.produce("gone", 0, batch(lease.epoch, "b")).await,
        "produce",
    );
    assert_unknown_topic(
        client
            .fetch("gone", 0, 0, 1 << 20, Duration::from_millis(10))
            .await,
        "fetch",
    );
    assert_unknown_topic(
        client
            .acquire_lease("gone", 0, "other", Duration::from_secs(30))
            .await,
        "acquire",
    );
    assert_unknown_topic(client.renew_lease("gone", 0, lease.lease_id).await, "renew");
    assert_unknown_topic(
        client.committed_offset("billing", "gone", 0).await,
        "offset fetch",
    );
    assert_unknown_topic(client.delete_topic("gone").await, "second delete");
    let names: Vec<String> = client
        .list_topics()
        .await
        .unwrap()
        .into_iter()
        .map(|topic| topic.name)
        .collect();
    assert_eq!(names, ["kept"]);

    let data = server.data_dir().to_path_buf();
    assert!(!data.join("topics").join("gone").exists());
    wait_until_empty(&data.join("deleted")).await;

    client
        .create_topic("gone", 1, TopicConfig::default())
        .await
        .unwrap();
    assert_eq!(client.list_offsets("gone", 0).await.unwrap().latest, 0);
    assert_eq!(
        client.committed_offset("billing", "gone", 0).await.unwrap(),
        None,
        "the deleted topic's committed offset was forgotten"
    );
    let kept = client
        .committed_offset("billing", "kept", 0)
        .await
        .unwrap()
        .expect("other topics keep theirs");
    assert_eq!(kept.metadata, "k");
    assert!(server.broker().partition("kept", 0).is_ok());
}

#[tokio::test]
async fn a_long_poll_on_a_deleted_topic_ends_with_unknown_topic() {
    // Proves: a fetch waiting for data on a partition whose topic is deleted wakes up and
    // answers UNKNOWN_TOPIC rather than waiting out its timeout or reading deleted files.
    let server = TestServer::start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("polled", 1, TopicConfig::default())
        .await
        .unwrap();
    let reader = Client::connect(server.addr()).await.unwrap();
    let poll = tokio::spawn(async move {
        reader
            .fetch("polled", 0, 0, 1 << 20, Duration::from_secs(20))
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    client.delete_topic("polled").await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("the long poll woke up")
        .unwrap();
    assert_unknown_topic(result, "long poll");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn leftovers_of_an_interrupted_delete_are_purged_on_open() {
    // Proves: a topic directory left under `deleted/` (a crash between the rename and the
    // background removal) is removed when the broker opens, and nothing of it is served.
    let server = TestServer::start().await.unwrap();
    let leftover = server
        .data_dir()
        .join("deleted")
        .join("old.0123456789abcdef");
    std::fs::create_dir_all(leftover.join("0")).unwrap();
    std::fs::write(leftover.join("0").join("epoch-checkpoint"), "3 0\n").unwrap();
    let server = server.restart().await.unwrap();
    assert!(!leftover.exists());
    assert!(server.broker().topic("old").is_err());
}

#[test]
fn doc_example_delete_topic() {
    // Proves: the DeleteTopic example of docs/protocol.md is what the encoder writes and the
    // decoder reads, request and (empty) response, and the key is 12.
    let request = RequestFrame::new(
        15,
        Request::DeleteTopic {
            name: "orders".into(),
        },
    );
    assert_eq!(request.request.api_key(), ApiKey::DeleteTopic);
    let body = check_doc_example(
        "DeleteTopic request",
        encode_request(&request),
        "00 00 00 10 00 0c 00 00 00 00 00 0f 00 06 6f 72\n\
         64 65 72 73",
    );
    assert_eq!(RequestFrame::decode(body), Ok(request));

    let response = ResponseFrame::ok(15, Response::DeleteTopic);
    let body = check_doc_example(
        "DeleteTopic response",
        encode_response(&response),
        "00 00 00 06 00 00 00 0f 00 00",
    );
    assert_eq!(
        ResponseFrame::decode(ApiKey::DeleteTopic, body).unwrap(),
        response
    );
}

#[test]
fn epoch_floors_file_and_creation_line_are_as_documented() {
    // Proves: deleting `orders` whose partitions reached epoch 5 leaves exactly the
    // `epoch-floors` file docs/storage-format.md shows, the files wait under `deleted/` until
    // removed, and the re-created topic's checkpoints start with `created 6`.
    const STORAGE_FORMAT_DOC: &str = include_str!("../../docs/storage-format.md");
    let section = &STORAGE_FORMAT_DOC[STORAGE_FORMAT_DOC
        .find("## Deleted topics")
        .expect("the section exists")..];
    let block = section
        .split("```text\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a text block");

    let data = tempfile::tempdir().unwrap();
    let broker = fencelog::broker::Broker::open(data.path()).unwrap();
    broker
        .create_topic("orders", 2, TopicConfig::default())
        .unwrap();
    broker
        .partition("orders", 0)
        .unwrap()
        .install_epoch(5)
        .unwrap();
    broker
        .partition("orders", 1)
        .unwrap()
        .install_epoch(2)
        .unwrap();
    let deleted = broker.delete_topic("orders").unwrap();
    assert_eq!(deleted.floor, 5);
    assert!(deleted.files.starts_with(data.path().join("deleted")));
    assert!(deleted.files.join("0").join("epoch-checkpoint").exists());
    deleted.remove_files();
    assert!(!deleted.files.exists());
    assert_eq!(
        std::fs::read_to_string(data.path().join("epoch-floors")).unwrap(),
        block
    );

    broker
        .create_topic("orders", 2, TopicConfig::default())
        .unwrap();
    for partition in ["0", "1"] {
        let checkpoint = data
            .path()
            .join("topics/orders")
            .join(partition)
            .join("epoch-checkpoint");
        assert_eq!(std::fs::read_to_string(checkpoint).unwrap(), "created 6\n");
    }
    assert_eq!(broker.partition("orders", 1).unwrap().current_epoch(), 6);
}

#[test]
fn doc_example_alter_topic_config() {
    // Proves: the AlterTopicConfig example of docs/protocol.md is what the encoder writes and
    // the decoder reads, request and response, and the key is 17.
    let request = RequestFrame::new(
        16,
        Request::AlterTopicConfig {
            name: "orders".into(),
            change: fencelog::protocol::TopicConfigChange {
                retention_ms: Some(Some(3_600_000)),
                ..Default::default()
            },
        },
    );
    assert_eq!(request.request.api_key(), ApiKey::AlterTopicConfig);
    let body = check_doc_example(
        "AlterTopicConfig request",
        encode_request(&request),
        "00 00 00 29 00 11 00 00 00 00 00 10 00 06 6f 72\n\
         64 65 72 73 04 00 00 00 00 00 00 00 00 00 00 00\n\
         00 00 00 00 00 00 00 00 00 00 36 ee 80",
    );
    assert_eq!(RequestFrame::decode(body), Ok(request));

    let config = TopicConfig {
        retention_ms: Some(3_600_000),
        ..TopicConfig::default()
    };
    let response = ResponseFrame::ok(16, Response::AlterTopicConfig { config });
    let body = check_doc_example(
        "AlterTopicConfig response",
        encode_response(&response),
        "00 00 00 27 00 00 00 10 00 00 00 00 00 00 04 00\n\
         00 00 02 00 00 00 00 00 00 00 00 00 00 00 00 00\n\
         00 00 00 00 00 00 00 00 36 ee 80",
    );
    assert_eq!(
        ResponseFrame::decode(ApiKey::AlterTopicConfig, body).unwrap(),
        response
    );
}

#[test]
fn doc_example_delete_records() {
    // Proves: the DeleteRecords example of docs/protocol.md is what the encoder writes and the
    // decoder reads, request and response, and the key is 19.
    let request = RequestFrame::new(
        17,
        Request::DeleteRecords {
            topic: "orders".into(),
            partition: 0,
            offset: 5,
        },
    );
    assert_eq!(request.request.api_key(), ApiKey::DeleteRecords);
    assert_eq!(ApiKey::DeleteRecords.as_u16(), 19);
    let body = check_doc_example(
        "DeleteRecords request",
        encode_request(&request),
        "00 00 00 1c 00 13 00 00 00 00 00 11 00 06 6f 72\n\
         64 65 72 73 00 00 00 00 00 00 00 00 00 00 00 05",
    );
    assert_eq!(RequestFrame::decode(body), Ok(request));

    let response = ResponseFrame::ok(17, Response::DeleteRecords { low_watermark: 5 });
    let body = check_doc_example(
        "DeleteRecords response",
        encode_response(&response),
        "00 00 00 0e 00 00 00 11 00 00 00 00 00 00 00 00\n\
         00 05",
    );
    assert_eq!(
        ResponseFrame::decode(ApiKey::DeleteRecords, body).unwrap(),
        response
    );
}

#[tokio::test]
async fn alter_topic_config_changes_the_live_settings_durably() {
    // Proves: the native AlterTopicConfig changes retention and segment size of an existing
    // topic without a restart (its open partitions use them), answers the config now, keeps
    // what it does not name, survives a restart, and refuses a bad segment size by name.
    let server = TestServer::start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic(
            "altered",
            2,
            TopicConfig {
                retention_bytes: Some(1_000_000),
                ..TopicConfig::default()
            },
        )
        .await
        .unwrap();
    let change = fencelog::protocol::TopicConfigChange {
        retention_ms: Some(Some(60_000)),
        segment_bytes: Some(1 << 20),
        ..Default::default()
    };
    let config = client.alter_topic_config("altered", change).await.unwrap();
    assert_eq!(config.retention_ms, Some(60_000));
    assert_eq!(config.segment_bytes, 1 << 20);
    assert_eq!(config.retention_bytes, Some(1_000_000), "not named: kept");
    let partition = server.broker().partition("altered", 1).unwrap();
    assert_eq!(partition.limits().retention_ms, Some(60_000));
    assert_eq!(partition.limits().segment_bytes, 1 << 20);
    let unlimited = fencelog::protocol::TopicConfigChange {
        retention_bytes: Some(None),
        ..Default::default()
    };
    let config = client
        .alter_topic_config("altered", unlimited)
        .await
        .unwrap();
    assert_eq!(config.retention_bytes, None);
    let bad = fencelog::protocol::TopicConfigChange {
        segment_bytes: Some(12),
        ..Default::default()
    };
    let error = client.alter_topic_config("altered", bad).await.unwrap_err();
    assert!(error.to_string().contains("segment_bytes"), "{error}");
    let missing = client
        .alter_topic_config("missing", change)
        .await
        .unwrap_err();
    assert!(
        matches!(
            missing,
            ClientError::Server {
                code: ErrorCode::UnknownTopic,
                ..
            }
        ),
        "{missing}"
    );
    drop(client);
    let server = server.restart().await.unwrap();
    let topic = server.broker().topic("altered").unwrap();
    assert_eq!(topic.config().retention_ms, Some(60_000));
    assert_eq!(topic.config().segment_bytes, 1 << 20);
    assert_eq!(
        server
            .broker()
            .partition("altered", 0)
            .unwrap()
            .limits()
            .retention_ms,
        Some(60_000)
    );
}
