//! What a benchmark run does: the mode, the load shape and the stop condition, with every limit
//! named, defaulted and checked in one place ([`BenchConfig::validate`]).
//!
//! The settings depend on the values the bench writes, not the other way round: the record and
//! stamp sizes they check come from [`super::payload`], which uses nothing of the bench; the
//! modules that run the load read their limits from here.

use std::time::Duration;

use crate::batch::{HEADER_BYTES, MAX_RECORDS_PER_BATCH};
use crate::protocol::FlushPolicy;
use crate::storage::config::DEFAULT_MAX_BATCH_BYTES;

use super::error::BenchError;
use super::payload::{PayloadKind, FAILOVER_PREFIX_BYTES, RECORD_OVERHEAD_BYTES};

/// Default records per batch: 1 KiB records then make ~1 MiB produce requests, large enough
/// that per-request costs (a syscall, a task wake-up, a CRC setup) are amortised, small enough
/// to stay far below the 8 MiB batch and 16 MiB frame limits.
pub const DEFAULT_BATCH_RECORDS: u32 = 1000;
/// Default size of each record's value.
pub const DEFAULT_RECORD_BYTES: usize = 1024;
/// Default produce requests in flight per producer (its pipelining window).
pub const DEFAULT_IN_FLIGHT: usize = 8;
/// Default soft limit on the bytes of one fetch.
pub const DEFAULT_FETCH_BYTES: u32 = 4 * 1024 * 1024;
/// Default measured time.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// Default warm-up, excluded from the figures.
pub const DEFAULT_WARMUP: Duration = Duration::from_secs(1);
/// Default time between lease handovers in `failover` mode.
pub const DEFAULT_FAILOVER_INTERVAL: Duration = Duration::from_millis(500);

/// Most producers or consumers.
pub const MAX_CLIENTS: usize = 256;
/// Most partitions (the broker's per-topic limit).
pub const MAX_PARTITIONS: u32 = crate::broker::MAX_PARTITIONS_PER_TOPIC;
/// Largest record value.
pub const MAX_RECORD_BYTES: usize = 4 * 1024 * 1024;
/// Most produce requests in flight per producer (the server reads at most 64 per connection).
pub const MAX_IN_FLIGHT: usize = 64;
/// Largest batch the bench builds: the server's default batch limit.
pub const MAX_BATCH_BYTES: usize = DEFAULT_MAX_BATCH_BYTES;
/// Largest fetch asked for (the server clamps to its own limit, 8 MiB by default).
pub const MAX_FETCH_BYTES: u32 = 64 * 1024 * 1024;
/// Shortest failover interval.
pub const MIN_FAILOVER_INTERVAL: Duration = Duration::from_millis(20);
/// Longest a run may be asked to measure or warm up.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
/// Default retention of the bench topic, over all its partitions (each keeps its share, see
/// [`BenchConfig::default_retention_bytes`]). A produce run writes about a gigabyte per second:
/// unbounded, a 10 s run would leave ~10 GB on the server's disk, and under flush `never` the
/// kernel's dirty-page limits would soon throttle producers to the disk's write speed. Bounded,
/// old segments are deleted as new ones fill, the run measures the server at steady state, and
/// the memory of deleted segments is reused by the page cache for new ones. Bounded per
/// partition only (1 GiB each, as before), a run over 100 partitions never deleted a segment:
/// it wrote only fresh memory, was throttled to the disk at the end, and measured 1.14 GB/s
/// where the same run with the total bounded measured 1.54.
pub const DEFAULT_RETENTION_BYTES: u64 = 1024 * 1024 * 1024;
/// Payload preloaded for `consume` when `--records` is not given (or one batch per partition,
/// if that is more).
pub const CONSUME_PRELOAD_BYTES: u64 = 256 * 1024 * 1024;
/// Longest the `consume` preload may take when `--records` is not given.
pub const CONSUME_PRELOAD_TIME: Duration = Duration::from_secs(5);

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Producers only: acknowledged produce throughput and ack latency.
    Produce,
    /// Preload, then consumers only: fetch throughput and fetch round-trip latency.
    Consume,
    /// Producers and consumers together: end-to-end latency.
    Both,
    /// Producers whose lease is handed to a new producer every interval while the old one
    /// keeps writing with its stale epoch.
    Failover,
    /// No server: two threads of this process exchange requests of --batch x --record-size
    /// bytes and 64-byte answers over loopback TCP, one at a time or at --rate: this machine's
    /// round-trip floor, for the latency figures.
    Loopback,
}

impl Mode {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Produce => "produce",
            Mode::Consume => "consume",
            Mode::Both => "both",
            Mode::Failover => "failover",
            Mode::Loopback => "loopback",
        }
    }
}

/// Which of the server's listeners the producers and consumers speak to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// fencelog's own protocol: producers hold the leases of their partitions.
    Native,
    /// Kafka's wire protocol (Produce with acks=1 and Fetch v12 on the Kafka listener):
    /// producers write without a lease, to a fresh topic. The topic is still created, and the
    /// preload's offsets listed, over the native protocol.
    Kafka,
}

impl Protocol {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Native => "native",
            Protocol::Kafka => "kafka",
        }
    }
}

/// What kind of Kafka producer the bench's producers are (`--protocol kafka`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KafkaProducerKind {
    /// No producer id: acks = 1, as the bench's Kafka producers always were.
    #[default]
    Plain,
    /// An idempotent producer (`--idempotent`): a producer id from InitProducerId, sequence
    /// numbers on every batch, acks = all.
    Idempotent,
    /// A transactional producer (`--transactional`): idempotent, with a transactional id, its
    /// partitions added to a transaction that is committed every `--transaction-interval`.
    Transactional,
}

impl KafkaProducerKind {
    /// The name used in JSON.
    pub fn name(self) -> &'static str {
        match self {
            KafkaProducerKind::Plain => "plain",
            KafkaProducerKind::Idempotent => "idempotent",
            KafkaProducerKind::Transactional => "transactional",
        }
    }
}

/// The shortest `--transaction-interval`.
pub const MIN_TRANSACTION_INTERVAL: Duration = Duration::from_millis(1);
/// Kafka Streams' default commit interval under exactly-once, which the figure uses.
pub const DEFAULT_TRANSACTION_INTERVAL: Duration = Duration::from_millis(100);

/// When the measurement ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopAfter {
    /// After this much measured time (warm-up excluded).
    Duration(Duration),
    /// After this many measured records per role (warm-up excluded).
    Records(u64),
}

/// A benchmark run, as validated by [`BenchConfig::validate`].
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// What is measured.
    pub mode: Mode,
    /// The listener the producers and consumers speak to.
    pub protocol: Protocol,
    /// Producers (each with its own connection).
    pub producers: usize,
    /// Consumers (each with its own connection).
    pub consumers: usize,
    /// Partitions asked for; the topic gets `max(partitions, producers)` (see
    /// [`BenchConfig::topic_partitions`]).
    pub partitions: u32,
    /// Bytes of each record's value.
    pub record_bytes: usize,
    /// What the values hold.
    pub payload: PayloadKind,
    /// How the producers compress their batches (`--compression`, none by default).
    pub compression: crate::compression::Codec,
    /// Records per produce request.
    pub batch_records: u32,
    /// The topic's flush policy.
    pub flush: FlushPolicy,
    /// When the measurement ends.
    pub stop: StopAfter,
    /// Time before the measurement starts, whose results are discarded.
    pub warmup: Duration,
    /// Fixed total send rate in records per second (open loop); `None` sends as fast as the
    /// in-flight window allows (closed loop).
    pub rate: Option<f64>,
    /// Produce requests in flight per producer.
    pub in_flight: usize,
    /// Soft limit on the bytes of one fetch.
    pub fetch_bytes: u32,
    /// Time between handovers in `failover` mode.
    pub failover_interval: Duration,
    /// Retention of the bench topic per partition, in bytes; `None` keeps everything. Ignored
    /// in `consume` mode, whose preload must stay readable.
    pub retention_bytes: Option<u64>,
    /// Segment size of the bench topic (`None`: the server's default, 64 MiB).
    pub segment_bytes: Option<u64>,
    /// The server to run against; `None` starts one in-process on a temporary directory.
    pub addr: Option<String>,
    /// The Kafka listener of the server at `addr` (used by `--protocol kafka` with `addr`, and
    /// ignored otherwise, so one command line serves both protocols; an in-process server gets
    /// a Kafka listener of its own).
    pub kafka_addr: Option<String>,
    /// TLS to the server at `addr` (native protocol only).
    pub tls: Option<crate::client::TlsClientConfig>,
    /// Replicas per partition of the bench topic (`None`: the server's default; more than 1
    /// needs a cluster).
    pub replication_factor: Option<u16>,
    /// When a produce counts as done (`None`: the broker's default, `all` on a replicated
    /// partition).
    pub acks: Option<crate::protocol::Acks>,
    /// The pid of the server at `addr` when it runs on this machine: its CPU per gigabyte is
    /// then reported (the in-process server's always is).
    pub server_pid: Option<u32>,
    /// Leave the bench topic on the server after the run (by default it is deleted, with its
    /// data: a run writes gigabytes, and a server benchmarked repeatedly would fill its disk).
    pub keep_topic: bool,
    /// Keep the figures over time too (time lines, CPU samples), for `--report`.
    pub timeline: bool,
    /// The kind of Kafka producer (`--protocol kafka`).
    pub kafka_producer: KafkaProducerKind,
    /// How often a transactional producer commits (`--transaction-interval`).
    pub transaction_interval: Duration,
    /// Kafka consumers fetch with read_committed isolation (`--isolation read-committed`).
    pub read_committed: bool,
    /// The in-process server's `splice_min_frame_bytes` (`--server-splice-min-bytes`; 0: it
    /// never splices), to compare the one-copy produce path with the copy path.
    pub server_splice_min_bytes: usize,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Produce,
            protocol: Protocol::Native,
            producers: 1,
            consumers: 1,
            partitions: 1,
            record_bytes: DEFAULT_RECORD_BYTES,
            payload: PayloadKind::Filler,
            compression: crate::compression::Codec::None,
            batch_records: DEFAULT_BATCH_RECORDS,
            flush: FlushPolicy::Never,
            stop: StopAfter::Duration(DEFAULT_DURATION),
            warmup: DEFAULT_WARMUP,
            rate: None,
            in_flight: DEFAULT_IN_FLIGHT,
            fetch_bytes: DEFAULT_FETCH_BYTES,
            failover_interval: DEFAULT_FAILOVER_INTERVAL,
            retention_bytes: Some(DEFAULT_RETENTION_BYTES),
            segment_bytes: None,
            addr: None,
            kafka_addr: None,
            replication_factor: None,
            acks: None,
            server_pid: None,
            keep_topic: false,
            timeline: false,
            kafka_producer: KafkaProducerKind::Plain,
            transaction_interval: DEFAULT_TRANSACTION_INTERVAL,
            read_committed: false,
            tls: None,
            server_splice_min_bytes: crate::server::DEFAULT_SPLICE_MIN_FRAME_BYTES,
        }
    }
}

fn invalid(message: impl Into<String>) -> BenchError {
    BenchError::Config(message.into())
}

impl BenchConfig {
    /// The partitions of the bench topic: as asked, raised to one per producer. A partition has
    /// one lease holder at a time, so producers never share one: with more producers than
    /// partitions each producer gets its own; with fewer, producer `i` holds the partitions
    /// `p` with `p % producers == i` and writes to them in turn.
    pub fn topic_partitions(&self) -> u32 {
        let producers = u32::try_from(self.producers).unwrap_or(u32::MAX);
        self.partitions.max(producers)
    }

    /// Bytes of one batch of `batch_records` records as the bench builds it.
    pub fn batch_bytes(&self) -> usize {
        HEADER_BYTES + self.batch_records as usize * (RECORD_OVERHEAD_BYTES + self.record_bytes)
    }

    /// The retention per partition when none is given: its share of
    /// [`DEFAULT_RETENTION_BYTES`], and at least one segment.
    pub fn default_retention_bytes(&self) -> u64 {
        (DEFAULT_RETENTION_BYTES / u64::from(self.topic_partitions()))
            .max(self.default_segment_bytes())
    }

    /// The segment size when none is given: the server's default (64 MiB), or a quarter of a
    /// partition's share of [`DEFAULT_RETENTION_BYTES`] if that is smaller (so that retention
    /// has segments to delete), and at least two batches (and 1 MiB).
    pub fn default_segment_bytes(&self) -> u64 {
        let default = crate::protocol::TopicConfig::DEFAULT_SEGMENT_BYTES;
        let smallest = (2 * self.batch_bytes() as u64)
            .max(1024 * 1024)
            .min(default);
        (DEFAULT_RETENTION_BYTES / u64::from(self.topic_partitions()) / 4).clamp(smallest, default)
    }

    /// Records per second each producer sends, with `--rate`.
    pub fn rate_per_producer(&self) -> Option<f64> {
        self.rate.map(|rate| rate / self.producers as f64)
    }

    /// Checks every limit; the error names the flag and what is allowed.
    pub fn validate(&self) -> Result<(), BenchError> {
        if !self.compression.is_built() {
            return Err(invalid(format!(
                "--compression {}: this build lacks the `compression` feature",
                self.compression
            )));
        }
        if !(1..=MAX_CLIENTS).contains(&self.producers) {
            return Err(invalid(format!(
                "--producers {} is outside 1..={MAX_CLIENTS}",
                self.producers
            )));
        }
        if !(1..=MAX_CLIENTS).contains(&self.consumers) {
            return Err(invalid(format!(
                "--consumers {} is outside 1..={MAX_CLIENTS}",
                self.consumers
            )));
        }
        if !(1..=MAX_PARTITIONS).contains(&self.topic_partitions()) {
            return Err(invalid(format!(
                "--partitions {} is outside 1..={MAX_PARTITIONS}",
                self.topic_partitions()
            )));
        }
        if !(1..=MAX_RECORD_BYTES).contains(&self.record_bytes) {
            return Err(invalid(format!(
                "--record-size {} is outside 1..={MAX_RECORD_BYTES}",
                self.record_bytes
            )));
        }
        if !(1..=MAX_RECORDS_PER_BATCH).contains(&self.batch_records) {
            return Err(invalid(format!(
                "--batch {} is outside 1..={MAX_RECORDS_PER_BATCH}",
                self.batch_records
            )));
        }
        if self.batch_bytes() > MAX_BATCH_BYTES {
            let fits =
                (MAX_BATCH_BYTES - HEADER_BYTES) / (RECORD_OVERHEAD_BYTES + self.record_bytes);
            return Err(invalid(format!(
                "--batch {} x --record-size {} makes batches of {} bytes, above the server's \
                 batch limit of {MAX_BATCH_BYTES} bytes; use --batch {fits} or less",
                self.batch_records,
                self.record_bytes,
                self.batch_bytes()
            )));
        }
        if !(1..=MAX_IN_FLIGHT).contains(&self.in_flight) {
            return Err(invalid(format!(
                "--in-flight {} is outside 1..={MAX_IN_FLIGHT}",
                self.in_flight
            )));
        }
        if !(1..=MAX_FETCH_BYTES).contains(&self.fetch_bytes) {
            return Err(invalid(format!(
                "--fetch-bytes {} is outside 1..={MAX_FETCH_BYTES}",
                self.fetch_bytes
            )));
        }
        match self.stop {
            StopAfter::Duration(duration) if duration.is_zero() || duration > MAX_DURATION => {
                return Err(invalid(format!(
                    "--duration must be more than 0 and at most {}",
                    humantime::format_duration(MAX_DURATION)
                )))
            }
            StopAfter::Records(0) => return Err(invalid("--records must be at least 1")),
            _ => {}
        }
        if self.warmup > MAX_DURATION {
            return Err(invalid(format!(
                "--warmup must be at most {}",
                humantime::format_duration(MAX_DURATION)
            )));
        }
        if let Some(rate) = self.rate {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(invalid(format!(
                    "--rate {rate} must be a positive number of records per second"
                )));
            }
        }
        if let FlushPolicy::Interval { interval_ms: 0 } = self.flush {
            return Err(invalid("--flush interval must be at least 1 ms"));
        }
        self.validate_protocol()?;
        if self.read_committed && self.protocol != Protocol::Kafka {
            return Err(invalid(
                "--isolation read-committed is for Kafka consumers: add --protocol kafka",
            ));
        }
        if self.kafka_producer != KafkaProducerKind::Plain && self.protocol != Protocol::Kafka {
            return Err(invalid(
                "--idempotent and --transactional are Kafka producers: add --protocol kafka",
            ));
        }
        if self.kafka_producer == KafkaProducerKind::Transactional
            && !(MIN_TRANSACTION_INTERVAL..=MAX_DURATION).contains(&self.transaction_interval)
        {
            return Err(invalid(format!(
                "--transaction-interval must be from {} to {}",
                humantime::format_duration(MIN_TRANSACTION_INTERVAL),
                humantime::format_duration(MAX_DURATION)
            )));
        }
        if self.tls.is_some() && self.addr.is_none() {
            return Err(invalid(
                "the --tls flags need --addr: the in-process server serves plain TCP",
            ));
        }
        if self.tls.is_some() && self.protocol == Protocol::Kafka {
            return Err(invalid(
                "--protocol kafka does not speak TLS; use --protocol native with the --tls flags",
            ));
        }
        if self.mode == Mode::Loopback && (self.addr.is_some() || self.protocol == Protocol::Kafka)
        {
            return Err(invalid(
                "--mode loopback measures this machine's loopback alone: it takes no --addr \
                 and no --protocol kafka",
            ));
        }
        if self.mode == Mode::Failover {
            if self.failover_interval < MIN_FAILOVER_INTERVAL {
                return Err(invalid(format!(
                    "--failover-interval must be at least {}",
                    humantime::format_duration(MIN_FAILOVER_INTERVAL)
                )));
            }
            if self.record_bytes < FAILOVER_PREFIX_BYTES {
                return Err(invalid(format!(
                    "--mode failover needs --record-size {FAILOVER_PREFIX_BYTES} or more: each \
                     value carries its writer and send time so the log can be checked"
                )));
            }
            if let StopAfter::Records(_) = self.stop {
                return Err(invalid(
                    "--mode failover runs for a --duration (handovers are timed), not --records",
                ));
            }
        }
        Ok(())
    }

    /// Checks `--protocol` against the mode and the addresses.
    fn validate_protocol(&self) -> Result<(), BenchError> {
        match self.protocol {
            Protocol::Kafka if self.mode == Mode::Failover => Err(invalid(
                "--protocol kafka does not apply to --mode failover: a failover hands native \
                 leases over, and Kafka producers write without a lease; use --protocol native",
            )),
            Protocol::Kafka if self.addr.is_some() && self.kafka_addr.is_none() => Err(invalid(
                "--protocol kafka with --addr needs --kafka-addr, the server's Kafka listener \
                 (fencelog serve --kafka-listen)",
            )),
            Protocol::Kafka if self.kafka_addr.is_some() && self.addr.is_none() => Err(invalid(
                "--kafka-addr needs --addr too: the bench creates its topic over the native \
                 protocol",
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        BenchConfig::default().validate().unwrap();
    }

    #[test]
    fn batches_above_the_server_limit_are_refused_with_the_largest_that_fits() {
        let config = BenchConfig {
            record_bytes: 16 * 1024,
            ..BenchConfig::default()
        };
        let message = config.validate().unwrap_err().to_string();
        assert!(message.contains("use --batch 511 or less"), "{message}");
        let fits = BenchConfig {
            batch_records: 511,
            ..config
        };
        fits.validate().unwrap();
    }

    #[test]
    fn kafka_protocol_is_refused_for_failover_and_needs_both_addresses() {
        let failover = BenchConfig {
            mode: Mode::Failover,
            protocol: Protocol::Kafka,
            ..BenchConfig::default()
        };
        let message = failover.validate().unwrap_err().to_string();
        assert!(message.contains("--mode failover"), "{message}");
        let external = BenchConfig {
            protocol: Protocol::Kafka,
            addr: Some("127.0.0.1:9".into()),
            ..BenchConfig::default()
        };
        assert!(external.validate().is_err());
        BenchConfig {
            kafka_addr: Some("127.0.0.1:10".into()),
            ..external
        }
        .validate()
        .unwrap();
        for mode in [Mode::Produce, Mode::Consume, Mode::Both] {
            BenchConfig {
                mode,
                protocol: Protocol::Kafka,
                ..BenchConfig::default()
            }
            .validate()
            .unwrap();
        }
    }

    #[test]
    fn more_producers_than_partitions_get_a_partition_each() {
        let config = BenchConfig {
            producers: 8,
            partitions: 2,
            ..BenchConfig::default()
        };
        assert_eq!(config.topic_partitions(), 8);
    }
}
