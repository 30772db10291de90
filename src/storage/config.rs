//! Per-partition storage settings, their defaults and their limits.

use crate::domain::{ConfigError, Quantity};
/// How appends reach the disk before they are acknowledged, and the default segment size: domain
/// types shared with the broker and the protocols; storage gives the policy its meaning (see
/// [`FlushPolicy`]).
pub use crate::domain::{FlushPolicy, DEFAULT_SEGMENT_BYTES};

/// Smallest segment allowed (tests use small segments to exercise rolling).
pub const MIN_SEGMENT_BYTES: u64 = 4096;
/// Largest segment allowed: index positions are `u32`.
pub const MAX_SEGMENT_BYTES: u64 = 1 << 30;
/// Default spacing of sparse index entries.
pub const DEFAULT_INDEX_INTERVAL_BYTES: usize = 4096;
/// Default largest batch accepted.
pub const DEFAULT_MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;
/// How long the broker defers sealing a full segment of a flush `never` topic: the kernel's
/// default dirty-page expiry (`vm.dirty_expire_centisecs`), by which time it has written most
/// of the segment back on its own.
pub const NEVER_SEAL_DELAY: std::time::Duration = std::time::Duration::from_secs(30);

/// Settings of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionConfig {
    /// Size of each segment file.
    pub segment_bytes: u64,
    /// Durability of acknowledged appends.
    pub flush: FlushPolicy,
    /// Delete closed segments while the partition is larger than this.
    pub retention_bytes: Option<u64>,
    /// Delete closed segments whose newest record is older than this.
    pub retention_ms: Option<u64>,
    /// Spacing of index entries.
    pub index_interval_bytes: usize,
    /// Largest batch accepted (also bounded by the segment size).
    pub max_batch_bytes: usize,
    /// How long after a segment fills it is synced whole and the recovery point moved past it
    /// (see `seal`). Zero seals at once. Deferring only delays the recovery point, which is
    /// always safe: recovery then scans, and cuts torn data in, a few more segments. For flush
    /// `never` topics the broker uses [`NEVER_SEAL_DELAY`]: syncing each full segment at once
    /// forced all of a producer's data to disk as fast as it arrived (writeback CPU and I/O the
    /// policy does not promise; 18% of produce throughput on the bench), and a segment that
    /// retention deletes within the delay is never written at all.
    pub seal_delay: std::time::Duration,
    /// Most idempotent producers whose sequences the partition remembers (see
    /// `producer_state`); the least recently written one is forgotten beyond it.
    pub max_producers: usize,
    /// What retention does with the files of the segments it deletes: delete them, or keep them
    /// (emptied or whole) for the next rolls to reuse (see `spare`). The storage default
    /// deletes; the broker reuses them whole, within a process-wide budget
    /// ([`super::spare::WHOLE_SPARES_BUDGET_BYTES`]).
    pub segment_file_reuse: super::spare::SegmentFileReuse,
}

impl Default for PartitionConfig {
    fn default() -> Self {
        Self {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            flush: FlushPolicy::Always,
            retention_bytes: None,
            retention_ms: None,
            index_interval_bytes: DEFAULT_INDEX_INTERVAL_BYTES,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            seal_delay: std::time::Duration::ZERO,
            max_producers: super::producer_state::DEFAULT_MAX_PRODUCERS,
            segment_file_reuse: super::spare::SegmentFileReuse::Delete,
        }
    }
}

impl PartitionConfig {
    /// Checks the limits; the error names the setting, its value and what is allowed.
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_range(
            "segment_bytes",
            Quantity::Bytes(self.segment_bytes),
            Quantity::Bytes(MIN_SEGMENT_BYTES),
            Quantity::Bytes(MAX_SEGMENT_BYTES),
        )?;
        ConfigError::check_range(
            "index_interval_bytes",
            Quantity::bytes(self.index_interval_bytes),
            Quantity::Bytes(1),
            Quantity::bytes(usize::MAX),
        )?;
        ConfigError::check_range(
            "max_batch_bytes",
            Quantity::bytes(self.max_batch_bytes),
            Quantity::bytes(crate::batch::HEADER_BYTES),
            Quantity::bytes(usize::MAX),
        )?;
        if let FlushPolicy::Interval { interval_ms } = self.flush {
            ConfigError::check_positive("flush interval_ms", Quantity::Millis(interval_ms))?;
        }
        Ok(())
    }

    /// The largest batch this partition can take: the configured maximum, and never more than a
    /// segment.
    pub fn batch_limit(&self) -> usize {
        self.max_batch_bytes.min(self.segment_bytes as usize)
    }
}
