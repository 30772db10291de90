//! Recovery: turning the segment files found in a partition directory back into a log.
//!
//! Every open recovers; there is no clean-shutdown marker to trust instead, but the recovery
//! point is one for the segments below it: those were synced whole, so they are opened without
//! reading their data ([`ActiveSegment::open_sealed`]: the end of the data from the index, the
//! batches checked on first read or in the background) and only the segments after it are
//! scanned. Startup time so grows with the data written since the last sync, not with the data
//! kept. Recovery walks the
//! segments in base offset order and keeps the longest prefix that can be the log that was
//! written, so that an acknowledged record is never lost and a corrupt batch is never served.
//! What it may do to a damaged segment depends on the recovery point (see [`super::seal`]): a
//! segment the recovery point covers was synced whole, so a crash cannot have torn it and any
//! damage in it is corruption, recorded and refused on read but never cut; any later segment may
//! end in a torn write, which is cut, and whatever follows a cut is deleted. Each rule is one
//! function below, so that each can be read (and changed) on its own.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::{debug, warn};

use super::durable_file::sync_directory;
use super::segment::{self, ActiveSegment, Recovered, SegmentOptions, SegmentReader};
use super::{io_error, StorageError};
use crate::batch::{self, BatchHeader};

/// What recovery found when the partition was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments opened.
    pub segments: usize,
    /// Valid batches found.
    pub batches: u64,
    /// Bytes cut after the last valid batch (torn or corrupt tail), all segments together.
    pub bytes_cut: u64,
    /// Whole segments deleted because an earlier one was cut.
    pub segments_deleted: usize,
    /// Whole segments deleted because they lie below the recorded log start (a crash left
    /// them behind after DeleteRecords, retention or a follower's start-over moved it past
    /// them). Not opened: nothing in them is ever served again.
    pub segments_below_log_start: usize,
    /// Index files rebuilt.
    pub indexes_rebuilt: usize,
    /// Segments below the recovery point opened without a scan (checked later), those not
    /// opened at all included.
    pub segments_opened_lazily: usize,
    /// Segments below the recovery point not even opened: only the directory listing was read
    /// for them; they are opened on first use (a read, a timestamp lookup, retention, the
    /// background check). Their batches are not counted in `batches`.
    pub segments_not_opened: usize,
    /// The epoch installed: max of the checkpoint and the log.
    pub epoch: u64,
    /// Offsets of sealed segments that failed their checks: refused on read, nothing cut.
    pub damaged: Vec<DamagedRange>,
}

/// Offsets of a sealed segment that failed their checks at recovery (a flipped byte, a short
/// file). A sealed segment was synced before the next one was created, so a crash cannot have
/// torn it: this is corruption. Reads of these offsets fail with [`StorageError::Corrupt`];
/// nothing is cut or deleted, so the offsets after the damage keep being served and are never
/// given out again, and the segment file stays as found for repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedRange {
    /// First unreadable offset.
    pub start_offset: u64,
    /// First readable offset after the damage: the next segment's base offset.
    pub end_offset: u64,
    /// The damaged segment file.
    pub segment: PathBuf,
    /// Byte position in the segment where its readable data ends.
    pub position: u64,
    /// What the check found there.
    pub reason: String,
}

/// The log recovery kept, ready for the partition's writer and readers.
#[derive(Debug)]
pub(crate) struct RecoveredLog {
    /// Readers of the kept segments, in offset order; the last is the active segment's.
    pub(crate) readers: Vec<Arc<SegmentReader>>,
    /// The segment appends continue in.
    pub(crate) active: ActiveSegment,
    /// What was found and done; its `epoch` is the epoch to install.
    pub(crate) report: RecoveryReport,
    /// The highest epoch of a batch kept (the last batch's: epochs never decrease with
    /// offset); 0 for an empty log.
    pub(crate) epoch_in_log: u64,
}

/// Recovers the log of the partition `name` in `directory`: keeps the valid prefix of its
/// segments, cuts a torn tail, deletes what follows a cut, and records damaged sealed ranges.
/// `recovery_point` is the offset below which segments were synced whole; `checkpoint_epoch` the
/// highest epoch of the epoch checkpoint; `log_start` the recorded log start (the `log-start`
/// file), below which whole segments are deleted unopened.
pub(crate) fn recover_log(
    name: &str,
    directory: &Path,
    options: SegmentOptions,
    recovery_point: u64,
    checkpoint_epoch: u64,
    log_start: Option<u64>,
) -> Result<RecoveredLog, StorageError> {
    let mut bases = list_segments(directory)?;
    let mut report = RecoveryReport::default();
    let below = segments_wholly_below(&bases, log_start);
    report.segments_below_log_start = delete_segments(
        directory,
        &bases[..below],
        "delete segment below the log start",
    )?;
    bases.drain(..below);
    let mut recovery = Recovery {
        name,
        directory,
        options,
        report,
        readers: Vec::new(),
        active: None,
        previous_end: None,
        epoch_in_log: 0,
    };
    let kept = recovery.keep_valid_prefix(&bases, recovery_point)?;
    if damaged_sealed_segment_became_last(kept < bases.len(), recovery.previous_end.as_ref()) {
        recovery.recut_damaged_last_segment()?;
    }
    delete_segments_after_cut(directory, &bases[kept..], &mut recovery.report)?;
    let Recovery {
        mut report,
        mut readers,
        active,
        epoch_in_log,
        ..
    } = recovery;
    let active = match active {
        Some(active) => active,
        None => create_first_segment(directory, options, &mut readers)?,
    };
    report.epoch = installed_epoch(checkpoint_epoch, epoch_in_log);
    log_outcome(name, &report);
    Ok(RecoveredLog {
        readers,
        active,
        report,
        epoch_in_log,
    })
}

/// Where a kept segment's readable data ends, to place the next one against it.
struct SegmentEnd {
    next_offset: u64,
    /// Below the recovery point: synced whole, so damage is corruption, not a torn write.
    trusted: bool,
    segment: PathBuf,
    position: usize,
    invalid: Option<String>,
    /// Opened without a scan: what follows its data was not looked at.
    lazily: bool,
}

impl SegmentEnd {
    fn of(recovered: &Recovered, trusted: bool) -> Self {
        Self {
            next_offset: recovered.scan.next_offset,
            trusted,
            lazily: recovered.lazily,
            segment: recovered.segment.reader().path().to_path_buf(),
            position: recovered.scan.valid_bytes,
            invalid: recovered
                .scan
                .invalid
                .as_ref()
                .map(|(_, reason)| reason.clone()),
        }
    }

    /// The offsets between this end and the next segment's base.
    fn damaged_up_to(&self, next_base: u64) -> DamagedRange {
        DamagedRange {
            start_offset: self.next_offset,
            end_offset: next_base,
            segment: self.segment.clone(),
            position: self.position as u64,
            reason: self.invalid.clone().unwrap_or_else(|| {
                format!(
                    "the segment ends at offset {} but the next one starts at {next_base}",
                    self.next_offset
                )
            }),
        }
    }
}

/// The walk over a partition's segments, and what it has kept so far.
struct Recovery<'a> {
    name: &'a str,
    directory: &'a Path,
    options: SegmentOptions,
    report: RecoveryReport,
    readers: Vec<Arc<SegmentReader>>,
    /// The last kept segment: the active one if nothing after it is kept.
    active: Option<ActiveSegment>,
    /// Where the last kept segment's readable data ends.
    previous_end: Option<SegmentEnd>,
    /// Highest epoch of the kept segments.
    epoch_in_log: u64,
}

impl Recovery<'_> {
    /// Opens the segments at `bases` in order and keeps each until a rule stops the walk.
    /// Returns how many were kept: the rest are to be deleted.
    fn keep_valid_prefix(
        &mut self,
        bases: &[u64],
        recovery_point: u64,
    ) -> Result<usize, StorageError> {
        for (index, &base) in bases.iter().enumerate() {
            let trusted =
                is_trusted_below_recovery_point(bases.get(index + 1).copied(), recovery_point);
            if let Some(end) = segment_overlaps_previous(self.previous_end.as_ref(), base) {
                warn!(
                    partition = self.name,
                    base,
                    expected = end.next_offset,
                    "segment overlaps the log before it; deleting it and all later segments"
                );
                return Ok(index);
            }
            let next_base = bases.get(index + 1).copied();
            if let Some(next_base) =
                opens_on_demand(next_base, bases.get(index + 2).copied(), recovery_point)
            {
                self.keep_on_demand(base, next_base);
                continue;
            }
            let recovered =
                recover_segment(self.directory, base, self.options, trusted, next_base)?;
            self.count_segment(&recovered);
            let goes_backwards = first_epoch_goes_backwards(&recovered, self.epoch_in_log);
            self.record_invalid_batch(&recovered, trusted);
            if goes_backwards {
                warn!(partition = self.name, base, "segment starts with an epoch lower than the one before it; deleting it and all later segments");
                return Ok(index);
            }
            if let Some(end) = gap_after_untrusted_segment(self.previous_end.as_ref(), base) {
                warn!(
                    partition = self.name,
                    base,
                    expected = end.next_offset,
                    "the segment before this one ends early and was not known to be synced; deleting this and all later segments"
                );
                return Ok(index);
            }
            if let Some(damage) = damaged_sealed_range(self.previous_end.take(), base) {
                self.record_damaged_sealed_range(damage);
            }
            let ends_log = torn_segment_ends_log(&recovered, trusted);
            self.keep(recovered, trusted);
            if ends_log {
                return Ok(index + 1);
            }
        }
        Ok(bases.len())
    }

    /// Every segment opened counts in the report, kept or not.
    fn count_segment(&mut self, recovered: &Recovered) {
        self.report.segments += 1;
        self.report.batches += recovered.scan.batches;
        self.report.indexes_rebuilt += usize::from(recovered.index_rebuilt);
        self.report.segments_opened_lazily += usize::from(recovered.lazily);
    }

    /// An invalid batch is logged where it was found. In a segment the recovery point does not
    /// cover, everything from it on was cut (a torn write) and counts as bytes cut; in a trusted
    /// segment the bytes are kept as found (corruption, for repair) and nothing is cut.
    fn record_invalid_batch(&mut self, recovered: &Recovered, trusted: bool) {
        let scan = &recovered.scan;
        let Some((position, reason)) = &scan.invalid else {
            return;
        };
        let cut = scan.data_end.saturating_sub(scan.valid_bytes) as u64;
        let is_last = !trusted;
        if is_last {
            self.report.bytes_cut += cut;
        }
        warn!(
            partition = self.name,
            segment = %recovered.segment.reader().path().display(),
            position,
            bytes_cut = if is_last { cut } else { 0 },
            valid_batches = scan.batches,
            reason = reason.as_str(),
            "invalid batch: the last segment is cut there; a sealed one is kept as found"
        );
    }

    /// The offsets a damaged sealed segment cannot serve are refused on read from now on, and
    /// said loudly: only restoring the file from a backup brings them back.
    fn record_damaged_sealed_range(&mut self, damage: DamagedRange) {
        tracing::error!(
            partition = self.name,
            segment = %damage.segment.display(),
            position = damage.position,
            start_offset = damage.start_offset,
            end_offset = damage.end_offset,
            reason = damage.reason.as_str(),
            "corrupt sealed segment: these offsets are refused on read; restore the file from a backup to serve them again"
        );
        self.report.damaged.push(damage);
    }

    /// Keeps a segment without opening it (see [`opens_on_demand`]): it ends where the next
    /// one begins until its first use shows otherwise.
    fn keep_on_demand(&mut self, base: u64, next_base: u64) {
        debug_assert!(
            self.active.is_none(),
            "segments opened on demand come before every other"
        );
        let reader = SegmentReader::on_demand(self.directory, base, self.options, next_base);
        self.report.segments += 1;
        self.report.segments_opened_lazily += 1;
        self.report.segments_not_opened += 1;
        self.previous_end = Some(SegmentEnd {
            next_offset: next_base,
            trusted: true,
            segment: reader.path().to_path_buf(),
            position: 0,
            invalid: None,
            lazily: true,
        });
        self.readers.push(reader);
    }

    /// Keeps a segment: it joins the log, and only a kept segment contributes its epochs.
    fn keep(&mut self, recovered: Recovered, trusted: bool) {
        self.epoch_in_log = self.epoch_in_log.max(recovered.scan.last_epoch);
        self.readers.push(Arc::clone(recovered.segment.reader()));
        self.previous_end = Some(SegmentEnd::of(&recovered, trusted));
        self.active = Some(recovered.segment);
    }

    /// A damaged sealed segment that became the last one (see
    /// [`damaged_sealed_segment_became_last`]) is opened again as the last segment: appends
    /// continue after its valid data, so its tail is cut like any last segment's, or a later
    /// scan could adopt an old batch left beyond the new ones.
    fn recut_damaged_last_segment(&mut self) -> Result<(), StorageError> {
        let kept = self.active.take().expect("a kept segment");
        let base = kept.reader().base_offset();
        drop(kept);
        self.readers.pop();
        let recovered = ActiveSegment::recover(self.directory, base, self.options, true)
            .map_err(io_error("recover segment"))?;
        self.report.bytes_cut += recovered
            .scan
            .data_end
            .saturating_sub(recovered.scan.valid_bytes) as u64;
        self.readers.push(Arc::clone(recovered.segment.reader()));
        self.active = Some(recovered.segment);
        Ok(())
    }
}

/// A segment is trusted when the recovery point reaches the next segment's base: it was synced
/// whole before the recovery point moved past it, so a crash cannot have torn it. The last
/// segment is never trusted (appends were still landing in it).
fn is_trusted_below_recovery_point(next_base: Option<u64>, recovery_point: u64) -> bool {
    next_base.is_some_and(|next| next <= recovery_point)
}

/// A segment is not opened at all at start (only listed; opened on first use) when the segment
/// after it is trusted too: then it is neither the newest trusted segment, whose last epoch
/// recovery needs (the highest of the trusted part of the log: the next segment's first epoch
/// is checked against it, and it bounds the installed epoch when the newer segments are empty)
/// and which becomes the last one if the newer segments are refused, nor one a rule of the walk
/// can stop at: it ends at `next_base` by assumption, so it cannot overlap the next segment or
/// leave a gap, and epochs are only compared against segments that were opened. Returns the
/// next segment's base, where its offsets end. So the segments opened at start are the newest
/// trusted one and those after the recovery point: a restart reads the data written since the
/// last sync, however much is kept.
fn opens_on_demand(
    next_base: Option<u64>,
    base_after_next: Option<u64>,
    recovery_point: u64,
) -> Option<u64> {
    next_base.filter(|_| is_trusted_below_recovery_point(base_after_next, recovery_point))
}

/// A segment that starts before the previous kept segment's data ends would give offsets out
/// twice: it cannot be part of the log, so it and every later segment are deleted.
fn segment_overlaps_previous(previous: Option<&SegmentEnd>, base: u64) -> Option<&SegmentEnd> {
    previous.filter(|end| base < end.next_offset)
}

/// Opens a segment. One the recovery point does not cover is scanned and may end in a torn
/// write: it is cut at its first invalid batch (the tail zeroed, so no old byte is adopted
/// later). A trusted one is opened without a scan when its index leads to exactly where the next
/// segment begins, and scanned otherwise; it is left exactly as found either way: damage there is
/// corruption, refused rather than cut.
fn recover_segment(
    directory: &Path,
    base: u64,
    options: SegmentOptions,
    trusted: bool,
    next_base: Option<u64>,
) -> Result<Recovered, StorageError> {
    if let (true, Some(next_base)) = (trusted, next_base) {
        if let Some(opened) = ActiveSegment::open_sealed(directory, base, options, next_base)
            .map_err(io_error("open sealed segment"))?
        {
            return Ok(opened);
        }
    }
    ActiveSegment::recover(directory, base, options, !trusted).map_err(io_error("recover segment"))
}

/// Epochs never decrease with offset: a segment whose first batch carries an epoch below the
/// highest of the kept segments was not written after them, so it and every later segment are
/// deleted. An empty segment has no epoch to check.
fn first_epoch_goes_backwards(recovered: &Recovered, epoch_in_log: u64) -> bool {
    recovered.scan.batches > 0 && first_epoch(&recovered.segment) < epoch_in_log
}

/// A gap after a segment the recovery point does not cover means that segment lost its tail in
/// a crash (it was cut, or its last writes never reached the disk): the offsets after the gap
/// would follow a hole in the log, so this and every later segment are deleted.
fn gap_after_untrusted_segment(previous: Option<&SegmentEnd>, base: u64) -> Option<&SegmentEnd> {
    previous.filter(|end| base > end.next_offset && !end.trusted)
}

/// A gap after a trusted segment is corruption in that sealed segment (a crash cannot have
/// caused it): its missing offsets become a damaged range, refused on read, and the segments
/// after it are kept, since their offsets were acknowledged and are intact.
fn damaged_sealed_range(previous: Option<SegmentEnd>, base: u64) -> Option<DamagedRange> {
    previous
        .filter(|end| base > end.next_offset)
        .map(|end| end.damaged_up_to(base))
}

/// A segment the recovery point does not cover and that holds an invalid batch was torn (and
/// cut): nothing after it can be part of the log, so the walk stops after keeping it.
fn torn_segment_ends_log(recovered: &Recovered, trusted: bool) -> bool {
    !trusted && recovered.scan.invalid.is_some()
}

/// When the walk stopped before the last segment (`segments_refused`) and the last kept segment
/// is a trusted one with damage, or one opened without a scan (what follows its data was never
/// looked at), that sealed segment is now the last one of the log, and must be scanned and
/// treated as such (see [`Recovery::recut_damaged_last_segment`]).
fn damaged_sealed_segment_became_last(
    segments_refused: bool,
    last_kept: Option<&SegmentEnd>,
) -> bool {
    segments_refused
        && last_kept.is_some_and(|end| end.trusted && (end.invalid.is_some() || end.lazily))
}

/// Segments after a cut (or refused by a rule) are deleted, files and all, and the directory is
/// synced so that the deletion outlives a crash: the log on disk stays a prefix of what was
/// written.
fn delete_segments_after_cut(
    directory: &Path,
    refused: &[u64],
    report: &mut RecoveryReport,
) -> Result<(), StorageError> {
    report.segments_deleted += delete_segments(directory, refused, "delete segment after a cut")?;
    Ok(())
}

/// Deletes the segments at `bases` (both files of each), then syncs the directory once if
/// there were any. Returns how many.
fn delete_segments(
    directory: &Path,
    bases: &[u64],
    context: &'static str,
) -> Result<usize, StorageError> {
    for &base in bases {
        segment::delete_files(directory, base).map_err(io_error(context))?;
    }
    if !bases.is_empty() {
        sync_directory(directory).map_err(io_error("sync partition directory"))?;
    }
    Ok(bases.len())
}

/// How many of the first `bases` lie wholly below the recorded `log_start`: those followed by a
/// segment whose base is at or below it.
///
/// Why before the walk: a follower that starts over at its leader's log start
/// (`Partition::start_over_at`) leaves a gap between its old log's end and its new first
/// segment. A crash before the old segments are gone must not read that gap as a torn write
/// (which deletes everything after it: the new segment, and what the follower appended and
/// reported since) nor as damage; the recorded log start, written before anything is appended
/// to the new segment, says the old segments are deleted records.
fn segments_wholly_below(bases: &[u64], log_start: Option<u64>) -> usize {
    let Some(log_start) = log_start else {
        return 0;
    };
    bases
        .iter()
        .rposition(|&base| base <= log_start)
        .unwrap_or(0)
}

/// A partition with no segment left (new, or everything refused) starts an empty one at offset 0.
fn create_first_segment(
    directory: &Path,
    options: SegmentOptions,
    readers: &mut Vec<Arc<SegmentReader>>,
) -> Result<ActiveSegment, StorageError> {
    let created =
        ActiveSegment::create(directory, 0, options).map_err(io_error("create segment"))?;
    sync_directory(directory).map_err(io_error("sync partition directory"))?;
    readers.push(Arc::clone(created.reader()));
    Ok(created)
}

/// The epoch installed is the highest of the checkpoint's and the kept log's: an epoch never
/// goes backwards, even when the checkpoint is lost or behind the log.
fn installed_epoch(checkpoint_epoch: u64, epoch_in_log: u64) -> u64 {
    checkpoint_epoch.max(epoch_in_log)
}

/// Logs the outcome: a warning when recovery changed or refused anything, else one info line.
fn log_outcome(name: &str, report: &RecoveryReport) {
    if report.bytes_cut > 0
        || report.segments_deleted > 0
        || report.indexes_rebuilt > 0
        || !report.damaged.is_empty()
    {
        warn!(partition = name, ?report, "recovered partition");
    } else {
        // One line per healthy partition is noise at scale (a 5,000-partition topic logged
        // 5,002 lines per start): the broker logs one "opened partitions" summary instead.
        debug!(
            partition = name,
            segments = report.segments,
            unscanned = report.segments_opened_lazily,
            not_opened = report.segments_not_opened,
            batches = report.batches,
            epoch = report.epoch,
            "opened partition"
        );
    }
}

/// Epoch of a segment's first batch (0 if it has none).
fn first_epoch(segment: &ActiveSegment) -> u64 {
    segment
        .reader()
        .map()
        .bytes(0, batch::HEADER_BYTES)
        .and_then(BatchHeader::parse)
        .map_or(0, |header| header.epoch)
}

/// Base offsets of the segment files in `directory`, ascending.
fn list_segments(directory: &Path) -> Result<Vec<u64>, StorageError> {
    let mut bases = Vec::new();
    for entry in fs::read_dir(directory).map_err(io_error("list partition directory"))? {
        let entry = entry.map_err(io_error("list partition directory"))?;
        if let Some(base) = entry
            .file_name()
            .to_str()
            .and_then(segment::parse_log_file_name)
        {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

#[cfg(all(test, not(fencelog_loom)))]
mod tests {
    use super::*;

    fn end(next_offset: u64, trusted: bool, invalid: Option<&str>) -> SegmentEnd {
        SegmentEnd {
            next_offset,
            trusted,
            segment: PathBuf::from("00000000000000000000.log"),
            position: 100,
            invalid: invalid.map(str::to_string),
            lazily: false,
        }
    }

    /// Only a segment whose successor is trusted too is left unopened: the newest trusted
    /// segment and the untrusted ones are opened at start.
    #[test]
    fn only_segments_before_the_newest_trusted_one_open_on_demand() {
        assert_eq!(opens_on_demand(Some(10), Some(20), 20), Some(10));
        assert_eq!(opens_on_demand(Some(10), Some(20), 25), Some(10));
        assert_eq!(opens_on_demand(Some(10), Some(20), 19), None);
        assert_eq!(opens_on_demand(Some(10), None, u64::MAX), None);
        assert_eq!(opens_on_demand(None, None, u64::MAX), None);
    }

    /// Trusted means the recovery point reaches the next segment; the last one never is.
    #[test]
    fn trust_follows_the_recovery_point() {
        assert!(is_trusted_below_recovery_point(Some(10), 10));
        assert!(is_trusted_below_recovery_point(Some(10), 11));
        assert!(!is_trusted_below_recovery_point(Some(11), 10));
        assert!(!is_trusted_below_recovery_point(None, u64::MAX));
    }

    /// Overlap refuses, a gap after an untrusted segment refuses, a gap after a trusted one is
    /// a damaged range, and a segment that continues its predecessor is none of these.
    #[test]
    fn placement_against_the_previous_segment() {
        let untrusted = end(10, false, None);
        let trusted = end(10, true, Some("crc mismatch"));
        assert!(segment_overlaps_previous(Some(&untrusted), 9).is_some());
        assert!(segment_overlaps_previous(Some(&untrusted), 10).is_none());
        assert!(segment_overlaps_previous(None, 0).is_none());
        assert!(gap_after_untrusted_segment(Some(&untrusted), 11).is_some());
        assert!(gap_after_untrusted_segment(Some(&untrusted), 10).is_none());
        assert!(gap_after_untrusted_segment(Some(&trusted), 11).is_none());
        assert!(damaged_sealed_range(Some(end(10, true, None)), 10).is_none());
        let damage = damaged_sealed_range(Some(trusted), 15).expect("a damaged range");
        assert_eq!((damage.start_offset, damage.end_offset), (10, 15));
        assert_eq!(
            (damage.position, damage.reason.as_str()),
            (100, "crc mismatch")
        );
        let short = damaged_sealed_range(Some(end(10, true, None)), 15).expect("a damaged range");
        assert_eq!(
            short.reason,
            "the segment ends at offset 10 but the next one starts at 15"
        );
    }

    /// Only a damaged trusted segment followed by refused segments is cut again as the last.
    #[test]
    fn a_damaged_sealed_segment_is_recut_only_when_it_became_last() {
        let damaged = end(10, true, Some("crc mismatch"));
        assert!(damaged_sealed_segment_became_last(true, Some(&damaged)));
        assert!(!damaged_sealed_segment_became_last(false, Some(&damaged)));
        assert!(!damaged_sealed_segment_became_last(
            true,
            Some(&end(10, true, None))
        ));
        assert!(!damaged_sealed_segment_became_last(
            true,
            Some(&end(10, false, Some("torn")))
        ));
        assert!(!damaged_sealed_segment_became_last(true, None));
        let unscanned = SegmentEnd {
            lazily: true,
            ..end(10, true, None)
        };
        assert!(damaged_sealed_segment_became_last(true, Some(&unscanned)));
        assert!(!damaged_sealed_segment_became_last(false, Some(&unscanned)));
    }

    /// The installed epoch never goes below the checkpoint's or the log's.
    #[test]
    fn installed_epoch_is_the_higher_of_checkpoint_and_log() {
        assert_eq!(installed_epoch(3, 2), 3);
        assert_eq!(installed_epoch(2, 3), 3);
        assert_eq!(installed_epoch(0, 0), 0);
    }
}
