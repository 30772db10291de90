//! The memory request frames are read into, so that `max_connections x max_frame_bytes` cannot
//! exhaust memory and a stranger cannot hold memory that others need.
//!
//! Every request frame is read into memory whole before it is decoded (a produce's batch then
//! travels to storage without a copy). Its bytes are paid for *as they arrive*, never by the
//! length a frame declares: the connection pays for what it has read, and reads no more (at
//! most 64 KiB at a time) until it has ([`super::frame_reader`]); the frame gives its share
//! back when its response is ready (a produce's batch is appended by then). So a client that
//! sends a 4-byte prefix declaring 16 MiB holds 4 bytes, not 16 MiB.
//!
//! The share comes from two pools. Each connection has a small pool of its own
//! ([`ServerConfig::connection_buffer_bytes`](super::ServerConfig::connection_buffer_bytes),
//! 64 KiB by default): a request that fits it (ApiVersions, Metadata, a lease call, a small
//! produce) never waits for anyone, whatever other connections hold. Bytes beyond it come from
//! one pool shared by every connection of every listener (`serve --max-buffer-bytes`,
//! [`MemoryBudget`]). When that pool is short the connection stops reading (backpressure: the
//! client's writes block) until enough is given back or
//! [`ServerConfig::buffer_wait`](super::ServerConfig::buffer_wait) passes; then, or at once for
//! a frame larger than both pools, the client is answered `RESOURCE_EXHAUSTED` with its
//! request's correlation id and the connection is closed (its frame cannot be skipped without
//! reading it). Memory in request frames is therefore at most `max_connections x
//! (connection_buffer_bytes + 64 KiB read ahead of payment) + max_buffer_bytes` (640 MiB with
//! the defaults), and only bytes clients really sent, for at most `partial_frame_timeout` each,
//! can fill the shared pool.
//!
//! Native fetch responses are not counted: the native listener sends batches as slices of the
//! memory-mapped segments (page cache the kernel can reclaim, not heap), bounded per request by
//! `max_fetch_bytes`. Kafka fetch responses are: their batches are converted into heap buffers,
//! up to 64 MiB per request, so a Kafka fetch reserves its byte limit from the shared pool after
//! its long poll (a waiting consumer holds nothing), keeps what its answer really uses until the
//! answer is encoded, and gives the rest back at once ([`FetchMemory`]).

use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Default budget for request frames in memory beyond each connection's own share, all
/// connections together: 512 MiB.
pub const DEFAULT_MAX_BUFFER_BYTES: usize = 512 * 1024 * 1024;
/// Default longest a connection waits for budget before its client is refused.
pub const DEFAULT_BUFFER_WAIT_MS: u64 = 10_000;
/// Default memory each connection may read request frames into without drawing on the shared
/// budget: 64 KiB, enough for every request but large produces.
pub const DEFAULT_CONNECTION_BUFFER_BYTES: usize = 64 * 1024;

/// Why a frame could not get its share of the budget.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BudgetError {
    /// The frame is larger than the whole budget: it can never be read.
    #[error("a request frame of {frame_bytes} bytes is larger than the server's whole request memory budget of {budget_bytes} bytes (serve --max-buffer-bytes); send smaller requests")]
    LargerThanBudget {
        /// The frame's declared length.
        frame_bytes: usize,
        /// The budget.
        budget_bytes: usize,
    },
    /// Other requests held the budget for longer than the wait allowed.
    #[error("the server's request memory budget of {budget_bytes} bytes (serve --max-buffer-bytes) stayed in use for {waited_ms} ms; nothing was done, retry later")]
    Exhausted {
        /// The budget.
        budget_bytes: usize,
        /// How long the frame waited.
        waited_ms: u64,
    },
}

/// A pool of bytes request frames are read into (the shared budget, or one connection's own
/// share); cheap to clone.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    bytes: Arc<Semaphore>,
    total: usize,
}

/// Bytes held from one or two pools (a connection's own share and the shared budget), given
/// back when dropped.
#[derive(Debug, Default)]
pub struct Reservation {
    parts: [Option<OwnedSemaphorePermit>; 2],
}

impl MemoryBudget {
    /// A budget of `total` bytes (at most what a semaphore can count).
    pub fn new(total: usize) -> Self {
        let total = total.min(Semaphore::MAX_PERMITS);
        Self {
            bytes: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// The budget's size in bytes.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Bytes not reserved now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }

    /// `bytes` of the budget if they are free now.
    pub fn try_reserve(&self, bytes: usize) -> Option<Reservation> {
        let Ok(count) = u32::try_from(bytes) else {
            return None;
        };
        if count == 0 {
            return Some(Reservation::default());
        }
        Arc::clone(&self.bytes)
            .try_acquire_many_owned(count)
            .ok()
            .map(Reservation::from_permit)
    }

    /// `bytes` of the budget, waiting up to `wait` for them to be given back.
    pub async fn reserve(&self, bytes: usize, wait: Duration) -> Result<Reservation, BudgetError> {
        let too_large = BudgetError::LargerThanBudget {
            frame_bytes: bytes,
            budget_bytes: self.total,
        };
        if bytes > self.total {
            return Err(too_large);
        }
        let count = u32::try_from(bytes).map_err(|_| too_large)?;
        match tokio::time::timeout(wait, Arc::clone(&self.bytes).acquire_many_owned(count)).await {
            Ok(Ok(permit)) => Ok(Reservation::from_permit(permit)),
            _ => Err(BudgetError::Exhausted {
                budget_bytes: self.total,
                waited_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }
}

/// The budget a listener's fetch answers are counted against, and how long one waits for it.
#[derive(Debug, Clone)]
pub struct FetchMemory {
    /// The server-wide pool (the same one request frames come from).
    pub budget: MemoryBudget,
    /// Longest a fetch waits for its share before it is answered without records.
    pub wait: Duration,
}

impl Reservation {
    fn from_permit(permit: OwnedSemaphorePermit) -> Self {
        Self {
            parts: [Some(permit), None],
        }
    }

    /// Adds the bytes of `other` to this reservation (from the same pools, or one more).
    pub fn merge(&mut self, other: Reservation) {
        for permit in other.parts.into_iter().flatten() {
            self.absorb(permit);
        }
    }

    fn absorb(&mut self, permit: OwnedSemaphorePermit) {
        for held in self.parts.iter_mut().flatten() {
            if Arc::ptr_eq(held.semaphore(), permit.semaphore()) {
                held.merge(permit);
                return;
            }
        }
        let free = self.parts.iter_mut().find(|slot| slot.is_none());
        // A reservation draws on a connection's own share and the shared budget, no more.
        *free.expect("a reservation holds bytes of at most two pools") = Some(permit);
    }

    /// Moves `bytes` of this reservation (all of it when it holds less) into a new one.
    pub fn split_off(&mut self, bytes: usize) -> Reservation {
        let mut split = Reservation::default();
        let mut wanted = bytes;
        for slot in self.parts.iter_mut() {
            if wanted == 0 {
                break;
            }
            let Some(held) = slot.as_mut() else {
                continue;
            };
            let count = held.num_permits();
            if count <= wanted {
                wanted -= count;
                split.absorb(slot.take().expect("checked above"));
            } else {
                split.absorb(held.split(wanted).expect("fewer permits than held"));
                wanted = 0;
            }
        }
        split
    }

    /// Gives back all but `keep` bytes of the reservation now (all of it when it holds less).
    pub fn shrink_to(&mut self, keep: usize) {
        let held = self.bytes();
        if keep < held {
            // The split-off part is dropped at once: those bytes go back to their pools.
            drop(self.split_off(held - keep));
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.parts
            .iter()
            .flatten()
            .map(OwnedSemaphorePermit::num_permits)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reservation holds what it was given from two pools, hands bytes on with
    /// `split_off`, and every byte goes back to the pool it came from when dropped.
    #[test]
    fn reservations_from_two_pools_split_and_give_back_to_each() {
        let own = MemoryBudget::new(10);
        let shared = MemoryBudget::new(100);
        let mut held = own.try_reserve(10).unwrap();
        held.merge(shared.try_reserve(30).unwrap());
        held.merge(shared.try_reserve(5).unwrap());
        assert_eq!(held.bytes(), 45);
        let frame = held.split_off(12);
        assert_eq!((frame.bytes(), held.bytes()), (12, 33));
        drop(frame);
        assert_eq!(own.available() + shared.available(), 110 - 33);
        drop(held);
        assert_eq!((own.available(), shared.available()), (10, 100));
    }

    /// A frame waits for the shared budget and is refused after the wait; one larger than the
    /// budget is refused at once.
    #[tokio::test]
    async fn a_short_budget_makes_a_frame_wait_then_refuses_it() {
        let budget = MemoryBudget::new(10);
        let held = budget.try_reserve(8).unwrap();
        assert!(budget.try_reserve(5).is_none());
        let waited = budget.reserve(5, Duration::from_millis(10)).await;
        assert!(matches!(waited, Err(BudgetError::Exhausted { .. })));
        drop(held);
        assert!(budget.reserve(5, Duration::from_millis(10)).await.is_ok());
        assert!(matches!(
            budget.reserve(11, Duration::from_secs(60)).await,
            Err(BudgetError::LargerThanBudget { .. })
        ));
    }

    /// A reservation shrunk to what its holder uses gives the rest back at once.
    #[test]
    fn shrinking_a_reservation_gives_the_rest_back() {
        let budget = MemoryBudget::new(100);
        let mut held = budget.try_reserve(80).unwrap();
        held.shrink_to(30);
        assert_eq!((held.bytes(), budget.available()), (30, 70));
        held.shrink_to(50);
        assert_eq!(held.bytes(), 30, "shrinking never grows");
        held.shrink_to(0);
        assert_eq!(budget.available(), 100);
    }
}
