//! The seam through which a broker describes the cluster: which brokers exist and who leads each
//! partition, for `Metadata` version 1 and for refusing (or, later, serving) the replication
//! APIs.
//!
//! Why a trait held by the listener rather than code in the handler: a standalone server
//! answers from its own flags ([`StandaloneView`]: one broker, leading every partition in leader
//! epoch 0), while a broker started with `--etcd` answers from the metadata store it watches.
//! The handler asks the same two questions of either, so cluster mode plugs in by setting
//! [`ServerConfig::cluster_view`](crate::server::ServerConfig::cluster_view) without touching
//! the request code.

use std::fmt;

use crate::cluster::{NodeId, PartitionState};
use crate::protocol::BrokerMetadata;

/// What the native listener needs to know about the cluster.
pub trait ClusterView: Send + Sync + fmt::Debug {
    /// Whether this broker is part of a cluster. A standalone broker refuses the replication
    /// APIs and replication factors above 1 with `CLUSTER_REQUIRED`.
    fn is_cluster(&self) -> bool;

    /// This broker's node id.
    fn node_id(&self) -> NodeId;

    /// The live brokers, by node id, with the addresses they advertise.
    fn brokers(&self) -> Vec<BrokerMetadata>;

    /// The replication state of `topic`/`partition`, which exists on this broker.
    fn partition_state(&self, topic: &str, partition: u32) -> PartitionState;
}

/// A standalone server: one broker that leads every partition, in leader epoch 0, with itself
/// as the only replica and in-sync replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandaloneView {
    node_id: NodeId,
    address: String,
}

impl StandaloneView {
    /// The view of broker `node_id` (`serve --node-id`) reachable at `address` (`--advertise`,
    /// else the listen address).
    pub fn new(node_id: NodeId, address: impl Into<String>) -> Self {
        Self {
            node_id,
            address: address.into(),
        }
    }
}

impl ClusterView for StandaloneView {
    fn is_cluster(&self) -> bool {
        false
    }

    fn node_id(&self) -> NodeId {
        self.node_id
    }

    fn brokers(&self) -> Vec<BrokerMetadata> {
        vec![BrokerMetadata {
            node_id: self.node_id,
            address: self.address.clone(),
        }]
    }

    fn partition_state(&self, _topic: &str, _partition: u32) -> PartitionState {
        PartitionState {
            replicas: vec![self.node_id],
            leader: Some(self.node_id),
            leader_epoch: 0,
            isr: vec![self.node_id],
            min_insync: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standalone_broker_leads_every_partition_alone_in_epoch_zero() {
        let view = StandaloneView::new(4, "127.0.0.1:7171");
        assert!(!view.is_cluster());
        assert_eq!(
            view.brokers(),
            [BrokerMetadata {
                node_id: 4,
                address: "127.0.0.1:7171".into()
            }]
        );
        let state = view.partition_state("orders", 3);
        assert_eq!(state.leader, Some(4));
        assert_eq!(state.leader_epoch, 0);
        assert_eq!(state.replicas, [4]);
        assert_eq!(state.isr, [4]);
    }
}
