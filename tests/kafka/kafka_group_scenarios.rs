//! The consumer-group scenarios Kafka users run, with confluent-kafka (librdkafka) running
//! `tools/kafka-clients/group_scenarios.py`: members committing in their revoke callback while
//! more members join and records keep coming (no commit refused, every record delivered once);
//! a fetch that waits for `fetch.min.bytes` up to `fetch.wait.max.ms`; and a stable group
//! carried across a server restart without a rebalance (its state is in `DATA/groups/`), and
//! a torn group file that does not stop the server.
//!
//! Each test skips, with a note, where python3 or confluent-kafka is missing.

use crate::support::kafka::{create_topic, kafka_server_with_quick_groups};
use crate::support::python::python_module_missing;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};

use fencelog::client::Client;
use fencelog::domain::TopicConfig;
use fencelog::testing::TestServer;
use serde_json::{json, Value};

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/kafka-clients/group_scenarios.py"
);

/// The script, running in the background, its stdout read line by line.
struct Scenario {
    child: Child,
    stdout: BufReader<ChildStdout>,
}

impl Scenario {
    fn start(args: &[&str]) -> Self {
        let mut child = Command::new("python3")
            .arg(SCRIPT)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run group_scenarios.py");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Self { child, stdout }
    }

    /// Waits for the script's next signal line and checks it is `signal`.
    fn expect_signal(&mut self, signal: &str) {
        let mut line = String::new();
        tokio::task::block_in_place(|| self.stdout.read_line(&mut line)).expect("read");
        if line.trim() != signal {
            let output = self.finish_unchecked();
            panic!("expected `{signal}` from the script, got {line:?}\n{output}");
        }
    }

    fn go_on(&mut self) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "go").expect("tell the script to go on");
    }

    fn finish_unchecked(&mut self) -> String {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.stdout, &mut rest);
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
        }
        format!("{rest}\n{stderr}")
    }

    /// Waits for the script to end and parses the JSON object it printed last.
    fn finish(mut self) -> Value {
        let (output, status) = tokio::task::block_in_place(|| {
            let output = self.finish_unchecked();
            (output, self.child.wait().expect("wait"))
        });
        assert!(status.success(), "group_scenarios.py failed:\n{output}");
        let json = output.trim().lines().next().unwrap_or_default();
        serde_json::from_str(json).unwrap_or_else(|error| panic!("no JSON ({error}) in:\n{output}"))
    }
}

fn run(args: &[&str]) -> Value {
    Scenario::start(args).finish()
}

/// Proves, for the default (eager) assignor and for cooperative-sticky: while records keep
/// coming, a group grows from one member to two and three, each member committing what it read
/// in its revoke callback with commit(asynchronous=False). No commit is refused, and every
/// record is delivered exactly once across the members (per partition, every offset up to the
/// end, none twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_callback_commits_deliver_every_record_once_as_the_group_grows() {
    if python_module_missing("confluent_kafka") {
        return;
    }
    let server = kafka_server_with_quick_groups().await;
    let bootstrap = server.kafka_addr().to_string();
    for (topic, strategy) in [
        ("revoke-eager", "default"),
        ("revoke-coop", "cooperative-sticky"),
    ] {
        create_topic(&server, topic, 4).await;
        let group = format!("{topic}-group");
        let outcome = run(&["revoke-commits", &bootstrap, topic, &group, strategy]);
        assert_eq!(outcome["commit_errors"], json!([]), "{strategy}: {outcome}");
        assert_eq!(outcome["read_twice"], json!([]), "{strategy}: {outcome}");
        assert_eq!(outcome["never_read"], json!([]), "{strategy}: {outcome}");
        let produced: u64 = outcome["produced"]
            .as_array()
            .unwrap()
            .iter()
            .map(|count| count.as_u64().unwrap())
            .sum();
        assert!(produced > 0, "{strategy}: {outcome}");
        // The group did rebalance under the members while it grew: their revoke callbacks
        // (which commit) ran, at least once per member joining after the first.
        let revokes = outcome["callbacks"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|callbacks| callbacks.as_array().unwrap())
            .filter(|callback| callback[0] == "revoke")
            .count();
        assert!(revokes >= 2, "{strategy}: {outcome}");
    }
}

/// Proves: a fetch of a consumer with fetch.min.bytes=100000 and fetch.wait.max.ms=1500, given
/// one small record, is answered when the wait runs out (about 1.5 s), not at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_waits_for_min_bytes_until_its_max_wait() {
    if python_module_missing("confluent_kafka") {
        return;
    }
    let server = kafka_server_with_quick_groups().await;
    create_topic(&server, "fetch-wait", 1).await;
    let outcome = run(&["fetch-wait", &server.kafka_addr().to_string(), "fetch-wait"]);
    assert_eq!(outcome["value"], "small", "{outcome}");
    let seconds = outcome["seconds"].as_f64().unwrap();
    assert!(
        (1.0..10.0).contains(&seconds),
        "the record arrived after {seconds} s, not after about fetch.wait.max.ms (1.5 s)"
    );
}

/// Proves: a stable group of two confluent-kafka members stays stable across a standalone
/// server restart (the group state is in `DATA/groups/`): same generation and members
/// afterwards, no rebalance callback fires, the members' commits succeed, and they go on
/// reading the new records without reading any twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stable_group_stays_stable_across_a_server_restart() {
    if python_module_missing("confluent_kafka") {
        return;
    }
    let server = kafka_server_with_quick_groups().await;
    create_topic(&server, "restart-group", 4).await;
    let mut scenario = Scenario::start(&[
        "restart",
        &server.kafka_addr().to_string(),
        "restart-group",
        "restart-group-g",
    ]);
    scenario.expect_signal("restart");
    let describe = |server: &TestServer| {
        server
            .service()
            .groups()
            .coordinator()
            .describe("restart-group-g")
            .expect("the group is known")
    };
    let before = describe(&server);
    assert_eq!(before.members.len(), 2, "{before:?}");
    let server = server.restart().await.expect("restart");
    let loaded = describe(&server);
    assert_eq!(loaded.state, before.state, "{loaded:?}");
    assert_eq!(loaded.generation, before.generation);
    scenario.go_on();
    scenario.expect_signal("check");
    let after = describe(&server);
    assert_eq!(
        (after.generation, format!("{:?}", after.state)),
        (before.generation, "Stable".to_string()),
        "no rebalance after the restart: {after:?}"
    );
    let ids = |description: &fencelog::broker::coordinator::GroupDescription| {
        let mut ids: Vec<String> = description
            .members
            .iter()
            .map(|member| member.member_id.clone())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&after), ids(&before), "the same members");
    scenario.go_on();
    let outcome = scenario.finish();
    assert_eq!(
        outcome["callbacks_after_restart"],
        json!({"a": [], "b": []}),
        "{outcome}"
    );
    assert_eq!(outcome["commit_errors"], json!([]), "{outcome}");
    assert_eq!(outcome["read_twice"], json!([]), "{outcome}");
    assert_eq!(outcome["never_read"], json!([]), "{outcome}");
}

/// Proves: a torn group membership file does not stop the server from starting: the server
/// serves and the file's groups are simply not known (their members rejoin). (That the next
/// write of the bucket replaces the file is a unit test of `broker::groups`.)
#[tokio::test]
async fn a_torn_group_file_does_not_stop_the_server() {
    use fencelog::broker::groups::{bucket_file::bucket_of, membership_file::file_name};
    let server = kafka_server_with_quick_groups().await;
    let file = server
        .data_dir()
        .join("groups")
        .join(file_name(bucket_of("torn-group")));
    std::fs::write(&file, b"FLGM\0\x01\0\0\0\0\x10\0").expect("write a torn file");
    let server = server.restart().await.expect("the server starts");
    let coordinator = server.service().groups().coordinator();
    assert!(coordinator.describe("torn-group").is_none());
    assert!(coordinator.list().is_empty());
    Client::connect(server.addr())
        .await
        .expect("the server serves")
        .create_topic("after-torn", 1, TopicConfig::default())
        .await
        .expect("create a topic");
}
