//! The consumer: reads one partition from a position, long-polling for new records.

use std::time::Duration;

use super::{Client, ClientError, Record};

/// Default soft limit on the bytes of one poll.
pub const DEFAULT_CONSUMER_MAX_BYTES: u32 = 1024 * 1024;

/// Reads one partition in offset order, remembering where it is.
///
/// Each [`poll`](Consumer::poll) fetches from [`position`](Consumer::position) and advances past
/// the records returned. When the consumer has caught up, the server holds the poll open for up
/// to `max_wait` and answers as soon as new records are appended.
///
/// The server answers the requests of a connection in order, so a long poll delays whatever is
/// queued behind it on the same [`Client`]; give a consumer that long-polls its own `Client`.
///
/// ```
/// use std::time::Duration;
/// use fencelog::client::{Client, Consumer, Producer, ProducerConfig};
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
///
/// let mut consumer = Consumer::new(Client::connect(server.addr()).await?, "events", 0, 0);
/// let records = consumer.poll(Duration::from_secs(1)).await?;
/// assert_eq!(records[0].value.as_deref(), Some(&b"first"[..]));
/// assert_eq!(consumer.position(), 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Consumer {
    client: Client,
    topic: String,
    partition: u32,
    position: u64,
    max_bytes: u32,
    high_watermark: Option<u64>,
    log_start_offset: Option<u64>,
}

impl Consumer {
    /// A consumer of `topic/partition` starting at `from_offset` (use
    /// [`Client::list_offsets`] to start at the earliest or latest offset).
    pub fn new(client: Client, topic: impl Into<String>, partition: u32, from_offset: u64) -> Self {
        Self {
            client,
            topic: topic.into(),
            partition,
            position: from_offset,
            max_bytes: DEFAULT_CONSUMER_MAX_BYTES,
            high_watermark: None,
            log_start_offset: None,
        }
    }

    /// Sets the soft limit on the bytes of one poll (the batch holding the position is always
    /// returned whole, so a consumer makes progress even past larger batches).
    pub fn with_max_bytes(mut self, max_bytes: u32) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Fetches the records from the current position on, waiting up to `max_wait` for some if
    /// there are none yet, and advances past them. An empty result means nothing arrived in
    /// time.
    ///
    /// Fails with `OFFSET_OUT_OF_RANGE` (as [`ClientError::Server`]) if the position is below
    /// the log start (retention removed it) or beyond the end; [`seek`](Consumer::seek) to
    /// recover.
    pub async fn poll(&mut self, max_wait: Duration) -> Result<Vec<Record>, ClientError> {
        let fetched = self
            .client
            .fetch(
                &self.topic,
                self.partition,
                self.position,
                self.max_bytes,
                max_wait,
            )
            .await?;
        self.high_watermark = Some(fetched.high_watermark);
        self.log_start_offset = Some(fetched.log_start_offset);
        if let Some(last) = fetched.records.last() {
            self.position = last.offset + 1;
        }
        Ok(fetched.records)
    }

    /// The offset of the next record to read.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Moves the position.
    pub fn seek(&mut self, offset: u64) {
        self.position = offset;
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
