//! Clusters of brokers in one process and on the native wire, and the metadata store against a real
//! etcd.
//!
//! One module per subject; the helpers they share are in `tests/support/` (one binary per area
//! keeps the build to a few links: see `tests/support/mod.rs`).

#[path = "../support/mod.rs"]
mod support;

mod cluster_console;
mod cluster_groups;
mod cluster_in_process;
mod cluster_partitions;
mod cluster_topic_config;
mod cluster_topic_delete;
mod cluster_transactions;
mod cluster_wire;
mod etcd_meta;
