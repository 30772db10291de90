//! [`MetaStore`] on etcd: each method clones the store (cheap: it shares the connection) into a
//! `'static` future that calls the inherent method doing the work in the file of its job.
//!
//! Why a file of its own: the trait's boxed-future signatures are the same boilerplate for
//! every method; kept apart, the files that talk to etcd read as plain `async fn`s.

use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::mpsc;

use super::super::watch::MetaWatch;
use super::super::{
    validate_watch_capacity, BrokerLease, GrownTopic, HeldRegistration, MetaError, MetaStore,
    PartitionId, PartitionStates, TopicRecord, TopicTombstone,
};
use super::EtcdMetaStore;
use crate::cluster::{BrokerRegistration, LeaderEpoch, NodeId, PartitionState, Versioned};
use crate::domain::TopicConfig;

impl MetaStore for EtcdMetaStore {
    fn register_broker(
        &self,
        registration: BrokerRegistration,
        ttl: Duration,
    ) -> BoxFuture<'static, Result<BrokerLease, MetaError>> {
        let store = self.clone();
        Box::pin(async move { store.register(registration, ttl).await })
    }

    fn live_brokers(&self) -> BoxFuture<'static, Result<Vec<BrokerRegistration>, MetaError>> {
        let store = self.clone();
        Box::pin(async move { store.live_brokers_listed().await })
    }

    fn broker_registration(
        &self,
        node_id: NodeId,
    ) -> BoxFuture<'static, Result<Option<HeldRegistration>, MetaError>> {
        let store = self.clone();
        Box::pin(async move { store.registration_of(node_id).await })
    }

    fn revoke_lease(&self, lease_id: i64) -> BoxFuture<'static, Result<(), MetaError>> {
        let store = self.clone();
        Box::pin(async move { store.revoke("revoke a registration lease", lease_id).await })
    }

    fn create_topic(
        &self,
        topic: TopicRecord,
        partitions: Vec<PartitionState>,
    ) -> BoxFuture<'static, Result<Vec<Versioned<PartitionState>>, MetaError>> {
        let store = self.clone();
        Box::pin(async move { store.create_topic_retried(topic, partitions).await })
    }

    fn topics(&self) -> BoxFuture<'static, Result<Vec<TopicRecord>, MetaError>> {
        let store = self.clone();
        Box::pin(async move { store.topics_listed().await })
    }

    fn delete_topic(&self, topic: &str) -> BoxFuture<'static, Result<TopicTombstone, MetaError>> {
        let store = self.clone();
        let topic = topic.to_owned();
        Box::pin(async move { store.delete_topic_retried(topic).await })
    }

    fn alter_topic_config(
        &self,
        topic: &str,
        expected: TopicConfig,
        config: TopicConfig,
    ) -> BoxFuture<'static, Result<TopicRecord, MetaError>> {
        let store = self.clone();
        let topic = topic.to_owned();
        Box::pin(async move {
            store
                .alter_topic_config_retried(topic, expected, config)
                .await
        })
    }

    fn create_partitions(
        &self,
        topic: &str,
        expected_count: u32,
        partitions: Vec<PartitionState>,
    ) -> BoxFuture<'static, Result<GrownTopic, MetaError>> {
        let store = self.clone();
        let topic = topic.to_owned();
        Box::pin(async move {
            store
                .create_partitions_retried(topic, expected_count, partitions)
                .await
        })
    }

    fn deleted_topic_floor(
        &self,
        topic: &str,
    ) -> BoxFuture<'static, Result<LeaderEpoch, MetaError>> {
        let store = self.clone();
        let topic = topic.to_owned();
        Box::pin(async move { store.deleted_topic_floor_of(topic).await })
    }

    fn partition_state(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, Result<Versioned<PartitionState>, MetaError>> {
        let store = self.clone();
        Box::pin(async move { store.read_partition_state(partition).await })
    }

    fn partition_states(&self) -> BoxFuture<'static, Result<PartitionStates, MetaError>> {
        let store = self.clone();
        Box::pin(async move { store.read_partition_states().await })
    }

    fn compare_and_swap_partition(
        &self,
        partition: PartitionId,
        expected_revision: i64,
        state: PartitionState,
    ) -> BoxFuture<'static, Result<Versioned<PartitionState>, MetaError>> {
        let store = self.clone();
        Box::pin(async move {
            store
                .swap_partition_state(partition, expected_revision, state)
                .await
        })
    }

    fn watch(&self, capacity: usize) -> BoxFuture<'static, Result<MetaWatch, MetaError>> {
        let store = self.clone();
        Box::pin(async move {
            validate_watch_capacity(capacity)?;
            let snapshot = store.snapshot().await?;
            let (sender, events) = mpsc::channel(capacity);
            super::watch::spawn(store, sender, snapshot.revision + 1);
            Ok(MetaWatch { snapshot, events })
        })
    }
}
