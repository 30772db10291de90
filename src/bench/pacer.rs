//! Wake-ups for an open-loop schedule, from a thread of their own.
//!
//! With `--rate`, batch `k` is due at `start + k * period` and its latency is measured from that
//! intended time, so a generator that sends late reports its own lateness as the server's. Tokio's
//! timer has millisecond granularity: at 1000 batches per second a batch would leave up to a
//! millisecond late, which swamps an ack latency of tens of microseconds. The pacer sleeps on an
//! OS thread (`nanosleep`, tens of microseconds of slack) and wakes the producer's task at each
//! due time; the task then sends whatever is due, as before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Shortest time between two wake-ups: for faster schedules the producer sends the batches that
/// fell due since the last wake-up together, rather than the pacer spinning.
pub const MIN_PACER_TICK: Duration = Duration::from_micros(100);

/// A thread that notifies a producer at the due times of its schedule; stops when dropped.
#[derive(Debug)]
pub struct Pacer {
    wake: Arc<Notify>,
    stop: Arc<AtomicBool>,
}

impl Pacer {
    /// Ticks at `start + k * period` for k = 1, 2, ... (at most every [`MIN_PACER_TICK`]).
    pub fn start(start: Instant, period: Duration) -> std::io::Result<Pacer> {
        let wake = Arc::new(Notify::new());
        let stop = Arc::new(AtomicBool::new(false));
        let (thread_wake, thread_stop) = (Arc::clone(&wake), Arc::clone(&stop));
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
                    thread_wake.notify_one();
                }
            })?;
        Ok(Pacer { wake, stop })
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
        let stop = Arc::clone(&pacer.stop);
        drop(pacer);
        assert!(stop.load(Ordering::Acquire));
    }
}
