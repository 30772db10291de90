//! The lease authority: the one interface through which the broker service grants, renews and
//! releases leases, whoever issues them.
//!
//! Standalone, the authority is the local lease table ([`super::LocalLeaseAuthority`]). In a
//! cluster it will be backed by etcd, so every operation returns a future: an answer may need a
//! network round trip. Whatever the implementation, the rule the fence depends on holds: the
//! grant's epoch is installed (durably) in the partition's writer *before* the future resolves,
//! so no holder ever carries an epoch the writer has not already fenced older holders with.

use std::fmt::Debug;
use std::sync::Arc;

use futures::future::BoxFuture;
use thiserror::Error;

use super::{Grant, LeaseError, LeaseInfo, Renewed};
use crate::storage::{Partition, StorageError};

/// The partition a lease operation is about, with the log whose writer enforces its epochs.
#[derive(Debug, Clone)]
pub struct LeaseTarget {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// The partition's log: the epoch installer of a grant.
    pub log: Arc<Partition>,
}

/// Why a lease operation failed, typed all the way to the wire.
#[derive(Debug, Error)]
pub enum AuthorityError {
    /// The authority refused: the lease is held, lost, or the request is invalid.
    #[error(transparent)]
    Refused(#[from] LeaseError),
    /// Making the new epoch durable failed (a full disk, out of descriptors); no lease was
    /// granted and nothing changed. Retrying may succeed once the cause is fixed.
    #[error(
        "could not install epoch {epoch} for {topic}/{partition}; no lease was granted: {source}"
    )]
    Install {
        /// Topic of the partition.
        topic: String,
        /// Index of the partition.
        partition: u32,
        /// The epoch that was being installed.
        epoch: u64,
        /// What storage said (boxed: it is large and rare).
        #[source]
        source: Box<StorageError>,
    },
    /// The authority could not be asked (its task failed; in a cluster, the coordinator is
    /// unreachable). Nothing is known to have changed.
    #[error("lease authority unavailable: {0}")]
    Unavailable(String),
}

/// Grants, renews and releases partition leases; see the module docs for the rule every
/// implementation keeps.
pub trait LeaseAuthority: Send + Sync + Debug {
    /// Grants `holder` a lease of `ttl_ms` on the target if it has no live lease, installing
    /// the new epoch in the target's writer first.
    fn acquire(
        &self,
        target: LeaseTarget,
        holder: String,
        ttl_ms: u64,
    ) -> BoxFuture<'static, Result<Grant, AuthorityError>>;

    /// Extends the live lease `lease_id`.
    fn renew(
        &self,
        target: LeaseTarget,
        lease_id: u128,
    ) -> BoxFuture<'static, Result<Renewed, AuthorityError>>;

    /// Ends the live lease `lease_id` at once.
    fn release(
        &self,
        target: LeaseTarget,
        lease_id: u128,
    ) -> BoxFuture<'static, Result<(), AuthorityError>>;

    /// Forgets every lease and grant record of `topic`, which was deleted (its partitions were
    /// retired first, so an acquire still in flight fails to install its epoch). A topic
    /// re-created under the name starts from its partitions' creation epochs, not from here.
    fn forget_topic(&self, topic: &str);

    /// The live lease of `topic/partition` now, if any: who holds it, its epoch and its time
    /// left (the console's leases view, `GET /api/leases`). Never creates anything.
    fn lookup(&self, topic: &str, partition: u32) -> Option<LeaseInfo>;
}
