//! The replication and election logic of a partition, sans I/O: plain state machines that take
//! inputs (a follower's fetch, the current time, a partition state read from the metadata store
//! with its revision, the live brokers) and return decisions (what to answer, which
//! compare-and-swap to propose, where to truncate, which `acks=all` producers to answer).
//!
//! Nothing here touches a socket, etcd, a clock or a random number generator, so the same code
//! runs in the broker (driven by real I/O) and in the deterministic simulation
//! (`tests/replication_sim.rs`, driven by a seeded schedule of faults). Reads of a partition's
//! log come in through [`ReplicaLog`]'s query methods; every change to the log (become leader or
//! follower, truncate, append, raise the high watermark) is returned as a decision the driver
//! applies. The design is `docs/replication.md`.
//!
//! Time is a `u64` of milliseconds (`now_ms`) on the driver's monotonic clock: a plain number is
//! what a simulation advances, prints in a trace and replays, and what lease TTLs and
//! `replica_lag_max_ms` are configured in. The broker passes the milliseconds elapsed since
//! its start on `std::time::Instant`.
//!
//! - [`leader`]: the leader's view of a partition (follower progress, ISR, high watermark,
//!   `acks=all` waiters, ISR proposals).
//! - [`follower`]: the follower's steps (become follower, truncate by leader epoch, fetch).
//! - [`election`]: whether and when a broker proposes itself as leader.
//! - [`node`]: one broker's replica as one state machine over the three (`step(input, now) ->
//!   effects`), what the broker's driver and the simulation both run.
//! - [`epoch_range`]: which leader epoch wrote a given offset, from the leader-epoch history.
//! - [`lineage`]: whether a local copy of a topic is of the store's topic of that name or of a
//!   deleted one (a topic deleted and re-created), by its leader epochs.

pub mod election;
pub mod epoch_range;
pub mod follower;
pub mod leader;
pub mod lineage;
pub mod node;

use std::collections::BTreeMap;

use thiserror::Error;

pub use super::replica_log::ReplicaLog;
use super::{LeaderEpoch, NodeId, PartitionState};

/// The live brokers as last read from the metadata store: node id -> incarnation of its current
/// registration.
pub type LiveBrokers = BTreeMap<NodeId, u64>;

/// Default of [`ReplicationConfig::replica_lag_max_ms`].
pub const DEFAULT_REPLICA_LAG_MAX_MS: u64 = 10_000;
/// Default of [`ReplicationConfig::acks_all_timeout_ms`].
pub const DEFAULT_ACKS_ALL_TIMEOUT_MS: u64 = 30_000;
/// Default of [`ReplicationConfig::acks_all_waiters_max`].
pub const DEFAULT_ACKS_ALL_WAITERS_MAX: usize = 10_000;
/// Default of [`ReplicationConfig::election_backoff_ms`].
pub const DEFAULT_ELECTION_BACKOFF_MS: u64 = 1_000;
/// Default of [`ReplicationConfig::epoch_end_rounds_max`].
pub const DEFAULT_EPOCH_END_ROUNDS_MAX: u32 = 64;
/// Default of [`ReplicationConfig::pipelined_fetches`]: off. On one 2-core machine running
/// three brokers, pipelining cost the brokers 15% more CPU per byte replicated (more, smaller
/// fetches, and a report per append) and so lowered factor-3 throughput (`docs/benchmarks.md`);
/// its gain, overlapping a follower's transfer with its append, needs brokers with cores of
/// their own.
pub const DEFAULT_PIPELINED_FETCHES: bool = false;

/// The limits and timers of replication. Every limit has a name, a default and an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationConfig {
    /// A follower that has not caught up with the leader's log end for this long leaves the ISR.
    pub replica_lag_max_ms: u64,
    /// An `acks=all` produce not committed within this long is answered with a timeout.
    pub acks_all_timeout_ms: u64,
    /// At most this many `acks=all` produces wait for the high watermark per partition; more are
    /// refused before anything is written.
    pub acks_all_waiters_max: usize,
    /// When a partition has no live leader, the live ISR member at position `p` (in replica
    /// order, among the live ISR members) proposes itself after `p * election_backoff_ms`.
    pub election_backoff_ms: u64,
    /// A follower asks the leader for the end of its latest epoch at most this many times in a
    /// row (each round cuts at least one epoch of a diverging suffix); then it re-reads metadata.
    pub epoch_end_rounds_max: u32,
    /// A follower of this broker asks for the records after those it is appending while it
    /// appends them, and reports its log end once done (`follower`'s pipelined fetches); off,
    /// it fetches, appends, then fetches again.
    pub pipelined_fetches: bool,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        ReplicationConfig {
            replica_lag_max_ms: DEFAULT_REPLICA_LAG_MAX_MS,
            acks_all_timeout_ms: DEFAULT_ACKS_ALL_TIMEOUT_MS,
            acks_all_waiters_max: DEFAULT_ACKS_ALL_WAITERS_MAX,
            election_backoff_ms: DEFAULT_ELECTION_BACKOFF_MS,
            epoch_end_rounds_max: DEFAULT_EPOCH_END_ROUNDS_MAX,
            pipelined_fetches: DEFAULT_PIPELINED_FETCHES,
        }
    }
}

/// A [`ReplicationConfig`] that cannot work.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ReplicationConfigError {
    /// A timer or limit is zero.
    #[error("replication setting `{name}` must be above zero; leave it out to use the default")]
    Zero {
        /// The setting's name.
        name: &'static str,
    },
}

impl ReplicationConfig {
    /// Checks that every limit can work.
    pub fn validate(&self) -> Result<(), ReplicationConfigError> {
        let zero = [
            ("replica_lag_max_ms", self.replica_lag_max_ms == 0),
            ("acks_all_timeout_ms", self.acks_all_timeout_ms == 0),
            ("acks_all_waiters_max", self.acks_all_waiters_max == 0),
            ("election_backoff_ms", self.election_backoff_ms == 0),
            ("epoch_end_rounds_max", self.epoch_end_rounds_max == 0),
        ];
        match zero.iter().find(|(_, is_zero)| *is_zero) {
            Some((name, _)) => Err(ReplicationConfigError::Zero { name }),
            None => Ok(()),
        }
    }
}

/// A compare-and-swap to send to the metadata store: write `state` if the partition key is still
/// at `expected_revision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// The revision the proposer read.
    pub expected_revision: i64,
    /// The state to write.
    pub state: PartitionState,
}

/// What became of a [`Proposal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CasOutcome {
    /// Written; the key is now at `revision`.
    Applied {
        /// The key's new revision.
        revision: i64,
    },
    /// The key had moved on: someone else wrote it. Re-read it.
    Conflict,
    /// No answer (the store was unreachable or the answer was lost): the write may or may not
    /// have happened, and may still happen while the key is at the expected revision. Re-read it.
    Unknown,
}

/// A follower's fetch (a replica fetch): who asks, under which leader epoch, from where, and how
/// far its own log reaches. The two offsets differ while the follower still appends the records
/// of its previous fetch (a pipelined fetch): it asks for what follows them before they are in
/// its log, and only `log_end_offset` counts towards the high watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchRequest {
    /// The follower.
    pub follower: NodeId,
    /// The follower's incarnation (random per process start).
    pub incarnation: u64,
    /// The leader epoch the follower follows.
    pub leader_epoch: LeaderEpoch,
    /// The first offset the follower wants.
    pub fetch_offset: u64,
    /// The follower's log end: everything below it is appended (and, under `flush always`,
    /// synced) on the follower. At most `fetch_offset` (a larger one is read as `fetch_offset`).
    pub log_end_offset: u64,
    /// A progress report only: the leader records `log_end_offset` and sends no records.
    pub report_only: bool,
}

impl FetchRequest {
    /// The follower's log end as the leader may count it: never past what it asked from.
    pub fn reported_log_end(&self) -> u64 {
        self.log_end_offset.min(self.fetch_offset)
    }
}

/// A follower's question before it fetches (Kafka's OffsetsForLeaderEpoch): where did `epoch`
/// end in the leader's log?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEndRequest {
    /// The follower.
    pub follower: NodeId,
    /// The leader epoch the follower follows (checked like a fetch's).
    pub leader_epoch: LeaderEpoch,
    /// The latest epoch of the follower's leader-epoch history.
    pub epoch: LeaderEpoch,
}

/// The leader's answer to a fetch it serves: the driver reads the records `[from_offset,
/// to_offset)` (all written in `records_epoch`; it may send fewer, from the start, to bound the
/// response) and sends them with the high watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchServe {
    /// The fetch offset: the first record to send.
    pub from_offset: u64,
    /// The end of the range (the end of `records_epoch` in the leader's log, or its log end).
    /// Equal to `from_offset` when the follower is caught up.
    pub to_offset: u64,
    /// The leader epoch that wrote every record in the range.
    pub records_epoch: LeaderEpoch,
    /// The leader's high watermark.
    pub high_watermark: u64,
}

/// What the follower receives back for a served fetch (the records travel beside it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchResponse {
    /// Offset of the first record sent (the fetch offset).
    pub base_offset: u64,
    /// How many records were sent.
    pub record_count: u64,
    /// The leader epoch that wrote them.
    pub records_epoch: LeaderEpoch,
    /// The leader's high watermark.
    pub high_watermark: u64,
}

/// Why a leader refused a fetch or an epoch-end question. Nothing was served.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum FetchError {
    /// The follower follows an older leader epoch: it must re-read the partition state.
    #[error("fenced leader epoch: the follower sent {epoch}, the leader is at {current}; re-read the partition state")]
    FencedLeaderEpoch {
        /// The epoch the follower sent.
        epoch: LeaderEpoch,
        /// The leader's epoch.
        current: LeaderEpoch,
    },
    /// This broker does not lead the partition (any more): re-read the partition state.
    #[error("not the leader of this partition; re-read the partition state")]
    NotLeader,
    /// The asker is not a replica of the partition.
    #[error("broker {follower} is not a replica of this partition")]
    NotAReplica {
        /// The asker.
        follower: NodeId,
    },
    /// The fetch offset is below the leader's log start: the records the follower would fetch
    /// next were deleted (retention, DeleteRecords). A follower whose whole log lies below it
    /// starts its log over there (Kafka's follower does the same).
    #[error("fetch offset {fetch_offset} is below the leader's log start {log_start_offset}; the follower starts its log over there")]
    BelowLogStart {
        /// The fetch offset.
        fetch_offset: u64,
        /// The leader's log start offset.
        log_start_offset: u64,
    },
    /// The fetch offset is past the leader's log end: the follower cuts its log to the leader's
    /// high watermark (its log reaches at least that far) and truncates by leader epoch again.
    #[error("fetch offset {fetch_offset} is past the leader's log end (its high watermark is {high_watermark}); truncate by leader epoch and fetch again")]
    OffsetOutOfRange {
        /// The fetch offset.
        fetch_offset: u64,
        /// The leader's high watermark: its log reaches at least this far (sent on the wire,
        /// where the log end is not).
        high_watermark: u64,
    },
}
