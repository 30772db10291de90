//! The append path: installing an epoch, the fenced append of a producer's batch, and its
//! acknowledgement under the flush policy.
//!
//! An append comes in two halves so that a connection can pipeline: [`Partition::append_pending`]
//! fixes the batch's offsets (early epoch answer, validation outside the lock, then the fence's
//! check and the copy in one critical section) and never waits on a sync;
//! a batch of a superseded credential goes straight to the fence's lock, where an exact resend
//! of a batch the log holds is answered with its original offsets and anything else refused;
//! [`Partition::acknowledge`] then waits, outside every lock, until the flush policy says the
//! batch is acknowledged. The authoritative epoch check stays inside the fence.

use std::sync::atomic::Ordering;

use tracing::info;

use super::super::config::FlushPolicy;
use super::super::fence::{check_credential_since, FenceError, WriteCredential, CHECKPOINT_FILE};
use super::super::splice::BatchFill;
use super::super::{io_error, StorageError};
use super::{replicate, Partition, Writer};
use crate::batch::{self, BatchHeader, BatchSlices, ProducerStamp};

/// What an append returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Offset of the batch's first record.
    pub base_offset: u64,
    /// Offset of its last record.
    pub last_offset: u64,
    /// The offset the next batch will get.
    pub log_end_offset: u64,
    /// True when the batch was a producer's retry of a batch already in the log: nothing was
    /// appended, and the offsets are those the batch got the first time.
    pub duplicate: bool,
}

/// A batch copied into the log but not yet acknowledged (see [`Partition::append_pending`]).
#[derive(Debug)]
#[must_use = "an append is not acknowledged until `acknowledge` returns"]
pub struct PendingAppend {
    pub(super) appended: Appended,
    /// The offset up to which the log must be durable before the batch is acknowledged (for a
    /// duplicate, the end of the original batch, which may still await its sync).
    pub(super) durable_at: u64,
    /// Size of the batch, for the produce metrics once it is acknowledged.
    pub(super) batch_bytes: u64,
    /// Truncations of the log before the append (see [`Partition::acknowledge`]).
    pub(super) truncations: u64,
}

impl PendingAppend {
    /// The offsets the batch got.
    pub fn offsets(&self) -> Appended {
        self.appended
    }
}

impl Partition {
    /// Makes `epoch` current: refuses `epoch <= current`, records it durably in the checkpoint
    /// (temp file, fsync, rename, directory fsync) and only then installs it in the writer.
    ///
    /// On a follower it is refused ([`StorageError::NotLeader`]); on a replicated partition the
    /// first grant since creation is also recorded in the leader-epoch file, so the partition
    /// stays leased whoever leads it later.
    pub fn install_epoch(&self, epoch: u64) -> Result<(), StorageError> {
        self.fence
            .install_grant(epoch, |epoch, first_grant, writer: &mut Writer| {
                if writer.shared.recovery_point.is_retired() {
                    return Err(StorageError::Deleted {
                        partition: self.name.clone(),
                    });
                }
                if first_grant {
                    replicate::record_lease_granted(writer)?;
                }
                let start_offset = writer.active.next_offset();
                writer
                    .checkpoint
                    .record(epoch, start_offset)
                    .map_err(|error| {
                        // Refused, nothing installed: the grant fails and the log goes on.
                        writer.shared.write_stop.file_failed(
                            "epoch checkpoint",
                            &writer.directory.join(CHECKPOINT_FILE),
                            &error,
                        );
                        io_error("write epoch checkpoint")(error)
                    })
            })?;
        info!(partition = %self.name, epoch, "installed epoch");
        Ok(())
    }

    /// Appends one batch (in its stored format, base offset ignored) under the epoch in its header.
    /// Returns once the batch is acknowledged under the partition's flush policy. Blocks on a sync
    /// under flush `always`. A convenience for storage-level callers; the broker service passes
    /// the request's epoch to [`Partition::append_pending`] itself.
    pub fn append(&self, batch_bytes: &[u8]) -> Result<Appended, StorageError> {
        let epoch = BatchHeader::peek_epoch(batch_bytes).ok_or(batch::BatchError::TooShort {
            len: batch_bytes.len(),
        })?;
        let pending = self.append_pending(epoch, batch_bytes)?;
        self.acknowledge(pending)
    }

    /// The first half of [`Partition::append`]: the fence check of `epoch` and the copy into the
    /// segment, which fix the batch's offsets. The epoch is passed in by the caller (the listener
    /// found it where its protocol carries it), checked first, before any other validation, so
    /// a stale holder always learns that it is stale; the batch's own header must then carry the
    /// same epoch, so what is stored says who wrote it. Never blocks on a sync, so a connection
    /// can run it in request order (pipelined produces are appended in the order they were sent)
    /// and wait for durability afterwards with [`Partition::acknowledge`]. Under flush `always`
    /// the batch stays invisible to readers until a sync covers it.
    pub fn append_pending(
        &self,
        epoch: u64,
        batch_bytes: &[u8],
    ) -> Result<PendingAppend, StorageError> {
        self.append_pending_as(WriteCredential::Epoch(epoch), batch_bytes)
    }

    /// [`append_pending`](Self::append_pending) for any [`WriteCredential`]: a writer without a
    /// lease ([`WriteCredential::Unleased`], batches carrying epoch 0) appends only while the
    /// partition has never granted one.
    pub fn append_pending_as(
        &self,
        credential: WriteCredential,
        batch_bytes: &[u8],
    ) -> Result<PendingAppend, StorageError> {
        self.append_pending_verified(credential, BatchSlices::new(batch_bytes), None)
    }

    /// [`append_pending_as`](Self::append_pending_as) with the guard of a transaction
    /// verification begun with [`begin_verification`](Self::begin_verification), which a
    /// replicated partition needs to take a transactional batch that opens its producer's
    /// transaction (see [`crate::storage::verification`]). The batch may come in two slices
    /// (a Kafka batch kept as it arrived and its envelope: see [`BatchSlices`]).
    pub fn append_pending_verified(
        &self,
        credential: WriteCredential,
        batch: BatchSlices<'_>,
        verification: Option<u64>,
    ) -> Result<PendingAppend, StorageError> {
        let result = self.append_checked(credential, batch, verification);
        self.count_refusal(&result);
        result
    }

    /// The spliced produce path's append (`docs/benchmarks.md`, "The one-copy produce path"):
    /// the batch's first bytes, `head` (at least its header), are in memory; its other
    /// `tail_len` bytes are not, and `fill` puts them straight into the segment file at the
    /// offset it is given (in the produce path, out of the pipe that holds them:
    /// [`crate::storage::splice::SplicePipe::drain_into`]), with the writer lock held, so it
    /// must never wait: every byte must be at hand.
    ///
    /// The order keeps every guarantee of [`Self::append_pending_as`]: the header's own checks
    /// (length, size limit, epoch) and the early fence answer outside the lock; then, under it,
    /// the fence's check and the producer sequence check *before* any byte lands (a stale
    /// holder's batch never reaches the file; a retry of a batch in the log is answered with
    /// its offsets), the roll if the batch does not fit, `fill`, and the full validation (CRC,
    /// structure) of the bytes as they landed; only a valid batch counts as written and is
    /// published. `fill` runs only when the batch is appended or refused by that last
    /// validation: after any other answer the bytes are still where they were (a pipe holding
    /// them is then closed with them). A marker or transactional batch is refused here
    /// (`NotSpliceable`): its checks read its records, so it takes the copy path.
    pub fn append_spliced_pending(
        &self,
        credential: WriteCredential,
        head: &[u8],
        tail_len: usize,
        fill: &mut BatchFill<'_>,
    ) -> Result<PendingAppend, StorageError> {
        let result = self.append_spliced_checked(credential, head, tail_len, fill);
        self.count_refusal(&result);
        result
    }

    /// [`Self::append_spliced_pending`] before its refusals are counted.
    fn append_spliced_checked(
        &self,
        credential: WriteCredential,
        head: &[u8],
        tail_len: usize,
        fill: &mut BatchFill<'_>,
    ) -> Result<PendingAppend, StorageError> {
        let header =
            BatchHeader::parse(head).ok_or(batch::BatchError::TooShort { len: head.len() })?;
        let batch_len = head.len().saturating_add(tail_len);
        if header.batch_length as usize != batch_len {
            return Err(batch::BatchError::LengthMismatch {
                declared: u64::from(header.batch_length),
                actual: batch_len,
            }
            .into());
        }
        if batch_len > self.batch_limit() {
            return Err(StorageError::BatchTooLarge {
                len: batch_len,
                max: self.batch_limit(),
            });
        }
        if header.is_control() || header.is_transactional() || header.magic == batch::MAGIC_KAFKA {
            return Err(StorageError::NotSpliceable);
        }
        let early = self.early_answer(credential);
        let head_only = BatchSlices::new(head);
        match early {
            Ok(()) => {}
            Err(refusal @ (FenceError::Fenced { .. } | FenceError::Leased { .. })) => {
                return self.answer_superseded(credential, head_only, refusal)
            }
            Err(refusal) => return Err(StorageError::Fence(refusal)),
        }
        if header.epoch != credential.epoch() {
            return Err(batch::BatchError::EpochMismatch {
                header: header.epoch,
                request: credential.epoch(),
            }
            .into());
        }
        if self.shared.write_stop.is_stopped() {
            return Err(self.failed_error());
        }
        let stamp = ProducerStamp::parse(head);
        let max_batch_bytes = self.batch_limit();
        self.fence.append_or_answer_resend(
            credential,
            |writer: &Writer, refusal| self.answer_resend(writer, head_only, refusal),
            |writer: &mut Writer| {
                self.refuse_if_retired(writer)?;
                writer.append_filled_batch(head, tail_len, &header, stamp, max_batch_bytes, fill)
            },
        )
    }

    /// The early answer to a stale holder, before anything else is looked at; the authoritative
    /// check is inside the fence. A replicated partition answers only staleness early (its
    /// never-granted epoch and its lease state are the fence's to judge).
    fn early_answer(&self, credential: WriteCredential) -> Result<(), FenceError> {
        let current = self.fence.current_epoch();
        if !self.shared.watermarks.is_replicated() {
            return check_credential_since(credential, current, self.fence.creation_epoch());
        }
        match credential {
            WriteCredential::Epoch(epoch) if epoch != 0 && epoch < current => {
                Err(FenceError::Fenced { epoch, current })
            }
            _ => Ok(()),
        }
    }

    /// Counts an append's refusal by the fence (fenced or unknown epoch) in the metrics.
    fn count_refusal(&self, result: &Result<PendingAppend, StorageError>) {
        match result {
            Err(StorageError::Fence(FenceError::Fenced { epoch, current })) => {
                self.metrics.fenced_write(*epoch, *current)
            }
            Err(StorageError::Fence(FenceError::Leased { current })) => {
                self.metrics.fenced_write(0, *current)
            }
            Err(StorageError::Fence(FenceError::UnknownEpoch { .. })) => {
                self.metrics.unknown_epoch()
            }
            _ => {}
        }
    }

    /// Records, under the fence lock, that this leader is about to ask the transaction
    /// coordinator whether `producer_id` at `producer_epoch` has this partition in its open
    /// transaction, and returns the guard its append then carries; `None` when the producer's
    /// transaction is already open here at that producer epoch (nothing to ask). Must come
    /// *before* the question (see [`crate::storage::verification`]).
    pub fn begin_verification(&self, producer_id: i64, producer_epoch: i16) -> Option<u64> {
        self.fence.with_log(|writer: &mut Writer| {
            let open = writer.producers.transactions().open_epoch(producer_id);
            if open == Some(producer_epoch) {
                return None;
            }
            Some(
                writer
                    .producers
                    .verifications_mut()
                    .begin(producer_id, producer_epoch),
            )
        })
    }

    /// [`append_pending_as`](Self::append_pending_as) before its refusals are counted.
    fn append_checked(
        &self,
        credential: WriteCredential,
        batch: BatchSlices<'_>,
        verification: Option<u64>,
    ) -> Result<PendingAppend, StorageError> {
        let early = self.early_answer(credential);
        match early {
            Ok(()) => {}
            // A superseded writer's batch may be the resend of one written while its
            // credential was current (the answer was lost): the producer state decides, under
            // the fence's lock. No other check comes first, so a new batch of a stale holder
            // is refused as fenced before anything else is looked at.
            Err(refusal @ (FenceError::Fenced { .. } | FenceError::Leased { .. })) => {
                return self.answer_superseded(credential, batch, refusal)
            }
            Err(refusal) => return Err(StorageError::Fence(refusal)),
        }
        let header = self.validate_for(credential, batch)?;
        if self.shared.write_stop.is_stopped() {
            return Err(self.failed_error());
        }
        let stamp = ProducerStamp::parse(batch.head());
        self.fence.append_or_answer_resend(
            credential,
            // Superseded between the early check and the lock.
            |writer: &Writer, refusal| self.answer_resend(writer, batch, refusal),
            |writer: &mut Writer| {
                self.refuse_if_retired(writer)?;
                writer.append_batch(batch, &header, stamp, verification)
            },
        )
    }

    /// A batch whose credential the early check found superseded: answered under the fence's
    /// lock from the producer state (an exact resend gets its original offsets), never written.
    fn answer_superseded(
        &self,
        credential: WriteCredential,
        batch: BatchSlices<'_>,
        refusal: FenceError,
    ) -> Result<PendingAppend, StorageError> {
        self.fence.append_or_answer_resend(
            credential,
            |writer: &Writer, refusal| self.answer_resend(writer, batch, refusal),
            // Supersession is final (epochs never go back; a leased partition stays leased),
            // so the fence never finds this credential current; if it did, the refusal stands.
            |_: &mut Writer| Err(StorageError::Fence(refusal)),
        )
    }

    /// [`Writer::answer_resend`] on a partition that is not deleted.
    fn answer_resend(
        &self,
        writer: &Writer,
        batch: BatchSlices<'_>,
        refusal: FenceError,
    ) -> Result<PendingAppend, StorageError> {
        if writer.shared.recovery_point.is_retired() {
            return Err(StorageError::Deleted {
                partition: self.name.clone(),
            });
        }
        writer.answer_resend(batch, refusal)
    }

    /// Whether [`Partition::acknowledge`] blocks (flush `always`): then call it off async workers.
    pub fn acknowledge_blocks(&self) -> bool {
        self.config.flush == FlushPolicy::Always
    }

    /// The second half of [`Partition::append`]: waits until the batch is acknowledged under the
    /// flush policy (a group-commit sync for `always`; nothing otherwise).
    pub fn acknowledge(&self, pending: PendingAppend) -> Result<Appended, StorageError> {
        if self.acknowledge_blocks() {
            self.commit
                .wait_durable(pending.durable_at, || self.sync_everything())?;
        }
        // A truncation since the append may have cut it (the partition became a follower
        // meanwhile): never acknowledge what the log may no longer hold.
        if self.shared.truncations.load(Ordering::Acquire) != pending.truncations {
            return Err(StorageError::NotLeader {
                leader_epoch: self.fence.leader_epoch(),
            });
        }
        let appended = pending.appended;
        if !appended.duplicate {
            let records = appended.last_offset - appended.base_offset + 1;
            self.metrics.produced(records, pending.batch_bytes);
        }
        Ok(appended)
    }
}
