//! kill -9 of a standalone broker in the middle of a Kafka transactional producer's commits
//! (issue 31): after the restart no transaction is half visible to read_committed, and none
//! whose `commit_transaction()` returned is lost. The producer is confluent-kafka's
//! (`tools/kafka-clients/confluent_transactions.py commit-loop`); skipped, with a note, where
//! python3 cannot import confluent_kafka.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fencelog::client::Client;
use fencelog::protocol::TopicConfig;

use crate::support::python::python_module_missing;
use crate::support::raw_protocol::unused_port;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/kafka-clients/confluent_transactions.py"
);

fn serve(data_dir: &Path, native: SocketAddr, kafka: SocketAddr) -> Child {
    Command::new(crate::support::BIN)
        .args(["serve", "--data-dir"])
        .arg(data_dir)
        .args(["--listen", &native.to_string()])
        .args(["--kafka-listen", &kafka.to_string()])
        .args(["--log", "warn"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start fencelog serve")
}

async fn connect(addr: SocketAddr) -> Client {
    crate::support::process::connect_within(addr, Duration::from_secs(30)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_transaction_is_half_visible_or_lost_after_kill_9_mid_commit() {
    if python_module_missing("confluent_kafka") {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let native = SocketAddr::from(([127, 0, 0, 1], unused_port()));
    let kafka = SocketAddr::from(([127, 0, 0, 1], unused_port()));
    let mut server = serve(data.path(), native, kafka);
    let client = connect(native).await;
    client
        .create_topic("eos", 2, TopicConfig::default())
        .await
        .expect("create topic");
    let mut producer = Command::new("python3")
        .args([SCRIPT, "commit-loop", &kafka.to_string(), "eos"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run python3");
    let lines = BufReader::new(producer.stdout.take().unwrap());
    let (committed_tx, committed_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in lines.lines() {
            let line = line.unwrap();
            committed_tx.send(line).unwrap();
        }
    });
    // Kill once a few transactions are committed: the next commit is then in flight.
    let mut acknowledged = Vec::new();
    while acknowledged.len() < 20 {
        let line = committed_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the producer commits");
        if let Some(number) = line.strip_prefix("committed ") {
            acknowledged.push(number.parse::<u64>().unwrap());
        }
    }
    // At a random moment of the next commit (or the one after).
    let delay = rand::Rng::gen_range(&mut rand::thread_rng(), 0..60);
    tokio::time::sleep(Duration::from_millis(delay)).await;
    server.kill().expect("kill -9");
    server.wait().unwrap();
    producer.wait().expect("the producer stops");
    reader.join().unwrap();
    while let Ok(line) = committed_rx.try_recv() {
        if let Some(number) = line.strip_prefix("committed ") {
            acknowledged.push(number.parse::<u64>().unwrap());
        }
    }
    let mut server = serve(data.path(), native, kafka);
    connect(native).await;
    // An open transaction left by the kill is aborted by its timeout (3 s) before readers can
    // pass it: read until nothing new arrives for 6 s.
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .args([SCRIPT, "read-all", &kafka.to_string(), "eos", "6"])
            .output()
            .expect("run python3")
    })
    .await
    .unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(output.status.success(), "{output:?}");
    let read: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let mut transactions: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for record in read["records"].as_array().unwrap() {
        let (number, index) = record.as_str().unwrap().split_once('-').unwrap();
        transactions
            .entry(number.parse().unwrap())
            .or_default()
            .push(index.parse().unwrap());
    }
    check_whole_and_kept(&transactions, &acknowledged, 5);
    eprintln!(
        "{} transactions acknowledged before the kill, {} visible after the restart",
        acknowledged.len(),
        transactions.len()
    );
}

/// After a kill -9 mid-commit: every transaction read (number -> the indexes of its records
/// read_committed saw) is whole (`0..records`), and every acknowledged one is there.
pub(crate) fn check_whole_and_kept(
    transactions: &BTreeMap<u64, Vec<u64>>,
    acknowledged: &[u64],
    records: u64,
) {
    if let Err(problem) = whole_and_kept(transactions, acknowledged, records) {
        panic!("{problem}");
    }
}

/// What [`check_whole_and_kept`] checks, as an error a caller can add its context to (the
/// brokers' logs, what the producer said).
pub(crate) fn whole_and_kept(
    transactions: &BTreeMap<u64, Vec<u64>>,
    acknowledged: &[u64],
    records: u64,
) -> Result<(), String> {
    for (number, indexes) in transactions {
        let mut indexes = indexes.clone();
        indexes.sort_unstable();
        if indexes != (0..records).collect::<Vec<_>>() {
            return Err(format!(
                "transaction {number} is half visible (or duplicated): records {indexes:?}"
            ));
        }
    }
    for number in acknowledged {
        if !transactions.contains_key(number) {
            return Err(format!("transaction {number} was acknowledged and is lost"));
        }
    }
    Ok(())
}
