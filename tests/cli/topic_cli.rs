//! `fencelog topic create` read as a new user reads it: every flag means what the wire says
//! (0 retention = unlimited), `--help` says so, and a value the server would read differently
//! from what was typed is refused. Runs the real binary against an in-process server.

use std::process::{Command, Output};

use serde_json::Value;

use crate::support::start_server_on_own_runtime;
use crate::support::BIN;

/// Runs `fencelog ARGS` (with `--addr` when given) and waits for it.
fn run(args: &[&str], addr: Option<&str>) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("FENCELOG_ADDR")
        .env_remove("RUST_LOG");
    if let Some(addr) = addr {
        command.args(["--addr", addr]);
    }
    command.output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn zero_retention_means_unlimited_as_on_the_wire() {
    // Proves: `--retention-bytes 0` and `--retention 0` are accepted and mean unlimited (the
    // wire's 0), the command prints them as unlimited, and the server reports them so.
    let (server, _runtime) = start_server_on_own_runtime();
    let addr = server.addr().to_string();
    let created = run(
        &[
            "topic",
            "create",
            "keep",
            "--retention-bytes",
            "0",
            "--retention",
            "0",
        ],
        Some(&addr),
    );
    assert_eq!(created.status.code(), Some(0), "{}", stderr(&created));
    assert_eq!(
        stdout(&created),
        "created topic keep with 1 partition (flush always, segment_bytes 67108864, \
         retention_bytes unlimited, retention unlimited)\n"
    );
    let json = run(
        &[
            "topic",
            "create",
            "keep-json",
            "--retention-bytes",
            "0",
            "--json",
        ],
        Some(&addr),
    );
    assert_eq!(json.status.code(), Some(0), "{}", stderr(&json));
    let created: Value = serde_json::from_str(stdout(&json).trim()).unwrap();
    assert_eq!(created["retention_bytes"], Value::Null);

    let listed = run(&["topic", "list", "--json"], Some(&addr));
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    let topics: Vec<Value> = stdout(&listed)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(topics.len(), 2);
    for topic in &topics {
        assert_eq!(topic["retention_bytes"], Value::Null, "{topic}");
        assert_eq!(topic["retention_ms"], Value::Null, "{topic}");
    }
}

#[test]
fn help_says_what_zero_and_the_limits_mean() {
    // Proves: `topic create --help` says that 0 retention is unlimited and gives the ranges the
    // server accepts for partitions and segment size.
    let help = run(&["topic", "create", "--help"], None);
    assert_eq!(help.status.code(), Some(0));
    let text = stdout(&help)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        text.contains("many bytes; 0 means unlimited"),
        "--retention-bytes: {text}"
    );
    assert!(
        text.contains("`30s`; 0 means unlimited"),
        "--retention: {text}"
    );
    assert!(text.contains("1 to 10000"), "--partitions: {text}");
    assert!(
        text.contains("4096 to 1073741824"),
        "--segment-bytes: {text}"
    );
}

#[test]
fn values_the_wire_would_misread_or_the_server_refuses_fail_clearly() {
    // Proves: a non-zero retention below 1ms (which would travel as 0 = unlimited) is a usage
    // error (exit status 1, as every CLI error) saying why; a segment size outside the allowed range gets the server's
    // INVALID_CONFIG (exit 1) naming the range; neither creates the topic.
    let (server, _runtime) = start_server_on_own_runtime();
    let addr = server.addr().to_string();
    let short = run(
        &["topic", "create", "t", "--retention", "500us"],
        Some(&addr),
    );
    assert_eq!(short.status.code(), Some(1), "{}", stderr(&short));
    assert!(
        stderr(&short).contains("at least 1ms"),
        "{}",
        stderr(&short)
    );

    let tiny = run(
        &["topic", "create", "t", "--segment-bytes", "100"],
        Some(&addr),
    );
    assert_eq!(tiny.status.code(), Some(1), "{}", stderr(&tiny));
    assert!(
        stderr(&tiny).contains("INVALID_CONFIG") && stderr(&tiny).contains("4096"),
        "{}",
        stderr(&tiny)
    );

    let listed = run(&["topic", "list", "--json"], Some(&addr));
    assert_eq!(stdout(&listed), "", "no topic was created");
}

#[test]
fn topic_describe_and_alter_show_and_change_the_live_settings() {
    // Proves: `topic describe` prints a topic's settings under Kafka's names, `topic alter`
    // changes retention and segment size of the served topic (printing the result), `describe`
    // shows the change, a bad value is refused naming it, and alter needs something to change.
    let (server, _runtime) = start_server_on_own_runtime();
    let addr = server.addr().to_string();
    let created = run(
        &["topic", "create", "logs", "--partitions", "2"],
        Some(&addr),
    );
    assert_eq!(created.status.code(), Some(0), "{}", stderr(&created));
    let described = run(&["topic", "describe", "logs"], Some(&addr));
    assert_eq!(described.status.code(), Some(0), "{}", stderr(&described));
    assert_eq!(
        stdout(&described),
        "topic logs (2 partitions)\ncleanup.policy=delete\nfencelog.flush=always\n\
         message.timestamp.type=CreateTime\nretention.bytes=-1\nretention.ms=-1\n\
         segment.bytes=67108864\n"
    );
    let altered = run(
        &[
            "topic",
            "alter",
            "logs",
            "--retention",
            "1h",
            "--segment-bytes",
            "1048576",
            "--retention-bytes",
            "1000000",
        ],
        Some(&addr),
    );
    assert_eq!(altered.status.code(), Some(0), "{}", stderr(&altered));
    assert!(
        stdout(&altered).starts_with("altered topic logs\n"),
        "{}",
        stdout(&altered)
    );
    let described = run(&["topic", "describe", "logs", "--json"], Some(&addr));
    let json: Value = serde_json::from_str(stdout(&described).trim()).unwrap();
    assert_eq!(json["retention_ms"], 3_600_000);
    assert_eq!(json["retention_bytes"], 1_000_000);
    assert_eq!(json["segment_bytes"], 1_048_576);
    assert_eq!(json["partitions"], 2);
    let unlimited = run(
        &["topic", "alter", "logs", "--retention-bytes", "0"],
        Some(&addr),
    );
    assert_eq!(unlimited.status.code(), Some(0), "{}", stderr(&unlimited));
    assert!(
        stdout(&unlimited).contains("retention.bytes=-1"),
        "{}",
        stdout(&unlimited)
    );
    assert!(
        stdout(&unlimited).contains("retention.ms=3600000"),
        "kept: {}",
        stdout(&unlimited)
    );

    let bad = run(
        &["topic", "alter", "logs", "--segment-bytes", "12"],
        Some(&addr),
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("segment_bytes"), "{}", stderr(&bad));
    let nothing = run(&["topic", "alter", "logs"], Some(&addr));
    assert_ne!(nothing.status.code(), Some(0));
    let missing = run(&["topic", "describe", "nope"], Some(&addr));
    assert_eq!(missing.status.code(), Some(1), "{}", stderr(&missing));
}

#[test]
fn topic_delete_records_moves_the_low_watermark_and_prints_it() {
    // Proves: `topic delete-records NAME --partition P --before OFFSET` deletes the records
    // before the offset and prints the new low watermark (with --json: {"name", "partition",
    // "low_watermark"}); an offset below it leaves it where it is; `--before high-watermark`
    // deletes every record consumers can see; an offset past the high watermark fails with
    // exit status 1 saying it is out of range, and a missing partition fails too.
    let (server, runtime) = start_server_on_own_runtime();
    let addr = server.addr().to_string();
    let created = run(&["topic", "create", "trimmed"], Some(&addr));
    assert_eq!(created.status.code(), Some(0), "{}", stderr(&created));
    runtime.block_on(async {
        let client = fencelog::client::Client::connect(server.addr())
            .await
            .unwrap();
        let lease = client
            .acquire_lease("trimmed", 0, "writer", std::time::Duration::from_secs(30))
            .await
            .unwrap();
        for index in 0..10 {
            let value = format!("r{index}");
            client
                .produce("trimmed", 0, crate::support::batch(lease.epoch, &value))
                .await
                .unwrap();
        }
    });
    let delete = |before: &str, json: bool| {
        let mut args = vec![
            "topic",
            "delete-records",
            "trimmed",
            "--partition",
            "0",
            "--before",
            before,
        ];
        if json {
            args.push("--json");
        }
        run(&args, Some(&addr))
    };
    let deleted = delete("5", false);
    assert_eq!(deleted.status.code(), Some(0), "{}", stderr(&deleted));
    assert_eq!(
        stdout(&deleted),
        "deleted records of trimmed/0; low watermark 5\n"
    );
    let kept = delete("3", true);
    assert_eq!(kept.status.code(), Some(0), "{}", stderr(&kept));
    let json: Value = serde_json::from_str(stdout(&kept).trim()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "topic": "trimmed",
            "name": "trimmed",
            "action": "records_deleted",
            "partition": 0,
            "low_watermark": 5
        })
    );
    let everything = delete("high-watermark", true);
    let json: Value = serde_json::from_str(stdout(&everything).trim()).unwrap();
    assert_eq!(json["low_watermark"], 10);

    let too_far = delete("11", false);
    assert_eq!(too_far.status.code(), Some(1));
    assert!(
        stderr(&too_far).contains("out of range"),
        "{}",
        stderr(&too_far)
    );
    let missing = run(
        &[
            "topic",
            "delete-records",
            "trimmed",
            "--partition",
            "3",
            "--before",
            "1",
        ],
        Some(&addr),
    );
    assert_eq!(missing.status.code(), Some(1), "{}", stderr(&missing));
    let not_a_number = delete("five", false);
    assert_ne!(not_a_number.status.code(), Some(0));
}

#[test]
fn topic_add_partitions_grows_a_topic_to_the_count_given() {
    // Proves: `topic add-partitions NAME --count N` grows a served topic to N partitions in all
    // (printing the new count; with --json the object `topic list` prints), `describe` shows
    // them, and the same count or a smaller one fails with exit status 1 and a message that
    // says partitions are only added.
    let (server, _runtime) = start_server_on_own_runtime();
    let addr = server.addr().to_string();
    let created = run(
        &["topic", "create", "events", "--partitions", "3"],
        Some(&addr),
    );
    assert_eq!(created.status.code(), Some(0), "{}", stderr(&created));
    let grown = run(
        &["topic", "add-partitions", "events", "--count", "6"],
        Some(&addr),
    );
    assert_eq!(grown.status.code(), Some(0), "{}", stderr(&grown));
    assert_eq!(stdout(&grown), "topic events now has 6 partitions\n");
    let described = run(&["topic", "describe", "events", "--json"], Some(&addr));
    let json: Value = serde_json::from_str(stdout(&described).trim()).unwrap();
    assert_eq!(json["partitions"], 6);
    let again = run(
        &[
            "topic",
            "add-partitions",
            "events",
            "--count",
            "8",
            "--json",
        ],
        Some(&addr),
    );
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let json: Value = serde_json::from_str(stdout(&again).trim()).unwrap();
    assert_eq!(json["name"], "events");
    assert_eq!(json["partitions"], 8);
    assert_eq!(json["flush"], "always");
    for refused in ["8", "4"] {
        let output = run(
            &["topic", "add-partitions", "events", "--count", refused],
            Some(&addr),
        );
        assert_eq!(output.status.code(), Some(1), "{refused}");
        assert!(
            stderr(&output).contains("can only be added"),
            "{refused}: {}",
            stderr(&output)
        );
    }
    assert_eq!(
        server.broker().topic("events").unwrap().partitions().len(),
        8
    );
}
