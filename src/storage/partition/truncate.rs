//! Truncation: a follower cuts its log where it parts ways with the leader's.
//!
//! [`Partition::truncate_to`] makes an offset the log end: later segments are deleted, the
//! segment holding the cut is replaced by a copy of its prefix, the index, the timestamp data,
//! the recovery point, the producer-state table and the leader-epoch history follow. The epoch
//! floors (producer and leader) never move.
//!
//! # Why the cut segment is copied rather than cut in place
//!
//! Readers hold zero-copy slices of the segment maps (a fetch response still being written to
//! a socket, for instance), and the map's soundness rests on no published byte ever being
//! written again (see `mmap`). Zeroing or overwriting the tail of a mapped segment would change
//! bytes under such a slice, and shrinking the file would turn a read of it into `SIGBUS`. So
//! the prefix that stays is copied into a new file (`copy_file_range` on Linux: no data through
//! user space), fsynced, and renamed over the segment's name; the new file is opened as the
//! active segment and replaces the old one in the segment list. A reader that still holds the
//! old map keeps reading the old, unlinked file, unchanged. The cost is a copy of the prefix of
//! one segment, paid only when a leader change left this replica with a divergent tail.
//!
//! # Crash safety
//!
//! The steps, in order, each durable before the next:
//!
//! 1. the recovery point comes down to the base of the segment that will be the last one (and
//!    seals, syncs and producer-state snapshots planned before are disowned: see
//!    `RecoveryPoint::lower_to`), so from now on recovery treats that segment and everything
//!    after it as possibly torn;
//! 2. the segments after the cut are deleted (files, then a directory sync);
//! 3. the cut segment's prefix is written to a temporary file, fsynced, renamed over it, and
//!    the directory synced;
//! 4. the leader-epoch history loses its entries at or after the cut;
//! 5. the producer-state table is rebuilt for the shorter log (from a snapshot at or below the
//!    cut plus replay); a snapshot past the cut is removed, durably.
//!
//! A crash anywhere leaves a log that recovers to a consistent prefix of the log before the
//! truncation: before step 3 the cut segment is whole, and any later segment that outlived a
//! crash in step 2 either follows it exactly (a prefix of the old log) or follows a gap after a
//! segment the recovery point no longer covers, which recovery deletes. Recovery then drops
//! leader-epoch history entries past the log end (step 4 not done yet), and discards a
//! producer-state snapshot past the log end and replays (step 5 not done yet), so history and
//! producer state agree with the log recovered. That log may be longer than the truncation
//! asked for; it is never shorter, and never holds anything but whole batches of the old log.
//! The follower always truncates by leader epoch before it fetches again, which cuts it right.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::{info, warn};

use super::super::durable_file::sync_directory;
use super::super::segment::{self, ActiveSegment, SegmentReader};
use super::super::{io_error, StorageError};
use super::open::rebuild_producer_states;
use super::{Partition, Writer};
use crate::batch::{BatchHeader, HEADER_BYTES};

/// Suffix of the temporary file a truncation copies the kept prefix into (ignored on open: it
/// does not end in `.log`; removed by the next truncation of that segment).
const TRUNCATING_SUFFIX: &str = ".truncating";

/// Where a truncation cuts: the offset, and the segment that becomes the last one.
struct Cut {
    /// The new log end: the start of the batch holding the asked offset (or the offset
    /// itself, at a batch boundary).
    offset: u64,
    /// Index in the segment list of the segment that stays last, and how many of its bytes
    /// stay; `None` when no segment stays.
    keep: Option<(usize, usize)>,
}

impl Partition {
    /// Cuts the log so that `offset` is its end (no-op if it already ends at or below it).
    /// Only a follower truncates. An offset inside a batch cuts before that batch (batches are
    /// never split), and the log then ends below `offset`. Below the high watermark only when
    /// the leader's log is shorter than what this replica knew to be committed (a power cut of
    /// every replica under `flush never` or `interval`): the high watermark comes down to the
    /// cut, logged as a warning (see [`high_watermark`](super::high_watermark)). The leader-epoch history
    /// loses the entries starting at or after the cut; the fence floors stay. See the module
    /// documentation for why it is crash-safe; a failure half way stops the partition's writes
    /// until a restart recovers it.
    pub fn truncate_to(&self, offset: u64) -> Result<(), StorageError> {
        if self.is_retired() {
            return Err(StorageError::Deleted {
                partition: self.name.clone(),
            });
        }
        if self.shared.write_stop.is_stopped() {
            return Err(self.failed_error());
        }
        self.fence
            .with_follower_log(|writer: &mut Writer, _leader_epoch| {
                if writer.shared.recovery_point.is_retired() {
                    return Err(StorageError::Deleted {
                        partition: self.name.clone(),
                    });
                }
                let log_end = writer.active.next_offset();
                if offset >= log_end {
                    // Nothing to cut from the log, but an epoch that started at its end wrote
                    // nothing: its history entry goes, or a replica that led that empty epoch
                    // would ask the leader where it ended forever instead of catching up.
                    return self.cut_empty_epochs(writer, log_end);
                }
                let cut = find_cut(writer, offset, &self.name)?;
                if let Some(high_watermark) = writer.shared.begin_truncation(cut.offset) {
                    tracing::warn!(partition = %self.name, offset = cut.offset, high_watermark, "truncating below the high watermark: the leader's log is shorter (committed records lost to a power cut)");
                }
                writer.shared.truncations.fetch_add(1, Ordering::AcqRel);
                self.commit.lower_to(cut.offset);
                let result = self.cut_log(writer, &cut);
                if let Err(error) = &result {
                    // What is on disk is a consistent prefix (module docs), but the writer's view
                    // may not match it: refuse writes until a restart recovers from the disk.
                    self.shared.write_stop.stop();
                    tracing::error!(partition = %self.name, offset = cut.offset, %error, "truncation failed; the partition refuses writes until the server restarts");
                } else {
                    info!(partition = %self.name, offset = cut.offset, from = log_end, "truncated");
                }
                result
            })
    }

    /// Drops the leader-epoch history entries that start at the log end (epochs that wrote
    /// nothing), durably; the floor stays.
    fn cut_empty_epochs(&self, writer: &mut Writer, log_end: u64) -> Result<(), StorageError> {
        let Some(mut epochs) = writer.leader_epochs.epochs().cloned() else {
            return Ok(());
        };
        if epochs.latest().is_none_or(|(_, start)| start < log_end) {
            return Ok(());
        }
        epochs.cut(log_end);
        writer
            .leader_epochs
            .save(epochs)
            .map_err(io_error("write leader-epoch history"))
    }

    /// Steps 1 to 5 of the module documentation, under the writer lock.
    fn cut_log(&self, writer: &mut Writer, cut: &Cut) -> Result<(), StorageError> {
        let directory = writer.directory.clone();
        let segments = writer
            .shared
            .segments
            .read()
            .expect("segments lock poisoned")
            .clone();
        let last_base = cut
            .keep
            .map_or(cut.offset, |(index, _)| segments[index].base_offset());
        writer
            .shared
            .recovery_point
            .lower_to(last_base)
            .map_err(io_error("write recovery point"))?;
        let deleted_from = cut.keep.map_or(0, |(index, _)| index + 1);
        for victim in &segments[deleted_from..] {
            victim.mark_deleted();
            writer.dirty.remove(&victim.base_offset());
            segment::delete_files(&directory, victim.base_offset())
                .map_err(io_error("delete segment after the cut"))?;
        }
        sync_directory(&directory).map_err(io_error("sync partition directory"))?;
        let (active, last_epoch) = match cut.keep {
            Some((index, kept_bytes)) => {
                let kept = &segments[index];
                writer.dirty.remove(&kept.base_offset());
                let recovered = reopen_prefix(&directory, kept, kept_bytes, writer)?;
                if recovered.scan.next_offset != cut.offset {
                    return Err(StorageError::Io {
                        context: format!(
                            "truncate {}: the kept prefix ends at offset {}, not at the cut {}",
                            kept.path().display(),
                            recovered.scan.next_offset,
                            cut.offset
                        ),
                        source: io::Error::from(io::ErrorKind::InvalidData),
                    });
                }
                let last_epoch = if recovered.scan.batches > 0 {
                    recovered.scan.last_epoch
                } else {
                    writer.last_epoch
                };
                // A cut below the log start (only after a crash left the recorded high
                // watermark below it) starts the log at the cut: those offsets come again
                // from the leader, whose log start the next fetch brings back.
                writer
                    .shared
                    .log_start_offset
                    .fetch_min(cut.offset, Ordering::AcqRel);
                (recovered.segment, last_epoch)
            }
            None => {
                let created = ActiveSegment::create(&directory, cut.offset, writer.options)
                    .map_err(io_error("create segment"))?;
                sync_directory(&directory).map_err(io_error("sync partition directory"))?;
                writer
                    .shared
                    .log_start_offset
                    .store(cut.offset, Ordering::Release);
                (created, 0)
            }
        };
        let kept_readers = {
            let mut list = writer
                .shared
                .segments
                .write()
                .expect("segments lock poisoned");
            list.truncate(cut.keep.map_or(0, |(index, _)| index));
            list.push(Arc::clone(active.reader()));
            list.clone()
        };
        writer.active = active;
        writer.last_epoch = last_epoch;
        let damaged = {
            let mut damaged = writer
                .shared
                .damaged
                .write()
                .expect("damaged ranges lock poisoned");
            damaged.retain(|range| range.end_offset <= cut.offset);
            damaged.clone()
        };
        if let Some(mut epochs) = writer.leader_epochs.epochs().cloned() {
            epochs.cut(cut.offset);
            epochs.high_watermark = epochs.high_watermark.min(cut.offset);
            writer
                .leader_epochs
                .save(epochs)
                .map_err(io_error("write leader-epoch history"))?;
        }
        let forgotten = writer.producers.may_have_forgotten();
        writer.producers = rebuild_producer_states(
            &self.name,
            &directory,
            &kept_readers,
            &damaged,
            cut.offset,
            self.config.max_producers,
        )?;
        if forgotten {
            // What was forgotten before the cut stays forgotten.
            writer.producers.note_forgotten();
        }
        // The replay may find a transaction open again (its marker was cut) in a partition
        // opened from a snapshot that had none: the last stable offset must look at it.
        if !writer.producers.transactions().is_empty() {
            writer.shared.transactional.store(true, Ordering::Release);
        }
        Ok(())
    }
}

/// Where a truncation to `offset` cuts. Every segment's written bytes are published first
/// (written bytes are whole batches; publishing lets this walk, and the producer-state replay
/// after it, read what a flush `always` partition has not synced yet).
fn find_cut(writer: &Writer, offset: u64, partition: &str) -> Result<Cut, StorageError> {
    let segments = writer
        .shared
        .segments
        .read()
        .expect("segments lock poisoned")
        .clone();
    for segment in &segments {
        segment.publish_written();
    }
    let Some(index) = segments
        .partition_point(|segment| segment.base_offset() <= offset)
        .checked_sub(1)
    else {
        return Ok(Cut { offset, keep: None });
    };
    let holder = &segments[index];
    let (kept_bytes, end) = batches_before(holder, offset, partition)?;
    if kept_bytes > 0 {
        return Ok(Cut {
            offset: end,
            keep: Some((index, kept_bytes)),
        });
    }
    // The cut falls before the holder's first batch: the segment before it stays whole.
    match index.checked_sub(1) {
        Some(previous) => {
            // A sealed segment opened on demand and never opened yet: learn its size first.
            segments[previous]
                .learn_size()
                .map_err(|error| error.into_storage_error(partition))?;
            Ok(Cut {
                offset: holder.base_offset(),
                keep: Some((previous, segments[previous].written_bytes())),
            })
        }
        None => Ok(Cut {
            offset: holder.base_offset().min(offset),
            keep: None,
        }),
    }
}

/// The bytes of `segment`'s batches that end at or before `offset`, and the offset after them
/// (a sealed segment opened on demand is opened for it).
fn batches_before(
    segment: &SegmentReader,
    offset: u64,
    partition: &str,
) -> Result<(usize, u64), StorageError> {
    let map = segment
        .open_map()
        .map_err(|error| error.into_storage_error(partition))?;
    let written = segment.written_bytes();
    let bytes = map
        .bytes(0, written)
        .expect("the written bytes were published");
    let mut position = 0;
    let mut end = segment.base_offset();
    while let Some(header) = BatchHeader::parse(&bytes[position..]) {
        let length = header.batch_length as usize;
        if length < HEADER_BYTES || position + length > written || header.next_offset() > offset {
            break;
        }
        position += length;
        end = header.next_offset();
    }
    Ok((position, end))
}

/// Replaces the file of `kept` by a copy of its first `kept_bytes` (fsynced, renamed over it,
/// the directory synced) and opens it as the active segment (its index rebuilt). With
/// `kept_bytes` equal to what the segment holds the file is only reopened.
fn reopen_prefix(
    directory: &Path,
    kept: &SegmentReader,
    kept_bytes: usize,
    writer: &Writer,
) -> Result<segment::Recovered, StorageError> {
    let base = kept.base_offset();
    if kept_bytes < kept.written_bytes() {
        copy_prefix(directory, base, kept_bytes).map_err(io_error("copy the kept prefix"))?;
    }
    ActiveSegment::recover(directory, base, writer.options, true)
        .map_err(io_error("reopen the cut segment"))
}

/// Writes the first `kept_bytes` of segment `base` to a temporary file, fsyncs it, renames it
/// over the segment and syncs the directory.
fn copy_prefix(directory: &Path, base: u64, kept_bytes: usize) -> io::Result<()> {
    let name = segment::log_file_name(base);
    let path = directory.join(&name);
    let temporary = directory.join(format!("{name}{TRUNCATING_SUFFIX}"));
    match fs::remove_file(&temporary) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let mut source = File::open(&path)?.take(kept_bytes as u64);
    let mut target = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temporary)?;
    let copied = io::copy(&mut source, &mut target)?;
    if copied != kept_bytes as u64 {
        warn!(segment = %path.display(), copied, kept_bytes, "the segment file is shorter than its written bytes");
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
    }
    super::super::durable_file::sync_file(&target, &temporary)?;
    drop(target);
    fs::rename(&temporary, &path)?;
    sync_directory(directory)
}
