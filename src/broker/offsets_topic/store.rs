//! The replicated offsets topic as the group service's [`OffsetStore`]: a cluster member's
//! committed offsets, kept by the leader of each group's offsets partition.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::ReplicatedOffsets;
use crate::broker::coordinator::GroupCoordinator;
use crate::broker::group_service::OffsetStore;
use crate::broker::groups::{PartitionCommits, PartitionKey};
use crate::broker::{BrokerError, CommittedOffset};
use crate::domain::NodeId;

/// The committed offsets of a cluster member, in `offsets`, loaded into `coordinator` when this
/// broker becomes a group's coordinator.
#[derive(Debug)]
pub struct ReplicatedOffsetStore {
    offsets: Arc<ReplicatedOffsets>,
    coordinator: Arc<GroupCoordinator>,
}

impl ReplicatedOffsetStore {
    /// The store of `offsets`, whose group snapshots `coordinator` takes (attached here).
    pub fn new(offsets: Arc<ReplicatedOffsets>, coordinator: Arc<GroupCoordinator>) -> Self {
        offsets.attach(&coordinator);
        Self {
            offsets,
            coordinator,
        }
    }
}

impl OffsetStore for ReplicatedOffsetStore {
    fn require_coordinator<'a>(&'a self, group: &'a str) -> BoxFuture<'a, Result<(), BrokerError>> {
        self.offsets
            .require_coordinator(&self.coordinator, group)
            .boxed()
    }

    fn coordinator_of<'a>(&'a self, group: &'a str) -> BoxFuture<'a, Result<NodeId, BrokerError>> {
        self.offsets.coordinator_of(group).boxed()
    }

    fn group_names(&self) -> Vec<String> {
        self.offsets.group_names()
    }

    fn has_committed_offsets<'a>(&'a self, group: &'a str) -> BoxFuture<'a, bool> {
        async move {
            self.offsets
                .committed_all(&self.coordinator, group)
                .await
                .is_ok_and(|commits| !commits.is_empty())
        }
        .boxed()
    }

    fn commit<'a>(
        &'a self,
        group: &'a str,
        positions: PartitionCommits,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        self.offsets
            .commit(&self.coordinator, group, positions)
            .boxed()
    }

    fn delete<'a>(
        &'a self,
        group: &'a str,
        partitions: Option<Vec<PartitionKey>>,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        self.offsets
            .delete(&self.coordinator, group, partitions)
            .boxed()
    }

    fn committed_all<'a>(
        &'a self,
        group: &'a str,
    ) -> BoxFuture<'a, Result<PartitionCommits, BrokerError>> {
        self.offsets.committed_all(&self.coordinator, group).boxed()
    }

    fn committed<'a>(
        &'a self,
        group: &'a str,
        topic: &'a str,
        partition: u32,
    ) -> BoxFuture<'a, Result<Option<CommittedOffset>, BrokerError>> {
        self.offsets
            .committed(&self.coordinator, group, topic, partition)
            .boxed()
    }
}
