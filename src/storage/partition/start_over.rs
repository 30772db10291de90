//! Starting a follower's log over at its leader's log start: Kafka's `truncateFullyAndStartAt`.
//!
//! A follower whose whole log lies below its leader's log start (it was away, or slower than
//! the producer under `acks=leader`, while the leader's retention or a DeleteRecords deleted the
//! records it would fetch next) can never fetch them: the leader has none of them any more.
//! Every record the follower holds is committed (its log is a prefix of the leader's, and the
//! leader's log start is at or below its high watermark), and the leader deleted them all, so
//! the follower deletes them too and goes on from the leader's log start, an offset past its
//! own log end.
//!
//! # Order, and why a crash anywhere is fine
//!
//! Under the writer lock, as a follower only:
//! 1. a new, empty segment is created at the new start, and the directory synced;
//! 2. the leader-epoch file is written with an empty history and the new start as the high
//!    watermark (the floor stays);
//! 3. the new start is recorded as the log start (the `log-start` file, durably): the step's
//!    commit point;
//! 4. the log is published from it: the new segment is the only one, the log start, the high
//!    watermark and the acknowledged end are the new start, the producer state is dropped (its
//!    batches are gone, as Kafka's start-over drops it).
//!
//! Then, outside the lock, the old segments' files are deleted (and kept as spares for later
//! rolls, as retention's are). A crash before step 3 leaves the old log with an empty segment
//! after a gap; the segment before the gap was not synced whole (this step seals nothing), so
//! recovery deletes the empty segment as a torn tail's follower, and the old log is back, whole
//! (with an empty history after step 2, which only makes it ask nothing before it fetches): its
//! follower finds itself below the leader's log start again and starts over again. From step 3
//! on, recovery deletes every segment wholly below the recorded log start before it looks for
//! gaps (`recovery::segments_wholly_below`), so the log reopens at the new start, with whatever
//! the follower appended after it, even if the old files outlived the crash.
//!
//! # Why the history is emptied
//!
//! The fence's floors (producer epoch and leader epoch) stay: they never go down. The
//! leader-epoch history goes, as Kafka's start-over clears its leader-epoch cache: it knows
//! nothing of the epochs that wrote the offsets between the old log end and the new start, so
//! an entry of it would tell a follower asking this replica (once it leads) that an old epoch
//! ran up to the new start, and such a follower would cut below its own high watermark, round
//! after round, and never fetch (the simulation found it). Emptied, the history answers "no
//! entry" for those epochs, and the asker keeps what it knows is committed. The next replicated
//! batch starts the history again at the new start.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::info;

use super::super::durable_file::sync_directory;
use super::super::producer_state::ProducerStates;
use super::super::segment::{ActiveSegment, SegmentReader};
use super::super::{io_error, log_start, StorageError};
use super::{Partition, Writer};

/// Where a start-over stops when a test simulates a crash in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StartOverStep {
    /// After the new segment was created (step 1).
    NewSegment,
    /// After the leader-epoch file was written (step 2).
    History,
    /// After the log start was recorded (step 3).
    LogStart,
    /// After the first old segment's files were deleted.
    FirstDeletion,
}

impl Partition {
    /// Starts this follower's log over at `offset`, its leader's log start, which lies past its
    /// log end: every record it holds is deleted and the next one appended gets `offset`. Only a
    /// follower starts over (a leader never deletes records it has not committed); an `offset`
    /// at the log end changes nothing, one below it is
    /// [`StorageError::StartOverBelowLogEnd`] and changes nothing. Durable before it returns;
    /// see the module documentation for the order. A failure half way stops the partition's
    /// writes until a restart recovers it.
    pub fn start_over_at(&self, offset: u64) -> Result<(), StorageError> {
        self.start_over(offset, None)
    }

    /// [`Partition::start_over_at`], stopping after `crash_after` as a crash there would (the
    /// partition refuses everything from then on, and its drop writes nothing), for the tests.
    pub(crate) fn start_over(
        &self,
        offset: u64,
        crash_after: Option<StartOverStep>,
    ) -> Result<(), StorageError> {
        if self.is_retired() {
            return Err(StorageError::Deleted {
                partition: self.name.clone(),
            });
        }
        if self.shared.write_stop.is_stopped() {
            return Err(self.failed_error());
        }
        let old = self
            .fence
            .with_follower_log(|writer: &mut Writer, _leader_epoch| {
                self.refuse_if_retired(writer)?;
                let log_end = writer.active.next_offset();
                if offset <= log_end {
                    return if offset == log_end {
                        Ok(None)
                    } else {
                        Err(StorageError::StartOverBelowLogEnd {
                            partition: self.name.clone(),
                            offset,
                            log_end_offset: log_end,
                        })
                    };
                }
                let result = self.replace_log(writer, offset, crash_after);
                if result.is_err() {
                    // What is on disk recovers to the old log or the new one (module docs), but
                    // the writer's view may match neither: refuse writes until a restart.
                    self.shared.write_stop.stop();
                }
                result.map(|old| Some((old, log_end)))
            })?;
        let Some((old, log_end)) = old else {
            return Ok(());
        };
        if crash_after == Some(StartOverStep::FirstDeletion) {
            if let Some(first) = old.first() {
                super::super::segment::delete_files(&self.directory, first.base_offset())
                    .map_err(io_error("delete segment"))?;
            }
            self.shared.write_stop.stop();
            return Err(self.failed_error());
        }
        let deleted = self.delete_segments(old)?;
        info!(partition = %self.name, from = log_end, to = offset, segments = deleted.segments, bytes = deleted.bytes, "started the log over at the leader's log start");
        Ok(())
    }

    /// Steps 1 to 4 of the module documentation, under the writer lock; returns the old
    /// segments, out of the list, for their files to be deleted.
    fn replace_log(
        &self,
        writer: &mut Writer,
        offset: u64,
        crash_after: Option<StartOverStep>,
    ) -> Result<Vec<Arc<SegmentReader>>, StorageError> {
        let crashed = |step| {
            if crash_after == Some(step) {
                Err(self.failed_error())
            } else {
                Ok(())
            }
        };
        let directory = writer.directory.clone();
        let created = ActiveSegment::create(&directory, offset, writer.options)
            .map_err(io_error("create segment"))?;
        sync_directory(&directory).map_err(io_error("sync partition directory"))?;
        crashed(StartOverStep::NewSegment)?;
        if let Some(mut epochs) = writer.leader_epochs.epochs().cloned() {
            epochs.history.clear();
            epochs.high_watermark = epochs.high_watermark.max(offset);
            writer
                .leader_epochs
                .save(epochs)
                .map_err(io_error("write leader-epoch history"))?;
        }
        crashed(StartOverStep::History)?;
        log_start::save(&directory, offset).map_err(io_error("write log start"))?;
        crashed(StartOverStep::LogStart)?;
        let old = std::mem::replace(
            &mut *writer
                .shared
                .segments
                .write()
                .expect("segments lock poisoned"),
            vec![Arc::clone(created.reader())],
        );
        writer.active = created;
        writer.dirty.clear();
        writer
            .shared
            .damaged
            .write()
            .expect("damaged ranges lock poisoned")
            .clear();
        writer
            .shared
            .log_start_offset
            .fetch_max(offset, Ordering::AcqRel);
        // Everything below the new start is gone on the leader too: nothing of it is owed to a
        // reader, and the next records' producers start new sessions here.
        let mut producers = ProducerStates::new(self.config.max_producers);
        producers.note_forgotten();
        writer.producers = producers;
        self.commit.raise_to(offset);
        writer.shared.publish_high_watermark(offset);
        writer.shared.commit_up_to(offset);
        Ok(old)
    }
}

#[cfg(all(test, not(fencelog_loom)))]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::batch::BatchBuilder;
    use crate::storage::config::{FlushPolicy, PartitionConfig};
    use crate::storage::seal::SealWorker;
    use crate::storage::segment::{log_file_name, SegmentOptions};

    fn config() -> PartitionConfig {
        PartitionConfig {
            flush: FlushPolicy::Always,
            segment_bytes: 4096,
            ..PartitionConfig::default()
        }
    }

    /// A batch of one record under a producer epoch granted on `leader`.
    fn batch(leader: &Partition, value: u8) -> bytes::Bytes {
        let mut builder = BatchBuilder::new(leader.current_epoch());
        builder.push(1_000, None, Some(&[value; 200]));
        builder.finish()
    }

    fn open(directory: &Path, seal: &SealWorker) -> (Partition, crate::storage::RecoveryReport) {
        Partition::open_with_report("t/0", directory, config(), seal).unwrap()
    }

    /// The `.log` files of a partition directory, sorted.
    fn log_files(directory: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(directory)
            .unwrap()
            .filter_map(|entry| {
                let name = entry.unwrap().file_name().into_string().unwrap();
                name.ends_with(".log").then_some(name)
            })
            .collect();
        names.sort();
        names
    }

    /// A follower (leader epoch 2) whose log holds 30 records of leader epoch 1 over several
    /// segments, all committed.
    fn follower_with_records(directory: &Path, seal: &SealWorker) -> Partition {
        let (partition, _) = open(directory, seal);
        partition.become_leader(1).unwrap();
        partition
            .install_epoch(partition.current_epoch() + 1)
            .unwrap();
        for _ in 0..30 {
            partition.append(&batch(&partition, 7)).unwrap();
        }
        partition.advance_high_watermark(30);
        partition.become_follower(2).unwrap();
        assert!(
            log_files(directory).len() >= 2,
            "{:?}",
            log_files(directory)
        );
        partition
    }

    #[test]
    fn a_follower_starts_over_past_its_log_end_durably() {
        // Proves: the log restarts at the leader's log start: one empty segment there, log
        // start, high watermark and log end at it, the old segments' files gone, the floor kept
        // and the history emptied; the same after a restart; at the log end nothing changes,
        // below it the start-over is refused.
        let dir = tempfile::tempdir().unwrap();
        let seal = SealWorker::start().unwrap();
        let partition = follower_with_records(dir.path(), &seal);
        assert!(matches!(
            partition.start_over_at(20),
            Err(StorageError::StartOverBelowLogEnd { .. })
        ));
        partition.start_over_at(30).unwrap();
        assert_eq!(partition.log_start_offset(), 0);
        partition.start_over_at(1000).unwrap();
        assert_eq!(log_files(dir.path()), vec![log_file_name(1000)]);
        let check = |partition: &Partition, name: &str| {
            assert_eq!(partition.log_start_offset(), 1000, "{name}");
            assert_eq!(partition.log_end_offset(), 1000, "{name}");
            assert_eq!(partition.high_watermark(), 1000, "{name}");
            assert_eq!(partition.leader_epoch_floor(), 2, "{name}");
            assert_eq!(partition.leader_epoch_history(), vec![], "{name}");
        };
        check(&partition, "live");
        drop(partition);
        let (reopened, _) = open(dir.path(), &seal);
        check(&reopened, "reopened");
        assert_eq!(log_files(dir.path()), vec![log_file_name(1000)]);
    }

    #[test]
    fn a_crash_in_any_step_reopens_the_old_log_or_the_new_one_never_a_mix() {
        // Proves: stopped after each of its writes (the partition writes nothing more, as after
        // a crash), a start-over reopens as the old log, whole, before the log start is
        // recorded, and as the new empty log from then on, even with old segment files left;
        // the floor stays throughout.
        for (step, started_over) in [
            (StartOverStep::NewSegment, false),
            (StartOverStep::History, false),
            (StartOverStep::LogStart, true),
            (StartOverStep::FirstDeletion, true),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let seal = SealWorker::start().unwrap();
            let partition = follower_with_records(dir.path(), &seal);
            let old_files = log_files(dir.path());
            assert!(partition.start_over(1000, Some(step)).is_err(), "{step:?}");
            drop(partition);
            let (partition, report) = open(dir.path(), &seal);
            if started_over {
                assert_eq!(partition.log_start_offset(), 1000, "{step:?}");
                assert_eq!(partition.log_end_offset(), 1000, "{step:?}");
                assert_eq!(log_files(dir.path()), vec![log_file_name(1000)], "{step:?}");
                assert!(report.segments_below_log_start > 0, "{step:?}: {report:?}");
            } else {
                assert_eq!(partition.log_start_offset(), 0, "{step:?}");
                assert_eq!(partition.log_end_offset(), 30, "{step:?}");
                assert_eq!(log_files(dir.path()), old_files, "{step:?}");
                assert!(report.damaged.is_empty(), "{step:?}: {report:?}");
            }
            assert_eq!(partition.leader_epoch_floor(), 2, "{step:?}");
        }
    }

    #[test]
    fn records_appended_after_a_start_over_survive_old_segment_files() {
        // Proves: old segment files that outlived a crash after the start-over never cost the
        // records appended since: recovery drops them as below the recorded log start instead
        // of reading the gap after them as a torn tail.
        let seal = SealWorker::start().unwrap();
        let source = tempfile::tempdir().unwrap();
        let (leader, _) = open(source.path(), &seal);
        leader.become_leader(2).unwrap();
        leader.install_epoch(leader.current_epoch() + 1).unwrap();
        for _ in 0..40 {
            leader.append(&batch(&leader, 1)).unwrap();
        }
        leader.advance_high_watermark(40);
        leader.delete_records_before(35).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let partition = follower_with_records(dir.path(), &seal);
        partition.start_over_at(35).unwrap();
        let read = leader.read_for_replication(35, 1 << 20).unwrap();
        let bytes: Vec<u8> = read.batches.concat();
        assert_eq!(
            partition
                .append_replicated(&bytes, read.records_epoch, 2)
                .unwrap(),
            40
        );
        // An old file back, as a crash before its deletion would leave it.
        let options = SegmentOptions {
            segment_bytes: 4096,
            index_interval_bytes: config().index_interval_bytes,
        };
        drop(ActiveSegment::create(dir.path(), 0, options).unwrap());
        partition.shared.write_stop.stop();
        drop(partition);
        let (reopened, report) = open(dir.path(), &seal);
        assert_eq!(report.segments_below_log_start, 1);
        assert_eq!(reopened.log_start_offset(), 35);
        assert_eq!(reopened.log_end_offset(), 40);
    }
}
