//! Real Kafka clients running their users' ordinary code against the Kafka listener, one
//! scenario script each (`tools/kafka-clients/`): confluent-kafka (librdkafka 2.x) admin, every
//! compression and acks setting, and consumer groups with the default and the cooperative-sticky
//! assignor; kafka-python's default idempotent producer, consumer offsets API and admin group
//! listing; kafkajs producers, a consumer group and admin; and idempotent producers of both
//! Python clients carried across a server restart. Records cross to the native protocol too.
//!
//! Each test skips, with a note, where its client is missing (`.ci/run` installs them where it
//! can: pip for the Python clients, `npm ci` in `tools/kafka-clients/kafkajs/`). Servers here
//! complete a new group's first rebalance after 200 ms instead of Kafka's 3 s.

use crate::support::kafka::{create_topic, kafka_server_with_quick_groups};
use crate::support::python;
use python::python_module_missing;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use fencelog::client::Client;
use serde_json::{json, Value};

const TOOLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/kafka-clients");

/// True (with a note) where python3 cannot import `module`: the test is then skipped.
/// True (with a note) where node or the kafkajs package is missing.
fn kafkajs_missing() -> bool {
    let node = Command::new("node").arg("--version").output().is_ok();
    let package = Path::new(TOOLS)
        .join("kafkajs/node_modules/kafkajs")
        .exists();
    if !(node && package) {
        eprintln!("node or kafkajs not found: skipping (npm ci in tools/kafka-clients/kafkajs)");
    }
    !(node && package)
}

/// Runs `program args` in the clients' directory and parses the JSON object it prints.
async fn run_json(program: &'static str, args: Vec<String>) -> Value {
    crate::support::process::run_json(TOOLS, program, args).await
}

fn script(name: &str) -> String {
    format!("{TOOLS}/{name}")
}

/// confluent-kafka: AdminClient creates topics and lists them; a Producer with every
/// compression.type and acks 0/1/all sends keyed records with headers (a null and an empty value
/// among them), which a Consumer reads back intact, and the native client reads the same records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_admin_and_every_compression_and_acks() {
    if python_module_missing("confluent_kafka") {
        return;
    }
    let server = kafka_server_with_quick_groups().await;
    let bootstrap = server.kafka_addr().to_string();
    let script = script("confluent_scenarios.py");
    let listed = run_json(
        "python3",
        vec![script.clone(), "admin".into(), bootstrap.clone()],
    )
    .await;
    assert_eq!(
        listed,
        json!({"c-groups-range": 4, "c-groups-coop": 4, "c-produce": 1})
    );
    let produced = run_json(
        "python3",
        vec![script, "produce".into(), bootstrap, "c-produce".into()],
    )
    .await;
    let read = produced["read"].as_array().expect("records");
    let mut expected = Vec::new();
    for compression in ["none", "gzip", "snappy", "lz4", "zstd"] {
        for acks in ["0", "1", "all"] {
            for i in 0..5 {
                expected.push((compression, acks, i));
            }
        }
    }
    assert_eq!(read.len(), expected.len());
    for (offset, (record, (compression, acks, i))) in read.iter().zip(&expected).enumerate() {
        assert_eq!(record["offset"], offset);
        assert_eq!(record["key"], format!("{compression}-{acks}-{i}"));
        assert_eq!(
            record["value"],
            format!("value-{compression}-{acks}-{i}").repeat(20)
        );
        assert_eq!(
            record["headers"],
            json!([
                ["compression", compression],
                ["index", i.to_string()],
                ["null", null],
                ["empty", ""]
            ])
        );
    }
    // The same records through the native protocol.
    let native = Client::connect(server.addr()).await.expect("connect");
    let fetched = native
        .fetch("c-produce", 0, 0, 8 << 20, Duration::ZERO)
        .await
        .expect("native fetch");
    assert_eq!(fetched.records.len(), expected.len());
    for (record, (compression, acks, i)) in fetched.records.iter().zip(&expected) {
        assert_eq!(
            record.key.as_deref(),
            Some(format!("{compression}-{acks}-{i}").as_bytes())
        );
        assert_eq!(record.headers[0].0, "compression");
        assert_eq!(record.headers[0].1.as_deref(), Some(compression.as_bytes()));
        // A null header value is null for the native client too, and an empty one empty.
        assert_eq!(record.headers[2], ("null".to_string(), None));
        assert_eq!(record.headers[3], ("empty".to_string(), Some(Bytes::new())));
    }
}

/// confluent-kafka: two Consumers of a group split a 4-partition topic two and two, with the
/// default assignor and with cooperative-sticky, one committing automatically and one with
/// commit(asynchronous=False); a restarted member resumes at the committed offsets; and after a
/// server restart a new member of the first group resumes at its committed offsets too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_groups_split_commit_and_resume_with_both_assignors() {
    if python_module_missing("confluent_kafka") {
        return;
    }
    let mut server = kafka_server_with_quick_groups().await;
    let bootstrap = server.kafka_addr().to_string();
    for (topic, strategy) in [
        ("c-groups-range", "default"),
        ("c-groups-coop", "cooperative-sticky"),
    ] {
        create_topic(&server, topic, 4).await;
        let group = format!("{topic}-group");
        let outcome = run_json(
            "python3",
            vec![
                script("confluent_scenarios.py"),
                "group".into(),
                bootstrap.clone(),
                topic.into(),
                group,
                strategy.into(),
            ],
        )
        .await;
        let mut partitions: Vec<u64> = ["auto", "sync"]
            .iter()
            .flat_map(|name| outcome["assignments"][name].as_array().unwrap().clone())
            .map(|partition| partition.as_u64().unwrap())
            .collect();
        partitions.sort_unstable();
        assert_eq!(partitions, [0, 1, 2, 3], "{strategy}: {outcome}");
        assert_eq!(
            outcome["committed"],
            json!({"0": 10, "1": 10, "2": 10, "3": 10}),
            "{strategy}"
        );
        assert_eq!(
            outcome["resumed"],
            json!({"0": [10, 11], "1": [10, 11], "2": [10, 11], "3": [10, 11]}),
            "{strategy}: the restarted member starts at the committed offsets"
        );
    }
    server = server.restart().await.expect("restart");
    let outcome = run_json(
        "python3",
        vec![
            script("confluent_scenarios.py"),
            "resume".into(),
            server.kafka_addr().to_string(),
            "c-groups-range".into(),
            "c-groups-range-group".into(),
        ],
    )
    .await;
    assert_eq!(
        outcome["resumed"],
        json!({"0": [12], "1": [12], "2": [12], "3": [12]}),
        "committed offsets survive a server restart"
    );
}

/// kafka-python: KafkaAdminClient creates, lists and describes a topic; the default
/// (idempotent) producer with linger_ms sends keyed records with headers; a consumer with
/// auto_offset_reset='earliest' reads them; seek_to_beginning, end_offsets, beginning_offsets
/// and offsets_for_times answer as Kafka does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_producer_consumer_and_offsets_api() {
    if python_module_missing("kafka") {
        return;
    }
    let server = kafka_server_with_quick_groups().await;
    let outcome = run_json(
        "python3",
        vec![
            script("kafka_python_scenarios.py"),
            "produce-consume".into(),
            server.kafka_addr().to_string(),
            "kp-topic".into(),
        ],
    )
    .await;
    assert_eq!(outcome["listed"], true);
    assert_eq!(outcome["partitions"], json!([0, 1]));
    assert_eq!(outcome["offsets"], json!([0, 0, 1, 1, 2, 2, 3, 3, 4, 4]));
    let first = outcome["first"].as_array().unwrap();
    assert_eq!(first.len(), 10);
    assert_eq!(first[0], json!([0, 0, "k0", "v0", [["index", "0"]]]));
    assert_eq!(first[9], json!([1, 4, "k9", "v9", [["index", "9"]]]));
    assert_eq!(outcome["again"], 10);
    assert_eq!(outcome["end"], json!({"0": 5, "1": 5}));
    assert_eq!(outcome["beginning"], json!({"0": 0, "1": 0}));
    assert_eq!(outcome["by_time"], json!({"0": 0, "1": 0}));
    assert_eq!(outcome["future"], json!({"0": null, "1": null}));
}

/// Group admin calls of both Python clients (`tools/kafka-clients/admin_groups.py`):
/// confluent-kafka's delete_consumer_groups deletes an idle group (no longer listed, deleting it
/// again is GROUP_ID_NOT_FOUND) and refuses one with a live member (NON_EMPTY_GROUP);
/// kafka-python 3's describe_cluster, delete_group_offsets and delete_groups work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_clients_delete_groups_and_their_offsets() {
    if python_module_missing("confluent_kafka") || python_module_missing("kafka") {
        return;
    }
    let server = kafka_server_with_quick_groups().await;
    create_topic(&server, "admin-groups", 1).await;
    let client = Client::connect(server.addr()).await.expect("connect");
    let lease = client
        .acquire_lease("admin-groups", 0, "writer", Duration::from_secs(30))
        .await
        .expect("lease");
    let mut batch = fencelog::batch::BatchBuilder::new(lease.epoch);
    batch.push(1_000, None, Some(b"one".as_slice()));
    client
        .produce("admin-groups", 0, batch.finish())
        .await
        .expect("produce");
    let seen = run_json(
        "python3",
        vec![
            script("admin_groups.py"),
            server.kafka_addr().to_string(),
            "admin-groups".into(),
        ],
    )
    .await;
    assert_eq!(
        seen["confluent"]["delete_cf-doomed"],
        json!("GROUP_ID_NOT_FOUND")
    );
    assert_eq!(
        seen["confluent"]["delete_cf-busy"],
        json!("NON_EMPTY_GROUP")
    );
    assert_eq!(seen["kafka_python"]["offsets_after"], json!(0), "{seen}");
}

/// kafka-python: while a KafkaConsumer is a member, KafkaAdminClient's list_groups shows its
/// group Stable, describe_groups its member (client id, host, subscription, assignment) and
/// list_group_offsets its commits; after it closes the group is Empty and keeps its offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_admin_lists_and_describes_groups() {
    if python_module_missing("kafka") {
        return;
    }
    let server = kafka_server_with_quick_groups().await;
    create_topic(&server, "kp-groups", 2).await;
    let native = Client::connect(server.addr()).await.expect("connect");
    for partition in 0..2 {
        // A natively produced record is read by the Kafka consumer too.
        let lease = native
            .acquire_lease("kp-groups", partition, "writer", Duration::from_secs(30))
            .await
            .expect("lease");
        let mut batch = fencelog::batch::BatchBuilder::new(lease.epoch);
        for index in 0..5 {
            batch.push(1_000, None, Some(format!("record-{index}").as_bytes()));
        }
        native
            .produce("kp-groups", partition, batch.finish())
            .await
            .expect("produce");
        native
            .release_lease("kp-groups", partition, lease.lease_id)
            .await
            .expect("release");
    }
    let outcome = run_json(
        "python3",
        vec![
            script("kafka_python_scenarios.py"),
            "groups".into(),
            server.kafka_addr().to_string(),
            "kp-groups".into(),
            "kp-admin".into(),
        ],
    )
    .await;
    assert_eq!(outcome["read"], 10);
    assert_eq!(
        outcome["member"],
        json!({
            "listed": [["kp-admin", "Stable", "consumer"]],
            "state": "Stable",
            "protocol": "range",
            "members": [{"client_id": "py-member", "client_host": "/127.0.0.1",
                         "topics": ["kp-groups"], "assigned": [0, 1]}],
            "offsets": {"0": 5, "1": 5},
        })
    );
    assert_eq!(
        outcome["after"],
        json!({
            "listed": [["kp-admin", "Empty", ""]],
            "state": "Empty",
            "protocol": "",
            "members": [],
            "offsets": {"0": 5, "1": 5},
        })
    );
}

/// kafkajs: admin createTopics and fetchTopicMetadata; an idempotent and a plain producer;
/// a consumer group `run` reading everything back with eachMessage; fetchOffsets, listGroups
/// and describeGroups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafkajs_producers_consumer_group_and_admin() {
    if kafkajs_missing() {
        return;
    }
    let server = kafka_server_with_quick_groups().await;
    let outcome = run_json(
        "node",
        vec![
            script("kafkajs/scenarios.js"),
            server.kafka_addr().to_string(),
            "js-topic".into(),
            "js-group".into(),
        ],
    )
    .await;
    assert_eq!(outcome["created"], true);
    assert_eq!(outcome["partitions"], json!([0, 1]));
    assert_eq!(outcome["produced"], json!([[0, 0], [1, 0], [0, 0], [1, 0]]));
    let read = outcome["read"].as_array().unwrap();
    assert_eq!(read.len(), 8);
    assert_eq!(read[0], json!([0, 0, "idempotent-0", "value-0", "0"]));
    assert_eq!(read[3], json!([0, 3, "plain-2", "value-2", "2"]));
    assert_eq!(outcome["offsets"], json!([[0, "4"], [1, "4"]]));
    assert_eq!(outcome["listed"], 1);
    assert_eq!(outcome["state"], "Empty");
}

/// Runs an `idempotent-restart` scenario: when the script says `restart` (records in flight),
/// the server is restarted on the same ports, then the script goes on. Every record lands
/// once, in order: the producer state survived the restart, and the client saw no error.
async fn idempotent_producer_across_a_restart(script_name: &str, topic: &str) {
    const COUNT: usize = 60;
    let server = kafka_server_with_quick_groups().await;
    create_topic(&server, topic, 1).await;
    let mut child = Command::new("python3")
        .args([
            &script(script_name),
            "idempotent-restart",
            &server.kafka_addr().to_string(),
            topic,
            &COUNT.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the client");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    tokio::task::block_in_place(|| stdout.read_line(&mut line)).expect("read");
    assert_eq!(line.trim(), "restart", "the script's signal");
    let server = server.restart().await.expect("restart");
    writeln!(child.stdin.take().unwrap(), "go").expect("tell the script");
    let output = tokio::task::spawn_blocking(move || {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut rest).map(|_| rest)
    })
    .await
    .unwrap()
    .expect("read");
    let finished = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .expect("wait");
    assert!(
        finished.status.success(),
        "{script_name} failed:\n{output}\n{}",
        String::from_utf8_lossy(&finished.stderr)
    );
    let outcome: Value = serde_json::from_str(output.trim()).expect("JSON");
    let expected: Vec<usize> = (0..COUNT).collect();
    assert_eq!(outcome["values"], json!(expected));
    let native = Client::connect(server.addr()).await.expect("connect");
    let offsets = native.list_offsets(topic, 0).await.expect("offsets");
    assert_eq!(offsets.latest, COUNT as u64, "no duplicate landed");
}

/// confluent-kafka's idempotent producer keeps producing across a server restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_idempotent_producer_survives_a_server_restart() {
    if python_module_missing("confluent_kafka") {
        return;
    }
    idempotent_producer_across_a_restart("confluent_scenarios.py", "c-restart").await;
}

/// kafka-python's default (idempotent) producer keeps producing across a server restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_idempotent_producer_survives_a_server_restart() {
    if python_module_missing("kafka") {
        return;
    }
    idempotent_producer_across_a_restart("kafka_python_scenarios.py", "kp-restart").await;
}
