//! A histogram that the hot paths can observe without a lock or an allocation.
//!
//! prometheus-client's own `Histogram` takes a lock on every observation; one shared by every
//! partition would be a global lock on the produce path. This one is a fixed array of atomic
//! bucket counters plus an atomic sum, in integer units (nanoseconds, bytes), so an observation
//! is two relaxed `fetch_add`s. Each partition owns its own, so appenders of different
//! partitions never touch the same cache line; a scrape adds them up ([`HistogramSnapshot`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the sync (fsync) latency buckets, in nanoseconds: 50 µs to 2.5 s.
pub const SYNC_DURATION_BOUNDS_NANOS: &[u64] = &[
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    1_000_000_000,
    2_500_000_000,
];

/// Upper bounds of the request latency buckets, in nanoseconds: 50 µs to 30 s (a long poll
/// may legitimately wait its whole `max_wait`).
pub const REQUEST_DURATION_BOUNDS_NANOS: &[u64] = &[
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    1_000_000_000,
    5_000_000_000,
    30_000_000_000,
];

/// Upper bounds of the produce batch size buckets, in bytes: 128 B to 8 MiB, by fours.
pub const BATCH_BYTES_BOUNDS: &[u64] = &[
    128, 512, 2_048, 8_192, 32_768, 131_072, 524_288, 2_097_152, 8_388_608,
];

/// Nanoseconds in a second: the scale of the duration histograms when they are exposed.
pub const NANOS_PER_SECOND: f64 = 1e9;

/// Bucket counters and a sum, updated with relaxed atomics.
#[derive(Debug)]
pub struct AtomicHistogram {
    bounds: &'static [u64],
    /// One counter per bound, plus the last for values above every bound (`+Inf`). Not
    /// cumulative: an observation increments exactly one.
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl AtomicHistogram {
    /// An empty histogram with these upper bounds (ascending).
    pub fn new(bounds: &'static [u64]) -> Self {
        debug_assert!(bounds.windows(2).all(|pair| pair[0] < pair[1]));
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// Counts one observation of `value` (in the histogram's unit).
    pub fn observe(&self, value: u64) {
        let bucket = self.bounds.partition_point(|bound| *bound < value);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    /// Counts one duration (for histograms in nanoseconds).
    pub fn observe_duration(&self, duration: Duration) {
        self.observe(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
    }

    /// The upper bounds.
    pub fn bounds(&self) -> &'static [u64] {
        self.bounds
    }
}

/// A histogram's counts at one moment, or several histograms' counts added up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    bounds: &'static [u64],
    buckets: Vec<u64>,
    sum: u64,
}

impl HistogramSnapshot {
    /// Nothing counted yet, with these bounds.
    pub fn empty(bounds: &'static [u64]) -> Self {
        Self {
            bounds,
            buckets: vec![0; bounds.len() + 1],
            sum: 0,
        }
    }

    /// Adds `histogram`'s current counts (which must have the same bounds).
    pub fn add(&mut self, histogram: &AtomicHistogram) {
        debug_assert_eq!(self.bounds, histogram.bounds);
        for (total, bucket) in self.buckets.iter_mut().zip(histogram.buckets.iter()) {
            *total += bucket.load(Ordering::Relaxed);
        }
        self.sum += histogram.sum.load(Ordering::Relaxed);
    }

    /// Adds another snapshot's counts (same bounds).
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        debug_assert_eq!(self.bounds, other.bounds);
        for (total, bucket) in self.buckets.iter_mut().zip(&other.buckets) {
            *total += bucket;
        }
        self.sum += other.sum;
    }

    /// Observations counted. Computed from the buckets, so it always equals the `+Inf` bucket
    /// even while observations race the snapshot.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Sum of the observed values, in the histogram's unit.
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// `(upper bound / scale, count in that bucket)` for each bound, non-cumulative, the way
    /// prometheus-client's encoder takes them (it adds the `+Inf` bucket from the count).
    pub fn scaled_buckets(&self, scale: f64) -> Vec<(f64, u64)> {
        self.bounds
            .iter()
            .zip(&self.buckets)
            .map(|(bound, count)| (*bound as f64 / scale, *count))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value lands in the first bucket whose bound is at least the value; a value above every
    /// bound only in the count (`+Inf`); the sum is exact.
    #[test]
    fn observations_land_in_the_first_bucket_at_or_above_them() {
        let histogram = AtomicHistogram::new(&[10, 100]);
        for value in [1, 10, 11, 100, 101] {
            histogram.observe(value);
        }
        let mut snapshot = HistogramSnapshot::empty(&[10, 100]);
        snapshot.add(&histogram);
        assert_eq!(snapshot.scaled_buckets(1.0), vec![(10.0, 2), (100.0, 2)]);
        assert_eq!(snapshot.count(), 5);
        assert_eq!(snapshot.sum(), 223);
    }

    /// Snapshots of several histograms add up bucket by bucket.
    #[test]
    fn snapshots_add_up() {
        let first = AtomicHistogram::new(BATCH_BYTES_BOUNDS);
        let second = AtomicHistogram::new(BATCH_BYTES_BOUNDS);
        first.observe(100);
        second.observe(100);
        second.observe(10_000_000);
        let mut total = HistogramSnapshot::empty(BATCH_BYTES_BOUNDS);
        total.add(&first);
        total.add(&second);
        assert_eq!(total.count(), 3);
        assert_eq!(total.scaled_buckets(1.0)[0], (128.0, 2));
    }
}
