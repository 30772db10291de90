//! A repeating condition logged at most once per interval, with how often it happened between.
//!
//! Why: the driver's loop runs every tick (100 ms), and a condition that lasts (etcd down, a
//! registration refused) would otherwise write a line per tick: an operator's log fills with
//! the same sentence and the one line that matters scrolls away. The first occurrence is logged
//! at once; repeats within the interval are counted, and the next line says how many there were.

use std::time::{Duration, Instant};

/// How often a repeating condition of the driver's loop is logged at most.
pub const REPEATED_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Admits one log line per interval. See the module docs.
#[derive(Debug)]
pub(super) struct RepeatLimiter {
    interval: Duration,
    last_logged: Option<Instant>,
    suppressed: u64,
}

impl RepeatLimiter {
    /// A limiter admitting one line per `interval`.
    pub(super) fn new(interval: Duration) -> Self {
        Self {
            interval,
            last_logged: None,
            suppressed: 0,
        }
    }

    /// The condition happened at `now`: `Some(repeats not logged since the last line)` when
    /// this occurrence should be logged, `None` when it is only counted.
    pub(super) fn admit(&mut self, now: Instant) -> Option<u64> {
        let due = self
            .last_logged
            .is_none_or(|last| now.saturating_duration_since(last) >= self.interval);
        if due {
            self.last_logged = Some(now);
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }

    /// The condition ended: the next occurrence is logged at once. Returns whether it had
    /// happened at all since the last reset.
    pub(super) fn reset(&mut self) -> bool {
        self.suppressed = 0;
        self.last_logged.take().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first occurrence is logged, repeats within the interval are counted and reported
    /// with the next line, and a reset logs the next occurrence at once.
    #[test]
    fn a_repeating_condition_is_logged_once_per_interval_with_its_count() {
        let start = Instant::now();
        let mut limiter = RepeatLimiter::new(Duration::from_secs(10));
        assert_eq!(limiter.admit(start), Some(0));
        for tenth in 1..100 {
            assert_eq!(
                limiter.admit(start + Duration::from_millis(100 * tenth)),
                None
            );
        }
        assert_eq!(limiter.admit(start + Duration::from_secs(10)), Some(99));
        assert!(limiter.reset());
        assert!(!limiter.reset());
        assert_eq!(limiter.admit(start + Duration::from_secs(11)), Some(0));
    }
}
