//! Kafka clients on a replicated cluster: an etcd process and three `fencelog serve --etcd
//! --kafka-listen` processes on loopback, driven by ordinary Kafka client code
//! (`tools/kafka-clients/cluster_failover.py`), once with confluent-kafka (librdkafka) and once
//! with kafka-python, each on a cluster of its own and through the library alone (admin calls,
//! producer and consumer). `kcat -L` through one broker lists all three first (where kcat is
//! installed). Each run then goes through two scenarios, on a fresh topic each: CreateTopics with
//! 3 partitions, replication factor 3 and `min.insync.replicas=2`, Metadata naming brokers 1, 2,
//! 3 with full ISRs, and an idempotent `acks=all` producer sending a known sequence to partition
//! 0 while its leader (taken from Metadata) suffers a fault a third of the way in:
//!
//! 1. **SIGSTOP** (`sigstop`): a second, non-idempotent producer with `retries=0` that knows
//!    the leader alone writes `warm` first (so it holds a connection to the leader). At the
//!    fault the leader is frozen (every thread stopped) and that producer sends `stale`, which
//!    waits in the frozen broker's socket. The idempotent producer's second third is
//!    delivered once the survivors elect a new leader (the paused broker's 2 s registration
//!    lapses); then SIGCONT. The woken broker is deposed and rejoins as a follower (Metadata shows three in-sync replicas
//!    of partition 0 again) before the last third is sent.
//! 2. **kill -9** (`kill9`): the leader is killed and the producer keeps sending.
//!
//! After each, every record is delivered with no error reported to the application, and
//! partition 0 read back from its current leader up to the high watermark holds exactly the
//! values sent (after `warm`), each once, in order; `stale` is there once if its producer was
//! told it was delivered (the client library may hand a request it never sent to the new
//! leader), else at most once. Finally the test restarts the killed broker, waits until
//! every broker reports the whole log committed, stops them all and reads each replica's files:
//! all three hold the same log, which is exactly the sequence (`stale` aside, at most once), on
//! both topics: the woken leader kept nothing of its own.
//!
//! Skipped with a note where `etcd`, `python3` or the client library is missing (`.ci/run`
//! installs them).

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use fencelog::client::Client;
use tempfile::TempDir;

use crate::cluster_processes::BrokerProcess;
use crate::support::etcd::EtcdServer;
use crate::support::python as python_support;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/kafka-clients/cluster_failover.py"
);
const CONVERGE: Duration = Duration::from_secs(30);
/// Records each scenario sends: enough to keep the producer busy through the fault.
const RECORDS: usize = 3000;
/// The scenarios, in order (the kill -9 last: it leaves two brokers running): the fault, the
/// topic, and the records before the producer's (`warm` of the retries=0 producer).
const SCENARIOS: [(&str, &str, &[&str]); 2] =
    [("sigstop", "paused", &["warm"]), ("kill9", "killed", &[])];

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("free port")
        .port()
}

/// Broker `id` of the cluster in `root`, with a Kafka listener on `kafka`.
pub(crate) fn start_broker(id: u32, root: &TempDir, etcd: &str, kafka: &str) -> BrokerProcess {
    let mut broker = BrokerProcess::prepare(id, root, etcd);
    broker
        .extra
        .extend(["--kafka-listen".to_owned(), kafka.to_owned()]);
    broker.spawn();
    let deadline = Instant::now() + CONVERGE;
    while std::net::TcpStream::connect(kafka).is_err() {
        assert!(
            Instant::now() < deadline,
            "broker {id} never listened for Kafka"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    broker
}

pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

pub(crate) fn logs(brokers: &[BrokerProcess]) -> String {
    brokers
        .iter()
        .map(|broker| {
            format!(
                "--- broker at {} ---\n{}",
                broker.addr,
                tail(&broker.log(), 40)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn confluent_kafka_on_a_three_broker_cluster_survives_a_sigstop_and_a_kill_9_of_the_leader() {
    run("confluent_kafka", "confluent");
}

#[test]
fn kafka_python_on_a_three_broker_cluster_survives_a_sigstop_and_a_kill_9_of_the_leader() {
    run("kafka", "kafka-python");
}

/// The scenarios of the module docs with the client library `module` (`client` to the script).
fn run(module: &str, client: &str) {
    let test = format!("{client} on a three-broker cluster");
    if python_support::python_module_missing(module) {
        return;
    }
    let Some(etcd) = EtcdServer::start_or_skip(&test) else {
        return;
    };
    let root = tempfile::tempdir().expect("temp dir");
    let kafka: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let mut brokers: Vec<BrokerProcess> = (1..=3)
        .map(|id| start_broker(id, &root, &etcd.endpoint(), &kafka[id as usize - 1]))
        .collect();
    let listed = brokers
        .iter()
        .zip(&kafka)
        .enumerate()
        .map(|(index, (broker, address))| {
            let pid = broker.child.as_ref().expect("running").id();
            format!("{}={pid}@{address}", index + 1)
        })
        .collect::<Vec<_>>()
        .join(",");
    kcat_lists_three_brokers(&kafka[0]);
    let scenarios: Vec<String> = SCENARIOS
        .iter()
        .map(|(fault, topic, _)| format!("{fault}:{topic}:{RECORDS}"))
        .collect();
    let started = Instant::now();
    let output = Command::new("python3")
        .arg(SCRIPT)
        .args([client, &listed])
        .args(&scenarios)
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!(
        "{client}: scenarios took {:.1} s\n{stdout}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        output.status.success() && stdout.lines().last() == Some("ok"),
        "the scenario failed:\n{stdout}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        logs(&brokers)
    );
    every_replica_holds_the_sequence(&mut brokers);
}

/// Restarts the broker the kill -9 took, waits until every broker reports each topic's whole
/// log committed, stops them and reads each replica of partition 0 from its files.
fn every_replica_holds_the_sequence(brokers: &mut [BrokerProcess]) {
    for broker in brokers.iter_mut() {
        if broker
            .child
            .as_mut()
            .is_some_and(|child| child.try_wait().ok().flatten().is_some())
        {
            broker.child = None;
        }
        if broker.child.is_none() {
            broker.spawn();
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let expected = |first: &[&str]| -> Vec<String> {
        let sent = (0..RECORDS).map(|i| format!("v{i}"));
        first
            .iter()
            .map(|value| (*value).to_owned())
            .chain(sent)
            .collect()
    };
    for (_, topic, first) in SCENARIOS {
        let length = expected(first).len() as u64;
        runtime.block_on(high_watermarks_reach(brokers, topic, length));
    }
    for broker in brokers.iter_mut() {
        broker.stop();
    }
    for (_, topic, first) in SCENARIOS {
        let expected = expected(first);
        let mut first_replica: Option<Vec<String>> = None;
        for broker in brokers.iter() {
            let (records, log_end) = broker.replica_contents(topic);
            let all: Vec<String> = records.into_iter().map(|(value, _)| value).collect();
            assert_eq!(
                log_end,
                all.len() as u64,
                "broker at {} holds uncommitted records of {topic}/0",
                broker.addr
            );
            let first_replica = first_replica.get_or_insert_with(|| all.clone());
            assert!(
                *first_replica == all,
                "broker at {} holds another log of {topic}/0 than broker 1",
                broker.addr
            );
            assert!(all.iter().filter(|value| *value == "stale").count() <= 1);
            let values: Vec<String> = all.into_iter().filter(|value| value != "stale").collect();
            assert!(
                values == expected,
                "broker at {} holds other records of {topic}/0 than were sent: first {:?}",
                broker.addr,
                &values[..values.len().min(5)]
            );
        }
    }
}

/// Every broker, asked directly, reports the same high watermark of `topic`/0, at least
/// `expected`.
pub(crate) async fn high_watermarks_reach(brokers: &[BrokerProcess], topic: &str, expected: u64) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let mut marks = Vec::new();
        for broker in brokers {
            let mark = match Client::connect(broker.addr.as_str()).await {
                Ok(direct) => direct
                    .cluster_metadata(&[topic])
                    .await
                    .ok()
                    .and_then(|info| {
                        info.partitions
                            .iter()
                            .find(|partition| partition.partition == 0)
                            .map(|partition| partition.high_watermark)
                    }),
                Err(_) => None,
            };
            marks.push(mark);
        }
        // `stale` may be one record more (see the module docs).
        if marks[0].is_some_and(|mark| mark >= expected) && marks.iter().all(|m| *m == marks[0]) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the replicas of {topic}/0 did not converge on {expected}: {marks:?}\n{}",
            logs(brokers)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `kcat -L` through one broker shows all three (where kcat is installed). The brokers were
/// just started and register in etcd in their own time: the listing is asked again until all
/// three are in it or [`CONVERGE`] passes.
fn kcat_lists_three_brokers(broker: &str) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let Ok(output) = Command::new("kcat")
            .args(["-b", broker, "-L", "-J"])
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
        if ids.len() < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        assert_eq!(ids, vec![1, 2, 3], "kcat -L: {listing}");
        return;
    }
}
