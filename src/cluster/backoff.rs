//! The one waiting rule of every retry loop against etcd and against peers: capped exponential
//! backoff with jitter.
//!
//! Every loop that tries etcd or another broker again (a compare-and-swap that lost to a
//! concurrent writer, a watch re-opened after its stream broke, a registration or a partition
//! state read that etcd did not answer, a follower's fetch that its leader did not answer or
//! refused) waits by this schedule: a step that starts at a base, doubles after each wait and
//! stops growing at a cap; each wait is the step scaled by a random factor in `[0.5, 1.0]` (the
//! rule the client's reconnect uses too). A success resets the step. Each loop names its own
//! base and cap beside it, with why.
//!
//! Why jitter: brokers racing on one key (two leaders proposing an ISR change, two deletes of a
//! topic, every broker's watch broken by the same etcd restart) fail at the same instant, and a
//! fixed schedule makes them retry in lockstep, collide again and exhaust their attempts
//! together; random waits spread them so that one of them goes first. Why a cap: a loop that
//! must go on (a watch) keeps trying about once a cap, not ever more rarely; one that gives up
//! after a number of attempts gives up within a bounded time. Why exponential: a broker whose
//! etcd is gone runs one such loop per partition; with fixed short pauses their attempts
//! summed to thousands of connects a second (issue 56), with doubling steps they fall to a
//! few a second within seconds, whatever the cause of the failure.

use std::time::Duration;

use rand::Rng;

/// The smallest jitter factor: a wait is at least half its step.
const JITTER_FACTOR_MIN: f64 = 0.5;

/// A capped exponential schedule of waits with jitter (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    base: Duration,
    cap: Duration,
    step: Duration,
}

impl Backoff {
    /// A schedule whose first step is `base` and whose steps never pass `cap` (a `cap` below
    /// `base` is raised to it).
    pub(crate) fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap: cap.max(base),
            step: base,
        }
    }

    /// The wait before the next attempt (the current step, jittered); the step then doubles, up
    /// to the cap.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let factor = rand::thread_rng().gen_range(JITTER_FACTOR_MIN..=1.0);
        self.next_delay_scaled(factor)
    }

    /// [`next_delay`](Self::next_delay) with the random factor given (clamped to
    /// `[JITTER_FACTOR_MIN, 1.0]`): the schedule itself, testable without randomness.
    fn next_delay_scaled(&mut self, factor: f64) -> Duration {
        let delay = self.step.mul_f64(factor.clamp(JITTER_FACTOR_MIN, 1.0));
        self.step = self.step.saturating_mul(2).min(self.cap);
        delay
    }

    /// Sleeps for [`next_delay`](Self::next_delay).
    pub(crate) async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// Back to the first step (after a success).
    pub(crate) fn reset(&mut self) {
        self.step = self.base;
    }
}

/// A [`Backoff`] for a retry that is not a loop of its own but a step of a periodic one (the
/// cluster driver's tick registers and opens its watch): instead of sleeping, it says whether
/// the next attempt is due yet.
#[derive(Debug, Clone)]
pub(crate) struct NextAttempt {
    backoff: Backoff,
    not_before: Option<tokio::time::Instant>,
}

impl NextAttempt {
    /// Due at once; after a failure, due after the schedule's next wait.
    pub(crate) fn new(base: Duration, cap: Duration) -> Self {
        Self {
            backoff: Backoff::new(base, cap),
            not_before: None,
        }
    }

    /// Whether an attempt may be made at `now`.
    pub(crate) fn is_due(&self, now: tokio::time::Instant) -> bool {
        self.not_before.is_none_or(|not_before| now >= not_before)
    }

    /// The attempt made at `now` failed: the next is due after the next wait.
    pub(crate) fn failed(&mut self, now: tokio::time::Instant) {
        self.not_before = Some(now + self.backoff.next_delay());
    }

    /// The attempt succeeded: the next failure waits the first step again.
    pub(crate) fn succeeded(&mut self) {
        self.backoff.reset();
        self.not_before = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(10);
    const CAP: Duration = Duration::from_millis(100);

    /// With the largest factor the waits are the steps: base, doubling, then the cap for ever.
    #[test]
    fn steps_start_at_the_base_double_and_stop_at_the_cap() {
        let mut backoff = Backoff::new(BASE, CAP);
        let waits: Vec<u64> = (0..7)
            .map(|_| backoff.next_delay_scaled(1.0).as_millis() as u64)
            .collect();
        assert_eq!(waits, [10, 20, 40, 80, 100, 100, 100]);
    }

    /// The smallest factor halves each step; factors out of range are clamped to it.
    #[test]
    fn the_jitter_factor_is_kept_between_half_and_one() {
        let mut backoff = Backoff::new(BASE, CAP);
        assert_eq!(backoff.next_delay_scaled(0.5), Duration::from_millis(5));
        assert_eq!(backoff.next_delay_scaled(0.0), Duration::from_millis(10));
        assert_eq!(backoff.next_delay_scaled(7.0), Duration::from_millis(40));
    }

    /// Random waits stay within `[step / 2, step]` of their step and are spread (two brokers
    /// that fail together do not wait alike).
    #[test]
    fn random_waits_stay_in_range_and_spread() {
        let mut steps = Backoff::new(BASE, CAP);
        let mut jittered = Backoff::new(BASE, CAP);
        let mut distinct = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let step = steps.next_delay_scaled(1.0);
            let wait = jittered.next_delay();
            assert!(
                wait >= step / 2 && wait <= step,
                "{wait:?} for step {step:?}"
            );
            distinct.insert(wait);
        }
        assert!(
            distinct.len() > 50,
            "only {} distinct waits",
            distinct.len()
        );
    }

    /// A reset starts the schedule again; a cap below the base is the base.
    #[test]
    fn reset_returns_to_the_base_and_the_cap_is_at_least_the_base() {
        let mut backoff = Backoff::new(BASE, CAP);
        for _ in 0..5 {
            backoff.next_delay_scaled(1.0);
        }
        backoff.reset();
        assert_eq!(backoff.next_delay_scaled(1.0), BASE);
        let mut flat = Backoff::new(BASE, Duration::ZERO);
        assert_eq!(flat.next_delay_scaled(1.0), BASE);
        assert_eq!(flat.next_delay_scaled(1.0), BASE);
    }

    /// An attempt is due at once, not again until the jittered wait after a failure, and at
    /// once again after a success.
    #[test]
    fn next_attempt_is_due_after_each_failure_s_wait() {
        let mut next = NextAttempt::new(BASE, CAP);
        let now = tokio::time::Instant::now();
        assert!(next.is_due(now));
        next.failed(now);
        assert!(!next.is_due(now));
        assert!(!next.is_due(now + BASE / 2 - Duration::from_millis(1)));
        assert!(next.is_due(now + BASE));
        next.failed(now + BASE);
        assert!(!next.is_due(now + BASE + BASE * 2 / 2 - Duration::from_millis(1)));
        assert!(next.is_due(now + BASE + BASE * 2));
        next.succeeded();
        assert!(next.is_due(now));
    }

    /// Sleeping waits the jittered step (on tokio's paused clock: no real time passes).
    #[tokio::test(start_paused = true)]
    async fn wait_sleeps_the_jittered_step() {
        let mut backoff = Backoff::new(BASE, CAP);
        let started = tokio::time::Instant::now();
        backoff.wait().await;
        backoff.wait().await;
        let slept = started.elapsed();
        // 5..=10 ms then 10..=20 ms; the timer rounds each sleep up to its next millisecond.
        assert!(slept >= Duration::from_millis(15) && slept <= Duration::from_millis(32));
    }
}
