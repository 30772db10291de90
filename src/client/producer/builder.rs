//! [`ProducerBuilder`]: how a producer gets its right to write (a lease it acquires and renews,
//! or an epoch held elsewhere) and its batching settings, then starts it.
//!
//! Starting is more than a constructor: it validates the settings, obtains the producer id and
//! the lease before anything is queued, and hands the lease to its keeper, so a producer that
//! exists always holds what it writes with.

use std::sync::Arc;
use std::time::Duration;

use super::lease_keeper::keep_lease;
use super::{Producer, ProducerConfig};
use crate::client::{Client, ClientError};

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
    /// A builder with neither lease nor epoch yet, and the default batching settings.
    pub(super) fn new(client: Client, topic: String, partition: u32) -> Self {
        Self {
            client,
            topic,
            partition,
            authority: None,
            config: ProducerConfig::default(),
        }
    }

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

    /// How batches are compressed (see [`ProducerConfig::compression`]).
    pub fn compression(mut self, codec: crate::compression::Codec) -> Self {
        self.config.compression = codec;
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
        self.config
            .validate()
            .map_err(|error| ClientError::InvalidArgument(error.to_string()))?;
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
