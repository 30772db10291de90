//! The server-wide memory budget for request frames, so that `max_connections x max_frame_bytes`
//! cannot exhaust memory.
//!
//! Every request frame is read into memory whole before it is decoded (a produce's batch then
//! travels to storage without a copy), so without a bound a thousand clients each declaring a
//! 16 MiB frame could make the server reserve 16 GiB. The budget is one pool of bytes shared by
//! every connection of every listener: a connection reserves a frame's declared length from it
//! *before* the codec reserves any memory for the frame, and gives it back when the request's
//! response is ready (a produce's batch is appended by then). When the pool is short, the
//! connection stops reading (backpressure: the client's writes block) until enough is given back
//! or [`ServerConfig::buffer_wait`](super::ServerConfig::buffer_wait) passes; then, or at once for a
//! frame larger than the whole budget, the client is answered `RESOURCE_EXHAUSTED` and the
//! connection is closed (its frame cannot be skipped without reading it).
//!
//! Native fetch responses are not counted: the native listener sends batches as slices of the
//! memory-mapped segments (page cache the kernel can reclaim, not heap), bounded per request by
//! `max_fetch_bytes`. Kafka fetch responses are: their batches are converted into heap buffers,
//! up to 64 MiB per request, so a Kafka fetch reserves its byte limit from the same pool after
//! its long poll (a waiting consumer holds nothing), keeps what its answer really uses until the
//! answer is encoded, and gives the rest back at once ([`FetchMemory`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use thiserror::Error;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::codec::Decoder;

use crate::protocol::{FrameCodec, ProtocolError};

/// Default budget for request frames in memory, all connections together: 512 MiB.
pub const DEFAULT_MAX_BUFFER_BYTES: usize = 512 * 1024 * 1024;
/// Default longest a connection waits for budget before its client is refused.
pub const DEFAULT_BUFFER_WAIT_MS: u64 = 10_000;

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

/// The pool of bytes request frames are read into; cheap to clone.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    bytes: Arc<Semaphore>,
    total: usize,
}

/// A frame's share of the budget, given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    _permit: Option<OwnedSemaphorePermit>,
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
            return Some(Reservation { _permit: None });
        }
        Arc::clone(&self.bytes)
            .try_acquire_many_owned(count)
            .ok()
            .map(|permit| Reservation {
                _permit: Some(permit),
            })
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
            Ok(Ok(permit)) => Ok(Reservation {
                _permit: Some(permit),
            }),
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
    /// Gives back all but `keep` bytes of the reservation now (all of it when it holds less).
    pub fn shrink_to(&mut self, keep: usize) {
        let Some(permit) = self._permit.as_mut() else {
            return;
        };
        let held = permit.num_permits();
        if keep >= held {
            return;
        }
        if keep == 0 {
            self._permit = None;
            return;
        }
        // The split-off part is dropped at once: those bytes go back to the pool.
        drop(permit.split(held - keep));
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self._permit
            .as_ref()
            .map_or(0, |permit| permit.num_permits())
    }
}

/// What the budgeted codec yields.
#[derive(Debug)]
pub enum BudgetedFrame {
    /// A whole frame, with its share of the budget.
    Frame(Bytes, Reservation),
    /// The next frame declares this many bytes and the budget cannot hold them now: reserve
    /// them ([`MemoryBudget::reserve`]), hand them over with [`BudgetedCodec::grant`], and read
    /// again. Nothing of the frame was reserved meanwhile.
    NeedBudget(usize),
}

/// [`FrameCodec`] that reserves each frame's declared length from a [`MemoryBudget`] before the
/// frame's memory is reserved.
#[derive(Debug)]
pub struct BudgetedCodec {
    inner: FrameCodec,
    max_frame_bytes: usize,
    budget: MemoryBudget,
    granted: Option<Reservation>,
}

impl BudgetedCodec {
    /// Frames up to `max_frame_bytes`, reserved from `budget`.
    pub fn new(max_frame_bytes: usize, budget: MemoryBudget) -> Self {
        Self {
            inner: FrameCodec::new(max_frame_bytes),
            max_frame_bytes,
            budget,
            granted: None,
        }
    }

    /// Hands over the reservation for the frame a [`BudgetedFrame::NeedBudget`] asked for.
    pub fn grant(&mut self, reservation: Reservation) {
        self.granted = Some(reservation);
    }
}

impl Decoder for BudgetedCodec {
    type Item = BudgetedFrame;
    type Error = ProtocolError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BudgetedFrame>, ProtocolError> {
        if let (None, Some(&[a, b, c, d])) = (&self.granted, src.get(..4)) {
            let declared = usize::try_from(u32::from_be_bytes([a, b, c, d])).unwrap_or(usize::MAX);
            // Zero and oversized lengths are the inner codec's errors.
            if declared != 0 && declared <= self.max_frame_bytes {
                match self.budget.try_reserve(declared) {
                    Some(reservation) => self.granted = Some(reservation),
                    None => return Ok(Some(BudgetedFrame::NeedBudget(declared))),
                }
            }
        }
        Ok(self.inner.decode(src)?.map(|frame| {
            let reservation = self.granted.take().unwrap_or(Reservation { _permit: None });
            BudgetedFrame::Frame(frame, reservation)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(length: u32, body: &[u8]) -> BytesMut {
        let mut bytes = BytesMut::new();
        bytes.extend_from_slice(&length.to_be_bytes());
        bytes.extend_from_slice(body);
        bytes
    }

    /// A frame that fits takes its length from the budget until it is dropped; one that does
    /// not fit asks for budget without reserving anything, and is decoded once granted.
    #[tokio::test]
    async fn frames_take_their_share_and_wait_when_it_is_short() {
        let budget = MemoryBudget::new(10);
        let mut codec = BudgetedCodec::new(100, budget.clone());
        let mut first = frame(8, b"12345678");
        let Some(BudgetedFrame::Frame(body, held)) = codec.decode(&mut first).unwrap() else {
            panic!("a frame that fits is decoded");
        };
        assert_eq!(&body[..], b"12345678");
        assert_eq!(budget.available(), 2);
        let mut second = frame(5, b"abcde");
        let capacity = second.capacity();
        assert!(matches!(
            codec.decode(&mut second).unwrap(),
            Some(BudgetedFrame::NeedBudget(5))
        ));
        assert_eq!(second.capacity(), capacity, "nothing reserved for it");
        let waited = budget.reserve(5, Duration::from_millis(10)).await;
        assert!(matches!(waited, Err(BudgetError::Exhausted { .. })));
        drop(held);
        let reservation = budget.reserve(5, Duration::from_millis(10)).await.unwrap();
        codec.grant(reservation);
        assert!(matches!(
            codec.decode(&mut second).unwrap(),
            Some(BudgetedFrame::Frame(..))
        ));
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
