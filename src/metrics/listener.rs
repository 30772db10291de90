//! What one listener (native or Kafka) counts: open connections, refused connections, and the
//! latency of each request by API.
//!
//! A listener's metrics are created once, by the first connection, and shared by its accept loop
//! and connections. A request's latency runs from the moment its frame is read to the moment its
//! response is handed to the writer, in request order: what a pipelining client waits, head of
//! line included. The histograms are indexed by the API key read from the frame's first two bytes
//! (both protocols put it there), so timing a request costs a clock read and two atomic adds;
//! API names are looked up only when a scrape asks.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::histogram::{AtomicHistogram, HistogramSnapshot, REQUEST_DURATION_BOUNDS_NANOS};

/// API keys at or above this are timed together as one "unknown" API (no protocol has more).
pub const MAX_TIMED_API_KEYS: usize = 128;

/// Names the API with a key, for the `api` label (`None`: not an API the listener knows).
pub type ApiNames = fn(u16) -> Option<String>;

/// One listener's connection and request metrics.
#[derive(Debug)]
pub struct ListenerMetrics {
    name: &'static str,
    api_names: ApiNames,
    connections: AtomicI64,
    refused: AtomicU64,
    /// Request frames whose batch went into a pipe, not memory (the one-copy produce path).
    spliced: AtomicU64,
    /// Request latency by API key; the last slot holds every key at or beyond it.
    requests: Box<[AtomicHistogram]>,
}

impl ListenerMetrics {
    /// Metrics of the listener `name` whose API keys `api_names` names.
    pub fn new(name: &'static str, api_names: ApiNames) -> Self {
        Self {
            name,
            api_names,
            connections: AtomicI64::new(0),
            refused: AtomicU64::new(0),
            spliced: AtomicU64::new(0),
            requests: (0..=MAX_TIMED_API_KEYS)
                .map(|_| AtomicHistogram::new(REQUEST_DURATION_BOUNDS_NANOS))
                .collect(),
        }
    }

    /// The listener's name (the `listener` label).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Counts an accepted connection until the returned guard is dropped.
    pub fn connection_opened(self: &Arc<Self>) -> OpenConnection {
        self.connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection {
            listener: Arc::clone(self),
        }
    }

    /// Counts a connection refused at the connection limit.
    pub fn connection_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections open now.
    pub fn connections(&self) -> i64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Connections refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Counts a request frame whose batch was read into a pipe, not memory.
    pub fn frame_spliced(&self) {
        self.spliced.fetch_add(1, Ordering::Relaxed);
    }

    /// Request frames whose batch was read into a pipe so far.
    pub fn spliced(&self) -> u64 {
        self.spliced.load(Ordering::Relaxed)
    }

    /// Request latency by API name, APIs never called left out; keys the listener cannot name
    /// are added up as `unknown`.
    pub fn request_durations(&self) -> Vec<(String, HistogramSnapshot)> {
        let mut named: Vec<(String, HistogramSnapshot)> = Vec::new();
        let mut unknown = HistogramSnapshot::empty(REQUEST_DURATION_BOUNDS_NANOS);
        for (key, histogram) in self.requests.iter().enumerate() {
            let mut snapshot = HistogramSnapshot::empty(REQUEST_DURATION_BOUNDS_NANOS);
            snapshot.add(histogram);
            if snapshot.count() == 0 {
                continue;
            }
            let name = u16::try_from(key)
                .ok()
                .filter(|_| key < MAX_TIMED_API_KEYS)
                .and_then(self.api_names);
            match name {
                Some(name) => named.push((name, snapshot)),
                None => unknown.merge(&snapshot),
            }
        }
        if unknown.count() > 0 {
            named.push(("unknown".to_string(), unknown));
        }
        named
    }

    fn observe(&self, started: &RequestStarted) {
        self.requests[started.slot].observe_duration(started.at.elapsed());
    }
}

/// An open connection, counted in `fencelog_connections` until dropped.
#[derive(Debug)]
pub struct OpenConnection {
    listener: Arc<ListenerMetrics>,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.listener.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct RequestStarted {
    slot: usize,
    at: Instant,
}

/// The start times of a connection's pending requests, in request order (the order their
/// responses are written), so each response stops the clock of its own request.
#[derive(Debug)]
pub struct RequestTimers {
    listener: Arc<ListenerMetrics>,
    /// `None` for a response with no request to time (an answer to a framing error).
    pending: VecDeque<Option<RequestStarted>>,
}

impl RequestTimers {
    /// Timers for one connection of `listener`, with room for `max_in_flight` requests (so a
    /// request never allocates).
    pub fn new(listener: Arc<ListenerMetrics>, max_in_flight: usize) -> Self {
        Self {
            listener,
            pending: VecDeque::with_capacity(max_in_flight.saturating_add(1)),
        }
    }

    /// Starts the clock of the request in `frame` (the frame's first two bytes are its API key);
    /// call [`RequestTimers::push`] with the result if the request gets a response.
    pub fn start(&self, frame: &[u8]) -> RequestTimer {
        let slot = match frame {
            [high, low, ..] => usize::from(u16::from_be_bytes([*high, *low])),
            _ => MAX_TIMED_API_KEYS,
        }
        .min(MAX_TIMED_API_KEYS);
        RequestTimer(RequestStarted {
            slot,
            at: Instant::now(),
        })
    }

    /// Queues a started request behind those already pending.
    pub fn push(&mut self, timer: RequestTimer) {
        self.pending.push_back(Some(timer.0));
    }

    /// Queues a response that times nothing (an answer to a framing error).
    pub fn push_untimed(&mut self) {
        self.pending.push_back(None);
    }

    /// The oldest pending response was handed to the writer: stop its clock.
    pub fn finish(&mut self) {
        if let Some(Some(started)) = self.pending.pop_front() {
            self.listener.observe(&started);
        }
    }

    /// Forgets every pending request (their responses will not be written).
    pub fn clear(&mut self) {
        self.pending.clear();
    }
}

/// A request whose clock is running (see [`RequestTimers::start`]).
#[derive(Debug)]
#[must_use = "push the timer, or the request is not timed"]
pub struct RequestTimer(RequestStarted);

#[cfg(test)]
mod tests {
    use super::*;

    fn names(key: u16) -> Option<String> {
        (key == 6).then(|| "Produce".to_string())
    }

    /// Each finished response times the request at the front of the queue, labelled by the key
    /// in its frame; keys the listener cannot name are added up as `unknown`.
    #[test]
    fn responses_time_their_own_requests_in_order() {
        let listener = Arc::new(ListenerMetrics::new("native", names));
        let mut timers = RequestTimers::new(Arc::clone(&listener), 4);
        let produce = timers.start(&[0, 6, 0, 0]);
        timers.push(produce);
        timers.push_untimed();
        let odd = timers.start(&[0x7f, 0xff]);
        timers.push(odd);
        timers.finish();
        timers.finish();
        timers.finish();
        let durations = listener.request_durations();
        let labels: Vec<_> = durations
            .iter()
            .map(|(name, h)| (name.as_str(), h.count()))
            .collect();
        assert_eq!(labels, vec![("Produce", 1), ("unknown", 1)]);
    }

    /// The gauge counts a connection while its guard lives.
    #[test]
    fn open_connections_are_counted_while_open() {
        let listener = Arc::new(ListenerMetrics::new("kafka", names));
        let open = listener.connection_opened();
        assert_eq!(listener.connections(), 1);
        drop(open);
        assert_eq!(listener.connections(), 0);
    }
}
