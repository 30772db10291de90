//! Sealing full segments in the background, and the recovery point that records it.
//!
//! When the active segment fills up, the partition rolls to a new one at once and hands the full
//! segment to its [`SealWorker`]'s thread, which syncs it whole and then advances the partition's
//! *recovery point*: the offset below which every segment is known to be on disk. Recovery trusts
//! segments below the recovery point (a crash cannot have torn them, so damage there is
//! corruption: refused, never cut) and treats everything after it as possibly torn (cut at the
//! first invalid batch). Doing the sync here rather than in `roll` keeps a segment-sized sync out
//! of the append lock: under flush `never` that sync would otherwise stall every producer for as
//! long as the disk takes to write a whole segment.
//!
//! A partition may defer its seals (`PartitionConfig::seal_delay`; the broker defers them by
//! 30 s for flush `never` topics): the recovery point then lags, which only makes recovery scan
//! a few more segments, while segments that retention deletes in the meantime are never written
//! to disk at all. Jobs hold their segment weakly, so a deleted segment's memory is freed at
//! once rather than when its job comes due.
//!
//! The worker is a value, not a process-wide thread: a broker starts one and gives it to every
//! partition it opens, so several brokers in one process (a cluster simulation) seal
//! independently, and a broker's seal thread ends once the broker and its partitions are gone.

use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Instant;

use super::durable_file::{write_durably, DeferredDirectorySync};
use super::segment::SegmentReader;

/// Name of the recovery point file in a partition directory.
pub const RECOVERY_POINT_FILE: &str = "recovery-point";
/// Seal jobs that may wait for the background thread; a roll beyond it waits (backpressure).
pub const SEAL_QUEUE_MAX: usize = 1024;
/// Deferred seal jobs the thread holds before it seals the oldest early (sealing early is always
/// safe; this bounds the memory of a flood of rolls).
pub const SEAL_DEFERRED_MAX: usize = 4096;

/// The durable recovery point of one partition.
#[derive(Debug)]
pub struct RecoveryPoint {
    directory: PathBuf,
    offset: Mutex<u64>,
    /// Raised (under the `offset` lock) by every truncation that lowers the recovery point, so
    /// that seals and syncs planned before it cannot move the point over the cut log again (nor
    /// write a producer-state snapshot of the log that was cut).
    generation: std::sync::atomic::AtomicU64,
    /// Set under the `offset` lock when the partition's topic is deleted: from then on nothing
    /// is written into its directory's path any more (a topic re-created under the same name
    /// will own that path).
    retired: std::sync::atomic::AtomicBool,
    /// Set when a sync or write of the partition's log failed ([`RecoveryPoint::freeze`]):
    /// nothing is recorded durable any more in this process.
    frozen: std::sync::atomic::AtomicBool,
}

impl RecoveryPoint {
    /// Loads the partition's recovery point (0 when there is none: nothing is trusted).
    pub fn load(directory: &Path) -> io::Result<Self> {
        let offset = match std::fs::read_to_string(directory.join(RECOVERY_POINT_FILE)) {
            Ok(text) => text.trim().parse().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{}: not an offset",
                        directory.join(RECOVERY_POINT_FILE).display()
                    ),
                )
            })?,
            Err(error) if error.kind() == io::ErrorKind::NotFound => 0,
            Err(error) => return Err(error),
        };
        Ok(Self {
            directory: directory.to_path_buf(),
            offset: Mutex::new(offset),
            generation: std::sync::atomic::AtomicU64::new(0),
            retired: std::sync::atomic::AtomicBool::new(false),
            frozen: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Offsets below this are in segments that were synced whole.
    pub fn offset(&self) -> u64 {
        *self.offset.lock().expect("recovery point lock poisoned")
    }

    /// Records durably that every segment below `offset` is synced. Never moves backwards.
    pub fn advance(&self, offset: u64) -> io::Result<()> {
        self.advance_in(self.generation(), offset)
    }

    /// The truncation generation: a seal or sync planned now passes it to
    /// [`advance_in`](Self::advance_in).
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// [`advance`](Self::advance) for a seal or sync planned in `generation`: nothing happens if
    /// a truncation came since (the segments it synced may no longer be the log).
    pub fn advance_in(&self, generation: u64, offset: u64) -> io::Result<()> {
        let mut current = self.offset.lock().expect("recovery point lock poisoned");
        if offset <= *current
            || self.is_retired()
            || self.is_frozen()
            || generation != self.generation()
        {
            return Ok(());
        }
        write_durably(
            &self.directory,
            RECOVERY_POINT_FILE,
            format!("{offset}\n").as_bytes(),
        )?;
        *current = offset;
        Ok(())
    }
}

impl RecoveryPoint {
    /// Stops every later write into the partition's directory by the seal thread (the
    /// recovery point, and through [`RecoveryPoint::unless_retired`] the producer snapshot):
    /// its topic was deleted. Once this returns, no such write is in progress either.
    pub fn retire(&self) {
        let _current = self.offset.lock().expect("recovery point lock poisoned");
        self.retired
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// A sync or write of the partition's log failed: from now on the point never moves and no
    /// producer-state snapshot is written, in this process. A later sync that succeeds proves
    /// nothing about the pages an earlier failed one lost, so a seal still queued must not
    /// record its segment (or any before it) as durable. Once this returns, no such write is in
    /// progress either. The next open recovers from what is on disk.
    pub fn freeze(&self) {
        let _current = self.offset.lock().expect("recovery point lock poisoned");
        self.frozen
            .store(true, std::sync::atomic::Ordering::Release);
    }

    fn is_frozen(&self) -> bool {
        self.frozen.load(std::sync::atomic::Ordering::Acquire)
    }

    /// A truncation: the log is cut inside the segment at `segment_base`, which becomes the
    /// active segment again, so the point moves down to it (durably) if it was above; and
    /// every seal or sync planned before is disowned (see [`advance_in`](Self::advance_in)),
    /// whether or not the point moved.
    pub fn lower_to(&self, segment_base: u64) -> io::Result<()> {
        let mut current = self.offset.lock().expect("recovery point lock poisoned");
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        if *current <= segment_base || self.is_retired() {
            return Ok(());
        }
        write_durably(
            &self.directory,
            RECOVERY_POINT_FILE,
            format!("{segment_base}\n").as_bytes(),
        )?;
        *current = segment_base;
        Ok(())
    }

    /// [`unless_retired`](Self::unless_retired), and only if no truncation came since
    /// `generation` (a producer-state snapshot of a log that was cut must not be written).
    pub fn unless_retired_in<T>(&self, generation: u64, write: impl FnOnce() -> T) -> Option<T> {
        let _current = self.offset.lock().expect("recovery point lock poisoned");
        (!self.is_retired() && !self.is_frozen() && generation == self.generation()).then(write)
    }

    /// Undoes [`RecoveryPoint::retire`] (a delete that could not be carried out).
    pub fn reinstate(&self) {
        let _current = self.offset.lock().expect("recovery point lock poisoned");
        self.retired
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// Whether [`RecoveryPoint::retire`] stopped the partition (its topic was deleted).
    pub fn is_retired(&self) -> bool {
        self.retired.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Runs `write` (a change in the partition's directory) unless the partition was retired,
    /// holding the lock [`RecoveryPoint::retire`] takes, so a retire waits for it; `None` when
    /// it did not run.
    pub fn unless_retired<T>(&self, write: impl FnOnce() -> T) -> Option<T> {
        let _current = self.offset.lock().expect("recovery point lock poisoned");
        (!self.is_retired()).then(write)
    }
}

/// A full segment to sync, and what to do after.
pub(crate) struct SealJob {
    /// The full segment. Weak, so that a deferred job does not keep a segment that retention
    /// deleted mapped (and its page cache pages allocated) until the job's time comes.
    pub(crate) segment: Weak<SegmentReader>,
    /// The partition's recovery point, advanced to `next_base` once the segment is synced.
    pub(crate) recovery_point: Arc<RecoveryPoint>,
    /// Base offset of the segment after it.
    pub(crate) next_base: u64,
    /// What the roll left unsynced (flush `never`), for the seal to make durable first.
    pub(crate) deferred: Option<DeferredRoll>,
    /// The recovery point's truncation generation when the segment was rolled.
    pub(crate) generation: u64,
    /// Not sealed before this (the partition's `seal_delay` after the roll, or for records
    /// copied from a leader after their newest timestamp; never before the previous roll's).
    pub(crate) not_before: Instant,
    /// Called with the file and the error if a sync fails (the segment's, or under flush
    /// `never` the partition directory's): the partition stops accepting writes.
    pub(crate) on_failure: SealFailure,
    /// Called once the segment is durable and the recovery point moved (the producer-state
    /// snapshot as of `next_base` is written then: off the append lock, and never ahead of the
    /// durable log).
    pub(crate) after_seal: Option<Box<dyn FnOnce() + Send>>,
}

/// What a seal calls with the file and the error when a sync fails.
pub(crate) type SealFailure = Box<dyn FnOnce(&Path, io::Error) + Send>;

/// What a roll under flush `never` did not sync: its directory change and the sealed segment's
/// index. The seal syncs both before the recovery point moves, so that no segment below it can
/// be missing after a crash (a roll's file whose entry is lost leaves a gap after the recovery
/// point, which recovery cuts like any torn tail).
pub(crate) struct DeferredRoll {
    /// The partition directory's pending changes.
    pub(crate) directory: Arc<DeferredDirectorySync>,
    /// The roll's change (see [`DeferredDirectorySync::note_change`]).
    pub(crate) change: u64,
}

/// A handle to a seal thread: cheap to clone, shared by the partitions that submit to it.
///
/// The thread runs until the last handle is dropped; it then seals the jobs still queued at once
/// (a job whose segment is gone costs nothing) and ends, and that last drop waits for it. A
/// partition holds a handle for as long as it is open, so the thread outlives every partition
/// that can submit to it.
#[derive(Clone)]
pub struct SealWorker {
    inner: Arc<WorkerThread>,
}

/// The sender of the worker's queue and its thread, dropped with the last handle.
struct WorkerThread {
    sender: Option<SyncSender<SealJob>>,
    thread: Option<JoinHandle<()>>,
}

impl SealWorker {
    /// Starts a seal thread. Fails only if the OS refuses a new thread.
    pub fn start() -> io::Result<Self> {
        let (sender, receiver) = mpsc::sync_channel::<SealJob>(SEAL_QUEUE_MAX);
        let thread = std::thread::Builder::new()
            .name("fencelog-seal".into())
            .spawn(move || serve(&receiver))?;
        Ok(Self {
            inner: Arc::new(WorkerThread {
                sender: Some(sender),
                thread: Some(thread),
            }),
        })
    }

    /// Queues a full segment for sealing. Blocks only if `SEAL_QUEUE_MAX` jobs are waiting. If
    /// the thread is gone (it panicked), seals the segment on the caller's thread instead.
    pub(crate) fn submit(&self, job: SealJob) {
        let sender = self
            .inner
            .sender
            .as_ref()
            .expect("the queue is open while a handle lives");
        if let Err(mpsc::SendError(job)) = sender.send(job) {
            run(job, false);
        }
    }
}

impl std::fmt::Debug for SealWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let thread = self
            .inner
            .thread
            .as_ref()
            .map(|thread| thread.thread().id());
        f.debug_struct("SealWorker")
            .field("thread", &thread)
            .finish()
    }
}

impl Drop for WorkerThread {
    /// Closes the queue, which makes the thread seal what is left and return, then waits for it
    /// (unless this runs on the seal thread itself, which cannot wait for its own end).
    fn drop(&mut self) {
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            if thread.thread().id() != std::thread::current().id() && thread.join().is_err() {
                tracing::error!("the seal thread panicked");
            }
        }
    }
}

/// A job waiting for its time, ordered by (`not_before`, arrival).
struct Deferred {
    not_before: Instant,
    arrival: u64,
    job: SealJob,
}

impl PartialEq for Deferred {
    fn eq(&self, other: &Self) -> bool {
        (self.not_before, self.arrival) == (other.not_before, other.arrival)
    }
}

impl Eq for Deferred {}

impl PartialOrd for Deferred {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Deferred {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest job first.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.not_before, other.arrival).cmp(&(self.not_before, self.arrival))
    }
}

/// The seal thread: runs each job once its time has come, one at a time.
///
/// A partition's jobs arrive in roll order and their `not_before`s never decrease (the writer
/// never gives a roll an earlier due time than the one before: `partition::seal_due`): ordered
/// by (`not_before`, arrival), they run in roll order, and a partition's
/// recovery point only ever advances over segments that are all synced. Partitions with no delay
/// are not held up behind another partition's deferred jobs.
fn serve(receiver: &Receiver<SealJob>) {
    let mut waiting = BinaryHeap::new();
    let mut queued = QueuedPerPartition::default();
    let mut arrivals: u64 = 0;
    loop {
        while let Some(next) = waiting.peek() {
            let Deferred { not_before, .. } = next;
            if *not_before > Instant::now() && waiting.len() <= SEAL_DEFERRED_MAX {
                break;
            }
            let Some(Deferred { job, .. }) = waiting.pop() else {
                break;
            };
            let superseded = queued.remove(&job);
            run(job, superseded);
        }
        let received = match waiting.peek() {
            Some(Deferred { not_before, .. }) => {
                receiver.recv_timeout(not_before.saturating_duration_since(Instant::now()))
            }
            None => receiver.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match received {
            Ok(job) => {
                arrivals += 1;
                queued.add(&job);
                waiting.push(Deferred {
                    not_before: job.not_before,
                    arrival: arrivals,
                    job,
                });
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                // No partition can submit any more: seal what is left now.
                while let Some(Deferred { job, .. }) = waiting.pop() {
                    let superseded = queued.remove(&job);
                    run(job, superseded);
                }
                return;
            }
        }
    }
}

/// How many jobs of each partition (keyed by its recovery point) are waiting.
#[derive(Default)]
struct QueuedPerPartition(HashMap<*const RecoveryPoint, usize>);

impl QueuedPerPartition {
    fn add(&mut self, job: &SealJob) {
        *self.0.entry(Arc::as_ptr(&job.recovery_point)).or_default() += 1;
    }

    /// Takes `job` off the count; returns whether a later job of its partition still waits.
    /// (A waiting job holds its recovery point, so no other partition's can reuse the address.)
    fn remove(&mut self, job: &SealJob) -> bool {
        let key = Arc::as_ptr(&job.recovery_point);
        match self.0.get_mut(&key) {
            Some(count) if *count > 1 => {
                *count -= 1;
                true
            }
            _ => {
                self.0.remove(&key);
                false
            }
        }
    }
}

/// Seals `job`'s segment and moves the recovery point past it. `superseded`: a later job of the
/// same partition waits behind this one.
fn run(job: SealJob, superseded: bool) {
    // Nothing to sync when retention deleted the segment (no reader holds it any more, or it is
    // marked) or its partition was closed and its directory removed: recovery will never read it.
    let segment = job
        .segment
        .upgrade()
        .filter(|segment| !segment.is_deleted() && segment.path().exists());
    if segment.is_none() && superseded {
        // Nothing synced, and the later job moves the point further (and writes a later
        // snapshot) moments from now. Recording each deleted segment's point cost two file
        // creations and four fsyncs per roll on this thread when retention kept up with rolls
        // (4 producers over 100 partitions of 2.5 MiB segments: a tenth of the machine).
        return;
    }
    let synced = match &segment {
        Some(segment) => segment.sync_sealed(),
        None => Ok(()),
    };
    match synced {
        Ok(()) => {
            if let Some(deferred) = &job.deferred {
                if let Some(segment) = &segment {
                    // A cache that recovery checks and rebuilds: a failed sync is only logged.
                    if let Err(error) = segment.sync_index_file() {
                        tracing::warn!(segment = %segment.path().display(), %error, "could not sync a sealed segment's index");
                    }
                }
                if let Err(error) = deferred.directory.sync_through(deferred.change) {
                    // The rolls' directory changes may be lost with it, and a later fsync
                    // would not say so: the partition stops (its writes, and the recovery
                    // point stays where it is).
                    (job.on_failure)(deferred.directory.directory(), error);
                    return;
                }
            }
            // The segment is durable. Recording that is an optimisation (recovery scans less and
            // trusts more): a record that cannot be written, on a full disk say, leaves the
            // recovery point where it was, which recovery handles as it handles data written
            // since; the next seal moves it past this segment too. It is no reason to stop the
            // partition's writes, which would outlast the full disk until a restart.
            if let Err(error) = job.recovery_point.advance_in(job.generation, job.next_base) {
                tracing::warn!(next_base = job.next_base, %error, "could not record the recovery point after sealing a segment; the next seal retries");
            }
            if let Some(after_seal) = job.after_seal {
                after_seal();
            }
        }
        Err(error) => {
            // Only a live segment's sync can fail (a deleted one's is skipped above).
            let path = segment.map_or_else(PathBuf::new, |segment| segment.path().to_path_buf());
            (job.on_failure)(&path, error);
        }
    }
}

#[cfg(all(test, not(fencelog_loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A job far from due waits while any handle lives; dropping the last handle seals it at
    /// once (its segment is gone, so only the recovery point moves) and ends the thread.
    #[test]
    fn the_last_handle_seals_what_is_queued_and_ends_the_thread() {
        let directory = tempfile::tempdir().unwrap();
        let recovery_point = Arc::new(RecoveryPoint::load(directory.path()).unwrap());
        let worker = SealWorker::start().unwrap();
        let other_handle = worker.clone();
        worker.submit(SealJob {
            segment: Weak::new(),
            recovery_point: Arc::clone(&recovery_point),
            next_base: 42,
            deferred: None,
            generation: 0,
            not_before: Instant::now() + Duration::from_secs(3600),
            on_failure: Box::new(|_, error| panic!("sealing failed: {error}")),
            after_seal: None,
        });
        drop(worker);
        assert_eq!(recovery_point.offset(), 0, "the job is not due yet");
        drop(other_handle);
        assert_eq!(recovery_point.offset(), 42);
        let reloaded = RecoveryPoint::load(directory.path()).unwrap();
        assert_eq!(reloaded.offset(), 42, "the recovery point is durable");
    }

    /// Two workers are independent: one holding a deferred job does not hold up the other.
    #[test]
    fn workers_seal_independently() {
        let directory = tempfile::tempdir().unwrap();
        let deferred_point = Arc::new(RecoveryPoint::load(directory.path()).unwrap());
        let other_directory = tempfile::tempdir().unwrap();
        let prompt_point = Arc::new(RecoveryPoint::load(other_directory.path()).unwrap());
        let deferring = SealWorker::start().unwrap();
        let prompt = SealWorker::start().unwrap();
        let job = |recovery_point: &Arc<RecoveryPoint>, delay| SealJob {
            segment: Weak::new(),
            recovery_point: Arc::clone(recovery_point),
            next_base: 7,
            deferred: None,
            generation: 0,
            not_before: Instant::now() + delay,
            on_failure: Box::new(|_, error| panic!("sealing failed: {error}")),
            after_seal: None,
        };
        deferring.submit(job(&deferred_point, Duration::from_secs(3600)));
        prompt.submit(job(&prompt_point, Duration::ZERO));
        drop(prompt);
        assert_eq!(prompt_point.offset(), 7);
        assert_eq!(deferred_point.offset(), 0);
        drop(deferring);
        assert_eq!(deferred_point.offset(), 7);
    }

    /// A roll that left its directory change to the seal: the recovery point moves only once a
    /// directory sync covers that change.
    #[test]
    fn the_seal_syncs_the_rolls_directory_change_before_the_recovery_point_moves() {
        let directory = tempfile::tempdir().unwrap();
        let recovery_point = Arc::new(RecoveryPoint::load(directory.path()).unwrap());
        let deferred = Arc::new(DeferredDirectorySync::new(directory.path()));
        let change = deferred.note_change();
        let worker = SealWorker::start().unwrap();
        worker.submit(SealJob {
            segment: Weak::new(),
            recovery_point: Arc::clone(&recovery_point),
            next_base: 9,
            deferred: Some(DeferredRoll {
                directory: Arc::clone(&deferred),
                change,
            }),
            generation: 0,
            not_before: Instant::now(),
            on_failure: Box::new(|_, error| panic!("sealing failed: {error}")),
            after_seal: None,
        });
        drop(worker);
        assert_eq!(recovery_point.offset(), 9);
        assert!(deferred.is_synced_through(change));
    }

    /// Jobs of one partition whose segments retention already deleted: only the last one waiting
    /// records the recovery point (and runs its after-seal step); the earlier ones are skipped.
    #[test]
    fn a_deleted_segments_job_defers_to_a_later_one_of_its_partition() {
        let directory = tempfile::tempdir().unwrap();
        let recovery_point = Arc::new(RecoveryPoint::load(directory.path()).unwrap());
        let ran = Arc::new(Mutex::new(Vec::new()));
        let worker = SealWorker::start().unwrap();
        for next_base in [10, 20, 30] {
            let ran = Arc::clone(&ran);
            worker.submit(SealJob {
                segment: Weak::new(),
                recovery_point: Arc::clone(&recovery_point),
                next_base,
                deferred: None,
                generation: 0,
                not_before: Instant::now() + Duration::from_secs(3600),
                on_failure: Box::new(|_, error| panic!("sealing failed: {error}")),
                after_seal: Some(Box::new(move || ran.lock().unwrap().push(next_base))),
            });
        }
        drop(worker);
        assert_eq!(recovery_point.offset(), 30);
        assert_eq!(*ran.lock().unwrap(), [30]);
    }
}
