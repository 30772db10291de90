//! `--mode loopback`: the machine's own round-trip floor, with no fencelog code on the path.
//!
//! # Why
//!
//! The single-record latency targets (closed loop, and at a fixed rate) are judged on shared
//! virtual machines where a thread's wake-up costs a hypervisor exit. Throughput has iperf3 as
//! its ceiling; latency needs one too, measured the same way in the same run, or a p99 cannot be
//! told apart from the machine it ran on. This is that ceiling: two threads of this process, a
//! client and an echo, exchange a request of `--batch` x `--record-size` bytes and a
//! [`ANSWER_BYTES`]-byte answer over a loopback TCP connection (`TCP_NODELAY`, blocking
//! sockets), one round trip at a time. Each round trip wakes each thread once, the fewest any
//! request and answer between two threads can: a server and its client cannot do better on
//! this machine, whatever their code.
//!
//! With `--rate` the client sleeps until each due time (an OS sleep, as the bench's pacer
//! does), and the latency is measured from the due time, so the figure includes the client's
//! own wake-up from idle, which is reported apart (`pacer_late_us`), as a produce run does.
//!
//! Not a test of anything: a measurement for `tools/bench-sweep` and `docs/benchmarks.md`.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use super::config::{BenchConfig, StopAfter};
use super::error::BenchError;
use super::stats::{Clock, Recorder, RoleReport};

/// Bytes of each answer: about a produce acknowledgement's.
pub const ANSWER_BYTES: usize = 64;

/// Runs the ping-pong for the configured duration (or `--records` round trips of `--batch`
/// records each) and reports it as one `loopback` line: records and bytes are the requests',
/// the latency is each round trip's (`round_trip`).
pub fn run(config: &BenchConfig) -> Result<RoleReport, BenchError> {
    let io_error =
        |what: &'static str| move |source: io::Error| BenchError::Loopback { what, source };
    let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(io_error("bind"))?;
    let addr = listener.local_addr().map_err(io_error("bind"))?;
    let request_bytes = config.batch_records as usize * config.record_bytes;
    let echo = thread::Builder::new()
        .name("fencelog-loopback-echo".into())
        .spawn(move || echo(&listener, request_bytes))
        .map_err(io_error("start the echo thread"))?;
    let client = TcpStream::connect(addr).map_err(io_error("connect"))?;
    client.set_nodelay(true).map_err(io_error("connect"))?;
    let measured = exchange(&client, config, request_bytes).map_err(io_error("exchange"));
    // The echo ends when the client's side closes.
    let _ = client.shutdown(Shutdown::Both);
    let echoed = echo
        .join()
        .map_err(|_| BenchError::Loopback {
            what: "echo",
            source: io::Error::other("the echo thread panicked"),
        })?
        .map_err(io_error("echo"));
    let (recorder, seconds) = measured?;
    echoed?;
    Ok(RoleReport::new(
        "loopback",
        "round_trip",
        1,
        config,
        &recorder,
        seconds,
    ))
}

/// Answers every request of `request_bytes` with [`ANSWER_BYTES`] until the client closes.
fn echo(listener: &TcpListener, request_bytes: usize) -> io::Result<()> {
    let (mut socket, _) = listener.accept()?;
    socket.set_nodelay(true)?;
    let mut request = vec![0u8; request_bytes];
    let answer = [0u8; ANSWER_BYTES];
    loop {
        match socket.read_exact(&mut request) {
            Ok(()) => socket.write_all(&answer)?,
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(error) => return Err(error),
        }
    }
}

/// The client's loop: returns what was measured and the measurement window's length.
fn exchange(
    socket: &TcpStream,
    config: &BenchConfig,
    request_bytes: usize,
) -> io::Result<(Recorder, f64)> {
    let mut socket = socket;
    let request = vec![0x5a_u8; request_bytes];
    let mut answer = [0u8; ANSWER_BYTES];
    let clock = Clock::for_run(config);
    let interval = config
        .rate
        .map(|rate| Duration::from_secs_f64(f64::from(config.batch_records) / rate));
    let records_per_trip = u64::from(config.batch_records);
    let mut recorder = clock.recorder();
    let mut due = clock.origin();
    loop {
        let start = match interval {
            Some(interval) => {
                due += interval;
                sleep_until(due);
                let woke = Instant::now();
                if clock.measuring(due) {
                    recorder.pacer_late(woke.saturating_duration_since(due));
                }
                due
            }
            None => Instant::now(),
        };
        if clock.past_deadline(start) || done(config.stop, &recorder) {
            break;
        }
        socket.write_all(&request)?;
        socket.read_exact(&mut answer)?;
        let answered = Instant::now();
        if clock.measuring(start) {
            recorder.count(records_per_trip, request_bytes as u64, answered);
            recorder.latency(answered.saturating_duration_since(start), records_per_trip);
        }
    }
    let end = recorder.last.unwrap_or_else(Instant::now);
    let seconds = end
        .saturating_duration_since(clock.measure_from())
        .as_secs_f64();
    Ok((recorder, seconds))
}

fn done(stop: StopAfter, recorder: &Recorder) -> bool {
    matches!(stop, StopAfter::Records(records) if recorder.records >= records)
}

fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        thread::sleep(at - now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::config::Mode;

    /// A short closed-loop run counts its round trips as records and reports a latency.
    #[test]
    fn loopback_reports_round_trips() {
        let config = BenchConfig {
            mode: Mode::Loopback,
            batch_records: 1,
            record_bytes: 1024,
            stop: StopAfter::Records(200),
            warmup: Duration::ZERO,
            ..BenchConfig::default()
        };
        let report = run(&config).unwrap();
        assert_eq!(report.role, "loopback");
        assert_eq!(report.latency, "round_trip");
        assert!(report.records >= 200, "{report:?}");
        assert_eq!(report.bytes, report.records * 1024);
        assert!(report.latency_us.p50 >= 1, "{report:?}");
        assert!(report.pacer_late_us.is_none());
    }

    /// With a rate the client paces itself and reports its own wake-up lateness.
    #[test]
    fn loopback_at_a_rate_reports_the_pacers_lateness() {
        let config = BenchConfig {
            mode: Mode::Loopback,
            batch_records: 1,
            record_bytes: 100,
            rate: Some(2000.0),
            stop: StopAfter::Records(20),
            warmup: Duration::ZERO,
            ..BenchConfig::default()
        };
        let report = run(&config).unwrap();
        assert!(report.records >= 20, "{report:?}");
        assert!(report.pacer_late_us.is_some(), "{report:?}");
    }
}
