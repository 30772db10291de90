//! CreatePartitions through an ordinary Kafka admin client: confluent-kafka (librdkafka) grows a
//! topic from 3 to 6 partitions, writes to and reads from partition 5, and is refused growing
//! to fewer or the same. (Every advertised version, spoken raw, is in `kafka_protocol.rs`.)

use fencelog::testing::TestServer;

const ADMIN_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/kafka-clients/admin_partitions.py"
);

/// confluent-kafka (librdkafka), its ordinary AdminClient, Producer and Consumer:
/// `create_partitions([NewPartitions(t, 6)])` grows a 3-partition topic to 6 (Metadata lists 6),
/// partition 5 takes a write that is read back, growing to 4 or to 6 again is
/// `INVALID_PARTITIONS`, and a validate-only grow changes nothing. Skipped, with a note, where
/// python3 or confluent_kafka is missing (not under `CI=true`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_grows_a_topic_and_writes_to_a_new_partition() {
    if crate::support::python::python_module_missing("confluent_kafka") {
        return;
    }
    let server = TestServer::builder()
        .kafka()
        .start()
        .await
        .expect("start server");
    let bootstrap = server.kafka_addr().to_string();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args([ADMIN_SCRIPT, &bootstrap, "grown"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "confluent-kafka failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "created 3",
            "grown to 6",
            "metadata 6",
            "produced partition 5 offset 0",
            "consumed partition 5 five",
            "refused 4 INVALID_PARTITIONS",
            "refused 6 INVALID_PARTITIONS",
            "validated 7, metadata 6",
        ]
    );
    let topic = server.broker().topic("grown").expect("the topic");
    assert_eq!(topic.partitions().len(), 6);
    assert_eq!(
        server
            .broker()
            .partition("grown", 5)
            .unwrap()
            .log_end_offset(),
        1
    );
}
