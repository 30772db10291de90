//! The bound on sealed segments held open: after a restart, sealed segments are opened (file
//! mapped, end of data found) on first use, and this cache closes the least recently used ones
//! again once more than [`OPEN_SEALED_SEGMENTS_MAX`] are open, so reading through a large log
//! does not leave one map per segment behind.
//!
//! Why a bound at all: every open segment is a memory map, and maps are a per-process resource
//! (`vm.max_map_count`, 65,530 by default, page tables, the kernel's map tree); a broker keeping
//! 100 GB in 64 MiB segments would otherwise end up with thousands of maps nobody reads. Why per
//! process rather than per broker: for the same reason, the limit the kernel enforces is the
//! process's.
//!
//! The policy is CLOCK (second chance), so that a read of an open segment costs one relaxed
//! atomic store and never this cache's lock: a use sets the segment's `referenced` flag; when
//! the cache is over its limit it takes the oldest entry, and closes it unless its flag was set
//! since the last pass, in which case the flag is cleared and the entry goes to the back. A
//! closed segment keeps what was learned about it (data length, largest timestamp, how much was
//! checked, any corruption found), so reopening it costs only the file open and the map.
//!
//! Closing drops the cache's handle on the map; a fetch still holding `Bytes` of it keeps the
//! map alive until it is done (the bound is on what the cache holds, not on what is in flight).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};

/// Most sealed segments opened on demand that are kept open at once, in the whole process; the
/// least recently used beyond it are closed (see the module documentation). 1,024 maps of 64 MiB
/// segments cover 64 GiB of hot data, and stay far below `vm.max_map_count` next to one map per
/// partition's active segment.
pub const OPEN_SEALED_SEGMENTS_MAX: usize = 1024;

/// A segment the cache can close.
pub(crate) trait Closable: Send + Sync {
    /// Set on every use, cleared by the cache's passes.
    fn referenced(&self) -> &AtomicBool;
    /// Whether the segment is open now (it may have been closed meanwhile, e.g. deleted).
    fn is_open(&self) -> bool;
    /// Drops the segment's map and index (what it learned is kept).
    fn close(&self);
}

/// Open sealed segments, oldest first, at most `limit` of them.
#[derive(Debug)]
pub(crate) struct OpenSegments {
    limit: usize,
    ring: Mutex<VecDeque<Weak<dyn Closable>>>,
}

impl std::fmt::Debug for dyn Closable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_open() { "open" } else { "closed" })
    }
}

/// The process's cache, with the [`OPEN_SEALED_SEGMENTS_MAX`] limit.
pub(crate) static OPEN_SEALED_SEGMENTS: LazyLock<Arc<OpenSegments>> =
    LazyLock::new(|| Arc::new(OpenSegments::new(OPEN_SEALED_SEGMENTS_MAX)));

impl OpenSegments {
    /// An empty cache keeping at most `limit` segments open (at least one).
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            ring: Mutex::new(VecDeque::new()),
        }
    }

    /// Records that `segment` was just opened, and closes whatever the limit no longer allows
    /// (never `segment` itself). Call without holding any segment's lock: closing takes them.
    pub(crate) fn admit(&self, segment: Weak<dyn Closable>) {
        let victims = {
            let mut ring = self.ring.lock().expect("open segments lock poisoned");
            ring.push_back(segment.clone());
            if ring.len() > self.limit {
                // Segments deleted or closed meanwhile free their place first.
                ring.retain(|entry| entry.upgrade().is_some_and(|live| live.is_open()));
            }
            let mut victims = Vec::new();
            // Each entry is looked at most twice (once to clear its flag), so this ends.
            let mut budget = 2 * ring.len();
            while ring.len() > self.limit && budget > 0 {
                budget -= 1;
                let Some(oldest) = ring.pop_front() else {
                    break;
                };
                let Some(live) = oldest.upgrade().filter(|live| live.is_open()) else {
                    continue;
                };
                if Weak::ptr_eq(&oldest, &segment)
                    || live.referenced().swap(false, Ordering::Relaxed)
                {
                    ring.push_back(oldest);
                } else {
                    victims.push(live);
                }
            }
            victims
        };
        for victim in victims {
            victim.close();
        }
    }

    /// Segments the cache holds open now.
    pub(crate) fn open_count(&self) -> usize {
        self.ring
            .lock()
            .expect("open segments lock poisoned")
            .iter()
            .filter(|entry| entry.upgrade().is_some_and(|live| live.is_open()))
            .count()
    }
}

/// Sealed segments opened on demand that the process holds open now (at most
/// [`OPEN_SEALED_SEGMENTS_MAX`]), for metrics and tests.
pub fn open_sealed_segments() -> usize {
    OPEN_SEALED_SEGMENTS.open_count()
}

#[cfg(all(test, not(fencelog_loom)))]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Fake {
        referenced: AtomicBool,
        open: AtomicBool,
    }

    impl Closable for Fake {
        fn referenced(&self) -> &AtomicBool {
            &self.referenced
        }
        fn is_open(&self) -> bool {
            self.open.load(Ordering::Relaxed)
        }
        fn close(&self) {
            self.open.store(false, Ordering::Relaxed);
        }
    }

    fn opened(cache: &OpenSegments) -> Arc<Fake> {
        let segment = Arc::new(Fake::default());
        segment.open.store(true, Ordering::Relaxed);
        let dynamic: Arc<dyn Closable> = segment.clone();
        cache.admit(Arc::downgrade(&dynamic));
        segment
    }

    /// Beyond the limit the oldest unreferenced segment is closed; a segment used since the last
    /// pass gets a second chance; the one just opened is never the victim.
    #[test]
    fn the_least_recently_used_segment_is_closed_beyond_the_limit() {
        let cache = OpenSegments::new(2);
        let first = opened(&cache);
        let second = opened(&cache);
        first.referenced.store(true, Ordering::Relaxed);
        let third = opened(&cache);
        assert!(first.is_open(), "used since the last pass: kept");
        assert!(!second.is_open(), "the least recently used is closed");
        assert!(third.is_open());
        assert_eq!(cache.open_count(), 2);
        let fourth = opened(&cache);
        assert!(fourth.is_open());
        assert_eq!(cache.open_count(), 2);
    }

    /// Entries whose segment is gone or already closed free their place without closing
    /// anything else.
    #[test]
    fn dropped_segments_free_their_place() {
        let cache = OpenSegments::new(2);
        let first = opened(&cache);
        drop(opened(&cache));
        let third = opened(&cache);
        assert!(first.is_open() && third.is_open());
        first.close();
        let fourth = opened(&cache);
        assert!(third.is_open() && fourth.is_open());
    }
}
