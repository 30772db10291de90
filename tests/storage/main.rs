//! The storage engine through its public API: partitions, segments and recovery, the crash and
//! corruption cases, the on-disk format against `docs/storage-format.md`, the replica log,
//! thousands of partitions, and old data directories.
//!
//! One module per subject; the helpers they share are in `tests/support/` (one binary per area
//! keeps the build to a few links: see `tests/support/mod.rs`).

#[path = "../support/mod.rs"]
mod support;

mod data_dir_compat;
mod delete_records;
mod follower_seal;
mod lazy_open;
mod page_cache_loss;
mod partitions_scale;
mod producer_sequences;
mod replica_log;
mod resend_outcomes;
mod segment_reuse;
mod spliced_append;
mod storage_crash;
mod storage_format_doc;
mod storage_model;
mod storage_partition;
mod transactions;
