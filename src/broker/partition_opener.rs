//! Opening many partitions at once: on several threads, because an open is a handful of small
//! file operations (checkpoint, recovery point, directory listing, index) whose latency, not CPU,
//! dominates, and a broker with thousands of partitions must start listening quickly.
//!
//! Each partition's result is kept on its own: the broker decides what a failure means (at
//! startup the partition is served as unavailable; when a topic is created it is an error).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::storage::{Partition, PartitionConfig, RecoveryReport, SealWorker, StorageError};

/// Most threads that open partitions at the same time.
pub const OPEN_THREADS_MAX: usize = 16;

/// One partition to open.
#[derive(Debug)]
pub struct OpenJob {
    /// `topic/partition`, for logs and errors.
    pub name: String,
    /// Its directory.
    pub directory: PathBuf,
    /// Its settings.
    pub config: PartitionConfig,
}

/// What opening one partition gave.
pub type Opened = Result<(Arc<Partition>, RecoveryReport), StorageError>;

/// Opens every job's partition, on up to [`OPEN_THREADS_MAX`] threads; the results are in the
/// jobs' order.
pub fn open_all(jobs: &[OpenJob], seal_worker: &SealWorker) -> Vec<Opened> {
    let results: Vec<Mutex<Option<Opened>>> = jobs.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let threads = OPEN_THREADS_MAX.min(jobs.len());
    let work = || loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        let Some(job) = jobs.get(index) else {
            return;
        };
        let opened =
            Partition::open_with_report(&job.name, &job.directory, job.config, seal_worker)
                .map(|(partition, report)| (Arc::new(partition), report));
        *results[index].lock().expect("result lock poisoned") = Some(opened);
    };
    if threads <= 1 {
        work();
    } else {
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(work);
            }
        });
    }
    results
        .into_iter()
        .map(|slot| {
            slot.into_inner()
                .expect("result lock poisoned")
                .expect("every job was run")
        })
        .collect()
}
