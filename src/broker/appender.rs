//! The appender: the first phase of every produce (the fence check and the copy that fix a
//! batch's offsets) and the wait for its acknowledgement under the partition's flush policy.
//!
//! Why apart from the service: a connection's [`super::produce_queue::ProduceQueue`] runs these
//! appends in request order, and needs nothing else of the broker; holding the whole service
//! made the queue (and the offsets topic beside it) depend upward on the facade.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::spliced_produce::SplicedProduce;
use super::{blocking, Broker, BrokerError};
use crate::batch::BatchParts;
use crate::storage::{Appended, Partition, PendingAppend, WriteCredential};

/// One batch to append.
#[derive(Debug, Clone)]
pub struct ProduceRequest {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// What the writer presents to the partition's fence (a lease's epoch, or none), checked
    /// before anything else.
    pub credential: WriteCredential,
    /// The batch in fencelog's stored format (its header carries the credential's epoch): one
    /// buffer, or a Kafka batch kept as it arrived and its envelope (see
    /// [`crate::batch::BatchParts`]).
    pub batch: BatchParts,
    /// The guard of the transaction verification this broker, a replicated partition's
    /// leader, recorded before asking the transaction's coordinator (see
    /// [`crate::storage::verification`]); `None` for every other write.
    pub verification: Option<u64>,
}

/// Appends to `broker`'s partitions. Cheap to clone (one reference count).
#[derive(Debug, Clone)]
pub struct Appender {
    broker: Arc<Broker>,
}

impl Appender {
    /// Appends to the partitions of `broker`.
    pub fn new(broker: Arc<Broker>) -> Self {
        Self { broker }
    }

    /// Appends a batch *now* (the fence check and the copy fix its offsets) and returns the wait
    /// for its acknowledgement: a group-commit sync on the blocking pool under flush `always`,
    /// nothing otherwise. The one produce path: the produce queue calls it in request order.
    pub(crate) fn begin(
        &self,
        request: &ProduceRequest,
    ) -> BoxFuture<'static, Result<Appended, BrokerError>> {
        let started = self
            .broker
            .partition(&request.topic, request.partition)
            .and_then(|target| {
                Ok((
                    target.append_pending_verified(
                        request.credential,
                        request.batch.slices(),
                        request.verification,
                    )?,
                    target,
                ))
            });
        acknowledgement(started)
    }

    /// [`begin`](Self::begin) of a batch whose last bytes are in a pipe (see
    /// [`super::spliced_produce`]): the same fence, checks and acknowledgement, the bytes
    /// spliced into the segment file.
    pub(crate) fn begin_spliced(
        &self,
        request: SplicedProduce,
    ) -> BoxFuture<'static, Result<Appended, BrokerError>> {
        let started = self
            .broker
            .partition(&request.topic, request.partition)
            .and_then(|target| Ok((request.append_to(&target)?, target)));
        acknowledgement(started)
    }
}

/// The wait for an append's acknowledgement under its partition's flush policy: a group-commit
/// sync on the blocking pool under flush `always`, nothing otherwise.
fn acknowledgement(
    started: Result<(PendingAppend, Arc<Partition>), BrokerError>,
) -> BoxFuture<'static, Result<Appended, BrokerError>> {
    match started {
        Err(error) => Box::pin(futures::future::ready(Err(error))),
        Ok((pending, target)) if target.acknowledge_blocks() => {
            Box::pin(blocking(move || Ok(target.acknowledge(pending)?)))
        }
        Ok((pending, target)) => Box::pin(futures::future::ready(
            target.acknowledge(pending).map_err(BrokerError::from),
        )),
    }
}
