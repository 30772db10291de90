//! The consumer load generator: one connection, one long-polling fetch in flight per partition
//! it reads, records decoded and CRC-checked by the client as any consumer's would be (with
//! `--protocol kafka`: Fetch v12 on the Kafka listener, its Kafka batches CRC32C-checked and
//! decoded by kafka-protocol's decoder). Over the native protocol the next fetch is sent as soon
//! as an answer arrives, before that answer is decoded (a consumer's prefetch: the server reads
//! and sends while the client checks).
//!
//! Latency is the fetch round trip (request to decoded response) in `consume` mode, and end to
//! end in `both` mode: from the intended send time stamped into each value by the producer to
//! the consumer's receipt, per record.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::error::BenchError;
use super::kafka_transport::{KafkaError, OFFSET_OUT_OF_RANGE};
use super::payload::Stamp;
use super::produce::{claim, Connection};
use super::progress::Counters;
use super::stats::{Clock, Recorder};
use crate::batch::now_ms;
use crate::client::{ClientError, FetchResult, FetchedBatches, Record};
use crate::protocol::ErrorCode;

/// Longest a fetch waits on the server for new records.
pub const FETCH_MAX_WAIT: Duration = Duration::from_millis(500);

/// What the consumer's latency measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatencyKind {
    /// Fetch request to decoded response, once per fetch that returned records.
    RoundTrip,
    /// Intended send time (from the value's stamp) to receipt, once per record.
    EndToEnd,
}

/// A partition a consumer reads.
#[derive(Debug, Clone, Copy)]
pub struct Source {
    /// Partition index.
    pub partition: u32,
    /// Where reading starts (and restarts after `wrap_at`).
    pub start: u64,
    /// In `consume` mode: the end of the preloaded records, where reading starts over.
    pub wrap_at: Option<u64>,
}

/// What a consumer needs to run.
pub struct ConsumerSpec {
    /// Its own connection.
    pub connection: Connection,
    /// The bench topic.
    pub topic: Arc<str>,
    /// Partitions it reads.
    pub sources: Vec<Source>,
    /// Bytes of each value.
    pub record_bytes: usize,
    /// Soft limit on the bytes of a fetch.
    pub fetch_bytes: u32,
    /// What latency it records.
    pub latency: LatencyKind,
    /// The run's time line.
    pub clock: Clock,
    /// Measured records left to read in `--records` runs, shared by all consumers.
    pub budget: Option<Arc<AtomicU64>>,
    /// Where to stop reading, once known (`both` with `--records`: the producers' final log
    /// ends).
    pub ends: Option<watch::Receiver<Option<HashMap<u32, u64>>>>,
    /// Live counters for the progress bar.
    pub counters: Arc<Counters>,
    /// Stops reading.
    pub stop: CancellationToken,
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

async fn changed(ends: &mut Option<watch::Receiver<Option<HashMap<u32, u64>>>>) {
    if let Some(receiver) = ends {
        if receiver.changed().await.is_ok() {
            return;
        }
    }
    std::future::pending().await
}

/// Runs a consumer until the deadline, the budget, the producers' ends or `stop`.
pub async fn run(mut spec: ConsumerSpec) -> Result<Recorder, BenchError> {
    let mut recorder = spec.clock.recorder();
    let mut positions: Vec<u64> = spec.sources.iter().map(|s| s.start).collect();
    // Fetches run as tasks of their own, so a fetch ahead goes on the wire while this task
    // decodes the answer before it: polled from here, it would be sent only after that decode.
    // Dropping the set aborts what is left.
    let mut in_flight = JoinSet::new();
    let (connection, topic) = (spec.connection.clone(), Arc::clone(&spec.topic));
    let partitions: Vec<u32> = spec.sources.iter().map(|s| s.partition).collect();
    let max_bytes = spec.fetch_bytes;
    let fetch = |index: usize, offset: u64| {
        let (connection, topic, partition) =
            (connection.clone(), Arc::clone(&topic), partitions[index]);
        async move {
            let sent = Instant::now();
            let result = fetch(&connection, &topic, partition, offset, max_bytes).await;
            (index, sent, result)
        }
    };
    for (index, position) in positions.iter().enumerate() {
        in_flight.spawn(fetch(index, *position));
    }
    let deadline = spec.clock.deadline();
    loop {
        if reached_ends(&spec, &positions) {
            break;
        }
        tokio::select! {
            biased;
            () = spec.stop.cancelled() => break,
            () = sleep_until_opt(deadline) => break,
            () = changed(&mut spec.ends) => {}
            Some(joined) = in_flight.join_next() => {
                let (index, sent, result) = joined.map_err(BenchError::task)?;
                let partition = spec.sources[index].partition;
                // Behind the topic's retention: the records between are gone. Count them as
                // skipped (the consumer's lag), not as a failure, and go on from the oldest.
                if let Err(FetchFailure::Native(ClientError::OffsetOutOfRange { offset, earliest, .. })) = &result {
                    if *earliest > *offset {
                        recorder.skipped += earliest - offset;
                        positions[index] = *earliest;
                        in_flight.spawn(fetch(index, positions[index]));
                        continue;
                    }
                }
                let fetched = result.map_err(|failure| {
                    let behind = BenchError::Check(format!(
                        "a consumer fell behind the topic's retention on {}/{partition} (offset {} was deleted); \
                         raise --retention-bytes, or 0 to keep everything",
                        spec.topic, positions[index]
                    ));
                    match failure {
                        FetchFailure::Native(ClientError::OffsetOutOfRange { .. } | ClientError::Server { code: ErrorCode::OffsetOutOfRange, .. }) => behind,
                        FetchFailure::Kafka(source) if source.code() == Some(OFFSET_OUT_OF_RANGE) => behind,
                        FetchFailure::Native(source) => BenchError::Client {
                            context: format!("fetch from {}/{partition}", spec.topic),
                            source,
                        },
                        FetchFailure::Kafka(source) => BenchError::Kafka {
                            context: format!("kafka fetch from {}/{partition}", spec.topic),
                            source,
                        },
                    }
                })?;
                // Ask for the next range before decoding this one, when the batch headers say
                // where it starts: the server reads and sends it while this task checks and
                // decodes (as a consumer's prefetch does).
                let source = spec.sources[index];
                let wrap = |position: u64| match source.wrap_at {
                    Some(end) if position >= end => source.start,
                    _ => position,
                };
                let ahead = fetched.next_offset();
                if let Some(next) = ahead {
                    positions[index] = wrap(next);
                    in_flight.spawn(fetch(index, positions[index]));
                    // A task spawned from a worker waits in that worker's LIFO slot, which no
                    // other worker may steal, until this task yields: without the yield the
                    // request left only after the decode below (0.6–0.9 ms per 4 MiB fetch,
                    // the connection idle meanwhile; 2.3 → 2.7 GB/s).
                    tokio::task::yield_now().await;
                }
                let fetched = fetched.decode().map_err(|source| BenchError::Client {
                    context: format!("decode a fetch from {}/{partition}", spec.topic),
                    source,
                })?;
                let received = Instant::now();
                if account(&mut spec, &mut recorder, &fetched, sent, received) {
                    spec.stop.cancel();
                    break;
                }
                if ahead.is_none() {
                    if let Some(last) = fetched.records.last() {
                        positions[index] = wrap(last.offset + 1);
                    }
                    in_flight.spawn(fetch(index, positions[index]));
                }
            }
        }
    }
    Ok(recorder)
}

/// Why a fetch failed, on either protocol.
enum FetchFailure {
    Native(ClientError),
    Kafka(KafkaError),
}

/// A fetch's answer: native batches not yet checked and decoded, or a Kafka answer decoded by
/// its transport.
enum Fetched {
    Native(FetchedBatches),
    Kafka(FetchResult),
}

impl Fetched {
    /// Where the next fetch starts, when known before decoding.
    fn next_offset(&self) -> Option<u64> {
        match self {
            Fetched::Native(batches) => batches.next_offset(),
            Fetched::Kafka(_) => None,
        }
    }

    fn decode(self) -> Result<FetchResult, ClientError> {
        match self {
            Fetched::Native(batches) => batches.decode(),
            Fetched::Kafka(result) => Ok(result),
        }
    }
}

/// One long-polling fetch (up to [`FETCH_MAX_WAIT`]) on either protocol.
async fn fetch(
    connection: &Connection,
    topic: &str,
    partition: u32,
    offset: u64,
    max_bytes: u32,
) -> Result<Fetched, FetchFailure> {
    match connection {
        Connection::Native(client) => client
            .fetch_batches(topic, partition, offset, max_bytes, FETCH_MAX_WAIT)
            .await
            .map(Fetched::Native)
            .map_err(FetchFailure::Native),
        Connection::Kafka(connection) => connection
            .fetch(topic, partition, offset, max_bytes, FETCH_MAX_WAIT)
            .await
            .map(Fetched::Kafka)
            .map_err(FetchFailure::Kafka),
    }
}

/// Whether every partition was read up to the producers' final log end.
fn reached_ends(spec: &ConsumerSpec, positions: &[u64]) -> bool {
    let Some(ends) = &spec.ends else {
        return false;
    };
    let ends = ends.borrow();
    let Some(ends) = ends.as_ref() else {
        return false;
    };
    spec.sources
        .iter()
        .zip(positions)
        .all(|(source, position)| *position >= ends.get(&source.partition).copied().unwrap_or(0))
}

/// Counts a fetch's records and latencies; returns true once the shared budget is spent.
fn account(
    spec: &mut ConsumerSpec,
    recorder: &mut Recorder,
    fetched: &FetchResult,
    sent: Instant,
    received: Instant,
) -> bool {
    let records = fetched.records.len() as u64;
    if records == 0 {
        return false;
    }
    spec.counters.add_consumed(records);
    if !spec.clock.measuring(received) {
        return false;
    }
    let counted = match &spec.budget {
        Some(budget) => claim(budget, records),
        None => records,
    };
    recorder.count(counted, counted * spec.record_bytes as u64, received);
    match spec.latency {
        LatencyKind::RoundTrip => recorder.latency(received.saturating_duration_since(sent), 1),
        LatencyKind::EndToEnd => end_to_end(&spec.clock, recorder, &fetched.records, received),
    }
    spec.budget
        .as_ref()
        .is_some_and(|budget| budget.load(std::sync::atomic::Ordering::Acquire) == 0)
}

/// Records each record's latency from its intended send time. Records of one batch share a
/// stamp, so runs of equal stamps are recorded at once. Values too short for a stamp fall back
/// to the record timestamp (millisecond resolution).
fn end_to_end(clock: &Clock, recorder: &mut Recorder, records: &[Record], received: Instant) {
    let mut run: Option<(u64, u64)> = None;
    let flush = |recorder: &mut Recorder, run: Option<(u64, u64)>| {
        if let Some((intended_ns, count)) = run {
            let latency = received.saturating_duration_since(clock.instant(intended_ns));
            recorder.latency(latency, count);
        }
    };
    for record in records {
        match record.value.as_deref().and_then(Stamp::intended_ns) {
            Some(intended_ns) => match &mut run {
                Some((current, count)) if *current == intended_ns => *count += 1,
                _ => {
                    flush(recorder, run.take());
                    run = Some((intended_ns, 1));
                }
            },
            None => {
                let ms = now_ms().saturating_sub(record.timestamp).max(0) as u64;
                recorder.latency(Duration::from_millis(ms), 1);
            }
        }
    }
    flush(recorder, run);
}
