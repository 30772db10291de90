//! The producer: a partition's writer. It holds the lease (renewing it in the background),
//! gathers records into batches stamped with its epoch, and stops for good once fenced.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::FuturesOrdered;
use futures::StreamExt;
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::{Client, ClientError, Lease, ProduceAck};
use crate::batch::{now_ms, BatchBuilder, MAX_RECORDS_PER_BATCH};

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
    /// receives them, so batches land in send order whatever this value. When a batch fails,
    /// the batches already in flight behind it still land (a fencing error fails them all).
    pub max_in_flight: usize,
    /// Most records sent but not yet acknowledged; further sends wait for room (backpressure).
    pub max_pending_records: usize,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            linger: Duration::from_millis(5),
            batch_records: 1000,
            batch_bytes: 1024 * 1024,
            max_in_flight: 4,
            max_pending_records: 100_000,
        }
    }
}

type RecordReply = oneshot::Sender<Result<u64, ClientError>>;

/// Where a queued record's outcome goes, with its unit of `max_pending_records`.
struct Reply {
    sender: RecordReply,
    _permit: OwnedSemaphorePermit,
}

impl Reply {
    fn answer(self, result: Result<u64, ClientError>) {
        let _ = self.sender.send(result);
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
}

impl Shared {
    fn kill(&self, error: ClientError) {
        if self.dead.set(error).is_ok() {
            if let Some(error) = self.dead.get() {
                tracing::warn!(topic = %self.topic, partition = self.partition, epoch = self.epoch, %error, "producer stopped");
            }
            self.died.notify_one();
        }
    }

    fn dead_or(&self, otherwise: ClientError) -> ClientError {
        self.dead.get().cloned().unwrap_or(otherwise)
    }
}

/// The writer of one partition.
///
/// [`Producer::acquire`] takes the partition's lease and renews it in the background every third
/// of its TTL. [`send`](Producer::send) queues a record into the current batch; a batch is sent
/// when it is full or its first record has waited [`linger`](ProducerConfig::linger), and each
/// send resolves to its record's offset once the batch is acknowledged.
///
/// Once a produce or a renewal answers `Fenced`, `UnknownEpoch` or `LeaseLost`, the producer is
/// dead: every pending and future send fails with that error (see [`error`](Producer::error)).
/// To write again, acquire a new producer (a new epoch) — and decide what to do about the sends
/// that failed.
///
/// Dropping the producer stops the renewals (the lease then expires after its TTL) but still
/// sends the records already queued; [`close`](Producer::close) flushes and releases the lease
/// at once.
///
/// ```
/// use std::time::Duration;
/// use fencelog::client::{Client, Producer, ProducerConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = fencelog::testing::TestServer::start().await?;
/// let client = Client::connect(server.addr()).await?;
/// client.create_topic("events", 1, Default::default()).await?;
///
/// let producer = Producer::acquire(
///     client.clone(), "events", 0, "writer-1", Duration::from_secs(10), ProducerConfig::default(),
/// ).await?;
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
}

impl fmt::Debug for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("topic", &self.shared.topic)
            .field("partition", &self.shared.partition)
            .field("epoch", &self.shared.epoch)
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
    /// Acquires the lease of `topic/partition` for `holder` and starts the producer, renewing
    /// the lease every third of its granted TTL.
    pub async fn acquire(
        client: Client,
        topic: impl Into<String>,
        partition: u32,
        holder: &str,
        ttl: Duration,
        config: ProducerConfig,
    ) -> Result<Producer, ClientError> {
        let topic = topic.into();
        validate(&config)?;
        let lease = client.acquire_lease(&topic, partition, holder, ttl).await?;
        let mut producer = Self::start(client, topic, partition, lease.epoch, config);
        let keeper = tokio::spawn(keep_lease(
            producer.client.clone(),
            Arc::clone(&producer.shared),
            lease,
        ));
        producer.keeper = Some(keeper.abort_handle());
        producer.lease = Some(lease);
        Ok(producer)
    }

    /// A producer writing under an `epoch` obtained elsewhere (another process holds and renews
    /// the lease, as with `fencelog lease acquire` + `fencelog produce --epoch`). It manages no
    /// lease; the fence still rejects its batches once a newer epoch exists.
    pub fn with_epoch(
        client: Client,
        topic: impl Into<String>,
        partition: u32,
        epoch: u64,
        config: ProducerConfig,
    ) -> Result<Producer, ClientError> {
        validate(&config)?;
        Ok(Self::start(client, topic.into(), partition, epoch, config))
    }

    fn start(
        client: Client,
        topic: String,
        partition: u32,
        epoch: u64,
        config: ProducerConfig,
    ) -> Producer {
        let shared = Arc::new(Shared {
            topic,
            partition,
            epoch,
            dead: OnceLock::new(),
            died: Notify::new(),
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
                config,
                open: None,
                ready: VecDeque::new(),
                in_flight: FuturesOrdered::new(),
                flushes: Vec::new(),
                closed: 0,
                done: 0,
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

    /// The topic written to.
    pub fn topic(&self) -> &str {
        &self.shared.topic
    }

    /// The partition written to.
    pub fn partition(&self) -> u32 {
        self.shared.partition
    }

    /// The error that stopped the producer, if it was fenced or lost its lease.
    pub fn error(&self) -> Option<ClientError> {
        self.shared.dead.get().cloned()
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
    /// Fails with the producer's fatal error ([`ClientError::Fenced`] and co.) once it is dead,
    /// or with its batch's error (e.g. a timeout, whose outcome is unknown).
    pub fn send(
        &self,
        key: Option<Bytes>,
        value: impl Into<Bytes>,
    ) -> impl Future<Output = Result<u64, ClientError>> + Send + 'static {
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
                if let Some(error) = shared.dead.get() {
                    return Err(error.clone());
                }
                let Ok(permit) = room.acquire_owned().await else {
                    return Err(shared.dead_or(ClientError::Closed));
                };
                let command = Command::Record {
                    key,
                    value,
                    timestamp,
                    reply,
                    permit,
                };
                if queue.send(command).is_err() {
                    return Err(shared.dead_or(ClientError::Closed));
                }
            }
            offset
                .await
                .unwrap_or_else(|_| Err(shared.dead_or(ClientError::Closed)))
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
    Ok(())
}

/// Renews the lease every third of its TTL until fenced or aborted. A transient failure is
/// retried sooner; the lease itself says when it is too late (`LEASE_LOST`).
async fn keep_lease(client: Client, shared: Arc<Shared>, lease: Lease) {
    let period = |ttl_ms: u64| Duration::from_millis((ttl_ms / 3).max(1));
    let mut every = period(lease.ttl_ms);
    let mut next = Instant::now() + every;
    loop {
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        match client
            .renew_lease(&shared.topic, shared.partition, lease.lease_id)
            .await
        {
            Ok(renewed) => {
                every = period(renewed.ttl_ms);
                next = sent + every;
            }
            Err(error) if error.is_fencing() => {
                shared.kill(error);
                return;
            }
            Err(error) => {
                tracing::warn!(topic = %shared.topic, partition = shared.partition, %error, "lease renewal failed; retrying");
                next = Instant::now() + every / 4;
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

/// A batch ready to be sent.
struct ClosedBatch {
    bytes: Bytes,
    replies: Vec<Reply>,
}

type InFlight =
    std::pin::Pin<Box<dyn Future<Output = (Vec<Reply>, Result<ProduceAck, ClientError>)> + Send>>;

/// The batching task: fills batches from the queue, sends them, answers the sends.
struct Batcher {
    client: Client,
    shared: Arc<Shared>,
    config: ProducerConfig,
    open: Option<OpenBatch>,
    ready: VecDeque<ClosedBatch>,
    in_flight: FuturesOrdered<InFlight>,
    /// Flush waiters, each with the number of batches that must be done first.
    flushes: Vec<(u64, oneshot::Sender<()>)>,
    /// Batches closed so far.
    closed: u64,
    /// Batches answered (or failed) so far; they complete in close order.
    done: u64,
}

impl Batcher {
    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut input_open = true;
        loop {
            if let Some(error) = self.shared.dead.get().cloned() {
                self.fail_queued(&error);
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
            let has_slot = self.in_flight.len() < self.config.max_in_flight;
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
                        self.add(key, value, timestamp, Reply { sender: reply, _permit: permit });
                    }
                    Some(Command::Flush(waiter)) => {
                        self.close_open();
                        self.flushes.push((self.closed, waiter));
                    }
                },
                () = sleep_until_opt(linger), if linger.is_some() => self.close_open(),
                Some((replies, result)) = self.in_flight.next(), if !self.in_flight.is_empty() => {
                    self.done += 1;
                    self.complete(replies, result);
                }
                () = self.shared.died.notified() => {}
            }
        }
    }

    fn add(&mut self, key: Option<Bytes>, value: Bytes, timestamp: i64, reply: Reply) {
        if let Some(error) = self.shared.dead.get() {
            reply.answer(Err(error.clone()));
            return;
        }
        // Record framing: length, timestamp delta, key length, value length, header count.
        let size = 4 + 4 + 4 + key.as_ref().map_or(0, Bytes::len) + 4 + value.len() + 2;
        if let Some(open) = &self.open {
            if open.builder.encoded_len() + size > self.config.batch_bytes {
                self.close_open();
            }
        }
        let epoch = self.shared.epoch;
        let linger = self.config.linger;
        let open = self.open.get_or_insert_with(|| OpenBatch {
            builder: BatchBuilder::new(epoch),
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

    fn close_open(&mut self) {
        if let Some(open) = self.open.take() {
            self.closed += 1;
            self.ready.push_back(ClosedBatch {
                bytes: open.builder.finish(),
                replies: open.replies,
            });
        }
    }

    /// Sends ready batches while there is an in-flight slot. Each batch is put on the wire
    /// before the next is started, so pipelined batches are appended in order.
    async fn dispatch(&mut self) {
        while self.in_flight.len() < self.config.max_in_flight {
            let Some(batch) = self.ready.pop_front() else {
                return;
            };
            let started = self
                .client
                .start_produce(&self.shared.topic, self.shared.partition, batch.bytes)
                .await;
            let replies = batch.replies;
            // Failures to start join the queue too, so batches complete in close order.
            self.in_flight.push_back(match started {
                Ok(acknowledged) => Box::pin(async move { (replies, acknowledged.await) }),
                Err(error) => Box::pin(std::future::ready((replies, Err(error)))),
            });
        }
    }

    fn complete(&mut self, replies: Vec<Reply>, result: Result<ProduceAck, ClientError>) {
        match result {
            Ok(ack) => {
                for (index, reply) in replies.into_iter().enumerate() {
                    reply.answer(Ok(ack.base_offset + index as u64));
                }
            }
            Err(error) => {
                if error.is_fencing() {
                    self.shared.kill(error.clone());
                }
                for reply in replies {
                    reply.answer(Err(error.clone()));
                }
            }
        }
    }

    /// Fails every record not yet sent with the producer's fatal error.
    fn fail_queued(&mut self, error: &ClientError) {
        self.close_open();
        while let Some(batch) = self.ready.pop_front() {
            self.done += 1;
            for reply in batch.replies {
                reply.answer(Err(error.clone()));
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

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
