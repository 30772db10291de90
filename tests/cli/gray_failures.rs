//! Clients that route around a gray failure (issue 32): a first address that accepts
//! connections and never answers (a listener nobody reads, a SIGSTOP'd broker) costs `topic
//! list` and `cluster status` about the attempt timeout, not their request timeout; so it
//! costs `lease acquire` and `topic create` (issue 56), which must not be sent twice and so are
//! never sent to a broker that has not answered its connection's first exchange;
//! `produce --delivery-timeout 1s` gives up within seconds of its server's kill -9 and says the
//! outcome is unknown; `consume --follow` says once that it lost the server and once that it
//! is back; a line resent across a newer lease is reported appended; following a NOT_LEADER
//! redirect is not reported as a connection failure.
//!
//! The cluster cases need etcd and skip without it (not under `CI=true`).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fencelog::client::Client;
use fencelog::testing_proxy::Proxy;
use tempfile::TempDir;

use crate::cluster_processes::BrokerProcess;
use crate::support::etcd::EtcdServer;
use crate::support::raw_protocol::unused_port;
use crate::support::{start_server_on_own_runtime, BIN};

/// The bound the issue judges a command by when its first address is frozen.
const FROZEN_FIRST_ADDRESS_BOUND: Duration = Duration::from_secs(5);
/// The bound the issue judges a command that must not be sent twice by when its first address
/// is frozen: well under its 30 s request timeout, with room for the attempt timeout (1 s), a
/// reconnect and a loaded machine.
const FROZEN_FIRST_ADDRESS_UNSAFE_BOUND: Duration = Duration::from_secs(15);
/// How long a test waits for something that should happen within seconds.
const PATIENCE: Duration = Duration::from_secs(30);

/// Runs `fencelog ARGS --addr ADDR` with stdin closed.
fn fencelog(args: &[&str], addr: &str) -> Output {
    Command::new(BIN)
        .args(args)
        .args(["--addr", addr])
        .env_remove("FENCELOG_ADDR")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run fencelog")
}

/// [`fencelog`], which must succeed; its stdout.
fn fencelog_ok(args: &[&str], addr: &str) -> String {
    let output = fencelog(args, addr);
    assert!(
        output.status.success(),
        "fencelog {args:?} --addr {addr} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `fencelog ARGS --addr ADDR` running, with piped stdin, stdout and stderr.
fn spawn(args: &[&str], addr: &str) -> Child {
    Command::new(BIN)
        .args(args)
        .args(["--addr", addr])
        .env_remove("FENCELOG_ADDR")
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fencelog")
}

/// The lines of a child's pipe, as they come, from a thread.
fn lines_of(pipe: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    lines
}

/// The next line within [`PATIENCE`], or a panic naming what was awaited.
fn next_line(lines: &mpsc::Receiver<String>, what: &str) -> String {
    lines
        .recv_timeout(PATIENCE)
        .unwrap_or_else(|_| panic!("no {what} within {PATIENCE:?}"))
}

/// Waits (up to [`PATIENCE`]) for a child to exit; its exit code.
fn wait_exit(child: &mut Child) -> i32 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code().expect("exited normally");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("fencelog did not exit within {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn write_line(stdin: &mut ChildStdin, line: &str) {
    writeln!(stdin, "{line}").expect("write to fencelog's stdin");
    stdin.flush().expect("flush fencelog's stdin");
}

/// `fencelog serve` on `addr` over `data_dir`, listening (checked by a topic list).
fn serve(data_dir: &Path, addr: &str) -> Child {
    let child = Command::new(BIN)
        .args(["serve", "--data-dir"])
        .arg(data_dir)
        .args(["--listen", addr, "--log", "warn"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start fencelog serve");
    let deadline = Instant::now() + PATIENCE;
    while !fencelog(&["topic", "list"], addr).status.success() {
        assert!(Instant::now() < deadline, "fencelog serve never answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// Sends `signal` to process `pid`.
fn signal(pid: u32, signal: &str) {
    crate::support::process::signal(pid, signal);
}

/// SIGSTOPs `pid` and waits until all of it is stopped.
fn pause(pid: u32) {
    crate::support::process::pause(pid, PATIENCE);
}

/// Creates `topic` (one partition) and takes its lease; the epoch.
fn topic_with_lease(topic: &str, addr: &str) -> u64 {
    fencelog_ok(&["topic", "create", topic, "--partitions", "1"], addr);
    let lease = fencelog_ok(
        &[
            "lease", "acquire", topic, "0", "--holder", "test", "--ttl", "5m", "--json",
        ],
        addr,
    );
    let lease: serde_json::Value = serde_json::from_str(&lease).expect("lease JSON");
    lease["epoch"].as_u64().expect("epoch")
}

/// Asserts that `command` succeeded within the bound and printed `expected`.
fn assert_answers_quickly(command: &[&str], addrs: &str, expected: &str) {
    assert_answers_within(command, addrs, expected, FROZEN_FIRST_ADDRESS_BOUND);
}

/// Asserts that `command` succeeded within `bound` and printed `expected`; its stdout.
fn assert_answers_within(command: &[&str], addrs: &str, expected: &str, bound: Duration) -> String {
    let started = Instant::now();
    let output = fencelog(command, addrs);
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "fencelog {command:?} --addr {addrs} failed after {took:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(expected), "{command:?}: {stdout}");
    assert!(
        took < bound,
        "fencelog {command:?} took {took:?} with its first address frozen"
    );
    stdout.into_owned()
}

// Proves: with a first address that accepts connections and never answers (a listener nobody
// reads: the kernel completes the handshake, as for a SIGSTOP'd process), `topic list` and
// `cluster status` move on to the next address and answer within 5 s, not after their 30 s
// request timeout.
#[test]
fn topic_list_and_cluster_status_move_past_a_first_address_that_never_answers() {
    let (server, _runtime) = start_server_on_own_runtime();
    let frozen = TcpListener::bind("127.0.0.1:0").expect("bind the frozen listener");
    let server_addr = server.addr().to_string();
    fencelog_ok(
        &["topic", "create", "orders", "--partitions", "1"],
        &server_addr,
    );
    let addrs = format!("{},{server_addr}", frozen.local_addr().expect("address"));
    assert_answers_quickly(&["topic", "list"], &addrs, "orders");
    assert_answers_quickly(&["cluster", "status"], &addrs, "orders");
    assert_answers_quickly(&["topic", "describe", "orders"], &addrs, "orders");
}

// Proves (issue 56): with the first address a SIGSTOP'd broker, `lease acquire` and `topic
// create`, which must not be sent twice, succeed on the next address well within their 30 s
// request timeout, and the frozen broker, once resumed, carried out neither: it grants the
// same lease to another holder at epoch 1 and has no such topic. (Two standalone servers with
// the same topic stand for two brokers: what matters is what each was sent.)
#[test]
fn requests_that_must_not_be_sent_twice_go_past_a_sigstopped_first_broker() {
    let frozen_data = TempDir::new().expect("temp dir");
    let live_data = TempDir::new().expect("temp dir");
    let frozen_addr = format!("127.0.0.1:{}", unused_port());
    let live_addr = format!("127.0.0.1:{}", unused_port());
    let mut frozen = serve(frozen_data.path(), &frozen_addr);
    let mut live = serve(live_data.path(), &live_addr);
    for addr in [&frozen_addr, &live_addr] {
        fencelog_ok(&["topic", "create", "orders", "--partitions", "1"], addr);
    }
    pause(frozen.id());
    let addrs = format!("{frozen_addr},{live_addr}");
    let acquired = assert_answers_within(
        &[
            "lease", "acquire", "orders", "0", "--holder", "test", "--ttl", "5m", "--json",
        ],
        &addrs,
        "\"epoch\":1",
        FROZEN_FIRST_ADDRESS_UNSAFE_BOUND,
    );
    assert!(acquired.contains("\"holder\":\"test\""), "{acquired}");
    assert_answers_within(
        &["topic", "create", "fresh", "--partitions", "1"],
        &addrs,
        "fresh",
        FROZEN_FIRST_ADDRESS_UNSAFE_BOUND,
    );
    signal(frozen.id(), "-CONT");
    // Whatever the frozen broker had been sent is in its sockets' buffers: let it read them.
    fencelog_ok(&["topic", "list"], &frozen_addr);
    std::thread::sleep(Duration::from_millis(500));
    let granted = fencelog_ok(
        &[
            "lease", "acquire", "orders", "0", "--holder", "other", "--ttl", "5m", "--json",
        ],
        &frozen_addr,
    );
    assert!(
        granted.contains("\"epoch\":1"),
        "the frozen broker granted a lease while frozen: {granted}"
    );
    let topics = fencelog_ok(&["topic", "list"], &frozen_addr);
    assert!(
        !topics.contains("fresh"),
        "the frozen broker created the topic: {topics}"
    );
    let topics = fencelog_ok(&["topic", "list"], &live_addr);
    assert!(topics.contains("fresh"), "{topics}");
    for server in [&mut frozen, &mut live] {
        server.kill().expect("kill");
        let _ = server.wait();
    }
}

// Proves: `produce --delivery-timeout 1s` exits within 5 s of its server's kill -9 (the
// reconnect wait is bounded by the batch's deadline, not the client's reconnect timeout), and
// the line that was on the wire when the server died is reported with an unknown outcome
// (exit 4), never as not appended.
#[test]
fn produce_with_a_1s_delivery_timeout_exits_within_5s_of_the_servers_death() {
    let data = TempDir::new().expect("temp dir");
    let addr = format!("127.0.0.1:{}", unused_port());
    let mut server = serve(data.path(), &addr);
    let epoch = topic_with_lease("events", &addr).to_string();
    let mut produce = spawn(
        &[
            "produce",
            "events",
            "--epoch",
            &epoch,
            "--delivery-timeout",
            "1s",
        ],
        &addr,
    );
    let mut stdin = produce.stdin.take().expect("stdin");
    let stdout = lines_of(produce.stdout.take().expect("stdout"));
    let stderr = lines_of(produce.stderr.take().expect("stderr"));
    write_line(&mut stdin, "one");
    assert_eq!(next_line(&stdout, "offset of line 1"), "offset 0");
    // Line 2 goes on the wire to a frozen server, then the server dies with it unanswered.
    pause(server.id());
    write_line(&mut stdin, "two");
    std::thread::sleep(Duration::from_millis(300));
    server.kill().expect("kill -9");
    let killed = Instant::now();
    server.wait().expect("reap the server");
    let code = wait_exit(&mut produce);
    let took = killed.elapsed();
    drop(stdin);
    let stderr: Vec<String> = stderr.iter().collect();
    assert!(
        took < Duration::from_secs(5),
        "produce exited {took:?} after the server's death: {stderr:?}"
    );
    assert_eq!(code, 4, "{stderr:?}");
    let message = stderr.join("\n");
    assert!(
        message.contains("outcome unknown for line 2") && !message.contains("not appended"),
        "{message}"
    );
    assert_eq!(stdout.try_iter().collect::<Vec<_>>(), Vec::<String>::new());
}

// Proves (issue 56): `produce --delivery-timeout 5s` fed continuously exits within the delivery
// timeout plus a margin of its server's kill -9, with the line first not answered reported
// (exit 1 or 4): a later batch waiting to reconnect no longer holds up the failure of an
// earlier one (it did, up to 9.4 s). The margin is generous for a loaded machine; the measured
// figures are in docs/reliability.md section 8.
#[test]
fn produce_fed_continuously_exits_within_its_delivery_timeout_of_the_servers_death() {
    const DELIVERY_TIMEOUT: Duration = Duration::from_secs(5);
    const MARGIN: Duration = Duration::from_millis(2500);
    let data = TempDir::new().expect("temp dir");
    let addr = format!("127.0.0.1:{}", unused_port());
    let mut server = serve(data.path(), &addr);
    let epoch = topic_with_lease("events", &addr).to_string();
    let mut produce = spawn(
        &[
            "produce",
            "events",
            "--epoch",
            &epoch,
            "--delivery-timeout",
            "5s",
        ],
        &addr,
    );
    let mut stdin = produce.stdin.take().expect("stdin");
    let stdout = lines_of(produce.stdout.take().expect("stdout"));
    let stderr = lines_of(produce.stderr.take().expect("stderr"));
    // A line every 10 ms until fencelog stops reading.
    let feeder = std::thread::spawn(move || {
        for line in 0.. {
            if writeln!(stdin, "line {line}")
                .and_then(|()| stdin.flush())
                .is_err()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    for _ in 0..10 {
        next_line(&stdout, "an offset before the kill");
    }
    server.kill().expect("kill -9");
    let killed = Instant::now();
    server.wait().expect("reap the server");
    let code = wait_exit(&mut produce);
    let took = killed.elapsed();
    let stderr: Vec<String> = stderr.iter().collect();
    assert!(
        took < DELIVERY_TIMEOUT + MARGIN,
        "produce exited {took:?} after the server's death: {stderr:?}"
    );
    assert!(code == 1 || code == 4, "exit {code}: {stderr:?}");
    let _ = feeder.join();
}

// Proves: `consume --follow` keeps following through its server's death and restart, and says
// so on stderr with exactly one line when the server is lost (not one per retry) and one when
// it is back; the records appended after the restart are printed.
#[test]
fn consume_follow_says_once_when_it_loses_the_server_and_once_when_it_is_back() {
    let data = TempDir::new().expect("temp dir");
    let addr = format!("127.0.0.1:{}", unused_port());
    let mut server = serve(data.path(), &addr);
    let epoch = topic_with_lease("events", &addr).to_string();
    let produce = |value: &str| {
        let mut child = spawn(&["produce", "events", "--epoch", &epoch], &addr);
        let mut stdin = child.stdin.take().expect("stdin");
        write_line(&mut stdin, value);
        drop(stdin);
        assert_eq!(wait_exit(&mut child), 0, "produce {value}");
    };
    produce("one");
    let mut consume = spawn(&["consume", "events", "--follow"], &addr);
    let stdout = lines_of(consume.stdout.take().expect("stdout"));
    let stderr = lines_of(consume.stderr.take().expect("stderr"));
    assert_eq!(next_line(&stdout, "record one"), "one");
    server.kill().expect("kill -9");
    server.wait().expect("reap the server");
    let lost = next_line(&stderr, "line saying the server was lost");
    assert!(lost.contains("lost the server"), "{lost}");
    // Several polls fail meanwhile; none of them may add a line.
    std::thread::sleep(Duration::from_secs(5));
    let mut server = serve(data.path(), &addr);
    produce("two");
    assert_eq!(next_line(&stdout, "record two"), "two");
    let back = next_line(&stderr, "line saying the server is back");
    assert!(back.contains("the server is back"), "{back}");
    signal(consume.id(), "-INT");
    assert_eq!(wait_exit(&mut consume), 0);
    let rest: Vec<String> = stderr.iter().collect();
    assert!(
        rest.is_empty(),
        "stderr had more than one line per change: {lost:?}, {back:?}, then {rest:?}"
    );
    server.kill().expect("kill");
    let _ = server.wait();
}

// Proves (the case, end to end through the binary): a line whose answer was lost, then
// resent by `fencelog produce` after a newer lease was granted, is reported appended with its
// offset (exit 0), and is in the log once.
#[test]
fn produce_reports_a_line_resent_across_a_newer_lease_as_appended() {
    let (server, runtime) = start_server_on_own_runtime();
    let proxy = {
        let _entered = runtime.enter();
        runtime
            .block_on(Proxy::start(server.addr()))
            .expect("start the proxy")
    };
    let direct = runtime
        .block_on(Client::connect(server.addr()))
        .expect("connect");
    runtime
        .block_on(direct.create_topic("events", 1, Default::default()))
        .expect("create the topic");
    let ttl = Duration::from_secs(60);
    let old = runtime
        .block_on(direct.acquire_lease("events", 0, "a", ttl))
        .expect("lease");
    let epoch = old.epoch.to_string();
    let mut produce = spawn(
        &["produce", "events", "--epoch", &epoch, "--linger", "1ms"],
        &proxy.addr().to_string(),
    );
    let mut stdin = produce.stdin.take().expect("stdin");
    let stdout = lines_of(produce.stdout.take().expect("stdout"));
    let stderr = lines_of(produce.stderr.take().expect("stderr"));
    write_line(&mut stdin, "first");
    assert_eq!(next_line(&stdout, "offset of line 1"), "offset 0");
    // The next request (line 2's produce) reaches the server, its answer does not, and the
    // producer cannot reconnect until the newer lease exists.
    proxy.refuse_connections_for(Duration::from_secs(3));
    proxy.cut_after_requests(1);
    write_line(&mut stdin, "answer lost");
    let deadline = Instant::now() + PATIENCE;
    while runtime
        .block_on(direct.list_offsets("events", 0))
        .expect("offsets")
        .latest
        < 2
    {
        assert!(Instant::now() < deadline, "line 2 never reached the log");
        std::thread::sleep(Duration::from_millis(5));
    }
    proxy.stop_cutting_after_requests();
    runtime
        .block_on(direct.release_lease("events", 0, old.lease_id))
        .expect("release");
    let newer = runtime
        .block_on(direct.acquire_lease("events", 0, "b", ttl))
        .expect("newer lease");
    assert!(newer.epoch > old.epoch);
    drop(stdin);
    let code = wait_exit(&mut produce);
    let stderr: Vec<String> = stderr.iter().collect();
    assert_eq!(code, 0, "{stderr:?}");
    assert_eq!(next_line(&stdout, "offset of line 2"), "offset 1");
    assert!(
        stderr
            .iter()
            .any(|line| line.contains("every line was appended once")),
        "the answer was never lost: {stderr:?}"
    );
    let fetched = runtime
        .block_on(direct.fetch("events", 0, 0, 1 << 20, Duration::ZERO))
        .expect("fetch");
    let values: Vec<&[u8]> = fetched
        .records
        .iter()
        .map(|record| record.value.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(values, [&b"first"[..], b"answer lost"]);
}

/// etcd and three `fencelog serve --etcd` processes.
struct ProcessCluster {
    brokers: Vec<BrokerProcess>,
    _etcd: EtcdServer,
    _root: TempDir,
}

impl ProcessCluster {
    fn start(test: &str) -> Option<ProcessCluster> {
        let etcd = EtcdServer::start_or_skip(test)?;
        let root = TempDir::new().expect("temp dir");
        let brokers = (1..=3)
            .map(|id| {
                let mut broker = BrokerProcess::prepare(id, &root, &etcd.endpoint());
                broker.spawn();
                broker
            })
            .collect();
        let cluster = ProcessCluster {
            brokers,
            _etcd: etcd,
            _root: root,
        };
        let deadline = Instant::now() + PATIENCE;
        while cluster.status()["brokers"].as_array().map_or(0, |brokers| {
            brokers.iter().filter(|b| b["alive"] == true).count()
        }) < 3
        {
            assert!(Instant::now() < deadline, "brokers never registered");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(cluster)
    }

    /// The lease of `topic`/0 through every broker; its epoch.
    fn lease(&self, topic: &str, addrs: &str) -> String {
        let lease = fencelog_ok(
            &[
                "lease", "acquire", topic, "0", "--holder", "test", "--ttl", "5m", "--json",
            ],
            addrs,
        );
        let lease: serde_json::Value = serde_json::from_str(&lease).expect("lease JSON");
        lease["epoch"].as_u64().expect("epoch").to_string()
    }

    fn addrs(&self) -> String {
        let addrs: Vec<&str> = self.brokers.iter().map(|b| b.addr.as_str()).collect();
        addrs.join(",")
    }

    fn status(&self) -> serde_json::Value {
        let status = fencelog_ok(&["cluster", "status", "--json"], &self.addrs());
        serde_json::from_str(&status).expect("status JSON")
    }

    /// Creates `topic` with one partition on all three brokers (`extra`: more flags) and waits
    /// for its leader and a full ISR; the leader.
    fn create_replicated(&self, topic: &str, extra: &[&str]) -> u32 {
        let mut args = vec![
            "topic",
            "create",
            topic,
            "--partitions",
            "1",
            "--replication-factor",
            "3",
        ];
        args.extend_from_slice(extra);
        fencelog_ok(&args, &self.addrs());
        let deadline = Instant::now() + PATIENCE;
        loop {
            let status = self.status();
            let leader = status["partitions"]
                .as_array()
                .and_then(|partitions| {
                    partitions.iter().find(|p| {
                        p["topic"] == topic && p["isr"].as_array().is_some_and(|isr| isr.len() == 3)
                    })
                })
                .and_then(|partition| partition["leader"].as_u64());
            if let Some(leader) = leader {
                return u32::try_from(leader).expect("node id");
            }
            assert!(
                Instant::now() < deadline,
                "{topic} never got a leader and a full ISR"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

// Proves: with the first of three brokers SIGSTOP'd (its kernel still accepts connections),
// `topic list` and `cluster status` answer from the next broker within 5 s.
#[test]
fn topic_list_and_cluster_status_answer_within_5s_with_the_first_broker_paused() {
    let Some(cluster) = ProcessCluster::start(
        "topic_list_and_cluster_status_answer_within_5s_with_the_first_broker_paused",
    ) else {
        return;
    };
    cluster.create_replicated("orders", &[]);
    let first = cluster.brokers[0].child.as_ref().expect("running").id();
    pause(first);
    let addrs = cluster.addrs();
    assert_answers_quickly(&["topic", "list"], &addrs, "orders");
    assert_answers_quickly(&["cluster", "status"], &addrs, "orders");
    signal(first, "-CONT");
}

// Proves: `produce` whose first address is a follower, not the partition's leader, follows the
// NOT_LEADER redirect without calling it a connection failure: exit 0, every offset printed,
// and no "resent ... after ... connection failures" summary on stderr.
#[test]
fn produce_through_a_follower_first_reports_no_connection_failures() {
    let Some(cluster) =
        ProcessCluster::start("produce_through_a_follower_first_reports_no_connection_failures")
    else {
        return;
    };
    let leader = cluster.create_replicated("orders", &[]);
    let mut addrs: Vec<&str> = Vec::new();
    addrs.extend(
        cluster
            .brokers
            .iter()
            .filter(|b| b.id != leader)
            .map(|b| b.addr.as_str()),
    );
    addrs.extend(
        cluster
            .brokers
            .iter()
            .filter(|b| b.id == leader)
            .map(|b| b.addr.as_str()),
    );
    let addrs = addrs.join(",");
    let epoch = cluster.lease("orders", &addrs);
    let mut produce = spawn(&["produce", "orders", "--epoch", &epoch], &addrs);
    let mut stdin = produce.stdin.take().expect("stdin");
    let stdout = lines_of(produce.stdout.take().expect("stdout"));
    let stderr = lines_of(produce.stderr.take().expect("stderr"));
    for line in ["a", "b", "c"] {
        write_line(&mut stdin, line);
    }
    drop(stdin);
    let code = wait_exit(&mut produce);
    let stderr: Vec<String> = stderr.iter().collect();
    assert_eq!(code, 0, "{stderr:?}");
    assert_eq!(
        stdout.iter().collect::<Vec<_>>(),
        ["offset 0", "offset 1", "offset 2"]
    );
    assert!(
        stderr
            .iter()
            .all(|line| !line.contains("resent") && !line.contains("connection failures")),
        "a redirect was reported as a connection failure: {stderr:?}"
    );
}

// Proves: a line the leader appended but could not commit with enough in-sync replicas (both
// followers stopped after the ISR formed, min_insync 2: the ISR shrinks to the leader and the
// write is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND) is reported with an unknown outcome (exit
// 4), never as not appended, and it is in the log.
#[test]
fn a_line_appended_under_not_enough_replicas_after_append_is_never_reported_not_appended() {
    let Some(cluster) = ProcessCluster::start(
        "a_line_appended_under_not_enough_replicas_after_append_is_never_reported_not_appended",
    ) else {
        return;
    };
    let leader = cluster.create_replicated("orders", &["--min-insync", "2"]);
    let addrs = cluster.addrs();
    let epoch = cluster.lease("orders", &addrs);
    let followers: Vec<u32> = cluster
        .brokers
        .iter()
        .filter(|broker| broker.id != leader)
        .map(|broker| broker.child.as_ref().expect("running").id())
        .collect();
    for follower in &followers {
        pause(*follower);
    }
    let leader_addr = cluster
        .brokers
        .iter()
        .find(|broker| broker.id == leader)
        .map(|broker| broker.addr.clone())
        .expect("leader");
    let mut produce = spawn(
        &[
            "produce",
            "orders",
            "--epoch",
            &epoch,
            "--acks",
            "all",
            "--delivery-timeout",
            "60s",
        ],
        &leader_addr,
    );
    let mut stdin = produce.stdin.take().expect("stdin");
    let stderr = lines_of(produce.stderr.take().expect("stderr"));
    write_line(&mut stdin, "maybe");
    drop(stdin);
    let code = wait_exit(&mut produce);
    let message = stderr.iter().collect::<Vec<_>>().join("\n");
    for follower in &followers {
        signal(*follower, "-CONT");
    }
    assert_eq!(code, 4, "{message}");
    assert!(
        message.contains("outcome unknown for line 1")
            && message.contains("NOT_ENOUGH_REPLICAS_AFTER_APPEND")
            && !message.contains("not appended"),
        "{message}"
    );
    let log = fencelog_ok(
        &["consume", "orders", "--from", "0", "--count", "1"],
        &leader_addr,
    );
    assert_eq!(log.trim_end(), "maybe", "the line is in the log");
}
