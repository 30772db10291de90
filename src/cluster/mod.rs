//! The cluster: partitions replicated over several brokers, coordinated by etcd.
//!
//! Standalone (`fencelog serve` without `--etcd`) none of this runs. In a cluster, etcd is the
//! one component that agrees on anything: which brokers are alive (a registration key under an
//! etcd lease) and, per partition, `{replicas, leader, leader_epoch, isr}`, changed only by
//! compare-and-swap on the key's revision. etcd's leases are a liveness tool only; safety comes
//! from the *leader epoch*, checked in each follower's segment writer exactly as the producer
//! epoch is checked in the leader's (see `docs/replication.md`).
//!
//! This module holds the vocabulary every part of the cluster shares; the parts live in
//! submodules:
//! - `meta`: the metadata store (etcd, and an in-memory stand-in for the simulation);
//! - `replication`: the replication and election logic, sans I/O (driven by the broker in a
//!   cluster and by the deterministic simulation in tests);
//! - [`replica_log`]: what the replication logic needs from a partition's log;
//! - `backoff`: the capped, jittered exponential wait of every retry loop against etcd and
//!   against peers (the store's, the driver's and the followers').

pub(crate) mod backoff;
pub mod meta;
pub mod partition_log;
pub mod replica_log;

use serde::{Deserialize, Serialize};

/// The cluster's numbers live in `crate::domain` (storage, the protocol and the client name them
/// too); re-exported here where the cluster code has always found them.
pub use crate::domain::{leader_epoch_of_producer_epoch, producer_epoch_base, LeaderEpoch, NodeId};

/// A live broker, as registered in etcd under the broker's lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    /// `serve --node-id`.
    pub node_id: NodeId,
    /// Where clients and other brokers reach its native listener (`--advertise`, else
    /// `--listen`).
    pub native_addr: String,
    /// Where Kafka clients reach it, when its Kafka listener is on.
    pub kafka_addr: Option<String>,
    /// Random per process start. A broker that restarted (perhaps with an empty disk) is not the
    /// replica it was: it re-enters an ISR only by catching up again (KIP-903).
    pub incarnation: u64,
    /// When it registered (this registration, not the process's first), in milliseconds since
    /// the Unix epoch by its own clock: the console's registration age. Absent from a broker of
    /// an older version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered_at_ms: Option<u64>,
}

/// One partition's replication state, the value of its key in etcd. Changed only by
/// compare-and-swap against the revision it was read at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    /// The brokers that hold a copy, in preference order (the first is the preferred leader).
    pub replicas: Vec<NodeId>,
    /// The broker that leads, or `None` while no in-sync replica is alive (the partition is
    /// offline; no unclean election).
    pub leader: Option<NodeId>,
    /// Raised by one on every change of `leader` (including to and from `None`).
    pub leader_epoch: LeaderEpoch,
    /// In-sync replicas: the leader and the followers caught up with it. Only these may become
    /// leader.
    pub isr: Vec<NodeId>,
    /// The smallest ISR with which the leader accepts `acks=all` writes.
    pub min_insync: u16,
}

/// A value read from the metadata store with the revision a compare-and-swap must present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    /// The value.
    pub value: T,
    /// etcd's `mod_revision` of the key (or the stand-in's equivalent).
    pub revision: i64,
}

pub mod replication;
