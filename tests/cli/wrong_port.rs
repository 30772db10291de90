//! Pointing a client at the wrong port (issue 33): both sides say "this port speaks HTTP / TLS /
//! Kafka; did you mean ...?" within seconds, and the server logs what it saw at INFO, never a
//! WARN; ordinary client departures (a TLS client's exit, a reset) are not warnings either.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::raw_protocol::{unused_port, ChildServer};
use crate::support::BIN;

/// Generous bound on a client command that must not hang (the judged bound is 2 s).
const ANSWERED_WITHIN: Duration = Duration::from_secs(5);

/// Runs `fencelog ARGS` without the environment's address or TLS variables; returns its output
/// and how long it took.
fn fencelog(args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let mut command = Command::new(BIN);
    command.args(args).env_remove("FENCELOG_ADDR");
    for variable in [
        "FENCELOG_TLS_CA",
        "FENCELOG_TLS_CLIENT_CERT",
        "FENCELOG_TLS_CLIENT_KEY",
    ] {
        command.env_remove(variable);
    }
    let output = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (output, started.elapsed())
}

/// A failed command's stderr, after checking that it failed promptly.
fn failed_promptly(output: &Output, took: Duration) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "the command succeeded: {stderr}");
    assert!(took < ANSWERED_WITHIN, "took {took:?}: {stderr}");
    stderr
}

/// Sends `bytes` on a fresh connection to `addr` and reads until the server closes it.
fn exchange(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut socket = TcpStream::connect(addr).unwrap();
    socket.set_read_timeout(Some(ANSWERED_WITHIN)).unwrap();
    socket.write_all(bytes).unwrap();
    let mut answer = Vec::new();
    // A reset after the answer is fine: what was read is kept.
    let _ = socket.read_to_end(&mut answer);
    answer
}

/// The server's log lines at WARN or above.
fn warnings(server: &ChildServer) -> Vec<String> {
    server
        .log_text()
        .lines()
        .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
        .map(str::to_owned)
        .collect()
}

/// Proves: `topic list --addr <Kafka port>` exits non-zero within seconds with a message naming
/// the Kafka listener and the native listener's address; `--addr <metrics port>` says HTTP; an
/// HTTP request to the native or the Kafka listener is answered `400` with a plain-text body
/// naming what the listener speaks; a TLS ClientHello or a Kafka client at the native listener
/// is closed; the server logs each at INFO, and logs no WARN for them nor for a client killed in
/// the middle of a frame (its connection reset).
#[test]
fn clients_at_the_wrong_port_are_told_where_they_are_and_the_server_does_not_warn() {
    let directory = tempfile::tempdir().unwrap();
    let kafka: SocketAddr = format!("127.0.0.1:{}", unused_port()).parse().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", unused_port()).parse().unwrap();
    let server = ChildServer::spawn(
        &directory.path().join("data"),
        &[
            "--kafka-listen",
            &kafka.to_string(),
            "--metrics-listen",
            &metrics.to_string(),
        ],
        None,
    );
    let native = server.addr.to_string();

    let (output, took) = fencelog(&["topic", "list", "--addr", &kafka.to_string()]);
    let stderr = failed_promptly(&output, took);
    assert!(stderr.contains("Kafka listener"), "{stderr}");
    assert!(
        stderr.contains(&native),
        "names the native listener: {stderr}"
    );

    let (output, took) = fencelog(&["topic", "list", "--addr", &metrics.to_string()]);
    let stderr = failed_promptly(&output, took);
    assert!(stderr.contains("speaks HTTP"), "{stderr}");
    assert!(stderr.contains("7171"), "{stderr}");

    let http = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    let answer = String::from_utf8_lossy(&exchange(server.addr, http)).into_owned();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("native binary protocol"), "{answer}");
    let answer = String::from_utf8_lossy(&exchange(kafka, http)).into_owned();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("Kafka wire protocol"), "{answer}");

    // A TLS ClientHello's record header (and a few bytes of it) at a plain listener.
    let hello = [
        0x16, 0x03, 0x01, 0x00, 0xf4, 0x01, 0x00, 0x00, 0xf0, 0x03, 0x03, 0x00,
    ];
    assert!(exchange(server.addr, &hello).is_empty());
    assert!(exchange(kafka, &hello).is_empty());
    // A Kafka client's opening ApiVersions v3 at the native listener: closed, not answered.
    let mut api_versions = vec![0, 0, 0, 0, 0, 18, 0, 3, 0, 0, 0, 1, 0, 7];
    api_versions.extend_from_slice(b"rdkafka\0\x02\x01\x02\x01\0");
    let length = (api_versions.len() - 4) as u32;
    api_versions[..4].copy_from_slice(&length.to_be_bytes());
    assert!(exchange(server.addr, &api_versions).is_empty());

    // A client killed in the middle of a frame: its connection is reset.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use tokio::io::AsyncWriteExt;
        let mut socket = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        socket.write_all(&[0, 0, 1, 0, 0]).await.unwrap();
        // SO_LINGER 0: the close resets the connection, as a killed client's does.
        #[allow(deprecated)]
        socket.set_linger(Some(Duration::ZERO)).unwrap();
        drop(socket);
    });

    // Let the server write its log lines.
    std::thread::sleep(Duration::from_millis(300));
    let log = server.log_text();
    for seen in [
        "a native fencelog client reached the Kafka listener",
        "an HTTP client reached the native listener",
        "an HTTP client reached the kafka listener",
        "a TLS client reached the plain-TCP native listener",
        "a Kafka client reached fencelog's native listener",
    ] {
        assert!(log.contains(seen), "no INFO line {seen:?} in:\n{log}");
    }
    assert_eq!(warnings(&server), Vec::<String>::new());
}

/// Proves: a plain client at a TLS listener is told the port speaks TLS; a TLS client's ordinary
/// exit logs no WARN on the server.
#[test]
fn tls_clients_leave_without_warnings_and_plain_clients_are_told_to_use_tls() {
    let directory = tempfile::tempdir().unwrap();
    let ca = crate::tls::authority("fencelog wrong-port test CA");
    let (certificate, key) = crate::tls::leaf(&ca, &["localhost", "127.0.0.1"]);
    let path = |name: &str| directory.path().join(name);
    std::fs::write(path("ca.pem"), &ca.pem).unwrap();
    std::fs::write(path("server.pem"), certificate).unwrap();
    std::fs::write(path("server.key"), key).unwrap();
    let server = ChildServer::spawn(
        &path("data"),
        &[
            "--tls-cert",
            path("server.pem").to_str().unwrap(),
            "--tls-key",
            path("server.key").to_str().unwrap(),
        ],
        None,
    );
    let addr = format!("localhost:{}", server.addr.port());
    let ca_file = path("ca.pem");
    let ca_file = ca_file.to_str().unwrap();

    for _ in 0..3 {
        let (output, _) = fencelog(&["topic", "list", "--addr", &addr, "--tls-ca", ca_file]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let (output, took) = fencelog(&["topic", "list", "--addr", &addr]);
    let stderr = failed_promptly(&output, took);
    assert!(stderr.contains("speaks TLS"), "{stderr}");

    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(warnings(&server), Vec::<String>::new());
}
