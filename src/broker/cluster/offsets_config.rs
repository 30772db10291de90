//! The settings of a cluster's offsets topic (`__consumer_offsets`): part of the cluster's
//! configuration, so they live with it; the offsets topic itself (`crate::broker::offsets_topic`)
//! reads them from the driver.

use std::time::Duration;

use crate::domain::{ConfigError, Quantity};

/// Default partitions of the offsets topic (Kafka's default is 50; fewer suit the clusters of a
/// few brokers fencelog runs on, and the topic's partitions are created in one etcd transaction).
pub const DEFAULT_OFFSETS_PARTITIONS: u32 = 8;
/// Default replication factor of the offsets topic (Kafka's `offsets.topic.replication.factor`).
pub const DEFAULT_OFFSETS_REPLICATION_FACTOR: u16 = 3;
/// Default of [`OffsetsTopicConfig::load_wait`].
pub const DEFAULT_OFFSETS_LOAD_WAIT: Duration = Duration::from_secs(10);
/// Segment size of the offsets topic (its records are small).
pub const OFFSETS_SEGMENT_BYTES: u64 = 16 * 1024 * 1024;
/// How the cluster's offsets topic is made and read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetsTopicConfig {
    /// Its partitions (only the first broker to create it decides).
    pub partitions: u32,
    /// Its replication factor; it is created only once this many brokers are live.
    pub replication_factor: u16,
    /// How long a new coordinator waits for the partition's high watermark to cover its log
    /// before answering `COORDINATOR_LOAD_IN_PROGRESS`.
    pub load_wait: Duration,
}

impl Default for OffsetsTopicConfig {
    fn default() -> Self {
        Self {
            partitions: DEFAULT_OFFSETS_PARTITIONS,
            replication_factor: DEFAULT_OFFSETS_REPLICATION_FACTOR,
            load_wait: DEFAULT_OFFSETS_LOAD_WAIT,
        }
    }
}

impl OffsetsTopicConfig {
    /// Checks the bounds: partitions and replication factor as for any cluster topic.
    pub fn validate(&self) -> Result<(), ConfigError> {
        use crate::cluster::meta::{CLUSTER_PARTITIONS_PER_TOPIC_MAX, REPLICATION_FACTOR_MAX};
        ConfigError::check_range(
            "offsets_partitions",
            Quantity::count(self.partitions as usize),
            Quantity::count(1),
            Quantity::count(CLUSTER_PARTITIONS_PER_TOPIC_MAX as usize),
        )?;
        ConfigError::check_range(
            "offsets_replication_factor",
            Quantity::count(usize::from(self.replication_factor)),
            Quantity::count(1),
            Quantity::count(usize::from(REPLICATION_FACTOR_MAX)),
        )?;
        ConfigError::check_positive("offsets_load_wait", Quantity::duration(self.load_wait))
    }
}
