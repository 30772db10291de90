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
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::etcd::EtcdServer;
use crate::support::python as python_support;
use crate::support::BIN;
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/kafka-clients/cluster_failover.py"
);
/// Registration TTL of the test brokers: failover within a few seconds.
const TTL_MS: &str = "2000";
const CONVERGE: Duration = Duration::from_secs(30);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("free port")
        .port()
}

/// One broker process, killed on drop.
struct Broker {
    child: Child,
    native: String,
    kafka: String,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_broker(id: u32, root: &std::path::Path, etcd: &str) -> Broker {
    let native = format!("127.0.0.1:{}", free_port());
    let kafka = format!("127.0.0.1:{}", free_port());
    let data_dir = root.join(format!("broker-{id}"));
    std::fs::create_dir_all(&data_dir).expect("data dir");
    let log = std::fs::File::create(root.join(format!("broker-{id}.log"))).expect("log file");
    let child = Command::new(BIN)
        .args(["serve", "--node-id", &id.to_string()])
        .args(["--etcd", etcd, "--cluster-name", "kafka-cluster"])
        .args(["--listen", &native, "--kafka-listen", &kafka])
        .arg("--data-dir")
        .arg(&data_dir)
        .args(["--registration-ttl-ms", TTL_MS])
        .env("RUST_LOG", "fencelog=info")
        .env_remove("FENCELOG_ADDR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start fencelog serve");
    let deadline = Instant::now() + CONVERGE;
    while std::net::TcpStream::connect(&kafka).is_err() {
        assert!(Instant::now() < deadline, "broker {id} never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    Broker {
        child,
        native,
        kafka,
    }
}

fn logs(root: &std::path::Path) -> String {
    (1..=3)
        .map(|id| {
            let text =
                std::fs::read_to_string(root.join(format!("broker-{id}.log"))).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!("--- broker {id} ---\n{}", tail.join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n")
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
    let brokers: Vec<Broker> = (1..=3)
        .map(|id| start_broker(id, root.path(), &etcd.endpoint()))
        .collect();
    let pids = brokers
        .iter()
        .enumerate()
        .map(|(index, broker)| format!("{}={}", index + 1, broker.child.id()))
        .collect::<Vec<_>>()
        .join(",");
    let bootstrap = brokers
        .iter()
        .map(|broker| broker.kafka.clone())
        .collect::<Vec<_>>()
        .join(",");
    kcat_lists_three_brokers(&bootstrap);
    let output = Command::new("python3")
        .args([SCRIPT, &bootstrap, "failover", "3000", &pids])
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.lines().last() == Some("ok"),
        "the scenario failed:\n{stdout}\n{}\nnative listeners: {:?}\n{}",
        String::from_utf8_lossy(&output.stderr),
        brokers.iter().map(|b| &b.native).collect::<Vec<_>>(),
        logs(root.path())
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
