//! Metrics: what the server counts. The Prometheus endpoint that exposes it is a listener
//! (`crate::server::prometheus`), above the broker whose topics it walks.
//!
//! Counting is split from exposing so that the hot paths pay only for an atomic add:
//!
//! * [`histogram`]: a lock-free histogram in integer units (nanoseconds, bytes).
//! * [`partition`]: [`PartitionMetrics`], the counters each partition owns (produce, fetch,
//!   fence refusals, lease events, batch sizes, sync latency). Storage and the lease authority
//!   update them; it is a leaf module that knows nothing of Prometheus.
//! * [`listener`]: [`ListenerMetrics`], each listener's connections and request latency by API.
//! * this file: [`Metrics`], the server-wide registry of listeners (held by the
//!   broker service), and what is kept of deleted topics.
//!
//! Why counting sits below storage and knows nothing of the broker: every layer that counts
//! (storage, leases, listeners) imports it, so it must import none of them.
//!
//! docs/operations.md lists every series, its type, labels and meaning.

pub mod histogram;
pub mod listener;
pub mod partition;

use std::sync::{Arc, Mutex};

pub use histogram::{AtomicHistogram, HistogramSnapshot};
pub use listener::{ApiNames, ListenerMetrics, OpenConnection, RequestTimer, RequestTimers};
pub use partition::{
    FencedWrite, LeaseGrantRecord, PartitionCounts, PartitionMetrics, FENCED_WRITES_KEPT,
    GRANTS_KEPT,
};

use histogram::{BATCH_BYTES_BOUNDS, SYNC_DURATION_BOUNDS_NANOS};

/// The server-wide metrics: one [`ListenerMetrics`] per listener, and the histogram counts of
/// deleted topics (the server-wide histograms add up every partition's, and must not go down
/// when a topic goes away).
#[derive(Debug)]
pub struct Metrics {
    listeners: Mutex<Vec<Arc<ListenerMetrics>>>,
    retired: Mutex<Retired>,
}

/// Histogram counts of partitions that no longer exist.
#[derive(Debug, Clone)]
pub(crate) struct Retired {
    pub(crate) batch_bytes: HistogramSnapshot,
    pub(crate) sync_duration: HistogramSnapshot,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            listeners: Mutex::new(Vec::new()),
            retired: Mutex::new(Retired {
                batch_bytes: HistogramSnapshot::empty(BATCH_BYTES_BOUNDS),
                sync_duration: HistogramSnapshot::empty(SYNC_DURATION_BOUNDS_NANOS),
            }),
        }
    }
}

impl Metrics {
    /// The metrics of the listener `name`, created on first use with `api_names` naming its
    /// API keys. Called once per connection (a short lock, never per request).
    pub fn listener(&self, name: &'static str, api_names: ApiNames) -> Arc<ListenerMetrics> {
        let mut listeners = self.listeners.lock().expect("metrics lock poisoned");
        if let Some(found) = listeners.iter().find(|listener| listener.name() == name) {
            return Arc::clone(found);
        }
        let created = Arc::new(ListenerMetrics::new(name, api_names));
        listeners.push(Arc::clone(&created));
        created
    }

    /// Every listener's metrics, in the order they were created.
    pub fn listeners(&self) -> Vec<Arc<ListenerMetrics>> {
        self.listeners
            .lock()
            .expect("metrics lock poisoned")
            .clone()
    }

    /// Call with the metrics of a topic's partitions when it is deleted (after it is removed from the broker): its per-partition
    /// series disappear by themselves (a scrape only walks live topics), and this keeps its
    /// partitions' share of the server-wide histograms (batch sizes, sync latency) so that
    /// those stay monotonic.
    pub fn forget_partitions<'a>(
        &self,
        partitions: impl IntoIterator<Item = &'a PartitionMetrics>,
    ) {
        let mut retired = self.retired.lock().expect("metrics lock poisoned");
        for partition in partitions {
            retired.batch_bytes.add(partition.batch_bytes());
            retired.sync_duration.add(partition.sync_duration());
        }
    }

    pub(crate) fn retired(&self) -> Retired {
        self.retired.lock().expect("metrics lock poisoned").clone()
    }
}
