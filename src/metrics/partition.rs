//! What one partition counts: produce and fetch traffic, fence refusals, lease events, batch
//! sizes and sync latency.
//!
//! Every partition owns one [`PartitionMetrics`], created when the partition opens, so counting
//! is a relaxed atomic add on memory no other partition touches: no lock, no lookup by name and
//! no allocation on the append path. Nothing here is exposed until a scrape reads it
//! ([`super::exposition`] walks the broker's live topics), so a deleted partition's series
//! disappear with it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::batch::BatchHeader;

use super::histogram::{AtomicHistogram, BATCH_BYTES_BOUNDS, SYNC_DURATION_BOUNDS_NANOS};

/// Milliseconds since the Unix epoch, by the wall clock.
fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// A partition's counters. All are monotonic for the life of the partition (a restart starts
/// them again at zero, which Prometheus reads as a counter reset).
#[derive(Debug)]
pub struct PartitionMetrics {
    produce_records: AtomicU64,
    produce_bytes: AtomicU64,
    fetch_records: AtomicU64,
    fetch_bytes: AtomicU64,
    fenced: AtomicU64,
    unknown_epoch: AtomicU64,
    lease_grants: AtomicU64,
    lease_renewals: AtomicU64,
    lease_expiries: AtomicU64,
    storage_failures: AtomicU64,
    batch_bytes: AtomicHistogram,
    sync_duration: AtomicHistogram,
    /// The most recent fenced attempts, oldest first, at most [`FENCED_WRITES_KEPT`].
    recent_fenced: Mutex<VecDeque<FencedWrite>>,
    /// The most recent lease grants, oldest first, at most [`GRANTS_KEPT`]: whose each epoch
    /// was, for the console's fences view.
    recent_grants: Mutex<VecDeque<LeaseGrantRecord>>,
    /// The most recent expiries found, oldest first, at most [`GRANTS_KEPT`]: the console's
    /// timeline of a partition's leases.
    recent_expiries: Mutex<VecDeque<LeaseGrantRecord>>,
}

/// Lease grants kept per partition for the console (older ones are dropped; `lease_grants`
/// keeps counting them all).
pub const GRANTS_KEPT: usize = 32;

/// One lease grant, as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseGrantRecord {
    /// The epoch granted.
    pub epoch: u64,
    /// To whom.
    pub holder: String,
    /// When, in milliseconds since the Unix epoch (wall clock).
    pub at_ms: u64,
}

/// Fenced attempts kept per partition for the console (older ones are dropped; the counter
/// `fenced` keeps counting them all).
pub const FENCED_WRITES_KEPT: usize = 32;

/// One append the fence turned away, as the console shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FencedWrite {
    /// The epoch the append carried (`0`: a writer without a lease on a leased partition).
    pub stale_epoch: u64,
    /// The partition's epoch that refused it.
    pub current_epoch: u64,
    /// When, in milliseconds since the Unix epoch (wall clock).
    pub at_ms: u64,
}

impl Default for PartitionMetrics {
    fn default() -> Self {
        Self {
            produce_records: AtomicU64::new(0),
            produce_bytes: AtomicU64::new(0),
            fetch_records: AtomicU64::new(0),
            fetch_bytes: AtomicU64::new(0),
            fenced: AtomicU64::new(0),
            unknown_epoch: AtomicU64::new(0),
            lease_grants: AtomicU64::new(0),
            lease_renewals: AtomicU64::new(0),
            lease_expiries: AtomicU64::new(0),
            storage_failures: AtomicU64::new(0),
            batch_bytes: AtomicHistogram::new(BATCH_BYTES_BOUNDS),
            sync_duration: AtomicHistogram::new(SYNC_DURATION_BOUNDS_NANOS),
            recent_fenced: Mutex::new(VecDeque::with_capacity(FENCED_WRITES_KEPT)),
            recent_grants: Mutex::new(VecDeque::with_capacity(GRANTS_KEPT)),
            recent_expiries: Mutex::new(VecDeque::with_capacity(GRANTS_KEPT)),
        }
    }
}

/// The counters of a [`PartitionMetrics`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionCounts {
    /// Records appended and acknowledged (a producer's retry of a batch already in the log is
    /// not counted again).
    pub produce_records: u64,
    /// Bytes of those batches, in the stored format.
    pub produce_bytes: u64,
    /// Records returned to fetches (whole batches, so the first may start before the offset
    /// asked for).
    pub fetch_records: u64,
    /// Bytes of those batches.
    pub fetch_bytes: u64,
    /// Appends the fence refused: a stale epoch, or a writer without a lease on a leased
    /// partition.
    pub fenced: u64,
    /// Appends refused for carrying an epoch that was never granted.
    pub unknown_epoch: u64,
    /// Leases granted (each one installed a new epoch).
    pub lease_grants: u64,
    /// Leases renewed.
    pub lease_renewals: u64,
    /// Leases found expired (counted when the lease table notices: at the next acquire, renew
    /// or release of the partition).
    pub lease_expiries: u64,
    /// Syncs and writes of the partition's files that failed at the disk (see
    /// `docs/reliability.md`, section 3): a failure of the log's stops the partition's writes.
    pub storage_failures: u64,
}

impl PartitionMetrics {
    /// Counts an acknowledged append of `records` records in a batch of `bytes` bytes.
    pub fn produced(&self, records: u64, bytes: u64) {
        self.produce_records.fetch_add(records, Ordering::Relaxed);
        self.produce_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.batch_bytes.observe(bytes);
    }

    /// Counts `records` records in `bytes` bytes returned to a fetch.
    pub fn fetched(&self, records: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.fetch_records.fetch_add(records, Ordering::Relaxed);
        self.fetch_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts the batches returned to a fetch (whole stored batches).
    pub fn fetched_batches(&self, batches: &[bytes::Bytes]) {
        let mut records = 0u64;
        let mut bytes = 0u64;
        for batch in batches {
            records += BatchHeader::parse(batch).map_or(0, |header| u64::from(header.record_count));
            bytes += batch.len() as u64;
        }
        self.fetched(records, bytes);
    }

    /// Counts an append the fence refused as stale (or unleased on a leased partition).
    pub fn fenced(&self) {
        self.fenced.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a fenced append (as [`PartitionMetrics::fenced`]) and keeps it in the bounded ring
    /// of recent fenced attempts. Called on the refusal path only, after the fence answered, so
    /// the short lock never sits on an accepted append.
    pub fn fenced_write(&self, stale_epoch: u64, current_epoch: u64) {
        self.fenced();
        let at_ms = wall_clock_ms();
        let mut recent = self
            .recent_fenced
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if recent.len() == FENCED_WRITES_KEPT {
            recent.pop_front();
        }
        recent.push_back(FencedWrite {
            stale_epoch,
            current_epoch,
            at_ms,
        });
    }

    /// The recent fenced attempts, oldest first (at most [`FENCED_WRITES_KEPT`]).
    pub fn recent_fenced(&self) -> Vec<FencedWrite> {
        self.recent_fenced
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .copied()
            .collect()
    }

    /// Counts an append refused for an epoch never granted.
    pub fn unknown_epoch(&self) {
        self.unknown_epoch.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a lease grant.
    pub fn lease_granted(&self) {
        self.lease_grants.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a grant of `epoch` to `holder` (as [`PartitionMetrics::lease_granted`]) and keeps
    /// it in the bounded ring of recent grants.
    pub fn lease_granted_to(&self, epoch: u64, holder: &str) {
        self.lease_granted();
        keep(
            &self.recent_grants,
            LeaseGrantRecord {
                epoch,
                holder: holder.to_string(),
                at_ms: wall_clock_ms(),
            },
        );
    }

    /// The recent lease grants, oldest first (at most [`GRANTS_KEPT`]).
    pub fn recent_grants(&self) -> Vec<LeaseGrantRecord> {
        kept(&self.recent_grants)
    }

    /// Counts an expiry (as [`PartitionMetrics::lease_expired`]) and keeps it, with the time
    /// the lease ran out, in the bounded ring of recent expiries.
    /// `expired_for`: how long ago the lease of `epoch` held by `holder` ran out.
    pub fn lease_expired_at(&self, epoch: u64, holder: &str, expired_for: Duration) {
        self.lease_expired();
        let ago = u64::try_from(expired_for.as_millis()).unwrap_or(u64::MAX);
        keep(
            &self.recent_expiries,
            LeaseGrantRecord {
                epoch,
                holder: holder.to_string(),
                at_ms: wall_clock_ms().saturating_sub(ago),
            },
        );
    }

    /// The recent expiries found, oldest first (at most [`GRANTS_KEPT`]), each with the time
    /// its lease ran out.
    pub fn recent_expiries(&self) -> Vec<LeaseGrantRecord> {
        kept(&self.recent_expiries)
    }

    /// Counts a lease renewal.
    pub fn lease_renewed(&self) {
        self.lease_renewals.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a lease that ran out without being renewed or released.
    pub fn lease_expired(&self) {
        self.lease_expiries.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a sync or write of one of the partition's files that failed at the disk.
    pub fn storage_failed(&self) {
        self.storage_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one sync (fsync of the written ranges) that took `duration`.
    pub fn synced(&self, duration: Duration) {
        self.sync_duration.observe_duration(duration);
    }

    /// The counters now.
    pub fn counts(&self) -> PartitionCounts {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        PartitionCounts {
            produce_records: load(&self.produce_records),
            produce_bytes: load(&self.produce_bytes),
            fetch_records: load(&self.fetch_records),
            fetch_bytes: load(&self.fetch_bytes),
            fenced: load(&self.fenced),
            unknown_epoch: load(&self.unknown_epoch),
            lease_grants: load(&self.lease_grants),
            lease_renewals: load(&self.lease_renewals),
            lease_expiries: load(&self.lease_expiries),
            storage_failures: load(&self.storage_failures),
        }
    }

    /// Sizes of the batches appended, in bytes.
    pub fn batch_bytes(&self) -> &AtomicHistogram {
        &self.batch_bytes
    }

    /// Durations of the syncs, in nanoseconds.
    pub fn sync_duration(&self) -> &AtomicHistogram {
        &self.sync_duration
    }
}

/// Adds `record` to a ring of at most [`GRANTS_KEPT`], dropping the oldest.
fn keep(ring: &Mutex<VecDeque<LeaseGrantRecord>>, record: LeaseGrantRecord) {
    let mut ring = ring
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if ring.len() == GRANTS_KEPT {
        ring.pop_front();
    }
    ring.push_back(record);
}

/// A copy of a ring, oldest first.
fn kept(ring: &Mutex<VecDeque<LeaseGrantRecord>>) -> Vec<LeaseGrantRecord> {
    ring.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ring keeps the newest attempts, oldest first, and the counter counts them all.
    #[test]
    fn fenced_ring_keeps_the_most_recent() {
        let metrics = PartitionMetrics::default();
        for stale in 0..(FENCED_WRITES_KEPT as u64 + 3) {
            metrics.fenced_write(stale, 100);
        }
        let recent = metrics.recent_fenced();
        assert_eq!(recent.len(), FENCED_WRITES_KEPT);
        assert_eq!(recent[0].stale_epoch, 3);
        assert_eq!(recent.last().unwrap().current_epoch, 100);
        assert_eq!(metrics.counts().fenced, FENCED_WRITES_KEPT as u64 + 3);
    }
}
