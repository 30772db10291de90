//! Why a broker in a cluster refused (or could not finish) a client's request, with what the
//! client needs to act: the leader to go to, or whether its write may have happened.

use thiserror::Error;

use crate::cluster::meta::MetaError;
use crate::cluster::replication::leader::AcksAllError;
use crate::cluster::{LeaderEpoch, NodeId};

/// A refusal of the replica manager (or a write it could not finish). The wire mappings are in
/// `server::native::errors` and `server::kafka::errors`.
#[derive(Debug, Error)]
pub enum ClusterError {
    /// This broker does not lead the partition; `leader` is the one the metadata store names
    /// (with its address), if any. Nothing was done.
    #[error("not the leader of {topic}/{partition}")]
    NotLeader {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// The leader named in the metadata store, with its advertised address.
        leader: Option<(NodeId, String)>,
        /// The leader epoch of that state.
        leader_epoch: LeaderEpoch,
    },
    /// The partition has no leader able to serve right now (an election is under way, or this
    /// broker was just named and is taking over). Nothing was done; retry shortly.
    #[error("{topic}/{partition} has no leader serving yet (leader epoch {leader_epoch}); retry shortly")]
    LeaderNotAvailable {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// The leader epoch of the state last read.
        leader_epoch: LeaderEpoch,
    },
    /// Too few in-sync replicas for an `acks=all` write. Nothing was written.
    #[error("not enough in-sync replicas for {topic}/{partition}: {isr} in sync, min_insync {min_insync}; nothing was written, retry once followers catch up")]
    NotEnoughReplicas {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// In-sync replicas now.
        isr: usize,
        /// The partition's `min_insync`.
        min_insync: u16,
    },
    /// Too many `acks=all` writes wait for replication on this partition. Nothing was written.
    #[error("{waiting} acks=all produces already wait for replication on {topic}/{partition} (limit acks_all_waiters_max); nothing was written, retry later")]
    TooManyWaiters {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// How many wait.
        waiting: usize,
    },
    /// An `acks=all` write was appended by the leader but not acknowledged: its outcome is
    /// unknown (it may survive or not). Do not count it as written; an idempotent producer may
    /// send it again.
    #[error("{topic}/{partition}: the write was appended at offset {last_offset} but not acknowledged: {cause}")]
    NotAcknowledged {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// The batch's last offset on this (former) leader.
        last_offset: u64,
        /// Why.
        cause: AcksAllError,
    },
    /// This broker does not coordinate `group`: it does not lead the group's offsets partition.
    /// `leader` is the broker the store names for it, if any. Nothing was done.
    #[error("not the coordinator of group {group}: it is the leader of {offsets_topic}/{offsets_partition}")]
    NotCoordinator {
        /// The group.
        group: String,
        /// The internal offsets topic.
        offsets_topic: &'static str,
        /// The group's offsets partition.
        offsets_partition: u32,
        /// The partition's leader as the store names it, with its native address.
        leader: Option<(NodeId, String)>,
        /// The leader epoch of that state.
        leader_epoch: LeaderEpoch,
    },
    /// This broker just became the group's coordinator and is still reading the group's
    /// offsets partition. Nothing was done; retry shortly.
    #[error("group {group}: the coordinator is still loading {offsets_topic}/{offsets_partition}; retry shortly")]
    CoordinatorLoading {
        /// The group.
        group: String,
        /// The internal offsets topic.
        offsets_topic: &'static str,
        /// The group's offsets partition.
        offsets_partition: u32,
    },
    /// No broker can coordinate groups yet (the offsets topic cannot be created or has no
    /// leader), with why. Nothing was done; retry once the condition passes.
    #[error("group {group}: no coordinator is available: {reason}")]
    CoordinatorNotAvailable {
        /// The group.
        group: String,
        /// What is missing and what to do.
        reason: String,
    },
    /// A commit (or group snapshot) was appended to the group's offsets partition but not
    /// acknowledged by its in-sync replicas: it may survive or not. Commit again.
    #[error("group {group}: the commit was appended but its replication was not confirmed ({cause}); its outcome is unknown, commit again")]
    CommitOutcomeUnknown {
        /// The group.
        group: String,
        /// Why.
        cause: String,
    },
    /// A client asked to write, lease, create or delete the cluster's internal offsets topic,
    /// which only group coordinators write. Nothing was done.
    #[error("{topic} is the cluster's internal offsets topic: only group coordinators write it; it cannot be {operation} by clients")]
    InternalTopic {
        /// The topic.
        topic: String,
        /// What was refused (`produced to`, `leased`, `created`, `deleted`).
        operation: &'static str,
    },
    /// The metadata store refused or could not be reached.
    #[error(transparent)]
    Meta(#[from] MetaError),
    /// A change of the cluster's metadata was sent but its outcome is unknown (etcd's answer was
    /// lost and the state could not be read back), with what to check before retrying. Do not
    /// count it as done or as not done.
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// The request cannot work in a cluster (yet), with why.
    #[error("{0}")]
    Unsupported(String),
    /// The request needs a cluster and this broker runs standalone (a replication API, a
    /// replication factor above 1), with why. Nothing was done.
    #[error("{0}")]
    ClusterRequired(String),
}
