//! Two cluster brokers left running after their etcd is gone (killed, its address then held by
//! a listener that accepts and closes every connection, counting them) and their data
//! directories removed: how often they try etcd again. Every retry loop against etcd backs off
//! exponentially with jitter up to a cap (`fencelog::cluster` backoff; issue 56), so after the
//! first seconds the brokers make a few attempts a second each; before, a partition re-read
//! loop per refused follower restart piled up to about 2,000 connects a second per broker
//! (40% of a core each).
//!
//! The test counts attempts, it does not time anything: the window only has to be long enough
//! for a tight loop to show, and a loaded machine makes fewer attempts, not more.
//!
//! Skipped with a note where the `etcd` binary is missing (`.ci/run` installs `etcd-server`).

use std::net::TcpListener;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster_processes::BrokerProcess;
use crate::support::etcd::EtcdServer;
use crate::support::BIN;

/// Partitions of the test's topic (replication factor 2: each broker holds a replica of each).
const PARTITIONS: u32 = 40;
/// How long the test waits for the cluster to form and elect.
const CONVERGE: Duration = Duration::from_secs(60);
/// After etcd is gone: time for the registrations to lapse, the leaders to be deposed and the
/// followers to be refused, and for every backoff to reach its cap, before attempts are counted.
const SETTLE: Duration = Duration::from_secs(12);
/// The window attempts are counted over.
const WINDOW: Duration = Duration::from_secs(10);
/// Most connections to etcd's address per broker per second of the window. The brokers
/// settle near 6 (a registration and a watch try every one to two seconds, and one
/// partition-state read per replica every five to ten seconds: 121 in 10 s from two brokers
/// here); before the backoff their loops piled up, 968 in the same window (1,500 to 2,300 a
/// second per broker against a refused port).
const ATTEMPTS_PER_BROKER_PER_SECOND_MAX: u64 = 15;

/// Accepts and closes every connection on `listener`, counting them, until `stop`.
fn count_connections(
    listener: TcpListener,
    count: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((stream, _)) => {
                    count.fetch_add(1, Ordering::Relaxed);
                    drop(stream);
                }
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    })
}

fn cli(addrs: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(BIN)
        .args(args)
        .args(["--addr", addrs])
        .env_remove("FENCELOG_ADDR")
        .output()
        .expect("run fencelog");
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// Waits until `ready` holds of `cluster status --json`.
fn wait_status(addrs: &str, what: &str, ready: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        if let Ok(out) = cli(addrs, &["cluster", "status", "--json"]) {
            if serde_json::from_str(&out).is_ok_and(|status| ready(&status)) {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Proves: with etcd gone and their data directories removed, two brokers holding 40
/// replicated partitions each try etcd at most a few times a second (the retry loops back off),
/// not thousands; they are still running.
#[test]
fn brokers_without_etcd_back_off() {
    let Some(mut etcd) = EtcdServer::start_or_skip("brokers_without_etcd_back_off") else {
        return;
    };
    let root = tempfile::tempdir().expect("temp dir");
    let mut brokers: Vec<BrokerProcess> = (1..=2)
        .map(|id| BrokerProcess::prepare(id, &root, &etcd.endpoint()))
        .collect();
    for broker in &mut brokers {
        broker.spawn();
    }
    let addrs = brokers
        .iter()
        .map(|broker| broker.addr.clone())
        .collect::<Vec<_>>()
        .join(",");
    wait_status(&addrs, "both brokers registered", |status| {
        status["brokers"].as_array().is_some_and(|brokers| {
            brokers
                .iter()
                .filter(|broker| broker["alive"] == true)
                .count()
                == 2
        })
    });
    let partitions = PARTITIONS.to_string();
    cli(
        &addrs,
        &[
            "topic",
            "create",
            "gone",
            "--partitions",
            &partitions,
            "--replication-factor",
            "2",
        ],
    )
    .expect("create the topic");
    wait_status(&addrs, "every partition led with both in sync", |status| {
        status["partitions"].as_array().is_some_and(|rows| {
            let rows: Vec<_> = rows.iter().filter(|row| row["topic"] == "gone").collect();
            rows.len() == PARTITIONS as usize
                && rows.iter().all(|row| {
                    row["leader"].is_u64()
                        && row["isr"].as_array().is_some_and(|isr| isr.len() == 2)
                })
        })
    });

    let etcd_addr = etcd.endpoint().trim_start_matches("http://").to_owned();
    etcd.kill();
    for broker in &brokers {
        std::fs::remove_dir_all(&broker.data_dir).expect("remove a data directory");
    }
    let listener = {
        let deadline = Instant::now() + CONVERGE;
        loop {
            match TcpListener::bind(&etcd_addr) {
                Ok(listener) => break listener,
                Err(error) => {
                    assert!(
                        Instant::now() < deadline,
                        "cannot take etcd's address: {error}"
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    };
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let counter = count_connections(listener, Arc::clone(&count), Arc::clone(&stop));

    std::thread::sleep(SETTLE);
    let settled = count.swap(0, Ordering::Relaxed);
    let started = Instant::now();
    std::thread::sleep(WINDOW);
    let attempts = count.load(Ordering::Relaxed);
    let window_seconds = started.elapsed().as_secs().max(1);
    stop.store(true, Ordering::Relaxed);
    counter.join().expect("counter thread");

    let bound = ATTEMPTS_PER_BROKER_PER_SECOND_MAX * brokers.len() as u64 * window_seconds;
    eprintln!(
        "etcd gone: {settled} connections while settling ({SETTLE:?}), {attempts} in {window_seconds} s after (bound {bound})"
    );
    for broker in &mut brokers {
        let child = broker.child.as_mut().expect("started");
        assert!(
            child.try_wait().expect("poll the broker").is_none(),
            "broker {} exited without etcd; its log:\n{}",
            broker.id,
            broker.log()
        );
    }
    assert!(
        attempts <= bound,
        "{attempts} connections to etcd's address in {window_seconds} s from {} brokers: some retry loop does not back off",
        brokers.len()
    );
    assert!(
        attempts > 0,
        "no broker tried etcd again in {window_seconds} s: the counter saw nothing"
    );
}
