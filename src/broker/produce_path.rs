//! The produce path of every listener: the replica manager's checks before a batch is written,
//! the connection's produce queue that writes it in request order, and the wait for its commit
//! under `acks` after.
//!
//! Why one path: the native and the Kafka listener used to decide leadership and `acks` each
//! for itself; here both hand a [`ProduceRequest`] to [`ProducePath::produce`] and the replica
//! manager chosen at assembly answers every question, so neither can drift.

use std::sync::Arc;

use futures::future::BoxFuture;

pub use super::appender::ProduceRequest;

use super::appender::Appender;
use super::cluster::ReplicaManager;
use super::produce_queue::{Acknowledgement, ProduceQueue};
use super::spliced_produce::SplicedProduce;
use super::topic_admin::TopicAdmin;
use super::BrokerError;
use crate::domain::{Acks, Epoch};
use crate::storage::{Appended, WriteCredential};

/// Produces for every listener. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ProducePath {
    appender: Appender,
    replicas: ReplicaManager,
    topics: Arc<dyn TopicAdmin>,
}

impl ProducePath {
    /// Produces appended by `appender`, checked and committed as `replicas` says, refusing
    /// the topics `topics` keeps internal.
    pub fn new(appender: Appender, replicas: ReplicaManager, topics: Arc<dyn TopicAdmin>) -> Self {
        Self {
            appender,
            replicas,
            topics,
        }
    }

    /// A connection's produce queue: its produces append in the order they are submitted.
    pub fn queue(&self) -> ProduceQueue {
        ProduceQueue::new(self.appender.clone())
    }

    /// The credential a native batch stamped with `epoch` presents (see
    /// [`ReplicaManager::native_credential`]).
    pub fn native_credential(&self, epoch: Epoch) -> WriteCredential {
        self.replicas.native_credential(epoch)
    }

    /// One produce, for every listener: the replica manager checks that this broker may take
    /// it (`acks=all` needs `min_insync` in-sync replicas before anything is written), the
    /// connection's `queue` appends it *now* in request order, and the returned future waits for
    /// its acknowledgement under the flush policy and then, with `acks=all`, for every in-sync
    /// replica (`None`: the broker's default, [`ReplicaManager::default_acks`]).
    pub fn produce(
        &self,
        queue: &ProduceQueue,
        request: ProduceRequest,
        acks: Option<Acks>,
    ) -> BoxFuture<'static, Result<Appended, BrokerError>> {
        let (topic, partition) = (request.topic.clone(), request.partition);
        self.produce_through(topic, partition, acks, || queue.produce(request))
    }

    /// [`produce`](Self::produce) of a batch whose last bytes are in a pipe, not in memory (the
    /// one-copy produce path: [`crate::broker::spliced_produce`]): the same checks, order,
    /// fence and acknowledgement.
    pub fn produce_spliced(
        &self,
        queue: &ProduceQueue,
        request: SplicedProduce,
        acks: Option<Acks>,
    ) -> BoxFuture<'static, Result<Appended, BrokerError>> {
        let (topic, partition) = (request.topic.clone(), request.partition);
        self.produce_through(topic, partition, acks, || queue.produce_spliced(request))
    }

    /// The replica manager's part of a produce around `append` (the connection queue's append
    /// of the batch, in request order).
    fn produce_through(
        &self,
        topic: String,
        partition: u32,
        acks: Option<Acks>,
        append: impl FnOnce() -> Acknowledgement,
    ) -> BoxFuture<'static, Result<Appended, BrokerError>> {
        if self.replicas.append_is_commit() {
            // The leader is the only replica: its acknowledgement is the commit, whatever `acks`.
            return append();
        }
        let acks = acks.unwrap_or_else(|| self.replicas.default_acks());
        if let Err(refused) = self
            .topics
            .refuse_internal(&topic, "produced to")
            .and_then(|()| self.replicas.check_produce(&topic, partition, acks))
        {
            return Box::pin(futures::future::ready(Err(refused)));
        }
        let acknowledged = append();
        committed(self.replicas.clone(), topic, partition, acknowledged, acks)
    }

    /// [`produce`](Self::produce) of one partition's batches that a replicated leader must
    /// verify first (a Kafka transaction's first batches there): the replica manager's checks
    /// now, the appends in request order once `ready` answers with the verification's guard
    /// ([`ProduceQueue::produce_after`]), each acknowledged as `produce` does. A cluster
    /// broker's path only.
    pub fn produce_verified<E: Send + 'static>(
        &self,
        queue: &ProduceQueue,
        ready: BoxFuture<'static, Result<u64, E>>,
        requests: Vec<ProduceRequest>,
        acks: Acks,
    ) -> Result<BoxFuture<'static, Result<Vec<Acknowledgement>, E>>, BrokerError> {
        let replicas = self.replicas.clone();
        let mut partitions = Vec::with_capacity(requests.len());
        for request in &requests {
            self.topics.refuse_internal(&request.topic, "produced to")?;
            replicas.check_produce(&request.topic, request.partition, acks)?;
            partitions.push((request.topic.clone(), request.partition));
        }
        let appended = queue.produce_after(ready, requests);
        Ok(Box::pin(async move {
            let acknowledgements = appended.await?;
            Ok(acknowledgements
                .into_iter()
                .zip(partitions)
                .map(|(acknowledged, (topic, partition))| {
                    committed(replicas.clone(), topic, partition, acknowledged, acks)
                })
                .collect())
        }))
    }
}

/// An append's wait for its acknowledgement, then for its commit under `acks` (every in-sync
/// replica for `acks=all`).
fn committed(
    replicas: ReplicaManager,
    topic: String,
    partition: u32,
    acknowledged: Acknowledgement,
    acks: Acks,
) -> Acknowledgement {
    Box::pin(async move {
        let appended = acknowledged.await?;
        replicas
            .await_commit(&topic, partition, appended.last_offset, acks)
            .await?;
        Ok(appended)
    })
}
