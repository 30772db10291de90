//! What a watch of the metadata store delivers: a snapshot of everything at one revision, then
//! every change after it, in order, on a bounded channel.
//!
//! A watcher that falls behind (its channel full) or whose position etcd compacted away cannot be
//! told what it missed one event at a time, so it gets a [`MetaEvent::Resync`] with a fresh
//! snapshot instead: replace everything known with it, and carry on with the events after it.
//! That keeps memory bounded whatever the rate of changes, and keeps the consumer simple: there
//! is one way to catch up, and it is the same as starting.

use tokio::sync::mpsc;

use super::{PartitionId, PartitionStates, TopicRecord};
use crate::cluster::{BrokerRegistration, NodeId, PartitionState, Versioned};

/// Everything in the metadata store at one revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaSnapshot {
    /// The store's revision the snapshot was read at; events after it have higher revisions.
    pub revision: i64,
    /// Live brokers, by node id.
    pub brokers: Vec<BrokerRegistration>,
    /// Topics, by name.
    pub topics: Vec<TopicRecord>,
    /// Partition states, by topic and index.
    pub partitions: PartitionStates,
}

/// One change after a watch's snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaEvent {
    /// A broker registered (or re-registered with a new value).
    BrokerUp(BrokerRegistration),
    /// A broker's registration is gone: its lease lapsed or was revoked.
    BrokerDown(NodeId),
    /// A topic was created (its partition states follow as `PartitionChanged` events), or the
    /// record of an existing one changed (its config: `MetaStore::alter_topic_config`; its
    /// partition count: `MetaStore::create_partitions`, the new states following).
    TopicCreated(TopicRecord),
    /// A topic was deleted, with all its partition states.
    TopicDeleted(String),
    /// A partition state was created or changed by compare-and-swap.
    PartitionChanged {
        /// Which partition.
        partition: PartitionId,
        /// Its new state and revision.
        state: Versioned<PartitionState>,
    },
    /// The watch could not deliver every change (its channel was full, or etcd compacted the
    /// history it needed): this fresh snapshot replaces everything known; the events that
    /// follow come after it.
    Resync(Box<MetaSnapshot>),
}

/// A watch: the snapshot it started from and the changes after it. Dropping it (or its
/// receiver) ends the watch.
#[derive(Debug)]
pub struct MetaWatch {
    /// Everything at the revision the watch starts after.
    pub snapshot: MetaSnapshot,
    /// The changes, in the order the store made them.
    pub events: mpsc::Receiver<MetaEvent>,
}
