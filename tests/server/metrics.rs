//! The Prometheus endpoint, black-box: a real server, real clients, and `GET /metrics` over a
//! plain TCP socket. The counters must count what happened (a fenced produce moves the fenced
//! counter, not the produce counters), carry the `topic` and `partition` labels, and the text
//! must be valid Prometheus exposition. With the `cli` feature, `fencelog serve` itself: its
//! logs carry no colour escapes when stderr is not a terminal, and `--log-format json` writes
//! JSON lines.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use fencelog::client::{BatchBuilder, Client, ClientError};
use fencelog::protocol::{FlushPolicy, TopicConfig};
use fencelog::testing::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOPIC: &str = "orders";
const TTL: Duration = Duration::from_secs(10);

fn topic_config() -> TopicConfig {
    TopicConfig {
        segment_bytes: 64 * 1024,
        flush: FlushPolicy::Always,
        retention_bytes: None,
        retention_ms: None,
    }
}

fn batch(epoch: u64, records: usize) -> Bytes {
    let mut builder = BatchBuilder::new(epoch);
    for index in 0..records {
        builder.push(1_000, None, Some(format!("record {index}").as_bytes()));
    }
    builder.finish()
}

/// One HTTP/1.1 request over a plain socket: `(status, headers, body)`.
async fn http_get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let mut socket = TcpStream::connect(addr).await.expect("connect to metrics");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut answer))
        .await
        .expect("metrics answer within 10 s")
        .unwrap();
    let answer = String::from_utf8(answer).expect("utf-8 answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status code");
    (status, head.to_string(), body.to_string())
}

/// The value of the sample whose name and labels are exactly `series` (as written in the text).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().expect("a numeric value"))
        })
}

/// Checks the text as Prometheus exposition: every sample's metric family has a `# TYPE` line
/// (histograms' `_bucket`, `_sum` and `_count` belong to their family), before its samples, once;
/// and no sample repeats the same name and labels.
fn assert_valid_exposition(text: &str) {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut seen = HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "unknown type in {line:?}"
            );
            let previous = types.insert(name.to_string(), kind.to_string());
            assert!(previous.is_none(), "{name} has two # TYPE lines");
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let series = line.rsplit_once(' ').expect("a sample has a value").0;
        let value = line.rsplit_once(' ').unwrap().1;
        assert!(
            value.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&value),
            "bad value in {line:?}"
        );
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name {name:?}"
        );
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                let base = name.strip_suffix(suffix)?;
                (types.get(base).map(String::as_str) == Some("histogram")).then_some(base)
            })
            .unwrap_or(name);
        assert!(
            types.contains_key(family),
            "sample {name} has no # TYPE line before it"
        );
        assert!(seen.insert(series.to_string()), "sample {series} repeats");
    }
}

/// The story an operator's dashboard should tell: a holder produces, its lease expires, a new
/// holder is granted, the old holder is fenced, someone tries an epoch never granted, the new
/// holder renews, a consumer fetches. Each counter moved exactly as much as happened, with the
/// `topic` and `partition` labels; the untouched partition reads zero; the text is valid
/// exposition.
#[tokio::test]
async fn counters_move_with_what_happened_and_the_text_is_valid_exposition() {
    let server = TestServer::builder().manual_clock().start().await.unwrap();
    let metrics = server.serve_metrics().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client.create_topic(TOPIC, 2, topic_config()).await.unwrap();

    let first = client.acquire_lease(TOPIC, 0, "a", TTL).await.unwrap();
    client
        .produce(TOPIC, 0, batch(first.epoch, 3))
        .await
        .unwrap();
    server.advance(TTL + Duration::from_secs(1));
    let second = client.acquire_lease(TOPIC, 0, "b", TTL).await.unwrap();
    assert_eq!(second.epoch, 2);
    let stale = client.produce(TOPIC, 0, batch(first.epoch, 5)).await;
    assert!(
        matches!(stale, Err(ClientError::Fenced { .. })),
        "{stale:?}"
    );
    let unknown = client.produce(TOPIC, 0, batch(9, 7)).await;
    assert!(unknown.is_err(), "epoch 9 was never granted");
    client
        .produce(TOPIC, 0, batch(second.epoch, 2))
        .await
        .unwrap();
    client.renew_lease(TOPIC, 0, second.lease_id).await.unwrap();
    let fetched = client
        .fetch(TOPIC, 0, 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(fetched.records.len(), 5);

    let (status, head, text) = http_get(metrics.addr(), "/metrics").await;
    assert_eq!(status, 200, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert_valid_exposition(&text);
    let labels = |partition: u32| format!("{{topic=\"{TOPIC}\",partition=\"{partition}\"}}");
    let value = |name: &str, partition: u32| {
        sample(&text, &format!("{name}{}", labels(partition)))
            .unwrap_or_else(|| panic!("no {name} for partition {partition} in:\n{text}"))
    };
    assert_eq!(value("fencelog_produce_records_total", 0), 5.0);
    assert!(value("fencelog_produce_bytes_total", 0) > 0.0);
    assert_eq!(value("fencelog_fenced_total", 0), 1.0);
    assert_eq!(value("fencelog_unknown_epoch_total", 0), 1.0);
    assert_eq!(value("fencelog_lease_grants_total", 0), 2.0);
    assert_eq!(value("fencelog_lease_expiries_total", 0), 1.0);
    assert_eq!(value("fencelog_lease_renewals_total", 0), 1.0);
    assert_eq!(value("fencelog_fetch_records_total", 0), 5.0);
    assert_eq!(
        value("fencelog_fetch_bytes_total", 0),
        value("fencelog_produce_bytes_total", 0)
    );
    assert_eq!(value("fencelog_log_end_offset", 0), 5.0);
    assert_eq!(value("fencelog_high_watermark", 0), 5.0);
    assert_eq!(value("fencelog_partition_epoch", 0), 2.0);
    assert_eq!(value("fencelog_produce_records_total", 1), 0.0);
    assert_eq!(value("fencelog_lease_grants_total", 1), 0.0);

    assert_eq!(
        sample(&text, "fencelog_connections{listener=\"native\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "fencelog_connections_refused_total{listener=\"native\"}"
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "fencelog_produce_batch_bytes_count"),
        Some(2.0)
    );
    assert!(sample(&text, "fencelog_sync_duration_seconds_count").unwrap() >= 1.0);
    assert_eq!(
        sample(
            &text,
            "fencelog_request_duration_seconds_count{listener=\"native\",api=\"Produce\"}"
        ),
        Some(4.0)
    );
    assert_eq!(
        sample(
            &text,
            "fencelog_request_duration_seconds_count{listener=\"native\",api=\"AcquireLease\"}"
        ),
        Some(2.0)
    );
}

/// Only `/metrics` and the console (`/`, `/api/...`) are served: another path is a 404, and a
/// request head larger than the limit is refused without taking the server down (the next
/// scrape works).
#[tokio::test]
async fn other_paths_are_not_found_and_oversized_requests_are_refused() {
    let server = TestServer::start().await.unwrap();
    let metrics = server.serve_metrics().await.unwrap();
    let (status, _, _) = http_get(metrics.addr(), "/").await;
    assert_eq!(status, 200, "the console's page");
    let (status, _, _) = http_get(metrics.addr(), "/nothing").await;
    assert_eq!(status, 404);
    let (status, _, _) = http_get(metrics.addr(), "/metrics/extra").await;
    assert_eq!(status, 404);

    let mut socket = TcpStream::connect(metrics.addr()).await.unwrap();
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Padding: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    // The server may close before it has read everything: a failed write is a refusal too.
    let _ = socket.write_all(huge.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut answer))
        .await
        .expect("the oversized request is answered or closed within 10 s");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );

    let (status, _, text) = http_get(metrics.addr(), "/metrics").await;
    assert_eq!(status, 200);
    assert!(text.contains("# TYPE fencelog_connections gauge"));
}

/// The docs keep up with the code: every family a scrape exposes is listed in
/// docs/operations.md, and every series the Grafana dashboard queries is one a scrape exposes.
#[tokio::test]
async fn operations_doc_and_dashboard_name_the_exposed_series() {
    let server = TestServer::start().await.unwrap();
    let metrics = server.serve_metrics().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client.create_topic(TOPIC, 1, topic_config()).await.unwrap();
    let (_, _, text) = http_get(metrics.addr(), "/metrics").await;
    let families: HashSet<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split(' ').next())
        .collect();
    let root = env!("CARGO_MANIFEST_DIR");
    let operations = std::fs::read_to_string(format!("{root}/docs/operations.md")).unwrap();
    for family in &families {
        assert!(
            operations.contains(&format!("| `{family}` |")),
            "docs/operations.md has no row for {family}"
        );
    }
    let dashboard = std::fs::read_to_string(format!("{root}/docs/grafana-dashboard.json")).unwrap();
    let parsed: serde_json::Value =
        serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    assert!(parsed["panels"]
        .as_array()
        .is_some_and(|panels| !panels.is_empty()));
    let mut rest = dashboard.as_str();
    while let Some(start) = rest.find("fencelog_") {
        let name: String = rest[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[start + name.len()..];
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|base| families.contains(base))
            .unwrap_or(&name);
        assert!(
            families.contains(family),
            "the dashboard queries {name}, which no scrape exposes"
        );
    }
}

/// `fencelog serve` run as a service runs it: stderr is a pipe, not a terminal.
#[cfg(feature = "cli")]
mod cli {
    use std::io::{BufRead, BufReader};
    use std::process::{Child, Command, Stdio};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use crate::support::BIN;

    /// Starts `fencelog serve` with stderr piped (NO_COLOR unset, so only the pipe can turn colour
    /// off) and returns it with a channel of its stderr lines.
    fn serve(extra: &[&str]) -> (Child, mpsc::Receiver<String>, tempfile::TempDir) {
        let data = tempfile::tempdir().unwrap();
        let mut child = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.path())
            .args(extra)
            .env_remove("NO_COLOR")
            .env_remove("RUST_LOG")
            .env_remove("FENCELOG_LOG_FORMAT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn fencelog serve");
        let stderr = child.stderr.take().unwrap();
        let (lines, received) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        (child, received, data)
    }

    /// Lines until one contains `needle` (at most 30 s).
    fn lines_until(lines: &mpsc::Receiver<String>, needle: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(needle);
                    seen.push(line);
                    if found {
                        return seen;
                    }
                }
                Err(_) => break,
            }
        }
        panic!("no line containing {needle:?} within 30 s; got {seen:?}");
    }

    /// With stderr piped the server's log lines carry no ANSI escape.
    #[test]
    fn piped_stderr_gets_no_colour_escapes() {
        let (mut child, lines, _data) = serve(&[]);
        let seen = lines_until(&lines, "fencelog listening");
        child.kill().unwrap();
        child.wait().unwrap();
        for line in &seen {
            assert!(!line.contains("\x1b["), "colour escape in {line:?}");
        }
    }

    /// `--log-format json` writes one JSON object per line, with the event's fields; the metrics
    /// listener's address is one of them, and scraping it works.
    #[test]
    fn json_log_format_writes_json_lines_and_metrics_are_served() {
        let (mut child, lines, _data) =
            serve(&["--log-format", "json", "--metrics-listen", "127.0.0.1:0"]);
        let mut seen = lines_until(&lines, "metrics listening");
        seen.extend(lines_until(&lines, "fencelog listening"));
        let mut metrics_addr = None;
        for line in &seen {
            let event: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|error| panic!("{line:?}: {error}"));
            assert!(event["level"].is_string(), "{line}");
            if event["fields"]["message"] == "metrics listening" {
                metrics_addr = event["fields"]["addr"].as_str().map(str::to_string);
            }
        }
        let addr = metrics_addr.expect("the metrics address is logged");
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let (status, _, text) =
            runtime.block_on(super::http_get(addr.parse().unwrap(), "/metrics"));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(status, 200);
        assert!(text.contains("# TYPE fencelog_connections gauge"), "{text}");
    }
}
