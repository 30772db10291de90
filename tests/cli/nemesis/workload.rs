//! The nemesis's clients and what they were told: writers that contend for each partition's
//! lease and write single-record batches with `acks=all`, and a consumer per partition that
//! follows the log and the high watermark. Everything they see goes into one [`History`], which
//! the checker compares with the logs afterwards.
//!
//! Every value is sent once and never again (a new attempt is a new value), so the checker can
//! hold each answer to the letter: an acknowledged value is in the log once at its offset, a
//! value answered "not written" ([`Outcome::NotWritten`]) is nowhere, an unknown one at most
//! once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fencelog::client::{Client, ClientError};
use fencelog::protocol::{Acks, Outcome};
use rand::rngs::StdRng;
use rand::Rng;

use crate::support::batch;

/// The topic every writer writes.
pub const TOPIC: &str = "nemesis";

/// Its partitions.
pub const PARTITIONS: u32 = 2;

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
    pub partition: u32,
    pub holder: String,
    pub sent: Duration,
    pub returned: Duration,
    pub epoch: u64,
}

/// One record a consumer read, and the high watermark of the answer it came in.
#[derive(Debug, Clone)]
pub struct Read {
    pub partition: u32,
    pub offset: u64,
    pub value: String,
    pub epoch: u64,
    pub high_watermark: u64,
}

/// A fetch answer whose high watermark was below one the same consumer saw before.
#[derive(Debug, Clone)]
pub struct WatermarkRegression {
    pub partition: u32,
    pub before: u64,
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

    /// When `partition` last had a produce acknowledged.
    pub fn last_ack(&self, partition: u32) -> Option<Duration> {
        let history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        history
            .attempts
            .iter()
            .filter(|a| a.partition == partition && matches!(a.answer, Answer::Acked { .. }))
            .map(|a| a.returned)
            .max()
    }
}

/// A writer: takes `partition`'s lease as `holder`, writes a burst of values under it (renewing
/// it every third of its TTL), then releases it or lets it lapse, so that the writers of a
/// partition take turns and each turn raises the epoch. A fencing answer ends the turn.
pub async fn writer(
    shared: Arc<Shared>,
    client: Client,
    partition: u32,
    holder: String,
    mut rng: StdRng,
) {
    let mut sequence = 0u64;
    while !shared.stopping() {
        let sent = shared.now();
        let lease = match client
            .acquire_lease(TOPIC, partition, &holder, LEASE_TTL)
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
                match client.renew_lease(TOPIC, partition, lease.lease_id).await {
                    Ok(_) => renewed = Instant::now(),
                    // Lost, or its leader unreachable: take a new lease (once this one lapses).
                    Err(_) => break,
                }
            }
            sequence += 1;
            let value = format!("{holder}-{sequence}");
            let sent = shared.now();
            let result = client
                .produce_with_acks(TOPIC, partition, batch(lease.epoch, &value), Acks::All)
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
            let _ = client.release_lease(TOPIC, partition, lease.lease_id).await;
        }
    }
}

/// The error's outcome, by the client's one table ([`ClientError::outcome`]).
fn classify(error: &ClientError) -> Answer {
    let text = error.to_string();
    match error.outcome() {
        Outcome::Written => Answer::Written(text),
        Outcome::NotWritten => Answer::NotWritten(text),
        Outcome::Unknown => Answer::Unknown(text),
    }
}

/// A consumer of `partition` from offset 0: records every record it reads and every high
/// watermark that went back below one it saw earlier.
pub async fn consumer(shared: Arc<Shared>, client: Client, partition: u32) {
    let mut next = 0u64;
    let mut highest = 0u64;
    while !shared.stopping() {
        match client
            .fetch(TOPIC, partition, next, 1 << 20, Duration::from_millis(500))
            .await
        {
            Ok(fetched) => {
                let at = shared.now();
                let high_watermark = fetched.high_watermark;
                shared.record(|h| {
                    if high_watermark < highest {
                        h.regressions.push(WatermarkRegression {
                            partition,
                            before: highest,
                            after: high_watermark,
                            at,
                        });
                    }
                    for record in &fetched.records {
                        h.reads.push(Read {
                            partition,
                            offset: record.offset,
                            value: String::from_utf8_lossy(record.value.as_deref().unwrap_or(b""))
                                .into_owned(),
                            epoch: record.epoch,
                            high_watermark,
                        });
                    }
                });
                highest = highest.max(high_watermark);
                if let Some(last) = fetched.records.last() {
                    next = last.offset + 1;
                }
            }
            Err(_) => {
                shared.record(|h| h.fetch_errors += 1);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
