//! Appending a connection's produces in request order: on its socket-reading task, or off it.
//!
//! Every listener needs this (pipelined produces to a partition must land in the order they
//! were sent, whatever the protocol), so it lives with the broker service, not in a listener.
//!
//! A produce goes through three steps on the server: receive the batch from the socket,
//! validate it (CRC over every byte) and copy it into the segment. Batches up to
//! [`INLINE_APPEND_MAX_BYTES`] are validated and copied by the connection's task itself when
//! nothing of the connection is queued: the bytes the receive just wrote are still in that
//! core's cache, so the CRC and the copy read them at cache speed. Handing them to another
//! thread made that thread read them from memory first, and woke it for every request: on 2
//! cores, 1 KiB records, the server's CPU per GB produced fell from 0.47–0.67 to 0.39–0.49
//! core-seconds when 1 MiB batches stopped being handed off, and 100-record batches (100 KiB)
//! went from 1.5–1.8 to 1.7–2.1 GB/s (`docs/benchmarks.md`). Larger batches, and batches behind
//! a queued one, go to the appender: a serial queue drained on the blocking pool, one job at a
//! time in the order they were received, so that copying several megabytes never holds up the
//! other connections of the worker for long.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use super::service::{BrokerService, ProduceRequest};
use super::BrokerError;
use crate::storage::Appended;

/// Batches up to this size are appended on the connection's task when nothing is queued: the
/// copy of 1 MiB into the page cache takes that task's worker about 0.2 ms (Kafka's default
/// largest request is also 1 MiB).
pub const INLINE_APPEND_MAX_BYTES: usize = 1024 * 1024;

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// A blocking-pool thread is draining `jobs` (or running the last one it took).
    running: bool,
}

/// The serial append queue of one connection. Its length needs no limit of its own: the
/// connection stops reading once `max_in_flight` of its requests are pending, so at most that
/// many appends are ever queued.
pub struct ProduceQueue {
    service: Arc<BrokerService>,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for ProduceQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProduceQueue").finish_non_exhaustive()
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // Jobs run outside the lock, so a panic cannot leave the queue half-updated.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ProduceQueue {
    /// An empty queue appending through `service`.
    pub(crate) fn new(service: Arc<BrokerService>) -> Self {
        Self {
            service,
            state: Arc::default(),
        }
    }

    /// Appends the batch after every produce submitted before it, and returns the wait for its
    /// acknowledgement (see [`BrokerService::begin_produce`]).
    pub fn produce(
        &self,
        request: ProduceRequest,
    ) -> BoxFuture<'static, Result<Appended, BrokerError>> {
        // Only this connection's task submits, so when the queue is idle nothing submitted
        // earlier is still unappended and an inline append keeps the order.
        let idle = {
            let state = lock(&self.state);
            state.jobs.is_empty() && !state.running
        };
        if idle && request.batch.len() <= INLINE_APPEND_MAX_BYTES {
            return self.service.begin_produce(&request);
        }
        let (started, acknowledgement) = oneshot::channel();
        let service = Arc::clone(&self.service);
        self.submit(Box::new(move || {
            // The receiver is gone only when the connection dropped the request; the append has
            // happened either way, as it would have had the client stayed.
            let _ = started.send(service.begin_produce(&request));
        }));
        Box::pin(async move {
            match acknowledgement.await {
                Ok(acknowledged) => acknowledged.await,
                Err(_) => Err(BrokerError::Io {
                    context: "append task failed".into(),
                    source: std::io::Error::other("the append panicked; see the server log"),
                }),
            }
        })
    }

    fn submit(&self, job: Job) {
        let mut state = lock(&self.state);
        state.jobs.push_back(job);
        if !state.running {
            state.running = true;
            let queue = Arc::clone(&self.state);
            tokio::task::spawn_blocking(move || drain(&queue));
        }
    }
}

/// Runs queued jobs in order until the queue is empty.
fn drain(queue: &Mutex<State>) {
    loop {
        let job = {
            let mut state = lock(queue);
            match state.jobs.pop_front() {
                Some(job) => job,
                None => {
                    state.running = false;
                    return;
                }
            }
        };
        // A panicking append fails its own request (its reply is dropped), not the queue.
        if std::panic::catch_unwind(AssertUnwindSafe(job)).is_err() {
            tracing::error!("an append panicked; its request fails");
        }
    }
}
