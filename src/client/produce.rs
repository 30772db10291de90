//! Appending batches: [`Client::produce`] and its variants, answered by a [`ProduceAck`].
//!
//! `start_produce` is here too: it is how the [`Producer`](super::Producer) pipelines batches,
//! and it must keep the same routing and `acks` rules as a single `produce`, so the two stay
//! side by side.

use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;

use super::calls::expect_response;
use super::retry::RetryDelay;
use super::{Client, ClientError};
use crate::protocol::{Acks, Request, Response};

/// The answer to a produce: where the batch landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceAck {
    /// Offset of the batch's first record.
    pub base_offset: u64,
    /// Offset of its last record.
    pub last_offset: u64,
    /// The partition's next offset after the append.
    pub log_end_offset: u64,
}

impl Client {
    /// Appends one record batch (built with [`BatchBuilder`](super::BatchBuilder), epoch in its
    /// header), sent to the partition's leader, acknowledged with the default `acks`: `all` on a
    /// partition the client knows is replicated, else the broker's default (the same rule,
    /// decided by the broker).
    ///
    /// Fails with [`ClientError::Fenced`] if a newer epoch exists; the batch was not written.
    /// A batch of an idempotent producer (magic 3) is sent again after a lost connection; any
    /// other batch then fails with [`ClientError::OutcomeUnknown`].
    pub async fn produce(
        &self,
        topic: &str,
        partition: u32,
        batch: Bytes,
    ) -> Result<ProduceAck, ClientError> {
        let acks = self.routing.default_acks(topic, partition);
        self.produce_acks(topic, partition, batch, acks).await
    }

    /// [`produce`](Self::produce) acknowledged as `acks` says (`Produce` version 1): `Leader`
    /// once the leader has the batch, `All` once every in-sync replica has it. A standalone
    /// server treats both alike (it is the only replica).
    pub async fn produce_with_acks(
        &self,
        topic: &str,
        partition: u32,
        batch: Bytes,
        acks: Acks,
    ) -> Result<ProduceAck, ClientError> {
        self.produce_acks(topic, partition, batch, Some(acks)).await
    }

    async fn produce_acks(
        &self,
        topic: &str,
        partition: u32,
        batch: Bytes,
        acks: Option<Acks>,
    ) -> Result<ProduceAck, ClientError> {
        let request = Request::Produce {
            topic: topic.to_owned(),
            partition,
            batch,
            acks,
        };
        let response = self.call_routed(topic, partition, request).await?;
        expect_response!(response, Response::Produce { base_offset, last_offset, log_end_offset } => ProduceAck { base_offset, last_offset, log_end_offset })
    }

    /// Puts a produce on the wire and returns the future of its acknowledgement. Produces
    /// started one after another (each `start_produce` awaited before the next) are sent, and so
    /// appended, in that order, however their acknowledgements are awaited: this is how the
    /// [`Producer`](super::Producer) pipelines batches without reordering them.
    ///
    /// Every wait (a metadata refresh, reconnecting, a slot on the connection, the answer) ends
    /// by `give_up_at` or the request timeout, whichever comes first: a producer passes its
    /// batch's delivery deadline, so that a server that died or froze costs it no more than
    /// its delivery timeout. If the connection is dead this reconnects first. A produce
    /// already on the wire when its connection fails is not sent again: its acknowledgement
    /// fails with the transport error, and the produces started after it go on the new
    /// connection. The server orders appends per connection only, so the caller that retries
    /// the failed one must expect it after those (sequence numbers are what make that safe).
    ///
    /// Cancel-safe: the produce is handed to the connection only as this future completes, so
    /// one dropped before that sent nothing (the producer drops it to handle an older batch).
    pub(crate) async fn start_produce(
        &self,
        topic: &str,
        partition: u32,
        batch: Bytes,
        acks: Option<Acks>,
        give_up_at: Instant,
    ) -> Result<
        impl std::future::Future<Output = Result<ProduceAck, ClientError>> + Send + 'static,
        ClientError,
    > {
        let started = Instant::now();
        let deadline = give_up_at.min(started + self.config().request_timeout);
        let timeout = deadline.saturating_duration_since(started);
        let mut delay = RetryDelay::new(self.config());
        let acks = acks.or_else(|| self.routing.default_acks(topic, partition));
        let mut request = Request::Produce {
            topic: topic.to_owned(),
            partition,
            batch,
            acks,
        };
        let endpoint = self
            .routing
            .endpoint_for(topic, partition, deadline)
            .await?;
        let (connection, slot) = loop {
            let connection = endpoint.connection(deadline).await?;
            match tokio::time::timeout_at(deadline, connection.enqueue(request)).await {
                Err(_) => return Err(ClientError::Timeout { after: timeout }),
                Ok(Ok(slot)) => break (connection, slot),
                // Refused unsent: safe to put on the next connection, still in order.
                Ok(Err(not_sent)) => {
                    request = not_sent.request;
                    if !not_sent.retriable || !delay.wait(deadline).await {
                        return Err(not_sent.error);
                    }
                }
            }
        };
        let routing = Arc::clone(&self.routing);
        let topic = topic.to_owned();
        Ok(async move {
            let response = tokio::time::timeout_at(deadline, connection.response(slot))
                .await
                .map_err(|_| ClientError::Timeout { after: timeout })?
                // A new leader, or a lost connection to one: the next batch goes where it leads.
                .inspect_err(|error| routing.learn(&topic, partition, error))?;
            expect_response!(response, Response::Produce { base_offset, last_offset, log_end_offset } => ProduceAck { base_offset, last_offset, log_end_offset })
        })
    }
}
