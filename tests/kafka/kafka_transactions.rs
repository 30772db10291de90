//! Transactions as Kafka readers see them (issue 31, the log side): transactional batches and
//! markers written through the service (here by a native lease holder, with
//! [`control_batch`]) are read by kcat (librdkafka) with `isolation.level=read_committed`,
//! which sees only committed records and stops at the last stable offset, and with
//! read_uncommitted, which sees every data record; markers are never shown as records.
//! Skipped, with a note, where `kcat` is not installed.

use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use fencelog::batch::{control_batch, BatchBuilder, ControlMarker};
use fencelog::client::Client;
use fencelog::domain::TopicConfig;
use fencelog::testing::TestServer;

use crate::kafka_kcat::kcat_missing;

/// A transactional batch of `producer_id` at `sequence` holding `values`, under lease `epoch`.
fn transactional(epoch: u64, producer_id: i64, sequence: i32, values: &[&str]) -> Bytes {
    let mut builder = BatchBuilder::with_producer(epoch, producer_id, 0).transactional();
    for value in values {
        builder.push(1_000, None, Some(value.as_bytes()));
    }
    builder.finish_with_sequence(sequence)
}

/// kcat's `%o %s` lines of partition 0 of `topic`, from the beginning to the end (`-e`).
async fn kcat_read(kafka: String, topic: &str, isolation: &str) -> String {
    let topic = topic.to_owned();
    let isolation = format!("isolation.level={isolation}");
    let output = tokio::task::spawn_blocking(move || {
        Command::new("kcat")
            .args([
                "-C",
                "-b",
                &kafka,
                "-t",
                &topic,
                "-p",
                "0",
                "-o",
                "beginning",
                "-e",
            ])
            .args(["-X", &isolation, "-f", "%o %s\\n"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "kcat failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_sees_committed_records_only_and_stops_at_the_open_transaction() {
    if kcat_missing() {
        return;
    }
    let server = TestServer::builder().kafka().start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("txns", 1, TopicConfig::default())
        .await
        .unwrap();
    let lease = client
        .acquire_lease("txns", 0, "kafka-txn:t", Duration::from_secs(30))
        .await
        .unwrap();
    let epoch = lease.epoch;
    let produce = |batch: Bytes| {
        let client = client.clone();
        async move { client.produce("txns", 0, batch).await.unwrap() }
    };
    // Producer 1 commits a, b; producer 2 aborts x, y; producer 1 commits c; producer 2 leaves
    // z open: read_committed stops before z's offset.
    produce(transactional(epoch, 1, 0, &["a", "b"])).await; // 0, 1
    produce(transactional(epoch, 2, 0, &["x"])).await; // 2
    produce(control_batch(epoch, 1, 0, ControlMarker::Commit, 0, 1_000)).await; // 3
    produce(transactional(epoch, 2, 1, &["y"])).await; // 4
    produce(control_batch(epoch, 2, 0, ControlMarker::Abort, 0, 1_000)).await; // 5
    produce(transactional(epoch, 1, 2, &["c"])).await; // 6
    produce(control_batch(epoch, 1, 0, ControlMarker::Commit, 0, 1_000)).await; // 7
    produce(transactional(epoch, 2, 2, &["z"])).await; // 8
    produce(transactional(epoch, 1, 3, &["d"])).await; // 9
    let kafka = server.kafka_addr().to_string();
    assert_eq!(
        kcat_read(kafka.clone(), "txns", "read_committed").await,
        "0 a\n1 b\n6 c\n"
    );
    assert_eq!(
        kcat_read(kafka.clone(), "txns", "read_uncommitted").await,
        "0 a\n1 b\n2 x\n4 y\n6 c\n8 z\n9 d\n"
    );
    // Closing z's transaction lets read_committed through to the end (d is still open).
    produce(control_batch(epoch, 2, 0, ControlMarker::Commit, 0, 1_000)).await; // 10
    assert_eq!(
        kcat_read(kafka.clone(), "txns", "read_committed").await,
        "0 a\n1 b\n6 c\n8 z\n"
    );
    produce(control_batch(epoch, 1, 0, ControlMarker::Abort, 0, 1_000)).await; // 11
    assert_eq!(
        kcat_read(kafka, "txns", "read_committed").await,
        "0 a\n1 b\n6 c\n8 z\n"
    );
    native_readers_never_see_markers(&client).await;
}

/// The native fetch and consumer (read_uncommitted: the native Fetch has no isolation yet)
/// show every data record and no marker, and a consumer moves past markers at the end of the
/// log instead of asking for them again.
async fn native_readers_never_see_markers(client: &Client) {
    let fetched = client
        .fetch("txns", 0, 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    let shown: Vec<(u64, String)> = fetched
        .records
        .iter()
        .map(|record| {
            let value = String::from_utf8(record.value.clone().unwrap().to_vec()).unwrap();
            (record.offset, value)
        })
        .collect();
    let expected = [
        (0, "a"),
        (1, "b"),
        (2, "x"),
        (4, "y"),
        (6, "c"),
        (8, "z"),
        (9, "d"),
    ];
    let expected: Vec<(u64, String)> = expected
        .iter()
        .map(|(offset, value)| (*offset, value.to_string()))
        .collect();
    assert_eq!(shown, expected);
    assert_eq!(fetched.next_offset, 12);
    let mut consumer = fencelog::client::Consumer::new(client.clone(), "txns", 0, 10);
    let records = consumer.poll(Duration::from_millis(50)).await.unwrap();
    assert!(records.is_empty(), "{records:?}");
    assert_eq!(consumer.position(), 12, "past the two markers at the end");
}
