//! Signals to child processes: a `fencelog serve` paused (SIGSTOP) must be wholly stopped before
//! a test goes on, since the signal reaches its threads asynchronously.

use std::process::Command;
use std::time::{Duration, Instant};

/// Sends `signal` (`-STOP`, `-CONT`, `-INT`, ...) to process `pid`.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {signal} {pid}");
}

/// SIGSTOPs `pid` and waits (at most `patience`) until every thread of it is stopped: a thread
/// still running could answer a request sent "after" the pause.
pub fn pause(pid: u32, patience: Duration) {
    signal(pid, "-STOP");
    let deadline = Instant::now() + patience;
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("proc tasks");
        let all_stopped = tasks.filter_map(Result::ok).all(|task| {
            std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .and_then(|(_, rest)| rest.chars().next())
                    .is_some_and(|state| state == 'T' || state == 't')
            })
        });
        if all_stopped {
            return;
        }
        assert!(Instant::now() < deadline, "process {pid} never stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `program args` in `dir` to completion, asserts it succeeded (showing its output if
/// not) and parses the one JSON object it printed: how the client scenario scripts
/// (`tools/kafka-clients/`) report.
pub async fn run_json(
    dir: &'static str,
    program: &'static str,
    args: Vec<String>,
) -> serde_json::Value {
    let shown = format!("{program} {}", args.join(" "));
    let output = tokio::task::spawn_blocking(move || {
        Command::new(program)
            .args(&args)
            .current_dir(dir)
            .output()
            .expect("run the client")
    })
    .await
    .expect("client task");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{shown} failed:\n{stdout}\n{stderr}"
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|error| panic!("{shown} printed no JSON ({error}):\n{stdout}\n{stderr}"))
}

/// A client of the server that is starting at `addr` (a `fencelog serve` child), retrying the
/// connection every 20 ms for at most `limit`.
pub async fn connect_within(
    addr: std::net::SocketAddr,
    limit: Duration,
) -> fencelog::client::Client {
    let deadline = Instant::now() + limit;
    loop {
        match fencelog::client::Client::connect(addr).await {
            Ok(client) => return client,
            Err(error) if Instant::now() > deadline => panic!("server did not come up: {error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}
