//! Committed offsets of consumer groups end to end: the client API against a real server
//! (durability across a restart and a SIGKILL, the refusals and their codes), and
//! `fencelog consume --group` as the real binary, whose contract is that two runs read each
//! record exactly once between them.

use crate::support::raw_protocol;

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fencelog::client::{BatchBuilder, Client, ClientError, CommittedOffset};
use fencelog::protocol::{ErrorCode, TopicConfig};
use fencelog::testing::TestServer;
use serde_json::Value;

use crate::support::BIN;
const DEADLINE: Duration = Duration::from_secs(60);

/// Appends `values` to `topic/partition` as one batch under a fresh lease.
async fn produce(client: &Client, topic: &str, partition: u32, values: &[String]) {
    let lease = client
        .acquire_lease(topic, partition, "test", Duration::from_secs(30))
        .await
        .unwrap();
    let mut batch = BatchBuilder::new(lease.epoch);
    for value in values {
        batch.push(0, None, Some(value.as_bytes()));
    }
    client
        .produce(topic, partition, batch.finish())
        .await
        .unwrap();
    client
        .release_lease(topic, partition, lease.lease_id)
        .await
        .unwrap();
}

fn values(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|index| format!("record-{index}")).collect()
}

fn server_code(result: Result<impl std::fmt::Debug, ClientError>) -> ErrorCode {
    match result {
        Err(ClientError::Server { code, .. }) => code,
        // OFFSET_OUT_OF_RANGE carries the offset and both ends on every API (docs/protocol.md),
        // and the client reads them into their own error.
        Err(ClientError::OffsetOutOfRange { .. }) => ErrorCode::OffsetOutOfRange,
        other => panic!("expected a server error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_survive_a_restart() {
    // Proves: an acknowledged commit is read back after the server restarts, per group and
    // partition, with its metadata; an uncommitted partition answers None.
    let server = TestServer::start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("orders", 2, TopicConfig::default())
        .await
        .unwrap();
    produce(&client, "orders", 0, &values(0..5)).await;
    assert_eq!(
        client
            .committed_offset("billing", "orders", 0)
            .await
            .unwrap(),
        None
    );
    client
        .commit_offset("billing", "orders", 0, 3, "")
        .await
        .unwrap();
    client
        .commit_offset("billing", "orders", 0, 5, "host-a")
        .await
        .unwrap();
    client
        .commit_offset("audit", "orders", 0, 1, "")
        .await
        .unwrap();
    drop(client);

    let server = server.restart().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    assert_eq!(
        client
            .committed_offset("billing", "orders", 0)
            .await
            .unwrap(),
        Some(CommittedOffset {
            offset: 5,
            metadata: "host-a".into()
        })
    );
    assert_eq!(
        client
            .committed_offset("audit", "orders", 0)
            .await
            .unwrap()
            .map(|committed| committed.offset),
        Some(1)
    );
    assert_eq!(
        client
            .committed_offset("billing", "orders", 1)
            .await
            .unwrap(),
        None
    );
    // A group may rewind.
    client
        .commit_offset("billing", "orders", 0, 2, "")
        .await
        .unwrap();
    assert_eq!(
        client
            .committed_offset("billing", "orders", 0)
            .await
            .unwrap()
            .map(|committed| committed.offset),
        Some(2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_are_refused_with_their_codes() {
    // Proves: unknown topic and partition, an offset past the high watermark, a bad group name
    // and oversized metadata are refused, each with its own wire code, and the connection is
    // still usable afterwards.
    let server = TestServer::start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("orders", 1, TopicConfig::default())
        .await
        .unwrap();
    produce(&client, "orders", 0, &values(0..3)).await;
    let cases: Vec<(ErrorCode, Result<(), ClientError>)> = vec![
        (
            ErrorCode::UnknownTopic,
            client.commit_offset("g", "nope", 0, 0, "").await,
        ),
        (
            ErrorCode::UnknownPartition,
            client.commit_offset("g", "orders", 1, 0, "").await,
        ),
        (
            ErrorCode::OffsetOutOfRange,
            client.commit_offset("g", "orders", 0, 4, "").await,
        ),
        (
            ErrorCode::InvalidGroup,
            client.commit_offset("", "orders", 0, 0, "").await,
        ),
        (
            ErrorCode::InvalidGroup,
            client
                .commit_offset(&"g".repeat(256), "orders", 0, 0, "")
                .await,
        ),
        (
            ErrorCode::OffsetMetadataTooLarge,
            client
                .commit_offset("g", "orders", 0, 0, &"m".repeat(4097))
                .await,
        ),
    ];
    for (expected, result) in cases {
        assert_eq!(server_code(result), expected);
    }
    // The commit past the high watermark names the whole range, as a fetch there does.
    assert!(
        matches!(
            client.commit_offset("g", "orders", 0, 4, "").await,
            Err(ClientError::OffsetOutOfRange {
                offset: 4,
                earliest: 0,
                latest: 3
            })
        ),
        "a commit past the high watermark names the offset and both ends"
    );
    assert_eq!(
        server_code(client.committed_offset("", "orders", 0).await),
        ErrorCode::InvalidGroup
    );
    assert_eq!(
        server_code(client.committed_offset("g", "nope", 0).await),
        ErrorCode::UnknownTopic
    );
    // The high watermark itself is a valid position (everything read), as is a non-ASCII name.
    client
        .commit_offset("gruppe-ü", "orders", 0, 3, "")
        .await
        .unwrap();
    assert_eq!(
        client
            .committed_offset("gruppe-ü", "orders", 0)
            .await
            .unwrap()
            .map(|committed| committed.offset),
        Some(3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offset_below_the_log_start_can_be_committed() {
    // Proves: after retention removed the oldest segments, a commit below the new log start is
    // accepted (the consumer learns on fetch that the records are gone).
    let server = TestServer::start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    let config = TopicConfig {
        segment_bytes: 4096,
        retention_bytes: Some(4096),
        ..TopicConfig::default()
    };
    client.create_topic("small", 1, config).await.unwrap();
    let long: Vec<String> = (0..10).map(|index| format!("{index:0>1000}")).collect();
    for chunk in long.chunks(2) {
        produce(&client, "small", 0, chunk).await;
    }
    server.broker().enforce_retention(i64::MAX);
    let offsets = client.list_offsets("small", 0).await.unwrap();
    assert!(
        offsets.earliest > 0,
        "retention removed nothing: {offsets:?}"
    );
    client.commit_offset("g", "small", 0, 0, "").await.unwrap();
    assert_eq!(
        client
            .committed_offset("g", "small", 0)
            .await
            .unwrap()
            .map(|committed| committed.offset),
        Some(0)
    );
}

/// Commits `group`'s offsets `committed + 1`, `+ 2`, ... until the server dies; returns the
/// last acknowledged offset (`committed` if none was) and the last one sent.
async fn commit_until_killed(
    addr: SocketAddr,
    group: String,
    committed: Option<u64>,
) -> (Option<u64>, u64) {
    let first = committed.map_or(1, |offset| offset + 1);
    let Ok(client) = Client::connect(addr).await else {
        return (committed, first);
    };
    let mut acknowledged = committed;
    for offset in first.. {
        if client
            .commit_offset(&group, "crash", 0, offset, "")
            .await
            .is_err()
        {
            return (acknowledged, offset);
        }
        acknowledged = Some(offset);
    }
    unreachable!("the offsets run out before the server is killed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_commits_survive_sigkill() {
    // Proves: the real server killed with SIGKILL in the middle of streams of commits comes
    // back with each group's committed offset equal to the last acknowledged one or the one in
    // flight when it died: never older, never another value.
    use rand::{Rng, SeedableRng};
    const RECORDS: u32 = 20_000;
    const GROUPS: usize = 2;
    let data_dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(std::process::id()));
    // Per group: the last acknowledged commit and the last one sent, before the last kill.
    let mut outcomes: Vec<(Option<u64>, u64)> = vec![(None, 1); GROUPS];
    for cycle in 0..4 {
        let addr = SocketAddr::from(([127, 0, 0, 1], raw_protocol::unused_port()));
        let mut server = KillOnDrop(serve(data_dir.path(), addr));
        let client = connect_within(addr, DEADLINE).await;
        if cycle == 0 {
            client
                .create_topic("crash", 1, TopicConfig::default())
                .await
                .unwrap();
            for chunk in values(0..RECORDS).chunks(10_000) {
                produce(&client, "crash", 0, chunk).await;
            }
        }
        let mut next = Vec::new();
        for (group, (acknowledged, sent)) in outcomes.iter().enumerate() {
            let committed = client
                .committed_offset(&format!("g{group}"), "crash", 0)
                .await
                .unwrap()
                .map(|committed| committed.offset);
            assert!(
                committed == *acknowledged || (cycle > 0 && committed == Some(*sent)),
                "cycle {cycle}, group g{group}: committed {committed:?}, acknowledged \
                 {acknowledged:?}, in flight {sent}"
            );
            next.push(committed);
        }
        if cycle == 3 {
            break;
        }
        let committers: Vec<_> = next
            .iter()
            .enumerate()
            .map(|(group, &committed)| {
                tokio::spawn(commit_until_killed(addr, format!("g{group}"), committed))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(rng.gen_range(100..400))).await;
        server.0.kill().unwrap();
        server.0.wait().unwrap();
        for (group, committer) in committers.into_iter().enumerate() {
            outcomes[group] = committer.await.unwrap();
            assert!(
                outcomes[group].1 < u64::from(RECORDS),
                "the test ran out of offsets"
            );
        }
    }
}

fn serve(data_dir: &std::path::Path, addr: SocketAddr) -> std::process::Child {
    Command::new(BIN)
        .args(["serve", "--data-dir"])
        .arg(data_dir)
        .args(["--listen", &addr.to_string(), "--log", "warn"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Kills the child process if a failed assertion unwinds past it.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

use crate::support::process::connect_within;

// ---------------------------------------------------------------------------
// fencelog consume --group
// ---------------------------------------------------------------------------

/// A server on its own runtime for the CLI runs.
struct Harness {
    // Dropped before the runtime, which runs the server's tasks.
    server: TestServer,
    runtime: tokio::runtime::Runtime,
}

impl Harness {
    fn start() -> Harness {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = runtime.block_on(TestServer::start()).unwrap();
        Harness { server, runtime }
    }

    fn client(&self) -> Client {
        self.runtime
            .block_on(Client::connect(self.server.addr()))
            .unwrap()
    }

    /// A topic with one partition holding `records` records `record-0`, `record-1`, ...
    fn topic_with(&self, topic: &str, records: u32) {
        let client = self.client();
        self.runtime.block_on(async {
            client
                .create_topic(topic, 1, TopicConfig::default())
                .await
                .unwrap();
            if records > 0 {
                produce(&client, topic, 0, &values(0..records)).await;
            }
        });
    }

    fn append(&self, topic: &str, range: std::ops::Range<u32>) {
        let client = self.client();
        self.runtime
            .block_on(produce(&client, topic, 0, &values(range)));
    }

    fn committed(&self, group: &str, topic: &str) -> Option<u64> {
        let client = self.client();
        self.runtime
            .block_on(client.committed_offset(group, topic, 0))
            .unwrap()
            .map(|committed| committed.offset)
    }

    /// Runs `fencelog consume ARGS --addr ADDR` to completion; returns (exit code, stdout,
    /// stderr).
    fn consume(&self, args: &[&str]) -> (i32, String, String) {
        let mut child = Command::new(BIN)
            .arg("consume")
            .args(args)
            .args(["--addr", &self.server.addr().to_string()])
            .env_remove("FENCELOG_ADDR")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let out = std::thread::spawn(move || {
            let mut text = String::new();
            stdout.read_to_string(&mut text).unwrap();
            text
        });
        let err = std::thread::spawn(move || {
            let mut text = String::new();
            stderr.read_to_string(&mut text).unwrap();
            text
        });
        let deadline = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("fencelog consume {args:?} did not finish within {DEADLINE:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        (
            status.code().expect("exited normally"),
            out.join().unwrap(),
            err.join().unwrap(),
        )
    }

    /// A consume that must succeed quietly; returns its stdout lines.
    fn consume_ok(&self, args: &[&str]) -> Vec<String> {
        let (code, stdout, stderr) = self.consume(args);
        assert_eq!(code, 0, "consume {args:?} failed: {stderr}");
        assert!(stderr.is_empty(), "stderr on success: {stderr}");
        stdout.lines().map(str::to_owned).collect()
    }
}

#[test]
fn consume_group_twice_reads_each_record_once() {
    // Proves: the contract of `consume --group`: two runs read each record exactly once between
    // them; the second run starts where the first committed, records appended in between
    // included, and a third run with nothing new prints nothing.
    let h = Harness::start();
    h.topic_with("orders", 5);
    let first = h.consume_ok(&["orders", "--partition", "0", "--group", "g"]);
    assert_eq!(first, values(0..5));
    assert_eq!(h.committed("g", "orders"), Some(5));
    h.append("orders", 5..8);
    let second = h.consume_ok(&["orders", "--partition", "0", "--group", "g"]);
    assert_eq!(second, values(5..8));
    let third = h.consume_ok(&["orders", "--partition", "0", "--group", "g"]);
    assert!(third.is_empty(), "{third:?}");
    // Another group starts from the beginning.
    let other = h.consume_ok(&["orders", "--group", "other"]);
    assert_eq!(other, values(0..8));
}

#[test]
fn consume_group_with_count_resumes_after_the_last_printed_record() {
    // Proves: `--count N` prints N records and commits the offset after the last one printed
    // (not after the whole poll), so the next run continues exactly there.
    let h = Harness::start();
    h.topic_with("orders", 10);
    let first = h.consume_ok(&["orders", "--group", "g", "--count", "3"]);
    assert_eq!(first, values(0..3));
    assert_eq!(h.committed("g", "orders"), Some(3));
    let second = h.consume_ok(&["orders", "--group", "g", "--count", "4", "--json"]);
    let offsets: Vec<u64> = second
        .iter()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["offset"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(offsets, vec![3, 4, 5, 6]);
    let rest = h.consume_ok(&["orders", "--group", "g"]);
    assert_eq!(rest, values(7..10));
    // --count without a group stops too.
    let two = h.consume_ok(&["orders", "--from", "8", "--count", "2"]);
    assert_eq!(two, values(8..10));
}

#[test]
fn from_applies_only_until_the_group_has_committed() {
    // Proves: a new group starts at --from (here latest: nothing printed, the end committed);
    // once it has a committed offset, --from is ignored.
    let h = Harness::start();
    h.topic_with("orders", 4);
    let first = h.consume_ok(&["orders", "--group", "late", "--from", "latest"]);
    assert!(first.is_empty());
    assert_eq!(h.committed("late", "orders"), Some(4));
    h.append("orders", 4..6);
    let second = h.consume_ok(&["orders", "--group", "late", "--from", "earliest"]);
    assert_eq!(second, values(4..6));
    let from_offset = h.consume_ok(&["orders", "--group", "mid", "--from", "2"]);
    assert_eq!(from_offset, values(2..6));
}

#[test]
fn consume_group_errors_are_one_line() {
    // Proves: a refused group name fails with exit status 1 and one error line naming the code.
    let h = Harness::start();
    h.topic_with("orders", 1);
    let (code, stdout, stderr) = h.consume(&["orders", "--group", ""]);
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: INVALID_GROUP"), "{stderr}");
}

#[test]
fn consume_help_documents_groups() {
    // Proves: the long help explains --group's resume-and-commit contract.
    let output = Command::new(BIN)
        .args(["consume", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    for needle in [
        "--group",
        "--count",
        "commits",
        "run twice prints each record once",
    ] {
        assert!(help.contains(needle), "{needle:?} missing from:\n{help}");
    }
}
