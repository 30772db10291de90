//! Leases: who may write to which partition, and with which epoch.
//!
//! * [`table`]: the local lease table (grant, renew, release, expiry) and the [`EpochInstaller`]
//!   bridge through which a grant's epoch is made durable in the writer before anyone hears of it.
//! * [`authority`]: the [`LeaseAuthority`] trait the broker service calls. It is asynchronous,
//!   because an authority backed by a coordination service (etcd, in a cluster) answers over the
//!   network; the local table is one implementation ([`LocalLeaseAuthority`]).
//!
//! Issuance lives here; enforcement lives in the segment writer's fence. The authority never
//! decides whether a write is allowed, and the writer never decides who holds a lease.

pub mod authority;
mod local;
mod table;

pub use authority::{AuthorityError, LeaseAuthority, LeaseTarget};
pub use local::LocalLeaseAuthority;
pub use table::{
    EpochInstaller, ExpiredLease, Grant, LeaseConfig, LeaseError, LeaseInfo, LeaseTable, Renewed,
    DEFAULT_MAX_SLOTS, DEFAULT_MAX_TTL_MS, DEFAULT_MIN_TTL_MS, MAX_HOLDER_BYTES, SHARED_HOLDER,
};
