//! Kafka transactions: the coordinator's state of each transactional id (issue 31).
//!
//! A transactional id `T` names a producer across its restarts. Its [`TransactionMetadata`]
//! holds the stable producer id, the producer epoch (bumped by each `InitProducerId`, which is
//! what fences the previous instance), the transaction's [`TxnState`], the partitions in the
//! open transaction with the epoch `F` of the coordinator's lease on each (see [`coordinator`]
//! for how leases and epochs fence), the offsets held until the transaction commits, its
//! timeout and its start time.
//!
//! * [`state`]: the state machine, pure: each request is checked against the state and gives
//!   the next state, which the caller makes durable ([`store`]) *before* it answers, then
//!   installs. No I/O, so every transition is unit-tested.
//! * [`store`]: a standalone broker's durable copy, `DATA/transactions/HEX.json`, one file per
//!   transactional id written temp + fsync + rename (the same rule as group state).
//! * [`registry`]: the ids in memory, each update decided, written, then installed.
//! * [`markers`]: a transaction's outcome written into its partitions through the fence.
//! * [`coordinator`]: drives the machine with leases, markers and a timeout task.
//! * `atomic`: native atomic appends, a writer's own leased partitions committed in one step.
//! * [`cluster_partitions`]: on a cluster, the partitions reached as a client of the cluster,
//!   and the broker-to-broker questions (verification, consumer positions).
//! * [`held_offsets`]: a cluster group coordinator's memory of the positions transactions hold.
//!
//! On a cluster (docs/kafka.md, "Transactions on a cluster") every broker runs a coordinator:
//! an id's state lives in its offsets partition and moves with that partition's leader, the
//! partitions' leaders verify each transaction's first batch with its coordinator (see
//! `crate::storage::verification`), and the group's coordinator hands consumer positions to
//! the transaction's.

mod atomic;
pub mod cluster_partitions;
pub mod coordinator;
pub mod held_offsets;
pub mod markers;
pub mod partitions;
pub mod registry;
pub use super::transaction_state as state;
pub mod store;
pub mod writer;

#[cfg(test)]
mod tests;

pub use cluster_partitions::ClusterPartitions;
pub use coordinator::{CoordinatorError, PeerError, TransactionCoordinator};
pub use markers::{write_markers, MarkerError};
pub use partitions::{LocalPartitions, TransactionPartitions, TransactionParts};
pub use registry::{TransactionRegistry, UpdateError};
pub use state::{
    EndOutcome, InitOutcome, PendingOffset, TransactionMetadata, TxnError, TxnPartition, TxnState,
    MAX_PRODUCER_EPOCH,
};
pub use store::{TransactionStore, MAX_TRANSACTIONAL_ID_BYTES};
pub use writer::{OffsetsRefusal, TransactionWrite, WriteRefusal};

/// The lease holder the transaction coordinator holds a partition's lease as, while any open
/// transaction includes the partition (shown to native clients in "lease held" errors): the
/// lease table's one shared holder ([`crate::lease::SHARED_HOLDER`]).
pub const TRANSACTIONS_LEASE_HOLDER: &str = crate::lease::SHARED_HOLDER;

/// Milliseconds since the Unix epoch (transaction start times, as Kafka reports them).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}
