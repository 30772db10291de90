//! Brokers that refuse to be confused (issue 32), with real processes over a real etcd: a second
//! `fencelog serve` with a live broker's `--node-id` exits non-zero naming the other's address
//! and never touches a replica; the same broker restarted after `kill -9` waits out its old
//! registration and joins; after etcd restarts, brokers register again at once (revoking the
//! lease etcd restored) instead of waiting it out; and a broker cut off from etcd does not log
//! the same line for a partition more than about once a second.
//!
//! Skipped with a note where the `etcd` binary is missing (`.ci/run` installs `etcd-server`).

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use fencelog::cluster::meta::{EtcdConfig, EtcdMetaStore, MetaStore};
use tempfile::TempDir;

use crate::cluster_processes::BrokerProcess;
use crate::support::etcd::EtcdServer;
use crate::support::BIN;

/// How long a test waits for something that should happen within a few seconds.
const CONVERGE: Duration = Duration::from_secs(30);

/// The cluster name `BrokerProcess` starts its brokers with.
const CLUSTER_NAME: &str = "processes";

async fn store(etcd: &EtcdServer) -> EtcdMetaStore {
    EtcdMetaStore::connect(EtcdConfig::new([etcd.endpoint()]).with_cluster_name(CLUSTER_NAME))
        .await
        .expect("connect to etcd")
}

/// The lease id of `node_id`'s registration, if it has one.
async fn registration_lease(store: &EtcdMetaStore, node_id: u32) -> Option<i64> {
    store
        .broker_registration(node_id)
        .await
        .ok()
        .flatten()
        .map(|held| held.lease_id)
}

/// Waits until every broker in `node_ids` is registered; returns their lease ids.
async fn wait_registered(store: &EtcdMetaStore, node_ids: &[u32], brokers: &[&BrokerProcess]) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let mut all = true;
        for node_id in node_ids {
            all &= registration_lease(store, *node_id).await.is_some();
        }
        if all {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "brokers {node_ids:?} never registered; their logs:\n{}",
            logs(brokers)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn logs(brokers: &[&BrokerProcess]) -> String {
    brokers
        .iter()
        .map(|broker| {
            let log = broker.log();
            let lines: Vec<&str> = log.lines().collect();
            format!(
                "--- broker {} at {}:\n{}\n",
                broker.id,
                broker.addr,
                lines[lines.len().saturating_sub(30)..].join("\n")
            )
        })
        .collect()
}

fn cli(addrs: &str, args: &[&str]) {
    let output = Command::new(BIN)
        .args(args)
        .args(["--addr", addrs])
        .env_remove("FENCELOG_ADDR")
        .output()
        .expect("run fencelog");
    assert!(
        output.status.success(),
        "fencelog {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Waits for `broker`'s process to exit; its exit status.
fn wait_exit(broker: &mut BrokerProcess, within: Duration) -> std::process::ExitStatus {
    let child = broker.child.as_mut().expect("started");
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            broker.child = None;
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "broker {} (at {}) still runs after {within:?}; its log:\n{}",
            broker.id,
            broker.addr,
            broker.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A second process started with a live broker's node id exits non-zero with a message that
/// names the live broker's address and says what to do, within about the holder's TTL; it
/// never creates, follows or deletes a replica (its data directory holds no topic), and the
/// live broker keeps its registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_broker_with_a_live_node_id_exits_non_zero_naming_the_other() {
    let Some(etcd) = EtcdServer::start_or_skip("a_second_broker_with_a_live_node_id") else {
        return;
    };
    let root = tempfile::tempdir().expect("temp dir");
    let mut first = BrokerProcess::prepare(1, &root, &etcd.endpoint());
    tokio::task::block_in_place(|| first.spawn());
    let store = store(&etcd).await;
    wait_registered(&store, &[1], &[&first]).await;
    let lease = registration_lease(&store, 1).await;
    cli(
        &first.addr,
        &["topic", "create", "orders", "--partitions", "2"],
    );

    let other_root = tempfile::tempdir().expect("temp dir");
    let mut second = BrokerProcess::prepare(1, &other_root, &etcd.endpoint());
    tokio::task::block_in_place(|| second.spawn());
    // TTL_MS (2 s) + the claim's margin (2 s) at most; a renewal usually shows much sooner.
    let status = tokio::task::block_in_place(|| wait_exit(&mut second, CONVERGE));
    let log = second.log();
    assert!(!status.success(), "the second broker exited with {status}");
    assert!(
        log.contains("node id 1 is in use by another live broker")
            && log.contains(&first.addr)
            && log.contains("--node-id"),
        "the refusal names the holder's address and the fix; log:\n{log}"
    );
    assert!(
        !second.data_dir.join("topics").join("orders").exists(),
        "the refused broker created a replica; log:\n{log}"
    );
    assert_eq!(
        registration_lease(&store, 1).await,
        lease,
        "the live broker keeps its registration"
    );
    assert!(first.child.as_mut().unwrap().try_wait().unwrap().is_none());
}

/// The same broker restarted on its data directory right after `kill -9`, while its previous
/// process's registration is still live, is not refused: it waits for that registration to
/// lapse (at most its TTL, and its log says so), then registers and keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restarted_after_kill_9_waits_out_its_old_registration_and_joins() {
    let Some(etcd) = EtcdServer::start_or_skip("a_broker_restarted_after_kill_9") else {
        return;
    };
    let root = tempfile::tempdir().expect("temp dir");
    let mut broker = BrokerProcess::prepare(1, &root, &etcd.endpoint());
    broker.ttl_ms = "4000";
    tokio::task::block_in_place(|| broker.spawn());
    let store = store(&etcd).await;
    wait_registered(&store, &[1], &[&broker]).await;
    let old_lease = registration_lease(&store, 1).await.expect("registered");

    broker.kill9();
    tokio::task::block_in_place(|| broker.spawn());
    let deadline = Instant::now() + CONVERGE;
    loop {
        let lease = registration_lease(&store, 1).await;
        if lease.is_some_and(|lease| lease != old_lease) {
            break;
        }
        if let Some(status) = broker.child.as_mut().unwrap().try_wait().unwrap() {
            panic!(
                "the restarted broker exited with {status}:\n{}",
                broker.log()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the restarted broker never registered:\n{}",
            broker.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = broker.log();
    assert!(
        log.contains("waiting for its registration to lapse"),
        "the restarted broker says why it waits:\n{log}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        broker.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "the restarted broker keeps running:\n{log}"
    );
}

/// After etcd was down long enough for every broker's registration to be lost by its own
/// clock, and comes back with their leases restored (etcd keeps leases across a restart and
/// restarts their TTLs), every broker registers again well within that TTL: it revokes the
/// lease it gave up and takes a new one at once, rather than waiting for the old one to lapse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_etcd_restarts_brokers_register_again_without_waiting_out_their_old_leases() {
    let Some(mut etcd) = EtcdServer::start_or_skip("after_etcd_restarts_brokers_register") else {
        return;
    };
    // A TTL much longer than the re-registration bound below: waiting out the restored lease
    // would take all of it.
    const TTL: Duration = Duration::from_secs(10);
    let root = tempfile::tempdir().expect("temp dir");
    let mut brokers: Vec<BrokerProcess> = (1..=2)
        .map(|id| BrokerProcess::prepare(id, &root, &etcd.endpoint()))
        .collect();
    for broker in &mut brokers {
        broker.ttl_ms = "10000";
        tokio::task::block_in_place(|| broker.spawn());
    }
    let store_before = store(&etcd).await;
    let all: Vec<&BrokerProcess> = brokers.iter().collect();
    wait_registered(&store_before, &[1, 2], &all).await;
    let mut old_leases = HashMap::new();
    for id in [1, 2] {
        old_leases.insert(id, registration_lease(&store_before, id).await.unwrap());
    }
    drop(store_before);

    etcd.kill();
    // Past the brokers' local deadline (80% of the TTL): each gives its registration up.
    tokio::time::sleep(TTL * 9 / 10).await;
    tokio::task::block_in_place(|| etcd.start_again()).expect("etcd starts again");
    let back = Instant::now();
    let store = store(&etcd).await;
    loop {
        let mut renewed = 0;
        for id in [1, 2] {
            let lease = registration_lease(&store, id).await;
            if lease.is_some_and(|lease| lease != old_leases[&id]) {
                renewed += 1;
            }
        }
        if renewed == 2 {
            break;
        }
        // Well under the TTL: only revoking the restored lease can be this quick.
        assert!(
            back.elapsed() < TTL / 2,
            "the brokers did not register again within {:?} of etcd's return:\n{}",
            TTL / 2,
            logs(&all_of(&brokers))
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for broker in &brokers {
        assert!(
            broker
                .log()
                .contains("revoking it to register again at once"),
            "broker {} says it replaced its restored registration:\n{}",
            broker.id,
            broker.log()
        );
    }
}

fn all_of(brokers: &[BrokerProcess]) -> Vec<&BrokerProcess> {
    brokers.iter().collect()
}

/// The message of a log line (tracing's default format: time, level, target, message, fields)
/// with the partition it is about, if any: what "the same line for a partition" means.
fn line_key(line: &str) -> Option<String> {
    let mut words = line.split_whitespace();
    let _time = words.next()?;
    let level = words.next()?;
    let target = words.next()?;
    let rest: Vec<&str> = words.collect();
    let message: Vec<&str> = rest
        .iter()
        .take_while(|word| !word.contains('='))
        .copied()
        .collect();
    let partition = rest
        .iter()
        .find_map(|word| word.strip_prefix("partition="))
        .unwrap_or("-");
    Some(format!(
        "{level} {target} {} [{partition}]",
        message.join(" ")
    ))
}

/// A broker whose registration is lost (etcd down) and whose leader is gone too is in a steady
/// state: nothing changes until etcd returns. Over four seconds of it, no line (message and
/// partition) appears more than five times in either broker's log; before, the follower tasks
/// of such a broker logged "following" and "became follower" every ~100 ms per partition, and
/// "cannot register" every tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_without_etcd_logs_no_line_more_than_once_a_second_per_partition() {
    let Some(mut etcd) = EtcdServer::start_or_skip("a_broker_without_etcd_logs_no_line") else {
        return;
    };
    let root: TempDir = tempfile::tempdir().expect("temp dir");
    let mut brokers: Vec<BrokerProcess> = (1..=2)
        .map(|id| BrokerProcess::prepare(id, &root, &etcd.endpoint()))
        .collect();
    for broker in &mut brokers {
        tokio::task::block_in_place(|| broker.spawn());
    }
    let store = store(&etcd).await;
    wait_registered(&store, &[1, 2], &all_of(&brokers)).await;
    let addrs = format!("{},{}", brokers[0].addr, brokers[1].addr);
    cli(
        &addrs,
        &[
            "topic",
            "create",
            "orders",
            "--partitions",
            "4",
            "--replication-factor",
            "2",
        ],
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    etcd.kill();
    // The registrations (TTL 2 s) are lost by now, leaders deposed, followers refused.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let marks: Vec<usize> = brokers.iter().map(|broker| broker.log().len()).collect();
    const WINDOW: Duration = Duration::from_secs(4);
    tokio::time::sleep(WINDOW).await;
    for (broker, mark) in brokers.iter().zip(marks) {
        let log = broker.log();
        let window = &log[mark..];
        let mut counts: HashMap<String, usize> = HashMap::new();
        for line in window.lines() {
            if let Some(key) = line_key(line) {
                *counts.entry(key).or_default() += 1;
            }
        }
        let limit = WINDOW.as_secs() as usize + 1;
        let noisy: Vec<_> = counts.iter().filter(|(_, count)| **count > limit).collect();
        assert!(
            noisy.is_empty(),
            "broker {} logged these more than {limit} times in {WINDOW:?}: {noisy:?}\n{window}",
            broker.id
        );
    }
}
