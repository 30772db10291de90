//! The producer: a partition's writer. It holds the lease (renewing it in the background),
//! gathers records into batches stamped with its epoch, and stops for good once fenced.
//!
//! By default it is **idempotent**: it obtains a producer id from the server and numbers its
//! records, so every batch is appended exactly once however often it is sent. That makes retries
//! safe: when a connection breaks or a request times out, the producer reconnects and resends
//! every batch not yet acknowledged, in order; the server answers the ones it already has with
//! their original offsets. It also makes failure ordered: once a batch fails for good, no later
//! batch of the producer lands (the server refuses the gap, the producer sends nothing more)
//! until [`Producer::resume`] is called.
//!
//! This file is the handle, [`Producer`], and what it shares with its two background tasks (the
//! [`Shared`] state, the [`Command`]s it queues): the batching task (`batcher`, with the batch
//! bookkeeping in `batches`) and the lease keeper (`lease_keeper`) each have their own file, as do
//! the settings (`config`, `builder`) and [`SendError`]. The shared state stays here so that its
//! fields stay private to the producer module.

mod batcher;
mod batches;
mod builder;
mod config;
mod lease_keeper;
mod send_error;

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;

use super::{Client, ClientError, Lease, ProducerId};
use crate::batch::now_ms;

pub use builder::ProducerBuilder;
pub use config::{
    ProducerConfig, DEFAULT_BATCH_BYTES, DEFAULT_BATCH_RECORDS, DEFAULT_DELIVERY_TIMEOUT,
    DEFAULT_LINGER, DEFAULT_MAX_PENDING_RECORDS, DEFAULT_PRODUCER_MAX_IN_FLIGHT,
};
pub use send_error::SendError;

use batcher::Batcher;

type RecordReply = oneshot::Sender<Result<u64, SendError>>;

/// What the handle queues for the batching task, in `send` order.
enum Command {
    Record {
        key: Option<Bytes>,
        value: Bytes,
        timestamp: i64,
        reply: RecordReply,
        /// A unit of `max_pending_records`, held until the record is answered.
        permit: OwnedSemaphorePermit,
    },
    Flush(oneshot::Sender<()>),
    Resume(oneshot::Sender<Result<(), ClientError>>),
}

/// State shared by the handle, its send futures and its background tasks.
struct Shared {
    topic: String,
    partition: u32,
    epoch: u64,
    /// The error that killed the producer; set once, never cleared.
    dead: OnceLock<ClientError>,
    /// Wakes the batching task when `dead` is set by the lease keeper.
    died: Notify,
    /// Turns true when `dead` is set: what [`Producer::lost`] waits on.
    lost: watch::Sender<bool>,
    /// Transient failures after which the unacknowledged batches were resent.
    resends: AtomicU64,
    /// Batches resent, in all.
    batches_resent: AtomicU64,
}

/// What a producer has had to do so far beyond sending each batch once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProducerStats {
    /// Transient failures without an answer (a broken connection, a timeout) after which the
    /// unacknowledged batches were resent. A refusal that says nothing was written (a
    /// NOT_LEADER redirect) is not counted: following it is ordinary routing.
    pub resends: u64,
    /// Batches resent after those failures, in all (the server appended each once).
    pub batches_resent: u64,
}

impl Shared {
    fn kill(&self, error: ClientError) {
        if self.dead.set(error).is_ok() {
            if let Some(error) = self.dead.get() {
                tracing::warn!(topic = %self.topic, partition = self.partition, epoch = self.epoch, %error, "producer stopped");
            }
            self.died.notify_one();
            self.lost.send_replace(true);
        }
    }

    fn dead_or(&self, otherwise: ClientError) -> ClientError {
        self.dead.get().cloned().unwrap_or(otherwise)
    }
}

/// The writer of one partition.
///
/// [`Producer::builder`] (or [`Producer::acquire`]) takes the partition's lease and renews it in
/// the background every third of its TTL. [`send`](Producer::send) queues a record into the
/// current batch; a batch is sent when it is full or its first record has waited
/// [`linger`](ProducerConfig::linger), and each send resolves to its record's offset once the
/// batch is acknowledged.
///
/// Failures, from the least to the most serious:
/// * **Transient** (the connection broke, a request timed out, the server was busy): an
///   idempotent producer resends every unacknowledged batch, in order, on a new connection,
///   until [`delivery_timeout`](ProducerConfig::delivery_timeout); nothing is duplicated and
///   the sends never see the failure.
/// * **A batch refused for good** (too large, invalid): its sends fail with the error and their
///   records ([`SendError`]); every later send fails with [`ClientError::ProducerHalted`] and
///   nothing later is appended, until [`resume`](Producer::resume).
/// * **Fenced, lease lost or expired**: the producer is dead. Every pending and future send
///   fails with that error, and [`lost`](Producer::lost) resolves: leader work must stop. To
///   write again, build a new producer (a new epoch). A batch on the wire when the producer
///   stopped for a reason other than its own answer fails with
///   [`ClientError::OutcomeUnknown`]: it may have landed.
///
/// Every failed send says whether its record is in the log ([`SendError::outcome`]: written,
/// not written, unknown, from one table, `ErrorCode::outcome`); an unknown outcome is never
/// reported as not written. A batch written under an epoch that was fenced before its answer
/// came back is answered with its offsets on the resend, and its sends succeed.
///
/// Dropping the producer stops the renewals (the lease then expires after its TTL) but still
/// sends the records already queued; [`close`](Producer::close) flushes and releases the lease
/// at once.
///
/// ```
/// use std::time::Duration;
/// use fencelog::client::{Client, Producer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = fencelog::testing::TestServer::start().await?;
/// let client = Client::connect(server.addr()).await?;
/// client.create_topic("events", 1, Default::default()).await?;
///
/// let producer = Producer::builder(client.clone(), "events", 0)
///     .lease("writer-1", Duration::from_secs(10))
///     .build()
///     .await?;
/// // Many sends in flight at once share batches.
/// let sends: Vec<_> = (0..100).map(|i| producer.send(None, format!("event {i}"))).collect();
/// let offsets = futures::future::try_join_all(sends).await?;
/// assert_eq!(offsets, (0..100).collect::<Vec<u64>>());
/// producer.close().await?;
/// # Ok(()) }
/// ```
pub struct Producer {
    shared: Arc<Shared>,
    queue: mpsc::UnboundedSender<Command>,
    room: Arc<Semaphore>,
    client: Client,
    lease: Option<Lease>,
    keeper: Option<AbortHandle>,
    producer_id: Option<ProducerId>,
}

impl fmt::Debug for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("topic", &self.shared.topic)
            .field("partition", &self.shared.partition)
            .field("epoch", &self.shared.epoch)
            .field("producer_id", &self.producer_id)
            .field("dead", &self.shared.dead.get())
            .finish_non_exhaustive()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
        }
    }
}

impl Producer {
    /// A builder for a producer of `topic/partition`.
    pub fn builder(client: Client, topic: impl Into<String>, partition: u32) -> ProducerBuilder {
        ProducerBuilder::new(client, topic.into(), partition)
    }

    /// Acquires the lease of `topic/partition` for `holder` and starts the producer, renewing
    /// the lease every third of its granted TTL. The same as the [builder](Self::builder) with
    /// [`lease`](ProducerBuilder::lease) and [`config`](ProducerBuilder::config).
    pub async fn acquire(
        client: Client,
        topic: impl Into<String>,
        partition: u32,
        holder: &str,
        ttl: Duration,
        config: ProducerConfig,
    ) -> Result<Producer, ClientError> {
        Self::builder(client, topic, partition)
            .lease(holder, ttl)
            .config(config)
            .build()
            .await
    }

    /// A producer writing under an `epoch` obtained elsewhere (another process holds and renews
    /// the lease, as with `fencelog lease acquire` + `fencelog produce --epoch`). It manages no
    /// lease; the fence still rejects its batches once a newer epoch exists. The same as the
    /// [builder](Self::builder) with [`epoch`](ProducerBuilder::epoch).
    pub async fn with_epoch(
        client: Client,
        topic: impl Into<String>,
        partition: u32,
        epoch: u64,
        config: ProducerConfig,
    ) -> Result<Producer, ClientError> {
        Self::builder(client, topic, partition)
            .epoch(epoch)
            .config(config)
            .build()
            .await
    }

    fn start(
        client: Client,
        topic: String,
        partition: u32,
        epoch: u64,
        producer_id: Option<ProducerId>,
        config: ProducerConfig,
    ) -> Producer {
        let shared = Arc::new(Shared {
            topic,
            partition,
            epoch,
            dead: OnceLock::new(),
            died: Notify::new(),
            lost: watch::Sender::new(false),
            resends: AtomicU64::new(0),
            batches_resent: AtomicU64::new(0),
        });
        // Unbounded, so that `send` can queue synchronously (fixing the order at the call);
        // `room` bounds what it holds.
        let (queue, commands) = mpsc::unbounded_channel();
        let room = Arc::new(Semaphore::new(
            config.max_pending_records.min(Semaphore::MAX_PERMITS),
        ));
        tokio::spawn(
            Batcher::new(client.clone(), Arc::clone(&shared), producer_id, config).run(commands),
        );
        Producer {
            shared,
            queue,
            room,
            client,
            lease: None,
            keeper: None,
            producer_id,
        }
    }

    /// The epoch stamped into every batch.
    pub fn epoch(&self) -> u64 {
        self.shared.epoch
    }

    /// The lease this producer holds, if it acquired one.
    pub fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// The producer id its batches carry (idempotent producers), as first obtained.
    pub fn producer_id(&self) -> Option<ProducerId> {
        self.producer_id
    }

    /// The topic written to.
    pub fn topic(&self) -> &str {
        &self.shared.topic
    }

    /// The partition written to.
    pub fn partition(&self) -> u32 {
        self.shared.partition
    }

    /// What the producer has had to do so far beyond sending each batch once.
    pub fn stats(&self) -> ProducerStats {
        ProducerStats {
            resends: self.shared.resends.load(Ordering::Relaxed),
            batches_resent: self.shared.batches_resent.load(Ordering::Relaxed),
        }
    }

    /// The error that stopped the producer, if it was fenced or lost its lease.
    pub fn error(&self) -> Option<ClientError> {
        self.shared.dead.get().cloned()
    }

    /// Resolves, with the reason, the moment the producer may no longer write: fenced by a newer
    /// epoch, its lease lost, or not renewed for a whole TTL. Leader work must stop then: that
    /// is the point of a lease. Never resolves while the producer may write.
    ///
    /// ```no_run
    /// # async fn leader(producer: fencelog::client::Producer) {
    /// tokio::select! {
    ///     reason = producer.lost() => eprintln!("no longer the writer: {reason}"),
    ///     () = async { /* leader work */ } => {}
    /// }
    /// # }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ClientError> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        let mut lost = self.shared.lost.subscribe();
        async move {
            // The sender lives in `shared`, which this future holds: it is never dropped.
            let _ = lost.wait_for(|lost| *lost).await;
            shared.dead_or(ClientError::Closed)
        }
    }

    /// Queues a record and resolves to its offset once its batch is acknowledged.
    ///
    /// The record is timestamped and queued by the call itself, before the future is polled,
    /// so records are appended in the order of the `send` calls: create many sends and await
    /// them together (`try_join_all`, `FuturesOrdered`) to fill batches; awaiting each in turn
    /// sends one record per batch.
    ///
    /// Backpressure: at most [`max_pending_records`](ProducerConfig::max_pending_records) sent
    /// records may await their acknowledgement. A send beyond that waits for room when its
    /// future is first polled, and is queued then, so under backpressure the order is that of
    /// first polls.
    ///
    /// On failure the [`SendError`] gives the record back, with the producer's fatal error
    /// ([`ClientError::Fenced`] and co.), its batch's error, or
    /// [`ClientError::ProducerHalted`] for a record behind a failed batch.
    pub fn send(
        &self,
        key: Option<Bytes>,
        value: impl Into<Bytes>,
    ) -> impl Future<Output = Result<u64, SendError>> + Send + 'static {
        let queue = self.queue.clone();
        let shared = Arc::clone(&self.shared);
        let room = Arc::clone(&self.room);
        let mut record = Some((key, value.into(), now_ms()));
        let (reply, offset) = oneshot::channel();
        let mut reply = Some(reply);
        if self.shared.dead.get().is_none() {
            if let Ok(permit) = Arc::clone(&room).try_acquire_owned() {
                if let (Some((key, value, timestamp)), Some(reply)) = (record.take(), reply.take())
                {
                    let _ = queue.send(Command::Record {
                        key,
                        value,
                        timestamp,
                        reply,
                        permit,
                    });
                }
            }
        }
        async move {
            if let (Some((key, value, timestamp)), Some(reply)) = (record, reply) {
                // Not queued by the call: dead, or no room (wait for it).
                let give_back = SendError::new;
                if let Some(error) = shared.dead.get() {
                    return Err(give_back(error.clone(), key, value));
                }
                let Ok(permit) = room.acquire_owned().await else {
                    return Err(give_back(shared.dead_or(ClientError::Closed), key, value));
                };
                let command = Command::Record {
                    key,
                    value,
                    timestamp,
                    reply,
                    permit,
                };
                if let Err(mpsc::error::SendError(command)) = queue.send(command) {
                    let Command::Record { key, value, .. } = command else {
                        unreachable!("a record command was sent");
                    };
                    return Err(give_back(shared.dead_or(ClientError::Closed), key, value));
                }
            }
            offset.await.unwrap_or_else(|_| {
                Err(SendError::new(
                    shared.dead_or(ClientError::Closed),
                    None,
                    Bytes::new(),
                ))
            })
        }
    }

    /// Sends the current batch now and waits until every record queued before this call is
    /// acknowledged or failed. Fails with the fatal error if the producer is dead.
    pub async fn flush(&self) -> Result<(), ClientError> {
        let (done, flushed) = oneshot::channel();
        if self.queue.send(Command::Flush(done)).is_ok() {
            let _ = flushed.await;
        }
        match self.shared.dead.get() {
            Some(error) => Err(error.clone()),
            None => Ok(()),
        }
    }

    /// After a batch failed for good ([`ClientError::ProducerHalted`] for the sends behind it),
    /// starts a new producer session so that records sent after this call are appended again.
    /// What to do with the failed records (the [`SendError`]s hold them) depends on their
    /// [`outcome`](SendError::outcome): not written, send them again if they should still be
    /// written; written, they are in the log once; unknown, read the partition first (a resend
    /// in the new session is a new write). Does nothing if the producer is not halted; fails
    /// if it is dead.
    pub async fn resume(&self) -> Result<(), ClientError> {
        let (done, resumed) = oneshot::channel();
        self.queue
            .send(Command::Resume(done))
            .map_err(|_| self.shared.dead_or(ClientError::Closed))?;
        resumed
            .await
            .unwrap_or_else(|_| Err(self.shared.dead_or(ClientError::Closed)))
    }

    /// Flushes, stops renewing and releases the lease so another writer can take over at once.
    /// Returns the fatal error instead if the producer was fenced (there is nothing to release).
    pub async fn close(mut self) -> Result<(), ClientError> {
        let flushed = self.flush().await;
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
        }
        flushed?;
        if let Some(lease) = self.lease.take() {
            self.client
                .release_lease(&self.shared.topic, self.shared.partition, lease.lease_id)
                .await?;
        }
        Ok(())
    }
}
