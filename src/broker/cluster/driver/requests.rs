//! What clients' requests ask of the driver through the replica manager
//! (`crate::broker::cluster::ReplicaManager`): who leads, may this broker take a produce now,
//! has a produce committed, and how the cluster looks (brokers, partition states).
//!
//! Each answer asks the local replica's node under its lock (and carries out what the node
//! decided on the way), so a request never acts on a leadership this broker lost: a deposed leader answers
//! `NOT_LEADER` naming the broker the store names, and a write it appended but could not commit
//! is reported as of unknown outcome, never as failed.

use std::sync::Arc;

use super::ClusterDriver;
use crate::broker::cluster::{BrokerAddress, ClusterError};
use crate::broker::BrokerError;
use crate::cluster::meta::PartitionId;
use crate::cluster::PartitionState;
use crate::domain::Acks;

impl ClusterDriver {
    pub(super) fn next_waiter_id(&self) -> u64 {
        self.next_waiter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The leader this broker knows for `topic`/`partition`, as a `NOT_LEADER` (or
    /// `LEADER_NOT_AVAILABLE`) refusal, or `UnknownTopic`.
    fn not_leading(&self, topic: &str, partition: u32) -> BrokerError {
        let state = self.state();
        let Some(versioned) = state.partitions.get(&PartitionId::new(topic, partition)) else {
            return if state.topics.contains_key(topic) {
                BrokerError::UnknownPartition {
                    topic: topic.to_owned(),
                    partition,
                    count: state.topics[topic].partition_count,
                }
            } else {
                BrokerError::UnknownTopic(topic.to_owned())
            };
        };
        let epoch = versioned.value.leader_epoch;
        match versioned.value.leader {
            Some(leader) if leader != self.config.node_id => {
                let address = state.brokers.get(&leader).map(|b| b.native_addr.clone());
                ClusterError::NotLeader {
                    topic: topic.to_owned(),
                    partition,
                    leader: address.map(|address| (leader, address)),
                    leader_epoch: epoch,
                }
                .into()
            }
            _ => ClusterError::LeaderNotAvailable {
                topic: topic.to_owned(),
                partition,
                leader_epoch: epoch,
            }
            .into(),
        }
    }

    /// Ok when this broker leads `topic`/`partition` now (reads, leases, offsets); else who
    /// does.
    pub fn require_leader(&self, topic: &str, partition: u32) -> Result<(), BrokerError> {
        let now = self.now_ms();
        match self.replica(topic, partition) {
            Some(replica) if replica.shell().node.is_leading(now) => Ok(()),
            _ => Err(self.not_leading(topic, partition)),
        }
    }

    /// Before a produce is written: this broker must lead the partition, and for `acks=all`
    /// the ISR must be at least `min_insync` (nothing is written otherwise).
    pub fn check_produce(
        self: &Arc<Self>,
        topic: &str,
        partition: u32,
        acks: Acks,
    ) -> Result<(), BrokerError> {
        use crate::cluster::replication::leader::ProduceRefusal;
        let acks_all = acks == Acks::All;
        let now = self.now_ms();
        let Some(replica) = self.replica(topic, partition) else {
            return Err(self.not_leading(topic, partition));
        };
        let result = {
            let mut shell = replica.shell();
            let (result, effects) = shell.node.check_produce(now, acks_all);
            self.apply(&replica, &mut shell, effects);
            result
        };
        match result {
            Ok(_) => Ok(()),
            Err(ProduceRefusal::NotLeader) => Err(self.not_leading(topic, partition)),
            Err(ProduceRefusal::NotEnoughReplicas { isr, min_insync }) => {
                Err(ClusterError::NotEnoughReplicas {
                    topic: topic.to_owned(),
                    partition,
                    isr,
                    min_insync,
                }
                .into())
            }
            Err(ProduceRefusal::TooManyWaiters { waiting }) => Err(ClusterError::TooManyWaiters {
                topic: topic.to_owned(),
                partition,
                waiting,
            }
            .into()),
        }
    }

    /// After a produce was appended (and made durable under the flush policy) with its last
    /// record at `last_offset`: with `acks=all`, waits until the high watermark passes it (every
    /// in-sync replica has it); without, tells the engine the log grew. Fails with
    /// [`ClusterError::NotAcknowledged`] when this broker was deposed, the write timed out or
    /// the ISR shrank below `min_insync`.
    pub async fn await_commit(
        self: &Arc<Self>,
        topic: &str,
        partition: u32,
        last_offset: u64,
        acks: Acks,
    ) -> Result<(), BrokerError> {
        let acks_all = acks == Acks::All;
        let not_acknowledged = |cause| ClusterError::NotAcknowledged {
            topic: topic.to_owned(),
            partition,
            last_offset,
            cause,
        };
        let Some(replica) = self.replica(topic, partition) else {
            return Err(not_acknowledged(
                crate::cluster::replication::leader::AcksAllError::Deposed,
            )
            .into());
        };
        let answer = {
            let now = self.now_ms();
            let mut shell = replica.shell();
            if !acks_all {
                let effects = shell.node.appended(now, replica.partition.as_ref());
                self.apply(&replica, &mut shell, effects);
                return Ok(());
            }
            let id = self.next_waiter_id();
            let (answer, waiter) = tokio::sync::oneshot::channel();
            shell.waiters.insert(id, answer);
            let effects = shell
                .node
                .await_commit(now, replica.partition.as_ref(), id, last_offset);
            self.apply(&replica, &mut shell, effects);
            waiter
        };
        match answer.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(cause)) => Err(not_acknowledged(cause).into()),
            Err(_) => Err(not_acknowledged(
                crate::cluster::replication::leader::AcksAllError::Deposed,
            )
            .into()),
        }
    }

    /// The live brokers, as registered.
    pub fn brokers(&self) -> Vec<BrokerAddress> {
        self.state()
            .brokers
            .values()
            .map(|broker| BrokerAddress {
                node_id: broker.node_id,
                native_addr: broker.native_addr.clone(),
                kafka_addr: broker.kafka_addr.clone(),
                registered_at_ms: broker.registered_at_ms,
            })
            .collect()
    }

    /// Every broker named as a replica in the partition states last read.
    pub fn replica_node_ids(&self) -> std::collections::BTreeSet<crate::cluster::NodeId> {
        self.state()
            .partitions
            .values()
            .flat_map(|versioned| versioned.value.replicas.iter().copied())
            .collect()
    }

    /// The state last read of `topic`/`partition` (no leader, epoch 0, when none was read).
    pub fn partition_state(&self, topic: &str, partition: u32) -> PartitionState {
        self.state()
            .partitions
            .get(&PartitionId::new(topic, partition))
            .map(|versioned| versioned.value.clone())
            .unwrap_or(PartitionState {
                replicas: Vec::new(),
                leader: None,
                leader_epoch: 0,
                isr: Vec::new(),
                min_insync: 1,
            })
    }

    /// The settings this broker joined the cluster with.
    pub fn config(&self) -> &super::ClusterConfig {
        &self.config
    }

    /// How many partitions `topic` has, if the store has it.
    pub fn partition_count(&self, topic: &str) -> Option<u32> {
        self.state()
            .topics
            .get(topic)
            .map(|record| record.partition_count)
    }

    /// The leader epoch topic `topic`'s partitions started at in the cluster's view (its
    /// lineage: a topic re-created under a deleted one's name starts above it), or `None` if the
    /// view has no such topic. Committed offsets carry it, so a deleted lineage's are not read as
    /// the re-created topic's.
    pub fn topic_lineage(&self, topic: &str) -> Option<crate::cluster::LeaderEpoch> {
        self.state()
            .topics
            .get(topic)
            .map(|record| record.first_leader_epoch())
    }

    /// How many brokers are registered now.
    pub fn live_broker_count(&self) -> usize {
        self.state().brokers.len()
    }

    /// The address of broker `node_id`'s native listener, if it is registered.
    pub fn native_addr_of(&self, node_id: crate::domain::NodeId) -> Option<String> {
        self.state()
            .brokers
            .get(&node_id)
            .map(|broker| broker.native_addr.clone())
    }
}
