//! [`ProducerConfig`]: how a producer forms batches, retries and acknowledges, with its
//! defaults and the check that a configuration can work.
//!
//! The check is kept next to the fields because each rule comes from one of them meeting a
//! limit elsewhere (the batch format's record count, the batches the server remembers per
//! producer): read together, the limits explain the defaults.

use std::time::Duration;

use crate::batch::MAX_RECORDS_PER_BATCH;
use crate::client::ClientError;
use crate::domain::PRODUCER_BATCH_WINDOW;

/// Default time a record may take from `send` to its acknowledgement, retries included.
pub const DEFAULT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);

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

pub(super) fn validate(config: &ProducerConfig) -> Result<(), ClientError> {
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
