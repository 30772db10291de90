//! `failover` mode: load runs while each partition's lease is handed to a new producer every
//! `--failover-interval`, and the old producer, not told, keeps writing with its stale epoch.
//!
//! A handover, per partition: the next producer connects; the coordinator releases the current
//! lease (as an operator or a failure detector would) — the *handover point*; the next producer
//! acquires the lease (the broker installs epoch + 1 durably before granting it) and starts
//! writing. `handover_ms` is the time from the handover point to the new holder's first
//! acknowledged write. The superseded producer becomes a zombie: it keeps its send loop going
//! until the next handover, the deadline, or [`ZOMBIE_MAX_REJECTIONS`](super::produce::ZOMBIE_MAX_REJECTIONS) rejected writes.
//!
//! After the run every partition is read back from its start: epochs must never decrease along
//! the log, every record's stamp must name a known producer whose epoch matches the batch's,
//! and no record may have been sent by a producer after its successor's lease was granted.
//! Records that break any of these are `stale_landed`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::context::RunContext;
use super::error::BenchError;
use super::payload::Stamp;
use super::produce::{
    self, keep_lease, Connection, Generation, ProducerOutcome, ProducerSpec, Target, LEASE_TTL,
};
use super::stats::{Clock, FailoverReport, HandoverMs, Recorder};
use crate::client::{Client, Lease, Record};

/// Most bytes per fetch when reading the log back.
const READ_BACK_BYTES: u32 = 8 * 1024 * 1024;

/// A producer generation at work.
struct Running {
    generation: Arc<Generation>,
    lease: Lease,
    stop: CancellationToken,
    task: JoinHandle<Result<ProducerOutcome, BenchError>>,
}

/// What one partition's chain of producers measured.
#[derive(Default)]
struct ChainOutcome {
    recorder: Recorder,
    stale_rejected: u64,
    stale_acked: u64,
    handovers: Vec<Duration>,
    generations: Vec<Arc<Generation>>,
}

/// Runs the failover load on every partition, then reads the log back.
pub async fn run(
    context: &RunContext,
    clock: Clock,
) -> Result<(Recorder, FailoverReport), BenchError> {
    let partitions = context.config.topic_partitions();
    let writer_ids = Arc::new(AtomicU32::new(0));
    let mut chains = Vec::new();
    for partition in 0..partitions {
        let (context, writer_ids) = (context.clone(), Arc::clone(&writer_ids));
        chains.push(tokio::spawn(async move {
            chain(&context, clock, partition, &writer_ids).await
        }));
    }
    let mut total = ChainOutcome::default();
    for chain in chains {
        let outcome = chain.await.map_err(BenchError::task)??;
        total.recorder.merge(&outcome.recorder);
        total.stale_rejected += outcome.stale_rejected;
        total.stale_acked += outcome.stale_acked;
        total.handovers.extend(outcome.handovers);
        total.generations.extend(outcome.generations);
    }
    let generations: HashMap<u32, Arc<Generation>> = total
        .generations
        .iter()
        .map(|generation| (generation.writer, Arc::clone(generation)))
        .collect();
    let (verified, landed) = read_back(context, partitions, &generations).await?;
    let report = FailoverReport {
        stale_rejected: total.stale_rejected,
        // Both count the same thing from two sides; a landed write could in principle be
        // missed by one of them, never by both.
        stale_landed: landed.max(total.stale_acked),
        handover_ms: HandoverMs::from_times(&total.handovers),
        handovers: total.handovers.len() as u64,
        records_verified: verified,
    };
    Ok((total.recorder, report))
}

fn start_writer(
    context: &RunContext,
    clock: Clock,
    partition: u32,
    writer: u32,
    client: Client,
    lease: Lease,
    first_ack: Option<oneshot::Sender<Instant>>,
) -> Running {
    let generation = Arc::new(Generation {
        writer,
        epoch: lease.epoch,
        superseded_ns: Default::default(),
    });
    let stop = CancellationToken::new();
    keep_lease(
        client.clone(),
        Arc::clone(&context.topic),
        partition,
        lease,
        stop.clone(),
    );
    let config = &context.config;
    let spec = ProducerSpec {
        connection: Connection::Native(client),
        topic: Arc::clone(&context.topic),
        targets: vec![Target {
            partition,
            epoch: lease.epoch,
        }],
        writer,
        record_bytes: config.record_bytes,
        payload: config.payload,
        compression: config.compression,
        batch_records: config.batch_records,
        in_flight: config.in_flight,
        // One live producer per partition shares the total rate.
        rate: config
            .rate
            .map(|rate| rate / f64::from(config.topic_partitions())),
        schedule_from: Instant::now(),
        clock,
        budget: None,
        counters: Arc::clone(&context.counters),
        stop: stop.clone(),
        generation: Some(Arc::clone(&generation)),
        first_ack,
        acks: context.config.acks,
        kafka_producer: None,
        transaction_interval: None,
    };
    Running {
        generation,
        lease,
        stop,
        task: tokio::spawn(produce::run(spec)),
    }
}

/// One partition: a producer, replaced every interval until the deadline.
async fn chain(
    context: &RunContext,
    clock: Clock,
    partition: u32,
    writer_ids: &AtomicU32,
) -> Result<ChainOutcome, BenchError> {
    let topic = Arc::clone(&context.topic);
    let interval = context.config.failover_interval;
    let deadline = clock
        .deadline()
        .expect("failover runs are validated to have a duration");
    let holder = |writer: u32| format!("bench-failover-{writer}");
    let acquire = |client: Client, writer: u32| {
        let topic = Arc::clone(&topic);
        async move {
            client
                .acquire_lease(&topic, partition, &holder(writer), LEASE_TTL)
                .await
                .map(|lease| (client, lease))
                .map_err(|source| BenchError::Client {
                    context: format!("acquire the lease of {topic}/{partition}"),
                    source,
                })
        }
    };
    let admin = context.connect().await?;
    let writer = writer_ids.fetch_add(1, Ordering::Relaxed);
    let (client, lease) = acquire(context.connect().await?, writer).await?;
    let mut current = start_writer(context, clock, partition, writer, client, lease, None);
    let mut outcome = ChainOutcome::default();
    let mut retired = Vec::new();
    let mut zombie: Option<Running> = None;
    let mut pending_handovers = Vec::new();
    let mut next = clock.origin() + interval;
    while next < deadline {
        tokio::time::sleep_until(next.into()).await;
        let writer = writer_ids.fetch_add(1, Ordering::Relaxed);
        // Connected before the handover point: the handover measures the lease, not TCP.
        let client = context.connect().await?;
        admin
            .release_lease(&topic, partition, current.lease.lease_id)
            .await
            .map_err(|source| BenchError::Client {
                context: format!("release the lease of {topic}/{partition}"),
                source,
            })?;
        let released = Instant::now();
        let (client, lease) = acquire(client, writer).await?;
        let granted = Instant::now();
        let _ = current.generation.superseded_ns.set(clock.ns(granted));
        if let Some(old) = zombie.take() {
            old.stop.cancel();
            retired.push(old);
        }
        let (first_ack, acknowledged) = oneshot::channel();
        pending_handovers.push((released, acknowledged));
        let next_writer = start_writer(
            context,
            clock,
            partition,
            writer,
            client,
            lease,
            Some(first_ack),
        );
        zombie = Some(std::mem::replace(&mut current, next_writer));
        next += interval;
    }
    let last_lease = current.lease;
    retired.extend(zombie);
    retired.push(current);
    for running in retired {
        let produced = running.task.await.map_err(BenchError::task)??;
        running.stop.cancel();
        outcome.recorder.merge(&produced.recorder);
        outcome.stale_rejected += produced.stale_rejected;
        outcome.stale_acked += produced.stale_acked;
        outcome.generations.push(running.generation);
    }
    for (released, acknowledged) in pending_handovers {
        // A producer started just before the deadline may never have written: no figure.
        if let Ok(first_ack) = acknowledged.await {
            outcome
                .handovers
                .push(first_ack.saturating_duration_since(released));
        }
    }
    let _ = admin
        .release_lease(&topic, partition, last_lease.lease_id)
        .await;
    Ok(outcome)
}

/// Reads every partition back and counts the records that must not be there.
async fn read_back(
    context: &RunContext,
    partitions: u32,
    generations: &HashMap<u32, Arc<Generation>>,
) -> Result<(u64, u64), BenchError> {
    let client = context.connect().await?;
    let topic = &context.topic;
    let (mut verified, mut landed) = (0u64, 0u64);
    for partition in 0..partitions {
        let failed = |source| BenchError::Client {
            context: format!("read back {topic}/{partition}"),
            source,
        };
        let offsets = client
            .list_offsets(topic, partition)
            .await
            .map_err(failed)?;
        let mut offset = offsets.earliest;
        let mut last_epoch = 0;
        while offset < offsets.latest {
            let fetched = client
                .fetch(topic, partition, offset, READ_BACK_BYTES, Duration::ZERO)
                .await
                .map_err(failed)?;
            let Some(last) = fetched.records.last() else {
                return Err(BenchError::Check(format!(
                    "read back {topic}/{partition}: no records at offset {offset} below the \
                     log end {}",
                    offsets.latest
                )));
            };
            offset = last.offset + 1;
            for record in &fetched.records {
                verified += 1;
                if !belongs(record, &mut last_epoch, generations) {
                    landed += 1;
                }
            }
        }
    }
    Ok((verified, landed))
}

/// Whether a record read back is one the fence should have let in.
fn belongs(
    record: &Record,
    last_epoch: &mut u64,
    generations: &HashMap<u32, Arc<Generation>>,
) -> bool {
    let in_order = record.epoch >= *last_epoch;
    *last_epoch = (*last_epoch).max(record.epoch);
    let Some(stamp) = record.value.as_deref().and_then(Stamp::read) else {
        return false;
    };
    let Some(generation) = generations.get(&stamp.writer) else {
        return false;
    };
    let sent_in_time = generation
        .superseded_ns
        .get()
        .is_none_or(|superseded| stamp.sent_ns < *superseded);
    in_order && generation.epoch == record.epoch && sent_in_time
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn record(epoch: u64, writer: u32, sent_ns: u64) -> Record {
        let mut value = vec![0u8; 32];
        value[8..16].copy_from_slice(&sent_ns.to_be_bytes());
        value[16..20].copy_from_slice(&writer.to_be_bytes());
        Record {
            offset: 0,
            epoch,
            timestamp: 0,
            key: None,
            value: Some(Bytes::from(value)),
            headers: Vec::new(),
        }
    }

    #[test]
    fn writes_sent_after_supersession_or_out_of_epoch_order_do_not_belong() {
        let old = Arc::new(Generation {
            writer: 0,
            epoch: 1,
            superseded_ns: Default::default(),
        });
        old.superseded_ns.set(1_000).unwrap();
        let new = Arc::new(Generation {
            writer: 1,
            epoch: 2,
            superseded_ns: Default::default(),
        });
        let generations: HashMap<u32, Arc<Generation>> =
            [(0, Arc::clone(&old)), (1, Arc::clone(&new))].into();
        let mut last_epoch = 0;
        assert!(belongs(&record(1, 0, 999), &mut last_epoch, &generations));
        assert!(!belongs(
            &record(1, 0, 1_000),
            &mut last_epoch,
            &generations
        ));
        assert!(belongs(&record(2, 1, 5_000), &mut last_epoch, &generations));
        // Epoch order broken, even though sent in time.
        assert!(!belongs(&record(1, 0, 10), &mut last_epoch, &generations));
        // A stamp naming the wrong epoch, or an unknown writer.
        assert!(!belongs(&record(2, 0, 10), &mut last_epoch, &generations));
        assert!(!belongs(&record(2, 9, 10), &mut last_epoch, &generations));
    }
}
