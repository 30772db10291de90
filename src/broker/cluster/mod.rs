//! The replica manager: the one place that decides, for every listener, what a request means on
//! this broker in this mode (Kafka's `ReplicaManager` is the model).
//!
//! Who leads a partition, whether this broker may serve a produce, a fetch, a list-offsets or a
//! lease request for it, what `acks` means, whether the ISR is large enough (`min_insync`) before
//! anything is written, waiting for the high watermark after, which credential a writer without
//! a lease presents, and where topics are created and deleted: all of it is answered here, so the
//! native listener and the Kafka listener translate bytes into the same
//! [`BrokerService`](super::BrokerService) calls and cannot drift apart.
//!
//! Standalone is the same code with a trivial answer to each question (this broker leads every
//! partition, alone, in leader epoch 0, and `acks=all` is the leader's own append), not a second
//! path: the service asks [`ReplicaManager`] either way. In a cluster the answers come from the
//! [`ClusterDriver`] (`driver/`), the I/O shell around the replication engines of
//! `crate::cluster::replication`.

pub mod driver;
mod error;
pub mod offsets_config;

use std::sync::Arc;

pub use driver::{
    ClusterConfig, ClusterDriver, ClusterState, DEFAULT_REGISTRATION_TTL,
    DEFAULT_REPLICATION_FACTOR_MAX, DEFAULT_REPLICA_FETCH_MAX_BYTES,
};
pub use error::ClusterError;

use super::BrokerError;
use crate::cluster::PartitionState;
use crate::domain::{Acks, Epoch, NodeId};
use crate::storage::WriteCredential;

/// A broker as clients are told of it: its node id and the address of its native listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddress {
    /// `serve --node-id`.
    pub node_id: NodeId,
    /// Where its native listener is reached.
    pub native_addr: String,
    /// Where its Kafka listener is reached, when it has one registered.
    pub kafka_addr: Option<String>,
    /// When it registered, by its own clock (milliseconds since the Unix epoch); `None`
    /// standalone or from a broker of an older version.
    pub registered_at_ms: Option<u64>,
}

/// This broker's part in the cluster, as the service's requests see it. Cheap to clone (a
/// node id, or one reference count).
#[derive(Debug, Clone)]
pub enum ReplicaManager {
    /// No cluster: broker `node_id` leads every partition, alone.
    Standalone {
        /// `serve --node-id` (it labels the one broker).
        node_id: NodeId,
    },
    /// A member of a cluster: the driver knows the metadata store's view and leads or follows
    /// each local replica.
    Clustered(Arc<ClusterDriver>),
}

impl ReplicaManager {
    /// Whether this broker is part of a cluster (the replication APIs and factors above 1 need
    /// one).
    pub fn is_cluster(&self) -> bool {
        matches!(self, ReplicaManager::Clustered(_))
    }

    /// This broker's node id.
    pub fn node_id(&self) -> NodeId {
        match self {
            ReplicaManager::Standalone { node_id } => *node_id,
            ReplicaManager::Clustered(driver) => driver.node_id(),
        }
    }

    /// The live brokers. Standalone that is this broker alone, reached where the asking
    /// listener is reached (`this_broker`, which only the listener knows).
    pub fn brokers(&self, this_broker: &str) -> Vec<BrokerAddress> {
        match self {
            ReplicaManager::Standalone { node_id } => vec![BrokerAddress {
                node_id: *node_id,
                native_addr: this_broker.to_owned(),
                kafka_addr: None,
                registered_at_ms: None,
            }],
            ReplicaManager::Clustered(driver) => driver.brokers(),
        }
    }

    /// Every broker named as a replica of some partition, live or not: those missing from
    /// [`Self::brokers`] are down (or gone for good). Standalone, this broker.
    pub fn replica_node_ids(&self) -> std::collections::BTreeSet<NodeId> {
        match self {
            ReplicaManager::Standalone { node_id } => [*node_id].into(),
            ReplicaManager::Clustered(driver) => driver.replica_node_ids(),
        }
    }

    /// The replication state of `topic`/`partition`. Standalone: this broker is the only
    /// replica and leads in leader epoch 0.
    pub fn partition_state(&self, topic: &str, partition: u32) -> PartitionState {
        match self {
            ReplicaManager::Standalone { node_id } => PartitionState {
                replicas: vec![*node_id],
                leader: Some(*node_id),
                leader_epoch: 0,
                isr: vec![*node_id],
                min_insync: 1,
            },
            ReplicaManager::Clustered(driver) => driver.partition_state(topic, partition),
        }
    }

    /// Ok when this broker may serve reads, offsets and leases of `topic`/`partition` now; else
    /// who does (`NOT_LEADER`, `LEADER_NOT_AVAILABLE`).
    pub fn require_leader(&self, topic: &str, partition: u32) -> Result<(), BrokerError> {
        match self {
            ReplicaManager::Standalone { .. } => Ok(()),
            ReplicaManager::Clustered(driver) => driver.require_leader(topic, partition),
        }
    }

    /// The replication factor of a topic created without one: standalone 1; on a cluster
    /// [`DEFAULT_REPLICATION_FACTOR_MAX`] or the live brokers, whichever is fewer.
    pub fn default_replication_factor(&self) -> u16 {
        match self {
            ReplicaManager::Standalone { .. } => 1,
            ReplicaManager::Clustered(driver) => {
                let live = u16::try_from(driver.brokers().len()).unwrap_or(u16::MAX);
                DEFAULT_REPLICATION_FACTOR_MAX.min(live.max(1))
            }
        }
    }

    /// The factor a topic asking for `requested` copies gets (-1: the default), or why it
    /// cannot have it here (standalone keeps one copy).
    pub fn replication_factor(&self, requested: i16) -> Result<u16, String> {
        let cluster = self.is_cluster();
        match requested {
            -1 => Ok(self.default_replication_factor()),
            factor if factor >= 1 && (cluster || factor == 1) => Ok(factor as u16),
            factor if cluster => Err(format!(
                "replication factor {factor} is not possible: use 1 or more (or -1 for the cluster default)"
            )),
            factor => Err(format!(
                "replication factor {factor} is not possible: this fencelog broker runs standalone and keeps one copy (use 1 or -1, or start a cluster with --etcd)"
            )),
        }
    }

    /// Why `factor` copies cannot be placed now (more than the live brokers of a cluster), if
    /// they cannot; standalone a factor above 1 was refused by [`Self::replication_factor`].
    pub fn unplaceable(&self, factor: u16) -> Option<String> {
        match self {
            ReplicaManager::Standalone { .. } => None,
            ReplicaManager::Clustered(driver) => {
                let live = driver.brokers().len();
                (usize::from(factor) > live).then(|| {
                    format!("replication factor {factor} is above the {live} live brokers")
                })
            }
        }
    }

    /// The mode's name, as the broker's configs show it: `standalone` or `cluster`.
    pub fn mode_name(&self) -> &'static str {
        match self {
            ReplicaManager::Standalone { .. } => "standalone",
            ReplicaManager::Clustered(_) => "cluster",
        }
    }

    /// Kafka's `min.insync.replicas` default for a topic of `factor` copies: 2 on a cluster
    /// (at most the factor), 1 standalone.
    pub fn default_min_insync(&self, factor: u16) -> u16 {
        match self {
            ReplicaManager::Standalone { .. } => 1,
            ReplicaManager::Clustered(_) => factor.min(2),
        }
    }

    /// Whether an append's acknowledgement is already its commit: the leader is the only
    /// replica (standalone), so no produce waits for followers whatever its `acks`.
    pub fn append_is_commit(&self) -> bool {
        matches!(self, ReplicaManager::Standalone { .. })
    }

    /// Answers a follower's `ReplicaFetch` (the leader's side of replication; a standalone
    /// broker has no replicas to serve).
    pub async fn serve_replica_fetch(
        &self,
        fetch: crate::protocol::ReplicaFetch,
    ) -> Result<crate::protocol::Response, BrokerError> {
        match self {
            ReplicaManager::Clustered(driver) => Ok(driver.serve_replica_fetch(fetch).await),
            ReplicaManager::Standalone { .. } => Err(not_in_a_cluster("ReplicaFetch")),
        }
    }

    /// Answers a follower's `LeaderEpochEnd`: where each asked leader epoch ends in this
    /// leader's log.
    pub fn serve_epoch_end(
        &self,
        partitions: Vec<crate::protocol::LeaderEpochQuery>,
    ) -> Result<crate::protocol::Response, BrokerError> {
        match self {
            ReplicaManager::Clustered(driver) => Ok(driver.serve_epoch_end(partitions)),
            ReplicaManager::Standalone { .. } => Err(not_in_a_cluster("LeaderEpochEnd")),
        }
    }

    /// What a request without `acks` (native Produce version 0) gets: `All` on a replicated
    /// partition, which standalone is the same moment as `Leader`.
    pub fn default_acks(&self) -> Acks {
        match self {
            ReplicaManager::Standalone { .. } => Acks::Leader,
            ReplicaManager::Clustered(_) => Acks::All,
        }
    }

    /// The credential a native batch stamped with `epoch` presents to the fence. In a cluster,
    /// epoch 0 is no lease at all (as a Kafka producer's write): accepted until the partition's
    /// first grant. A literal epoch 0 could never pass the producer epoch base every leader
    /// installs, so without this a never-leased replicated partition would take no native
    /// writes. Standalone, epoch 0 stays what it always was: an epoch nobody was granted.
    pub fn native_credential(&self, epoch: Epoch) -> WriteCredential {
        match (self, epoch) {
            (ReplicaManager::Clustered(_), 0) => WriteCredential::Unleased,
            (_, epoch) => WriteCredential::Epoch(epoch),
        }
    }

    /// Before a produce is written: this broker must lead the partition, and for `acks=all`
    /// the ISR must be at least `min_insync` (nothing is written otherwise).
    pub fn check_produce(
        &self,
        topic: &str,
        partition: u32,
        acks: Acks,
    ) -> Result<(), BrokerError> {
        match self {
            ReplicaManager::Standalone { .. } => Ok(()),
            ReplicaManager::Clustered(driver) => driver.check_produce(topic, partition, acks),
        }
    }

    /// After a produce was appended (and made durable under the flush policy) with its last
    /// record at `last_offset`: with `acks=all`, waits until every in-sync replica has it.
    /// Standalone the leader is the only replica, so its append was the commit.
    pub async fn await_commit(
        &self,
        topic: &str,
        partition: u32,
        last_offset: u64,
        acks: Acks,
    ) -> Result<(), BrokerError> {
        match self {
            ReplicaManager::Standalone { .. } => Ok(()),
            ReplicaManager::Clustered(driver) => {
                driver
                    .await_commit(topic, partition, last_offset, acks)
                    .await
            }
        }
    }
}

/// The refusal of a replication API by a standalone broker.
fn not_in_a_cluster(api: &str) -> BrokerError {
    ClusterError::ClusterRequired(format!(
        "{api}: this broker is not part of a cluster (it was started without --etcd), so it has no replicas to serve"
    ))
    .into()
}
