//! Topics of a cluster: created in the metadata store (placed over the live brokers in one
//! transaction) rather than in the local data directory, which every replica's broker then
//! follows (`ClusterDriver::ensure_local_topic`).

use tracing::warn;

use super::{ClusterDriver, DEFAULT_REPLICATION_FACTOR_MAX};
use crate::broker::cluster::ClusterError;
use crate::broker::BrokerError;
use crate::cluster::meta::{
    create_topic_placed, MetaError, PartitionId, TopicRecord, INITIAL_LEADER_EPOCH,
};
use crate::domain::{Replication, TopicConfig};

impl ClusterDriver {
    /// Creates a cluster topic: places its replicas over the live brokers, writes it to the
    /// store in one transaction, and waits (up to `topic_ready_wait`) until every partition has
    /// an elected leader, so the creator can produce at once.
    pub async fn create_topic(
        &self,
        name: String,
        partitions: u32,
        config: TopicConfig,
        replication: Option<Replication>,
    ) -> Result<(), BrokerError> {
        let live = self.state().brokers.len().max(1);
        let factor = match &replication {
            Some(replication) => replication.factor,
            None => DEFAULT_REPLICATION_FACTOR_MAX.min(live as u16),
        };
        let mut record = TopicRecord::new(name.clone(), partitions, factor, config);
        if let Some(min_insync) = replication.as_ref().and_then(|r| r.min_insync) {
            record.min_insync = min_insync;
        }
        let created = create_topic_placed(self.store.as_ref(), record).await;
        match created {
            Ok(_) => {}
            Err(MetaError::AlreadyExists { .. }) => return Err(BrokerError::TopicExists(name)),
            Err(MetaError::Invalid(reason)) => return Err(BrokerError::InvalidConfig(reason)),
            Err(MetaError::Placement(error)) => {
                return Err(BrokerError::InvalidConfig(error.to_string()))
            }
            Err(error) => return Err(ClusterError::Meta(error).into()),
        }
        let mut changes = self.view_changed.subscribe();
        let ready = async {
            loop {
                if self.topic_ready(&name, partitions) {
                    return;
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout(self.config.topic_ready_wait, ready)
            .await
            .is_err()
        {
            warn!(topic = %name, "created, but not every partition had elected a leader in time");
        }
        Ok(())
    }

    /// Whether every partition of `topic` has a leader that took over (it re-elects itself
    /// above the placement's initial epoch before it serves).
    fn topic_ready(&self, topic: &str, partitions: u32) -> bool {
        let state = self.state();
        (0..partitions).all(|index| {
            state
                .partitions
                .get(&PartitionId::new(topic, index))
                .is_some_and(|p| {
                    p.value.leader.is_some() && p.value.leader_epoch > INITIAL_LEADER_EPOCH
                })
        })
    }

    /// Deleting a cluster topic is refused for now: every broker would have to move its copy
    /// aside, and a topic re-created under the name must start its leader epochs above the old
    /// one's producer epochs (else the new leaders' bases would not fence the old lineage's
    /// grants). Until both are built, nothing is deleted.
    pub async fn delete_topic(&self, name: &str) -> Result<(), BrokerError> {
        Err(ClusterError::Unsupported(format!(
            "deleting topic {name}: deleting a topic of a cluster is not supported yet; nothing was deleted"
        ))
        .into())
    }
}
