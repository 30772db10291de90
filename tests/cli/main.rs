//! Tests that run the real `fencelog` binary (feature `cli`): its commands as a user runs them,
//! TLS, hostile clients, corruption, disk trouble and kill -9 crashes of `fencelog serve`, and a
//! cluster of processes over etcd (failovers, Kafka clients, a topic deleted and re-created while
//! a broker is down), and the nemesis (randomized faults on a three-broker cluster, checked).
//!
//! One module per subject; the helpers they share are in `tests/support/` (one binary per area
//! keeps the build to a few links: see `tests/support/mod.rs`).

#[path = "../support/mod.rs"]
mod support;

mod bench_cli;
mod client_cli;
mod cluster_auth;
mod cluster_clock_jump;
mod cluster_node_ids;
mod cluster_processes;
mod cluster_topic_delete;
mod console_browser;
mod consumer_groups;
mod corruption;
mod crash_kill9;
mod demo_cli;
mod disk_trouble;
mod doc_console;
mod etcd_gone;
mod gray_failures;
mod help_examples;
mod hostile_clients;
mod hostile_p99;
mod json_scheme;
mod kafka_cluster;
mod kafka_cluster_groups;
mod kafka_cluster_transactions;
mod kafka_transactions_kill9;
mod native_transactions_kill9;
mod nemesis;
mod newcomer_hints;
mod power_loss;
mod serve_args;
mod tls;
mod topic_cli;
mod topic_delete_cli;
mod wrong_port;
