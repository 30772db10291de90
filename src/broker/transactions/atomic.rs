//! Native atomic appends (issue 31): a native writer appends to several partitions under its
//! *own* leases and publishes them all or nothing, through the same coordinator, markers and
//! read_committed as Kafka transactions.
//!
//! The writer calls `InitTransaction` (a transactional id, as Kafka's `InitProducerId`: the
//! stable producer id and a bumped producer epoch that fences the id's previous instance),
//! `AddToTransaction` with each partition and the epoch of its lease there, appends its
//! transactional batches with that epoch as usual, then `EndTransaction`.
//!
//! **Why the commit needs one instant.** A commit publishes every partition's batches; it must
//! be published by a writer that is still the current holder of *every* partition, or a stale
//! holder (its lease lapsed on one partition and was granted to someone else) would publish
//! there after being fenced. [`TransactionCoordinator::commit_atomically`] therefore writes the
//! commit markers with `storage::Partition::append_atomically`: every partition's fence lock
//! held at once, every marker checked at the writer's recorded epoch, the decision
//! (`PrepareCommit`) made durable, then every marker written, before any lock is released. A
//! grant on any of the partitions is either before that step (a marker is fenced, nothing is
//! written, and the transaction is aborted: the writer is told it was fenced) or after it (the
//! outcome was decided while the writer was current everywhere; a marker the step could not
//! write is then written under whatever epoch is current, as is any abort, which only hides).
//!
//! The coordinator never takes a writer's partitions: it neither acquires nor releases their
//! leases (`TxnPartition::client_leased`).

use std::sync::Arc;

use bytes::Bytes;
use tracing::warn;

use super::coordinator::{current_epoch, now_ms, unknown, CoordinatorError};
use super::markers::{marker_batch, partition_index};
use super::{EndOutcome, TransactionCoordinator, TransactionMetadata, TxnError, TxnPartition};
use crate::batch::ControlMarker;
use crate::broker::Broker;
use crate::storage::{AtomicAppend, AtomicAppendError, Partition, WriteCredential};

/// The most partitions one native atomic append spans: its commit holds every one's fence lock
/// at once, so the step stays bounded. Adding past it is refused
/// ([`CoordinatorError::TooManyPartitions`]).
pub const MAX_ATOMIC_PARTITIONS: usize = 1_000;

/// What the atomic step did.
enum Step {
    /// The transaction had already committed (a resend of the request).
    AlreadyDone,
    /// Decided and every marker written and acknowledged.
    Written,
    /// Decided; a marker is still to be written (the timeout task writes it).
    Decided(String),
}

impl TransactionCoordinator {
    /// `AddToTransaction`: `partitions` (topic, partition, the writer's lease epoch there) join
    /// the open transaction of (`producer_id`, `producer_epoch`), all or none. Each epoch must be
    /// the partition's current one now (`Fenced` otherwise, nothing added): a transaction is
    /// only ever opened under a live grant. A partition already in the transaction keeps the
    /// epoch it joined with.
    pub async fn add_client_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<(String, i32, u64)>,
    ) -> Result<(), CoordinatorError> {
        let mut joined = Vec::with_capacity(partitions.len());
        for (topic, partition, epoch) in partitions {
            if epoch == 0 {
                return Err(CoordinatorError::Unleased { topic, partition });
            }
            let current = current_epoch(&self.parts.broker, &topic, partition)?;
            if epoch != current {
                return Err(CoordinatorError::Fenced {
                    topic,
                    partition,
                    epoch,
                    current,
                });
            }
            joined.push(TxnPartition {
                topic,
                partition,
                lease_epoch: epoch,
                client_leased: true,
            });
        }
        self.registry
            .update(transactional_id, |current| {
                let current = current.ok_or(unknown(producer_id))?;
                let adding = joined
                    .iter()
                    .filter(|partition| {
                        current
                            .lease_epoch_of(&partition.topic, partition.partition)
                            .is_none()
                    })
                    .count();
                if current.partitions.len() + adding > MAX_ATOMIC_PARTITIONS {
                    return Err(TxnError::TooManyPartitions {
                        max: MAX_ATOMIC_PARTITIONS,
                    });
                }
                if current
                    .partitions
                    .iter()
                    .any(|partition| !partition.client_leased)
                {
                    return Err(TxnError::InvalidTxnState {
                        operation: "add a leased partition to a Kafka producer's",
                        state: current.state.kafka_name(),
                    });
                }
                Ok((
                    current.add_partitions(producer_id, producer_epoch, &joined, now_ms())?,
                    (),
                ))
            })
            .await?;
        Ok(())
    }

    /// `EndTransaction` with commit for a native atomic append: see the module docs. `Ok` once
    /// the commit is decided and durable (its markers are written, or the timeout task writes
    /// them); `Fenced` (or another refusal) if a partition refused its marker, after which the
    /// transaction is aborted and nothing of it is ever visible to read_committed readers.
    pub async fn commit_atomically(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<(), CoordinatorError> {
        let step_broker = Arc::clone(&self.parts.broker);
        let step = self
            .registry
            .update_within(transactional_id, move |current, saver| {
                let current = current.ok_or(unknown(producer_id))?;
                let mut next = match current.end(producer_id, producer_epoch, true)? {
                    EndOutcome::AlreadyDone => return Ok((None, Step::AlreadyDone)),
                    EndOutcome::Prepare(next) => next,
                };
                if next
                    .partitions
                    .iter()
                    .any(|partition| !partition.client_leased)
                {
                    return Err(CoordinatorError::Refused(TxnError::InvalidTxnState {
                        operation: "commit natively a Kafka producer's",
                        state: current.state.kafka_name(),
                    }));
                }
                let step = write_commit_markers(&step_broker, &mut next, |next| {
                    saver.save(next).map_err(CoordinatorError::Store)
                })?;
                Ok((Some(next), step))
            })
            .await;
        match step {
            Ok(Step::AlreadyDone) => Ok(()),
            Ok(Step::Written) => {
                let state = self
                    .registry
                    .get(transactional_id)
                    .ok_or(unknown(producer_id))?;
                self.settle(transactional_id, &state, ControlMarker::Commit)
                    .await
            }
            Ok(Step::Decided(error)) => {
                warn!(%transactional_id, %error, "the commit is decided; its remaining markers are written shortly");
                Ok(())
            }
            Err(refused @ CoordinatorError::CommitRefused { .. }) => {
                // No marker was written: the transaction cannot commit any more; abort it.
                if let Err(error) = self
                    .end(transactional_id, producer_id, producer_epoch, false)
                    .await
                {
                    warn!(%transactional_id, %error, "the refused commit's transaction is not aborted yet; the timeout task aborts it");
                }
                Err(refused)
            }
            Err(other) => Err(other),
        }
    }
}

/// The atomic step: every commit marker of `next` (prepared) checked at the writer's epochs,
/// `save(next)` under the fence locks, then every marker written and acknowledged. Blocking.
fn write_commit_markers(
    broker: &Broker,
    next: &mut TransactionMetadata,
    save: impl FnOnce(&mut TransactionMetadata) -> Result<(), CoordinatorError>,
) -> Result<Step, CoordinatorError> {
    let mut targets: Vec<Arc<Partition>> = Vec::with_capacity(next.partitions.len());
    for partition in &next.partitions {
        let index = partition_index(&partition.topic, partition.partition)?;
        targets.push(broker.partition(&partition.topic, index)?);
    }
    let now = now_ms();
    let batches: Vec<Bytes> = next
        .partitions
        .iter()
        .map(|partition| {
            marker_batch(
                next,
                partition,
                ControlMarker::Commit,
                super::markers::STANDALONE_COORDINATOR_EPOCH,
                now,
            )
        })
        .collect();
    let appends: Vec<AtomicAppend<'_>> = targets
        .iter()
        .zip(&next.partitions)
        .zip(&batches)
        .map(|((target, partition), batch)| AtomicAppend {
            partition: target,
            credential: WriteCredential::Epoch(partition.lease_epoch),
            batch,
        })
        .collect();
    let mut decided = next.clone();
    let written = Partition::append_atomically(&appends, || save(&mut decided));
    let pending = match written {
        Ok(pending) => pending,
        Err(AtomicAppendError::Refused { partition, source }) => {
            return Err(CoordinatorError::CommitRefused { partition, source })
        }
        Err(AtomicAppendError::Undecided(error)) => return Err(error),
        Err(incomplete @ AtomicAppendError::Incomplete { .. }) => {
            *next = decided;
            return Ok(Step::Decided(incomplete.to_string()));
        }
    };
    *next = decided;
    for (target, pending) in targets.iter().zip(pending) {
        if let Err(error) = target.acknowledge(pending) {
            return Ok(Step::Decided(format!("{}: {error}", target.name())));
        }
    }
    // Durable before the state completes (see `sync_marker`); until then it stays prepared,
    // and the timeout task writes the markers again.
    for target in &targets {
        if let Err(error) = super::partitions::sync_marker(target) {
            return Ok(Step::Decided(format!("{}: {error}", target.name())));
        }
    }
    Ok(Step::Written)
}
