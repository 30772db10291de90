//! The `fencelog` client commands, run as the real binary against an in-process server (on a
//! multi-thread runtime owned by the test) through `--addr`: topic, lease, produce, consume,
//! exit statuses, JSON output, and the stale-write story that ends in exit status 3.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fencelog::testing::TestServer;
use serde_json::Value;

use crate::support::BIN;
const DEADLINE: Duration = Duration::from_secs(60);

/// A server on its own runtime, and a way to run the CLI against it.
struct Harness {
    // Dropped before the runtime, which runs the server's tasks.
    server: TestServer,
    runtime: tokio::runtime::Runtime,
}

/// What a finished command left behind.
#[derive(Debug)]
struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Run {
    fn code(&self) -> i32 {
        self.status.code().expect("exited normally")
    }

    fn ok(self) -> Run {
        assert_eq!(self.code(), 0, "command failed: {self:?}");
        assert!(self.stderr.is_empty(), "stderr on success: {self:?}");
        self
    }

    fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}")))
            .collect()
    }

    /// The one line an error must be: "error: ..." and nothing else.
    fn error_line(&self) -> &str {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "stderr must be one line: {self:?}");
        assert!(lines[0].starts_with("error: "), "{self:?}");
        lines[0]
    }
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

    fn addr(&self) -> String {
        self.server.addr().to_string()
    }

    /// A proxy in front of the server, on the server's runtime.
    fn proxy(&self) -> fencelog::testing_proxy::Proxy {
        let _entered = self.runtime.enter();
        self.runtime
            .block_on(fencelog::testing_proxy::Proxy::start(self.server.addr()))
            .unwrap()
    }

    /// Runs `fencelog ARGS --addr ADDR` with `stdin`.
    fn run(&self, args: &[&str], stdin: &str) -> Run {
        let mut full: Vec<&str> = args.to_vec();
        let addr = self.addr();
        full.extend(["--addr", &addr]);
        run(&full, stdin, &[])
    }

    fn spawn(&self, args: &[&str]) -> Child {
        let addr = self.addr();
        Command::new(BIN)
            .args(args)
            .args(["--addr", &addr])
            .env_remove("FENCELOG_ADDR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn create_topic(&self, name: &str) {
        self.run(&["topic", "create", name, "--partitions", "2"], "")
            .ok();
    }

    /// Acquires a lease and returns (epoch, lease id).
    fn acquire(&self, topic: &str, partition: &str) -> (u64, String) {
        let run = self
            .run(
                &[
                    "lease", "acquire", topic, partition, "--holder", "test", "--ttl", "30s",
                    "--json",
                ],
                "",
            )
            .ok();
        let lease = &run.json_lines()[0];
        (
            lease["epoch"].as_u64().unwrap(),
            lease["lease_id"].as_str().unwrap().to_owned(),
        )
    }
}

/// Runs the binary with a deadline, feeding `stdin` from a thread so large outputs cannot
/// deadlock against it.
fn run(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Run {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("FENCELOG_ADDR")
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_owned();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(stdin.as_bytes());
    });
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
    let status = wait(&mut child, DEADLINE, args);
    writer.join().unwrap();
    Run {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn wait(child: &mut Child, limit: Duration, what: &[&str]) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("fencelog {what:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A local address nobody listens on.
fn dead_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

#[test]
fn topic_create_and_list() {
    let h = Harness::start();
    let created = h
        .run(
            &[
                "topic",
                "create",
                "orders",
                "--partitions",
                "3",
                "--flush",
                "interval:250ms",
                "--segment-bytes",
                "1048576",
                "--retention-bytes",
                "1000000",
                "--retention",
                "7d",
            ],
            "",
        )
        .ok();
    assert_eq!(
        created.stdout,
        "created topic orders with 3 partitions (flush interval:250ms, segment_bytes 1048576, \
         retention_bytes 1000000, retention 7days)\n"
    );
    let json = h
        .run(&["topic", "create", "logs", "--json"], "")
        .ok()
        .json_lines();
    assert_eq!(json[0]["name"], "logs");
    assert_eq!(json[0]["partitions"], 1);
    assert_eq!(json[0]["flush"], "always");

    let listed = h.run(&["topic", "list", "--json"], "").ok().json_lines();
    assert_eq!(listed.len(), 2);
    let orders = &listed[1];
    assert_eq!(orders["name"], "orders");
    assert_eq!(orders["partitions"], 3);
    assert_eq!(orders["flush"], "interval:250ms");
    assert_eq!(orders["segment_bytes"], 1048576);
    assert_eq!(orders["retention_bytes"], 1000000);
    assert_eq!(orders["retention_ms"], 604_800_000u64);
    assert_eq!(listed[0]["retention_ms"], Value::Null);

    let plain = h.run(&["topic", "list"], "").ok();
    let lines: Vec<&str> = plain.stdout.lines().collect();
    assert_eq!(lines.len(), 3);
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "PARTITIONS",
            "FLUSH",
            "SEGMENT_BYTES",
            "RETENTION_BYTES",
            "RETENTION"
        ]
    );
    let row: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        row,
        [
            "orders",
            "3",
            "interval:250ms",
            "1048576",
            "1000000",
            "7days"
        ]
    );

    let again = h.run(&["topic", "create", "orders"], "");
    assert_eq!(again.code(), 1);
    assert!(again.error_line().contains("TOPIC_EXISTS"), "{again:?}");
    let invalid = h.run(&["topic", "create", "bad/name"], "");
    assert_eq!(invalid.code(), 1);
    assert!(
        invalid.error_line().contains("INVALID_CONFIG"),
        "{invalid:?}"
    );
}

#[test]
fn lease_acquire_renew_release() {
    let h = Harness::start();
    h.create_topic("orders");
    let acquired = h
        .run(
            &[
                "lease", "acquire", "orders", "0", "--holder", "w1", "--ttl", "10s", "--json",
            ],
            "",
        )
        .ok()
        .json_lines();
    let lease = &acquired[0];
    assert_eq!(lease["epoch"], 1);
    assert_eq!(lease["ttl_ms"], 10_000);
    let id = lease["lease_id"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 32);
    assert!(
        id.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{id}"
    );

    // Plain output on another partition.
    let plain = h
        .run(
            &[
                "lease", "acquire", "orders", "1", "--holder", "w1", "--ttl", "10s",
            ],
            "",
        )
        .ok();
    let words: Vec<&str> = plain.stdout.split_whitespace().collect();
    assert_eq!(words.len(), 6, "{plain:?}");
    assert_eq!((words[0], words[1], words[2]), ("epoch", "1", "lease_id"));
    assert_eq!(words[3].len(), 32);
    assert_eq!((words[4], words[5]), ("ttl_ms", "10000"));

    let held = h.run(
        &[
            "lease", "acquire", "orders", "0", "--holder", "w2", "--ttl", "10s",
        ],
        "",
    );
    assert_eq!(held.code(), 1);
    assert!(held.error_line().contains("lease held"), "{held:?}");
    assert!(held.error_line().contains("w1"), "{held:?}");

    let renewed = h
        .run(
            &["lease", "renew", "orders", "0", "--lease-id", &id, "--json"],
            "",
        )
        .ok()
        .json_lines();
    assert_eq!(renewed[0]["epoch"], 1);
    assert_eq!(renewed[0]["ttl_ms"], 10_000);
    let renewed = h
        .run(&["lease", "renew", "orders", "0", "--lease-id", &id], "")
        .ok();
    assert_eq!(renewed.stdout, "epoch 1 ttl_ms 10000\n");

    let released = h
        .run(&["lease", "release", "orders", "0", "--lease-id", &id], "")
        .ok();
    assert_eq!(released.stdout, "released orders/0\n");
    let twice = h.run(
        &[
            "lease",
            "release",
            "orders",
            "0",
            "--lease-id",
            &id,
            "--json",
        ],
        "",
    );
    // With --json the error is one JSON object on stderr (docs/cli.md), nothing on stdout.
    assert_eq!(twice.code(), 1);
    let error: Value = serde_json::from_str(twice.stderr.trim_end()).expect("one JSON error");
    assert_eq!(error["error"]["code"], "LEASE_LOST", "{twice:?}");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("lease lost")),
        "{twice:?}"
    );
    assert!(twice.stdout.is_empty());
}

#[test]
fn produce_prints_offsets_and_consume_returns_the_records() {
    let h = Harness::start();
    h.create_topic("orders");
    let (epoch, _) = h.acquire("orders", "0");
    assert_eq!(epoch, 1);

    let produced = h
        .run(
            &["produce", "orders", "--partition", "0", "--epoch", "1"],
            "alpha\nbeta\ngamma\n",
        )
        .ok();
    assert_eq!(produced.stdout, "offset 0\noffset 1\noffset 2\n");
    // --json, a key, a CRLF line and a last line without a newline.
    let produced = h
        .run(
            &[
                "produce",
                "orders",
                "--partition",
                "0",
                "--epoch",
                "1",
                "--key",
                "k",
                "--json",
            ],
            "delta\r\nepsilon",
        )
        .ok();
    assert_eq!(
        produced.stdout,
        "{\"topic\":\"orders\",\"partition\":0,\"offset\":3}\n\
         {\"topic\":\"orders\",\"partition\":0,\"offset\":4}\n"
    );
    // Nothing on stdin: nothing to do.
    let empty = h
        .run(
            &["produce", "orders", "--partition", "0", "--epoch", "1"],
            "",
        )
        .ok();
    assert!(empty.stdout.is_empty());

    let records = h
        .run(
            &[
                "consume",
                "orders",
                "--partition",
                "0",
                "--from",
                "earliest",
                "--json",
            ],
            "",
        )
        .ok()
        .json_lines();
    assert_eq!(records.len(), 5);
    let values: Vec<&str> = records
        .iter()
        .map(|r| r["value"].as_str().unwrap())
        .collect();
    assert_eq!(values, ["alpha", "beta", "gamma", "delta", "epsilon"]);
    for (i, record) in records.iter().enumerate() {
        assert_eq!(record["offset"], i as u64);
        assert_eq!(record["epoch"], 1);
        assert!(record["timestamp"].as_i64().unwrap() > 1_600_000_000_000);
        let keys: Vec<&str> = record
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        // offset, epoch, timestamp, key, value, headers, and topic/partition (docs/cli.md's
        // scheme).
        assert_eq!(keys.len(), 8, "{record}");
        assert_eq!(record["headers"], Value::Array(Vec::new()));
        assert_eq!(
            (&record["topic"], &record["partition"]),
            (&Value::from("orders"), &Value::from(0))
        );
    }
    assert_eq!(records[0]["key"], Value::Null);
    assert_eq!(records[3]["key"], "k");

    let plain = h.run(&["consume", "orders", "--partition", "0"], "").ok();
    assert_eq!(plain.stdout, "alpha\nbeta\ngamma\ndelta\nepsilon\n");
    let tail = h
        .run(
            &["consume", "orders", "--partition", "0", "--from", "3"],
            "",
        )
        .ok();
    assert_eq!(tail.stdout, "delta\nepsilon\n");
    let latest = h
        .run(
            &["consume", "orders", "--partition", "0", "--from", "latest"],
            "",
        )
        .ok();
    assert!(latest.stdout.is_empty());
    let other = h.run(&["consume", "orders", "--partition", "1"], "").ok();
    assert!(other.stdout.is_empty());

    let beyond = h.run(
        &["consume", "orders", "--partition", "0", "--from", "99"],
        "",
    );
    assert_eq!(beyond.code(), 1);
    assert!(beyond.error_line().contains("beyond the end"), "{beyond:?}");
    let unknown = h.run(&["consume", "nope"], "");
    assert_eq!(unknown.code(), 1);
    assert!(
        unknown.error_line().contains("UNKNOWN_TOPIC"),
        "{unknown:?}"
    );
}

#[test]
fn produce_batches_many_lines_in_order() {
    let h = Harness::start();
    h.create_topic("bulk");
    h.acquire("bulk", "0");
    let input: String = (0..5_000).map(|i| format!("line {i}\n")).collect();
    let produced = h
        .run(&["produce", "bulk", "--epoch", "1", "--json"], &input)
        .ok();
    let offsets: Vec<u64> = produced
        .json_lines()
        .iter()
        .map(|o| o["offset"].as_u64().unwrap())
        .collect();
    assert!(
        offsets == (0..5_000).collect::<Vec<u64>>(),
        "offsets not dense and in order"
    );
    let consumed = h.run(&["consume", "bulk", "--max-bytes", "4096"], "").ok();
    assert!(
        consumed.stdout == input,
        "consumed records differ from the input"
    );
}

/// `produce --compression` sends compressed batches (magic 2) and `consume` reads them back as
/// the lines given, whichever codec; an unknown codec is refused as a usage error (status 1).
#[test]
fn compressed_lines_read_back_as_produced() {
    let h = Harness::start();
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("packed-{codec}");
        h.create_topic(&topic);
        h.acquire(&topic, "0");
        let input: String = (0..2_000)
            .map(|i| format!("{{\"n\":{i},\"event\":\"click\",\"codec\":\"{codec}\"}}\n"))
            .collect();
        h.run(
            &["produce", &topic, "--epoch", "1", "--compression", codec],
            &input,
        )
        .ok();
        let consumed = h.run(&["consume", &topic, "--max-bytes", "4096"], "").ok();
        assert!(consumed.stdout == input, "{codec}: consumed records differ");
    }
    let refused = h.run(
        &[
            "produce",
            "packed-zstd",
            "--epoch",
            "1",
            "--compression",
            "brotli",
        ],
        "x\n",
    );
    // A usage error is exit status 1 (docs/cli.md), naming the codecs there are.
    assert_eq!(refused.code(), 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("zstd"), "{}", refused.stderr);
}

#[test]
fn consume_follow_prints_new_records_as_they_arrive() {
    let h = Harness::start();
    h.create_topic("live");
    h.acquire("live", "0");
    h.run(&["produce", "live", "--epoch", "1"], "old\n").ok();

    let mut follower = h.spawn(&["consume", "live", "--from", "latest", "--follow", "--json"]);
    let stdout = follower.stdout.take().unwrap();
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines_tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    // Give the follower time to start its long poll, then write.
    std::thread::sleep(Duration::from_millis(500));
    h.run(&["produce", "live", "--epoch", "1"], "new 1\nnew 2\n")
        .ok();
    let mut seen = Vec::new();
    for _ in 0..2 {
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("the follower printed the new record");
        seen.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    assert_eq!(seen[0]["value"], "new 1");
    assert_eq!(seen[0]["offset"], 1);
    assert_eq!(seen[1]["value"], "new 2");
    assert!(
        follower.try_wait().unwrap().is_none(),
        "--follow must keep running"
    );
    follower.kill().unwrap();
    follower.wait().unwrap();
}

#[test]
fn stale_write_is_fenced_with_exit_status_3() {
    let h = Harness::start();
    h.create_topic("orders");
    let (first, first_id) = h.acquire("orders", "0");
    assert_eq!(first, 1);
    h.run(
        &["produce", "orders", "--partition", "0", "--epoch", "1"],
        "from writer 1\n",
    )
    .ok();
    h.run(
        &["lease", "release", "orders", "0", "--lease-id", &first_id],
        "",
    )
    .ok();
    let (second, _) = h.acquire("orders", "0");
    assert_eq!(second, 2);

    let stale = h.run(
        &["produce", "orders", "--partition", "0", "--epoch", "1"],
        "zombie write\n",
    );
    assert_eq!(stale.code(), 3, "{stale:?}");
    assert_eq!(stale.stderr, "error: fenced: epoch 1 < current 2\n");
    assert!(stale.stdout.is_empty(), "{stale:?}");

    let fresh = h
        .run(
            &["produce", "orders", "--partition", "0", "--epoch", "2"],
            "from writer 2\n",
        )
        .ok();
    assert_eq!(fresh.stdout, "offset 1\n");
    // An epoch never granted is an error, but not "fenced".
    let future = h.run(&["produce", "orders", "--epoch", "7"], "x\n");
    assert_eq!(future.code(), 1);
    assert!(future.error_line().contains("unknown epoch"), "{future:?}");

    let log = h
        .run(&["consume", "orders", "--json"], "")
        .ok()
        .json_lines();
    let writes: Vec<(u64, &str)> = log
        .iter()
        .map(|r| (r["epoch"].as_u64().unwrap(), r["value"].as_str().unwrap()))
        .collect();
    assert_eq!(writes, [(1, "from writer 1"), (2, "from writer 2")]);
}

#[test]
fn bad_address_is_one_line_and_exit_status_1() {
    let addr = dead_addr();
    let refused = run(&["topic", "list", "--addr", &addr], "", &[]);
    assert_eq!(refused.code(), 1);
    let line = refused.error_line();
    assert!(
        line.starts_with(&format!("error: cannot connect to {addr}: ")),
        "{refused:?}"
    );
    assert!(refused.stdout.is_empty());

    let unresolved = run(
        &[
            "lease",
            "acquire",
            "t",
            "0",
            "--addr",
            "nosuchhost.invalid:7171",
        ],
        "",
        &[],
    );
    assert_eq!(unresolved.code(), 1, "{unresolved:?}");
    assert!(
        unresolved.error_line().contains("cannot resolve address"),
        "{unresolved:?}"
    );
    let shapeless = run(
        &["lease", "acquire", "t", "0", "--addr", "not-an-address"],
        "",
        &[],
    );
    assert_eq!(shapeless.code(), 1, "{shapeless:?}");
    assert!(
        shapeless
            .error_line()
            .starts_with("error: --addr not-an-address: not an address: expected HOST:PORT"),
        "{shapeless:?}"
    );
    let produce = run(
        &["produce", "t", "--epoch", "1", "--addr", &addr],
        "x\n",
        &[],
    );
    assert_eq!(produce.code(), 1);
    produce.error_line();
}

#[test]
fn address_comes_from_the_environment() {
    let h = Harness::start();
    h.create_topic("envtopic");
    let listed = run(
        &["topic", "list", "--json"],
        "",
        &[("FENCELOG_ADDR", &h.addr())],
    )
    .ok();
    assert_eq!(listed.json_lines()[0]["name"], "envtopic");
}

#[test]
fn consume_into_a_closed_pipe_ends_quietly() {
    let h = Harness::start();
    h.create_topic("big");
    h.acquire("big", "0");
    let value = "v".repeat(200);
    let input: String = (0..2_000).map(|i| format!("{i} {value}\n")).collect();
    h.run(&["produce", "big", "--epoch", "1"], &input).ok();

    // Read one line, then close the pipe: the rest (400 KB) cannot be written.
    let mut consumer = h.spawn(&["consume", "big", "--max-bytes", "1024"]);
    let mut stdout = BufReader::new(consumer.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.starts_with("0 v"));
    drop(stdout);
    let status = wait(&mut consumer, DEADLINE, &["consume"]);
    let mut stderr = String::new();
    consumer
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn help_documents_the_output_formats() {
    let produce = run(&["produce", "--help"], "", &[]).ok();
    assert!(produce.stdout.contains("offset N"), "{}", produce.stdout);
    assert!(produce
        .stdout
        .contains("{\"topic\":T,\"partition\":P,\"offset\":N}"));
    assert!(produce.stdout.contains("FENCELOG_ADDR"));
    let consume = run(&["consume", "--help"], "", &[]).ok();
    assert!(consume.stdout.contains("lossy"), "{}", consume.stdout);
    assert!(consume.stdout.contains("--follow"));
    let lease = run(&["lease", "acquire", "--help"], "", &[]).ok();
    assert!(lease.stdout.contains("lease_id"), "{}", lease.stdout);
}

/// A line too large for any batch, in the middle of the input: the lines before it are appended
/// and printed, it is not, and neither is anything after it, though later batches were already
/// in flight when it failed.
#[test]
fn nothing_after_a_line_too_large_for_a_batch_is_appended() {
    let h = Harness::start();
    h.create_topic("orders");
    let (epoch, _) = h.acquire("orders", "0");
    let before: Vec<String> = (0..3000).map(|i| format!("before {i}")).collect();
    let after: Vec<String> = (0..3000).map(|i| format!("after {i}")).collect();
    let huge = "x".repeat(9 * 1024 * 1024);
    let input = format!("{}\n{huge}\n{}\n", before.join("\n"), after.join("\n"));
    let epoch = epoch.to_string();
    let run = h.run(
        &[
            "produce",
            "orders",
            "--partition",
            "0",
            "--epoch",
            &epoch,
            "--batch-records",
            "100",
        ],
        &input,
    );
    assert_eq!(run.code(), 1, "{run:?}");
    assert!(
        run.error_line().contains("line 3001 was not appended")
            && run.error_line().contains("exceeds"),
        "{run:?}"
    );
    let expected: Vec<String> = (0..3000).map(|i| format!("offset {i}")).collect();
    assert_eq!(run.stdout.lines().collect::<Vec<_>>(), expected);
    let consumed = h.run(&["consume", "orders", "--partition", "0"], "").ok();
    assert_eq!(consumed.stdout.lines().collect::<Vec<_>>(), before);
}

/// The connection is cut again and again after the server got requests but before their
/// answers came back: `fencelog produce` resends, every line lands exactly once, in order, and
/// the command succeeds and says what it did.
#[test]
fn produce_through_cut_connections_appends_every_line_exactly_once() {
    let h = Harness::start();
    h.create_topic("orders");
    let (epoch, _) = h.acquire("orders", "0");
    let proxy = h.proxy();
    proxy.cut_after_requests(6);
    let lines: Vec<String> = (0..20_000).map(|i| format!("line {i}")).collect();
    let input = format!("{}\n", lines.join("\n"));
    let epoch = epoch.to_string();
    let proxy_addr = proxy.addr().to_string();
    let run = run(
        &[
            "produce",
            "orders",
            "--partition",
            "0",
            "--epoch",
            &epoch,
            "--batch-records",
            "100",
            "--json",
            "--addr",
            &proxy_addr,
        ],
        &input,
        &[],
    );
    assert_eq!(run.code(), 0, "{run:?}");
    let offsets: Vec<u64> = run
        .json_lines()
        .iter()
        .map(|line| line["offset"].as_u64().unwrap())
        .collect();
    assert_eq!(offsets, (0..20_000).collect::<Vec<u64>>());
    let summary: Value = serde_json::from_str(run.stderr.trim()).expect("a JSON summary");
    assert!(summary["resends"].as_u64().unwrap() > 0, "{summary}");
    assert!(proxy.connections() > 1);
    let consumed = h.run(&["consume", "orders", "--partition", "0"], "").ok();
    assert_eq!(consumed.stdout.lines().collect::<Vec<_>>(), lines);
}

/// `produce --transaction`: lines over two partitions are published all at once (offsets
/// printed in input order after the commit); a stale epoch on one partition aborts the whole
/// transaction with exit 3 and the fenced message, and read_committed readers see none of it.
#[test]
fn produce_transaction_publishes_every_line_or_none() {
    let h = Harness::start();
    h.create_topic("ledger");
    let (zero, _) = h.acquire("ledger", "0");
    let (one, one_id) = h.acquire("ledger", "1");
    let epochs = format!("0={zero},1={one}");
    let committed = h
        .run(
            &[
                "produce",
                "ledger",
                "--transaction",
                "transfer",
                "--epochs",
                &epochs,
                "--json",
            ],
            "0:debit 10\n1:credit 10\n0:fee 1\n",
        )
        .ok();
    let placed: Vec<(u64, u64)> = committed
        .json_lines()
        .iter()
        .map(|line| {
            assert_eq!(line["topic"], "ledger");
            (
                line["partition"].as_u64().unwrap(),
                line["offset"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(placed, [(0, 0), (1, 0), (0, 1)], "input order");
    let read = |partition: &str| -> Vec<String> {
        h.run(
            &[
                "consume",
                "ledger",
                "--partition",
                partition,
                "--isolation",
                "read-committed",
                "--json",
            ],
            "",
        )
        .ok()
        .json_lines()
        .iter()
        .map(|record| record["value"].as_str().unwrap().to_owned())
        .collect()
    };
    assert_eq!(read("0"), ["debit 10", "fee 1"]);
    assert_eq!(read("1"), ["credit 10"]);

    h.run(
        &["lease", "release", "ledger", "1", "--lease-id", &one_id],
        "",
    )
    .ok();
    let (newer, _) = h.acquire("ledger", "1");
    let stale = h.run(
        &[
            "produce",
            "ledger",
            "--transaction",
            "transfer",
            "--epochs",
            &epochs,
        ],
        "0:debit 20\n1:credit 20\n",
    );
    assert_eq!(stale.code(), 3, "{stale:?}");
    assert_eq!(
        stale.stderr,
        format!("error: fenced: epoch {one} < current {newer}\n")
    );
    assert!(stale.stdout.is_empty(), "{stale:?}");
    assert_eq!(
        read("0"),
        ["debit 10", "fee 1"],
        "the aborted line is not published"
    );
    assert_eq!(read("1"), ["credit 10"]);

    let malformed = h.run(
        &[
            "produce",
            "ledger",
            "--transaction",
            "transfer",
            "--epochs",
            &epochs,
        ],
        "no partition here\n",
    );
    assert_eq!(malformed.code(), 1, "{malformed:?}");
    assert!(
        malformed
            .error_line()
            .contains("line 1 is not PARTITION:VALUE"),
        "{malformed:?}"
    );
}
