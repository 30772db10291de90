//! Real Kafka clients, their ordinary code, against the Kafka listener: confluent-kafka
//! (librdkafka) with `enable.idempotence=true` and kafka-python produce to a topic and read it
//! back (`tools/kafka-clients/produce_consume.py`), and the native client reads the same records.
//! Skipped, with a note, where python3 or the client module is not installed (`.ci/run` installs
//! both with pip where it can).

use crate::support::python;
use python::python_module_missing as module_missing;
use std::process::Command;

use fencelog::client::Client;
use fencelog::domain::TopicConfig;
use fencelog::testing::TestServer;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/kafka-clients/produce_consume.py"
);
const RECORDS: usize = 200;

async fn round_trip(client_name: &'static str, module: &str) {
    if module_missing(module) {
        return;
    }
    let server = TestServer::builder().kafka().start().await.unwrap();
    let native = Client::connect(server.addr()).await.unwrap();
    native
        .create_topic("events", 1, TopicConfig::default())
        .await
        .unwrap();
    let bootstrap = server.kafka_addr().to_string();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .args([
                SCRIPT,
                &bootstrap,
                "events",
                client_name,
                &RECORDS.to_string(),
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{client_name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let expected: Vec<String> = (0..RECORDS)
        .map(|i| format!("{i} k{i} {client_name}-{i}"))
        .collect();
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected);
    // The same records through the native protocol.
    let fetched = native
        .fetch("events", 0, 0, 8 << 20, Default::default())
        .await
        .unwrap();
    assert_eq!(fetched.records.len(), RECORDS);
    let last = &fetched.records[RECORDS - 1];
    assert_eq!(
        last.value.as_deref(),
        Some(format!("{client_name}-{}", RECORDS - 1).as_bytes())
    );
    assert_eq!(
        last.key.as_deref(),
        Some(format!("k{}", RECORDS - 1).as_bytes())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_idempotent_producer_and_consumer() {
    round_trip("confluent", "confluent_kafka").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_producer_and_consumer() {
    round_trip("kafka-python", "kafka").await;
}
