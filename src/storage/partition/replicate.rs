//! A partition's replication role, its replicated appends, and what a leader reads for its
//! followers (see `docs/replication.md`).
//!
//! [`Partition::become_leader`] and [`Partition::become_follower`] change the role through the
//! fence (`Fence::become_leader` / `Fence::become_follower`), under the writer lock, after
//! making the change durable in the leader-epoch file (history entry and floor) and, for a new
//! leader, the producer epoch base in the epoch checkpoint. [`Partition::append_replicated`]
//! copies batches fetched from the leader byte for byte: validated (length, CRC, offsets that
//! continue the log) outside the lock, then checked against the leader epoch and written in one
//! critical section (`Fence::append_replicated`), with the producer-state table updated exactly
//! as the leader's append updated it, so that a follower that becomes leader deduplicates
//! retries as the old leader would have.

use std::ops::Range;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use tracing::info;

use super::super::fence::{LeaseEvidence, RoleChange};
use super::super::leader_epochs::LeaderEpochs;
use super::super::{io_error, StorageError};
use super::seal_due::SealDue;
use super::{Partition, Role, Writer};
use crate::batch::{self, BatchHeader, BatchSlices, ProducerStamp};
use crate::domain::LeaderEpoch;

/// What a leader reads for a follower ([`Partition::read_for_replication`]).
#[derive(Debug, Clone)]
pub struct ReplicaRead {
    /// Whole stored batches, byte for byte, all written under `records_epoch`.
    pub batches: Vec<Bytes>,
    /// The leader epoch that wrote these batches (the follower's `append_replicated` takes it).
    pub records_epoch: LeaderEpoch,
    /// The leader's high watermark.
    pub high_watermark: u64,
    /// The leader's log start offset.
    pub log_start_offset: u64,
    /// The leader's log end offset.
    pub log_end_offset: u64,
}

/// One replicated batch, validated: where it lies in the fetched bytes and what it says.
struct ReplicatedBatch {
    range: Range<usize>,
    header: BatchHeader,
    stamp: Option<ProducerStamp>,
}

impl Partition {
    /// The partition's replication role (standalone until the first `become_*`; a replicated
    /// partition reopens as a follower).
    pub fn role(&self) -> Role {
        self.fence.replica_state().role
    }

    /// The highest leader epoch installed: the leader-epoch fence floor. Never goes down.
    pub fn leader_epoch_floor(&self) -> LeaderEpoch {
        self.fence.leader_epoch()
    }

    /// The leader-epoch history `(leader epoch, first offset)`, oldest first (empty when
    /// standalone).
    pub fn leader_epoch_history(&self) -> Vec<(LeaderEpoch, u64)> {
        self.fence.with_log(|writer| {
            writer
                .leader_epochs
                .epochs()
                .map(|epochs| epochs.history.clone())
                .unwrap_or_default()
        })
    }

    /// The newest entry of the leader-epoch history.
    pub fn latest_leader_epoch_entry(&self) -> Option<(LeaderEpoch, u64)> {
        self.fence
            .with_log(|writer| writer.leader_epochs.epochs().and_then(LeaderEpochs::latest))
    }

    /// Kafka's OffsetsForLeaderEpoch: the largest epoch `<= epoch` in the history and the offset
    /// where it ended (the start of the next epoch, or the log end for the latest); for an epoch
    /// older than every entry, that epoch, ended at the first entry's start
    /// ([`LeaderEpochs::end_offset_for`]). `None` when the history is empty (the asker keeps
    /// what it knows is committed: its log up to its high watermark).
    pub fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, u64)> {
        self.fence.with_log(|writer| {
            let log_end = writer.active.next_offset();
            writer
                .leader_epochs
                .epochs()
                .and_then(|epochs| epochs.end_offset_for(epoch, log_end))
        })
    }

    /// Takes over as leader in `leader_epoch` (refused below the installed one): durably records
    /// `(leader_epoch, log end)` in the leader-epoch history (unless it is already the latest
    /// entry) and the floor, installs the producer epoch base
    /// ([`crate::domain::producer_epoch_base`]) in the epoch checkpoint and the fence when it
    /// is above the current producer epoch, so every producer epoch granted before is fenced,
    /// and only then returns. Producer appends are accepted from here on; the high watermark
    /// follows [`advance_high_watermark`](Self::advance_high_watermark).
    pub fn become_leader(&self, leader_epoch: LeaderEpoch) -> Result<(), StorageError> {
        let high_watermark = self.high_watermark();
        self.fence
            .become_leader(leader_epoch, |change, writer: &mut Writer| {
                self.refuse_if_retired(writer)?;
                let log_end = writer.active.next_offset();
                let log_start = writer.shared.log_start_offset.load(Ordering::Acquire);
                let mut epochs = changed_epochs(writer, change, high_watermark);
                if epochs
                    .latest()
                    .is_none_or(|(latest, _)| latest < leader_epoch)
                {
                    epochs
                        .push(leader_epoch, log_end, log_start)
                        .map_err(io_error("record the leader epoch"))?;
                }
                writer
                    .leader_epochs
                    .save(epochs)
                    .map_err(io_error("write leader-epoch history"))?;
                if let Some(base) = change.producer_epoch {
                    writer
                        .checkpoint
                        .record(base, log_end)
                        .map_err(io_error("write epoch checkpoint"))?;
                }
                writer.shared.become_replicated();
                // Questions asked in the old role vouch for nothing in the new one.
                writer.producers.verifications_mut().clear();
                Ok::<_, StorageError>(())
            })?;
        info!(partition = %self.name, leader_epoch, producer_epoch = self.current_epoch(), "became leader");
        Ok(())
    }

    /// Follows the leader of `leader_epoch` (refused below the installed one): durably raises
    /// the floor to it, so every later replicated append from an older leader is fenced, and
    /// refuses producer appends ([`StorageError::NotLeader`]) until a later `become_leader`.
    /// Under the writer lock: no append of the old role is in progress when it returns.
    pub fn become_follower(&self, leader_epoch: LeaderEpoch) -> Result<(), StorageError> {
        let high_watermark = self.high_watermark();
        // A follower task that restarts against the same leader (one that keeps refusing it)
        // installs the same epoch again; only a change is worth an info line.
        let unchanged = self.role() == Role::Follower && self.fence.leader_epoch() == leader_epoch;
        self.fence
            .become_follower(leader_epoch, |change, writer: &mut Writer| {
                self.refuse_if_retired(writer)?;
                let epochs = changed_epochs(writer, change, high_watermark);
                if writer.leader_epochs.epochs() != Some(&epochs) {
                    writer
                        .leader_epochs
                        .save(epochs)
                        .map_err(io_error("write leader-epoch history"))?;
                }
                writer.shared.become_replicated();
                // Questions asked in the old role vouch for nothing in the new one.
                writer.producers.verifications_mut().clear();
                Ok::<_, StorageError>(())
            })?;
        if unchanged {
            tracing::debug!(partition = %self.name, leader_epoch, "follows again in the same leader epoch");
        } else {
            info!(partition = %self.name, leader_epoch, "became follower");
        }
        Ok(())
    }

    /// Appends `batches` fetched from the leader of `leader_epoch`, byte for byte as the leader
    /// stored them (offsets stamped), written by the leader of `records_epoch`; returns the new
    /// log end offset. Only a follower takes them.
    ///
    /// Outside the lock each batch is validated (length, CRC, structure) and must follow the
    /// one before it. Then, in one critical section with the write: the leader-epoch check
    /// (lower [`ReplicaError::FencedLeaderEpoch`](super::super::ReplicaError), equal fine, higher
    /// `UnknownLeaderEpoch`), the first batch must start at the log end
    /// ([`StorageError::ReplicaOffsetMismatch`]), epochs must not go backwards
    /// ([`StorageError::ReplicaDiverged`]); the history gets `(records_epoch, first offset)`
    /// if `records_epoch` is newer than its latest entry, and the partition becomes leased if
    /// the batches carry a granted producer epoch (both durably, before the batches are
    /// written); the producer-state table records each stamped batch as the leader's append
    /// did. Under flush `always` the range is synced before this returns (a follower reports
    /// only what it synced); otherwise as the policy says.
    pub fn append_replicated(
        &self,
        batches: &[u8],
        records_epoch: LeaderEpoch,
        leader_epoch: LeaderEpoch,
    ) -> Result<u64, StorageError> {
        if self.is_retired() {
            return Err(StorageError::Deleted {
                partition: self.name.clone(),
            });
        }
        if self.shared.write_stop.is_stopped() {
            return Err(self.failed_error());
        }
        let parsed = self.validate_replicated(batches)?;
        if records_epoch > leader_epoch {
            return Err(self.diverged(format!(
                "records of leader epoch {records_epoch} sent by the leader of the older epoch {leader_epoch}"
            )));
        }
        let (log_end, truncations) = self.fence.append_replicated(
            leader_epoch,
            |writer: &mut Writer, evidence: &mut LeaseEvidence<'_>| {
                self.refuse_if_retired(writer)?;
                self.check_continues_log(writer, &parsed, records_epoch)?;
                self.record_replicated_epochs(writer, &parsed, records_epoch, evidence)?;
                for batch in &parsed {
                    let appended = writer.append(
                        BatchSlices::new(&batches[batch.range.clone()]),
                        &batch.header,
                        SealDue::AfterNewestRecord,
                    )?;
                    if let Some(stamp) = &batch.stamp {
                        writer.producers.record_batch(
                            &batches[batch.range.clone()],
                            stamp,
                            &batch.header,
                            appended.base_offset,
                        );
                    }
                }
                Ok::<_, StorageError>((
                    writer.active.next_offset(),
                    writer.shared.truncations.load(Ordering::Acquire),
                ))
            },
        )?;
        if self.acknowledge_blocks() {
            self.commit
                .wait_durable(log_end, || self.sync_everything())?;
        }
        if self.shared.truncations.load(Ordering::Acquire) != truncations {
            return Err(self.diverged(
                "the log was truncated while the batches were being synced; fetch again from the log end".into(),
            ));
        }
        Ok(log_end)
    }

    /// Whole batches from the one holding `offset`, up to `max_bytes` (at least one), **all of
    /// one leader epoch** (the read stops at the next history boundary) and not limited by the
    /// high watermark (followers copy beyond it): what a leader sends a follower. Offsets
    /// written before the partition was replicated count as the first history entry's epoch.
    /// Offsets outside `[log start, log end]` are an error; the log end returns no batches.
    pub fn read_for_replication(
        &self,
        offset: u64,
        max_bytes: usize,
    ) -> Result<ReplicaRead, StorageError> {
        if self.is_retired() {
            return Err(StorageError::Deleted {
                partition: self.name.clone(),
            });
        }
        let (log_end, epoch_at) = self.fence.with_log(|writer| {
            (
                writer.active.next_offset(),
                writer
                    .leader_epochs
                    .epochs()
                    .and_then(|epochs| epochs.epoch_at(offset)),
            )
        });
        let log_start_offset = self.log_start_offset();
        if offset < log_start_offset || offset > log_end {
            return Err(StorageError::OffsetOutOfRange {
                partition: self.name.clone(),
                offset,
                earliest: log_start_offset,
                latest: log_end,
            });
        }
        let (records_epoch, boundary) = epoch_at.unwrap_or((self.leader_epoch_floor(), None));
        let limit = boundary.map_or(log_end, |boundary| boundary.min(log_end));
        let batches = if offset < limit {
            self.read_batches(offset, max_bytes, limit)?
        } else {
            Vec::new()
        };
        Ok(ReplicaRead {
            batches,
            records_epoch,
            high_watermark: self.high_watermark(),
            log_start_offset,
            log_end_offset: log_end,
        })
    }

    /// Splits fetched bytes into batches, each valid (length, CRC, structure) and following
    /// the one before it, epochs never decreasing.
    fn validate_replicated(&self, bytes: &[u8]) -> Result<Vec<ReplicatedBatch>, StorageError> {
        let mut batches: Vec<ReplicatedBatch> = Vec::new();
        let mut position = 0;
        while position < bytes.len() {
            let header =
                BatchHeader::parse(&bytes[position..]).ok_or(batch::BatchError::TooShort {
                    len: bytes.len() - position,
                })?;
            let length = header.batch_length as usize;
            let end = position
                .checked_add(length)
                .filter(|end| *end <= bytes.len() && length >= batch::HEADER_BYTES)
                .ok_or(batch::BatchError::TooShort {
                    len: bytes.len() - position,
                })?;
            let batch_bytes = &bytes[position..end];
            let header = batch::validate(batch_bytes, self.config.max_batch_bytes)?;
            if let Some(previous) = batches.last() {
                if header.base_offset != previous.header.next_offset() {
                    return Err(self.diverged(format!(
                        "batch at offset {} follows one ending at {}",
                        header.base_offset,
                        previous.header.next_offset()
                    )));
                }
                if header.epoch < previous.header.epoch {
                    return Err(self.diverged(format!(
                        "producer epoch {} after {}",
                        header.epoch, previous.header.epoch
                    )));
                }
            }
            batches.push(ReplicatedBatch {
                range: position..end,
                header,
                stamp: ProducerStamp::parse(batch_bytes),
            });
            position = end;
        }
        Ok(batches)
    }

    /// Under the lock: the batches start at the log end, their producer epochs do not go below
    /// the log's last one, and `records_epoch` is not older than the history's latest entry.
    fn check_continues_log(
        &self,
        writer: &Writer,
        batches: &[ReplicatedBatch],
        records_epoch: LeaderEpoch,
    ) -> Result<(), StorageError> {
        let log_end_offset = writer.active.next_offset();
        let Some(first) = batches.first() else {
            return Ok(());
        };
        if first.header.base_offset != log_end_offset {
            return Err(StorageError::ReplicaOffsetMismatch {
                base_offset: first.header.base_offset,
                log_end_offset,
            });
        }
        if first.header.epoch < writer.last_epoch {
            return Err(self.diverged(format!(
                "producer epoch {} after the log's last batch of producer epoch {}",
                first.header.epoch, writer.last_epoch
            )));
        }
        if let Some((latest, start)) = writer.leader_epochs.epochs().and_then(LeaderEpochs::latest)
        {
            if records_epoch < latest {
                return Err(self.diverged(format!(
                    "records of leader epoch {records_epoch} after this replica's leader epoch {latest} (from offset {start})"
                )));
            }
        }
        Ok(())
    }

    /// Under the lock, before the batches are written: a newer `records_epoch` starts a history
    /// entry at the log end, and batches carrying a granted producer epoch make the partition
    /// leased; both durably, in one write of the leader-epoch file.
    fn record_replicated_epochs(
        &self,
        writer: &mut Writer,
        batches: &[ReplicatedBatch],
        records_epoch: LeaderEpoch,
        evidence: &mut LeaseEvidence<'_>,
    ) -> Result<(), StorageError> {
        if batches.is_empty() {
            return Ok(());
        }
        let mut epochs = writer.leader_epochs.epochs().cloned().unwrap_or_default();
        let new_entry = epochs
            .latest()
            .is_none_or(|(latest, _)| records_epoch > latest);
        let granted = !evidence.is_leased() && batches.iter().any(|batch| batch.header.epoch != 0);
        if !new_entry && !granted {
            return Ok(());
        }
        if new_entry {
            let log_start = writer.shared.log_start_offset.load(Ordering::Acquire);
            epochs
                .push(records_epoch, writer.active.next_offset(), log_start)
                .map_err(io_error("record the leader epoch"))?;
        }
        epochs.leased |= granted;
        epochs.high_watermark = epochs.high_watermark.max(self.high_watermark());
        writer
            .leader_epochs
            .save(epochs)
            .map_err(io_error("write leader-epoch history"))?;
        if granted {
            evidence.record_grant();
        }
        Ok(())
    }

    pub(super) fn refuse_if_retired(&self, writer: &Writer) -> Result<(), StorageError> {
        if writer.shared.recovery_point.is_retired() {
            return Err(StorageError::Deleted {
                partition: self.name.clone(),
            });
        }
        Ok(())
    }

    fn diverged(&self, reason: String) -> StorageError {
        StorageError::ReplicaDiverged {
            partition: self.name.clone(),
            reason,
        }
    }
}

/// The leader-epoch file's contents after `change`: the floor raised, the lease state and the
/// high watermark carried (a standalone partition's first role change creates the file).
fn changed_epochs(writer: &Writer, change: RoleChange, high_watermark: u64) -> LeaderEpochs {
    let mut epochs = writer.leader_epochs.epochs().cloned().unwrap_or_default();
    epochs.floor = epochs.floor.max(change.leader_epoch);
    epochs.leased |= change.leased;
    epochs.high_watermark = epochs.high_watermark.max(high_watermark);
    epochs
}

/// The first lease grant since creation, on a replicated partition, is recorded durably in the
/// leader-epoch file before the grant takes effect: the partition stays leased across
/// restarts and leader changes (a standalone partition knows it from its epoch checkpoint).
pub(super) fn record_lease_granted(writer: &mut Writer) -> Result<(), StorageError> {
    let Some(epochs) = writer.leader_epochs.epochs() else {
        return Ok(());
    };
    let mut leased = epochs.clone();
    leased.leased = true;
    writer
        .leader_epochs
        .save(leased)
        .map_err(io_error("write leader-epoch history"))
}
