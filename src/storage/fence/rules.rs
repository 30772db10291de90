//! The standing rules of the fence: where an epoch stands against the installed one (stale,
//! current, ahead), what a write presents ([`WriteCredential`]), and the refusals they give
//! ([`FenceError`]).
//!
//! Why apart: these comparisons are pure functions, the one copy of the rule every fence check
//! applies (the producer-epoch fence and the leader-epoch fence alike); the lock that makes them
//! hold against concurrent installs is the [`Fence`](super::Fence)'s.

use thiserror::Error;

use super::ReplicaError;
use crate::domain::LeaderEpoch;

/// Why the fence refused an append or an install.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum FenceError {
    /// The writer's epoch is older than the partition's: its lease was lost. Not retriable.
    #[error("fenced: epoch {epoch} < current {current}")]
    Fenced {
        /// Epoch the append carried.
        epoch: u64,
        /// The partition's current epoch.
        current: u64,
    },
    /// The epoch was never granted (higher than current, or 0 before any grant). Never adopted.
    #[error("unknown epoch: epoch {epoch} was never granted (current {current})")]
    UnknownEpoch {
        /// Epoch the append carried.
        epoch: u64,
        /// The partition's current epoch.
        current: u64,
    },
    /// A writer without a lease (see [`WriteCredential::Unleased`]) on a partition that has
    /// granted one: it is fenced off, as a stale holder is.
    #[error(
        "fenced: the partition is leased (epoch {current}); writers without a lease are refused"
    )]
    Leased {
        /// The partition's current epoch.
        current: u64,
    },
    /// `install_epoch` with an epoch not above the current one.
    #[error("epoch {epoch} is not newer than current {current}")]
    EpochNotNewer {
        /// Epoch asked for.
        epoch: u64,
        /// The partition's current epoch.
        current: u64,
    },
}

/// The fence check itself: lower is fenced, higher is unknown, equal is the current holder.
/// Epoch 0 is never granted (grants start at 1): it is unknown, whatever the current epoch, so
/// a writer that never acquired a lease is told so rather than told it lost one.
pub fn check_epoch(epoch: u64, current: u64) -> Result<(), FenceError> {
    check_epoch_since(epoch, current, 0)
}

/// [`check_epoch`] on a partition created at `creation_epoch` (see the module docs): that
/// epoch was never granted, so it is unknown like 0 is, and every epoch below it belongs to a
/// deleted incarnation of the partition and is fenced.
pub fn check_epoch_since(epoch: u64, current: u64, creation_epoch: u64) -> Result<(), FenceError> {
    debug_assert!(creation_epoch <= current, "the creation epoch is installed");
    if epoch == 0 || epoch == creation_epoch {
        return Err(FenceError::UnknownEpoch { epoch, current });
    }
    match epoch_standing(epoch, current) {
        EpochStanding::Stale => Err(FenceError::Fenced { epoch, current }),
        EpochStanding::Current => Ok(()),
        EpochStanding::Ahead => Err(FenceError::UnknownEpoch { epoch, current }),
    }
}

/// What a write presents to the fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteCredential {
    /// A fencing token from a lease grant: accepted while it is the current epoch.
    Epoch(u64),
    /// No lease at all: a writer that has no notion of one (a Kafka producer through the Kafka
    /// listener). Accepted only while the partition has never granted a lease (its current
    /// epoch is still its creation epoch: 0, or the floor of a re-created partition); its
    /// batches carry epoch 0. The first grant fences every such writer, exactly as it fences a
    /// stale holder, so a leased partition has one writer whatever the listener.
    Unleased,
}

impl WriteCredential {
    /// The epoch the write's batches carry.
    pub fn epoch(self) -> u64 {
        match self {
            WriteCredential::Epoch(epoch) => epoch,
            WriteCredential::Unleased => 0,
        }
    }
}

/// The fence check of any credential on a partition created at epoch 0 (see
/// [`check_credential_since`]).
pub fn check_credential(credential: WriteCredential, current: u64) -> Result<(), FenceError> {
    check_credential_since(credential, current, 0)
}

/// The fence check of any credential on a partition created at `creation_epoch`: a lease's
/// epoch as [`check_epoch_since`] says; no lease only while no grant happened since creation.
pub fn check_credential_since(
    credential: WriteCredential,
    current: u64,
    creation_epoch: u64,
) -> Result<(), FenceError> {
    match credential {
        WriteCredential::Epoch(epoch) => check_epoch_since(epoch, current, creation_epoch),
        WriteCredential::Unleased if current == creation_epoch => Ok(()),
        WriteCredential::Unleased => Err(FenceError::Leased { current }),
    }
}

/// Where an epoch stands against the installed one: the one comparison both fences make (the
/// producer-epoch check adds its never-granted epochs on top; the leader-epoch check is exactly
/// this).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochStanding {
    /// Below the installed epoch: its holder was superseded (fenced).
    Stale,
    /// The installed epoch itself.
    Current,
    /// Above the installed epoch: never installed here (unknown), never adopted.
    Ahead,
}

/// Compares `epoch` with the installed `current`.
pub fn epoch_standing<T: Ord>(epoch: T, current: T) -> EpochStanding {
    match epoch.cmp(&current) {
        std::cmp::Ordering::Less => EpochStanding::Stale,
        std::cmp::Ordering::Equal => EpochStanding::Current,
        std::cmp::Ordering::Greater => EpochStanding::Ahead,
    }
}

/// The leader-epoch check of a replicated append: lower fenced, equal fine, higher unknown.
pub fn check_leader_epoch(epoch: LeaderEpoch, current: LeaderEpoch) -> Result<(), ReplicaError> {
    match epoch_standing(epoch, current) {
        EpochStanding::Stale => Err(ReplicaError::FencedLeaderEpoch { epoch, current }),
        EpochStanding::Current => Ok(()),
        EpochStanding::Ahead => Err(ReplicaError::UnknownLeaderEpoch { epoch, current }),
    }
}
