//! fencelog: an append-only log server whose partitions are guarded by leases and fencing tokens.
#![deny(unsafe_code)]
pub mod protocol;
