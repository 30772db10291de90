//! The broker's replica log: [`crate::storage::Partition`] as a [`ReplicaLog`].
//!
//! Storage does the work (`src/storage/partition/replicate.rs`, `truncate.rs`,
//! `high_watermark.rs`); this file only maps its typed errors onto the trait's, so that the
//! replication logic sees the same errors from the broker's partitions as from the simulation's
//! in-memory log.

use super::replica_log::{ReplicaLog, ReplicaLogError};
use super::LeaderEpoch;
use crate::storage::{Partition, ReplicaError, StorageError};

impl ReplicaLog for Partition {
    fn log_end_offset(&self) -> u64 {
        Partition::log_end_offset(self)
    }

    fn log_start_offset(&self) -> u64 {
        Partition::log_start_offset(self)
    }

    fn high_watermark(&self) -> u64 {
        Partition::high_watermark(self)
    }

    fn durable_end_offset(&self) -> u64 {
        Partition::acknowledged_end_offset(self)
    }

    fn leader_epoch_floor(&self) -> LeaderEpoch {
        Partition::leader_epoch_floor(self)
    }

    fn latest_epoch_entry(&self) -> Option<(LeaderEpoch, u64)> {
        Partition::latest_leader_epoch_entry(self)
    }

    fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, u64)> {
        Partition::end_offset_for_epoch(self, epoch)
    }

    fn become_leader(&self, epoch: LeaderEpoch) -> Result<(), ReplicaLogError> {
        Partition::become_leader(self, epoch).map_err(replica_log_error)
    }

    fn become_follower(&self, epoch: LeaderEpoch) -> Result<(), ReplicaLogError> {
        Partition::become_follower(self, epoch).map_err(replica_log_error)
    }

    fn append_replicated(
        &self,
        batches: &[u8],
        records_epoch: LeaderEpoch,
        leader_epoch: LeaderEpoch,
    ) -> Result<u64, ReplicaLogError> {
        Partition::append_replicated(self, batches, records_epoch, leader_epoch)
            .map_err(replica_log_error)
    }

    fn truncate_to(&self, offset: u64) -> Result<(), ReplicaLogError> {
        Partition::truncate_to(self, offset).map_err(replica_log_error)
    }

    fn start_over_at(&self, offset: u64) -> Result<(), ReplicaLogError> {
        Partition::start_over_at(self, offset).map_err(replica_log_error)
    }

    fn advance_high_watermark(&self, offset: u64) {
        Partition::advance_high_watermark(self, offset)
    }
}

/// The trait's error for a storage error: the fence's and the log's refusals keep their
/// meaning; a corrupt or malformed batch is `Corrupt`; everything else (disk, a deleted topic,
/// a wrong role) is `Storage` with storage's message, which says what to do.
pub fn replica_log_error(error: StorageError) -> ReplicaLogError {
    match error {
        StorageError::Replica(ReplicaError::FencedLeaderEpoch { epoch, current }) => {
            ReplicaLogError::FencedLeaderEpoch { epoch, current }
        }
        StorageError::Replica(ReplicaError::UnknownLeaderEpoch { epoch, current }) => {
            ReplicaLogError::UnknownLeaderEpoch { epoch, current }
        }
        StorageError::Replica(ReplicaError::LeaderEpochNotNewer { epoch, current }) => {
            ReplicaLogError::EpochNotNewer { epoch, current }
        }
        StorageError::ReplicaOffsetMismatch {
            base_offset,
            log_end_offset,
        } => ReplicaLogError::OffsetMismatch {
            base_offset,
            log_end_offset,
        },
        error @ (StorageError::InvalidBatch(_) | StorageError::BatchTooLarge { .. }) => {
            ReplicaLogError::Corrupt(error.to_string())
        }
        other => ReplicaLogError::Storage(other.to_string()),
    }
}
