//! KIP-848 consumer-protocol groups (`group.protocol=consumer`) with confluent-kafka
//! (librdkafka) running `tools/kafka-clients/kip848_group.py`: one consumer reads 100 records
//! and commits; a group on a 3-partition topic grows from one member to three and loses one
//! while records keep coming, and every record is read, every commit accepted, and the
//! assignment converges (every partition owned by exactly one member). (The raw APIs, in every
//! advertised version, are in `kafka_protocol.rs`.)
//!
//! The client tests skip, with a note, where python3 or confluent-kafka is missing.

use crate::support::kafka::{create_topic, kafka_server_with};
use crate::support::python::python_module_missing;

use std::process::Command;
use std::time::Duration;

use fencelog::broker::consumer_groups::ConsumerGroupConfig;
use fencelog::broker::{BrokerConfig, CoordinatorConfig};
use fencelog::testing::TestServer;
use serde_json::{json, Value};

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/kafka-clients/kip848_group.py"
);

/// A Kafka server whose consumer-protocol members heartbeat every 500 ms (Kafka's 5 s default
/// would make every assignment change take seconds).
async fn kafka_server() -> TestServer {
    kafka_server_with(BrokerConfig {
        coordinator: CoordinatorConfig {
            consumer: ConsumerGroupConfig {
                heartbeat_interval: Duration::from_millis(500),
                ..ConsumerGroupConfig::default()
            },
            ..CoordinatorConfig::default()
        },
        ..BrokerConfig::default()
    })
    .await
}

fn run(args: &[&str]) -> Value {
    let output = tokio::task::block_in_place(|| {
        Command::new("python3")
            .arg(SCRIPT)
            .args(args)
            .output()
            .expect("run kip848_group.py")
    });
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "kip848_group.py failed:\n{stdout}\n{stderr}"
    );
    let json = stdout.trim().lines().last().unwrap_or_default();
    serde_json::from_str(json).unwrap_or_else(|error| panic!("no JSON ({error}) in:\n{stdout}"))
}

/// Proves: a `group.protocol=consumer` consumer joins through ConsumerGroupHeartbeat, gets the
/// partition, reads 100 records in order, and its OffsetCommit v9 (member id and epoch) is
/// accepted; the committed offset reads back as 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_protocol_member_reads_100_records_and_commits() {
    if python_module_missing("confluent_kafka") {
        return;
    }
    let server = kafka_server().await;
    create_topic(&server, "kip848-100", 1).await;
    let bootstrap = server.kafka_addr().to_string();
    let outcome = run(&["read-100", &bootstrap, "kip848-100", "kip848-100-g"]);
    assert_eq!(outcome["read"], 100, "{outcome}");
    assert_eq!(outcome["in_order"], true, "{outcome}");
    assert_eq!(outcome["commit_errors"], json!([]), "{outcome}");
    assert_eq!(outcome["committed"], 100, "{outcome}");
}

/// Proves, for both server assignors: while records keep coming, a consumer-protocol group on
/// a 3-partition topic goes from one member to two and three, then one leaves; at every step
/// the assignment converges to every partition owned by exactly one member, no commit is
/// refused, and every record produced is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_joining_and_leaving_share_every_partition_and_read_every_record() {
    if python_module_missing("confluent_kafka") {
        return;
    }
    let server = kafka_server().await;
    let bootstrap = server.kafka_addr().to_string();
    for assignor in ["uniform", "range"] {
        let topic = format!("kip848-{assignor}");
        create_topic(&server, &topic, 3).await;
        let group = format!("{topic}-g");
        let outcome = run(&["join-leave", &bootstrap, &topic, &group, assignor]);
        assert_eq!(outcome["commit_errors"], json!([]), "{assignor}: {outcome}");
        assert_eq!(outcome["never_read"], json!([]), "{assignor}: {outcome}");
        let produced: u64 = outcome["produced"]
            .as_array()
            .unwrap()
            .iter()
            .map(|count| count.as_u64().unwrap())
            .sum();
        assert!(produced > 0, "{assignor}: {outcome}");
        let mut owned: Vec<u64> = outcome["final_assignment"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|partitions| partitions.as_array().unwrap().clone())
            .map(|partition| partition.as_u64().unwrap())
            .collect();
        owned.sort_unstable();
        assert_eq!(owned, vec![0, 1, 2], "{assignor}: {outcome}");
        // The group rebalanced incrementally under its members: the first member revoked
        // partitions for the newcomers (twice) before the three closes revoked the rest.
        let revokes = outcome["callbacks"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|callbacks| callbacks.as_array().unwrap())
            .filter(|callback| callback[0] == "revoke")
            .count();
        assert!(revokes >= 5, "{assignor}: {outcome}");
    }
}
