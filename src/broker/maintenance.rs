//! The broker's background work: syncing `interval` partitions when their interval has passed,
//! and applying retention, each on its own timer and on the blocking pool, off the request path.
//!
//! Owned by whoever runs the service (the server starts it once, however many listeners it
//! has), so several brokers in one process each keep their own.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::Broker;

/// How often `interval` partitions are checked for a due sync.
pub const INTERVAL_SYNC_CHECK: Duration = Duration::from_millis(10);
/// How often retention runs. Often, because a partition written at a gigabyte per second fills
/// a segment in well under a second, and checking costs only a look at the segment list.
pub const RETENTION_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// The running maintenance task; [`Maintenance::stop`] ends it.
#[derive(Debug)]
pub struct Maintenance {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Maintenance {
    /// Starts the timers (on the current tokio runtime).
    pub fn start(broker: Arc<Broker>) -> Self {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut flush_tick = tokio::time::interval(INTERVAL_SYNC_CHECK);
            let mut retention_tick = tokio::time::interval(RETENTION_CHECK_INTERVAL);
            flush_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tokio::select! {
                    _ = &mut stopped => return,
                    _ = flush_tick.tick() => {
                        let broker = Arc::clone(&broker);
                        run_blocking("interval sync", move || {
                            broker.sync_due_interval_partitions(std::time::Instant::now())
                        })
                        .await;
                    }
                    _ = retention_tick.tick() => {
                        let broker = Arc::clone(&broker);
                        run_blocking("retention", move || {
                            broker.enforce_retention(crate::batch::now_ms())
                        })
                        .await;
                    }
                }
            }
        });
        Self {
            stop: Some(stop),
            task,
        }
    }

    /// Stops the timers and waits for the task to end, so no handle on the broker outlives it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            // An error means the task already ended, which is what is asked.
            let _ended = stop.send(());
        }
        if let Err(error) = (&mut self.task).await {
            tracing::error!(%error, "maintenance task failed");
        }
    }
}

/// Runs one maintenance pass on the blocking pool. The pass logs its own errors per partition;
/// a panic in it is logged here and the timers go on.
async fn run_blocking(what: &'static str, pass: impl FnOnce() + Send + 'static) {
    if let Err(error) = tokio::task::spawn_blocking(pass).await {
        tracing::error!(%error, what, "maintenance pass failed");
    }
}

impl Drop for Maintenance {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
