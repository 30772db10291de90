//! Where consumer groups' committed offsets are kept: the seam between the group service and
//! the mode.
//!
//! Standalone they are files of the data directory ([`LocalOffsetStore`], on
//! [`crate::broker::GroupOffsets`]); on a cluster they are records of the replicated offsets
//! topic, kept by the leader of each group's offsets partition (the implementation lives with
//! that topic, `crate::broker::offsets_topic::store`). The mode picks one at assembly.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::broker::groups::{PartitionCommits, PartitionKey};
use crate::broker::{blocking, Broker, BrokerError, CommittedOffset};
use crate::domain::NodeId;

/// The committed offsets of the groups this broker coordinates.
pub trait OffsetStore: Send + Sync + std::fmt::Debug {
    /// Ok when this broker coordinates `group` now; else who does (`NotCoordinator`), or why
    /// nobody can yet. A broker that just became coordinator loads the group first.
    fn require_coordinator<'a>(&'a self, group: &'a str) -> BoxFuture<'a, Result<(), BrokerError>>;

    /// The node id of the broker coordinating `group`.
    fn coordinator_of<'a>(&'a self, group: &'a str) -> BoxFuture<'a, Result<NodeId, BrokerError>>;

    /// The names of the groups holding committed offsets that this broker coordinates, sorted.
    fn group_names(&self) -> Vec<String>;

    /// Whether `group` holds committed offsets.
    fn has_committed_offsets<'a>(&'a self, group: &'a str) -> BoxFuture<'a, bool>;

    /// Writes `positions` of `group` durably, all or none.
    fn commit<'a>(
        &'a self,
        group: &'a str,
        positions: PartitionCommits,
    ) -> BoxFuture<'a, Result<(), BrokerError>>;

    /// Deletes `group`'s positions of `partitions` (`None`: all of them) durably.
    fn delete<'a>(
        &'a self,
        group: &'a str,
        partitions: Option<Vec<PartitionKey>>,
    ) -> BoxFuture<'a, Result<(), BrokerError>>;

    /// Every position `group` committed.
    fn committed_all<'a>(
        &'a self,
        group: &'a str,
    ) -> BoxFuture<'a, Result<PartitionCommits, BrokerError>>;

    /// The position `group` last committed for `topic/partition`, if any.
    fn committed<'a>(
        &'a self,
        group: &'a str,
        topic: &'a str,
        partition: u32,
    ) -> BoxFuture<'a, Result<Option<CommittedOffset>, BrokerError>>;
}

/// A standalone broker's committed offsets: in its data directory (`DATA/groups/`), and this
/// broker coordinates every group.
#[derive(Debug)]
pub struct LocalOffsetStore {
    broker: Arc<Broker>,
    node_id: NodeId,
}

impl LocalOffsetStore {
    /// The offsets of `broker`, which is node `node_id`.
    pub fn new(broker: Arc<Broker>, node_id: NodeId) -> Self {
        Self { broker, node_id }
    }
}

impl OffsetStore for LocalOffsetStore {
    fn require_coordinator<'a>(
        &'a self,
        _group: &'a str,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        futures::future::ready(Ok(())).boxed()
    }

    fn coordinator_of<'a>(&'a self, _group: &'a str) -> BoxFuture<'a, Result<NodeId, BrokerError>> {
        futures::future::ready(Ok(self.node_id)).boxed()
    }

    fn group_names(&self) -> Vec<String> {
        self.broker.group_offsets().group_names()
    }

    fn has_committed_offsets<'a>(&'a self, group: &'a str) -> BoxFuture<'a, bool> {
        futures::future::ready(self.broker.group_offsets().has_group(group)).boxed()
    }

    fn commit<'a>(
        &'a self,
        group: &'a str,
        positions: PartitionCommits,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        let broker = Arc::clone(&self.broker);
        let group = group.to_owned();
        blocking(move || Ok(broker.group_offsets().commit_all(&group, positions)?)).boxed()
    }

    fn delete<'a>(
        &'a self,
        group: &'a str,
        partitions: Option<Vec<PartitionKey>>,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        let broker = Arc::clone(&self.broker);
        let group = group.to_owned();
        blocking(move || {
            broker
                .group_offsets()
                .delete(&group, partitions.as_deref())?;
            Ok(())
        })
        .boxed()
    }

    fn committed_all<'a>(
        &'a self,
        group: &'a str,
    ) -> BoxFuture<'a, Result<PartitionCommits, BrokerError>> {
        futures::future::ready(
            self.broker
                .group_offsets()
                .committed_all(group)
                .map_err(BrokerError::from),
        )
        .boxed()
    }

    fn committed<'a>(
        &'a self,
        group: &'a str,
        topic: &'a str,
        partition: u32,
    ) -> BoxFuture<'a, Result<Option<CommittedOffset>, BrokerError>> {
        futures::future::ready(
            self.broker
                .group_offsets()
                .committed(group, topic, partition)
                .map_err(BrokerError::from),
        )
        .boxed()
    }
}
