//! The producer load generator: one connection, a bounded window of pipelined produce requests,
//! one batch built per request from a prebuilt value, closed loop (as fast as acknowledgements
//! come back) or open loop (`--rate`: a fixed schedule, latency measured from each batch's
//! *intended* send time so that a stall shows up in the latency instead of silently lowering
//! the offered load, i.e. without coordinated omission).
//!
//! It does not use [`crate::client::Producer`], whose per-record futures and channels would make
//! the generator, not the server, the bottleneck; it speaks [`Client::produce`] directly and
//! keeps its leases alive itself. With `--protocol kafka` it sends the same batches as Kafka
//! record batches v2 in Kafka ProduceRequests (acks=1) over a [`KafkaConnection`], with the same
//! window, without a lease; as an idempotent producer (`--idempotent`: a producer id, sequence
//! numbers per partition, acks=all) or a transactional one (`--transactional`: its partitions
//! added to a transaction before the first batch of each, every batch in flight acknowledged,
//! then the transaction committed with EndTxn every `--transaction-interval`, as a Kafka
//! producer's `commit_transaction` flushes before it commits).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::config::MAX_IN_FLIGHT;
use super::error::BenchError;
use super::kafka_transport::{KafkaConnection, KafkaError, KafkaProducerId};
use super::pacer::Pacer;
use super::payload::{KafkaBatchProducer, Payload, PayloadKind, Stamp};
use super::progress::Counters;
use super::stats::{Clock, Recorder};
use crate::client::{Client, ClientError, Lease, ProduceAck};

/// Lease TTL the bench asks for; leases are renewed every third of it.
pub const LEASE_TTL: Duration = Duration::from_secs(10);
/// A superseded producer in `failover` mode stops after this many rejected writes, so that its
/// stale traffic does not starve the live producer of CPU.
pub const ZOMBIE_MAX_REJECTIONS: u64 = 16;

/// A producer's or consumer's connection, on the listener of the run's `--protocol`.
#[derive(Clone)]
pub enum Connection {
    /// fencelog's protocol.
    Native(Client),
    /// Kafka's wire protocol.
    Kafka(KafkaConnection),
}

/// Why a produce request failed, on either protocol.
#[derive(Debug)]
enum Failure {
    Native(ClientError),
    Kafka(KafkaError),
}

impl Connection {
    /// Sends one batch (native, or Kafka v2 for a Kafka connection) of `records` records.
    async fn produce(
        &self,
        topic: &str,
        partition: u32,
        batch: Bytes,
        records: u32,
        acks: Option<crate::protocol::Acks>,
        producer: Option<&KafkaProducerId>,
    ) -> Result<ProduceAck, Failure> {
        match self {
            Connection::Native(client) => match acks {
                None => client.produce(topic, partition, batch).await,
                Some(acks) => {
                    client
                        .produce_with_acks(topic, partition, batch, acks)
                        .await
                }
            }
            .map_err(Failure::Native),
            Connection::Kafka(connection) => connection
                .produce(topic, partition, batch, records, producer)
                .await
                .map_err(Failure::Kafka),
        }
    }
}

/// A partition a producer writes to, under the epoch of its lease.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// Partition index.
    pub partition: u32,
    /// Epoch stamped into its batches.
    pub epoch: u64,
}

/// One producer generation in `failover` mode: which epoch it writes under and when a newer
/// holder superseded it.
#[derive(Debug)]
pub struct Generation {
    /// The writer id stamped into its values.
    pub writer: u32,
    /// Its epoch.
    pub epoch: u64,
    /// When the next holder's lease was granted (its epoch installed), ns since the origin.
    /// Writes this producer sends from then on are stale.
    pub superseded_ns: OnceLock<u64>,
}

/// What a producer needs to run.
pub struct ProducerSpec {
    /// Its own connection.
    pub connection: Connection,
    /// The bench topic.
    pub topic: Arc<str>,
    /// Partitions it writes to, in turn (the epoch is unused on a Kafka connection).
    pub targets: Vec<Target>,
    /// Writer id stamped into values.
    pub writer: u32,
    /// Bytes of each value.
    pub record_bytes: usize,
    /// What the values hold.
    pub payload: PayloadKind,
    /// How batches are compressed.
    pub compression: crate::compression::Codec,
    /// Records per batch.
    pub batch_records: u32,
    /// Produce requests in flight at most.
    pub in_flight: usize,
    /// Records per second for this producer (open loop), or `None` (closed loop).
    pub rate: Option<f64>,
    /// When its open-loop schedule starts (batch `k` is due `k` periods later).
    pub schedule_from: Instant,
    /// The run's time line.
    pub clock: Clock,
    /// Measured records left to send in `--records` runs, shared by all producers.
    pub budget: Option<Arc<AtomicU64>>,
    /// Live counters for the progress bar.
    pub counters: Arc<Counters>,
    /// Stops sending (in-flight requests are still awaited).
    pub stop: CancellationToken,
    /// In `failover` mode: this producer's generation. Fenced answers are then counted, not
    /// errors.
    pub generation: Option<Arc<Generation>>,
    /// Told the time of the first acknowledged write.
    pub first_ack: Option<oneshot::Sender<Instant>>,
    /// `--acks` (native protocol; `None`: the broker's default).
    pub acks: Option<crate::protocol::Acks>,
    /// An idempotent or transactional Kafka producer's id (`None`: a plain producer).
    pub kafka_producer: Option<KafkaProducerId>,
    /// For a transactional producer: how long each transaction stays open before it is
    /// committed.
    pub transaction_interval: Option<Duration>,
}

/// What a producer measured.
#[derive(Debug, Default)]
pub struct ProducerOutcome {
    /// Measured acknowledged records and ack latencies.
    pub recorder: Recorder,
    /// Per partition written: the log end offset after its last acknowledged batch.
    pub log_ends: Vec<(u32, u64)>,
    /// Produce requests rejected as fenced (`failover` only).
    pub stale_rejected: u64,
    /// Produce requests sent after this producer was superseded that were acknowledged
    /// (`failover` only; must be 0).
    pub stale_acked: u64,
}

/// A transactional producer's open transaction.
struct Transaction {
    /// When it was opened (its partitions added); `None` between transactions.
    opened: Option<Instant>,
    /// How long it stays open.
    interval: Duration,
    /// Set once it is due: nothing more is sent until every batch in flight is acknowledged
    /// and the transaction committed.
    committing: bool,
}

/// A produce request that completed.
struct Completed {
    /// When it was meant to be sent (= `sent` in closed loop).
    intended: Instant,
    /// When it was handed to the client.
    sent: Instant,
    /// When its answer arrived.
    answered: Instant,
    records: u32,
    partition: u32,
    result: Result<ProduceAck, Failure>,
}

/// Takes up to `want` records from a shared budget; 0 once it is spent.
pub fn claim(budget: &AtomicU64, want: u64) -> u64 {
    budget
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
            (left > 0).then(|| left - left.min(want))
        })
        .map_or(0, |left| left.min(want))
}

/// Waits for the pacer's next tick, or without one until `at` on tokio's (coarser) timer.
async fn wait_until(pacer: Option<&Pacer>, at: Option<Instant>) {
    match (pacer, at) {
        (Some(pacer), Some(_)) => pacer.tick().await,
        (None, Some(at)) => tokio::time::sleep_until(at.into()).await,
        (_, None) => std::future::pending().await,
    }
}

/// Runs a producer until the deadline, the budget or `stop`, then waits for its requests in
/// flight.
pub async fn run(mut spec: ProducerSpec) -> Result<ProducerOutcome, BenchError> {
    let mut payload =
        Payload::new(spec.record_bytes, MAX_IN_FLIGHT, spec.payload).compressed(spec.compression);
    let mut outcome = ProducerOutcome {
        log_ends: spec.targets.iter().map(|t| (t.partition, 0)).collect(),
        recorder: spec.clock.recorder(),
        ..ProducerOutcome::default()
    };
    // Open loop: batch k is due at schedule_from + k * period.
    let period = spec
        .rate
        .map(|rate| Duration::from_secs_f64(f64::from(spec.batch_records) / rate));
    let schedule_from = spec.schedule_from;
    let due =
        move |sequence: u64| period.map(|period| schedule_from + period.mul_f64(sequence as f64));
    let pacer = match period {
        Some(period) => Some(Pacer::start(schedule_from, period).map_err(|error| {
            BenchError::Task(format!("start the open-loop pacer thread: {error}"))
        })?),
        None => None,
    };
    let mut in_flight = FuturesUnordered::new();
    let mut sequence: u64 = 0;
    let mut stopping = false;
    // Per target: the Kafka sequence number of its next batch (idempotent producers).
    let mut kafka_sequences = vec![0i32; spec.targets.len()];
    let mut transaction = spec.transaction_interval.map(|interval| Transaction {
        opened: None,
        interval,
        committing: false,
    });
    loop {
        if let Some(open) = transaction.as_mut() {
            if open.opened.is_some() && in_flight.is_empty() && (open.committing || stopping) {
                commit(&spec, &mut outcome).await?;
                open.opened = None;
                open.committing = false;
            }
        }
        while !stopping
            && !transaction.as_ref().is_some_and(|t| t.committing)
            && in_flight.len() < spec.in_flight
        {
            let now = Instant::now();
            let intended = match due(sequence) {
                Some(at) if at > now => break,
                Some(at) => at,
                None => now,
            };
            if spec.clock.past_deadline(intended) || spec.stop.is_cancelled() {
                stopping = true;
                break;
            }
            let records = match &spec.budget {
                Some(budget) if spec.clock.measuring(intended) => {
                    claim(budget, u64::from(spec.batch_records)) as u32
                }
                _ => spec.batch_records,
            };
            if records == 0 {
                stopping = true;
                break;
            }
            if let Some(open) = transaction.as_mut() {
                match open.opened {
                    None => {
                        begin(&spec).await?;
                        open.opened = Some(Instant::now());
                    }
                    Some(opened) if opened.elapsed() >= open.interval => {
                        open.committing = true;
                        break;
                    }
                    Some(_) => {}
                }
            }
            let target_index = (sequence % spec.targets.len() as u64) as usize;
            let target = spec.targets[target_index];
            let stamp = Stamp {
                intended_ns: spec.clock.ns(intended),
                sent_ns: spec.clock.ns(now),
                writer: spec.writer,
                sequence: sequence as u32,
            };
            let batch = match &spec.connection {
                Connection::Native(_) => payload.batch(target.epoch, records, stamp),
                Connection::Kafka(_) => {
                    let producer = spec.kafka_producer.as_ref().map(|producer| {
                        let base_sequence = kafka_sequences[target_index];
                        // Kafka's sequence numbers wrap at i32::MAX.
                        kafka_sequences[target_index] =
                            ((i64::from(base_sequence) + i64::from(records)) % (1 << 31)) as i32;
                        KafkaBatchProducer {
                            id: producer.id,
                            epoch: producer.epoch,
                            base_sequence,
                            transactional: transaction.is_some(),
                        }
                    });
                    payload.kafka_batch(records, stamp, producer)
                }
            };
            spec.counters
                .add_sent(batch.len(), u64::from(records) * spec.record_bytes as u64);
            let (connection, topic, acks, producer) = (
                spec.connection.clone(),
                Arc::clone(&spec.topic),
                spec.acks,
                spec.kafka_producer.clone(),
            );
            let sent = Instant::now();
            let intended = if period.is_some() { intended } else { sent };
            in_flight.push(async move {
                let result = connection
                    .produce(
                        &topic,
                        target.partition,
                        batch,
                        records,
                        acks,
                        producer.as_ref(),
                    )
                    .await;
                Completed {
                    intended,
                    sent,
                    answered: Instant::now(),
                    records,
                    partition: target.partition,
                    result,
                }
            });
            sequence += 1;
        }
        let committing = transaction
            .as_ref()
            .is_some_and(|t| t.committing || (stopping && t.opened.is_some()));
        if in_flight.is_empty() && committing {
            continue;
        }
        if stopping && in_flight.is_empty() {
            break;
        }
        let wake =
            due(sequence).filter(|_| !stopping && !committing && in_flight.len() < spec.in_flight);
        tokio::select! {
            biased;
            Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                if complete(&mut spec, &mut outcome, done)? {
                    stopping = true;
                }
            }
            () = wait_until(pacer.as_ref(), wake), if wake.is_some() => {}
            () = spec.stop.cancelled(), if !stopping => stopping = true,
        }
    }
    if let Some(pacer) = &pacer {
        outcome.recorder.pacer_late_us = pacer.lateness_us();
    }
    Ok(outcome)
}

/// Opens a transaction: adds the producer's partitions to it.
async fn begin(spec: &ProducerSpec) -> Result<(), BenchError> {
    let (Connection::Kafka(connection), Some(producer)) = (&spec.connection, &spec.kafka_producer)
    else {
        return Ok(());
    };
    let partitions: Vec<u32> = spec.targets.iter().map(|t| t.partition).collect();
    connection
        .add_partitions_to_txn(producer, &spec.topic, &partitions)
        .await
        .map_err(|source| BenchError::Kafka {
            context: format!("add {}/{partitions:?} to a transaction", spec.topic),
            source,
        })
}

/// Commits the open transaction (every batch of it is acknowledged), timing the commit.
async fn commit(spec: &ProducerSpec, outcome: &mut ProducerOutcome) -> Result<(), BenchError> {
    let (Connection::Kafka(connection), Some(producer)) = (&spec.connection, &spec.kafka_producer)
    else {
        return Ok(());
    };
    let started = Instant::now();
    connection
        .end_txn(producer, true)
        .await
        .map_err(|source| BenchError::Kafka {
            context: "commit a transaction (EndTxn)".into(),
            source,
        })?;
    if spec.clock.measuring(started) {
        outcome.recorder.commit(started.elapsed());
    }
    Ok(())
}

/// Accounts for one answer; returns true when the producer should stop sending.
fn complete(
    spec: &mut ProducerSpec,
    outcome: &mut ProducerOutcome,
    done: Completed,
) -> Result<bool, BenchError> {
    match done.result {
        Ok(ack) => {
            let records = u64::from(done.records);
            spec.counters.add_produced(records);
            if let Some(end) = outcome
                .log_ends
                .iter_mut()
                .find(|(p, _)| *p == done.partition)
            {
                end.1 = end.1.max(ack.log_end_offset);
            }
            if let Some(first_ack) = spec.first_ack.take() {
                let _ = first_ack.send(done.answered);
            }
            if let Some(superseded) = spec.generation.as_ref().and_then(|g| g.superseded_ns.get()) {
                if spec.clock.ns(done.sent) >= *superseded {
                    outcome.stale_acked += 1;
                }
            }
            if spec.clock.measuring(done.intended) {
                let bytes = records * spec.record_bytes as u64;
                outcome.recorder.count(records, bytes, done.answered);
                outcome
                    .recorder
                    .latency(done.answered.saturating_duration_since(done.intended), 1);
            }
            Ok(false)
        }
        Err(Failure::Native(error)) if error.is_fenced() && spec.generation.is_some() => {
            outcome.stale_rejected += 1;
            Ok(outcome.stale_rejected >= ZOMBIE_MAX_REJECTIONS)
        }
        Err(Failure::Native(source)) => Err(BenchError::Client {
            context: format!("produce to {}/{}", spec.topic, done.partition),
            source,
        }),
        Err(Failure::Kafka(source)) => Err(BenchError::Kafka {
            context: format!("kafka produce to {}/{}", spec.topic, done.partition),
            source,
        }),
    }
}

/// Renews a lease every third of its TTL until `stop`, or until the lease is gone (released or
/// superseded, as in `failover`).
pub fn keep_lease(
    client: Client,
    topic: Arc<str>,
    partition: u32,
    lease: Lease,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let period = Duration::from_millis((lease.ttl_ms / 3).max(1));
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            match client.renew_lease(&topic, partition, lease.lease_id).await {
                Ok(_) => {}
                Err(error) if error.is_fencing() => return,
                Err(error) => {
                    tracing::warn!(%topic, partition, %error, "bench: lease renewal failed")
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_claims_never_exceed_what_is_left() {
        let budget = AtomicU64::new(2500);
        assert_eq!(claim(&budget, 1000), 1000);
        assert_eq!(claim(&budget, 1000), 1000);
        assert_eq!(claim(&budget, 1000), 500);
        assert_eq!(claim(&budget, 1000), 0);
        assert_eq!(budget.load(Ordering::Relaxed), 0);
    }
}
