//! Topics of a cluster: created and deleted in the metadata store (each in one transaction)
//! rather than in the local data directory, which every broker then follows
//! (`ClusterDriver::ensure_local_topic`, `lineage.rs`).

use tracing::{info, warn};

use super::{ClusterDriver, DEFAULT_REPLICATION_FACTOR_MAX};
use crate::broker::cluster::ClusterError;
use crate::broker::BrokerError;
use crate::cluster::meta::{
    create_partitions_placed, create_topic_placed, place_replicas, MetaError, TopicRecord,
    CLUSTER_PARTITIONS_PER_TOPIC_MAX, TOPIC_DELETE_ATTEMPTS_MAX,
};
use crate::cluster::LeaderEpoch;
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
        if !self
            .wait_for_view(|| self.topic_ready(&name, partitions))
            .await
        {
            warn!(topic = %name, "created, but not every partition had elected a leader in time");
        }
        Ok(())
    }

    /// Waits, up to `topic_ready_wait`, until `ready` holds, checking it again at every change
    /// of the view; false if the wait ran out (a driver shutting down counts as done).
    async fn wait_for_view(&self, ready: impl Fn() -> bool) -> bool {
        let mut changes = self.view_changed.subscribe();
        let wait = async {
            while !ready() {
                if changes.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::time::timeout(self.config.topic_ready_wait, wait)
            .await
            .is_ok()
    }

    /// Whether every partition of `topic` has a leader that took over (it re-elects itself
    /// above the topic's first leader epoch before it serves; `ClusterState::topic_ready`).
    fn topic_ready(&self, topic: &str, partitions: u32) -> bool {
        self.state().topic_ready(topic, partitions)
    }

    /// Grows a cluster topic to `partitions` partitions (the new total): places the new
    /// partitions over the live brokers as a topic of that many partitions would be placed,
    /// and writes them with the record's new count in one transaction compared against the
    /// count read ([`crate::cluster::meta::MetaStore::create_partitions`]). When another grow
    /// came first, decides again from the count it left (a total not above it is refused), up
    /// to [`TOPIC_DELETE_ATTEMPTS_MAX`] times. Once the store answered, waits (up to
    /// `topic_ready_wait`) until this broker's watch delivered the grow, its local copy has the
    /// new partitions, and each new partition has an elected leader, so the caller can produce
    /// to them at once. Returns the count after.
    ///
    /// The new partitions start at the topic's first leader epoch (a re-created topic's above
    /// its name's deleted lineages, as its first partitions did), with `min_insync` of the
    /// record. `validate_only` checks the count and that the live brokers can hold the
    /// replicas, and writes nothing.
    pub async fn create_partitions(
        &self,
        name: &str,
        partitions: u32,
        validate_only: bool,
    ) -> Result<u32, BrokerError> {
        let record = self.state().topics.get(name).cloned();
        let Some(mut record) = record else {
            return Err(BrokerError::UnknownTopic(name.to_string()));
        };
        let mut grown = None;
        for _attempt in 0..TOPIC_DELETE_ATTEMPTS_MAX {
            crate::broker::check_partition_growth(
                name,
                record.partition_count,
                partitions,
                CLUSTER_PARTITIONS_PER_TOPIC_MAX,
            )?;
            if validate_only {
                let live: Vec<_> = self.state().brokers.keys().copied().collect();
                place_replicas(
                    &live,
                    name,
                    partitions,
                    record.replication_factor,
                    record.min_insync,
                )
                .map_err(|error| BrokerError::InvalidConfig(error.to_string()))?;
                return Ok(partitions);
            }
            match create_partitions_placed(self.store.as_ref(), &record, partitions).await {
                Ok((written, _states)) => {
                    grown = Some(written);
                    break;
                }
                Err(MetaError::PartitionCountChanged { current, .. }) => {
                    record.partition_count = current;
                }
                Err(MetaError::NotFound { .. }) => {
                    return Err(BrokerError::UnknownTopic(name.to_string()))
                }
                Err(MetaError::Invalid(reason)) => return Err(BrokerError::InvalidConfig(reason)),
                Err(MetaError::Placement(error)) => {
                    return Err(BrokerError::InvalidConfig(error.to_string()))
                }
                Err(MetaError::Unavailable { endpoints, reason }) => {
                    grown = Some(
                        self.resolve_lost_grow(name, partitions, endpoints, reason)
                            .await?,
                    );
                    break;
                }
                Err(error) => return Err(ClusterError::Meta(error).into()),
            }
        }
        let Some(grown) = grown else {
            return Err(ClusterError::Meta(MetaError::Contended {
                what: format!("add partitions to topic {name}"),
                attempts: TOPIC_DELETE_ATTEMPTS_MAX,
            })
            .into());
        };
        info!(topic = %name, from = record.partition_count, to = partitions, "added partitions to the cluster topic");
        let old = record.partition_count;
        let ready = || {
            let local = self
                .broker
                .topic(name)
                .map_or(0, |topic| topic.partitions().len());
            local >= partitions as usize && self.state().partitions_ready(&grown, old..partitions)
        };
        if !self.wait_for_view(ready).await {
            warn!(topic = %name, "partitions added, but not every new partition had elected a leader in time");
        }
        Ok(grown.partition_count)
    }

    /// etcd did not answer during a grow: its transaction may or may not have been applied.
    /// Reads the topic back: at least `partitions` partitions means grown (by this request or a
    /// concurrent one), and the record is returned; fewer, or unreadable, is an error that says
    /// the outcome is unknown and how to find out (never "failed": a client that retried a grow
    /// that was applied would be refused, one that gave up on it would miss it).
    async fn resolve_lost_grow(
        &self,
        name: &str,
        partitions: u32,
        endpoints: String,
        reason: String,
    ) -> Result<TopicRecord, BrokerError> {
        match self.store.topics().await {
            Ok(topics) => match topics.into_iter().find(|topic| topic.name == name) {
                Some(record) if record.partition_count >= partitions => Ok(record),
                Some(record) => Err(ClusterError::OutcomeUnknown(format!(
                    "adding partitions to topic {name}: etcd ({endpoints}) did not answer \
                     ({reason}); the topic has {} partitions as read just after, but the request \
                     may yet be applied: run `fencelog topic describe {name}` and grow it again \
                     if it still has fewer than {partitions}",
                    record.partition_count
                ))
                .into()),
                None => Err(BrokerError::UnknownTopic(name.to_string())),
            },
            Err(read_error) => Err(ClusterError::OutcomeUnknown(format!(
                "adding partitions to topic {name}: etcd ({endpoints}) did not answer ({reason}) \
                 and the topic could not be read back ({read_error}): it may or may not have \
                 {partitions} partitions; once etcd is reachable run `fencelog topic describe \
                 {name}` and grow it again if it has fewer"
            ))
            .into()),
        }
    }

    /// Changes a cluster topic's config: `change` computes it from the record's config, which is
    /// then compare-and-swapped into the store (computed again from the newer config, up to
    /// [`TOPIC_DELETE_ATTEMPTS_MAX`] times, if another change came first). Durable once etcd
    /// answers; applied to this broker's copy before returning, and by every other broker when
    /// its watch delivers the record. `validate_only` computes and checks, writes nothing.
    pub async fn alter_topic_config(
        &self,
        name: &str,
        change: &crate::broker::TopicConfigChangeFn,
        validate_only: bool,
    ) -> Result<TopicConfig, BrokerError> {
        let record = self.state().topics.get(name).cloned();
        let Some(record) = record else {
            return Err(BrokerError::UnknownTopic(name.to_string()));
        };
        let mut current = record.config;
        for _attempt in 0..TOPIC_DELETE_ATTEMPTS_MAX {
            let config = change(&current)?;
            crate::broker::partition_config(&config, record.partition_count)
                .validate()
                .map_err(|error| BrokerError::InvalidConfig(error.to_string()))?;
            if validate_only || config == current {
                return Ok(config);
            }
            match self.store.alter_topic_config(name, current, config).await {
                Ok(written) => {
                    self.apply_topic_config(&written).await;
                    return Ok(written.config);
                }
                Err(MetaError::TopicConfigChanged { current: now, .. }) => current = now,
                Err(MetaError::NotFound { .. }) => {
                    return Err(BrokerError::UnknownTopic(name.to_string()))
                }
                Err(MetaError::Invalid(reason)) => return Err(BrokerError::InvalidConfig(reason)),
                Err(error) => return Err(ClusterError::Meta(error).into()),
            }
        }
        Err(ClusterError::Meta(MetaError::Contended {
            what: format!("alter the config of topic {name}"),
            attempts: TOPIC_DELETE_ATTEMPTS_MAX,
        })
        .into())
    }

    /// Deletes a cluster topic: one etcd transaction removes its record and partition states
    /// and raises the name's tombstone to the highest leader epoch any of its partitions had
    /// (`MetaStore::delete_topic`), so a topic re-created under the name starts its leader
    /// epochs, and so its producer epochs (`leader_epoch << 32 | n`), above every epoch the
    /// deleted one granted. Answers `Ok` only once that transaction committed; then waits (up
    /// to `topic_ready_wait`) until this broker removed its own copy, so its metadata no longer
    /// lists the topic. Every broker removes its copy when it sees the delete, or when it
    /// returns (`lineage.rs`).
    ///
    /// Errors: `UnknownTopic` (nothing to delete); etcd unavailable before anything was sent, or
    /// the topic read back as still there: nothing deleted, retry; etcd's answer lost and the
    /// topic could not be read back: [`ClusterError::OutcomeUnknown`].
    pub async fn delete_topic(&self, name: &str) -> Result<(), BrokerError> {
        crate::broker::validate_topic_name(name)?;
        let tombstone = match self.store.delete_topic(name).await {
            Ok(tombstone) => Some(tombstone),
            Err(MetaError::NotFound { .. }) => return Err(BrokerError::UnknownTopic(name.into())),
            Err(MetaError::Invalid(reason)) => return Err(BrokerError::InvalidConfig(reason)),
            Err(MetaError::Unavailable { endpoints, reason }) => {
                self.resolve_lost_delete(name, endpoints, reason).await?;
                None
            }
            Err(error) => return Err(ClusterError::Meta(error).into()),
        };
        match tombstone {
            Some(tombstone) => info!(
                topic = %name,
                leader_epoch_floor = tombstone.leader_epoch_floor,
                "deleted the cluster topic; a topic re-created under its name starts above the floor"
            ),
            None => {
                info!(topic = %name, "the cluster topic is deleted (read back after etcd's answer was lost)")
            }
        }
        let floor = tombstone.map_or(LeaderEpoch::MAX, |t| t.leader_epoch_floor);
        let mut changes = self.view_changed.subscribe();
        let removed = async {
            loop {
                let recreated = self
                    .state()
                    .topics
                    .get(name)
                    .is_some_and(|record| record.first_leader_epoch() > floor);
                if recreated || self.broker.topic(name).is_err() {
                    return;
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout(self.config.topic_ready_wait, removed)
            .await
            .is_err()
        {
            warn!(topic = %name, "deleted from the cluster, but this broker's copy was not removed in time; it is removed when the broker sees the delete");
        }
        Ok(())
    }

    /// etcd did not answer the delete: its transaction may or may not have been applied. Reads
    /// the topics back: gone means deleted (by this request or a concurrent one); there, or
    /// unreadable, is an error that says which.
    async fn resolve_lost_delete(
        &self,
        name: &str,
        endpoints: String,
        reason: String,
    ) -> Result<(), BrokerError> {
        match self.store.topics().await {
            Ok(topics) if !topics.iter().any(|topic| topic.name == name) => Ok(()),
            Ok(_) => Err(ClusterError::OutcomeUnknown(format!(
                "deleting topic {name}: etcd ({endpoints}) did not answer ({reason}); the topic \
                 still exists as read just after, but the request may yet be applied: run \
                 `fencelog topic list` and delete it again if it is still listed"
            ))
            .into()),
            Err(read_error) => Err(ClusterError::OutcomeUnknown(format!(
                "deleting topic {name}: etcd ({endpoints}) did not answer ({reason}) and the \
                 topics could not be read back ({read_error}): the topic may or may not be \
                 deleted; once etcd is reachable run `fencelog topic list` and delete it again \
                 if it is still listed"
            ))
            .into()),
        }
    }
}
