//! Checking, in the background, the sealed segments a restart opened without reading them.
//!
//! A restart trusts the segments below each partition's recovery point enough to open them
//! without a scan (see `storage::recovery`), so the server listens after reading only the data
//! written since the last sync. Their batches are still checked before anyone relies on them:
//! every read checks the batches it serves that were not checked yet, and this thread checks the
//! rest, one segment at a time, so that the first reads do not pay for it and retention by age
//! learns each segment's real age. Segments a restart did not open at all (see
//! `storage::segment::on_demand`) are opened for the check and closed again, so the check neither
//! keeps one map per segment nor pushes the segments readers use out of the cache of open ones.
//! A broker owns its verifier; dropping the broker stops it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

use crate::storage::Partition;

/// The background check of one broker's unscanned segments.
#[derive(Debug)]
pub struct Verifier {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Verifier {
    /// Starts checking `partitions` (held weakly: a partition closed meanwhile is skipped).
    /// Nothing is started when the list is empty.
    pub fn start(partitions: Vec<Weak<Partition>>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = (!partitions.is_empty())
            .then(|| {
                let stop = Arc::clone(&stop);
                std::thread::Builder::new()
                    .name("fencelog-verify".into())
                    .spawn(move || verify_all(&partitions, &stop))
                    .inspect_err(|error| tracing::warn!(%error, "could not start the background check of sealed segments; reads still check each batch they serve"))
                    .ok()
            })
            .flatten();
        Self { stop, thread }
    }
}

fn verify_all(partitions: &[Weak<Partition>], stop: &AtomicBool) {
    let started = std::time::Instant::now();
    let mut segments = 0;
    for partition in partitions {
        if stop.load(Ordering::Acquire) {
            return;
        }
        if let Some(partition) = partition.upgrade() {
            segments += partition.verify_unscanned_segments(|| !stop.load(Ordering::Acquire));
        }
    }
    tracing::info!(
        segments,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "checked the sealed segments opened without a scan"
    );
}

impl Drop for Verifier {
    /// Stops the check after the segment in progress and waits for it, so that no partition
    /// outlives its broker (and its data directory lock) in this thread.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the background check of sealed segments panicked");
            }
        }
    }
}
