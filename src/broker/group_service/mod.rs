//! The group service: consumer groups for every listener: their membership (Kafka's classic
//! protocol and KIP-848's consumer protocol) and their committed offsets, over the
//! [`OffsetStore`] the mode chose at assembly.
//!
//! Why a part of its own: eighteen methods of the broker service used to be this service in
//! disguise, each asking whether the broker was in a cluster. Here the question is answered
//! once, by which [`OffsetStore`] and [`TopicAdmin`] were given, and the rules (what may be
//! committed, when a group may be deleted) are written once for both modes.

mod offset_store;

use std::sync::Arc;

pub use offset_store::{LocalOffsetStore, OffsetStore};

use super::consumer_groups::ConsumerGroups;
use super::coordinator::GroupCoordinator;
use super::groups::{GroupOffsetsConfig, PartitionCommits, PartitionKey};
use super::topic_admin::TopicAdmin;
use super::{BrokerError, CommittedOffset, GroupOffsetsError};
use crate::domain::NodeId;

/// One position of a group to commit: topic, partition, offset and metadata.
pub type OffsetToCommit = (String, u32, CommittedOffset);

/// How far a committed position may go (the listeners' protocols differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitBound {
    /// Not past the partition's high watermark where this broker can tell (standalone): the
    /// native protocol's rule, which catches a consumer committing what it never read.
    HighWatermark,
    /// Any offset of an existing partition: Kafka's OffsetCommit, which tools use to set a
    /// group's position ahead (`kafka-consumer-groups --reset-offsets --to-offset`).
    Existence,
}

/// What [`GroupService::commit_offsets`] did.
#[derive(Debug)]
pub struct OffsetCommits {
    /// Each position's own check, in request order; the `Ok` ones were written.
    pub checked: Vec<Result<(), BrokerError>>,
    /// The one durable write of every position that passed its check (`Ok` if there was none).
    pub written: Result<(), BrokerError>,
}

/// Consumer groups of this broker. Cheap to clone.
#[derive(Debug, Clone)]
pub struct GroupService {
    coordinator: Arc<GroupCoordinator>,
    consumer_groups: Arc<ConsumerGroups>,
    store: Arc<dyn OffsetStore>,
    topics: Arc<dyn TopicAdmin>,
    limits: GroupOffsetsConfig,
}

impl GroupService {
    /// Groups whose membership `coordinator` and `consumer_groups` keep, whose offsets `store`
    /// keeps within `limits`, committed to the partitions `topics` knows.
    pub fn new(
        coordinator: Arc<GroupCoordinator>,
        consumer_groups: Arc<ConsumerGroups>,
        store: Arc<dyn OffsetStore>,
        topics: Arc<dyn TopicAdmin>,
        limits: GroupOffsetsConfig,
    ) -> Self {
        Self {
            coordinator,
            consumer_groups,
            store,
            topics,
            limits,
        }
    }

    /// The consumer-group coordinator (membership and generations of Kafka's classic group
    /// protocol). Its groups live in the offsets partitions on a cluster, in `DATA/groups/`
    /// standalone (loaded at assembly, so a restart keeps stable groups stable).
    pub fn coordinator(&self) -> &Arc<GroupCoordinator> {
        &self.coordinator
    }

    /// The coordinator of consumer-protocol (KIP-848) groups: membership in memory only (see
    /// [`ConsumerGroups`]); their committed offsets are in the same store as classic groups'.
    /// On a cluster it answers for the groups whose offsets partition this broker leads
    /// ([`Self::require_coordinator`] first, as for classic groups).
    pub fn consumer_groups(&self) -> &ConsumerGroups {
        &self.consumer_groups
    }

    /// Ok when this broker coordinates `group` (standalone: always). In a cluster the
    /// coordinator is the leader of the group's offsets partition; another broker answers
    /// `NotCoordinator` naming it, and a broker that just took the partition over loads it
    /// first.
    pub async fn require_coordinator(&self, group: &str) -> Result<(), BrokerError> {
        self.store.require_coordinator(group).await
    }

    /// The node id of the broker coordinating `group`: this one standalone; on a cluster the
    /// leader of the group's offsets partition.
    pub async fn coordinator_of(&self, group: &str) -> Result<NodeId, BrokerError> {
        self.store.coordinator_of(group).await
    }

    /// The names of the groups holding committed offsets that this broker coordinates, sorted.
    pub fn group_names(&self) -> Vec<String> {
        self.store.group_names()
    }

    /// Whether `group` holds committed offsets (on a cluster, as its coordinator loaded them).
    pub async fn has_committed_offsets(&self, group: &str) -> bool {
        self.store.has_committed_offsets(group).await
    }

    /// Whether `topic/partition` exists (on a cluster: in the store's view, whether or not this
    /// broker holds a copy).
    pub fn partition_exists(&self, topic: &str, partition: u32) -> bool {
        self.topics.commit_target(topic, partition).is_ok()
    }

    /// Commits `group`'s position in `topic/partition` (the offset of the next record it will
    /// read) durably: `Ok` means it survives a crash (on a cluster: every in-sync replica of the
    /// group's offsets partition has it). The partition must exist and, standalone, the offset
    /// must not be past its high watermark; an offset below the log start is accepted (the
    /// consumer learns it is gone when it fetches there).
    pub async fn commit_offset(
        &self,
        group: String,
        topic: String,
        partition: u32,
        committed: CommittedOffset,
    ) -> Result<(), BrokerError> {
        let commits = self
            .commit_offsets(group, vec![(topic, partition, committed)])
            .await;
        match commits.checked.into_iter().next() {
            Some(Err(refused)) => Err(refused),
            _ => commits.written,
        }
    }

    /// Commits several of `group`'s positions in one durable write. Each is checked on its own
    /// (the partition exists; standalone, the offset is not past its high watermark; the
    /// metadata is within the store's limit) and gets its own result, in request order; those
    /// that pass are written together, all or none, and [`OffsetCommits::written`] says how
    /// that went.
    ///
    /// On a cluster the coordinator need not hold a copy of the committed partitions, so only
    /// their existence is checked there (as Kafka does), and the write is one record of the
    /// group's offsets partition.
    pub async fn commit_offsets(
        &self,
        group: String,
        offsets: Vec<OffsetToCommit>,
    ) -> OffsetCommits {
        self.commit_offsets_within(group, offsets, CommitBound::HighWatermark)
            .await
    }

    /// [`GroupService::commit_offsets`] with the bound of `bound` (Kafka's OffsetCommit passes
    /// [`CommitBound::Existence`]).
    pub async fn commit_offsets_within(
        &self,
        group: String,
        offsets: Vec<OffsetToCommit>,
        bound: CommitBound,
    ) -> OffsetCommits {
        let mut checked = Vec::with_capacity(offsets.len());
        let mut to_write: PartitionCommits = Vec::with_capacity(offsets.len());
        for (topic, partition, committed) in offsets {
            let check = self.check_commit(&topic, partition, &committed, bound);
            if check.is_ok() {
                to_write.push(((topic, partition), committed));
            }
            checked.push(check);
        }
        let written = match to_write.is_empty() {
            true => Ok(()),
            false => self.store.commit(&group, to_write).await,
        };
        OffsetCommits { checked, written }
    }

    /// One position's own check before it is committed.
    fn check_commit(
        &self,
        topic: &str,
        partition: u32,
        committed: &CommittedOffset,
        bound: CommitBound,
    ) -> Result<(), BrokerError> {
        let high_watermark = self.topics.commit_target(topic, partition)?;
        let max_metadata_bytes = self.limits.max_metadata_bytes;
        if committed.metadata.len() > max_metadata_bytes {
            return Err(BrokerError::GroupOffsets(
                GroupOffsetsError::MetadataTooLarge {
                    bytes: committed.metadata.len(),
                    max: max_metadata_bytes,
                },
            ));
        }
        match high_watermark.filter(|_| bound == CommitBound::HighWatermark) {
            Some(high_watermark) if committed.offset > high_watermark => {
                Err(BrokerError::CommitOutOfRange {
                    topic: topic.to_owned(),
                    partition,
                    offset: committed.offset,
                    high_watermark,
                })
            }
            _ => Ok(()),
        }
    }

    /// Deletes group `group` (Kafka's DeleteGroups): it must have no members; its committed
    /// offsets and (on a cluster) its membership snapshot are deleted durably. `GroupNotFound`
    /// if it has neither members nor committed offsets, `GroupNotEmpty` if it has members; on a
    /// cluster, only its coordinator deletes it.
    pub async fn delete_group(&self, group: &str) -> Result<(), BrokerError> {
        self.limits.check_group(group)?;
        self.require_coordinator(group).await?;
        if let Some(active) = self
            .consumer_groups
            .describe(group, std::time::Instant::now())
        {
            return Err(BrokerError::GroupNotEmpty {
                group: group.to_owned(),
                members: active.members.len(),
            });
        }
        let known = self
            .coordinator
            .remove_empty_group(group)
            .map_err(|refused| BrokerError::GroupNotEmpty {
                group: group.to_owned(),
                members: refused.members,
            })?;
        let has_offsets = self.has_committed_offsets(group).await;
        if !known && !has_offsets {
            return Err(BrokerError::GroupNotFound(group.to_owned()));
        }
        self.store.delete(group, None).await
    }

    /// Deletes `group`'s committed offsets of `partitions` (Kafka's OffsetDelete; the Kafka
    /// handler decides which partitions an active group may lose). `GroupNotFound` if the group
    /// has neither members nor committed offsets. Partitions it never committed are no error.
    pub async fn delete_committed_offsets(
        &self,
        group: &str,
        partitions: Vec<PartitionKey>,
    ) -> Result<(), BrokerError> {
        self.limits.check_group(group)?;
        self.require_coordinator(group).await?;
        let known = self.coordinator.describe(group).is_some();
        if !known && !self.has_committed_offsets(group).await {
            return Err(BrokerError::GroupNotFound(group.to_owned()));
        }
        if partitions.is_empty() {
            return Ok(());
        }
        self.store.delete(group, Some(partitions)).await
    }

    /// Every position `group` committed, by topic and partition (nothing committed: empty).
    pub async fn committed_offsets(&self, group: &str) -> Result<PartitionCommits, BrokerError> {
        self.store.committed_all(group).await
    }

    /// The offset `group` last committed for `topic/partition`, or `None` if it never did.
    pub async fn committed_offset(
        &self,
        group: &str,
        topic: &str,
        partition: u32,
    ) -> Result<Option<CommittedOffset>, BrokerError> {
        self.topics.commit_target(topic, partition)?;
        self.store.committed(group, topic, partition).await
    }
}
