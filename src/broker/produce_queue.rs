//! Appending a connection's produces in request order: on its socket-reading task, or off it.
//!
//! Every listener needs this (pipelined produces to a partition must land in the order they
//! were sent, whatever the protocol), so it lives with the broker service, not in a listener.
//!
//! A produce goes through three steps on the server: receive the batch from the socket,
//! validate it (CRC over every byte) and copy it into the segment. Batches up to
//! [`INLINE_APPEND_MAX_BYTES`] (2 MiB on a runtime of several workers, below) are validated
//! and copied by the connection's task itself when nothing of the connection is queued (a
//! hand-off would cost more than the copy, and add to the ack latency). Larger batches, and
//! batches behind a queued one, go to the appender: a serial queue drained on the blocking
//! pool, one job at a time in the order they were received, so the connection's task receives
//! the next batch meanwhile and copying megabytes never holds up the other connections of its
//! worker.
//!
//! Tried: appending batches up to 1 MiB inline. With one connection the server's CPU per GB fell
//! by a fifth (the CRC and the copy read the bytes while the receiving core still had them in
//! cache, and no thread was woken per request), but with 4 producers over 100 or 1,000
//! partitions every append then ran on the in-process bench server's single worker, and produce
//! fell by half. Checking the CRC on the receiving task and copying on the pool gained nothing:
//! the copy then read the bytes from memory instead.
//!
//! A batch whose bytes are in a pipe (the one-copy produce path,
//! [`super::spliced_produce`]) always goes to the appender. Tried: appending it on the
//! connection's task when nothing is queued. One producer's server CPU per GB fell from
//! 0.37 to 0.32–0.35 core-s (no hand-off to a pool thread and back), but with 4 producers over
//! 100 partitions on the in-process bench server's one worker, produce fell from 2.25–2.38 to
//! 1.92–2.12 GB/s and the p99 doubled (33 → 80 ms): a megabyte's copy into the page cache
//! holds up every other connection of the worker.
//!
//! Raised from 64 to 128 KiB, so that a batch of 100 records of 1 KiB (~100 KiB) is appended
//! inline: measured, interleaved, one producer, 8 in flight, 1.69–1.81 → 2.01–2.14 GB/s and
//! the server's CPU per GB 0.58–0.61 → 0.40–0.42 core-s (one wake-up of a pool thread less per
//! request); 4 producers over 100 partitions with the same batches 1.74–1.77 → 1.90–2.05 GB/s.
//!
//! On a runtime of two or more workers (what `fencelog serve` runs on any machine of two cores
//! or more) the bound is [`INLINE_APPEND_MAX_BYTES_MULTI_WORKER`], 2 MiB: a worker busy with a
//! copy has its other tasks stolen by the next, so what hurt the one-worker bench server above
//! does not happen. Measured on the AMD EPYC VM (`fencelog serve` on two workers, `fencelog
//! bench --addr`, 1,000 records of 1 KiB per batch, flush never, interleaved, 2026-12-06): one
//! producer 0.269–0.275 core-s per GB against 0.291–0.297 with 128 KiB (3.3–3.7 GB/s both);
//! 4 producers over 100 partitions 3.32–3.33 against 3.15–3.26 GB/s and over 1,000 partitions
//! 1.55 against 1.43 GB/s, p99s unchanged; on a three-broker cluster factor 1 at 0.34–0.36
//! against 0.39–0.40 brokers' core-s per GB.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use super::appender::Appender;
use super::appender::ProduceRequest;
use super::spliced_produce::SplicedProduce;
use super::BrokerError;
use crate::storage::Appended;

/// Batches up to this size are appended on the connection's task when nothing is queued, on a
/// runtime of one worker.
pub const INLINE_APPEND_MAX_BYTES: usize = 128 * 1024;

/// The same bound on a runtime of two or more workers: a batch of the default 1 MiB fetch and
/// produce sizes, and a little over.
pub const INLINE_APPEND_MAX_BYTES_MULTI_WORKER: usize = 2 * 1024 * 1024;

/// The largest append the calling task may run itself on the current runtime:
/// [`INLINE_APPEND_MAX_BYTES_MULTI_WORKER`] where another worker can take the task's
/// neighbours meanwhile, else [`INLINE_APPEND_MAX_BYTES`].
pub fn inline_append_max_bytes() -> usize {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) if runtime.metrics().num_workers() >= 2 => INLINE_APPEND_MAX_BYTES_MULTI_WORKER,
        _ => INLINE_APPEND_MAX_BYTES,
    }
}

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
    appender: Appender,
    state: Arc<Mutex<State>>,
    /// [`inline_append_max_bytes`] on the runtime the queue was made on.
    inline_max_bytes: usize,
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
    /// An empty queue appending through `appender`.
    pub(crate) fn new(appender: Appender) -> Self {
        Self {
            appender,
            state: Arc::default(),
            inline_max_bytes: inline_append_max_bytes(),
        }
    }

    /// Appends the batch after every produce submitted before it, and returns the wait for its
    /// acknowledgement (see [`Appender::begin`]).
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
        if idle && request.batch.len() <= self.inline_max_bytes {
            return self.appender.begin(&request);
        }
        let (started, acknowledgement) = oneshot::channel();
        let appender = self.appender.clone();
        self.submit(Box::new(move || {
            // The receiver is gone only when the connection dropped the request; the append has
            // happened either way, as it would have had the client stayed.
            let _ = started.send(appender.begin(&request));
        }));
        Box::pin(async move {
            match acknowledgement.await {
                Ok(acknowledged) => acknowledged.await,
                Err(_) => append_failed().await,
            }
        })
    }

    /// Appends a batch whose last bytes are in a pipe after every produce submitted before it,
    /// always on the blocking pool (the batch is large, and the move into the segment runs
    /// under the partition's writer lock), and returns the wait for its acknowledgement.
    pub fn produce_spliced(
        &self,
        request: SplicedProduce,
    ) -> BoxFuture<'static, Result<Appended, BrokerError>> {
        let (started, acknowledgement) = oneshot::channel();
        let appender = self.appender.clone();
        self.submit(Box::new(move || {
            let _ = started.send(appender.begin_spliced(request));
        }));
        Box::pin(async move {
            match acknowledgement.await {
                Ok(acknowledged) => acknowledged.await,
                Err(_) => append_failed().await,
            }
        })
    }

    /// Appends `requests` after every produce submitted before them and before any submitted
    /// after them, once `ready` answers: with the guard it returns as each request's
    /// `verification` (a transaction's first batches, verified with its coordinator by this
    /// leader; see [`crate::storage::verification`]), or not at all if it fails. The returned
    /// future gives each append's wait for acknowledgement, or `ready`'s refusal.
    ///
    /// Meanwhile the queue holds every later produce of the connection, so pipelined
    /// produces still land in request order; `ready` itself runs as a task of its own, and
    /// the queue's thread only waits for its answer.
    pub fn produce_after<E: Send + 'static>(
        &self,
        ready: BoxFuture<'static, Result<u64, E>>,
        mut requests: Vec<ProduceRequest>,
    ) -> BoxFuture<'static, Result<Vec<Acknowledgement>, E>> {
        let (answer, answered) = oneshot::channel();
        tokio::spawn(async move {
            let _ = answer.send(ready.await);
        });
        let (started, appended) = oneshot::channel();
        let appender = self.appender.clone();
        self.submit(Box::new(move || {
            let outcome = match answered.blocking_recv() {
                Ok(Ok(guard)) => Ok(requests
                    .iter_mut()
                    .map(|request| {
                        request.verification = Some(guard);
                        appender.begin(request)
                    })
                    .collect()),
                Ok(Err(refused)) => Err(refused),
                Err(_) => Ok(vec![append_failed()]),
            };
            let _ = started.send(outcome);
        }));
        Box::pin(async move { appended.await.unwrap_or_else(|_| Ok(vec![append_failed()])) })
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

/// The wait for one append's acknowledgement.
pub type Acknowledgement = BoxFuture<'static, Result<Appended, BrokerError>>;

/// The answer of an append whose job panicked (its reply was dropped).
fn append_failed() -> Acknowledgement {
    Box::pin(futures::future::ready(Err(BrokerError::Io {
        context: "append task failed".into(),
        source: std::io::Error::other("the append panicked; see the server log"),
    })))
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
