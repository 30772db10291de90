//! Time as the lease authority sees it, injectable so tests can move it.
//!
//! Leases expire by a monotonic clock. The server reads [`SystemClock`]; a test that wants to
//! show a paused holder being fenced hands the server a [`ManualClock`] and advances it, instead
//! of sleeping past a TTL (slow, and flaky on a loaded machine). Only lease expiry reads this
//! clock: timeouts on sockets and long polls stay on tokio's timer, where they belong.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// The system's monotonic clock plus a forward skew that only ever grows: how a test jumps the
/// lease clock of a real `fencelog serve` process (the nemesis's `clock-jump` fault, through
/// the hidden `--test-clock-skew-file` flag), to show that a broker whose clock runs ahead
/// expires leases early yet never lets a stale epoch write. It never goes backwards: a smaller
/// skew than the current one is ignored.
#[derive(Debug, Default)]
pub struct SkewedClock {
    skew_ms: AtomicU64,
}

impl SkewedClock {
    /// A clock with no skew yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the total skew to `total` if that is ahead of the current skew; whether it moved.
    pub fn jump_to(&self, total: Duration) -> bool {
        let total_ms = u64::try_from(total.as_millis()).unwrap_or(u64::MAX);
        self.skew_ms.fetch_max(total_ms, Ordering::AcqRel) < total_ms
    }

    /// The total skew so far.
    pub fn skew(&self) -> Duration {
        Duration::from_millis(self.skew_ms.load(Ordering::Acquire))
    }
}

impl Clock for SkewedClock {
    fn now(&self) -> Instant {
        Instant::now() + self.skew()
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

    /// A skewed clock runs ahead of the system's by its skew, which only grows.
    #[test]
    fn skewed_clock_jumps_forward_only() {
        let clock = SkewedClock::new();
        assert!(clock.jump_to(Duration::from_secs(5)));
        assert!(clock.now() >= Instant::now() + Duration::from_millis(4_900));
        assert!(!clock.jump_to(Duration::from_secs(2)), "never backwards");
        assert_eq!(clock.skew(), Duration::from_secs(5));
    }
}
