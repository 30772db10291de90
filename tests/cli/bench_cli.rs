//! `fencelog bench`, run as the real binary with short durations: every mode prints the JSON
//! fields scripts rely on, `--records` and `--rate` shape the load as documented, failover finds
//! stale writes rejected and none landed, and bad settings exit 1 with a message.
//!
//! These tests check behaviour and the output contract, not performance: the figures of a
//! one-second run on a shared CI machine mean nothing.

use std::process::{Command, Output};

use fencelog::testing::TestServer;
use serde_json::Value;

fn bench(args: &[&str]) -> Output {
    Command::new(crate::support::BIN)
        .arg("bench")
        .args(args)
        .output()
        .expect("run fencelog bench")
}

/// Runs a bench that must succeed and returns its JSON lines.
fn bench_json(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let output = bench(&all);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "fencelog bench {all:?} failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
        output.status
    );
    assert!(
        stderr.trim().is_empty(),
        "--json writes nothing on stderr, got {stderr}"
    );
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}

/// Checks the fields every role line carries and returns its record count.
fn check_role(line: &Value, role: &str) -> u64 {
    assert_eq!(line["role"], role, "{line}");
    for field in ["records", "bytes"] {
        assert!(line[field].is_u64(), "{field} in {line}");
    }
    for field in ["seconds", "records_per_sec", "bytes_per_sec"] {
        assert!(line[field].is_number(), "{field} in {line}");
    }
    let latency = &line["latency_us"];
    let percentiles: Vec<u64> = ["p50", "p90", "p99", "p999", "max"]
        .iter()
        .map(|p| {
            latency[p]
                .as_u64()
                .unwrap_or_else(|| panic!("{p} in {line}"))
        })
        .collect();
    assert!(
        percentiles.windows(2).all(|pair| pair[0] <= pair[1]),
        "percentiles must not decrease: {line}"
    );
    let records = line["records"].as_u64().unwrap();
    assert!(records > 0, "nothing measured: {line}");
    assert!(percentiles[0] > 0, "no latency recorded: {line}");
    assert_eq!(
        line["bytes"].as_u64().unwrap(),
        records * line["record_size"].as_u64().unwrap(),
        "bytes are value bytes: {line}"
    );
    records
}

const SHORT: [&str; 4] = ["--duration", "1s", "--warmup", "0s"];

#[test]
fn produce_mode_prints_one_json_line_with_the_contract_fields() {
    let lines = bench_json(&SHORT);
    assert_eq!(lines.len(), 1, "{lines:?}");
    check_role(&lines[0], "produce");
    assert_eq!(lines[0]["latency"], "ack");
    assert_eq!(lines[0]["flush"], "never");
    assert_eq!(lines[0]["batch"], 1000);
    assert!(
        lines[0].get("stale_landed").is_none(),
        "failover fields only in failover mode"
    );
    // The in-process server's CPU is told apart from the generator's, per GB of values.
    for field in [
        "server_cpu_seconds",
        "server_cpu_seconds_per_gb",
        "client_cpu_seconds",
        "client_cpu_seconds_per_gb",
    ] {
        assert!(
            lines[0][field].as_f64().is_some_and(|value| value >= 0.0),
            "{field}: {}",
            lines[0]
        );
    }
    assert!(
        lines[0].get("pacer_late_us").is_none(),
        "closed loop: no pacer"
    );
}

#[test]
fn consume_mode_preloads_then_reports_consumption_only() {
    let lines = bench_json(&[&SHORT[..], &["--mode", "consume", "--batch", "100"]].concat());
    assert_eq!(lines.len(), 1, "{lines:?}");
    check_role(&lines[0], "consume");
    assert_eq!(lines[0]["latency"], "fetch_round_trip");
}

#[test]
fn both_mode_reports_producers_and_end_to_end_consumers() {
    let lines = bench_json(&[&SHORT[..], &["--mode", "both", "--batch", "100"]].concat());
    assert_eq!(lines.len(), 2, "{lines:?}");
    check_role(&lines[0], "produce");
    check_role(&lines[1], "consume");
    assert_eq!(lines[1]["latency"], "end_to_end");
}

#[test]
fn failover_rejects_stale_writes_and_none_land() {
    // Retention off: every acknowledged record must still be there to be read back (at the
    // default 1 GiB, a fast machine writes past it within the second and deletes the start).
    let lines = bench_json(
        &[
            &SHORT[..],
            &[
                "--mode",
                "failover",
                "--batch",
                "100",
                "--retention-bytes",
                "0",
            ],
        ]
        .concat(),
    );
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    check_role(line, "produce");
    assert_eq!(line["mode"], "failover");
    assert_eq!(line["stale_landed"], 0, "{line}");
    assert!(line["stale_rejected"].as_u64().unwrap() > 0, "{line}");
    let handover = &line["handover_ms"];
    assert!(handover["count"].as_u64().unwrap() >= 1, "{line}");
    for field in ["p50", "mean", "max"] {
        assert!(handover[field].as_f64().unwrap() > 0.0, "{field} in {line}");
    }
    assert!(line["records_verified"].as_u64().unwrap() >= line["records"].as_u64().unwrap());
}

#[test]
fn records_mode_measures_exactly_that_many_records_per_role() {
    let lines = bench_json(&[
        "--records",
        "5000",
        "--batch",
        "300",
        "--warmup",
        "0s",
        "--mode",
        "both",
    ]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(check_role(&lines[0], "produce"), 5000);
    assert_eq!(check_role(&lines[1], "consume"), 5000);
}

#[test]
fn fixed_rate_sends_about_the_rate() {
    let lines = bench_json(&[&SHORT[..], &["--rate", "2000", "--batch", "10"]].concat());
    let records = check_role(&lines[0], "produce");
    assert!(
        (1500..=2100).contains(&records),
        "{records} records at 2000/s for 1 s"
    );
    assert_eq!(lines[0]["rate"], 2000.0);
    // The generator reports its own wake-up error beside the latencies it inflates.
    assert!(
        lines[0]["pacer_late_us"]["p99"].as_u64().is_some(),
        "{}",
        lines[0]
    );
}

#[test]
fn more_producers_than_partitions_get_a_partition_each() {
    let lines = bench_json(&[&SHORT[..], &["--producers", "3", "--partitions", "1"]].concat());
    check_role(&lines[0], "produce");
    assert_eq!(lines[0]["partitions"], 3);
    assert_eq!(lines[0]["clients"], 3);
}

#[test]
fn runs_against_a_server_given_by_address() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(TestServer::start()).unwrap();
    let addr = server.addr().to_string();
    let bench_topics = || {
        let topics = runtime.block_on(async {
            let client = fencelog::client::Client::connect(addr.as_str())
                .await
                .unwrap();
            client.list_topics().await.unwrap()
        });
        topics
            .into_iter()
            .filter(|topic| topic.name.starts_with("bench-produce-"))
            .count()
    };
    let lines = bench_json(&[&SHORT[..], &["--addr", &addr, "--flush", "always"]].concat());
    check_role(&lines[0], "produce");
    assert_eq!(lines[0]["flush"], "always");
    // A server elsewhere, pid not given: its CPU is not claimed.
    assert!(lines[0].get("server_cpu_seconds_per_gb").is_none());
    assert_eq!(
        bench_topics(),
        0,
        "the bench deletes the topic it created, with its data"
    );
    bench_json(&[&SHORT[..], &["--addr", &addr, "--keep-topic"]].concat());
    assert_eq!(bench_topics(), 1, "--keep-topic leaves the bench's topic");
    drop(server);
}

#[test]
fn loopback_mode_measures_round_trips_without_a_server() {
    let lines = bench_json(&[
        "--mode",
        "loopback",
        "--batch",
        "1",
        "--records",
        "300",
        "--warmup",
        "0s",
    ]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(check_role(&lines[0], "loopback") >= 300);
    assert_eq!(lines[0]["latency"], "round_trip");
    assert!(lines[0].get("pacer_late_us").is_none());
    let paced = bench_json(&[
        "--mode",
        "loopback",
        "--batch",
        "1",
        "--rate",
        "2000",
        "--records",
        "50",
        "--warmup",
        "0s",
    ]);
    assert!(paced[0]["pacer_late_us"]["p99"].is_u64(), "{}", paced[0]);
    let output = bench(&["--mode", "loopback", "--addr", "127.0.0.1:1"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no --addr"));
}

#[test]
fn without_json_a_table_is_printed() {
    let output = bench(&[&SHORT[..], &["--mode", "both", "--batch", "100"]].concat());
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    for expected in [
        "records/s",
        "MB/s",
        "p99.9",
        "produce",
        "consume",
        "end to end",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected:?} missing from:\n{stdout}"
        );
    }
}

/// `--report FILE.html` writes a self-contained page with the four plots (throughput,
/// latency percentiles and CPU over time, the latency histogram) for both roles, and the JSON
/// lines stay exactly as without it.
#[test]
fn report_writes_a_self_contained_html_file_with_its_plots() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.html");
    let lines = bench_json(
        &[
            &SHORT[..],
            &["--mode", "both", "--batch", "100", "--report"],
            &[path.to_str().unwrap()],
        ]
        .concat(),
    );
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|line| line.get("plots").is_none()));
    let html = std::fs::read_to_string(&path).expect("the report was written");
    assert!(html.starts_with("<!doctype html>"), "{html}");
    for expected in [
        "Throughput over time",
        "Latency over time",
        "Latency histogram",
        "CPU over time",
        "produce p99",
        "consume p50",
        "<polyline",
    ] {
        assert!(
            html.contains(expected),
            "{expected:?} missing from the report"
        );
    }
    assert_eq!(html.matches("<svg").count(), 4, "{html}");
    for fetching in ["<script", "src=", "href=", "@import"] {
        assert!(
            !html.contains(fetching),
            "the report loads nothing: {fetching}"
        );
    }
}

#[test]
fn settings_out_of_bounds_exit_1_with_the_limit() {
    let output = bench(&["--record-size", "16384", "--batch", "1000"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("use --batch 511 or less"), "{stderr}");
    let output = bench(&["--mode", "failover", "--record-size", "8"]);
    assert_eq!(output.status.code(), Some(1));
    let output = bench(&["--duration", "1s", "--records", "10"]);
    assert_ne!(
        output.status.code(),
        Some(0),
        "--duration and --records conflict"
    );
}

/// `--protocol kafka --idempotent`: producers with a producer id and sequence numbers (acks=all)
/// are acknowledged like plain ones, and the line names the producer kind; the flag needs the
/// Kafka protocol.
#[test]
fn kafka_idempotent_producers_are_measured_and_named() {
    let lines = bench_json(&[
        "--protocol",
        "kafka",
        "--idempotent",
        "--records",
        "3000",
        "--batch",
        "200",
        "--warmup",
        "0s",
    ]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(check_role(&lines[0], "produce") >= 3000);
    assert_eq!(lines[0]["kafka_producer"], "idempotent", "{}", lines[0]);
    assert!(lines[0].get("commit_latency_us").is_none());
    let output = bench(&["--idempotent", "--duration", "1s"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("add --protocol kafka"));
}

/// `--protocol kafka --mode produce`: Kafka producers through the in-process server's Kafka
/// listener measure acknowledged records like native ones, and the line names its protocol.
#[test]
fn kafka_produce_prints_the_contract_fields_with_its_protocol() {
    let lines = bench_json(&[
        "--protocol",
        "kafka",
        "--mode",
        "produce",
        "--records",
        "3000",
        "--batch",
        "200",
        "--warmup",
        "0s",
    ]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(check_role(&lines[0], "produce"), 3000);
    assert_eq!(lines[0]["latency"], "ack");
    assert_eq!(lines[0]["protocol"], "kafka");
}

/// `--protocol kafka --mode consume`: the preload and the fetches go through the Kafka listener,
/// and every measured record is counted.
#[test]
fn kafka_consume_preloads_and_fetches_through_the_kafka_listener() {
    let lines = bench_json(&[
        "--protocol",
        "kafka",
        "--mode",
        "consume",
        "--records",
        "3000",
        "--batch",
        "200",
        "--warmup",
        "0s",
    ]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(check_role(&lines[0], "consume"), 3000);
    assert_eq!(lines[0]["latency"], "fetch_round_trip");
    assert_eq!(lines[0]["protocol"], "kafka");
}

/// `--protocol kafka --mode both`: end-to-end latency read from the stamps of values that went
/// in and out through the Kafka listener.
#[test]
fn kafka_both_reads_every_record_end_to_end() {
    let lines = bench_json(&[
        "--protocol",
        "kafka",
        "--mode",
        "both",
        "--records",
        "3000",
        "--batch",
        "200",
        "--warmup",
        "0s",
    ]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(check_role(&lines[0], "produce"), 3000);
    assert_eq!(check_role(&lines[1], "consume"), 3000);
    assert_eq!(lines[1]["latency"], "end_to_end");
    assert!(lines.iter().all(|line| line["protocol"] == "kafka"));
}

/// The default protocol is native, and the JSON says so.
#[test]
fn native_is_the_default_protocol() {
    let lines = bench_json(&["--records", "1000", "--batch", "100", "--warmup", "0s"]);
    assert_eq!(lines[0]["protocol"], "native");
}

/// Failover hands native leases over: `--protocol kafka` is refused with exit 1 and a message
/// naming both flags, before anything runs.
#[test]
fn kafka_protocol_is_refused_for_failover() {
    let output = bench(&["--mode", "failover", "--protocol", "kafka"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--protocol kafka") && stderr.contains("--mode failover"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

/// Against an external server, `--protocol kafka` runs through the Kafka listener named by
/// `--kafka-addr`, and is refused without it.
#[test]
fn kafka_protocol_runs_against_a_server_given_by_both_addresses() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime
        .block_on(TestServer::builder().kafka().start())
        .unwrap();
    let (addr, kafka_addr) = (server.addr().to_string(), server.kafka_addr().to_string());
    let output = bench(&["--protocol", "kafka", "--addr", &addr]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--kafka-addr"));
    let lines = bench_json(&[
        "--protocol",
        "kafka",
        "--addr",
        &addr,
        "--kafka-addr",
        &kafka_addr,
        "--records",
        "1000",
        "--batch",
        "100",
        "--warmup",
        "0s",
    ]);
    assert_eq!(check_role(&lines[0], "produce"), 1000);
    assert_eq!(lines[0]["protocol"], "kafka");
    drop(server);
}

/// `--payload json` (issue 54's compressible payload): both roles name it, producers report its
/// zstd ratio, and the consumers read every record back through the same checks (stamps in
/// every value).
#[test]
fn a_json_payload_is_reported_with_its_compression_ratio() {
    let mut args = vec!["--mode", "both", "--payload", "json"];
    args.extend_from_slice(&SHORT);
    let lines = bench_json(&args);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for line in &lines {
        assert_eq!(line["payload"], "json", "{line}");
        let ratio = line["payload_zstd_ratio"].as_f64().unwrap();
        assert!((2.0..10.0).contains(&ratio), "{line}");
    }
    check_role(&lines[0], "produce");
    check_role(&lines[1], "consume");
    let filler = bench_json(&SHORT);
    assert_eq!(filler[0]["payload"], "filler");
    assert!(filler[0].get("payload_zstd_ratio").is_none());
}

/// Compressed producers (natively a magic-2 batch, over Kafka a compressed Kafka batch) report
/// the bytes they put on the wire and the bytes the log holds per value byte: the JSON payload's
/// zstd ratio on both, stored as sent.
#[test]
fn a_compressed_bench_reports_its_bytes_on_the_wire_and_on_disk() {
    for protocol in ["native", "kafka"] {
        let mut args = vec![
            "--payload",
            "json",
            "--compression",
            "zstd",
            "--protocol",
            protocol,
        ];
        args.extend_from_slice(&SHORT);
        let lines = bench_json(&args);
        let line = &lines[0];
        check_role(line, "produce");
        assert_eq!(line["compression"], "zstd", "{line}");
        let wire = line["wire_bytes_per_value_byte"].as_f64().unwrap();
        let disk = line["disk_bytes_per_value_byte"].as_f64().unwrap();
        let ratio = line["payload_zstd_ratio"].as_f64().unwrap();
        assert!(wire < 1.5 / ratio, "{line}");
        assert!((disk - wire).abs() <= 0.05 * wire, "{line}");
    }
    let plain = bench_json(&SHORT);
    assert_eq!(plain[0]["compression"], "none");
    assert!(plain[0]["wire_bytes_per_value_byte"].as_f64().unwrap() >= 1.0);
}
