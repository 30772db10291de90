//! Sealing full segments in the background, and the recovery point that records it.
//!
//! When the active segment fills up, the partition rolls to a new one at once and hands the full
//! segment to this module's thread, which syncs it whole and then advances the partition's
//! *recovery point*: the offset below which every segment is known to be on disk. Recovery trusts
//! segments below the recovery point (a crash cannot have torn them, so damage there is
//! corruption: refused, never cut) and treats everything after it as possibly torn (cut at the
//! first invalid batch). Doing the sync here rather than in `roll` keeps a segment-sized sync out
//! of the append lock: under flush `never` that sync would otherwise stall every producer for as
//! long as the disk takes to write a whole segment.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};

use super::fence::write_durably;
use super::segment::SegmentReader;

/// Name of the recovery point file in a partition directory.
pub const RECOVERY_POINT_FILE: &str = "recovery-point";
/// Seal jobs that may wait for the background thread; a roll beyond it waits (backpressure).
pub const SEAL_QUEUE_MAX: usize = 1024;

/// The durable recovery point of one partition.
#[derive(Debug)]
pub struct RecoveryPoint {
    directory: PathBuf,
    offset: Mutex<u64>,
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
        })
    }

    /// Offsets below this are in segments that were synced whole.
    pub fn offset(&self) -> u64 {
        *self.offset.lock().expect("recovery point lock poisoned")
    }

    /// Records durably that every segment below `offset` is synced. Never moves backwards.
    pub fn advance(&self, offset: u64) -> io::Result<()> {
        let mut current = self.offset.lock().expect("recovery point lock poisoned");
        if offset <= *current {
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

/// A full segment to sync, and what to do after.
pub struct SealJob {
    /// The full segment.
    pub segment: Arc<SegmentReader>,
    /// The partition's recovery point, advanced to `next_base` once the segment is synced.
    pub recovery_point: Arc<RecoveryPoint>,
    /// Base offset of the segment after it.
    pub next_base: u64,
    /// Called if the sync fails (the partition stops accepting writes).
    pub on_failure: Box<dyn FnOnce(io::Error) + Send>,
}

fn queue() -> &'static SyncSender<SealJob> {
    static QUEUE: OnceLock<SyncSender<SealJob>> = OnceLock::new();
    QUEUE.get_or_init(|| {
        let (sender, receiver) = mpsc::sync_channel::<SealJob>(SEAL_QUEUE_MAX);
        std::thread::Builder::new()
            .name("fencelog-seal".into())
            .spawn(move || {
                // Jobs run one at a time in the order of the rolls, so a partition's recovery
                // point only ever advances over segments that are all synced.
                for job in receiver {
                    run(job);
                }
            })
            .expect("spawn the seal thread");
        sender
    })
}

fn run(job: SealJob) {
    // A segment retention already deleted need not reach the disk: recovery will never see it.
    // Skipping it matters when a topic's retention is short and the disk slower than producers.
    let synced = if job.segment.is_deleted() {
        Ok(())
    } else {
        job.segment.map().sync_range(0, job.segment.written_bytes())
    };
    let synced = synced.and_then(|()| job.recovery_point.advance(job.next_base));
    if let Err(error) = synced {
        tracing::error!(segment = %job.segment.path().display(), %error, "sealing a full segment failed");
        (job.on_failure)(error);
    }
}

/// Queues a full segment for sealing. Blocks only if `SEAL_QUEUE_MAX` jobs are waiting.
pub fn submit(job: SealJob) {
    if let Err(mpsc::SendError(job)) = queue().send(job) {
        run(job);
    }
}
