//! The administrative calls of a [`Client`]: `ApiVersions`, creating and deleting topics, and
//! describing topics and the cluster.
//!
//! They are apart from the partition calls (leases, produce, fetch) because they go to the
//! bootstrap connection rather than to a partition's leader, and none of them is on a hot path.

use tokio::time::Instant;

use super::calls::expect_response;
use super::{Client, ClientError};
use crate::protocol::{
    ApiVersionRange, BrokerMetadata, PartitionMetadata, Replication, Request, Response,
    TopicConfig, TopicMetadata,
};

/// The answer to `ApiVersions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// Server software and version, e.g. `fencelog 0.1.0`.
    pub server: String,
    /// The API versions the server supports.
    pub apis: Vec<ApiVersionRange>,
}

/// The answer to [`Client::cluster_metadata`]: the cluster as the answering broker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    /// The topics described.
    pub topics: Vec<TopicMetadata>,
    /// The live brokers (a standalone server: itself).
    pub brokers: Vec<BrokerMetadata>,
    /// Each partition of those topics: leader, leader epoch, replicas, ISR, high watermark.
    pub partitions: Vec<PartitionMetadata>,
}

impl Client {
    /// The server's software version and supported API versions.
    pub async fn api_versions(&self) -> Result<ServerInfo, ClientError> {
        let response = self.call(Request::ApiVersions).await?;
        expect_response!(response, Response::ApiVersions { server, apis } => ServerInfo { server, apis })
    }

    /// Creates a topic with `partitions` partitions.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        config: TopicConfig,
    ) -> Result<(), ClientError> {
        let response = self
            .call(Request::CreateTopic {
                name: name.to_owned(),
                partitions,
                config,
                replication: None,
            })
            .await?;
        expect_response!(response, Response::CreateTopic => ())
    }

    /// Creates a topic whose partitions are each held by `replication.factor` brokers
    /// (`CreateTopic` version 1). A standalone server accepts only a factor of 1 and refuses
    /// more with `CLUSTER_REQUIRED` ("replication needs a cluster: start the brokers with
    /// --etcd").
    pub async fn create_replicated_topic(
        &self,
        name: &str,
        partitions: u32,
        config: TopicConfig,
        replication: Replication,
    ) -> Result<(), ClientError> {
        let response = self
            .call(Request::CreateTopic {
                name: name.to_owned(),
                partitions,
                config,
                replication: Some(replication),
            })
            .await?;
        expect_response!(response, Response::CreateTopic => ())
    }

    /// Deletes a topic with its data, leases and every group's committed offsets for it. Fails
    /// with `UNKNOWN_TOPIC` if there is none. Not repeated after a lost connection (a repeat would
    /// answer `UNKNOWN_TOPIC` for the topic the first attempt deleted).
    pub async fn delete_topic(&self, name: &str) -> Result<(), ClientError> {
        let response = self
            .call(Request::DeleteTopic {
                name: name.to_owned(),
            })
            .await?;
        expect_response!(response, Response::DeleteTopic => ())
    }

    /// Deletes `topic/partition`'s records below `offset` (`DeleteRecords`;
    /// [`DELETE_UP_TO_HIGH_WATERMARK`](crate::domain::DELETE_UP_TO_HIGH_WATERMARK): every
    /// record below the high watermark) and returns the partition's new low watermark (its log
    /// start), durable on its leader. The log start never moves back: an offset at or below it
    /// answers it unchanged. Fails with `OFFSET_OUT_OF_RANGE` past the high watermark, and in a
    /// cluster it goes to the partition's leader. Not repeated
    /// after a lost connection (see `retry`).
    pub async fn delete_records(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
    ) -> Result<u64, ClientError> {
        let request = Request::DeleteRecords {
            topic: topic.to_owned(),
            partition,
            offset,
        };
        // To the partition's leader, followed like a produce's (a refusal there applied nothing).
        let response = self.call_routed(topic, partition, request).await?;
        expect_response!(response, Response::DeleteRecords { low_watermark } => low_watermark)
    }

    /// Changes a topic's live settings (segment size, retention; `AlterTopicConfig`), durably
    /// (in a cluster on every broker), and returns its settings after the change.
    pub async fn alter_topic_config(
        &self,
        name: &str,
        change: crate::domain::TopicConfigChange,
    ) -> Result<crate::domain::TopicConfig, ClientError> {
        let response = self
            .call(Request::AlterTopicConfig {
                name: name.to_owned(),
                change,
            })
            .await?;
        expect_response!(response, Response::AlterTopicConfig { config } => config)
    }

    /// Grows a topic to `partition_count` partitions (the new total; `CreatePartitions`),
    /// durably (in a cluster on every broker, each new partition with an elected leader), and
    /// returns its count after. A count not above the current one, or above the server's limit,
    /// fails with `INVALID_CONFIG` naming it. Not repeated after a lost connection (a repeat
    /// would be refused for the count the first attempt reached): check with
    /// [`metadata`](Self::metadata) instead.
    pub async fn create_partitions(
        &self,
        name: &str,
        partition_count: u32,
    ) -> Result<u32, ClientError> {
        let response = self
            .call(Request::CreatePartitions {
                name: name.to_owned(),
                partition_count,
                validate_only: false,
            })
            .await?;
        expect_response!(response, Response::CreatePartitions { partition_count } => partition_count)
    }

    /// Describes the named topics, in the order asked; an empty list means all topics (sorted
    /// by name). Fails with `UNKNOWN_TOPIC` if any named topic does not exist.
    pub async fn metadata<S: AsRef<str>>(
        &self,
        topics: &[S],
    ) -> Result<Vec<TopicMetadata>, ClientError> {
        let topics = topics.iter().map(|t| t.as_ref().to_owned()).collect();
        let response = self
            .call(Request::Metadata {
                topics,
                cluster: false,
            })
            .await?;
        expect_response!(response, Response::Metadata { topics, .. } => topics)
    }

    /// Describes the cluster (`Metadata` version 1), as the bootstrap server that answers sees
    /// it: the brokers, and each partition of the named topics (all when empty) with its leader,
    /// leader epoch, replicas, in-sync replicas and high watermark. A standalone server is one
    /// broker leading everything in leader epoch 0. The client's routing learns from the answer.
    pub async fn cluster_metadata<S: AsRef<str>>(
        &self,
        topics: &[S],
    ) -> Result<ClusterInfo, ClientError> {
        let topics = topics.iter().map(|t| t.as_ref().to_owned()).collect();
        let deadline = Instant::now() + self.config().request_timeout;
        let answer = self.routing.describe(topics, deadline).await?;
        Ok(ClusterInfo {
            topics: answer.topics,
            brokers: answer.cluster.brokers,
            partitions: answer.cluster.partitions,
        })
    }

    /// Describes every topic, sorted by name.
    pub async fn list_topics(&self) -> Result<Vec<TopicMetadata>, ClientError> {
        self.metadata::<&str>(&[]).await
    }
}
