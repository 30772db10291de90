//! The broker's shutdown signal: set once when the server begins to stop, watched by every
//! long poll so that a graceful shutdown does not wait out fetches' `max_wait`.
//!
//! Why its own part: the read path waits on it and the service sets it; neither should hold
//! the other to reach it.

use std::sync::Arc;

/// A cheap-clone handle on one broker's "stopping" flag.
#[derive(Debug, Clone)]
pub struct ShutdownSignal {
    stopping: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Default for ShutdownSignal {
    fn default() -> Self {
        Self {
            stopping: Arc::new(tokio::sync::watch::Sender::new(false)),
        }
    }
}

impl ShutdownSignal {
    /// Marks the broker as stopping: every pending wait on [`Self::stopped`] (and every later
    /// one) completes at once.
    pub fn begin(&self) {
        self.stopping.send_replace(true);
    }

    /// Completes once [`Self::begin`] was called (at once if it was).
    pub async fn stopped(&self) {
        let mut stopping = self.stopping.subscribe();
        // An error means the sender is gone, which cannot happen while `self` holds it.
        let _ = stopping.wait_for(|stopping| *stopping).await;
    }
}
