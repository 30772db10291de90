//! fencelog: an append-only log server whose partitions are guarded by leases and fencing tokens.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod batch;
pub mod bench;
pub mod broker;
pub mod cli;
pub mod client;
pub mod domain;
pub mod lease;
pub mod protocol;
pub mod server;
pub mod storage;
pub mod sync;
pub mod testing;
