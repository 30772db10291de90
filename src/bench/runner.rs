//! Runs a benchmark: starts an in-process server when no address is given (with a Kafka listener
//! for `--protocol kafka`), creates the bench topic, connects and leases the producers (Kafka
//! producers write without a lease), starts the roles of the mode (produce, consume, both,
//! failover), joins them and turns their figures into one report per role.
//!
//! The runner is the top of the bench's modules: it uses every other one and none uses it.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::config::{self, BenchConfig, KafkaProducerKind, Mode, Protocol, StopAfter};
use super::consume::{self, ConsumerSpec, LatencyKind, Source};
use super::context::RunContext;
use super::cpu::{self, CpuWindow, ServerProcess};
use super::error::BenchError;
use super::failover;
use super::kafka_transport::KafkaProducerId;
use super::produce::{self, Connection, ProducerOutcome, ProducerSpec, Target, LEASE_TTL};
use super::progress::{Counters, Progress};
use super::stats::{Clock, Recorder, RoleReport};
use crate::client::{Client, Lease};
use crate::protocol::TopicConfig;
use crate::testing::TestServer;

/// The in-process server, on a runtime of its own: its threads are named
/// [`cpu::SERVER_THREAD_NAME`], so that its CPU is told apart from the load generator's. Its
/// runtime has half the machine's cores as workers (see [`in_process_server_workers`]).
struct InProcessServer {
    server: Option<TestServer>,
    runtime: Option<tokio::runtime::Runtime>,
}

/// Worker threads of the in-process server's runtime: half the cores, at least one. The
/// generator's runtime already has a worker per core, and the server's appends run on its
/// blocking pool, not on its workers. Measured on 2 cores (1 KiB records, 3 s runs): with one
/// server worker the figures match those of one runtime shared by server and generator (100 per
/// batch 1.60 GB/s, 1.64 shared), with two they fall by a tenth (1.43), every hand-off between
/// the runtimes then waking a thread more.
fn in_process_server_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |cores| (cores.get() / 2).max(1))
}

impl InProcessServer {
    async fn start(protocol: Protocol, splice_min_frame_bytes: usize) -> Result<Self, BenchError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(in_process_server_workers())
            .thread_name(cpu::SERVER_THREAD_NAME)
            .thread_keep_alive(cpu::SERVER_THREAD_KEEP_ALIVE)
            .enable_all()
            .build()
            .map_err(BenchError::Runtime)?;
        let started = runtime
            .spawn(async move {
                let server_config = crate::server::ServerConfig {
                    splice_min_frame_bytes,
                    ..crate::server::ServerConfig::default()
                };
                let builder = TestServer::builder().server_config(server_config);
                match protocol {
                    Protocol::Native => builder.start().await,
                    Protocol::Kafka => builder.kafka().start().await,
                }
            })
            .await
            .map_err(BenchError::task)??;
        Ok(Self {
            server: Some(started),
            runtime: Some(runtime),
        })
    }

    fn server(&self) -> &TestServer {
        self.server.as_ref().expect("present until dropped")
    }
}

impl Drop for InProcessServer {
    fn drop(&mut self) {
        // Dropped, not shut down: a graceful shutdown syncs every partition, which after a
        // flush `never` run means writing gigabytes of page cache back to a directory that is
        // deleted next anyway. Blocking work left behind runs out with the process.
        if let Some(runtime) = self.runtime.take() {
            let data_dir = self
                .server
                .as_ref()
                .map(|server| server.data_dir().to_path_buf());
            let _entered = runtime.enter();
            drop(self.server.take());
            drop(_entered);
            runtime.shutdown_background();
            // The temporary directory's own removal (on the drop above) races with the
            // server's tasks, which may still be writing when it runs; its error is ignored, and
            // every in-process run used to leave its data behind. Once more, now that nothing
            // of the runtime runs any more.
            if let Some(data_dir) = data_dir {
                match std::fs::remove_dir_all(&data_dir) {
                    Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                        eprintln!("warning: could not remove the bench server's data directory {}: {error}", data_dir.display());
                    }
                    _ => {}
                }
            }
        }
    }
}

/// A producer connected and holding the leases of its partitions (none over Kafka), not yet
/// sending.
struct Prepared {
    connection: Connection,
    /// An idempotent or transactional Kafka producer's id.
    kafka_producer: Option<KafkaProducerId>,
    targets: Vec<Target>,
    leases: Vec<(u32, Lease)>,
    keepers: CancellationToken,
}

/// The partitions producer `index` writes: `p % producers == index`.
fn producer_partitions(index: usize, producers: usize, partitions: u32) -> Vec<u32> {
    (0..partitions)
        .filter(|p| *p as usize % producers == index)
        .collect()
}

/// The partitions consumer `index` reads: `p % consumers == index`, or partition
/// `index % partitions` when there are more consumers than partitions (several consumers then
/// read one partition independently, each counting what it reads).
fn consumer_partitions(index: usize, consumers: usize, partitions: u32) -> Vec<u32> {
    if consumers > partitions as usize {
        vec![(index % partitions as usize) as u32]
    } else {
        (0..partitions)
            .filter(|p| *p as usize % consumers == index)
            .collect()
    }
}

async fn prepare_producers(context: &RunContext) -> Result<Vec<Prepared>, BenchError> {
    let config = &context.config;
    let mut prepared = Vec::new();
    for index in 0..config.producers {
        if config.protocol == Protocol::Kafka {
            // Unleased: the partitions of the fresh bench topic never granted a lease.
            let partitions =
                producer_partitions(index, config.producers, config.topic_partitions());
            let connection = context.connect_kafka().await?;
            let transactional_id = format!("{}-producer-{index}", context.topic);
            let kafka_producer = match config.kafka_producer {
                KafkaProducerKind::Plain => None,
                KafkaProducerKind::Idempotent => Some(connection.init_producer_id(None).await),
                KafkaProducerKind::Transactional => {
                    Some(connection.init_producer_id(Some(&transactional_id)).await)
                }
            }
            .transpose()
            .map_err(|source| BenchError::Kafka {
                context: format!("get a producer id (InitProducerId) for {transactional_id}"),
                source,
            })?;
            prepared.push(Prepared {
                connection: Connection::Kafka(connection),
                kafka_producer,
                targets: partitions
                    .into_iter()
                    .map(|partition| Target {
                        partition,
                        epoch: 0,
                    })
                    .collect(),
                leases: Vec::new(),
                keepers: CancellationToken::new(),
            });
            continue;
        }
        let client = context.connect().await?;
        let keepers = CancellationToken::new();
        let mut leases = Vec::new();
        for partition in producer_partitions(index, config.producers, config.topic_partitions()) {
            let lease = client
                .acquire_lease(
                    &context.topic,
                    partition,
                    &format!("bench-producer-{index}"),
                    LEASE_TTL,
                )
                .await
                .map_err(|source| BenchError::Client {
                    context: format!("acquire the lease of {}/{partition}", context.topic),
                    source,
                })?;
            produce::keep_lease(
                client.clone(),
                Arc::clone(&context.topic),
                partition,
                lease,
                keepers.clone(),
            );
            leases.push((partition, lease));
        }
        prepared.push(Prepared {
            connection: Connection::Native(client),
            kafka_producer: None,
            targets: leases
                .iter()
                .map(|(partition, lease)| Target {
                    partition: *partition,
                    epoch: lease.epoch,
                })
                .collect(),
            leases,
            keepers,
        });
    }
    Ok(prepared)
}

type ProducerTask = JoinHandle<Result<ProducerOutcome, BenchError>>;

fn spawn_producers(
    context: &RunContext,
    prepared: &[Prepared],
    clock: Clock,
    budget: Option<Arc<AtomicU64>>,
) -> Vec<ProducerTask> {
    let config = &context.config;
    prepared
        .iter()
        .enumerate()
        .map(|(index, producer)| {
            let spec = ProducerSpec {
                connection: producer.connection.clone(),
                topic: Arc::clone(&context.topic),
                targets: producer.targets.clone(),
                writer: index as u32,
                record_bytes: config.record_bytes,
                payload: config.payload,
                compression: config.compression,
                batch_records: config.batch_records,
                in_flight: config.in_flight,
                rate: config.rate_per_producer(),
                schedule_from: clock.origin(),
                clock,
                budget: budget.clone(),
                counters: Arc::clone(&context.counters),
                stop: CancellationToken::new(),
                generation: None,
                first_ack: None,
                acks: context.config.acks,
                kafka_producer: producer.kafka_producer.clone(),
                transaction_interval: (config.kafka_producer == KafkaProducerKind::Transactional)
                    .then_some(config.transaction_interval),
            };
            tokio::spawn(produce::run(spec))
        })
        .collect()
}

/// Waits for the producers; returns their merged figures and each partition's log end.
async fn join_producers(
    tasks: Vec<ProducerTask>,
) -> Result<(Recorder, HashMap<u32, u64>), BenchError> {
    let mut recorder = Recorder::default();
    let mut ends = HashMap::new();
    for task in tasks {
        let outcome = task.await.map_err(BenchError::task)??;
        recorder.merge(&outcome.recorder);
        for (partition, end) in outcome.log_ends {
            let entry = ends.entry(partition).or_insert(0);
            *entry = end.max(*entry);
        }
    }
    Ok((recorder, ends))
}

/// Stops the lease keepers and releases the leases.
async fn release(context: &RunContext, prepared: Vec<Prepared>) {
    for producer in prepared {
        producer.keepers.cancel();
        let Connection::Native(client) = producer.connection else {
            continue;
        };
        for (partition, lease) in producer.leases {
            // Best effort: an unreleased lease expires after its TTL anyway.
            let _ = client
                .release_lease(&context.topic, partition, lease.lease_id)
                .await;
        }
    }
}

async fn connect_consumers(context: &RunContext) -> Result<Vec<Connection>, BenchError> {
    let mut connections = Vec::new();
    for _ in 0..context.config.consumers {
        connections.push(match context.config.protocol {
            Protocol::Native => Connection::Native(context.connect().await?),
            Protocol::Kafka => Connection::Kafka(
                context
                    .connect_kafka()
                    .await?
                    .read_committed(context.config.read_committed),
            ),
        });
    }
    Ok(connections)
}

struct ConsumerPlan {
    latency: LatencyKind,
    /// Per partition: (start offset, where to wrap around).
    sources: HashMap<u32, (u64, Option<u64>)>,
    budget: Option<Arc<AtomicU64>>,
    ends: Option<watch::Receiver<Option<HashMap<u32, u64>>>>,
}

fn spawn_consumers(
    context: &RunContext,
    connections: Vec<Connection>,
    clock: Clock,
    plan: ConsumerPlan,
) -> (
    Vec<JoinHandle<Result<Recorder, BenchError>>>,
    CancellationToken,
) {
    let config = &context.config;
    let stop = CancellationToken::new();
    let tasks = connections
        .into_iter()
        .enumerate()
        .map(|(index, connection)| {
            let sources = consumer_partitions(index, config.consumers, config.topic_partitions())
                .into_iter()
                .map(|partition| {
                    let (start, wrap_at) =
                        plan.sources.get(&partition).copied().unwrap_or((0, None));
                    Source {
                        partition,
                        start,
                        wrap_at,
                    }
                })
                // Re-reading a preload (`consume`): a partition the preload left empty would
                // only hold long polls that end empty (and take the connection's request slots
                // from the partitions that have records).
                .filter(|source| plan.sources.is_empty() || source.wrap_at.is_some())
                .collect();
            tokio::spawn(consume::run(ConsumerSpec {
                connection,
                topic: Arc::clone(&context.topic),
                sources,
                record_bytes: config.record_bytes,
                fetch_bytes: config.fetch_bytes,
                latency: plan.latency,
                clock,
                budget: plan.budget.clone(),
                ends: plan.ends.clone(),
                counters: Arc::clone(&context.counters),
                stop: stop.clone(),
            }))
        })
        .collect();
    (tasks, stop)
}

async fn join_consumers(
    tasks: Vec<JoinHandle<Result<Recorder, BenchError>>>,
) -> Result<Recorder, BenchError> {
    let mut recorder = Recorder::default();
    for task in tasks {
        recorder.merge(&task.await.map_err(BenchError::task)??);
    }
    Ok(recorder)
}

/// Seconds from the end of the warm-up to the last counted event (producers: the last measured
/// acknowledgement, which may come after the deadline).
fn seconds_until_last(clock: &Clock, recorder: &Recorder) -> f64 {
    recorder.last.map_or(0.0, |last| {
        last.saturating_duration_since(clock.measure_from())
            .as_secs_f64()
    })
}

/// Seconds of a consumer window: up to the deadline in `--duration` runs, else up to the last
/// record counted.
fn consumer_seconds(clock: &Clock, recorder: &Recorder) -> f64 {
    match clock.deadline() {
        Some(deadline) => deadline
            .saturating_duration_since(clock.measure_from())
            .as_secs_f64(),
        None => seconds_until_last(clock, recorder),
    }
}

/// The CPU window of a run measured by `clock`.
fn cpu_window(context: &RunContext, clock: &Clock) -> CpuWindow {
    CpuWindow::start(
        context.server_process,
        clock.measure_from(),
        clock.deadline(),
        clock.timeline_interval(),
    )
}

/// Gives a report that keeps pictures (`--report`) the CPU over its window.
fn attach_cpu_points(report: &mut RoleReport, points: &[cpu::CpuPoint]) {
    if let Some(plots) = &mut report.plots {
        plots.cpu = points.to_vec();
    }
}

fn budget_of(stop: StopAfter) -> Option<Arc<AtomicU64>> {
    match stop {
        StopAfter::Records(records) => Some(Arc::new(AtomicU64::new(records))),
        StopAfter::Duration(_) => None,
    }
}

fn phase_length(config: &BenchConfig) -> Option<Duration> {
    match config.stop {
        StopAfter::Duration(duration) => Some(config.warmup + duration),
        StopAfter::Records(_) => None,
    }
}

/// Runs a benchmark and returns one report per role. `show_progress` draws a bar on stderr
/// (only when stderr is a terminal).
pub async fn run(config: BenchConfig, show_progress: bool) -> Result<Vec<RoleReport>, BenchError> {
    config.validate()?;
    if config.mode == Mode::Loopback {
        // No server, no topic: blocking sockets on threads of their own.
        let report = tokio::task::spawn_blocking(move || super::loopback::run(&config))
            .await
            .map_err(BenchError::task)??;
        return Ok(vec![report]);
    }
    let server = match &config.addr {
        Some(_) => None,
        None => {
            Some(InProcessServer::start(config.protocol, config.server_splice_min_bytes).await?)
        }
    };
    let (addr, kafka_addr) = match (&config.addr, &server) {
        (Some(addr), _) => (addr.clone(), config.kafka_addr.clone()),
        (None, Some(server)) => (
            server.server().addr().to_string(),
            (config.protocol == Protocol::Kafka).then(|| server.server().kafka_addr().to_string()),
        ),
        (None, None) => unreachable!("a server is started when no address is given"),
    };
    let server_process = match (&server, config.server_pid) {
        (Some(_), _) => ServerProcess::InProcess,
        (None, Some(pid)) => ServerProcess::Pid(pid),
        (None, None) => ServerProcess::Unknown,
    };
    let topic: Arc<str> =
        format!("bench-{}-{:08x}", config.mode.name(), rand::random::<u32>()).into();
    let context = RunContext {
        addr,
        kafka_addr,
        topic: Arc::clone(&topic),
        config: Arc::new(config),
        counters: Arc::new(Counters::default()),
        server_process,
    };
    let admin = context.connect().await?;
    let topic_config = TopicConfig {
        flush: context.config.flush,
        segment_bytes: context
            .config
            .segment_bytes
            .unwrap_or_else(|| context.config.default_segment_bytes()),
        retention_bytes: match context.config.mode {
            // The consumers re-read the preload from its start for the whole run.
            Mode::Consume => None,
            _ => context.config.retention_bytes,
        },
        ..TopicConfig::default()
    };
    let created = match context.config.replication_factor {
        None => {
            admin
                .create_topic(&topic, context.config.topic_partitions(), topic_config)
                .await
        }
        Some(factor) => {
            admin
                .create_replicated_topic(
                    &topic,
                    context.config.topic_partitions(),
                    topic_config,
                    crate::protocol::Replication {
                        factor,
                        min_insync: None,
                    },
                )
                .await
        }
    };
    created.map_err(|source| BenchError::Client {
        context: format!("create topic {topic}"),
        source,
    })?;
    let mut progress = Progress::new(!show_progress);
    let mut reports = run_mode(&context, &admin, &mut progress).await;
    progress.finish();
    if let Ok(reports) = &mut reports {
        let disk = server
            .as_ref()
            .and_then(|server| disk_bytes_per_value_byte(server.server(), &context));
        let wire = context.counters.wire_bytes_per_value_byte();
        for report in reports.iter_mut().filter(|report| report.role == "produce") {
            report.wire_bytes_per_value_byte = wire.map(round3);
            report.disk_bytes_per_value_byte = disk.map(round3);
        }
    }
    if !context.config.keep_topic {
        delete_bench_topic(&admin, &topic).await;
    }
    drop(server);
    reports
}

async fn run_mode(
    context: &RunContext,
    admin: &Client,
    progress: &mut Progress,
) -> Result<Vec<RoleReport>, BenchError> {
    Ok(match context.config.mode {
        Mode::Produce => vec![run_produce(context, progress).await?],
        Mode::Consume => vec![run_consume(context, admin, progress).await?],
        Mode::Both => run_both(context, progress).await?,
        Mode::Failover => vec![run_failover(context, progress).await?],
        Mode::Loopback => unreachable!("a loopback run starts no server (see run)"),
    })
}

/// Bytes the bench topic's partitions hold on disk (their segments' data, not preallocated
/// space) per byte of the values of the records they hold (`None` when they hold none or a
/// partition is not open here).
fn disk_bytes_per_value_byte(server: &TestServer, context: &RunContext) -> Option<f64> {
    let (mut disk, mut records) = (0u64, 0u64);
    for index in 0..context.config.topic_partitions() {
        let partition = server.broker().partition(&context.topic, index).ok()?;
        disk += partition.size_bytes();
        records += partition
            .log_end_offset()
            .saturating_sub(partition.log_start_offset());
    }
    let values = records * context.config.record_bytes as u64;
    (values > 0).then(|| disk as f64 / values as f64)
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// Deletes the topic the run created, with its data, whether the run succeeded or not: a run
/// writes gigabytes (a consume preload keeps all of it), and without this every run against a
/// long-lived server (`--addr`, `tools/cluster-bench`) left its topic behind until the disk, or a
/// tmpfs's memory, filled. A failure is reported on stderr and does not fail the run, whose
/// figures are already measured.
async fn delete_bench_topic(admin: &Client, topic: &str) {
    if let Err(error) = admin.delete_topic(topic).await {
        eprintln!("warning: could not delete the bench topic {topic}: {error} (delete it with `fencelog topic delete {topic}`)");
    }
}

async fn run_produce(
    context: &RunContext,
    progress: &mut Progress,
) -> Result<RoleReport, BenchError> {
    let config = &context.config;
    let prepared = prepare_producers(context).await?;
    let clock = Clock::for_run(config);
    let cpu = cpu_window(context, &clock);
    progress.phase(
        "produce",
        phase_length(config),
        Arc::clone(&context.counters),
    );
    let tasks = spawn_producers(context, &prepared, clock, budget_of(config.stop));
    let (recorder, _) = join_producers(tasks).await?;
    let (cpu, cpu_points) = cpu.finish_with_points(recorder.bytes).await;
    release(context, prepared).await;
    let seconds = seconds_until_last(&clock, &recorder);
    let mut report = RoleReport::new(
        "produce",
        "ack",
        config.producers,
        config,
        &recorder,
        seconds,
    );
    report.cpu = cpu;
    attach_cpu_points(&mut report, &cpu_points);
    Ok(report)
}

/// Writes the records `consume` reads: `--records` of them, or up to
/// [`config::CONSUME_PRELOAD_BYTES`] of values within the shorter of `--duration` and
/// [`config::CONSUME_PRELOAD_TIME`].
async fn preload(context: &RunContext, progress: &mut Progress) -> Result<(), BenchError> {
    let config = &context.config;
    let (records, stop) = match config.stop {
        StopAfter::Records(records) => (records, StopAfter::Records(records)),
        // At least one batch per partition, so that every partition has records to read.
        StopAfter::Duration(duration) => (
            (config::CONSUME_PRELOAD_BYTES / config.record_bytes as u64)
                .max(u64::from(config.topic_partitions()) * u64::from(config.batch_records))
                .max(1),
            StopAfter::Duration(duration.min(config::CONSUME_PRELOAD_TIME)),
        ),
    };
    let prepared = prepare_producers(context).await?;
    let clock = Clock::start(Duration::ZERO, stop);
    progress.phase("preload", None, Arc::clone(&context.counters));
    let budget = Some(Arc::new(AtomicU64::new(records)));
    let tasks = spawn_producers(context, &prepared, clock, budget);
    join_producers(tasks).await?;
    release(context, prepared).await;
    Ok(())
}

async fn run_consume(
    context: &RunContext,
    admin: &Client,
    progress: &mut Progress,
) -> Result<RoleReport, BenchError> {
    let config = &context.config;
    preload(context, progress).await?;
    let mut sources = HashMap::new();
    for partition in 0..config.topic_partitions() {
        let offsets = admin
            .list_offsets(&context.topic, partition)
            .await
            .map_err(|source| BenchError::Client {
                context: format!("list offsets of {}/{partition}", context.topic),
                source,
            })?;
        // Readers start over at the end of the preloaded records, so any duration can be
        // measured (from the page cache, as a consumer close behind its producers reads).
        let wrap_at = (offsets.latest > offsets.earliest).then_some(offsets.latest);
        sources.insert(partition, (offsets.earliest, wrap_at));
    }
    let clients = connect_consumers(context).await?;
    let clock = Clock::for_run(config);
    let cpu = cpu_window(context, &clock);
    progress.phase(
        "consume",
        phase_length(config),
        Arc::clone(&context.counters),
    );
    let plan = ConsumerPlan {
        latency: LatencyKind::RoundTrip,
        sources,
        budget: budget_of(config.stop),
        ends: None,
    };
    let (tasks, _stop) = spawn_consumers(context, clients, clock, plan);
    let recorder = join_consumers(tasks).await?;
    let mut report = RoleReport::new(
        "consume",
        "fetch_round_trip",
        config.consumers,
        config,
        &recorder,
        consumer_seconds(&clock, &recorder),
    );
    let (cpu, cpu_points) = cpu.finish_with_points(recorder.bytes).await;
    report.cpu = cpu;
    attach_cpu_points(&mut report, &cpu_points);
    Ok(report)
}

async fn run_both(
    context: &RunContext,
    progress: &mut Progress,
) -> Result<Vec<RoleReport>, BenchError> {
    let config = &context.config;
    let prepared = prepare_producers(context).await?;
    let clients = connect_consumers(context).await?;
    let (ends_sender, ends) = watch::channel(None);
    let clock = Clock::for_run(config);
    let cpu = cpu_window(context, &clock);
    progress.phase("both", phase_length(config), Arc::clone(&context.counters));
    let plan = ConsumerPlan {
        latency: LatencyKind::EndToEnd,
        sources: HashMap::new(),
        budget: None,
        // With --records, consumers read until they have everything the producers wrote.
        ends: matches!(config.stop, StopAfter::Records(_)).then_some(ends),
    };
    let (consumers, _stop) = spawn_consumers(context, clients, clock, plan);
    let producers = spawn_producers(context, &prepared, clock, budget_of(config.stop));
    let (produced, log_ends) = join_producers(producers).await?;
    let _ = ends_sender.send(Some(log_ends));
    let consumed = join_consumers(consumers).await?;
    let (window, cpu_points) = cpu.finish_with_points(0).await;
    release(context, prepared).await;
    let mut reports = vec![
        RoleReport::new(
            "produce",
            "ack",
            config.producers,
            config,
            &produced,
            seconds_until_last(&clock, &produced),
        ),
        RoleReport::new(
            "consume",
            "end_to_end",
            config.consumers,
            config,
            &consumed,
            consumer_seconds(&clock, &consumed),
        ),
    ];
    for report in &mut reports {
        report.cpu = window.map(|window| window.per_gb_of(report.bytes));
        attach_cpu_points(report, &cpu_points);
    }
    Ok(reports)
}

async fn run_failover(
    context: &RunContext,
    progress: &mut Progress,
) -> Result<RoleReport, BenchError> {
    let config = &context.config;
    let clock = Clock::for_run(config);
    let cpu = cpu_window(context, &clock);
    progress.phase(
        "failover",
        phase_length(config),
        Arc::clone(&context.counters),
    );
    let (recorder, failover) = failover::run(context, clock).await?;
    let (cpu, cpu_points) = cpu.finish_with_points(recorder.bytes).await;
    let seconds = seconds_until_last(&clock, &recorder);
    let mut report = RoleReport::new(
        "produce",
        "ack",
        config.topic_partitions() as usize,
        config,
        &recorder,
        seconds,
    );
    report.failover = Some(failover);
    report.cpu = cpu;
    attach_cpu_points(&mut report, &cpu_points);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producers_split_partitions_round_robin() {
        assert_eq!(producer_partitions(0, 2, 5), vec![0, 2, 4]);
        assert_eq!(producer_partitions(1, 2, 5), vec![1, 3]);
    }

    #[test]
    fn extra_consumers_share_partitions() {
        assert_eq!(consumer_partitions(0, 2, 4), vec![0, 2]);
        assert_eq!(consumer_partitions(3, 4, 2), vec![1]);
    }
}
