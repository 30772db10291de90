//! `Metadata` (key 2): describe some or all topics; version 1 also describes the cluster.
//!
//! Request (both versions): `topic_count u16`, then that many `string16` names (none means every
//! topic). Response, version 0: `topic_count u32`, then per topic `name string16, partitions u32`
//! and its configuration (see `protocol::topic_config`). Version 1 appends the brokers
//! (`broker_count u32`, then per broker `node_id u32, address string16`) and the partitions of
//! the topics above (`partition_count u32`, then per partition `topic string16, partition u32,
//! leader u32` (`0xffffffff`: none), `leader_epoch u32, replicas, isr` (each `u16` count then
//! `u32` node ids), `high_watermark u64`). The version follows from the request's
//! `cluster` flag, so a client that does not ask keeps talking to servers that only know
//! version 0.

use bytes::{BufMut, BytesMut};

use crate::domain::TopicConfig;
use crate::domain::{LeaderEpoch, NodeId};
use crate::protocol::node::{
    node_list_len, put_node, put_node_list, read_node, read_node_list, NO_NODE,
};
use crate::protocol::topic_config::{put_topic_config, read_topic_config, TOPIC_CONFIG_BYTES};
use crate::protocol::wire::{put_len32, put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// The version that describes the cluster.
pub(in crate::protocol) const CLUSTER_VERSION: u16 = 1;

/// Smallest possible encoding of one response entry (empty name).
const TOPIC_METADATA_MIN_BYTES: usize = 2 + 4 + TOPIC_CONFIG_BYTES;

/// Smallest possible encoding of one requested topic name (empty name).
const TOPIC_NAME_MIN_BYTES: usize = 2;

/// Smallest possible encoding of one broker entry (empty address).
const BROKER_MIN_BYTES: usize = 4 + 2;

/// Smallest possible encoding of one partition entry (empty topic, no replicas).
const PARTITION_MIN_BYTES: usize = 2 + 4 + 4 + 4 + 2 + 2 + 8;

/// One topic in a `Metadata` response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    /// Topic name.
    pub name: String,
    /// Number of partitions, numbered `0..partitions`.
    pub partitions: u32,
    /// The topic's configuration.
    pub config: TopicConfig,
}

/// One broker of the cluster, in a version-1 `Metadata` response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerMetadata {
    /// `serve --node-id`.
    pub node_id: NodeId,
    /// `host:port` of its native listener, as it advertises it (`serve --advertise`).
    pub address: String,
}

/// One partition's replication state, in a version-1 `Metadata` response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// The broker that leads it; `None` while it has no leader (an election, or no live
    /// in-sync replica): requests for it get `LEADER_NOT_AVAILABLE`.
    pub leader: Option<NodeId>,
    /// Raised on every change of leader.
    pub leader_epoch: LeaderEpoch,
    /// The brokers holding a copy, preferred leader first.
    pub replicas: Vec<NodeId>,
    /// The in-sync replicas.
    pub isr: Vec<NodeId>,
    /// The offset below which records are committed and readable, as the answering broker knows
    /// it (exact on the leader; a follower's may lag).
    pub high_watermark: u64,
}

/// What version 1 adds: the brokers, and each partition's leader, replicas and ISR.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterMetadata {
    /// Every live broker (a standalone server: itself).
    pub brokers: Vec<BrokerMetadata>,
    /// The partitions of the response's topics, topic by topic, in partition order.
    pub partitions: Vec<PartitionMetadata>,
}

/// The version of a request that does (or does not) ask for the cluster.
pub(in crate::protocol) fn request_version(cluster: bool) -> u16 {
    if cluster {
        CLUSTER_VERSION
    } else {
        0
    }
}

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(topics: &[String]) -> usize {
    2 + topics.iter().map(|t| str16_len(t)).sum::<usize>()
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    topics: &[String],
) -> Result<(), ProtocolError> {
    let count = u16::try_from(topics.len()).map_err(|_| {
        ProtocolError::Unencodable(format!(
            "Metadata request names {} topics; at most 65535 fit",
            topics.len()
        ))
    })?;
    dst.put_u16(count);
    for topic in topics {
        put_str16(dst, "topic name", topic)?;
    }
    Ok(())
}

/// Reads the request body of `version`; the list's capacity is capped by the bytes that remain.
pub(in crate::protocol) fn decode_request(
    r: &mut Reader,
    version: u16,
) -> Result<Request, WireError> {
    let count = usize::from(r.u16("topic_count")?);
    let mut topics = Vec::with_capacity(r.capped(count, TOPIC_NAME_MIN_BYTES));
    for _ in 0..count {
        topics.push(r.string16("topic name")?);
    }
    Ok(Request::Metadata {
        topics,
        cluster: version >= CLUSTER_VERSION,
    })
}

/// Size of the response body.
pub(in crate::protocol) fn response_body_len(
    topics: &[TopicMetadata],
    cluster: Option<&ClusterMetadata>,
) -> usize {
    let topics_len = 4 + topics
        .iter()
        .map(|t| str16_len(&t.name) + 4 + TOPIC_CONFIG_BYTES)
        .sum::<usize>();
    topics_len + cluster.map_or(0, cluster_len)
}

fn cluster_len(cluster: &ClusterMetadata) -> usize {
    let brokers = cluster
        .brokers
        .iter()
        .map(|b| 4 + str16_len(&b.address))
        .sum::<usize>();
    let partitions = cluster
        .partitions
        .iter()
        .map(|p| {
            str16_len(&p.topic) + 4 + 4 + 4 + node_list_len(&p.replicas) + node_list_len(&p.isr) + 8
        })
        .sum::<usize>();
    4 + brokers + 4 + partitions
}

/// Writes the response body: version 1 when `cluster` is given.
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    topics: &[TopicMetadata],
    cluster: Option<&ClusterMetadata>,
) -> Result<(), ProtocolError> {
    put_len32(dst, "topic count", topics.len())?;
    for topic in topics {
        put_str16(dst, "topic name", &topic.name)?;
        dst.put_u32(topic.partitions);
        put_topic_config(dst, &topic.config);
    }
    let Some(cluster) = cluster else {
        return Ok(());
    };
    put_len32(dst, "broker count", cluster.brokers.len())?;
    for broker in &cluster.brokers {
        if broker.node_id == NO_NODE {
            return Err(ProtocolError::Unencodable(format!(
                "node id {NO_NODE} is reserved for \"no node\""
            )));
        }
        dst.put_u32(broker.node_id);
        put_str16(dst, "broker address", &broker.address)?;
    }
    put_len32(dst, "partition count", cluster.partitions.len())?;
    for partition in &cluster.partitions {
        put_str16(dst, "topic", &partition.topic)?;
        dst.put_u32(partition.partition);
        put_node(dst, partition.leader);
        dst.put_u32(partition.leader_epoch);
        put_node_list(dst, "replicas", &partition.replicas)?;
        put_node_list(dst, "isr", &partition.isr)?;
        dst.put_u64(partition.high_watermark);
    }
    Ok(())
}

/// Reads the response body of `version`; every list's capacity is capped by the bytes that
/// remain.
pub(in crate::protocol) fn decode_response(
    r: &mut Reader,
    version: u16,
) -> Result<Response, WireError> {
    let count = r.len32("topic_count")?;
    let mut topics = Vec::with_capacity(r.capped(count, TOPIC_METADATA_MIN_BYTES));
    for _ in 0..count {
        topics.push(TopicMetadata {
            name: r.string16("topic name")?,
            partitions: r.u32("partitions")?,
            config: read_topic_config(r)?,
        });
    }
    let cluster = if version >= CLUSTER_VERSION {
        Some(decode_cluster(r)?)
    } else {
        None
    };
    Ok(Response::Metadata { topics, cluster })
}

fn decode_cluster(r: &mut Reader) -> Result<ClusterMetadata, WireError> {
    let count = r.len32("broker_count")?;
    let mut brokers = Vec::with_capacity(r.capped(count, BROKER_MIN_BYTES));
    for _ in 0..count {
        brokers.push(BrokerMetadata {
            node_id: r.u32("node_id")?,
            address: r.string16("address")?,
        });
    }
    let count = r.len32("partition_count")?;
    let mut partitions = Vec::with_capacity(r.capped(count, PARTITION_MIN_BYTES));
    for _ in 0..count {
        partitions.push(PartitionMetadata {
            topic: r.string16("topic")?,
            partition: r.u32("partition")?,
            leader: read_node(r, "leader")?,
            leader_epoch: r.u32("leader_epoch")?,
            replicas: read_node_list(r, "replicas")?,
            isr: read_node_list(r, "isr")?,
            high_watermark: r.u64("high_watermark")?,
        });
    }
    Ok(ClusterMetadata {
        brokers,
        partitions,
    })
}
