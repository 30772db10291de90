//! Compressed batches kept as sent (issue 54), through Kafka's own clients: a zstd-compressing
//! confluent-kafka producer's topic holds the producer's compressed bytes on disk (not the
//! uncompressed size) and reads back byte for byte through confluent-kafka, kafka-python and the
//! native client; a native producer that compresses with zstd writes batches Kafka consumers
//! decode. The clients run `tools/kafka-clients/compressed_topic.py`; each test skips, with a
//! note, where a Python module is missing.

use std::time::Duration;

use crate::support::kafka::{create_topic, kafka_server_with_quick_groups};
use crate::support::process::run_json;
use crate::support::python::python_module_missing;
use fencelog::client::{Client, Producer};
use fencelog::compression::Codec;
use serde_json::Value;

const TOOLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/kafka-clients");
const RECORDS: usize = 2_000;

/// The values `compressed_topic.py` sends (its `value`): JSON-like events that compress about
/// four times, as application logs do.
fn json_value(index: usize) -> String {
    let events = ["page_view", "click", "search", "checkout"];
    format!(
        r#"{{"id":{index},"user":"user-{:05}","event":"{}","path":"/products/{}","note":"fencelog keeps compressed batches as they were sent"}}"#,
        index % 97,
        events[index % 4],
        index * 7919 % 10000
    )
}

async fn script(args: &[&str]) -> Value {
    let mut all = vec![format!("{TOOLS}/compressed_topic.py")];
    all.extend(args.iter().map(|arg| arg.to_string()));
    run_json(TOOLS, "python3", all).await
}

/// What a Kafka client read: its values in order, from offset 0 on.
async fn read_with(client: &str, bootstrap: &str, topic: &str) -> Vec<String> {
    let read = script(&["read", bootstrap, topic, &RECORDS.to_string(), client]).await;
    let offsets: Vec<u64> = serde_json::from_value(read["offsets"].clone()).unwrap();
    assert_eq!(offsets, (0..RECORDS as u64).collect::<Vec<_>>(), "{client}");
    serde_json::from_value(read["values"].clone()).unwrap()
}

/// The values the native client reads from partition 0, from offset 0 on.
async fn read_natively(client: &Client, topic: &str) -> Vec<String> {
    let mut values = Vec::new();
    while values.len() < RECORDS {
        let fetched = client
            .fetch(
                topic,
                0,
                values.len() as u64,
                8 << 20,
                Duration::from_millis(100),
            )
            .await
            .expect("native fetch");
        for record in fetched.records {
            if record.offset == values.len() as u64 {
                values.push(String::from_utf8(record.value.unwrap().to_vec()).unwrap());
            }
        }
    }
    values
}

/// The topic's one partition holds less than a third of `expected`'s bytes on disk (the
/// compressed batches, not the values), and every reader gets `expected` back: the native
/// client, confluent-kafka, and kafka-python where it and its zstd module are installed.
async fn stored_compressed_and_read_back(
    server: &fencelog::testing::TestServer,
    topic: &str,
    expected: &[String],
) {
    let value_bytes: usize = expected.iter().map(String::len).sum();
    let disk = server.broker().partition(topic, 0).unwrap().size_bytes() as usize;
    assert!(
        disk * 3 < value_bytes,
        "{disk} bytes on disk for {value_bytes} bytes of values"
    );
    let native = Client::connect(server.addr()).await.expect("connect");
    assert_eq!(read_natively(&native, topic).await, expected);
    let bootstrap = server.kafka_addr().to_string();
    assert_eq!(read_with("confluent", &bootstrap, topic).await, expected);
    if !python_module_missing("kafka") && !python_module_missing("zstandard") {
        assert_eq!(read_with("kafka-python", &bootstrap, topic).await, expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zstd_kafka_producers_topic_is_stored_compressed_and_reads_back_everywhere() {
    if python_module_missing("confluent_kafka") {
        return;
    }
    let server = kafka_server_with_quick_groups().await;
    let bootstrap = server.kafka_addr().to_string();
    create_topic(&server, "zstd-events", 1).await;
    script(&[
        "produce",
        &bootstrap,
        "zstd-events",
        "zstd",
        &RECORDS.to_string(),
    ])
    .await;
    // On disk: the producer's compressed batches (behind a 64-byte header each), not the
    // records' uncompressed size.
    let expected: Vec<String> = (0..RECORDS).map(json_value).collect();
    stored_compressed_and_read_back(&server, "zstd-events", &expected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_zstd_producer_writes_batches_kafka_consumers_decode() {
    if python_module_missing("confluent_kafka") {
        return;
    }
    let server = kafka_server_with_quick_groups().await;
    create_topic(&server, "native-zstd", 1).await;
    let client = Client::connect(server.addr()).await.expect("connect");
    let producer = Producer::builder(client.clone(), "native-zstd", 0)
        .lease("native-zstd-writer", Duration::from_secs(30))
        .compression(Codec::Zstd)
        .build()
        .await
        .expect("producer");
    let expected: Vec<String> = (0..RECORDS).map(json_value).collect();
    let sends: Vec<_> = expected
        .iter()
        .map(|value| producer.send(None, value.clone()))
        .collect();
    let offsets = futures::future::try_join_all(sends).await.expect("sent");
    assert_eq!(offsets, (0..RECORDS as u64).collect::<Vec<_>>());
    producer.close().await.expect("close");
    stored_compressed_and_read_back(&server, "native-zstd", &expected).await;
}
