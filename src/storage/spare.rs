//! Spare segment files: segments that retention deleted, kept for a few seconds so that the
//! partition's next roll reuses the files instead of creating them.
//!
//! # Why
//!
//! A new segment costs the kernel work twice over. Creating its two files (log and index)
//! allocates two inodes and deleting them frees them again: on ext4 without a journal (this
//! project's bench machine) every inode allocation also scans past each inode freed in the last
//! minute (`recently_deleted`), so with hundreds of small segments rolled and deleted per second
//! it was a sixth of the server's CPU. And every byte written to a new file costs a fresh page
//! cache page, ext4 reserves and later allocates its blocks (delayed allocation), and when
//! retention deletes the file every page is invalidated and freed again. Overwriting a file
//! whose pages are still cached and whose blocks are allocated skips all of it. Databases do the
//! same with their write-ahead logs (RocksDB's `recycle_log_file_num`).
//!
//! Two ways, chosen by [`SegmentFileReuse`]:
//!
//! * [`SegmentFileReuse::Whole`] keeps the deleted file as it is, pages, blocks and old bytes.
//!   Measured on the bench (1 KiB records, 1000 per batch, 1 GiB retention, flush `never`, one
//!   partition, 64 MiB segments): the server's CPU per GB produced fell from 0.62–0.68 to
//!   0.48–0.52 core-seconds, and produce with one request in flight rose from 1.17–1.22 to
//!   1.44–1.51 GB/s (`docs/benchmarks.md`, "The fast path", item 6). But the kept pages are
//!   memory held beyond retention until the partition rolls again: over 1,000 partitions of
//!   2 MiB segments that is a segment per partition, 2 GB more page cache, and produce fell
//!   by half (that memory was fresh to this VM, see `docs/benchmarks.md`).
//! * [`SegmentFileReuse::Emptied`] truncates the file to nothing (its pages and blocks freed at
//!   once, as a deletion would) and keeps only the inodes: the saving of file creation and
//!   deletion without holding memory, for small segments and many partitions.
//!
//! In both, the index file goes with the log file, emptied: an empty index is a valid index
//! of an empty segment, so the roll that takes it has nothing to write to it.
//!
//! # What keeps it safe
//!
//! A reused file still holds the old segment's bytes past what has been written to it (a whole
//! file always; an emptied one too if a crash loses its truncation). Nothing can read them, and
//! nothing can adopt them as data:
//!
//! * Only retention's victims become spares, and only in their own partition: segments wholly
//!   below the log start, whose offsets are lower than every offset the log will ever hold
//!   again. Recovery accepts a batch only at exactly the next expected offset, so an old batch
//!   can never continue a log (a truncation's segments, whose offsets may be written again, are
//!   always deleted).
//! * A victim becomes a spare only when nothing else holds it: the partition owns the last
//!   reference to its reader, and no fetch holds a slice of its map (so no response in flight
//!   can see its bytes change, and an emptied file is never truncated under a live map).
//! * Readers read only below the written mark (see `mmap`), and the writer truncates the file to
//!   what it wrote when it is done with the segment (at the roll, and on a clean close): the
//!   stale tail is gone before the segment is sealed, and the seal syncs the file whole, size
//!   included, before the recovery point passes it. An emptied file under `never` is not cut:
//!   only the reservation's zeros follow its data, and an unsynced cut would not guard against
//!   a crash that lost the emptying anyway (the seal's whole-file sync does). With a flush
//!   policy other than `never` the truncation is synced at the roll itself, so a crash can
//!   never leave a stale tail in a segment followed by acknowledged data. A crash while the stale tail exists leaves it in the
//!   last segment (or, under `never`, in an unsealed one), where recovery cuts it as a torn tail.
//! * Spare files are named `N.spare` (log) and `N.spare-index` (index), which recovery does not
//!   read; opening a partition deletes any a crash left behind.
//!
//! # Bounds
//!
//! At most [`MAX_SPARE_SEGMENTS`] per partition, each kept at most [`SPARE_SEGMENT_MAX_AGE`]
//! (a spare unused that long is deleted: a slow partition gains nothing from it, and a whole
//! file's pages may have left the page cache, when a partial-page write would first read the
//! old block back). Disk therefore holds at most that many deleted segments more than retention
//! allows, for at most that long (none with emptied files).

use std::collections::VecDeque;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::durable_file::remove_if_present;

/// Most spare files one partition keeps: enough for the rolls between two retention passes of a
/// partition written at loopback speed (64 MiB segments at ~2 GB/s, a pass every 250 ms).
pub const MAX_SPARE_SEGMENTS: usize = 8;

/// Longest a spare file is kept unused before it is deleted.
pub const SPARE_SEGMENT_MAX_AGE: Duration = Duration::from_secs(10);

/// Most bytes of spare files kept whole at once, by every partition of the process together:
/// the page cache they hold beyond retention. A spare that would go over it is kept emptied
/// instead. Process-wide because page cache is the machine's, not a partition's.
///
/// Measured on the bench (4 producers, 1 KiB records, 1000 per batch, flush `never`): over 100
/// partitions of 2.5 MiB segments (spares ~250–500 MiB) whole reuse rose produce from
/// 1.64–1.75 to 2.14–2.20 GB/s and lowered the server's CPU per GB from 0.69–0.73 to 0.50–0.54
/// core-seconds against emptied files; over 1,000 partitions of 2 MiB segments whole reuse for
/// all (2 GB of spares, most of them dirty pages of deleted data) *lowered* produce from 0.8–1.1
/// to 0.4–0.7 GB/s. One partition of 64 MiB segments keeps at most [`MAX_SPARE_SEGMENTS`] of
/// them: 512 MiB.
pub const WHOLE_SPARES_BUDGET_BYTES: u64 = 512 * 1024 * 1024;

/// Bytes of whole spare files kept now, process-wide (see [`WHOLE_SPARES_BUDGET_BYTES`]).
static WHOLE_SPARES_BYTES: AtomicU64 = AtomicU64::new(0);

/// Takes `len` bytes of [`WHOLE_SPARES_BUDGET_BYTES`]; false (nothing taken) when they do not fit.
fn claim_whole_budget(len: u64) -> bool {
    WHOLE_SPARES_BYTES
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            held.checked_add(len)
                .filter(|total| *total <= WHOLE_SPARES_BUDGET_BYTES)
        })
        .is_ok()
}

/// Bytes of whole spare files kept now by the whole process.
pub fn whole_spares_bytes() -> u64 {
    WHOLE_SPARES_BYTES.load(Ordering::Acquire)
}

/// The file name suffix of spare log files.
const SPARE_SUFFIX: &str = ".spare";

/// The file name suffix of spare index files.
const SPARE_INDEX_SUFFIX: &str = ".spare-index";

/// What retention does with the files of the segments it deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SegmentFileReuse {
    /// Deletes them (the storage default).
    #[default]
    Delete,
    /// Truncates them to nothing and keeps the files for the partition's next rolls: saves
    /// creating and deleting files, holds no memory.
    Emptied,
    /// Keeps them whole for the partition's next rolls to overwrite: also saves allocating and
    /// freeing their page cache and disk blocks, but holds that memory until a roll takes
    /// them. Within [`WHOLE_SPARES_BUDGET_BYTES`]; beyond it, emptied.
    Whole,
}

impl SegmentFileReuse {
    /// The broker's choice for a topic of `partitions` partitions of `segment_bytes` segments:
    /// whole when a segment per partition fits [`WHOLE_SPARES_BUDGET_BYTES`], else emptied.
    /// All or none: measured over 1,000 partitions of 2 MiB segments, keeping the first 256
    /// partitions' spares whole (as the budget alone would) lowered produce from 1.4–1.5 to
    /// 1.0–1.25 GB/s against emptying them all.
    pub fn for_topic(partitions: u32, segment_bytes: u64) -> Self {
        if u64::from(partitions).saturating_mul(segment_bytes) <= WHOLE_SPARES_BUDGET_BYTES {
            Self::Whole
        } else {
            Self::Emptied
        }
    }
}

/// A deleted segment's file, renamed, waiting to be reused.
#[derive(Debug)]
pub struct Spare {
    path: PathBuf,
    /// The segment's index file, emptied, when it had one.
    index: Option<PathBuf>,
    kept_at: Instant,
    /// Its share of [`WHOLE_SPARES_BUDGET_BYTES`], given back when it is dropped (taken by a
    /// roll, or deleted): the whole file's length, 0 when it was emptied.
    budget: ClaimedBudget,
}

impl Spare {
    /// Where the file is now.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where its emptied index file is now, if it had one.
    pub fn index_path(&self) -> Option<&Path> {
        self.index.as_deref()
    }

    /// The file's length (all of it allocated: segments reserve before they write; 0 when it
    /// was emptied).
    pub fn file_len(&self) -> u64 {
        self.budget.0
    }
}

/// One partition's spare files, newest last.
#[derive(Debug)]
pub struct SpareSegments {
    directory: PathBuf,
    files: Mutex<VecDeque<Spare>>,
    next_id: AtomicU64,
}

impl SpareSegments {
    /// The spares of the partition in `directory`, after deleting any file a previous run left
    /// (a crash, or a close that did not get to it). Returns how many it deleted.
    pub fn open(directory: &Path) -> io::Result<(Self, usize)> {
        let mut removed = 0;
        for entry in fs::read_dir(directory)? {
            let entry = entry?;
            if is_spare_name(&entry.file_name().to_string_lossy()) {
                remove_if_present(&entry.path())?;
                removed += 1;
            }
        }
        Ok((
            Self {
                directory: directory.to_path_buf(),
                files: Mutex::new(VecDeque::new()),
                next_id: AtomicU64::new(0),
            },
            removed,
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Spare>> {
        self.files.lock().expect("spare segments lock poisoned")
    }

    /// Keeps the files of a segment retention deleted (unreferenced: see
    /// `SegmentReader::into_reusable_file`), its log at `log_path` and its index at
    /// `index_path`, as a spare, by renaming them (`reuse` says whether the log is emptied
    /// too; the index always is). `Ok(false)` when `reuse` is [`SegmentFileReuse::Delete`] or
    /// the partition already keeps [`MAX_SPARE_SEGMENTS`]: the caller deletes whatever files
    /// are still under the segment's names (on an error too).
    ///
    /// The renames and truncations run outside the spares' lock, which a roll takes under the
    /// partition's append lock: emptying a file frees its pages, too slow to make a roll wait.
    pub fn keep(
        &self,
        log_path: &Path,
        index_path: &Path,
        reuse: SegmentFileReuse,
    ) -> io::Result<bool> {
        if reuse == SegmentFileReuse::Delete || self.count() >= MAX_SPARE_SEGMENTS {
            return Ok(false);
        }
        let whole_len = match reuse {
            SegmentFileReuse::Whole => fs::metadata(log_path)?.len(),
            _ => 0,
        };
        // Whole only within the process's budget; the claim is given back if keeping fails.
        let budget = ClaimedBudget::claim(whole_len);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let path = self.directory.join(format!("{id}{SPARE_SUFFIX}"));
        rename_as_spare(log_path, &path, budget.0 == 0)?;
        let index = self.directory.join(format!("{id}{SPARE_INDEX_SUFFIX}"));
        let index = match rename_as_spare(index_path, &index, true) {
            Ok(()) => Some(index),
            Err(error) => {
                if error.kind() != io::ErrorKind::NotFound {
                    tracing::debug!(index = %index_path.display(), %error, "could not keep a deleted segment's index as a spare");
                }
                None
            }
        };
        let spare = Spare {
            path,
            index,
            kept_at: Instant::now(),
            budget,
        };
        let mut files = self.lock();
        // Another retention pass of this partition may have filled the last place meanwhile.
        if files.len() >= MAX_SPARE_SEGMENTS {
            drop(files);
            discard(&spare);
            return Ok(false);
        }
        files.push_back(spare);
        Ok(true)
    }

    /// The most recently kept spare no longer than `max_len` (its pages the likeliest to be
    /// cached), if any; the caller renames it to the new segment's name. Spares too long for the
    /// current segment size (it was lowered) are deleted.
    pub fn take(&self, max_len: u64) -> Option<Spare> {
        let mut files = self.lock();
        while let Some(spare) = files.pop_back() {
            if spare.file_len() <= max_len {
                return Some(spare);
            }
            discard(&spare);
        }
        None
    }

    /// Deletes spares kept longer than [`SPARE_SEGMENT_MAX_AGE`] as of `now` (outside the
    /// lock, as `keep` does its file work).
    pub fn expire(&self, now: Instant) {
        let expired: Vec<Spare> = {
            let mut files = self.lock();
            let old = files
                .iter()
                .take_while(|spare| {
                    now.saturating_duration_since(spare.kept_at) >= SPARE_SEGMENT_MAX_AGE
                })
                .count();
            files.drain(..old).collect()
        };
        expired.iter().for_each(discard);
    }

    /// Deletes every spare (the partition is closing).
    pub fn clear(&self) {
        let all: Vec<Spare> = self.lock().drain(..).collect();
        all.iter().for_each(discard);
    }

    /// Spares kept now.
    pub fn count(&self) -> usize {
        self.lock().len()
    }
}

/// Bytes claimed of [`WHOLE_SPARES_BUDGET_BYTES`], given back when dropped.
#[derive(Debug)]
struct ClaimedBudget(u64);

impl ClaimedBudget {
    /// Claims `len` bytes, or nothing (a claim of 0) when they do not fit.
    fn claim(len: u64) -> Self {
        Self(if len > 0 && claim_whole_budget(len) {
            len
        } else {
            0
        })
    }
}

impl Drop for ClaimedBudget {
    fn drop(&mut self) {
        if self.0 > 0 {
            WHOLE_SPARES_BYTES.fetch_sub(self.0, Ordering::AcqRel);
        }
    }
}

/// Deletes a spare's files; a failure is logged (the next open deletes leftovers).
pub fn discard(spare: &Spare) {
    for path in std::iter::once(&spare.path).chain(&spare.index) {
        if let Err(error) = remove_if_present(path) {
            tracing::warn!(spare = %path.display(), %error, "could not delete a spare segment file");
        }
    }
}

/// Renames the file at `from` to the spare name `to`, truncated to nothing when `empty`.
/// Renamed first, emptied after: a crash between leaves a spare (deleted on open), never an
/// emptied segment file under its own name. On an error nothing is left at `to`.
fn rename_as_spare(from: &Path, to: &Path, empty: bool) -> io::Result<()> {
    fs::rename(from, to)?;
    let emptied = || {
        if empty {
            fs::OpenOptions::new().write(true).open(to)?.set_len(0)?;
        }
        Ok(())
    };
    emptied().inspect_err(|_| {
        let _ = remove_if_present(to);
    })
}

fn is_spare_name(name: &str) -> bool {
    name.strip_suffix(SPARE_SUFFIX)
        .or_else(|| name.strip_suffix(SPARE_INDEX_SUFFIX))
        .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(all(test, not(fencelog_loom)))]
mod tests {
    use super::*;

    fn segment_file(directory: &Path, name: &str, len: usize) -> PathBuf {
        let path = directory.join(name);
        fs::write(&path, vec![7u8; len]).unwrap();
        path
    }

    /// Keeps `log` whole, with no index file.
    fn keep_whole(spares: &SpareSegments, directory: &Path, log: &Path) -> bool {
        let no_index = directory.join("absent.index");
        spares
            .keep(log, &no_index, SegmentFileReuse::Whole)
            .unwrap()
    }

    #[test]
    fn a_whole_spare_beyond_the_process_budget_is_kept_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let (spares, _) = SpareSegments::open(dir.path()).unwrap();
        let log = dir.path().join("00000000000000000000.log");
        // Sparse: only its length counts against the budget.
        fs::File::create(&log)
            .unwrap()
            .set_len(WHOLE_SPARES_BUDGET_BYTES + 1)
            .unwrap();
        assert!(keep_whole(&spares, dir.path(), &log));
        let spare = spares.take(u64::MAX).unwrap();
        assert_eq!(spare.file_len(), 0, "emptied, not whole");
        assert_eq!(fs::metadata(spare.path()).unwrap().len(), 0);
    }

    #[test]
    fn a_whole_spare_holds_its_bytes_of_the_budget_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let (spares, _) = SpareSegments::open(dir.path()).unwrap();
        let log = segment_file(dir.path(), "00000000000000000000.log", 4096);
        assert!(keep_whole(&spares, dir.path(), &log));
        let spare = spares.take(u64::MAX).unwrap();
        assert_eq!(spare.file_len(), 4096);
        assert_eq!(spare.budget.0, 4096);
        // Other tests of this binary claim and give back concurrently: only this spare's own
        // share is checked.
        assert!(whole_spares_bytes() >= 4096);
        drop(spare);
    }

    #[test]
    fn an_emptied_spare_keeps_its_files_with_nothing_in_them() {
        let dir = tempfile::tempdir().unwrap();
        let (spares, _) = SpareSegments::open(dir.path()).unwrap();
        let log = segment_file(dir.path(), "00000000000000000000.log", 100);
        let index = segment_file(dir.path(), "00000000000000000000.index", 16);
        assert!(spares
            .keep(&log, &index, SegmentFileReuse::Emptied)
            .unwrap());
        assert!(!log.exists() && !index.exists());
        let taken = spares.take(1 << 20).unwrap();
        assert_eq!(taken.file_len(), 0);
        assert_eq!(fs::metadata(taken.path()).unwrap().len(), 0);
        let kept_index = taken.index_path().expect("the index went with the log");
        assert_eq!(fs::metadata(kept_index).unwrap().len(), 0);
        discard(&taken);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn delete_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (spares, _) = SpareSegments::open(dir.path()).unwrap();
        let log = segment_file(dir.path(), "00000000000000000000.log", 100);
        let no_index = dir.path().join("absent.index");
        assert!(!spares
            .keep(&log, &no_index, SegmentFileReuse::Delete)
            .unwrap());
        assert!(log.exists(), "the caller deletes it");
        assert_eq!(spares.count(), 0);
    }

    #[test]
    fn kept_files_are_renamed_and_taken_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let (spares, _) = SpareSegments::open(dir.path()).unwrap();
        let first = segment_file(dir.path(), "00000000000000000000.log", 10);
        let second = segment_file(dir.path(), "00000000000000000100.log", 20);
        assert!(keep_whole(&spares, dir.path(), &first));
        assert!(keep_whole(&spares, dir.path(), &second));
        assert!(!first.exists() && !second.exists());
        assert_eq!(spares.count(), 2);
        let taken = spares.take(1 << 20).unwrap();
        assert_eq!(taken.file_len(), 20);
        assert!(taken.path().exists());
        assert_eq!(spares.count(), 1);
    }

    #[test]
    fn at_most_the_limit_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (spares, _) = SpareSegments::open(dir.path()).unwrap();
        for index in 0..MAX_SPARE_SEGMENTS + 2 {
            let path = segment_file(dir.path(), &format!("{index:020}.log"), 1);
            let kept = keep_whole(&spares, dir.path(), &path);
            assert_eq!(kept, index < MAX_SPARE_SEGMENTS, "file {index}");
        }
        assert_eq!(spares.count(), MAX_SPARE_SEGMENTS);
    }

    #[test]
    fn spares_longer_than_the_segment_size_are_deleted_not_taken() {
        let dir = tempfile::tempdir().unwrap();
        let (spares, _) = SpareSegments::open(dir.path()).unwrap();
        let path = segment_file(dir.path(), "00000000000000000000.log", 100);
        keep_whole(&spares, dir.path(), &path);
        assert!(spares.take(99).is_none());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn old_spares_expire_and_leftovers_are_deleted_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let (spares, _) = SpareSegments::open(dir.path()).unwrap();
        let path = segment_file(dir.path(), "00000000000000000000.log", 1);
        keep_whole(&spares, dir.path(), &path);
        spares.expire(Instant::now());
        assert_eq!(spares.count(), 1, "not old yet");
        spares.expire(Instant::now() + SPARE_SEGMENT_MAX_AGE);
        assert_eq!(spares.count(), 0);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);

        segment_file(dir.path(), "3.spare", 1);
        segment_file(dir.path(), "3.spare-index", 1);
        segment_file(dir.path(), "00000000000000000000.log", 1);
        let (_, removed) = SpareSegments::open(dir.path()).unwrap();
        assert_eq!(removed, 2);
        assert!(dir.path().join("00000000000000000000.log").exists());
    }
}
