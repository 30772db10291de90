//! Time as the lease authority sees it, injectable so tests can move it.
//!
//! Leases expire by a monotonic clock. The server reads [`SystemClock`]; a test that wants to
//! show a paused holder being fenced hands the server a [`ManualClock`] and advances it, instead
//! of sleeping past a TTL (slow, and flaky on a loaded machine). Only lease expiry reads this
//! clock: timeouts on sockets and long polls stay on tokio's timer, where they belong.

use std::fmt::Debug;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A source of monotonic time.
pub trait Clock: Send + Sync + Debug {
    /// The current instant; never goes backwards.
    fn now(&self) -> Instant;
}

/// The operating system's monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to: `now()` is its start plus every [`advance`] so far.
///
/// [`advance`]: ManualClock::advance
#[derive(Debug)]
pub struct ManualClock {
    start: Instant,
    elapsed: Mutex<Duration>,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A clock standing at the moment it was made.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            elapsed: Mutex::new(Duration::ZERO),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        *self.elapsed.lock().unwrap_or_else(PoisonError::into_inner) += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.start + *self.elapsed.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manual clock stands still until advanced, then moves by exactly what it was told.
    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let clock = ManualClock::new();
        let before = clock.now();
        assert_eq!(clock.now(), before);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clock.now() - before, Duration::from_millis(1500));
    }
}
