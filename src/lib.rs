//! fencelog: an append-only log server whose partitions are guarded by leases and fencing tokens.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod lease;
pub mod storage;
pub mod sync;
