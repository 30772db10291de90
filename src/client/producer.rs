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

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::{Client, ClientError, Lease, ProduceAck, ProducerId};
use crate::batch::{add_sequence, now_ms, BatchBuilder, MAX_RECORDS_PER_BATCH};
use crate::domain::PRODUCER_BATCH_WINDOW;

/// Default time a record may take from `send` to its acknowledgement, retries included.
pub const DEFAULT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);
/// First pause before resending after a retriable failure; it doubles up to
/// [`MAX_RETRY_BACKOFF`].
pub const INITIAL_RETRY_BACKOFF: Duration = Duration::from_millis(50);
/// Longest pause between resends.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(1);

/// How a [`Producer`] forms batches.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// How long the first record of a batch waits for company before the batch is sent.
    pub linger: Duration,
    /// A batch is sent once it holds this many records.
    pub batch_records: usize,
    /// A batch is sent before it would grow past this many bytes (a single larger record still
    /// goes out, alone).
    pub batch_bytes: usize,
    /// Most produce requests in flight at once (pipelining). Batches are put on the wire one
    /// after another and the server appends the produces of a connection in the order it
    /// receives them, so batches land in send order whatever this value. An idempotent producer
    /// allows at most [`PRODUCER_BATCH_WINDOW`] (the batches the server remembers per producer).
    pub max_in_flight: usize,
    /// Most records sent but not yet acknowledged; further sends wait for room (backpressure).
    pub max_pending_records: usize,
    /// Number records with a producer id so that retries are safe and a failed batch stops the
    /// ones behind it (the default). Without it batches carry no producer id, are never
    /// resent, and a failed batch does not stop the batches already in flight behind it.
    pub idempotent: bool,
    /// How long a record may take from its batch's closing to its acknowledgement, resends
    /// included; then it fails with the last error.
    pub delivery_timeout: Duration,
    /// When a batch counts as acknowledged; `None` (the default): `all` on a partition the
    /// client knows is replicated, else the broker's default (the same rule).
    pub acks: Option<crate::protocol::Acks>,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            linger: Duration::from_millis(5),
            batch_records: 1000,
            batch_bytes: 1024 * 1024,
            max_in_flight: 4,
            max_pending_records: 100_000,
            idempotent: true,
            delivery_timeout: DEFAULT_DELIVERY_TIMEOUT,
            acks: None,
        }
    }
}

/// A send that failed, with its record given back so the caller can decide what to do with it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{error}")]
pub struct SendError {
    /// Why the record was not acknowledged.
    #[source]
    pub error: ClientError,
    /// The record, boxed so that a `Result` of a send stays small.
    record: Box<(Option<Bytes>, Bytes)>,
}

impl SendError {
    fn new(error: ClientError, key: Option<Bytes>, value: Bytes) -> Self {
        Self {
            error,
            record: Box::new((key, value)),
        }
    }

    /// The record's key.
    pub fn key(&self) -> Option<&Bytes> {
        self.record.0.as_ref()
    }

    /// The record's value.
    pub fn value(&self) -> &Bytes {
        &self.record.1
    }

    /// The record, `(key, value)`, to send again or keep.
    pub fn into_record(self) -> (Option<Bytes>, Bytes) {
        *self.record
    }

    /// The error alone.
    pub fn into_error(self) -> ClientError {
        self.error
    }
}

impl From<SendError> for ClientError {
    fn from(error: SendError) -> Self {
        error.error
    }
}

type RecordReply = oneshot::Sender<Result<u64, SendError>>;

/// A queued record's way back to its sender: the record itself (to give back on failure), where
/// its outcome goes, and its unit of `max_pending_records`.
struct Reply {
    key: Option<Bytes>,
    value: Bytes,
    sender: RecordReply,
    _permit: OwnedSemaphorePermit,
}

impl Reply {
    fn succeed(self, offset: u64) {
        let _ = self.sender.send(Ok(offset));
    }

    fn fail(self, error: ClientError) {
        let _ = self
            .sender
            .send(Err(SendError::new(error, self.key, self.value)));
    }
}

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
    /// Transient failures (a broken connection, a timeout) after which the unacknowledged
    /// batches were resent.
    pub resends: u64,
    /// Batches resent, in all (the server appended each once).
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

/// How a producer gets its right to write.
#[derive(Debug, Clone)]
enum Authority {
    /// Acquire the lease as `holder` for `ttl` and renew it.
    Lease { holder: String, ttl: Duration },
    /// Write under an epoch obtained elsewhere.
    Epoch(u64),
}

/// Builds a [`Producer`]: `Producer::builder(client, topic, partition)`, then either
/// [`lease`](Self::lease) or [`epoch`](Self::epoch), the batching settings, and
/// [`build`](Self::build).
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct ProducerBuilder {
    client: Client,
    topic: String,
    partition: u32,
    authority: Option<Authority>,
    config: ProducerConfig,
}

impl ProducerBuilder {
    /// Acquire the partition's lease as `holder`, renewed every third of `ttl`.
    pub fn lease(mut self, holder: impl Into<String>, ttl: Duration) -> Self {
        self.authority = Some(Authority::Lease {
            holder: holder.into(),
            ttl,
        });
        self
    }

    /// Write under `epoch`, a lease held and renewed elsewhere.
    pub fn epoch(mut self, epoch: u64) -> Self {
        self.authority = Some(Authority::Epoch(epoch));
        self
    }

    /// Every batching setting at once.
    pub fn config(mut self, config: ProducerConfig) -> Self {
        self.config = config;
        self
    }

    /// See [`ProducerConfig::linger`].
    pub fn linger(mut self, linger: Duration) -> Self {
        self.config.linger = linger;
        self
    }

    /// See [`ProducerConfig::batch_records`].
    pub fn batch_records(mut self, records: usize) -> Self {
        self.config.batch_records = records;
        self
    }

    /// See [`ProducerConfig::batch_bytes`].
    pub fn batch_bytes(mut self, bytes: usize) -> Self {
        self.config.batch_bytes = bytes;
        self
    }

    /// See [`ProducerConfig::max_in_flight`].
    pub fn max_in_flight(mut self, requests: usize) -> Self {
        self.config.max_in_flight = requests;
        self
    }

    /// See [`ProducerConfig::max_pending_records`].
    pub fn max_pending_records(mut self, records: usize) -> Self {
        self.config.max_pending_records = records;
        self
    }

    /// See [`ProducerConfig::idempotent`].
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.config.idempotent = idempotent;
        self
    }

    /// See [`ProducerConfig::delivery_timeout`].
    pub fn delivery_timeout(mut self, timeout: Duration) -> Self {
        self.config.delivery_timeout = timeout;
        self
    }

    /// See [`ProducerConfig::acks`].
    pub fn acks(mut self, acks: crate::protocol::Acks) -> Self {
        self.config.acks = Some(acks);
        self
    }

    /// Acquires the lease (if asked to) and obtains a producer id (if idempotent), then starts
    /// the producer.
    pub async fn build(self) -> Result<Producer, ClientError> {
        validate(&self.config)?;
        let producer_id = if self.config.idempotent {
            Some(self.client.init_producer_id().await?)
        } else {
            None
        };
        match self.authority {
            None => Err(ClientError::InvalidArgument(
                "a producer needs a lease (`lease(holder, ttl)`) or an epoch (`epoch(n)`)".into(),
            )),
            Some(Authority::Epoch(epoch)) => Ok(Producer::start(
                self.client,
                self.topic,
                self.partition,
                epoch,
                producer_id,
                self.config,
            )),
            Some(Authority::Lease { holder, ttl }) => {
                let lease = self
                    .client
                    .acquire_lease(&self.topic, self.partition, &holder, ttl)
                    .await?;
                let mut producer = Producer::start(
                    self.client,
                    self.topic,
                    self.partition,
                    lease.epoch,
                    producer_id,
                    self.config,
                );
                let keeper = tokio::spawn(keep_lease(
                    producer.client.clone(),
                    Arc::clone(&producer.shared),
                    lease,
                ));
                producer.keeper = Some(keeper.abort_handle());
                producer.lease = Some(lease);
                Ok(producer)
            }
        }
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
///   write again, build a new producer (a new epoch).
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
        ProducerBuilder {
            client,
            topic: topic.into(),
            partition,
            authority: None,
            config: ProducerConfig::default(),
        }
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
            Batcher {
                client: client.clone(),
                shared: Arc::clone(&shared),
                session: producer_id.map(|id| Session {
                    id,
                    next_sequence: 0,
                }),
                config,
                open: None,
                ready: VecDeque::new(),
                in_flight: VecDeque::new(),
                flushes: Vec::new(),
                closed: 0,
                done: 0,
                halted: None,
                retry_at: None,
                retries: 0,
            }
            .run(commands),
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
    /// What failed stays failed: send those records again (the [`SendError`]s hold them) if
    /// they should still be written. Does nothing if the producer is not halted; fails if it is
    /// dead.
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

fn validate(config: &ProducerConfig) -> Result<(), ClientError> {
    if config.batch_records == 0
        || config.batch_bytes == 0
        || config.max_in_flight == 0
        || config.max_pending_records == 0
    {
        return Err(ClientError::InvalidArgument(format!(
            "producer batch sizes, max_in_flight and max_pending_records must be positive: {config:?}"
        )));
    }
    if config.batch_records > MAX_RECORDS_PER_BATCH as usize {
        return Err(ClientError::InvalidArgument(format!(
            "producer batch_records {} exceeds the batch format's limit of {MAX_RECORDS_PER_BATCH}",
            config.batch_records
        )));
    }
    if config.idempotent && config.max_in_flight > PRODUCER_BATCH_WINDOW {
        return Err(ClientError::InvalidArgument(format!(
            "an idempotent producer keeps at most {PRODUCER_BATCH_WINDOW} batches in flight (the \
             batches the server remembers per producer), not {}",
            config.max_in_flight
        )));
    }
    Ok(())
}

/// Renews the lease every third of its TTL until fenced or aborted. A transient failure (the
/// client reconnects on its own) is retried sooner; the lease itself says when it is too late
/// (`LEASE_LOST`). If no renewal succeeds for a whole TTL, the lease may have expired on the
/// server: the producer stops then rather than go on believing it leads.
async fn keep_lease(client: Client, shared: Arc<Shared>, lease: Lease) {
    let period = |ttl_ms: u64| Duration::from_millis((ttl_ms / 3).max(1));
    let mut ttl = Duration::from_millis(lease.ttl_ms);
    let mut every = period(lease.ttl_ms);
    // When the lease was last known live: the send time of the last successful renewal.
    let mut confirmed = Instant::now();
    let mut next = confirmed + every;
    loop {
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        let deadline = confirmed + ttl;
        let renewal = client.renew_lease(&shared.topic, shared.partition, lease.lease_id);
        match tokio::time::timeout_at(deadline, renewal).await {
            Ok(Ok(renewed)) => {
                every = period(renewed.ttl_ms);
                ttl = Duration::from_millis(renewed.ttl_ms);
                confirmed = sent;
                next = sent + every;
            }
            Ok(Err(error)) if error.is_fencing() => {
                shared.kill(error);
                return;
            }
            Ok(Err(error)) if Instant::now() < deadline => {
                tracing::warn!(topic = %shared.topic, partition = shared.partition, %error, "lease renewal failed; retrying");
                next = (Instant::now() + every / 4).min(deadline);
            }
            _ => {
                shared.kill(ClientError::LeaseExpired {
                    unconfirmed_for: confirmed.elapsed(),
                });
                return;
            }
        }
    }
}

/// A batch being filled.
struct OpenBatch {
    builder: BatchBuilder,
    replies: Vec<Reply>,
    /// When linger runs out for its first record.
    deadline: Instant,
}

/// A batch ready to be sent (or resent: its bytes never change).
struct ClosedBatch {
    bytes: Bytes,
    replies: Vec<Reply>,
    /// After this it is not resent any more.
    give_up_at: Instant,
}

type Acknowledgement = Pin<Box<dyn Future<Output = Result<ProduceAck, ClientError>> + Send>>;

/// A batch on the wire, and the future of its acknowledgement.
struct InFlight {
    batch: ClosedBatch,
    ack: Acknowledgement,
}

/// An idempotent producer's identity and its next sequence number on the partition.
struct Session {
    id: ProducerId,
    next_sequence: i32,
}

/// The batching task: fills batches from the queue, sends them, resends them after transient
/// failures, answers the sends.
struct Batcher {
    client: Client,
    shared: Arc<Shared>,
    /// `Some` for an idempotent producer.
    session: Option<Session>,
    config: ProducerConfig,
    open: Option<OpenBatch>,
    ready: VecDeque<ClosedBatch>,
    /// In send order; acknowledgements arrive in the same order.
    in_flight: VecDeque<InFlight>,
    /// Flush waiters, each with the number of batches that must be done first.
    flushes: Vec<(u64, oneshot::Sender<()>)>,
    /// Batches closed so far.
    closed: u64,
    /// Batches answered (or failed) so far; they complete in close order.
    done: u64,
    /// Why an idempotent producer stopped sending: a batch failed for good.
    halted: Option<ClientError>,
    /// When resending may start after a transient failure.
    retry_at: Option<Instant>,
    /// Transient failures in a row (for the backoff).
    retries: u32,
}

impl Batcher {
    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut input_open = true;
        loop {
            if let Some(error) = self.shared.dead.get().cloned() {
                self.fail_everything(&error);
            }
            if self.retry_at.is_some_and(|at| at <= Instant::now()) {
                self.retry_at = None;
            }
            self.dispatch().await;
            self.answer_flushes();
            if !input_open
                && self.open.is_none()
                && self.ready.is_empty()
                && self.in_flight.is_empty()
            {
                return;
            }
            let has_slot =
                self.in_flight.len() < self.config.max_in_flight && self.retry_at.is_none();
            // Backpressure: take no more records while a full batch waits for a slot.
            let accepting = input_open && self.ready.is_empty();
            // Linger only matters when the batch could be sent; otherwise it keeps filling.
            let linger = self
                .open
                .as_ref()
                .filter(|_| has_slot)
                .map(|open| open.deadline);
            tokio::select! {
                command = commands.recv(), if accepting => match command {
                    None => {
                        input_open = false;
                        self.close_open();
                    }
                    Some(Command::Record { key, value, timestamp, reply, permit }) => {
                        self.add(timestamp, Reply { key, value, sender: reply, _permit: permit });
                    }
                    Some(Command::Flush(waiter)) => {
                        self.close_open();
                        self.flushes.push((self.closed, waiter));
                    }
                    Some(Command::Resume(done)) => {
                        let _ = done.send(self.resume().await);
                    }
                },
                () = sleep_until_opt(linger), if linger.is_some() => self.close_open(),
                () = sleep_until_opt(self.retry_at), if self.retry_at.is_some() => {}
                result = front_acknowledgement(&mut self.in_flight), if !self.in_flight.is_empty() => {
                    self.complete_front(result);
                }
                () = self.shared.died.notified() => {}
            }
        }
    }

    fn add(&mut self, timestamp: i64, reply: Reply) {
        if let Some(error) = self.shared.dead.get() {
            reply.fail(error.clone());
            return;
        }
        if let Some(cause) = &self.halted {
            reply.fail(halted(cause));
            return;
        }
        let key = reply.key.clone();
        let value = reply.value.clone();
        let size = BatchBuilder::record_len(key.as_deref(), Some(&value), &[]);
        if let Some(open) = &self.open {
            if open.builder.encoded_len() + size > self.config.batch_bytes {
                self.close_open();
            }
        }
        let epoch = self.shared.epoch;
        let linger = self.config.linger;
        let producer = self
            .session
            .as_ref()
            .map(|session| (session.id.producer_id, session.id.producer_epoch));
        let open = self.open.get_or_insert_with(|| OpenBatch {
            builder: BatchBuilder::reusing_with_producer(epoch, producer, Default::default(), 0),
            replies: Vec::new(),
            deadline: Instant::now() + linger,
        });
        open.builder.push(timestamp, key.as_deref(), Some(&value));
        open.replies.push(reply);
        if open.replies.len() >= self.config.batch_records
            || open.builder.encoded_len() >= self.config.batch_bytes
        {
            self.close_open();
        }
    }

    /// Closes the open batch: its sequence numbers are fixed now, in close order.
    fn close_open(&mut self) {
        if let Some(open) = self.open.take() {
            self.closed += 1;
            let bytes = match &mut self.session {
                Some(session) => {
                    let base_sequence = session.next_sequence;
                    session.next_sequence = add_sequence(base_sequence, open.builder.len());
                    open.builder.finish_with_sequence(base_sequence)
                }
                None => open.builder.finish(),
            };
            self.ready.push_back(ClosedBatch {
                bytes,
                replies: open.replies,
                give_up_at: Instant::now() + self.config.delivery_timeout,
            });
        }
    }

    /// Sends ready batches while there is an in-flight slot (and no resend is waiting for its
    /// backoff). Each batch is put on the wire before the next is started, so pipelined batches
    /// are appended in order.
    async fn dispatch(&mut self) {
        if let Some(cause) = self.halted.clone() {
            self.fail_ready(&halted(&cause));
            return;
        }
        while self.retry_at.is_none() && self.in_flight.len() < self.config.max_in_flight {
            let Some(batch) = self.ready.pop_front() else {
                return;
            };
            let started = self
                .client
                .start_produce(
                    &self.shared.topic,
                    self.shared.partition,
                    batch.bytes.clone(),
                    self.config.acks,
                )
                .await;
            let ack: Acknowledgement = match started {
                Ok(acknowledged) => Box::pin(acknowledged),
                // Failures to start join the queue too, so batches complete in close order.
                Err(error) => Box::pin(std::future::ready(Err(error))),
            };
            self.in_flight.push_back(InFlight { batch, ack });
        }
    }

    /// Handles the oldest batch's outcome.
    fn complete_front(&mut self, result: Result<ProduceAck, ClientError>) {
        let Some(front) = self.in_flight.pop_front() else {
            return;
        };
        match result {
            Ok(ack) => {
                self.retries = 0;
                self.done += 1;
                for (index, reply) in front.batch.replies.into_iter().enumerate() {
                    reply.succeed(ack.base_offset + index as u64);
                }
            }
            Err(error) if error.is_fencing() => {
                self.shared.kill(error.clone());
                self.in_flight.push_front(front);
                self.fail_everything(&error);
            }
            Err(error)
                if self.session.is_some()
                    && self.halted.is_none()
                    && error.is_retriable()
                    && Instant::now() < front.batch.give_up_at =>
            {
                self.rewind(front, &error);
            }
            Err(error) => {
                self.done += 1;
                // Behind a failed batch the server refuses the gap: say why, not "out of order".
                let error = match &self.halted {
                    Some(cause) => halted(cause),
                    None => error,
                };
                for reply in front.batch.replies {
                    reply.fail(error.clone());
                }
                if self.session.is_some() && self.halted.is_none() {
                    tracing::warn!(topic = %self.shared.topic, partition = self.shared.partition, %error, "batch failed; the producer sends nothing more until resumed");
                    self.halted = Some(error);
                }
            }
        }
    }

    /// A transient failure of the oldest batch: every batch on the wire goes back to the head
    /// of the queue, in order, to be resent after a backoff (on a new connection if the old one
    /// broke). Those that landed already are answered as duplicates with their offsets.
    fn rewind(&mut self, front: InFlight, error: &ClientError) {
        let mut batches: Vec<ClosedBatch> = std::iter::once(front)
            .chain(self.in_flight.drain(..))
            .map(|in_flight| in_flight.batch)
            .collect();
        self.shared
            .batches_resent
            .fetch_add(batches.len() as u64, Ordering::Relaxed);
        while let Some(batch) = batches.pop() {
            self.ready.push_front(batch);
        }
        let backoff = INITIAL_RETRY_BACKOFF
            .saturating_mul(1 << self.retries.min(10))
            .min(MAX_RETRY_BACKOFF);
        self.retries += 1;
        self.shared.resends.fetch_add(1, Ordering::Relaxed);
        tracing::info!(topic = %self.shared.topic, partition = self.shared.partition, %error, batches = self.ready.len(), ?backoff, "resending unacknowledged batches");
        self.retry_at = Some(Instant::now() + backoff);
    }

    /// Starts a new session after a halt: the next producer epoch (or a new producer id when
    /// the epochs run out), sequences from 0.
    async fn resume(&mut self) -> Result<(), ClientError> {
        if let Some(error) = self.shared.dead.get() {
            return Err(error.clone());
        }
        if self.halted.is_none() {
            return Ok(());
        }
        // Batches behind the failure that are still in flight are refused by the server; wait
        // for their answers so that none of them is resent in the new session.
        while let Some(front) = self.in_flight.front_mut() {
            let result = front.ack.as_mut().await;
            self.complete_front(result);
        }
        if let Some(session) = &mut self.session {
            match session.id.producer_epoch.checked_add(1) {
                Some(next) => session.id.producer_epoch = next,
                None => session.id = self.client.init_producer_id().await?,
            }
            session.next_sequence = 0;
        }
        self.halted = None;
        Ok(())
    }

    /// Fails every record not yet acknowledged (in flight, ready, open) with `error`.
    fn fail_everything(&mut self, error: &ClientError) {
        for in_flight in self.in_flight.drain(..) {
            self.done += 1;
            for reply in in_flight.batch.replies {
                reply.fail(error.clone());
            }
        }
        self.fail_ready(error);
    }

    /// Fails every record not yet sent with `error`.
    fn fail_ready(&mut self, error: &ClientError) {
        self.close_open();
        while let Some(batch) = self.ready.pop_front() {
            self.done += 1;
            for reply in batch.replies {
                reply.fail(error.clone());
            }
        }
    }

    fn answer_flushes(&mut self) {
        let done = self.done;
        let mut index = 0;
        while index < self.flushes.len() {
            if self.flushes[index].0 <= done {
                let (_, waiter) = self.flushes.swap_remove(index);
                let _ = waiter.send(());
            } else {
                index += 1;
            }
        }
    }
}

/// The error of a record behind a failed batch.
fn halted(cause: &ClientError) -> ClientError {
    ClientError::ProducerHalted {
        cause: Box::new(cause.clone()),
    }
}

/// The outcome of the oldest batch on the wire (acknowledgements arrive in send order, so only
/// the oldest needs polling). Cancel-safe: the future stays in the queue until it completes.
async fn front_acknowledgement(
    in_flight: &mut VecDeque<InFlight>,
) -> Result<ProduceAck, ClientError> {
    match in_flight.front_mut() {
        Some(front) => front.ack.as_mut().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
