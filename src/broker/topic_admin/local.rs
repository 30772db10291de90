//! A standalone broker's topics: in its data directory, one copy each.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{TopicAdmin, TopicConfigChangeFn};
use crate::broker::cluster::ClusterError;
use crate::broker::{blocking, Broker, BrokerError, DeletedTopic};
use crate::domain::{Replication, TopicConfig};
use crate::lease::LeaseAuthority;
use crate::metrics::Metrics;

/// Topics in the data directory of `broker`; deleting one forgets its leases and metrics.
#[derive(Debug)]
pub struct LocalTopics {
    broker: Arc<Broker>,
    leases: Arc<dyn LeaseAuthority>,
    metrics: Arc<Metrics>,
}

impl LocalTopics {
    /// The topics of `broker`, whose leases `leases` grants and whose server-wide counters are
    /// in `metrics`.
    pub fn new(
        broker: Arc<Broker>,
        leases: Arc<dyn LeaseAuthority>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            broker,
            leases,
            metrics,
        }
    }
}

impl TopicAdmin for LocalTopics {
    fn create_topic(
        &self,
        name: String,
        partitions: u32,
        config: TopicConfig,
        replication: Option<Replication>,
    ) -> BoxFuture<'static, Result<(), BrokerError>> {
        if let Some(invalid) = replication.as_ref().and_then(Replication::invalid) {
            return futures::future::ready(Err(BrokerError::InvalidConfig(invalid))).boxed();
        }
        if let Some(replication) = replication.filter(|r| r.factor > 1) {
            return futures::future::ready(Err(ClusterError::ClusterRequired(format!(
                "replication factor {} needs a cluster: start the brokers with --etcd (this broker runs standalone and keeps one copy; use --replication-factor 1)",
                replication.factor
            ))
            .into()))
            .boxed();
        }
        let broker = Arc::clone(&self.broker);
        blocking(move || broker.create_topic(&name, partitions, config).map(drop)).boxed()
    }

    fn alter_topic_config(
        &self,
        name: String,
        change: TopicConfigChangeFn,
        validate_only: bool,
    ) -> BoxFuture<'static, Result<TopicConfig, BrokerError>> {
        let broker = Arc::clone(&self.broker);
        async move {
            let topic = broker.topic(&name)?;
            if validate_only {
                let config = change(topic.config())?;
                crate::broker::partition_config(&config, topic.partitions().len() as u32)
                    .validate()
                    .map_err(|error| BrokerError::InvalidConfig(error.to_string()))?;
                return Ok(config);
            }
            blocking(move || broker.alter_topic_config(&name, |current| change(current)))
                .await
                .map(|topic| *topic.config())
        }
        .boxed()
    }

    fn create_partitions(
        &self,
        name: String,
        partitions: u32,
        validate_only: bool,
    ) -> BoxFuture<'static, Result<u32, BrokerError>> {
        let broker = Arc::clone(&self.broker);
        async move {
            let topic = broker.topic(&name)?;
            if validate_only {
                let current = u32::try_from(topic.partitions().len()).unwrap_or(u32::MAX);
                crate::broker::check_partition_growth(
                    &name,
                    current,
                    partitions,
                    crate::broker::MAX_PARTITIONS_PER_TOPIC,
                )?;
                return Ok(partitions);
            }
            blocking(move || broker.add_partitions(&name, partitions))
                .await
                .map(|topic| u32::try_from(topic.partitions().len()).unwrap_or(u32::MAX))
        }
        .boxed()
    }

    fn delete_topic(&self, name: String) -> BoxFuture<'static, Result<(), BrokerError>> {
        let broker = Arc::clone(&self.broker);
        let leases = Arc::clone(&self.leases);
        let metrics = Arc::clone(&self.metrics);
        async move {
            let topic = broker.topic(&name)?;
            let deleted: DeletedTopic = blocking(move || broker.delete_topic(&name)).await?;
            leases.forget_topic(&deleted.name);
            metrics.forget_partitions(topic.open_partitions().map(|partition| partition.metrics()));
            // Off the answer's path: deleting a big topic holds up neither the runtime nor it.
            tokio::task::spawn_blocking(move || deleted.remove_files());
            Ok(())
        }
        .boxed()
    }

    fn commit_target(&self, topic: &str, partition: u32) -> Result<Option<u64>, BrokerError> {
        Ok(Some(
            self.broker.partition(topic, partition)?.high_watermark(),
        ))
    }

    fn refuse_internal(&self, _topic: &str, _operation: &'static str) -> Result<(), BrokerError> {
        Ok(())
    }
}
