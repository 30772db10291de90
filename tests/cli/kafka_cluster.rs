//! Kafka clients on a replicated cluster: an etcd process and three `fencelog serve --etcd
//! --kafka-listen` processes on loopback, driven by confluent-kafka
//! (`tools/kafka-clients/cluster_failover.py`): CreateTopics with replication factor 3 and
//! `min.insync.replicas=2`, Metadata naming brokers 1, 2, 3 with full ISRs, an idempotent
//! `acks=all` producer writing through a `kill -9` of partition 0's leader with every record
//! delivered without an error and read back once, in order, from the new leader.
//!
//! Skipped with a note where `etcd`, `python3` or `confluent_kafka` is missing (`.ci/run`
//! installs them).

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::cluster_processes::BrokerProcess;
use crate::support::etcd::EtcdServer;
use crate::support::python as python_support;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/kafka-clients/cluster_failover.py"
);
const CONVERGE: Duration = Duration::from_secs(30);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("free port")
        .port()
}

/// Broker `id` of the cluster in `root`, with a Kafka listener; returns it and that address.
fn start_broker(id: u32, root: &TempDir, etcd: &str) -> (BrokerProcess, String) {
    let kafka = format!("127.0.0.1:{}", free_port());
    let mut broker = BrokerProcess::prepare(id, root, etcd);
    broker
        .extra
        .extend(["--kafka-listen".to_owned(), kafka.clone()]);
    broker.spawn();
    let deadline = Instant::now() + CONVERGE;
    while std::net::TcpStream::connect(&kafka).is_err() {
        assert!(
            Instant::now() < deadline,
            "broker {id} never listened for Kafka"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (broker, kafka)
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The scenario end to end (see the module docs).
#[test]
fn confluent_kafka_on_a_three_broker_cluster_survives_a_kill_9_of_the_leader() {
    let test = "confluent_kafka_on_a_three_broker_cluster_survives_a_kill_9_of_the_leader";
    if python_support::python_module_missing("confluent_kafka") {
        return;
    }
    let Some(etcd) = EtcdServer::start_or_skip(test) else {
        return;
    };
    let root = tempfile::tempdir().expect("temp dir");
    let (brokers, kafka): (Vec<BrokerProcess>, Vec<String>) = (1..=3)
        .map(|id| start_broker(id, &root, &etcd.endpoint()))
        .unzip();
    let pids = brokers
        .iter()
        .enumerate()
        .map(|(index, broker)| {
            let pid = broker.child.as_ref().expect("running").id();
            format!("{}={pid}", index + 1)
        })
        .collect::<Vec<_>>()
        .join(",");
    let bootstrap = kafka.join(",");
    kcat_lists_three_brokers(&bootstrap);
    let output = Command::new("python3")
        .args([SCRIPT, &bootstrap, "failover", "3000", &pids])
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.lines().last() == Some("ok"),
        "the scenario failed:\n{stdout}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        brokers
            .iter()
            .map(|broker| format!(
                "--- broker at {} ---\n{}",
                broker.addr,
                tail(&broker.log(), 40)
            ))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// `kcat -L` through any one broker shows all three (where kcat is installed).
fn kcat_lists_three_brokers(bootstrap: &str) {
    let first = bootstrap.split(',').next().expect("a broker");
    let Ok(output) = Command::new("kcat")
        .args(["-b", first, "-L", "-J"])
        .output()
    else {
        eprintln!("kcat not found: skipping its check (apt-get install kcat)");
        return;
    };
    assert!(
        output.status.success(),
        "kcat -L failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listing: serde_json::Value = serde_json::from_slice(&output.stdout).expect("kcat json");
    let mut ids: Vec<i64> = listing["brokers"]
        .as_array()
        .expect("brokers")
        .iter()
        .map(|broker| broker["id"].as_i64().expect("id"))
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 2, 3], "kcat -L: {listing}");
}
