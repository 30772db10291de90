//! Figures over time, for `fencelog bench --report`: the measurement window cut into equal
//! intervals, each with the records and bytes completed in it and a histogram of their
//! latencies. A run's totals and percentiles say how fast it was; the time line says whether it
//! was steady (a stall, a slow start, a latency that creeps up as the page cache fills).
//!
//! Bounded: at most [`MAX_TIMELINE_BUCKETS`] intervals. A run longer than that many intervals
//! doubles the interval and folds neighbours together, so a time line of any length costs the
//! same memory and keeps covering the whole run. A leaf module: it knows no other part of the
//! bench.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Intervals kept per time line (more folds neighbours together, see the module docs).
pub const MAX_TIMELINE_BUCKETS: usize = 256;

/// Highest latency an interval's histogram holds (larger values are clamped): one hour.
const HIGHEST_US: u64 = 3_600_000_000;

/// Significant digits of an interval's histogram: 1% resolution is plenty for a plot, and keeps
/// each interval's histogram a few kilobytes.
const SIGNIFICANT_DIGITS: u8 = 2;

/// One interval of a time line.
#[derive(Debug, Clone)]
pub struct Bucket {
    /// Records completed in the interval.
    pub records: u64,
    /// Their value bytes.
    pub bytes: u64,
    /// Their latencies in microseconds.
    pub latency_us: Histogram<u64>,
}

impl Bucket {
    fn new() -> Self {
        Self {
            records: 0,
            bytes: 0,
            latency_us: Histogram::new_with_bounds(1, HIGHEST_US, SIGNIFICANT_DIGITS)
                .expect("valid histogram bounds"),
        }
    }

    fn add(&mut self, other: &Bucket) {
        self.records += other.records;
        self.bytes += other.bytes;
        self.latency_us
            .add(&other.latency_us)
            .expect("histograms with the same bounds");
    }
}

/// The figures of a measurement window, interval by interval.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// Where the first interval starts (the end of the warm-up).
    start: Instant,
    /// The length of each interval (doubles when the run outgrows the buckets).
    interval: Duration,
    /// The intervals from `start`, the last one being the latest with an event.
    buckets: Vec<Bucket>,
    /// The interval the last counted event fell in: its latency goes there.
    current: usize,
}

impl Timeline {
    /// An empty time line from `start`, cut into `interval`s (at least a millisecond).
    pub fn new(start: Instant, interval: Duration) -> Self {
        Self {
            start,
            interval: interval.max(Duration::from_millis(1)),
            buckets: Vec::new(),
            current: 0,
        }
    }

    /// The length of each interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The intervals, from the start of the measurement window.
    pub fn buckets(&self) -> &[Bucket] {
        &self.buckets
    }

    /// Counts `records` of `bytes` completed at `at`; the latencies recorded next belong to
    /// them.
    pub fn count(&mut self, records: u64, bytes: u64, at: Instant) {
        let index = self.index_of(at);
        let bucket = &mut self.buckets[index];
        bucket.records += records;
        bucket.bytes += bytes;
        self.current = index;
    }

    /// Records one latency, `weight` times, in the interval of the last counted event.
    pub fn latency(&mut self, latency_us: u64, weight: u64) {
        if self.buckets.is_empty() {
            self.buckets.push(Bucket::new());
        }
        let index = self.current.min(self.buckets.len() - 1);
        self.buckets[index]
            .latency_us
            .record_n(latency_us.clamp(1, HIGHEST_US), weight)
            .expect("value clamped to the histogram's range");
    }

    /// Adds another time line of the same window (another producer's or consumer's).
    pub fn merge(&mut self, other: &Timeline) {
        while self.interval < other.interval {
            self.coarsen();
        }
        let mut other = other.clone();
        while other.interval < self.interval {
            other.coarsen();
        }
        let shift =
            other.start.saturating_duration_since(self.start).as_nanos() / self.interval.as_nanos();
        for (index, bucket) in other.buckets.iter().enumerate() {
            let at = self.start
                + self.interval * u32::try_from(index as u128 + shift).unwrap_or(u32::MAX);
            let target = self.index_of(at);
            self.buckets[target].add(bucket);
        }
    }

    /// The interval `at` falls in, growing (or folding) the buckets to hold it.
    fn index_of(&mut self, at: Instant) -> usize {
        let elapsed = at.saturating_duration_since(self.start).as_nanos();
        let mut index = (elapsed / self.interval.as_nanos()) as usize;
        while index >= MAX_TIMELINE_BUCKETS {
            self.coarsen();
            index = (elapsed / self.interval.as_nanos()) as usize;
        }
        while self.buckets.len() <= index {
            self.buckets.push(Bucket::new());
        }
        index
    }

    /// Doubles the interval: each pair of neighbours becomes one bucket.
    fn coarsen(&mut self) {
        let buckets = std::mem::take(&mut self.buckets);
        let mut folded = Vec::with_capacity(buckets.len().div_ceil(2));
        let mut pairs = buckets.into_iter();
        while let Some(mut first) = pairs.next() {
            if let Some(second) = pairs.next() {
                first.add(&second);
            }
            folded.push(first);
        }
        self.buckets = folded;
        self.current /= 2;
        self.interval *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_land_in_their_interval_with_their_latencies() {
        let start = Instant::now();
        let mut timeline = Timeline::new(start, Duration::from_millis(100));
        timeline.count(10, 1000, start + Duration::from_millis(50));
        timeline.latency(7, 10);
        timeline.count(5, 500, start + Duration::from_millis(250));
        timeline.latency(900, 5);
        let buckets = timeline.buckets();
        assert_eq!(buckets.len(), 3);
        assert_eq!((buckets[0].records, buckets[0].bytes), (10, 1000));
        assert_eq!(buckets[0].latency_us.max(), 7);
        assert_eq!(buckets[1].records, 0);
        assert_eq!(buckets[2].records, 5);
        assert!((890..=910).contains(&buckets[2].latency_us.max()));
    }

    #[test]
    fn a_long_run_folds_neighbours_and_keeps_every_record() {
        let start = Instant::now();
        let mut timeline = Timeline::new(start, Duration::from_millis(10));
        for n in 0..(MAX_TIMELINE_BUCKETS as u64 * 3) {
            timeline.count(1, 1, start + Duration::from_millis(10 * n + 5));
            timeline.latency(n + 1, 1);
        }
        assert!(timeline.buckets().len() <= MAX_TIMELINE_BUCKETS);
        assert_eq!(timeline.interval(), Duration::from_millis(40));
        let records: u64 = timeline.buckets().iter().map(|b| b.records).sum();
        let latencies: u64 = timeline.buckets().iter().map(|b| b.latency_us.len()).sum();
        assert_eq!(records, MAX_TIMELINE_BUCKETS as u64 * 3);
        assert_eq!(latencies, records);
    }

    #[test]
    fn merged_time_lines_add_interval_by_interval() {
        let start = Instant::now();
        let mut a = Timeline::new(start, Duration::from_millis(100));
        let mut b = Timeline::new(start, Duration::from_millis(100));
        a.count(1, 10, start + Duration::from_millis(10));
        b.count(2, 20, start + Duration::from_millis(20));
        b.count(3, 30, start + Duration::from_millis(120));
        a.merge(&b);
        let records: Vec<u64> = a.buckets().iter().map(|b| b.records).collect();
        assert_eq!(records, vec![3, 3]);
    }
}
