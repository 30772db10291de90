//! The consumer: reads one partition from a position, long-polling for new records, either poll
//! by poll ([`Consumer::poll`]) or as a [`Stream`] of records.
//!
//! Why both: `poll` hands over a fetch's records at once, for callers that process batches (the
//! CLI, benchmarks); the stream yields them one by one, buffering one poll, for callers that
//! want `while let Some(record) = consumer.next().await`. Both keep the same position, so a
//! consumer can be driven either way. The position is the offset of the next record the caller
//! has not received; the fetch under the hood starts there, so a fetch that failed with its
//! connection is simply sent again (the client retries it on a new connection) and the consumer
//! continues where it was.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, Stream};

use super::{Client, ClientError, FetchResult, Record};

/// Default soft limit on the bytes of one poll.
pub const DEFAULT_CONSUMER_MAX_BYTES: u32 = 1024 * 1024;
/// Default longest time the server holds a stream's poll open when there is nothing new.
pub const DEFAULT_CONSUMER_MAX_WAIT: Duration = Duration::from_secs(1);

/// Where a consumer built by [`ConsumerBuilder`] starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// The oldest record still stored.
    Earliest,
    /// The end of the log: only records appended from now on.
    Latest,
    /// This offset.
    Offset(u64),
    /// The first record whose timestamp (ms since the Unix epoch) is at or after this; the end
    /// of the log if no record is that recent.
    Timestamp(i64),
}

/// Builds a [`Consumer`]: `Consumer::builder(client, topic, partition).start(StartAt::Earliest)
/// .build().await`.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct ConsumerBuilder {
    client: Client,
    topic: String,
    partition: u32,
    start: StartAt,
    max_bytes: u32,
    max_wait: Duration,
}

impl ConsumerBuilder {
    /// Where to start (default: [`StartAt::Earliest`]).
    pub fn start(mut self, start: StartAt) -> Self {
        self.start = start;
        self
    }

    /// Soft limit on the bytes of one poll (default [`DEFAULT_CONSUMER_MAX_BYTES`]).
    pub fn max_bytes(mut self, max_bytes: u32) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// How long the server may hold a stream's poll open when there is nothing new (default
    /// [`DEFAULT_CONSUMER_MAX_WAIT`]).
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// Resolves the start position (asking the server for `Earliest`, `Latest` and
    /// `Timestamp`) and returns the consumer.
    pub async fn build(self) -> Result<Consumer, ClientError> {
        let position = match self.start {
            StartAt::Offset(offset) => offset,
            StartAt::Earliest => {
                self.client
                    .list_offsets(&self.topic, self.partition)
                    .await?
                    .earliest
            }
            StartAt::Latest => self.latest().await?,
            StartAt::Timestamp(timestamp) => {
                let found = self
                    .client
                    .offset_for_timestamp(&self.topic, self.partition, timestamp)
                    .await?;
                match found {
                    Some(offset) => offset,
                    None => self.latest().await?,
                }
            }
        };
        let mut consumer = Consumer::new(self.client, self.topic, self.partition, position)
            .with_max_bytes(self.max_bytes);
        consumer.max_wait = self.max_wait;
        Ok(consumer)
    }

    async fn latest(&self) -> Result<u64, ClientError> {
        Ok(self
            .client
            .list_offsets(&self.topic, self.partition)
            .await?
            .latest)
    }
}

/// Reads one partition in offset order, remembering where it is.
///
/// Each [`poll`](Consumer::poll) fetches from [`position`](Consumer::position) and advances past
/// the records returned. When the consumer has caught up, the server holds the poll open for up
/// to `max_wait` and answers as soon as new records are appended.
///
/// As a [`Stream`], the consumer yields `Result<Record, ClientError>` one record at a time,
/// long-polling (for [`ConsumerBuilder::max_wait`]) whenever its buffer is empty; it never ends.
/// An error is yielded once, and polling again retries from the same position (after
/// [`ClientError::OffsetOutOfRange`], [`seek`](Consumer::seek) first).
///
/// The server answers the requests of a connection in order, so a long poll delays whatever is
/// queued behind it on the same [`Client`]; give a consumer that long-polls its own `Client`.
///
/// ```
/// use std::time::Duration;
/// use futures::StreamExt;
/// use fencelog::client::{Client, Consumer, Producer, ProducerConfig, StartAt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = fencelog::testing::TestServer::start().await?;
/// let client = Client::connect(server.addr()).await?;
/// client.create_topic("events", 1, Default::default()).await?;
/// let producer = Producer::acquire(
///     client.clone(), "events", 0, "writer-1", Duration::from_secs(10), ProducerConfig::default(),
/// ).await?;
/// producer.send(None, "first").await?;
/// producer.send(None, "second").await?;
///
/// let mut consumer = Consumer::new(Client::connect(server.addr()).await?, "events", 0, 0);
/// let records = consumer.poll(Duration::from_secs(1)).await?;
/// assert_eq!(records[0].value.as_deref(), Some(&b"first"[..]));
/// assert_eq!(consumer.position(), 2);
///
/// let reader = Client::connect(server.addr()).await?;
/// let mut stream = Consumer::builder(reader, "events", 0).start(StartAt::Offset(1)).build().await?;
/// let record = stream.next().await.unwrap()?;
/// assert_eq!(record.value.as_deref(), Some(&b"second"[..]));
/// # Ok(()) }
/// ```
pub struct Consumer {
    client: Client,
    topic: String,
    partition: u32,
    /// Offset of the next record the caller has not received.
    position: u64,
    max_bytes: u32,
    max_wait: Duration,
    high_watermark: Option<u64>,
    log_start_offset: Option<u64>,
    /// Records fetched for the stream, not yet yielded; they start at `position`.
    buffer: VecDeque<Record>,
    /// The stream's fetch in progress, from `position` (the buffer is empty meanwhile).
    fetching: Option<BoxFuture<'static, Result<FetchResult, ClientError>>>,
    /// Committed records only ([`Consumer::with_read_committed`]).
    read_committed: bool,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("position", &self.position)
            .field("buffered", &self.buffer.len())
            .field("fetching", &self.fetching.is_some())
            .finish_non_exhaustive()
    }
}

/// A clone reads the same partition from the same position, with its own (empty) buffer.
impl Clone for Consumer {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            topic: self.topic.clone(),
            partition: self.partition,
            position: self.position,
            max_bytes: self.max_bytes,
            max_wait: self.max_wait,
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start_offset,
            buffer: self.buffer.clone(),
            fetching: None,
            read_committed: self.read_committed,
        }
    }
}

impl Consumer {
    /// A consumer of `topic/partition` starting at `from_offset` (see [`Consumer::builder`] to
    /// start at the earliest or latest offset, or at a timestamp).
    pub fn new(client: Client, topic: impl Into<String>, partition: u32, from_offset: u64) -> Self {
        Self {
            client,
            topic: topic.into(),
            partition,
            position: from_offset,
            max_bytes: DEFAULT_CONSUMER_MAX_BYTES,
            max_wait: DEFAULT_CONSUMER_MAX_WAIT,
            high_watermark: None,
            log_start_offset: None,
            buffer: VecDeque::new(),
            fetching: None,
            read_committed: false,
        }
    }

    /// A builder for a consumer of `topic/partition`.
    pub fn builder(client: Client, topic: impl Into<String>, partition: u32) -> ConsumerBuilder {
        ConsumerBuilder {
            client,
            topic: topic.into(),
            partition,
            start: StartAt::Earliest,
            max_bytes: DEFAULT_CONSUMER_MAX_BYTES,
            max_wait: DEFAULT_CONSUMER_MAX_WAIT,
        }
    }

    /// Reads committed records only (read_committed, the native Fetch version 1): stops at
    /// the partition's last stable offset (an open transaction holds readers back until it
    /// ends) and skips aborted transactions' records; see [`Client::fetch_committed`].
    pub fn with_read_committed(mut self, read_committed: bool) -> Self {
        self.read_committed = read_committed;
        self
    }

    /// Sets the soft limit on the bytes of one poll (the batch holding the position is always
    /// returned whole, so a consumer makes progress even past larger batches).
    pub fn with_max_bytes(mut self, max_bytes: u32) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Fetches the records from the current position on, waiting up to `max_wait` for some if
    /// there are none yet, and advances past them. An empty result means nothing arrived in
    /// time. Records the stream had buffered are returned first, without a fetch.
    ///
    /// Fails with [`ClientError::OffsetOutOfRange`] if the position is below the log start
    /// (retention or DeleteRecords removed it) or beyond the end; [`seek`](Consumer::seek) to recover.
    pub async fn poll(&mut self, max_wait: Duration) -> Result<Vec<Record>, ClientError> {
        if !self.buffer.is_empty() {
            let records: Vec<Record> = self.buffer.drain(..).collect();
            self.advance_past(&records);
            return Ok(records);
        }
        // A fetch the stream started is from the same position: drop it and ask afresh.
        self.fetching = None;
        let fetched = fetch(
            &self.client,
            self.read_committed,
            &self.topic,
            self.partition,
            self.position,
            self.max_bytes,
            max_wait,
        )
        .await?;
        let records = self.accept(fetched);
        self.advance_past(&records);
        Ok(records)
    }

    /// Records the partition's ends from a fetch and returns its records.
    fn accept(&mut self, fetched: FetchResult) -> Vec<Record> {
        self.high_watermark = Some(fetched.high_watermark);
        self.log_start_offset = Some(fetched.log_start_offset);
        if fetched.records.is_empty() {
            // Only markers (or nothing) were there: move past them, never ask for them again.
            self.position = self.position.max(fetched.next_offset);
        }
        fetched.records
    }

    fn advance_past(&mut self, records: &[Record]) {
        if let Some(last) = records.last() {
            self.position = last.offset + 1;
        }
    }

    /// The stream's next fetch: from the position, for the consumer's own wait.
    fn start_fetch(&self) -> BoxFuture<'static, Result<FetchResult, ClientError>> {
        let client = self.client.clone();
        let topic = self.topic.clone();
        let (partition, position, max_bytes, max_wait, read_committed) = (
            self.partition,
            self.position,
            self.max_bytes,
            self.max_wait,
            self.read_committed,
        );
        async move {
            fetch(
                &client,
                read_committed,
                &topic,
                partition,
                position,
                max_bytes,
                max_wait,
            )
            .await
        }
        .boxed()
    }

    /// The offset of the next record to read.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Moves the position (dropping buffered records and any fetch in progress).
    pub fn seek(&mut self, offset: u64) {
        self.position = offset;
        self.buffer.clear();
        self.fetching = None;
    }

    /// The partition's high watermark as of the last poll.
    pub fn high_watermark(&self) -> Option<u64> {
        self.high_watermark
    }

    /// The partition's log start offset as of the last poll.
    pub fn log_start_offset(&self) -> Option<u64> {
        self.log_start_offset
    }

    /// The topic read.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition read.
    pub fn partition(&self) -> u32 {
        self.partition
    }
}

impl Stream for Consumer {
    type Item = Result<Record, ClientError>;

    fn poll_next(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(record) = this.buffer.pop_front() {
                this.position = record.offset + 1;
                return Poll::Ready(Some(Ok(record)));
            }
            if this.fetching.is_none() {
                this.fetching = Some(this.start_fetch());
            }
            let Some(fetching) = this.fetching.as_mut() else {
                continue;
            };
            let result = match fetching.poll_unpin(context) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(result) => result,
            };
            this.fetching = None;
            match result {
                // Nothing new within max_wait: poll again (the loop starts the next fetch).
                Ok(fetched) => {
                    let records = this.accept(fetched);
                    this.buffer.extend(records);
                }
                Err(error) => return Poll::Ready(Some(Err(error))),
            }
        }
    }
}

/// One fetch of a consumer, read_committed or not.
async fn fetch(
    client: &Client,
    read_committed: bool,
    topic: &str,
    partition: u32,
    position: u64,
    max_bytes: u32,
    max_wait: Duration,
) -> Result<FetchResult, ClientError> {
    if read_committed {
        client
            .fetch_committed(topic, partition, position, max_bytes, max_wait)
            .await
    } else {
        client
            .fetch(topic, partition, position, max_bytes, max_wait)
            .await
    }
}
