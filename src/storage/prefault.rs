//! Faulting in segment pages ahead of the writer, off the append path.
//!
//! The first write to each page of a fresh file mapping takes a page fault that allocates and
//! zeroes a page-cache page; done inline, that makes appends into a new segment several times
//! slower than `pwrite`. Populating the whole segment up front would fix that but costs its full
//! size in dirty page cache per partition, and stalls whoever does it. Instead each active
//! segment asks one shared background thread to populate the next few MiB whenever the writer
//! gets within half a window of the populated edge: memory ahead of the writer stays bounded
//! (`PREFAULT_WINDOW_BYTES` per partition), and the writer never waits for it.

use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::OnceLock;

use super::mmap::MapReader;

/// How far ahead of the writer pages are populated.
pub const PREFAULT_WINDOW_BYTES: usize = 8 * 1024 * 1024;
/// Requests the background thread may have queued; more are dropped (best effort).
pub const PREFAULT_QUEUE_MAX: usize = 256;

struct Request {
    map: MapReader,
    start: usize,
    end: usize,
}

fn queue() -> &'static SyncSender<Request> {
    static QUEUE: OnceLock<SyncSender<Request>> = OnceLock::new();
    QUEUE.get_or_init(|| {
        let (sender, receiver) = mpsc::sync_channel::<Request>(PREFAULT_QUEUE_MAX);
        std::thread::Builder::new()
            .name("fencelog-prefault".into())
            .spawn(move || {
                for request in receiver {
                    request.map.populate(request.start, request.end);
                }
            })
            .expect("spawn the prefault thread");
        sender
    })
}

/// Tracks how far one segment has been populated and asks for more as the writer advances.
#[derive(Debug)]
pub struct Prefault {
    requested_upto: usize,
}

impl Prefault {
    /// Starts tracking a segment whose data ends at `written`.
    pub fn new(written: usize) -> Self {
        Self {
            requested_upto: written,
        }
    }

    /// Called after each append: when the writer is within half a window of the requested edge,
    /// asks for the next window. Never blocks; a full queue just skips (the writer then faults
    /// pages in itself, as without prefaulting).
    pub fn advance(&mut self, map: &MapReader, written: usize, capacity: usize) {
        if self.requested_upto >= capacity
            || written + PREFAULT_WINDOW_BYTES / 2 < self.requested_upto
        {
            return;
        }
        let start = self.requested_upto.max(written);
        let end = (written + PREFAULT_WINDOW_BYTES).min(capacity);
        let request = Request {
            map: map.clone(),
            start,
            end,
        };
        match queue().try_send(request) {
            Ok(()) => self.requested_upto = end,
            Err(TrySendError::Full(_)) => {}
            Err(TrySendError::Disconnected(_)) => self.requested_upto = capacity,
        }
    }
}
