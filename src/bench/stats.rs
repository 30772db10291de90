//! Measuring: the run's clock (warm-up, measurement window, deadline), per-role recorders with
//! an HDR histogram of latencies in microseconds, and the report they become (a JSON line or a
//! table row).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use super::config::{BenchConfig, StopAfter};
use super::timeline::Timeline;

/// Highest latency the histograms hold (larger values are clamped to it): one hour.
const HIGHEST_LATENCY_US: u64 = 3_600_000_000;

/// The time line of a measurement: everything before `measure_from` is warm-up, and in
/// `--duration` runs nothing is sent from `deadline` on.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
    measure_from: Instant,
    deadline: Option<Instant>,
    /// Set for a run whose figures are also kept over time (`--report`): the length of an
    /// interval of the recorders' time lines.
    timeline_interval: Option<Duration>,
}

impl Clock {
    /// A clock starting now.
    pub fn start(warmup: Duration, stop: StopAfter) -> Self {
        let origin = Instant::now();
        let measure_from = origin + warmup;
        let deadline = match stop {
            StopAfter::Duration(duration) => Some(measure_from + duration),
            StopAfter::Records(_) => None,
        };
        Self {
            origin,
            measure_from,
            deadline,
            timeline_interval: None,
        }
    }

    /// The clock of `config`'s run: its recorders keep time lines when `config.timeline` is
    /// set, in about sixty intervals of a timed run (a tenth of a second for a run with a
    /// record budget, folded as it grows: see [`Timeline`]).
    pub fn for_run(config: &BenchConfig) -> Self {
        let mut clock = Self::start(config.warmup, config.stop);
        if config.timeline {
            clock.timeline_interval = Some(match config.stop {
                StopAfter::Duration(duration) => {
                    (duration / 60).clamp(Duration::from_millis(20), Duration::from_secs(10))
                }
                StopAfter::Records(_) => Duration::from_millis(100),
            });
        }
        clock
    }

    /// The length of an interval of the run's time lines, if it keeps them.
    pub fn timeline_interval(&self) -> Option<Duration> {
        self.timeline_interval
    }

    /// A recorder for this clock's run: with a time line when the run keeps one.
    pub fn recorder(&self) -> Recorder {
        Recorder {
            timeline: self
                .timeline_interval
                .map(|interval| Timeline::new(self.measure_from, interval)),
            ..Recorder::default()
        }
    }

    /// When the run started.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// When the warm-up ends.
    pub fn measure_from(&self) -> Instant {
        self.measure_from
    }

    /// When sending stops (`--duration` runs).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether `at` falls after the warm-up.
    pub fn measuring(&self, at: Instant) -> bool {
        at >= self.measure_from
    }

    /// Whether `at` is at or past the deadline.
    pub fn past_deadline(&self, at: Instant) -> bool {
        self.deadline.is_some_and(|deadline| at >= deadline)
    }

    /// `at` as nanoseconds since the origin (0 before it).
    pub fn ns(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The instant `ns` nanoseconds after the origin.
    pub fn instant(&self, ns: u64) -> Instant {
        self.origin + Duration::from_nanos(ns)
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest value seen.
    pub max: u64,
}

impl Percentiles {
    /// The percentiles of a histogram (all 0 when it is empty).
    pub fn of(histogram: &Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return Self::default();
        }
        let at = |q: f64| histogram.value_at_quantile(q);
        Self {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            p999: at(0.999),
            max: histogram.max(),
        }
    }
}

/// What one role (all producers, or all consumers) measured.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// Records counted in the measurement window.
    pub records: u64,
    /// Their value bytes.
    pub bytes: u64,
    /// Latencies in microseconds.
    pub latency_us: Histogram<u64>,
    /// How late the open-loop pacer woke after each due time (`--rate` only; else empty).
    pub pacer_late_us: Histogram<u64>,
    /// When the last counted event happened.
    pub last: Option<Instant>,
    /// Records a consumer never read because retention deleted them first: it fell that far
    /// behind the producers and skipped to the oldest record kept (lag, not a failure).
    pub skipped: u64,
    /// The same figures interval by interval, when the run keeps them (`--report`).
    pub timeline: Option<Timeline>,
    /// How long each transaction's commit (EndTxn) took, in microseconds (`--transactional`).
    pub commit_us: Histogram<u64>,
}

/// `duration` in whole microseconds, clamped to what the latency histograms hold.
fn histogram_us(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros())
        .unwrap_or(u64::MAX)
        .clamp(1, HIGHEST_LATENCY_US)
}

/// An empty histogram of microseconds, as every latency of the bench is kept.
pub fn new_latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_LATENCY_US, 3).expect("valid histogram bounds")
}

impl Default for Recorder {
    fn default() -> Self {
        Self {
            records: 0,
            bytes: 0,
            latency_us: new_latency_histogram(),
            pacer_late_us: new_latency_histogram(),
            last: None,
            skipped: 0,
            timeline: None,
            commit_us: new_latency_histogram(),
        }
    }
}

impl Recorder {
    /// Counts `records` records of `bytes` value bytes completed at `at`.
    pub fn count(&mut self, records: u64, bytes: u64, at: Instant) {
        self.records += records;
        self.bytes += bytes;
        self.last = Some(self.last.map_or(at, |last| last.max(at)));
        if let Some(timeline) = &mut self.timeline {
            timeline.count(records, bytes, at);
        }
    }

    /// Records one latency, `weight` times (once per record it stands for).
    pub fn latency(&mut self, latency: Duration, weight: u64) {
        let us = histogram_us(latency);
        self.latency_us
            .record_n(us, weight)
            .expect("value clamped to the histogram's range");
        if let Some(timeline) = &mut self.timeline {
            timeline.latency(us, weight);
        }
    }

    /// Records one transaction's commit time.
    pub fn commit(&mut self, took: Duration) {
        self.commit_us
            .record(histogram_us(took))
            .expect("value clamped to the histogram's range");
    }

    /// Records how late a pacer woke after one due time (see [`Recorder::pacer_late_us`]).
    pub fn pacer_late(&mut self, late: Duration) {
        self.pacer_late_us
            .record(histogram_us(late))
            .expect("value clamped to the histogram's range");
    }

    /// Adds another recorder's counts and latencies.
    pub fn merge(&mut self, other: &Recorder) {
        self.records += other.records;
        self.bytes += other.bytes;
        self.skipped += other.skipped;
        self.latency_us
            .add(&other.latency_us)
            .expect("histograms with the same bounds");
        self.pacer_late_us
            .add(&other.pacer_late_us)
            .expect("histograms with the same bounds");
        self.commit_us
            .add(&other.commit_us)
            .expect("histograms with the same bounds");
        self.last = match (self.last, other.last) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        match (&mut self.timeline, &other.timeline) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (None, Some(theirs)) => self.timeline = Some(theirs.clone()),
            _ => {}
        }
    }

    /// The percentiles (all 0 when nothing was recorded).
    pub fn percentiles(&self) -> Percentiles {
        Percentiles::of(&self.latency_us)
    }
}

/// Handover times of a `failover` run, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct HandoverMs {
    /// Handovers measured.
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// Mean.
    pub mean: f64,
    /// Longest.
    pub max: f64,
}

impl HandoverMs {
    /// Summarises handover times.
    pub fn from_times(times: &[Duration]) -> Self {
        if times.is_empty() {
            return Self::default();
        }
        let mut ms: Vec<f64> = times.iter().map(|t| t.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        Self {
            count: ms.len() as u64,
            p50: round3(ms[(ms.len() - 1) / 2]),
            mean: round3(ms.iter().sum::<f64>() / ms.len() as f64),
            max: round3(ms[ms.len() - 1]),
        }
    }
}

/// What `failover` adds to the produce report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct FailoverReport {
    /// Stale produce requests (batches) the server rejected as fenced.
    pub stale_rejected: u64,
    /// Records in the log that must not be there: written by a producer after its epoch was
    /// superseded, or breaking epoch order. Anything but 0 is a fencing bug.
    pub stale_landed: u64,
    /// From the old lease's handover (release acknowledged) to the new holder's first
    /// acknowledged write.
    pub handover_ms: HandoverMs,
    /// Leases handed over.
    pub handovers: u64,
    /// Records read back from the log and checked.
    pub records_verified: u64,
}

/// One line of the report: one role's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RoleReport {
    /// `produce` or `consume`.
    pub role: &'static str,
    /// The run's mode.
    pub mode: &'static str,
    /// The listener measured: `native` or `kafka`.
    pub protocol: &'static str,
    /// Records counted in the measurement window.
    pub records: u64,
    /// Their value bytes (`records` x record size; batch and frame overhead not included).
    pub bytes: u64,
    /// Length of the measurement window.
    pub seconds: f64,
    /// `records / seconds`.
    pub records_per_sec: f64,
    /// `bytes / seconds`.
    pub bytes_per_sec: f64,
    /// What the latency measures: `ack` (produce request to acknowledgement),
    /// `fetch_round_trip` (fetch request to response) or `end_to_end` (intended send to
    /// receipt by a consumer).
    pub latency: &'static str,
    /// Latency percentiles in microseconds.
    pub latency_us: Percentiles,
    /// Producers or consumers of this role.
    pub clients: usize,
    /// Partitions of the topic.
    pub partitions: u32,
    /// Bytes of each record's value.
    pub record_size: usize,
    /// What the values hold (`--payload`): `filler` or `json`.
    pub payload: &'static str,
    /// How many times smaller zstd (level 3) makes the values (`json` only): what a
    /// compressing producer would send of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_zstd_ratio: Option<f64>,
    /// How the producers compressed their batches (`none`, `gzip`, `snappy`, `lz4`, `zstd`).
    pub compression: &'static str,
    /// Bytes of the batches the producers sent per byte of their values (compression below
    /// 1, record framing above it), over the whole run (producers' lines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wire_bytes_per_value_byte: Option<f64>,
    /// Bytes the topic's log holds on disk per byte of the values in it, at the end of the run
    /// (producers' lines, with the bench's own server only: it reads the partitions' sizes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_bytes_per_value_byte: Option<f64>,
    /// Records per produce request.
    pub batch: u32,
    /// The topic's flush policy.
    pub flush: String,
    /// The fixed send rate in records/s, if any.
    pub rate: Option<f64>,
    /// Records the consumers skipped because retention deleted them before they read them
    /// (consumers only; 0 when they kept up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped_records: Option<u64>,
    /// The generator's own wake-up error with `--rate`: how late its pacer thread woke after
    /// each due time, in microseconds (the ack latencies measured from the due times include
    /// it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pacer_late_us: Option<Percentiles>,
    /// The Kafka producer kind (`--protocol kafka` producers only): `plain`, `idempotent` or
    /// `transactional`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka_producer: Option<&'static str>,
    /// The Kafka consumers' isolation level (`--protocol kafka` consumers only):
    /// `read_uncommitted` or `read_committed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation: Option<&'static str>,
    /// Transactions committed in the window (`--transactional` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transactions_committed: Option<u64>,
    /// How long their commits (EndTxn, every batch already acknowledged) took, in
    /// microseconds (`--transactional` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit_latency_us: Option<Percentiles>,
    /// Failover figures (`failover` mode only).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverReport>,
    /// CPU seconds of the server and the generator over the measurement window, and per GB of
    /// this role's values (in `both` mode each role's line divides the same CPU by its own
    /// bytes: the server's work for producers and consumers is not told apart).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<super::cpu::CpuFigures>,
    /// What `--report` draws: the role's time line, its whole latency histogram and the CPU
    /// over the window (not in the JSON line).
    #[serde(skip)]
    pub plots: Option<Box<RolePlots>>,
}

/// A role's figures over time, for the report's pictures.
#[derive(Debug, Clone)]
pub struct RolePlots {
    /// Records, bytes and latencies interval by interval.
    pub timeline: Timeline,
    /// Every latency of the window, in microseconds.
    pub latency_us: Histogram<u64>,
    /// CPU of the server and of the bench over the window, sampled once per interval.
    pub cpu: Vec<super::cpu::CpuPoint>,
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

impl RoleReport {
    /// Builds a role's line from its recorder, measured from `measure_from` to `until`.
    pub fn new(
        role: &'static str,
        latency: &'static str,
        clients: usize,
        config: &BenchConfig,
        recorder: &Recorder,
        seconds: f64,
    ) -> Self {
        let seconds = seconds.max(1e-9);
        Self {
            role,
            mode: config.mode.name(),
            protocol: config.protocol.name(),
            records: recorder.records,
            bytes: recorder.bytes,
            seconds: round3(seconds),
            records_per_sec: round3(recorder.records as f64 / seconds),
            bytes_per_sec: round3(recorder.bytes as f64 / seconds),
            latency,
            latency_us: recorder.percentiles(),
            clients,
            partitions: config.topic_partitions(),
            record_size: config.record_bytes,
            payload: config.payload.name(),
            compression: config.compression.name(),
            wire_bytes_per_value_byte: None,
            disk_bytes_per_value_byte: None,
            payload_zstd_ratio: super::payload::zstd_ratio(config.payload, config.record_bytes)
                .map(round3),
            batch: config.batch_records,
            flush: config.flush.to_string(),
            rate: config.rate,
            skipped_records: (role == "consume").then_some(recorder.skipped),
            pacer_late_us: (!recorder.pacer_late_us.is_empty())
                .then(|| Percentiles::of(&recorder.pacer_late_us)),
            kafka_producer: (role == "produce"
                && config.protocol == super::config::Protocol::Kafka)
                .then(|| config.kafka_producer.name()),
            isolation: (role == "consume" && config.protocol == super::config::Protocol::Kafka)
                .then_some(if config.read_committed {
                    "read_committed"
                } else {
                    "read_uncommitted"
                }),
            transactions_committed: (!recorder.commit_us.is_empty())
                .then(|| recorder.commit_us.len()),
            commit_latency_us: (!recorder.commit_us.is_empty())
                .then(|| Percentiles::of(&recorder.commit_us)),
            failover: None,
            cpu: None,
            plots: recorder.timeline.as_ref().map(|timeline| {
                Box::new(RolePlots {
                    timeline: timeline.clone(),
                    latency_us: recorder.latency_us.clone(),
                    cpu: Vec::new(),
                })
            }),
        }
    }
}

/// The report as a table, for people.
pub fn table(config: &BenchConfig, reports: &[RoleReport]) -> String {
    let mut out = String::new();
    let stop = match config.stop {
        StopAfter::Duration(duration) => humantime::format_duration(duration).to_string(),
        StopAfter::Records(records) => format!("{records} records"),
    };
    let rate = config
        .rate
        .map_or_else(|| "max".to_string(), |rate| format!("{rate} rec/s"));
    let mut payload = match super::payload::zstd_ratio(config.payload, config.record_bytes) {
        Some(ratio) => format!("{} (zstd {ratio:.2}x)", config.payload.name()),
        None => config.payload.name().to_string(),
    };
    if config.compression != crate::compression::Codec::None {
        payload = format!("{payload} {}-compressed", config.compression);
    }
    let _ = writeln!(
        out,
        "fencelog bench: mode {}, protocol {}, {} producer(s), {} consumer(s), {} partition(s), {} B {payload} records, \
         batch {}, flush {}, rate {rate}, {stop} after {} warm-up",
        config.mode.name(),
        config.protocol.name(),
        config.producers,
        config.consumers,
        config.topic_partitions(),
        config.record_bytes,
        config.batch_records,
        config.flush,
        humantime::format_duration(config.warmup),
    );
    let _ = writeln!(
        out,
        "{:<8} {:>12} {:>8} {:>13} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  latency (us)",
        "role", "records", "seconds", "records/s", "MB/s", "p50", "p90", "p99", "p99.9", "max"
    );
    for report in reports {
        let p = report.latency_us;
        let _ = writeln!(
            out,
            "{:<8} {:>12} {:>8.2} {:>13.0} {:>9.1} {:>9} {:>9} {:>9} {:>9} {:>9}  {}",
            report.role,
            report.records,
            report.seconds,
            report.records_per_sec,
            report.bytes_per_sec / 1e6,
            p.p50,
            p.p90,
            p.p99,
            p.p999,
            p.max,
            report.latency.replace('_', " "),
        );
    }
    for report in reports {
        if let Some(skipped) = report.skipped_records.filter(|skipped| *skipped > 0) {
            let _ = writeln!(
                out,
                "consumers fell behind the topic's retention: {skipped} records were deleted \
                 before they were read (skipped, counted as lag); --retention-bytes 0 keeps \
                 everything"
            );
        }
        if let Some(late) = &report.pacer_late_us {
            let _ = writeln!(
                out,
                "the generator's wake-ups (pacer thread, after each due time): p50 {} us, p99 {} \
                 us, max {} us",
                late.p50, late.p99, late.max
            );
        }
        if let Some(cpu) = &report.cpu {
            let server = match (cpu.server_cpu_seconds, cpu.server_cpu_seconds_per_gb) {
                (Some(seconds), Some(per_gb)) => {
                    format!("server {per_gb:.3} s/GB ({seconds:.2} s)")
                }
                (Some(seconds), None) => format!("server {seconds:.2} s"),
                _ => "server not seen (--server-pid)".to_string(),
            };
            let client = cpu
                .client_cpu_seconds_per_gb
                .map_or_else(String::new, |per_gb| format!(" {per_gb:.3} s/GB"));
            let _ = writeln!(
                out,
                "{} cpu: {server}, bench{client} ({:.2} s)",
                report.role, cpu.client_cpu_seconds
            );
        }
        if report.wire_bytes_per_value_byte.is_some() || report.disk_bytes_per_value_byte.is_some()
        {
            let figure = |value: Option<f64>| value.map_or("-".to_string(), |v| format!("{v:.3}"));
            let _ = writeln!(
                out,
                "bytes per value byte: on the wire {}, on disk {}",
                figure(report.wire_bytes_per_value_byte),
                figure(report.disk_bytes_per_value_byte)
            );
        }
        if let (Some(committed), Some(commit)) =
            (report.transactions_committed, &report.commit_latency_us)
        {
            let _ = writeln!(
                out,
                "transactions: {committed} committed; commit (EndTxn) us p50 {}, p99 {}, max {}",
                commit.p50, commit.p99, commit.max
            );
        }
        if let Some(failover) = &report.failover {
            let h = failover.handover_ms;
            let _ = writeln!(
                out,
                "failover: {} handovers; stale writes rejected {}, landed {} ({} records read back \
                 and checked); handover ms p50 {:.3}, mean {:.3}, max {:.3}",
                failover.handovers,
                failover.stale_rejected,
                failover.stale_landed,
                failover.records_verified,
                h.p50,
                h.mean,
                h.max,
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_latencies_shift_percentiles() {
        let mut recorder = Recorder::default();
        recorder.latency(Duration::from_micros(10), 98);
        recorder.latency(Duration::from_micros(1000), 2);
        let p = recorder.percentiles();
        assert_eq!(p.p50, 10);
        assert!((999..=1001).contains(&p.p99), "{p:?}");
        assert!((999..=1001).contains(&p.max), "{p:?}");
    }

    #[test]
    fn handover_summary_orders_times() {
        let times = [30, 10, 20].map(Duration::from_millis);
        let summary = HandoverMs::from_times(&times);
        assert_eq!(summary.count, 3);
        assert_eq!(summary.p50, 20.0);
        assert_eq!(summary.max, 30.0);
        assert_eq!(summary.mean, 20.0);
    }
}
