//! The server over TCP and its protocol: every native API as raw frames and through the codec,
//! its bodies and error details held to `docs/protocol.md`'s tables,
//! fuzzed parsers, the lease table and the fence end to end, authentication, metrics, topic
//! deletion, the idempotent producer through a failing network, the independent Python client, and
//! the module graph of `src/` against `docs/architecture.md`.
//!
//! One module per subject; the helpers they share are in `tests/support/` (one binary per area
//! keeps the build to a few links: see `tests/support/mod.rs`).

#[path = "../support/mod.rs"]
mod support;

mod auth;
mod console_api;
mod fault_schedule;
mod fencing_e2e;
mod fuzz_inputs;
mod lease_table;
mod manual_clock;
mod metrics;
mod module_graph;
mod module_graph_folders;
mod producer_retries;
mod protocol_codec;
mod protocol_doc_tables;
mod protocol_error_details;
mod protocol_idempotence_doc;
mod protocol_layouts;
mod protocol_offsets;
mod protocol_versions;
mod python_client;
mod server_protocol;
mod source_size;
mod spliced_produce;
mod stranger_budgets;
mod topic_delete;
mod topic_partitions;
