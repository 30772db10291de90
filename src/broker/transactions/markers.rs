//! Writing a transaction's outcome into its partitions: one control batch per partition
//! (`batch::control_batch`), through the same produce path as every record.
//!
//! Why through the produce path ([`TransactionPartitions::write_marker`]: the broker's own
//! `BrokerService::produce` standalone) and not a side door: the marker must pass the fence in
//! the segment writer like any append, with `WriteCredential::Epoch(F)` where `F` is the lease
//! epoch the coordinator holds for `kafka-txn:T` on that partition. A coordinator that lost the
//! lease (its epoch moved on) is then refused exactly like a zombie producer, and with
//! `acks=all` a marker counts as written only once it is committed on every in-sync replica
//! (standalone: once it is synced, whatever the partition's flush policy, see
//! `partitions::sync_marker`), so an acknowledged commit is never lost. The partition's
//! producer state closes the producer's open transaction on the marker (and refuses a marker
//! below the producer epoch it knows).
//!
//! The caller (EndTxn, the abort-first `InitProducerId`, the timeout task) decides the state
//! first (`Prepare*` written durably), then calls [`write_markers`], then completes the state:
//! a crash between the two leaves `Prepare*` on disk, and the markers are written again on
//! restart (a second marker of the same outcome closes nothing and is harmless to readers).

use super::partitions::TransactionPartitions;
use super::TransactionMetadata;
use crate::batch::{control_batch, ControlMarker};
use crate::broker::BrokerError;

/// The coordinator epoch a standalone broker writes into markers. Kafka uses it to order the
/// coordinators of a `__transaction_state` partition, and so does a cluster (the leader epoch of
/// the id's offsets partition; the partition's producer state refuses a marker below the last
/// one's); a standalone broker has one coordinator for ever.
pub const STANDALONE_COORDINATOR_EPOCH: i32 = 0;

/// A Kafka partition index (i32) as the broker's `u32`; a negative one is refused.
pub(super) fn partition_index(topic: &str, partition: i32) -> Result<u32, BrokerError> {
    u32::try_from(partition).map_err(|_| {
        BrokerError::InvalidPartitions(format!("partition {partition} of {topic} is negative"))
    })
}

/// The control batch of `marker` for `state`'s producer on `partition`, written under the lease
/// epoch recorded for it by the coordinator of `coordinator_epoch`, at `now_ms`.
pub(super) fn marker_batch(
    state: &TransactionMetadata,
    partition: &super::TxnPartition,
    marker: ControlMarker,
    coordinator_epoch: i32,
    now_ms: i64,
) -> bytes::Bytes {
    control_batch(
        partition.lease_epoch,
        state.producer_id,
        state.producer_epoch,
        marker,
        coordinator_epoch,
        now_ms,
    )
}

/// A partition whose marker was not written, and why.
#[derive(Debug, thiserror::Error)]
#[error("the {marker:?} marker of {topic}-{partition} was not written: {source}; the transaction stays prepared and its markers are written again")]
pub struct MarkerError {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// Which marker.
    pub marker: ControlMarker,
    /// Why (the fence refused it, the partition moved, the write failed).
    #[source]
    pub source: BrokerError,
}

/// Writes `marker` for `state`'s producer (its current producer id and epoch) on every
/// partition of its transaction, each with the lease epoch recorded for it, with `acks=all`.
/// Every marker is submitted before any is awaited (one round of replication, not one per
/// partition); the first failure is returned after all have finished.
pub async fn write_markers(
    partitions: &dyn TransactionPartitions,
    state: &TransactionMetadata,
    marker: ControlMarker,
    coordinator_epoch: i32,
) -> Result<(), MarkerError> {
    let now_ms = super::now_ms();
    let mut pending = Vec::with_capacity(state.partitions.len());
    for partition in &state.partitions {
        let batch = marker_batch(state, partition, marker, coordinator_epoch, now_ms);
        let index = partition_index(&partition.topic, partition.partition).map_err(|source| {
            MarkerError {
                topic: partition.topic.clone(),
                partition: partition.partition,
                marker,
                source,
            }
        })?;
        let written =
            partitions.write_marker(&partition.topic, index, partition.lease_epoch, batch);
        pending.push((partition, written));
    }
    let mut first_error = None;
    for (partition, written) in pending {
        if let Err(source) = written.await {
            first_error.get_or_insert(MarkerError {
                topic: partition.topic.clone(),
                partition: partition.partition,
                marker,
                source,
            });
        }
    }
    first_error.map_or(Ok(()), Err)
}
