//! What readers may see: the high watermark a partition publishes, standalone and replicated.
//!
//! Standalone, the high watermark is the locally acknowledged end: a batch is visible once it is
//! acknowledged under the flush policy (synced under `always`, at once otherwise), so nothing a
//! consumer read can vanish in a crash. Once the partition has a replication role it publishes
//! instead what the replication logic says is committed ([`Partition::advance_high_watermark`],
//! the lowest log end over the ISR), capped at what this replica holds and has acknowledged:
//! consumers then see only records every in-sync replica has. Both values only grow, except that
//! a truncation lowers the acknowledged end to its cut. The cut is below the published value
//! only when the leader's log is shorter than what this replica knew to be committed (a power
//! cut of every replica under `flush never` or `interval` lost committed records); then the
//! published value comes down to the cut as well, the one case where it goes down.
//!
//! The published value is kept in the partition's `watch` channel, whose lock also orders the
//! publishers against a truncation's check ([`Shared::begin_truncation`]): once the check passed,
//! no publisher can move the value past the cut.
//!
//! A replicated partition records its high watermark in its leader-epoch file when it is closed
//! (and whenever the file is written for another reason), and reopens with it: a restarted
//! replica neither exposes records it cannot know are committed nor refuses to truncate them.
//! After a crash it reopens with an older (lower) value, which only makes it more careful.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::super::io_error;
use super::{Partition, Shared, StorageError};

/// The two inputs of the published high watermark.
#[derive(Debug)]
pub(super) struct Watermarks {
    /// Whether the partition has a replication role (publishes the committed offset).
    replicated: AtomicBool,
    /// Offsets below it are written and acknowledged under the flush policy here.
    acknowledged_end: AtomicU64,
    /// Offsets below it are committed, as the replication logic last said.
    committed: AtomicU64,
}

impl Watermarks {
    /// `replicated` partitions publish `min(committed, acknowledged_end)`, others
    /// `acknowledged_end`.
    pub(super) fn new(replicated: bool, acknowledged_end: u64, committed: u64) -> Self {
        Self {
            replicated: AtomicBool::new(replicated),
            acknowledged_end: AtomicU64::new(acknowledged_end),
            committed: AtomicU64::new(committed),
        }
    }

    /// Whether the partition has a replication role.
    pub(super) fn is_replicated(&self) -> bool {
        self.replicated.load(Ordering::Acquire)
    }

    /// What readers may see now.
    fn visible_end(&self) -> u64 {
        let acknowledged = self.acknowledged_end.load(Ordering::Acquire);
        if self.is_replicated() {
            acknowledged.min(self.committed.load(Ordering::Acquire))
        } else {
            acknowledged
        }
    }
}

impl Shared {
    /// Offsets below `acknowledged` are acknowledged under the flush policy: readers see them at
    /// once on a standalone partition, once they are committed too on a replicated one.
    pub(super) fn publish_high_watermark(&self, acknowledged: u64) {
        self.watermarks
            .acknowledged_end
            .fetch_max(acknowledged, Ordering::AcqRel);
        if self.watermarks.is_replicated() {
            self.acknowledged.send_if_modified(|current| {
                let advanced = acknowledged > *current;
                *current = (*current).max(acknowledged);
                advanced
            });
        }
        self.republish();
    }

    /// Publishes what readers may see, if it advanced (never lowers it).
    fn republish(&self) {
        self.high_watermark.send_if_modified(|current| {
            let target = self.watermarks.visible_end();
            let advanced = target > *current;
            *current = (*current).max(target);
            advanced
        });
    }

    /// The replication logic says offsets below `offset` are committed.
    pub(super) fn commit_up_to(&self, offset: u64) {
        self.watermarks
            .committed
            .fetch_max(offset, Ordering::AcqRel);
        self.republish();
    }

    /// From now on publish only what is committed: what readers already see counts as
    /// committed (it was acknowledged before the partition was replicated).
    pub(super) fn become_replicated(&self) {
        let published = *self.high_watermark.borrow();
        self.watermarks
            .committed
            .fetch_max(published, Ordering::AcqRel);
        self.watermarks.replicated.store(true, Ordering::Release);
    }

    /// The start of a truncation to `offset`, ordered with every publisher: the acknowledged
    /// end comes down to `offset`, so nothing can publish past the cut from here on. Below the
    /// published value the high watermark comes down too, and the committed offset with it:
    /// the follower cuts there only when its leader's log is shorter than what this replica
    /// knew to be committed, which only a power cut of every replica that held those records
    /// (under `flush never` or `interval`) can cause; the leader's log is then the log.
    /// Returns the published value it lowered, if it lowered it.
    pub(super) fn begin_truncation(&self, offset: u64) -> Option<u64> {
        let mut lowered = None;
        self.high_watermark.send_if_modified(|current| {
            self.watermarks
                .acknowledged_end
                .fetch_min(offset, Ordering::AcqRel);
            if offset < *current {
                self.watermarks
                    .committed
                    .fetch_min(offset, Ordering::AcqRel);
                lowered = Some(*current);
                *current = offset;
                true
            } else {
                false
            }
        });
        if lowered.is_some() {
            self.acknowledged.send_if_modified(|current| {
                let lower = offset < *current;
                *current = (*current).min(offset);
                lower
            });
        }
        lowered
    }
}

impl Partition {
    /// The end of what this replica holds and has acknowledged under its flush policy (synced
    /// under `always`): a leader's own contribution to the high watermark, a follower's fetch
    /// offset. Standalone it is the high watermark.
    pub fn acknowledged_end_offset(&self) -> u64 {
        self.shared
            .watermarks
            .acknowledged_end
            .load(Ordering::Acquire)
    }

    /// The acknowledged end of a replicated partition, as it moves (a standalone partition's
    /// moves only with its high watermark: [`subscribe`](Self::subscribe)). What a leader's
    /// replica fetch waits on.
    pub fn subscribe_acknowledged(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.acknowledged.subscribe()
    }

    /// The replication logic says offsets below `offset` are committed: a replicated partition
    /// publishes it to readers and long polls (capped at
    /// [`acknowledged_end_offset`](Self::acknowledged_end_offset)); it never lowers the high
    /// watermark. A standalone partition publishes what it acknowledges and ignores this.
    pub fn advance_high_watermark(&self, offset: u64) {
        if self.shared.watermarks.is_replicated() {
            self.shared.commit_up_to(offset);
        }
    }

    /// Records the high watermark in the leader-epoch file of a replicated partition, if it
    /// moved since the file was written (on close; a broker may also call it on a timer). A
    /// standalone partition has nothing to record.
    pub fn checkpoint_high_watermark(&self) -> Result<(), StorageError> {
        let high_watermark = self.high_watermark();
        self.fence.with_log(|writer| {
            let Some(epochs) = writer.leader_epochs.epochs() else {
                return Ok(());
            };
            if epochs.high_watermark >= high_watermark || writer.shared.recovery_point.is_retired()
            {
                return Ok(());
            }
            let mut recorded = epochs.clone();
            recorded.high_watermark = high_watermark;
            writer
                .leader_epochs
                .save(recorded)
                .map_err(io_error("write leader-epoch history"))
        })
    }
}
