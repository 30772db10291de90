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
