//! Wake-ups for an open-loop schedule, from a thread of their own.
//!
//! With `--rate`, batch `k` is due at `start + k * period` and its latency is measured from that
//! intended time, so a generator that sends late reports its own lateness as the server's. Tokio's
//! timer has millisecond granularity: at 1000 batches per second a batch would leave up to a
//! millisecond late, which swamps an ack latency of tens of microseconds. The pacer sleeps on an
//! OS thread (`nanosleep`, tens of microseconds of slack) and wakes the producer's task at each
//! due time; the task then sends whatever is due, as before.
//!
//! The pacer also measures its own lateness (how long after each due time its thread woke):
//! the generator's wake-up error, reported beside the latencies it inflates.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::Notify;

use super::stats::new_latency_histogram;

/// Shortest time between two wake-ups: for faster schedules the producer sends the batches that
/// fell due since the last wake-up together, rather than the pacer spinning.
pub const MIN_PACER_TICK: Duration = Duration::from_micros(100);

/// A thread that notifies a producer at the due times of its schedule; stops when dropped.
#[derive(Debug)]
pub struct Pacer {
    wake: Arc<Notify>,
    stop: Arc<AtomicBool>,
    /// Microseconds from each due time to the pacer thread's wake-up (warm-up included).
    late_us: Arc<Mutex<Histogram<u64>>>,
}

impl Pacer {
    /// Ticks at `start + k * period` for k = 1, 2, ... (at most every [`MIN_PACER_TICK`]).
    pub fn start(start: Instant, period: Duration) -> std::io::Result<Pacer> {
        let wake = Arc::new(Notify::new());
        let stop = Arc::new(AtomicBool::new(false));
        let late_us = Arc::new(Mutex::new(new_latency_histogram()));
        let (thread_wake, thread_stop) = (Arc::clone(&wake), Arc::clone(&stop));
        let thread_late_us = Arc::clone(&late_us);
        let tick = period.max(MIN_PACER_TICK);
        std::thread::Builder::new()
            .name("fencelog-pacer".into())
            .spawn(move || {
                let mut k: u64 = 0;
                while !thread_stop.load(Ordering::Acquire) {
                    k += 1;
                    let now = Instant::now();
                    let mut next = start + tick.mul_f64(k as f64);
                    if next + tick < now {
                        // Descheduled past whole ticks: skip them rather than wake in a burst
                        // (the producer sends everything due anyway), staying on the schedule's
                        // grid so that wake-ups coincide with due times.
                        k = (now - start).as_nanos().div_ceil(tick.as_nanos()) as u64;
                        next = start + tick.mul_f64(k as f64);
                    }
                    sleep_until(next);
                    let late = Instant::now().saturating_duration_since(next);
                    if let Ok(mut histogram) = thread_late_us.lock() {
                        histogram.saturating_record(late.as_micros().max(1) as u64);
                    }
                    thread_wake.notify_one();
                }
            })?;
        Ok(Pacer {
            wake,
            stop,
            late_us,
        })
    }

    /// How late the pacer thread woke after each due time so far, in microseconds.
    pub fn lateness_us(&self) -> Histogram<u64> {
        self.late_us
            .lock()
            .map_or_else(|_| new_latency_histogram(), |histogram| histogram.clone())
    }

    /// Waits for the next tick (or returns at once if one happened since the last wait).
    pub async fn tick(&self) {
        self.wake.notified().await;
    }
}

fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ticks_arrive_and_the_thread_stops_on_drop() {
        let pacer = Pacer::start(Instant::now(), Duration::from_millis(1)).unwrap();
        for _ in 0..3 {
            pacer.tick().await;
        }
        // The wake-ups before the ticks were measured.
        assert!(
            pacer.lateness_us().len() >= 2,
            "{}",
            pacer.lateness_us().len()
        );
        let stop = Arc::clone(&pacer.stop);
        drop(pacer);
        assert!(stop.load(Ordering::Acquire));
    }
}
