//! The nemesis's clients and what they were told: writers that contend for each partition's
//! lease and write single-record batches with `acks=all`, and a consumer per partition that
//! follows the log and the high watermark, on every topic of [`TOPICS`] (one per flush policy,
//! since their promises under a power cut differ). Everything they see goes into one
//! [`History`], which the checker compares with the logs afterwards.
//!
//! Every value is sent once and never again (a new attempt is a new value), so the checker can
//! hold each answer to the letter: an acknowledged value is in the log once at its offset, a
//! value answered "not written" ([`Outcome::NotWritten`]) is nowhere, an unknown one at most
//! once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fencelog::client::{Client, ClientError};
use fencelog::domain::FlushPolicy;
use fencelog::protocol::{Acks, Outcome};
use rand::rngs::StdRng;
use rand::Rng;

use crate::support::batch;

/// A topic of the run and the flush policy it is created with.
#[derive(Debug, Clone, Copy)]
pub struct TopicSpec {
    pub name: &'static str,
    pub flush: FlushPolicy,
}

/// The topics every run writes (replication factor 3, `acks=all`): one whose acknowledgements
/// are synced on every in-sync replica (nothing acknowledged is ever lost, whatever loses
/// power), one that never syncs on its own (nothing acknowledged is lost while at most one
/// broker at a time loses power; a power cut of every broker may lose the unsynced tail).
pub const TOPICS: [TopicSpec; 2] = [
    TopicSpec {
        name: "nemesis-always",
        flush: FlushPolicy::Always,
    },
    TopicSpec {
        name: "nemesis-never",
        flush: FlushPolicy::Never,
    },
];

/// Each topic's partitions.
pub const PARTITIONS: u32 = 2;

/// One partition of the run: its topic's name and its number.
pub type PartitionKey = (&'static str, u32);

/// Every partition of every topic of the run.
pub fn all_partitions() -> Vec<PartitionKey> {
    TOPICS
        .iter()
        .flat_map(|topic| (0..PARTITIONS).map(move |partition| (topic.name, partition)))
        .collect()
}

/// The flush policy of the topic `name`.
pub fn flush_of(name: &str) -> FlushPolicy {
    TOPICS
        .iter()
        .find(|topic| topic.name == name)
        .map(|topic| topic.flush)
        .expect("a topic of the run")
}

/// Writers contending for each partition's lease.
pub const WRITERS_PER_PARTITION: usize = 2;

/// The writers' lease TTL; they renew every third of it.
pub const LEASE_TTL: Duration = Duration::from_secs(3);

/// What a produce was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Acknowledged at this offset.
    Acked { offset: u64 },
    /// An error whose outcome is [`Outcome::Written`] (no offset given).
    Written(String),
    /// An error whose outcome is [`Outcome::NotWritten`]: the value must not be in the log.
    NotWritten(String),
    /// An error whose outcome is [`Outcome::Unknown`]: at most once in the log.
    Unknown(String),
}

/// One produce of one value.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub topic: &'static str,
    pub partition: u32,
    pub value: String,
    /// The lease epoch in the batch header.
    pub epoch: u64,
    /// Since the start of the run.
    pub sent: Duration,
    pub returned: Duration,
    pub answer: Answer,
}

/// One lease grant a writer received.
#[derive(Debug, Clone)]
pub struct Grant {
    pub topic: &'static str,
    pub partition: u32,
    pub holder: String,
    pub sent: Duration,
    pub returned: Duration,
    pub epoch: u64,
}

/// One record a consumer read, and the high watermark of the answer it came in.
#[derive(Debug, Clone)]
pub struct Read {
    pub topic: &'static str,
    pub partition: u32,
    pub offset: u64,
    pub value: String,
    pub epoch: u64,
    pub high_watermark: u64,
    /// When the answer came (since the start of the run).
    pub at: Duration,
}

/// A fetch answer whose high watermark was below one the same consumer saw before (or that
/// answered its position out of range below it).
#[derive(Debug, Clone)]
pub struct WatermarkRegression {
    pub topic: &'static str,
    pub partition: u32,
    pub before: u64,
    /// When `before` was last seen.
    pub before_at: Duration,
    pub after: u64,
    pub at: Duration,
}

/// Everything the clients were told.
#[derive(Debug, Default)]
pub struct History {
    pub attempts: Vec<Attempt>,
    pub grants: Vec<Grant>,
    pub reads: Vec<Read>,
    pub regressions: Vec<WatermarkRegression>,
    /// Fetch errors by message prefix (for the report).
    pub fetch_errors: usize,
    pub lease_failures: usize,
}

/// What the writers and consumers share with the run.
pub struct Shared {
    pub history: Mutex<History>,
    stop: AtomicBool,
    start: Instant,
}

impl Shared {
    pub fn new(start: Instant) -> Arc<Shared> {
        Arc::new(Shared {
            history: Mutex::new(History::default()),
            stop: AtomicBool::new(false),
            start,
        })
    }

    /// Time since the start of the run.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn record(&self, change: impl FnOnce(&mut History)) {
        change(&mut self.history.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// When `topic`/`partition` last had a produce acknowledged.
    pub fn last_ack(&self, (topic, partition): PartitionKey) -> Option<Duration> {
        let history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        history
            .attempts
            .iter()
            .filter(|a| {
                a.topic == topic
                    && a.partition == partition
                    && matches!(a.answer, Answer::Acked { .. })
            })
            .map(|a| a.returned)
            .max()
    }

    /// The highest lease epoch granted on `topic`/`partition` so far.
    pub fn highest_grant(&self, (topic, partition): PartitionKey) -> Option<u64> {
        let history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        history
            .grants
            .iter()
            .filter(|g| g.topic == topic && g.partition == partition)
            .map(|g| g.epoch)
            .max()
    }

    /// Records a produce made outside the writers (the nemesis's stale writer).
    pub fn record_attempt(&self, attempt: Attempt) {
        self.record(|h| h.attempts.push(attempt));
    }
}

/// A writer: takes `partition`'s lease as `holder`, writes a burst of values under it (renewing
/// it every third of its TTL), then releases it or lets it lapse, so that the writers of a
/// partition take turns and each turn raises the epoch. A fencing answer ends the turn.
pub async fn writer(
    shared: Arc<Shared>,
    client: Client,
    (topic, partition): PartitionKey,
    holder: String,
    mut rng: StdRng,
) {
    let mut sequence = 0u64;
    while !shared.stopping() {
        let sent = shared.now();
        let lease = match client
            .acquire_lease(topic, partition, &holder, LEASE_TTL)
            .await
        {
            Ok(lease) => lease,
            Err(_) => {
                shared.record(|h| h.lease_failures += 1);
                tokio::time::sleep(Duration::from_millis(rng.gen_range(50..300))).await;
                continue;
            }
        };
        let returned = shared.now();
        shared.record(|h| {
            h.grants.push(Grant {
                topic,
                partition,
                holder: holder.clone(),
                sent,
                returned,
                epoch: lease.epoch,
            })
        });
        let burst = rng.gen_range(10..150);
        let mut renewed = Instant::now();
        for _ in 0..burst {
            if shared.stopping() {
                break;
            }
            if renewed.elapsed() >= LEASE_TTL / 3 {
                match client.renew_lease(topic, partition, lease.lease_id).await {
                    Ok(_) => renewed = Instant::now(),
                    // Lost, or its leader unreachable: take a new lease (once this one lapses).
                    Err(_) => break,
                }
            }
            sequence += 1;
            let value = format!("{holder}-{sequence}");
            let sent = shared.now();
            let result = client
                .produce_with_acks(topic, partition, batch(lease.epoch, &value), Acks::All)
                .await;
            let returned = shared.now();
            let (answer, turn_over) = match result {
                Ok(ack) => (
                    Answer::Acked {
                        offset: ack.base_offset,
                    },
                    false,
                ),
                Err(error) => (classify(&error), error.is_fencing()),
            };
            let failed = !matches!(answer, Answer::Acked { .. });
            shared.record(|h| {
                h.attempts.push(Attempt {
                    topic,
                    partition,
                    value,
                    epoch: lease.epoch,
                    sent,
                    returned,
                    answer,
                })
            });
            if turn_over {
                break;
            }
            if failed {
                tokio::time::sleep(Duration::from_millis(rng.gen_range(20..150))).await;
            }
        }
        if rng.gen_bool(0.7) {
            let _ = client.release_lease(topic, partition, lease.lease_id).await;
        }
    }
}

/// The error's outcome, by the client's one table ([`ClientError::outcome`]).
pub fn classify(error: &ClientError) -> Answer {
    let text = error.to_string();
    match error.outcome() {
        Outcome::Written => Answer::Written(text),
        Outcome::NotWritten => Answer::NotWritten(text),
        Outcome::Unknown => Answer::Unknown(text),
    }
}

/// How long a consumer's position may stay past the high watermark before it takes the log to
/// have been cut (a power cut of every broker) and resets to the watermark.
const RESET_AFTER: Duration = Duration::from_secs(5);

/// A consumer of `topic`/`partition` from offset 0: records every record it reads and every
/// high watermark that went back below one it saw earlier. Told for [`RESET_AFTER`] that its
/// position is out of range above the high watermark (a power cut of every broker lost a `flush
/// never` tail, whose offsets are given out again), it records that as a regression and goes on
/// from the high watermark, as a Kafka consumer resets its position.
pub async fn consumer(shared: Arc<Shared>, client: Client, (topic, partition): PartitionKey) {
    let mut next = 0u64;
    let mut highest = 0u64;
    let mut highest_at = Duration::ZERO;
    let mut out_of_range_since: Option<Instant> = None;
    while !shared.stopping() {
        match client
            .fetch(topic, partition, next, 1 << 20, Duration::from_millis(500))
            .await
        {
            Ok(fetched) => {
                out_of_range_since = None;
                let at = shared.now();
                let high_watermark = fetched.high_watermark;
                shared.record(|h| {
                    if high_watermark < highest {
                        h.regressions.push(WatermarkRegression {
                            topic,
                            partition,
                            before: highest,
                            before_at: highest_at,
                            after: high_watermark,
                            at,
                        });
                    }
                    for record in &fetched.records {
                        h.reads.push(Read {
                            topic,
                            partition,
                            offset: record.offset,
                            value: String::from_utf8_lossy(record.value.as_deref().unwrap_or(b""))
                                .into_owned(),
                            epoch: record.epoch,
                            high_watermark,
                            at,
                        });
                    }
                });
                if high_watermark >= highest {
                    highest = high_watermark;
                    highest_at = at;
                }
                if let Some(last) = fetched.records.last() {
                    next = last.offset + 1;
                }
            }
            // A new leader's high watermark lags until its followers fetch: wait that out, and
            // reset only when the position stays past the watermark (the log was cut).
            Err(ClientError::OffsetOutOfRange { latest, .. })
                if latest < next
                    && out_of_range_since.is_none_or(|t| t.elapsed() < RESET_AFTER) =>
            {
                out_of_range_since.get_or_insert_with(Instant::now);
                shared.record(|h| h.fetch_errors += 1);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(ClientError::OffsetOutOfRange { latest, .. }) if latest < next => {
                out_of_range_since = None;
                let at = shared.now();
                shared.record(|h| {
                    h.fetch_errors += 1;
                    h.regressions.push(WatermarkRegression {
                        topic,
                        partition,
                        before: highest,
                        before_at: highest_at,
                        after: latest,
                        at,
                    })
                });
                next = latest;
                highest = latest;
                highest_at = at;
            }
            Err(_) => {
                shared.record(|h| h.fetch_errors += 1);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
