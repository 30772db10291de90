//! [`ProducerConfig`]: how a producer forms batches, retries and acknowledges, with its
//! defaults and the check that a configuration can work.
//!
//! The check is kept next to the fields because each rule comes from one of them meeting a
//! limit elsewhere (the batch format's record count, the batches the server remembers per
//! producer): read together, the limits explain the defaults.

use std::time::Duration;

use crate::batch::MAX_RECORDS_PER_BATCH;
use crate::compression::Codec;
use crate::domain::{ConfigError, Quantity, PRODUCER_BATCH_WINDOW};

/// Default time a record may take from `send` to its acknowledgement, retries included.
pub const DEFAULT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);

/// Default time the first record of a batch waits for company.
pub const DEFAULT_LINGER: Duration = Duration::from_millis(5);
/// Default most records in one batch.
pub const DEFAULT_BATCH_RECORDS: usize = 1000;
/// Default largest batch, in bytes.
pub const DEFAULT_BATCH_BYTES: usize = 1024 * 1024;
/// Default most produce requests in flight (within [`PRODUCER_BATCH_WINDOW`], so an idempotent
/// producer may use it).
pub const DEFAULT_PRODUCER_MAX_IN_FLIGHT: usize = 4;
/// Default most records sent but not yet acknowledged.
pub const DEFAULT_MAX_PENDING_RECORDS: usize = 100_000;

/// How a [`Producer`](super::Producer) forms batches.
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
    /// How batches are compressed ([`Codec::None`], the default, sends them plain): a
    /// compressed batch is a Kafka record batch behind the native header (magic 2), stored and
    /// served as it was sent ([`BatchBuilder::compression`](crate::batch::BatchBuilder::compression)).
    pub compression: Codec,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            linger: DEFAULT_LINGER,
            batch_records: DEFAULT_BATCH_RECORDS,
            batch_bytes: DEFAULT_BATCH_BYTES,
            max_in_flight: DEFAULT_PRODUCER_MAX_IN_FLIGHT,
            max_pending_records: DEFAULT_MAX_PENDING_RECORDS,
            idempotent: true,
            delivery_timeout: DEFAULT_DELIVERY_TIMEOUT,
            acks: None,
            compression: Codec::None,
        }
    }
}

impl ProducerConfig {
    /// Checks that the configuration can work: positive batch sizes, pipelining and pending
    /// records, batches within the batch format's record count, and an idempotent producer's
    /// pipelining within the batches the server remembers per producer.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let max_in_flight = if self.idempotent {
            PRODUCER_BATCH_WINDOW
        } else {
            usize::MAX
        };
        for (field, value, max) in [
            (
                "batch_records",
                self.batch_records,
                MAX_RECORDS_PER_BATCH as usize,
            ),
            ("batch_bytes", self.batch_bytes, usize::MAX),
            ("max_in_flight", self.max_in_flight, max_in_flight),
            // Above the semaphore's permits it is clamped to them.
            ("max_pending_records", self.max_pending_records, usize::MAX),
        ] {
            ConfigError::check_range(
                field,
                Quantity::count(value),
                Quantity::Count(1),
                Quantity::count(max),
            )?;
        }
        if !self.compression.is_built() {
            return Err(ConfigError::NotAllowed {
                field: "compression",
                value: Quantity::count(usize::from(self.compression.attribute())),
                reason: "this build lacks the `compression` feature",
            });
        }
        Ok(())
    }
}
