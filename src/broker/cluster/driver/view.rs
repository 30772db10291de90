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

    /// Whether `topic` has its record and `partitions` partitions, each with a leader that took
    /// over: the placement names a leader at the topic's first leader epoch, and that leader
    /// re-elects itself above it before it serves. The first epoch is the record's, not
    /// [`INITIAL_LEADER_EPOCH`]: a topic re-created after a delete starts above the deleted one's
    /// fence floor, so its placement's own epoch is already above the initial one.
    ///
    /// [`INITIAL_LEADER_EPOCH`]: crate::cluster::meta::INITIAL_LEADER_EPOCH
    pub fn topic_ready(&self, topic: &str, partitions: u32) -> bool {
        let Some(record) = self.topics.get(topic) else {
            return false;
        };
        self.partitions_ready(record, 0..partitions)
    }

    /// Whether the view has `record`'s topic with at least its partition count, and each
    /// partition of `indexes` a leader that took over (as [`ClusterState::topic_ready`]): what
    /// a grow waits for, on its new partitions only (an old one without a leader, its broker
    /// down, does not hold the answer up).
    pub fn partitions_ready(&self, record: &TopicRecord, indexes: std::ops::Range<u32>) -> bool {
        let Some(known) = self.topics.get(&record.name) else {
            return false;
        };
        if known.partition_count < indexes.end {
            return false;
        }
        let first = known.first_leader_epoch();
        indexes.into_iter().all(|index| {
            self.partitions
                .get(&PartitionId::new(&record.name, index))
                .is_some_and(|p| p.value.leader.is_some() && p.value.leader_epoch > first)
        })
    }

    /// The live brokers with their incarnations, as the replication logic takes them.
    pub fn live_brokers(&self) -> LiveBrokers {
        self.brokers
            .iter()
            .map(|(node, broker)| (*node, broker.incarnation))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::meta::place_replicas;
    use crate::domain::TopicConfig;

    /// A view of `topic` (one partition, first leader epoch `first`) whose partition is led at
    /// `epoch`.
    fn led_at(first: u32, epoch: u32) -> ClusterState {
        let mut record = TopicRecord::new("t", 1, 3, TopicConfig::default());
        record.first_leader_epoch = first;
        let mut state = place_replicas(&[1, 2, 3], "t", 1, 3, 2).expect("placement");
        let mut partition = state.remove(0);
        partition.leader_epoch = epoch;
        let mut view = ClusterState::default();
        view.topics.insert("t".into(), record);
        view.partitions.insert(
            PartitionId::new("t", 0),
            Versioned {
                value: partition,
                revision: 1,
            },
        );
        view
    }

    /// A topic is ready once its leader took over above the record's first epoch: for a topic
    /// re-created above a fence floor of 7 (first epoch 8), the placement's epoch 8 is not
    /// ready yet, 9 is. (It used to compare with the initial epoch 1, so a re-created topic
    /// read as ready before its leader served, and its creator's first produce could fail.)
    #[test]
    fn a_recreated_topic_is_ready_only_once_its_leader_took_over_above_its_first_epoch() {
        assert!(!led_at(1, 1).topic_ready("t", 1));
        assert!(led_at(1, 2).topic_ready("t", 1));
        assert!(!led_at(8, 8).topic_ready("t", 1));
        assert!(led_at(8, 9).topic_ready("t", 1));
        // A record written before first_leader_epoch existed reads as the initial epoch.
        assert!(led_at(0, 2).topic_ready("t", 1));
        assert!(!led_at(8, 9).topic_ready("t", 2), "partition 1 is missing");
        assert!(!ClusterState::default().topic_ready("t", 1));
    }
}
