//! `fencelog bench`: throughput and latency of produce, consume, both, and lease failover,
//! against `--addr` or an in-process server. The work is in [`crate::bench`]; this file parses
//! the flags, runs it and prints the report.

use std::time::Duration;

use clap::Args;

use super::common::{self, one_line};
use super::CliError;
use crate::bench::config::{
    self, BenchConfig, KafkaProducerKind, Mode, Protocol, StopAfter, DEFAULT_BATCH_RECORDS,
    DEFAULT_FETCH_BYTES, DEFAULT_IN_FLIGHT, DEFAULT_RECORD_BYTES,
};
use crate::bench::stats::{self, RoleReport};
use crate::protocol::FlushPolicy;

/// Arguments of `fencelog bench`.
#[derive(Debug, Args)]
#[command(after_long_help = "\
Creates its own topic (bench-<mode>-<random>) and measures:
  produce   producers only; latency = produce request to acknowledgement
  consume   preloads records, then consumers only; latency = fetch round trip
  both      producers and consumers together; consumer latency = end to end, from the intended
            send time stamped in each value to receipt
  failover  every --failover-interval each partition's lease is released and taken by a new
            producer while the old one keeps writing with its stale epoch; the log is read back
            and stale_landed must be 0

Producers and partitions: a partition has one lease holder at a time, so the topic gets
max(--partitions, --producers) partitions and producer i writes the partitions p with
p % producers == i, in turn. Consumer i reads the partitions p with p % consumers == i (with more
consumers than partitions, partition i % partitions, each consumer counting what it reads).

With --rate, batches are sent on a fixed schedule and latency is measured from each batch's
intended send time, so a stall is not hidden by sending less (no coordinated omission).

Output: a table (records/s, MB/s = 10^6 bytes of values per second, latency percentiles in
microseconds), or with --json one object per role per line on stdout:
  {\"role\":\"produce\",\"records\":..,\"bytes\":..,\"seconds\":..,\"records_per_sec\":..,
   \"bytes_per_sec\":..,\"latency_us\":{\"p50\":..,\"p90\":..,\"p99\":..,\"p999\":..,\"max\":..},...}
Every line also names its mode and protocol (native or kafka).
failover adds stale_rejected, stale_landed and handover_ms {count,p50,mean,max}. A consume line
adds skipped_records: records retention deleted before a consumer read them (it fell that far
behind and went on from the oldest record kept; lag, not a failure).

--protocol kafka: the same load through the server's Kafka listener (an in-process server gets
one; with --addr give --kafka-addr): Kafka record batches v2 in ProduceRequests (acks=1) with the
same window, producers without a lease; consumers send FetchRequests v12. The topic is still
created over the native protocol.

Exit status: 0 on success; 1 on any error, and in failover mode when a stale write landed.
See docs/benchmarks.md.

Examples:
  fencelog bench                                  # 10 s produce benchmark, in-process server
  fencelog bench --mode both --producers 4 --consumers 4 --duration 30s
  fencelog bench --mode failover --json
  fencelog bench --mode both --report run.html     # also the run as pictures (HTML, inline SVG)
  fencelog bench --addr 127.0.0.1:7171 --mode consume")]
pub struct BenchArgs {
    /// What to measure.
    #[arg(long, value_enum, default_value_t = Mode::Produce)]
    pub mode: Mode,
    /// The listener to measure: native (fencelog's protocol, leased producers) or kafka (Kafka
    /// Produce acks=1 and Fetch v12 on the Kafka listener, producers without a lease; not with
    /// --mode failover).
    #[arg(long, value_enum, default_value_t = Protocol::Native)]
    pub protocol: Protocol,
    /// Producers, each with its own connection.
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    /// Consumers, each with its own connection.
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Partitions of the bench topic (raised to --producers if lower).
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    /// Bytes of each record's value.
    #[arg(long = "record-size", default_value_t = DEFAULT_RECORD_BYTES)]
    pub record_size: usize,
    /// What the record values hold: `filler` (one value repeated, the default) or `json`
    /// (JSON-like events, every record of a batch different, which compress about as
    /// application logs do; the run reports their zstd ratio as `payload_zstd_ratio`).
    #[arg(long, value_enum, default_value_t = crate::bench::PayloadKind::Filler)]
    pub payload: crate::bench::PayloadKind,
    /// How the producers compress their batches: none (the default), gzip, snappy, lz4 or
    /// zstd. Natively a compressed batch is a Kafka record batch behind the native header
    /// (magic 2); with `--protocol kafka` a compressed Kafka batch; both are stored as sent.
    #[arg(long, default_value = "none")]
    pub compression: crate::compression::Codec,
    /// Records per produce request (batch).
    #[arg(long, default_value_t = DEFAULT_BATCH_RECORDS)]
    pub batch: u32,
    /// The topic's flush policy: never, always, interval or interval:<N>ms.
    #[arg(long, default_value = "never")]
    pub flush: FlushPolicy,
    /// How long to measure, after the warm-up (e.g. 10s, 500ms).
    #[arg(long, value_parser = common::parse_duration, conflicts_with = "records")]
    pub duration: Option<Duration>,
    /// Measure this many records per role instead of a duration.
    #[arg(long)]
    pub records: Option<u64>,
    /// Time before the measurement, excluded from the figures.
    #[arg(long, default_value = "1s", value_parser = common::parse_duration)]
    pub warmup: Duration,
    /// Fixed total send rate in records per second (open loop).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Produce requests in flight per producer.
    #[arg(long = "in-flight", default_value_t = DEFAULT_IN_FLIGHT)]
    pub in_flight: usize,
    /// Soft limit on the bytes of one fetch.
    #[arg(long = "fetch-bytes", default_value_t = DEFAULT_FETCH_BYTES)]
    pub fetch_bytes: u32,
    /// Retention of the bench topic per partition in bytes (0: keep everything); old segments
    /// are deleted as new ones fill. Default: 1 GiB over all partitions (each its share, at
    /// least a segment). Not applied in consume mode.
    #[arg(long = "retention-bytes")]
    pub retention_bytes: Option<u64>,
    /// Segment size of the bench topic, in bytes. Default: the server's, 64 MiB, or smaller
    /// with many partitions (a quarter of a partition's share of the retention, at least two
    /// batches), so that retention bounds the page cache the run fills.
    #[arg(long = "segment-bytes")]
    pub segment_bytes: Option<u64>,
    /// Time between lease handovers in failover mode.
    #[arg(long = "failover-interval", default_value = "500ms", value_parser = common::parse_duration)]
    pub failover_interval: Duration,
    /// Server address, host:port, or a cluster's brokers A,B,C (default: start one in-process
    /// on a temporary directory).
    #[arg(long)]
    pub addr: Option<String>,
    /// The Kafka listener of the server at --addr, host:port (needed by --protocol kafka with
    /// --addr; ignored with --protocol native).
    #[arg(long = "kafka-addr")]
    pub kafka_addr: Option<String>,
    /// The in-process server's smallest native Produce request whose batch is spliced into the
    /// log instead of copied through memory, in bytes; 0 (the server's default): never, the
    /// copy path; 262144 to measure the one-copy path.
    /// Ignored with --addr (see `serve --splice-min-bytes`).
    #[arg(long = "server-splice-min-bytes", default_value_t = crate::server::DEFAULT_SPLICE_MIN_FRAME_BYTES)]
    pub server_splice_min_bytes: usize,
    /// Replicas per partition of the bench topic (more than 1 needs a cluster: give its
    /// brokers as --addr A,B,C). Default: the server's (1 standalone; in a cluster
    /// min(3, live brokers)).
    #[arg(long = "replication-factor")]
    pub replication_factor: Option<u16>,
    /// When a produce counts as done: `all` (every in-sync replica has it) or `leader`.
    /// Default: `all` on a replicated partition, else `leader`.
    #[arg(long)]
    pub acks: Option<crate::protocol::Acks>,
    /// The pid of the server at --addr, when it runs on this machine: its CPU seconds per GB
    /// of values are then reported (`server_cpu_seconds_per_gb`; always for the in-process
    /// server).
    #[arg(long = "server-pid", value_name = "PID")]
    pub server_pid: Option<u32>,
    /// Leave the bench topic and its data on the server after the run (by default the bench
    /// deletes the topic it created, whether the run succeeded or not).
    #[arg(long = "keep-topic")]
    pub keep_topic: bool,
    /// Print one JSON object per role per line instead of a table (no progress bar).
    #[arg(long)]
    pub json: bool,
    /// Also write the run as pictures to this HTML file: throughput, latency percentiles and
    /// CPU over time, the latency histogram, and the parameters (self-contained: inline SVG, no
    /// script).
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<std::path::PathBuf>,
    /// With --protocol kafka: idempotent producers (a producer id from InitProducerId,
    /// sequence numbers on every batch, acks=all).
    #[arg(long, conflicts_with = "transactional")]
    pub idempotent: bool,
    /// With --protocol kafka: transactional producers (idempotent, with a transactional id;
    /// each transaction adds the producer's partitions, sends, waits for every batch and
    /// commits with EndTxn every --transaction-interval). The line gains commit_ms.
    #[arg(long)]
    pub transactional: bool,
    /// How long each transaction of a --transactional producer stays open before its commit.
    #[arg(long = "transaction-interval", default_value = "100ms", value_parser = common::parse_duration)]
    pub transaction_interval: Duration,
    /// With --protocol kafka: the consumers' isolation level (read-committed stops at the last
    /// stable offset and drops aborted transactions' records, as a Kafka consumer with
    /// isolation.level=read_committed).
    #[arg(long, value_enum, default_value = "read-uncommitted")]
    pub isolation: BenchIsolation,
    /// TLS to the server at --addr (native protocol).
    #[command(flatten)]
    pub tls: super::tls::ClientTlsArgs,
}

/// A Kafka consumer's isolation level (`--isolation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchIsolation {
    /// Every record up to the high watermark.
    ReadUncommitted,
    /// Committed records only, up to the last stable offset.
    ReadCommitted,
}

impl BenchArgs {
    fn config(&self) -> BenchConfig {
        let stop = match (self.records, self.duration) {
            (Some(records), _) => StopAfter::Records(records),
            (None, duration) => StopAfter::Duration(duration.unwrap_or(config::DEFAULT_DURATION)),
        };
        let mut config = BenchConfig {
            mode: self.mode,
            protocol: self.protocol,
            producers: self.producers,
            consumers: self.consumers,
            partitions: self.partitions,
            record_bytes: self.record_size,
            payload: self.payload,
            compression: self.compression,
            batch_records: self.batch,
            flush: self.flush,
            stop,
            warmup: self.warmup,
            rate: self.rate,
            in_flight: self.in_flight,
            fetch_bytes: self.fetch_bytes,
            failover_interval: self.failover_interval,
            retention_bytes: None,
            segment_bytes: self.segment_bytes,
            addr: self.addr.clone(),
            kafka_addr: self.kafka_addr.clone(),
            replication_factor: self.replication_factor,
            acks: self.acks,
            server_pid: self.server_pid,
            keep_topic: self.keep_topic,
            timeline: self.report.is_some(),
            kafka_producer: match (self.idempotent, self.transactional) {
                (_, true) => KafkaProducerKind::Transactional,
                (true, false) => KafkaProducerKind::Idempotent,
                (false, false) => KafkaProducerKind::Plain,
            },
            transaction_interval: self.transaction_interval,
            read_committed: self.isolation == BenchIsolation::ReadCommitted,
            tls: None,
            server_splice_min_bytes: self.server_splice_min_bytes,
        };
        // The default retention depends on the partitions and batch size just set.
        config.retention_bytes = match self.retention_bytes {
            Some(0) => None,
            Some(bytes) => Some(bytes),
            None => Some(config.default_retention_bytes()),
        };
        config
    }
}

/// Runs `fencelog bench`.
pub fn run(args: BenchArgs) -> Result<(), CliError> {
    super::init_tracing("off");
    let mut config = args.config();
    config.tls = args.tls.client_tls()?;
    config
        .validate()
        .map_err(|error| CliError::new(one_line(&error.to_string())))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name("fencelog-bench")
        .enable_all()
        .build()
        .map_err(|error| CliError::new(format!("start runtime: {error}")))?;
    let result = runtime.block_on(crate::bench::run(config.clone(), !args.json));
    // Leave blocking work of the dropped in-process server (a final sync) to process exit.
    runtime.shutdown_background();
    let reports = result.map_err(|error| CliError::new(one_line(&error.to_string())))?;
    print(&config, &reports, args.json)?;
    if let Some(path) = &args.report {
        std::fs::write(path, crate::bench::report::html(&config, &reports)).map_err(|error| {
            CliError::new(format!("write the report to {}: {error}", path.display()))
        })?;
        if !args.json {
            println!("report: {}", path.display());
        }
    }
    let landed: u64 = reports
        .iter()
        .filter_map(|report| report.failover.map(|failover| failover.stale_landed))
        .sum();
    if landed > 0 {
        return Err(CliError::new(format!(
            "{landed} stale record(s) landed in the log: the fence let a superseded writer in"
        )));
    }
    Ok(())
}

fn print(config: &BenchConfig, reports: &[RoleReport], json: bool) -> Result<(), CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let written = if json {
        reports.iter().try_for_each(|report| {
            let line = serde_json::to_string(report).map_err(std::io::Error::other)?;
            writeln!(out, "{line}")
        })
    } else {
        write!(out, "{}", stats::table(config, reports))
    };
    written
        .and_then(|()| out.flush())
        .or_else(|error| match error.kind() {
            std::io::ErrorKind::BrokenPipe => Ok(()),
            _ => Err(CliError::new(format!("write to stdout: {error}"))),
        })
}
