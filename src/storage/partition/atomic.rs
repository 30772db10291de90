//! One batch to each of several partitions as one step: every fence checked, then a decision,
//! then every write, with every partition's fence lock held throughout.
//!
//! This is how a native atomic append commits (issue 31): the coordinator's commit markers are
//! written only if the writer's lease epoch is still current on *every* partition of the
//! transaction at one instant. Checking the partitions one after another would not do: a grant
//! on the first one could fall between its check and the last one's, and the commit would then
//! be published by a writer already fenced there. Holding every fence's lock from the first
//! check to the last write orders the whole step against every grant (a grant installs its
//! epoch under the same lock, see [`super::super::fence`]), so the step either precedes a grant
//! on a partition or follows it, never straddles it.
//!
//! `decide` runs between the checks and the writes, under the locks: the coordinator makes the
//! outcome durable there, so that once any marker may reach the disk the decision is on disk
//! too, and recovery completes the others. Its fsync is paid while the locks are held, on
//! partitions the committing writer leases itself (nobody else may write there anyway).
//!
//! Deadlock freedom: the locks are taken in one global order (partition name), and no other
//! path holds one fence lock while taking another.

use super::super::fence::HeldFence;
use super::super::StorageError;
use super::{Partition, PendingAppend, Writer};
use crate::batch::{self, BatchHeader, BatchSlices, ProducerStamp};
use crate::storage::producer_state::SequenceVerdict;
use crate::storage::{FenceError, WriteCredential};

/// One batch of an atomic append.
#[derive(Debug, Clone, Copy)]
pub struct AtomicAppend<'a> {
    /// Where it goes; each partition at most once per append.
    pub partition: &'a Partition,
    /// What its fence must accept (the batch header carries the same epoch).
    pub credential: WriteCredential,
    /// The batch, in its stored format.
    pub batch: &'a [u8],
}

/// Why an atomic append did not write everything.
#[derive(Debug, thiserror::Error)]
pub enum AtomicAppendError<E> {
    /// A partition refused its batch before anything was written (fenced, deleted, failed, an
    /// invalid batch, a producer epoch older than the partition's): nothing of the append is
    /// written, and `decide` did not run.
    #[error("{partition}: {source}")]
    Refused {
        /// `topic/partition` of the first refusal (in lock order).
        partition: String,
        /// Why.
        #[source]
        source: StorageError,
    },
    /// `decide` failed: nothing is written.
    #[error("not decided: {0}")]
    Undecided(E),
    /// Decided, then a write failed (a full disk, an I/O error): the batches of partitions
    /// before it in lock order are written, the rest are not. The decision stands; the caller
    /// completes it.
    #[error("{partition}: {source} (the outcome was decided; some batches are written)")]
    Incomplete {
        /// `topic/partition` of the failed write.
        partition: String,
        /// Why.
        #[source]
        source: StorageError,
    },
}

impl Partition {
    /// Appends `appends[i].batch` to `appends[i].partition` for every `i`, as one step: every
    /// fence is locked (in name order), every credential checked as [`Partition::append_as`]
    /// would, then `decide` runs, then every batch is written, and only then are the locks
    /// released. On success, the pending appends in the order of `appends` (acknowledge each
    /// with [`Partition::acknowledge`]). Blocking while `decide` runs.
    pub fn append_atomically<E>(
        appends: &[AtomicAppend<'_>],
        decide: impl FnOnce() -> Result<(), E>,
    ) -> Result<Vec<PendingAppend>, AtomicAppendError<E>> {
        let refused =
            |append: &AtomicAppend<'_>, source: StorageError| AtomicAppendError::Refused {
                partition: append.partition.name.clone(),
                source,
            };
        let mut headers = Vec::with_capacity(appends.len());
        for append in appends {
            headers.push(
                append
                    .partition
                    .validate_for(append.credential, BatchSlices::new(append.batch))
                    .map_err(|source| refused(append, source))?,
            );
        }
        let mut order: Vec<usize> = (0..appends.len()).collect();
        order.sort_by(|a, b| appends[*a].partition.name.cmp(&appends[*b].partition.name));
        assert!(
            order
                .windows(2)
                .all(|pair| appends[pair[0]].partition.name != appends[pair[1]].partition.name),
            "an atomic append names each partition once"
        );
        let mut held: Vec<(usize, HeldFence<'_, Writer>)> = Vec::with_capacity(appends.len());
        for &index in &order {
            let append = &appends[index];
            let fence = append.partition.fence.hold();
            append
                .partition
                .check_held(&fence, append.credential, append.batch, &headers[index])
                .map_err(|source| refused(append, source))?;
            held.push((index, fence));
        }
        decide().map_err(AtomicAppendError::Undecided)?;
        let mut pending: Vec<Option<PendingAppend>> = appends.iter().map(|_| None).collect();
        for (index, fence) in &mut held {
            let append = &appends[*index];
            let stamp = ProducerStamp::parse(append.batch);
            let written = fence
                .log()
                .append_batch(
                    BatchSlices::new(append.batch),
                    &headers[*index],
                    stamp,
                    None,
                )
                .map_err(|source| AtomicAppendError::Incomplete {
                    partition: append.partition.name.clone(),
                    source,
                })?;
            pending[*index] = Some(written);
        }
        drop(held);
        Ok(pending
            .into_iter()
            .map(|written| written.expect("every partition was written"))
            .collect())
    }

    /// The checks of one batch that need no lock: its size, its format, and its header's epoch
    /// against the credential's (every append runs them, one batch or several).
    pub(super) fn validate_for(
        &self,
        credential: WriteCredential,
        batch: BatchSlices<'_>,
    ) -> Result<BatchHeader, StorageError> {
        if batch.len() > self.batch_limit() {
            return Err(StorageError::BatchTooLarge {
                len: batch.len(),
                max: self.batch_limit(),
            });
        }
        let header = batch::validate_slices(batch, self.batch_limit())?;
        if header.epoch != credential.epoch() {
            return Err(batch::BatchError::EpochMismatch {
                header: header.epoch,
                request: credential.epoch(),
            }
            .into());
        }
        Ok(header)
    }

    /// The checks under the held lock: the fence (a refusal is counted as a fenced write), a
    /// partition neither deleted nor failed, and the producer state (a batch it would refuse or
    /// answer as a duplicate is refused here, before anything of the step is written).
    fn check_held(
        &self,
        fence: &HeldFence<'_, Writer>,
        credential: WriteCredential,
        batch_bytes: &[u8],
        header: &BatchHeader,
    ) -> Result<(), StorageError> {
        if let Err(refusal) = fence.check::<StorageError>(credential) {
            if let StorageError::Fence(FenceError::Fenced { epoch, current }) = &refusal {
                self.metrics.fenced_write(*epoch, *current);
            }
            return Err(refusal);
        }
        if self.shared.write_stop.is_stopped() {
            return Err(self.failed_error());
        }
        let writer: &Writer = fence.log_ref();
        if writer.shared.recovery_point.is_retired() {
            return Err(StorageError::Deleted {
                partition: self.name.clone(),
            });
        }
        if let Some(stamp) = ProducerStamp::parse(batch_bytes) {
            match writer.producers.check_batch(batch_bytes, &stamp, header)? {
                SequenceVerdict::Append => {}
                SequenceVerdict::Duplicate { .. } => {
                    return Err(StorageError::Sequence(
                        crate::storage::SequenceError::Duplicate {
                            producer_id: stamp.producer_id,
                            got: stamp.base_sequence,
                            expected: stamp.base_sequence,
                        },
                    ))
                }
            }
        }
        Ok(())
    }
}
