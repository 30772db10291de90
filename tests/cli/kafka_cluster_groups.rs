//! A Kafka consumer group on a replicated cluster keeps its committed offsets through a
//! `kill -9` of its coordinator: an etcd process and three `fencelog serve --etcd
//! --kafka-listen` processes on loopback, driven by confluent-kafka
//! (`tools/kafka-clients/cluster_group_failover.py`): the group consumes and commits, its
//! coordinator (the leader of its `__consumer_offsets` partition) is killed, and a new consumer
//! of the group reads the same committed offsets from the new coordinator and resumes there.
//! Both with Kafka's classic group protocol and with KIP-848's consumer protocol
//! (`group.protocol=consumer`, whose membership is in the coordinator's memory: the new
//! coordinator's members join again with epoch 0 and resume from the committed offsets).
//!
//! Skipped with a note where `etcd`, `python3` or `confluent_kafka` is missing (`.ci/run`
//! installs them).

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::cluster_processes::BrokerProcess;
use crate::support::etcd::EtcdServer;
use crate::support::python as python_support;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/kafka-clients/cluster_group_failover.py"
);

/// Proves (classic protocol): the committed offsets survive a kill -9 of the coordinator and a
/// new consumer of the group resumes from them; DeleteGroups then deletes them.
#[test]
fn a_groups_committed_offsets_survive_a_kill_9_of_its_coordinator() {
    survive_a_kill_9_of_the_coordinator(
        "a_groups_committed_offsets_survive_a_kill_9_of_its_coordinator",
        "classic",
    );
}

/// Proves (KIP-848 consumer protocol): a `group.protocol=consumer` group is coordinated by
/// the leader of its offsets partition (FindCoordinator), its commits survive a kill -9 of
/// that broker, and a new member of the group joins the new coordinator and resumes there.
#[test]
fn a_consumer_protocol_groups_offsets_survive_a_kill_9_of_its_coordinator() {
    survive_a_kill_9_of_the_coordinator(
        "a_consumer_protocol_groups_offsets_survive_a_kill_9_of_its_coordinator",
        "consumer",
    );
}

fn survive_a_kill_9_of_the_coordinator(test: &str, protocol: &str) {
    if python_support::python_module_missing("confluent_kafka") {
        return;
    }
    let Some(etcd) = EtcdServer::start_or_skip(test) else {
        return;
    };
    let root = tempfile::tempdir().expect("temp dir");
    let mut brokers = Vec::new();
    let mut kafka = Vec::new();
    for id in 1..=3 {
        let address = format!(
            "127.0.0.1:{}",
            TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("free port")
                .port()
        );
        let mut broker = BrokerProcess::prepare(id, &root, &etcd.endpoint());
        broker
            .extra
            .extend(["--kafka-listen".to_owned(), address.clone()]);
        broker.spawn();
        kafka.push(address);
        brokers.push(broker);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for address in &kafka {
        while std::net::TcpStream::connect(address).is_err() {
            assert!(Instant::now() < deadline, "{address} never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let pids = brokers
        .iter()
        .enumerate()
        .map(|(index, broker)| {
            let pid = broker.child.as_ref().expect("running").id();
            format!("{}={pid}", index + 1)
        })
        .collect::<Vec<_>>()
        .join(",");
    let output = Command::new("python3")
        .args([SCRIPT, &kafka.join(","), "groups", "300", &pids, protocol])
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.lines().last() == Some("ok"),
        "the scenario failed:\n{stdout}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        brokers
            .iter()
            .map(|broker| {
                let log = broker.log();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(40)..].join("\n");
                format!("--- broker at {} ---\n{tail}", broker.addr)
            })
            .collect::<Vec<_>>()
            .join("\n")
    );
}
