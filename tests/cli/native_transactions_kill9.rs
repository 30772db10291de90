//! kill -9 of a standalone server in the middle of a native writer's atomic commits (issue 31):
//! after the restart no transaction is half visible to read_committed readers, and none whose
//! `commit()` returned is lost. The writer is the Rust client (`TransactionalProducer`) under
//! its own leases on two partitions.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fencelog::client::Client;
use fencelog::protocol::TopicConfig;

use crate::support::raw_protocol::unused_port;

/// Records per transaction, alternating between the two partitions.
const RECORDS: u64 = 5;

fn serve(data_dir: &Path, native: SocketAddr) -> Child {
    Command::new(crate::support::BIN)
        .args(["serve", "--data-dir"])
        .arg(data_dir)
        .args(["--listen", &native.to_string()])
        .args(["--log", "warn"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start fencelog serve")
}

/// Commits transactions `0, 1, ...` until the server goes away; reports each number whose
/// commit returned `Ok`.
async fn commit_loop(client: Client, committed: tokio::sync::mpsc::UnboundedSender<u64>) {
    let ttl = Duration::from_secs(60);
    let Ok(zero) = client.acquire_lease("atomic", 0, "writer", ttl).await else {
        return;
    };
    let Ok(one) = client.acquire_lease("atomic", 1, "writer", ttl).await else {
        return;
    };
    let epochs = [zero.epoch, one.epoch];
    let Ok(mut producer) = client
        .init_transaction("kill9", Duration::from_secs(3))
        .await
    else {
        return;
    };
    for number in 0u64.. {
        for index in 0..RECORDS {
            let partition = (index % 2) as u32;
            let value = Bytes::from(format!("{number}-{index}"));
            if producer
                .send(
                    "atomic",
                    partition,
                    epochs[partition as usize],
                    &[(None, value)],
                )
                .await
                .is_err()
            {
                return;
            }
        }
        if producer.commit().await.is_err() || committed.send(number).is_err() {
            return;
        }
    }
}

/// Every committed value of `partition`, read until nothing new arrives for `quiet`.
async fn read_committed(client: &Client, partition: u32, quiet: Duration) -> Vec<String> {
    let mut values = Vec::new();
    let mut offset = 0;
    let mut last_progress = Instant::now();
    while last_progress.elapsed() < quiet {
        let read = client
            .fetch_committed(
                "atomic",
                partition,
                offset,
                1 << 20,
                Duration::from_millis(500),
            )
            .await
            .expect("fetch");
        if read.next_offset > offset {
            offset = read.next_offset;
            last_progress = Instant::now();
        }
        values.extend(
            read.records
                .iter()
                .filter_map(|record| record.value.as_deref())
                .map(|value| String::from_utf8_lossy(value).into_owned()),
        );
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_atomic_append_is_half_visible_or_lost_after_kill_9_mid_commit() {
    let data = tempfile::tempdir().unwrap();
    let native = SocketAddr::from(([127, 0, 0, 1], unused_port()));
    let mut server = serve(data.path(), native);
    let client = crate::support::process::connect_within(native, Duration::from_secs(30)).await;
    client
        .create_topic("atomic", 2, TopicConfig::default())
        .await
        .expect("create topic");
    let (committed_tx, mut committed_rx) = tokio::sync::mpsc::unbounded_channel();
    let writer = tokio::spawn(commit_loop(client.clone(), committed_tx));
    let mut acknowledged = Vec::new();
    while acknowledged.len() < 20 {
        let number = tokio::time::timeout(Duration::from_secs(60), committed_rx.recv())
            .await
            .expect("the writer commits")
            .expect("the writer runs");
        acknowledged.push(number);
    }
    // At a random moment of the next commit (or the one after).
    let delay = rand::Rng::gen_range(&mut rand::thread_rng(), 0..20);
    tokio::time::sleep(Duration::from_millis(delay)).await;
    server.kill().expect("kill -9");
    server.wait().unwrap();
    writer.await.unwrap();
    while let Ok(number) = committed_rx.try_recv() {
        acknowledged.push(number);
    }
    let mut server = serve(data.path(), native);
    let client = crate::support::process::connect_within(native, Duration::from_secs(30)).await;
    // A transaction left open by the kill is aborted at its timeout (3 s): read until nothing
    // new arrives for 6 s.
    let mut transactions: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let quiet = Duration::from_secs(6);
    let (zero, one) = tokio::join!(
        read_committed(&client, 0, quiet),
        read_committed(&client, 1, quiet)
    );
    {
        for value in zero.into_iter().chain(one) {
            let (number, index) = value.split_once('-').unwrap();
            transactions
                .entry(number.parse().unwrap())
                .or_default()
                .push(index.parse().unwrap());
        }
    }
    server.kill().unwrap();
    server.wait().unwrap();
    crate::kafka_transactions_kill9::check_whole_and_kept(&transactions, &acknowledged, RECORDS);
    eprintln!(
        "{} atomic appends acknowledged before the kill, {} visible after the restart",
        acknowledged.len(),
        transactions.len()
    );
}
