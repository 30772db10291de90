//! This broker's view of the metadata store: a snapshot kept current by the watch's events
//! (and by what this broker's own compare-and-swaps returned, which may arrive before the watch
//! tells). A partition state only ever moves to a higher revision.

use std::collections::BTreeMap;

use crate::cluster::meta::{MetaEvent, PartitionId, TopicRecord};
use crate::cluster::replication::LiveBrokers;
use crate::cluster::{BrokerRegistration, NodeId, PartitionState, Versioned};

/// The store as this broker last saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterState {
    /// Live brokers, by node id.
    pub brokers: BTreeMap<NodeId, BrokerRegistration>,
    /// Topics, by name.
    pub topics: BTreeMap<String, TopicRecord>,
    /// Partition states with their revisions.
    pub partitions: BTreeMap<PartitionId, Versioned<PartitionState>>,
}

impl ClusterState {
    /// Applies one watch event; returns whether anything changed.
    pub fn apply(&mut self, event: MetaEvent) -> bool {
        match event {
            MetaEvent::BrokerUp(broker) => {
                self.brokers.insert(broker.node_id, broker);
            }
            MetaEvent::BrokerDown(node) => {
                self.brokers.remove(&node);
            }
            MetaEvent::TopicCreated(topic) => {
                self.topics.insert(topic.name.clone(), topic);
            }
            MetaEvent::TopicDeleted(name) => {
                self.topics.remove(&name);
                self.partitions.retain(|id, _| id.topic != name);
            }
            MetaEvent::PartitionChanged { partition, state } => {
                return self.observe_partition(&partition, &state);
            }
            MetaEvent::Resync(snapshot) => {
                self.brokers = snapshot
                    .brokers
                    .into_iter()
                    .map(|broker| (broker.node_id, broker))
                    .collect();
                self.topics = snapshot
                    .topics
                    .into_iter()
                    .map(|topic| (topic.name.clone(), topic))
                    .collect();
                let mut partitions = BTreeMap::new();
                for (id, state) in snapshot.partitions {
                    // A state this broker wrote itself may be newer than the snapshot.
                    let newest = match self.partitions.get(&id) {
                        Some(known) if known.revision > state.revision => known.clone(),
                        _ => state,
                    };
                    partitions.insert(id, newest);
                }
                self.partitions = partitions;
            }
        }
        true
    }

    /// Records a partition state read or written, if it is newer than the one known. Returns
    /// whether it was.
    pub fn observe_partition(
        &mut self,
        partition: &PartitionId,
        state: &Versioned<PartitionState>,
    ) -> bool {
        match self.partitions.get(partition) {
            Some(known) if known.revision >= state.revision => false,
            _ => {
                self.partitions.insert(partition.clone(), state.clone());
                true
            }
        }
    }

    /// The live brokers with their incarnations, as the replication logic takes them.
    pub fn live_brokers(&self) -> LiveBrokers {
        self.brokers
            .iter()
            .map(|(node, broker)| (*node, broker.incarnation))
            .collect()
    }
}
