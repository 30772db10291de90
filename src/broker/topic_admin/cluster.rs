//! A cluster member's topics: in the metadata store, placed over the live brokers, applied to
//! each broker's local copies by its driver.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{TopicAdmin, TopicConfigChangeFn};
use crate::broker::cluster::{ClusterDriver, ClusterError};
use crate::broker::BrokerError;
use crate::domain::OFFSETS_TOPIC;
use crate::domain::{Replication, TopicConfig};

/// Topics of the cluster `driver` is a member of.
#[derive(Debug)]
pub struct ClusterTopics {
    driver: Arc<ClusterDriver>,
}

impl ClusterTopics {
    /// The topics of `driver`'s cluster.
    pub fn new(driver: Arc<ClusterDriver>) -> Self {
        Self { driver }
    }
}

impl ClusterTopics {
    /// `change` of the cluster's topics through the driver, once `checked` (the request's own
    /// checks, made before anything is asked of the metadata store) passed.
    fn on_driver<T, F>(
        &self,
        checked: Result<(), BrokerError>,
        change: impl FnOnce(Arc<ClusterDriver>) -> F,
    ) -> BoxFuture<'static, Result<T, BrokerError>>
    where
        F: std::future::Future<Output = Result<T, BrokerError>> + Send + 'static,
        T: Send + 'static,
    {
        match checked {
            Err(refused) => futures::future::ready(Err(refused)).boxed(),
            Ok(()) => change(Arc::clone(&self.driver)).boxed(),
        }
    }
}

impl TopicAdmin for ClusterTopics {
    fn create_topic(
        &self,
        name: String,
        partitions: u32,
        config: TopicConfig,
        replication: Option<Replication>,
    ) -> BoxFuture<'static, Result<(), BrokerError>> {
        let checked = match replication.as_ref().and_then(Replication::invalid) {
            Some(invalid) => Err(BrokerError::InvalidConfig(invalid)),
            None => self.refuse_internal(&name, "created"),
        };
        self.on_driver(checked, move |driver| async move {
            driver
                .create_topic(name, partitions, config, replication)
                .await
        })
    }

    /// A compare-and-swap of the topic record in the metadata store, which every broker's
    /// driver applies to its local copy.
    fn alter_topic_config(
        &self,
        name: String,
        change: TopicConfigChangeFn,
        validate_only: bool,
    ) -> BoxFuture<'static, Result<TopicConfig, BrokerError>> {
        let checked = self.refuse_internal(&name, "altered");
        self.on_driver(checked, move |driver| async move {
            driver
                .alter_topic_config(&name, &change, validate_only)
                .await
        })
    }

    /// One transaction of the metadata store adds the new partitions' states (placed over the
    /// live brokers) and the new count to the topic record, compared against the record as
    /// read; this waits (up to `topic_ready_wait`) until each new partition has a leader.
    fn create_partitions(
        &self,
        name: String,
        partitions: u32,
        validate_only: bool,
    ) -> BoxFuture<'static, Result<u32, BrokerError>> {
        let checked = self.refuse_internal(&name, "grown");
        self.on_driver(checked, move |driver| async move {
            driver
                .create_partitions(&name, partitions, validate_only)
                .await
        })
    }

    fn delete_topic(&self, name: String) -> BoxFuture<'static, Result<(), BrokerError>> {
        let checked = self.refuse_internal(&name, "deleted");
        self.on_driver(checked, move |driver| async move {
            driver.delete_topic(&name).await
        })
    }

    /// The coordinator may hold no copy of the partition, so only its existence in the store's
    /// view is checked (as Kafka does).
    fn commit_target(&self, topic: &str, partition: u32) -> Result<Option<u64>, BrokerError> {
        match self.driver.partition_count(topic) {
            None => Err(BrokerError::UnknownTopic(topic.to_owned())),
            Some(count) if partition >= count => Err(BrokerError::UnknownPartition {
                topic: topic.to_owned(),
                partition,
                count,
            }),
            Some(_) => Ok(None),
        }
    }

    fn refuse_internal(&self, topic: &str, operation: &'static str) -> Result<(), BrokerError> {
        match topic == OFFSETS_TOPIC {
            true => Err(ClusterError::InternalTopic {
                topic: topic.to_owned(),
                operation,
            }
            .into()),
            false => Ok(()),
        }
    }
}
