//! The Kafka listener (feature `kafka`): its protocol spoken raw, record batch conversion, fuzzed
//! decoding, consumer groups, topic deletion, the fetch memory budget, ACLs, and real Kafka clients
//! (kcat, Python, kafkajs).
//!
//! One module per subject; the helpers they share are in `tests/support/` (one binary per area
//! keeps the build to a few links: see `tests/support/mod.rs`).

#[path = "../support/mod.rs"]
mod support;

mod acl;
mod kafka_acls;
mod kafka_api_versions;
mod kafka_client_scenarios;
mod kafka_clients;
mod kafka_compression;
mod kafka_configs;
mod kafka_delete_records;
mod kafka_delete_topics;
mod kafka_fetch_memory;
mod kafka_fuzz_inputs;
mod kafka_group_scenarios;
mod kafka_groups;
mod kafka_kcat;
mod kafka_kip848;
mod kafka_partitions;
mod kafka_protocol;
mod kafka_protocol_admin;
mod kafka_protocol_records;
mod kafka_records;
mod kafka_transaction_clients;
mod kafka_transaction_protocol;
mod kafka_transactions;
