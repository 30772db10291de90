//! Topic administration for every listener: create, alter, grow and delete topics, and the
//! questions about a topic that depend on where topics are kept.
//!
//! Why a trait: a standalone broker keeps its topics in its data directory ([`LocalTopics`]); a
//! cluster member keeps them in the metadata store, placed over the live brokers
//! ([`ClusterTopics`]). The mode picks one at assembly, and nothing after that asks which mode
//! it is in.

mod cluster;
mod local;

use std::sync::Arc;

use futures::future::BoxFuture;

pub use cluster::ClusterTopics;
pub use local::LocalTopics;

use super::BrokerError;
use crate::domain::{Replication, TopicConfig};

/// How [`TopicAdmin::alter_topic_config`] computes a topic's new config from its current one
/// (refusing, with `BrokerError::InvalidConfig`, what cannot change). Called again if another
/// change came first (in a cluster).
pub type TopicConfigChangeFn =
    Arc<dyn Fn(&TopicConfig) -> Result<TopicConfig, BrokerError> + Send + Sync>;

/// Where this broker's topics are created, changed and deleted.
pub trait TopicAdmin: Send + Sync + std::fmt::Debug {
    /// Creates a topic with its replication settings (`None`: the mode's default), durably; in
    /// a cluster it waits until its leaders are elected. Standalone only a factor of 1 can be
    /// honoured.
    fn create_topic(
        &self,
        name: String,
        partitions: u32,
        config: TopicConfig,
        replication: Option<Replication>,
    ) -> BoxFuture<'static, Result<(), BrokerError>>;

    /// Changes the live settings of a topic (segment size, retention): `change` computes the
    /// new config from the current one and refuses what cannot change (with
    /// `BrokerError::InvalidConfig` naming it). `validate_only` checks and changes nothing.
    /// Returns the config in force after the change.
    fn alter_topic_config(
        &self,
        name: String,
        change: TopicConfigChangeFn,
        validate_only: bool,
    ) -> BoxFuture<'static, Result<TopicConfig, BrokerError>>;

    /// Grows topic `name` to `partitions` partitions (the new total, as Kafka's
    /// CreatePartitions and `fencelog topic add-partitions --count` count) and returns the count
    /// it has after; new partitions are listed by metadata (in a cluster: have an elected
    /// leader) before this returns. A count not above the current one, or above the mode's
    /// limit, is [`BrokerError::InvalidPartitions`]. `validate_only` checks and changes nothing.
    fn create_partitions(
        &self,
        name: String,
        partitions: u32,
        validate_only: bool,
    ) -> BoxFuture<'static, Result<u32, BrokerError>>;

    /// Deletes a topic: once this returns `Ok` the deletion and the name's fence floor are
    /// durable, the topic is no longer served (metadata, produce, fetch and leases answer
    /// UNKNOWN_TOPIC), its leases and committed offsets are forgotten; its files are removed
    /// afterwards.
    fn delete_topic(&self, name: String) -> BoxFuture<'static, Result<(), BrokerError>>;

    /// Whether a consumer position in `topic/partition` may be committed, and the high
    /// watermark it must not pass (`None` where this broker may hold no copy of it: a cluster's
    /// group coordinator need not be a replica).
    fn commit_target(&self, topic: &str, partition: u32) -> Result<Option<u64>, BrokerError>;

    /// Refuses a client's `operation` on a topic this mode keeps for itself (a cluster's
    /// offsets topic); standalone a topic of that name is an ordinary topic.
    fn refuse_internal(&self, topic: &str, operation: &'static str) -> Result<(), BrokerError>;
}
