//! fencelog: an append-only log server whose partitions are guarded by leases and fencing tokens.
//!
//! The crate is a library first: the server ([`server`], [`broker`], [`storage`], [`lease`],
//! and [`kafka`], the Kafka record batch conversion for the Kafka listener),
//! the async [`client`], [`testing`] (an in-process server for integration tests),
//! [`testing_proxy`] (a TCP proxy that cuts connections on cue), [`testing_link`] (a byte-level
//! link that partitions, delays or resets on cue), [`tls`] (certificates and
//! keys read from PEM files, for the server and the client) and [`metrics`] (what the server
//! does, counted and served to Prometheus). The
//! `cli` feature, on by default, adds the `fencelog` binary's command line (`cli`) and the
//! `fencelog bench` load generator (`bench`), with the dependencies only they need (clap,
//! indicatif, hdrhistogram, humantime, tracing-subscriber, jemalloc); an application that embeds
//! the server or the client turns it off with `default-features = false`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod auth;
pub mod batch;
#[cfg(feature = "cli")]
pub mod bench;
pub mod broker;
#[cfg(feature = "cli")]
pub mod cli;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod compression;
pub mod domain;
pub mod lease;
pub mod metrics;
pub mod protocol;
pub mod server;
pub mod storage;
pub mod sync;
pub mod testing;
pub mod testing_link;
pub mod testing_proxy;
pub mod tls;
