//! `fencelog bench`: a throughput and latency benchmark against a real server, in the manner of
//! kafka-producer-perf-test, iggy-bench and the OpenMessaging Benchmark.
//!
//! A run creates its own topic (`bench-<mode>-<random>`), on the server at `--addr` or on one it
//! starts in-process on a temporary directory, and measures one or two *roles*:
//!
//! * [`produce`]: producers, each with its own connection and the leases of its partitions,
//!   pipelining produce requests (a bounded window per producer) built once per batch from a
//!   prebuilt value; latency is produce request to acknowledgement.
//! * [`consume`]: consumers, each with its own connection, long-polling fetches; latency is the
//!   fetch round trip (`consume` mode, after a preload) or end to end from the intended send
//!   time to receipt (`both` mode, producers and consumers together).
//! * [`failover`]: producers whose leases are handed over while the old ones keep writing with
//!   stale epochs; the log is read back to prove that no stale write landed.
//! * [`loopback`]: no server at all, a ping-pong between two threads over loopback TCP: the
//!   machine's round-trip floor beside which the latency figures are read.
//!
//! With `--protocol kafka` the same producers and consumers speak Kafka's wire protocol to the
//! server's Kafka listener through [`kafka_transport`] (producers then write without a lease;
//! `failover` is native only).
//!
//! [`runner`] drives a run from start to report; [`stats`] holds the clock (warm-up, window,
//! deadline), the HDR histograms and the report; [`timeline`] the same figures interval by
//! interval and [`report`] the HTML pictures of them (`--report`); [`config`] every limit; [`payload`] the stamped
//! values; [`pacer`] the open-loop schedule; [`progress`] the bar on stderr; [`context`] what
//! every part of a run shares; [`error`] why a run fails.
//! The figures, how to reproduce them and what bounds them are in `docs/benchmarks.md`.
//!
//! The modules depend on each other in one direction only: each uses only modules listed below
//! it, so there is no cycle. This root module only declares them and re-exports the entry
//! points; none of them imports it.
//!
//! ```text
//! runner    -> failover, consume, produce, loopback, context, stats, progress, config, error
//! loopback  -> stats, config, error
//! failover  -> produce, context, stats, payload, error
//! consume   -> produce, stats, progress, payload, error
//! produce   -> stats, config, payload, pacer, progress, error
//! context   -> config, progress, error
//! report    -> stats, timeline, cpu, config
//! stats     -> timeline, cpu, config
//! config    -> payload, error
//! payload, pacer, progress, error, timeline, cpu: leaves (nothing of the bench)
//! ```

pub mod config;
pub mod consume;
pub mod context;
pub mod cpu;
pub mod error;
pub mod failover;
pub mod kafka_transport;
pub mod loopback;
pub mod pacer;
pub mod payload;
pub mod produce;
pub mod progress;
pub mod report;
pub mod runner;
pub mod stats;
pub mod timeline;

pub use config::{BenchConfig, Mode, Protocol, StopAfter};
pub use context::RunContext;
pub use error::BenchError;
pub use payload::PayloadKind;
pub use runner::run;
