//! The client library against in-process servers: every API, reconnection through a proxy that cuts
//! connections, following a cluster's leaders, and consumers as streams.
//!
//! One module per subject; the helpers they share are in `tests/support/` (one binary per area
//! keeps the build to a few links: see `tests/support/mod.rs`).

#[path = "../support/mod.rs"]
mod support;

mod client_api;
mod client_cluster;
mod client_frozen_first_address;
mod client_reconnect;
mod client_transactions;
mod consumer_stream;
