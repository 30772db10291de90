//! The replication state the fence guards beside the producer epoch: a partition's role
//! ([`Role`]), its leader-epoch floor ([`ReplicaState`]), what a role change makes durable
//! ([`RoleChange`]), and the refusals of replication steps ([`ReplicaError`]).
//!
//! Why apart: these are the values a cluster's replication reads and persists; the fence only
//! guards them under its lock, so they are described here, without the lock.

use thiserror::Error;

use crate::domain::LeaderEpoch;

/// A partition's place in replication, kept in the fence beside the producer epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Not replicated (no `leader-epochs` file): producers write as they always did.
    Standalone,
    /// Leads the partition in the installed leader epoch: producer appends are accepted.
    Leader,
    /// Follows the leader of the installed leader epoch: only replicated appends are accepted.
    Follower,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Standalone => "standalone",
            Role::Leader => "a leader",
            Role::Follower => "a follower",
        })
    }
}

/// Why the fence refused a replication step (a replicated append, a role change) or a
/// producer append on a follower. Nothing was written.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaError {
    /// A producer append (or a lease grant) on a follower. Storage turns it into
    /// `StorageError::NotLeader`.
    #[error("this replica follows the leader of leader epoch {leader_epoch}; send writes to the partition's leader (fetch the cluster metadata to find it)")]
    NotLeader {
        /// The leader epoch this replica follows.
        leader_epoch: LeaderEpoch,
    },
    /// A replicated append on a replica that is not a follower.
    #[error("only a follower takes replicated batches; this replica is {role} (leader epoch {leader_epoch})")]
    NotFollower {
        /// What the replica is.
        role: Role,
        /// Its installed leader epoch.
        leader_epoch: LeaderEpoch,
    },
    /// The batches came from a leader of an older epoch than the installed one.
    #[error("fenced leader epoch: epoch {epoch} < current {current}; the sender was deposed")]
    FencedLeaderEpoch {
        /// Leader epoch the append carried.
        epoch: LeaderEpoch,
        /// Leader epoch installed here.
        current: LeaderEpoch,
    },
    /// The batches came from a leader epoch not installed here yet (learn it from the metadata
    /// store first). Never adopted.
    #[error("unknown leader epoch: epoch {epoch} > current {current}; install it (become_follower) before appending its batches")]
    UnknownLeaderEpoch {
        /// Leader epoch the append carried.
        epoch: LeaderEpoch,
        /// Leader epoch installed here.
        current: LeaderEpoch,
    },
    /// `become_leader`/`become_follower` with a leader epoch below the installed one.
    #[error("leader epoch {epoch} is older than the installed {current}; the caller's view of the partition is stale")]
    LeaderEpochNotNewer {
        /// Leader epoch asked for.
        epoch: LeaderEpoch,
        /// Leader epoch installed here.
        current: LeaderEpoch,
    },
}

/// The replication state the fence guards, under the same lock as the producer epoch and the
/// log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaState {
    /// Standalone, leader or follower.
    pub role: Role,
    /// The highest leader epoch installed (the leader-epoch floor; 0 when standalone).
    pub leader_epoch: LeaderEpoch,
    /// Whether a lease was granted since the partition's creation: writers without a lease are
    /// refused from then on, whoever leads.
    pub leased: bool,
}

impl ReplicaState {
    /// A standalone partition at producer epoch `current`, created at `creation_epoch`: leased
    /// once anything above the creation epoch was installed (only grants install there).
    pub fn standalone(current: u64, creation_epoch: u64) -> Self {
        Self {
            role: Role::Standalone,
            leader_epoch: 0,
            leased: current > creation_epoch,
        }
    }
}

/// What a role change asks its persist step to make durable before it takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoleChange {
    /// The role taken.
    pub role: Role,
    /// The leader epoch installed (the new floor; at least the old one).
    pub leader_epoch: LeaderEpoch,
    /// The producer epoch base to install (`producer_epoch_base(leader_epoch)`), when it is
    /// above the current producer epoch (a leader taking over); `None` otherwise.
    pub producer_epoch: Option<u64>,
    /// Whether a lease was ever granted (to record beside the floor).
    pub leased: bool,
}

/// Lets a replicated append record that the leader granted a lease (its batches carry a granted
/// epoch): the partition stays leased from then on. Only ever moves from false to true.
#[derive(Debug)]
pub struct LeaseEvidence<'a> {
    pub(super) leased: &'a mut bool,
}

impl LeaseEvidence<'_> {
    /// Whether a grant is known already.
    pub fn is_leased(&self) -> bool {
        *self.leased
    }

    /// Records that a grant happened (after the caller made that durable).
    pub fn record_grant(&mut self) {
        *self.leased = true;
    }
}
