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
