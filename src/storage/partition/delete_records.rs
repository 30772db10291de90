//! Moving the log start forward: Kafka's DeleteRecords, and a follower adopting its leader's
//! log start.
//!
//! The log start may land anywhere up to the high watermark, also inside a segment (even inside
//! a batch): the segments wholly below it are deleted (through retention's deletion path), a
//! segment it cuts stays whole on disk and its batches below the log start are simply no longer
//! served. A fetch at an offset inside the first visible batch gets that whole batch, as Kafka
//! serves it; clients skip the records before the offset they asked for.
//!
//! # Order, and why a crash anywhere is fine
//!
//! Under the writer lock (so it is ordered with appends, truncations and retention):
//! 1. the new log start is written to the `log-start` file, durably;
//! 2. it is published (readers below it are refused from now on);
//! 3. the segments wholly below it leave the segment list.
//!
//! Then, outside the lock, their files are deleted and the directory synced. A crash before
//! step 1 completes leaves the old log start; after it, the open reads the file and takes the
//! larger of it and the first segment's base, and deletes the segments wholly below it again
//! (they may have outlived the crash). The epoch fence, its checkpoint and the producer state are
//! untouched: deleting records never changes who may write, nor what a retry is answered.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::info;

use super::super::segment::SegmentReader;
use super::super::{io_error, log_start, StorageError};
use super::{Partition, Writer};

impl Partition {
    /// Moves the log start up to `offset` (records below it are deleted) and returns the log
    /// start after the call: `offset`, or the current log start when that is already at or past
    /// it (the log start never moves back). An offset past the high watermark is
    /// [`StorageError::OffsetOutOfRange`] and changes nothing. Durable before it returns (the
    /// `log-start` file is fsynced); segments wholly below the new log start are deleted.
    pub fn delete_records_before(&self, offset: u64) -> Result<u64, StorageError> {
        if self.is_retired() {
            return Err(StorageError::Deleted {
                partition: self.name.clone(),
            });
        }
        let (log_start, victims) = self
            .fence
            .with_log(|writer| self.move_log_start(writer, offset))?;
        let report = self.delete_segments(victims)?;
        if report.segments > 0 {
            info!(partition = %self.name, log_start, segments = report.segments, bytes = report.bytes, "deleted the segments below the log start");
        }
        Ok(log_start)
    }

    /// A follower's step: its leader's log start is `leader_log_start`, so this replica's moves
    /// up to it too, but never past its own high watermark (what it knows is committed), so
    /// that a failover to this replica does not serve the deleted records again. Returns the
    /// log start after the call; nothing is written when it does not move.
    pub fn follow_log_start(&self, leader_log_start: u64) -> Result<u64, StorageError> {
        let target = leader_log_start.min(self.high_watermark());
        if target <= self.log_start_offset() {
            return Ok(self.log_start_offset());
        }
        self.delete_records_before(target)
    }

    /// Deletes the segments wholly below the log start the open found (a crash after the
    /// `log-start` file was written and before they were deleted leaves them behind).
    pub(super) fn delete_segments_below_log_start(&self) -> Result<(), StorageError> {
        let victims = self.fence.with_log(|writer| {
            let log_start = self.log_start_offset();
            take_segments_below(writer, log_start)
        });
        self.delete_segments(victims).map(|_| ())
    }

    /// Steps 1 to 3 of the module documentation, under the writer lock.
    fn move_log_start(
        &self,
        writer: &mut Writer,
        offset: u64,
    ) -> Result<(u64, Vec<Arc<SegmentReader>>), StorageError> {
        if writer.shared.recovery_point.is_retired() {
            return Err(StorageError::Deleted {
                partition: self.name.clone(),
            });
        }
        if self.shared.write_stop.is_stopped() {
            return Err(self.failed_error());
        }
        let current = self.log_start_offset();
        let high_watermark = self.high_watermark();
        if offset > high_watermark {
            return Err(StorageError::OffsetOutOfRange {
                partition: self.name.clone(),
                offset,
                earliest: current,
                latest: high_watermark,
            });
        }
        if offset <= current {
            return Ok((current, Vec::new()));
        }
        log_start::save(&self.directory, offset).map_err(io_error("write log start"))?;
        self.shared
            .log_start_offset
            .fetch_max(offset, Ordering::AcqRel);
        Ok((offset, take_segments_below(writer, offset)))
    }
}

/// Takes the segments wholly below `log_start` out of the segment list (never the active one:
/// the list keeps at least one segment) and forgets their pending syncs.
fn take_segments_below(writer: &mut Writer, log_start: u64) -> Vec<Arc<SegmentReader>> {
    let mut segments = writer
        .shared
        .segments
        .write()
        .expect("segments lock poisoned");
    let mut victims = Vec::new();
    while segments.len() > 1 && segments[1].base_offset() <= log_start {
        writer.dirty.remove(&segments[0].base_offset());
        victims.push(segments.remove(0));
    }
    victims
}
