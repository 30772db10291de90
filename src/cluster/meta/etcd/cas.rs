//! The one compare-and-swap retry loop of the etcd store (topic creation, deletion, config
//! change and growth; the security store's grant updates).
//!
//! Each of those changes reads what it changes and writes it in one etcd transaction that
//! compares the revisions read; when a concurrent writer changed them first, the comparison
//! fails, nothing is written, and the change is read and tried again, up to a number of attempts
//! after which it gives up with the caller's "contended" error. The attempt itself says what is
//! compared and what a lost comparison means; this loop only decides when to try again.
//!
//! Why a wait between attempts, with jitter ([`Backoff`]): the writers that collided are usually
//! brokers reacting to the same event (an election, a topic delete from two clients); trying
//! again at once, or after the same fixed pause, makes them read and collide again in lockstep
//! until all run out of attempts. A random, growing wait lets one of them commit first.

use std::future::Future;
use std::time::Duration;

use crate::cluster::backoff::Backoff;

/// First wait after a lost comparison: about one etcd transaction (a read and a commit that a
/// quorum fsyncs), by which the writer that won has usually committed.
pub const COMPARE_AND_SWAP_RETRY_BASE: Duration = Duration::from_millis(5);

/// Longest wait between two attempts: with [`super::super::TOPIC_DELETE_ATTEMPTS_MAX`] attempts
/// a change that keeps losing gives up after at most about half a second of waiting (5 + 10 +
/// 20 + 40 + 80 + 160 + 200 ms), well inside a request timeout.
pub const COMPARE_AND_SWAP_RETRY_CAP: Duration = Duration::from_millis(200);

/// Runs `attempt` until it returns `Ok(Some(_))` (swapped) or an error (returned as is), at most
/// `attempts_max` times; `Ok(None)` means the comparison was lost and nothing was written, and
/// the next attempt follows a [`Backoff`] wait (none after the last). After `attempts_max` lost
/// comparisons it returns `contended()`.
///
/// `attempt` is a plain closure returning a future (not an async closure): the future may then
/// borrow what the caller owns, and stays `Send` for the boxed futures of the store's traits.
pub(in crate::cluster::meta) async fn retry_compare_and_swap<T, E, Attempt>(
    attempts_max: usize,
    mut attempt: impl FnMut() -> Attempt,
    contended: impl FnOnce() -> E,
) -> Result<T, E>
where
    Attempt: Future<Output = Result<Option<T>, E>>,
{
    let mut backoff = Backoff::new(COMPARE_AND_SWAP_RETRY_BASE, COMPARE_AND_SWAP_RETRY_CAP);
    for attempt_number in 1..=attempts_max {
        if let Some(swapped) = attempt().await? {
            return Ok(swapped);
        }
        if attempt_number < attempts_max {
            backoff.wait().await;
        }
    }
    Err(contended())
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use tokio::time::Instant;

    use super::*;

    #[derive(Debug, PartialEq, Eq)]
    enum TestError {
        Contended,
        Refused,
    }

    /// The waits' bounds for `waits` waits of the schedule: each step halved, and each step.
    fn wait_bounds(waits: usize) -> (Duration, Duration) {
        let mut step = COMPARE_AND_SWAP_RETRY_BASE;
        let (mut least, mut most) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..waits {
            least += step / 2;
            most += step;
            step = (step * 2).min(COMPARE_AND_SWAP_RETRY_CAP);
        }
        // The timer rounds each sleep up to its next millisecond.
        (least, most + Duration::from_millis(waits as u64))
    }

    /// A comparison lost every time: exactly `attempts_max` attempts, the caller's contended
    /// error, and the backoff's waits between attempts (none after the last).
    #[tokio::test(start_paused = true)]
    async fn always_losing_gives_up_after_the_attempts_with_backoff_between() {
        let attempts = Cell::new(0);
        let started = Instant::now();
        let result: Result<(), TestError> = retry_compare_and_swap(
            8,
            || async {
                attempts.set(attempts.get() + 1);
                Ok(None)
            },
            || TestError::Contended,
        )
        .await;
        let waited = started.elapsed();
        assert_eq!(result, Err(TestError::Contended));
        assert_eq!(attempts.get(), 8);
        let (least, most) = wait_bounds(7);
        assert!(waited >= least && waited <= most, "waited {waited:?}");
    }

    /// A swap on the third attempt returns its value after two waits.
    #[tokio::test(start_paused = true)]
    async fn a_later_swap_returns_its_value() {
        let attempts = Cell::new(0);
        let started = Instant::now();
        let result = retry_compare_and_swap(
            8,
            || async {
                attempts.set(attempts.get() + 1);
                Ok::<_, TestError>((attempts.get() == 3).then_some("swapped"))
            },
            || TestError::Contended,
        )
        .await;
        let waited = started.elapsed();
        assert_eq!(result, Ok("swapped"));
        assert_eq!(attempts.get(), 3);
        let (least, most) = wait_bounds(2);
        assert!(waited >= least && waited <= most, "waited {waited:?}");
    }

    /// An error (the store unavailable, the change refused) ends the loop at once, unretried;
    /// a first-attempt swap does not wait.
    #[tokio::test(start_paused = true)]
    async fn an_error_or_a_first_swap_returns_at_once() {
        let attempts = Cell::new(0);
        let started = Instant::now();
        let refused: Result<(), TestError> = retry_compare_and_swap(
            8,
            || async {
                attempts.set(attempts.get() + 1);
                Err(TestError::Refused)
            },
            || TestError::Contended,
        )
        .await;
        assert_eq!(refused, Err(TestError::Refused));
        assert_eq!(attempts.get(), 1);
        let swapped = retry_compare_and_swap(
            8,
            || async { Ok::<_, TestError>(Some(1)) },
            || TestError::Contended,
        )
        .await;
        assert_eq!(swapped, Ok(1));
        assert_eq!(started.elapsed(), Duration::ZERO);
    }
}
