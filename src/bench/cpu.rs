//! CPU seconds per gigabyte: what the server (and the load generator) spent on each gigabyte of
//! values measured, read from the kernel's per-process and per-thread accounting in `/proc`.
//!
//! Why this figure: throughput on a shared 2-core machine moves with whatever else runs, but
//! the CPU a process spends per byte barely does, so it compares runs taken on different days
//! and machines. It is taken over the same window as the throughput (the warm-up excluded).
//!
//! Whose CPU is "the server's":
//! - an external server whose pid is known (`--server-pid`): that process, all its threads;
//! - the in-process server: it runs on its own runtime whose threads are named
//!   [`SERVER_THREAD_NAME`], next to the storage's own threads (`fencelog-seal`,
//!   `fencelog-verify`); the generator's threads are everything else. Threads are summed as
//!   they are at each sample: the server runtime keeps its blocking threads alive for the run
//!   (see [`SERVER_THREAD_KEEP_ALIVE`]) so none of their time goes missing with an exited thread.
//!
//! Linux only (`/proc`); elsewhere the figures are simply absent.

use std::path::Path;
use std::time::Duration;

/// The name of every thread of the in-process server's runtime (workers and blocking pool).
pub const SERVER_THREAD_NAME: &str = "fencelog-server";
/// How long an idle blocking thread of the in-process server's runtime lives: longer than any
/// run, so that the CPU of a thread that ran appends is still counted when the run ends.
pub const SERVER_THREAD_KEEP_ALIVE: Duration = Duration::from_secs(24 * 3600);
/// Prefixes of the names of the server's threads (its runtime, and the storage's own threads).
const SERVER_THREAD_PREFIXES: [&str; 3] = [SERVER_THREAD_NAME, "fencelog-seal", "fencelog-verify"];

/// Where the server runs, for its CPU accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerProcess {
    /// In this process, on threads named as [`SERVER_THREAD_PREFIXES`] says.
    InProcess,
    /// Another process on this machine.
    Pid(u32),
    /// Somewhere this process cannot see: only the generator's CPU is known.
    Unknown,
}

/// CPU seconds consumed so far, by the server and by the load generator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuSample {
    /// The server's CPU seconds (user + system), when it can be seen.
    pub server: Option<f64>,
    /// The generator's (this process minus the in-process server).
    pub client: f64,
}

/// CPU seconds spent over a window, and per gigabyte (10^9 bytes) of values moved in it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CpuFigures {
    /// The server's CPU seconds in the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_seconds: Option<f64>,
    /// The server's CPU seconds per GB of values.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_seconds_per_gb: Option<f64>,
    /// The load generator's CPU seconds in the window.
    pub client_cpu_seconds: f64,
    /// The generator's CPU seconds per GB of values.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cpu_seconds_per_gb: Option<f64>,
}

impl CpuSample {
    /// Samples now; `None` where `/proc` cannot be read (not Linux, or the server exited).
    pub fn take(server: ServerProcess) -> Option<Self> {
        let own = process_seconds(Path::new("/proc/self/stat"))?;
        match server {
            ServerProcess::InProcess => {
                let in_server = server_threads_seconds()?;
                Some(Self {
                    server: Some(in_server),
                    client: (own - in_server).max(0.0),
                })
            }
            ServerProcess::Pid(pid) => Some(Self {
                server: process_seconds(&Path::new("/proc").join(pid.to_string()).join("stat")),
                client: own,
            }),
            ServerProcess::Unknown => Some(Self {
                server: None,
                client: own,
            }),
        }
    }

    /// What was spent from `self` to `later`, per GB of `bytes`.
    pub fn until(&self, later: &CpuSample, bytes: u64) -> CpuFigures {
        let gigabytes = bytes as f64 / 1e9;
        let per_gb = |seconds: f64| (gigabytes > 0.0).then(|| round3(seconds / gigabytes));
        let server = self
            .server
            .zip(later.server)
            .map(|(before, after)| (after - before).max(0.0));
        let client = (later.client - self.client).max(0.0);
        CpuFigures {
            server_cpu_seconds: server.map(round3),
            server_cpu_seconds_per_gb: server.and_then(per_gb),
            client_cpu_seconds: round3(client),
            client_cpu_seconds_per_gb: per_gb(client),
        }
    }
}

/// CPU use over one interval of a run, for the report's CPU plot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuPoint {
    /// The end of the interval, in seconds since the end of the warm-up.
    pub seconds: f64,
    /// The server's cores busy over the interval (CPU seconds per second), when it can be seen.
    pub server_cores: Option<f64>,
    /// The load generator's.
    pub client_cores: f64,
}

/// Samples CPU over a run's measurement window: at the end of the warm-up, and at the
/// deadline of a timed run (or at [`CpuWindow::finish`] for a run with a record budget); for a
/// run that keeps time lines (`--report`) once per interval too.
pub struct CpuWindow {
    sampler: tokio::task::JoinHandle<(Option<CpuSample>, Option<CpuSample>, Vec<CpuPoint>)>,
    stop: tokio_util::sync::CancellationToken,
    server: ServerProcess,
}

impl CpuWindow {
    /// Starts sampling for a run measured from `measure_from` to `deadline` (a timed run) or
    /// to [`CpuWindow::finish`], once per `interval` too when one is given.
    pub fn start(
        server: ServerProcess,
        measure_from: std::time::Instant,
        deadline: Option<std::time::Instant>,
        interval: Option<Duration>,
    ) -> Self {
        // The kernel counts CPU in hundredths of a second: shorter intervals only show that.
        let interval = interval.map(|interval| interval.max(MIN_CPU_INTERVAL));
        let stop = tokio_util::sync::CancellationToken::new();
        let stopped = stop.clone();
        let sampler = tokio::spawn(async move {
            tokio::time::sleep_until(measure_from.into()).await;
            let start = CpuSample::take(server);
            let mut points = Vec::new();
            if let (Some(interval), Some(first)) = (interval, start) {
                let mut previous = (std::time::Instant::now(), first);
                let mut next = measure_from + interval;
                loop {
                    let until = match deadline {
                        Some(deadline) if deadline <= next => break,
                        _ => next,
                    };
                    tokio::select! {
                        () = tokio::time::sleep_until(until.into()) => {}
                        () = stopped.cancelled() => break,
                    }
                    let now = std::time::Instant::now();
                    let Some(sample) = CpuSample::take(server) else {
                        break;
                    };
                    if points.len() < MAX_CPU_POINTS {
                        points.push(point(measure_from, previous, (now, sample)));
                    }
                    previous = (now, sample);
                    next += interval;
                }
            }
            let end = match deadline {
                Some(deadline) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline.into()) => CpuSample::take(server),
                        () = stopped.cancelled() => None,
                    }
                }
                None => None,
            };
            (start, end, points)
        });
        Self {
            sampler,
            stop,
            server,
        }
    }

    /// The figures for the `bytes` of values the run measured; `None` where `/proc` could not
    /// be read.
    pub async fn finish(self, bytes: u64) -> Option<CpuFigures> {
        self.finish_with_points(bytes).await.0
    }

    /// [`CpuWindow::finish`], and the CPU interval by interval (empty unless the run keeps
    /// time lines).
    pub async fn finish_with_points(self, bytes: u64) -> (Option<CpuFigures>, Vec<CpuPoint>) {
        // A timed run's sampler has ended at the deadline by itself (the roles stop there); a
        // run with a record budget ends when its records are in, which is now.
        self.stop.cancel();
        let Ok((start, end, points)) = self.sampler.await else {
            return (None, Vec::new());
        };
        let end = end.or_else(|| CpuSample::take(self.server));
        let figures = start.zip(end).map(|(start, end)| start.until(&end, bytes));
        (figures, points)
    }
}

/// The shortest interval between CPU samples (a tenth of a second is ten of the kernel's ticks).
const MIN_CPU_INTERVAL: Duration = Duration::from_millis(200);

/// CPU points kept per run (a time line folds its intervals; the CPU plot keeps the first
/// points of a very long run).
const MAX_CPU_POINTS: usize = 4096;

/// The cores busy between two samples.
fn point(
    origin: std::time::Instant,
    (then, before): (std::time::Instant, CpuSample),
    (now, after): (std::time::Instant, CpuSample),
) -> CpuPoint {
    let seconds = now.saturating_duration_since(then).as_secs_f64().max(1e-9);
    CpuPoint {
        seconds: round3(now.saturating_duration_since(origin).as_secs_f64()),
        server_cores: before
            .server
            .zip(after.server)
            .map(|(b, a)| round3((a - b).max(0.0) / seconds)),
        client_cores: round3((after.client - before.client).max(0.0) / seconds),
    }
}

impl CpuFigures {
    /// The same seconds divided by another role's `bytes` (`both` mode: one window, two roles).
    pub fn per_gb_of(&self, bytes: u64) -> CpuFigures {
        let gigabytes = bytes as f64 / 1e9;
        let per_gb = |seconds: f64| (gigabytes > 0.0).then(|| round3(seconds / gigabytes));
        CpuFigures {
            server_cpu_seconds_per_gb: self.server_cpu_seconds.and_then(per_gb),
            client_cpu_seconds_per_gb: per_gb(self.client_cpu_seconds),
            ..*self
        }
    }
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// Clock ticks per second of the `/proc` time fields: `USER_HZ`, which the kernel fixes at 100
/// in its user-space ABI on every architecture Linux runs this on (whatever its internal `HZ`),
/// so no `sysconf` call (and no `unsafe`) is needed.
const USER_HZ: f64 = 100.0;

fn ticks_per_second() -> f64 {
    USER_HZ
}

/// User + system seconds of a `/proc/.../stat` file (a process's include its exited threads).
fn process_seconds(stat: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(stat).ok()?;
    parse_stat_seconds(&text)
}

/// User + system seconds from the text of a `stat` file: fields 14 and 15, counted after the
/// command name, which is in parentheses and may itself hold spaces and parentheses.
fn parse_stat_seconds(text: &str) -> Option<f64> {
    let after_name = &text[text.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace();
    // After the name: state (field 3) is index 0, so utime (field 14) is index 11.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / ticks_per_second())
}

/// The seconds of this process's live threads whose names mark them as the server's.
fn server_threads_seconds() -> Option<f64> {
    let mut total = 0.0;
    for entry in std::fs::read_dir("/proc/self/task").ok()? {
        let Ok(entry) = entry else { continue };
        let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if SERVER_THREAD_PREFIXES
            .iter()
            .any(|prefix| name.trim_end().starts_with(prefix))
        {
            // A thread that exited between the listing and this read counts as nothing.
            total += process_seconds(&entry.path().join("stat")).unwrap_or(0.0);
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_name() {
        // A command name with spaces and a parenthesis must not shift the fields.
        let text = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 3 0 1 0 0";
        let seconds = parse_stat_seconds(text).expect("parsed");
        assert!((seconds - 400.0 / ticks_per_second()).abs() < 1e-9);
    }

    #[test]
    fn this_process_can_be_sampled() {
        let before = CpuSample::take(ServerProcess::Unknown).expect("linux /proc");
        let mut spin = 0u64;
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_millis(50) {
            spin = spin.wrapping_add(std::hint::black_box(1));
        }
        let after = CpuSample::take(ServerProcess::Unknown).expect("linux /proc");
        let figures = before.until(&after, 2_000_000_000);
        assert!(figures.client_cpu_seconds >= 0.0);
        assert_eq!(figures.server_cpu_seconds, None);
        assert_eq!(
            figures.client_cpu_seconds_per_gb,
            Some(round3(figures.client_cpu_seconds / 2.0))
        );
        assert!(spin > 0);
    }

    #[test]
    fn nothing_per_gb_without_bytes() {
        let sample = CpuSample {
            server: Some(1.0),
            client: 1.0,
        };
        let later = CpuSample {
            server: Some(2.0),
            client: 1.5,
        };
        let figures = sample.until(&later, 0);
        assert_eq!(figures.server_cpu_seconds, Some(1.0));
        assert_eq!(figures.server_cpu_seconds_per_gb, None);
        assert_eq!(figures.client_cpu_seconds, 0.5);
    }
}
