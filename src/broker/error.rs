//! Errors of broker operations: one variant per thing a client can be told, each carrying what
//! the user needs to act, and each mapped to one wire error code by every listener.

use std::path::PathBuf;

use thiserror::Error;

use super::groups::GroupOffsetsError;
use crate::lease::AuthorityError;
use crate::storage::StorageError;

/// Errors of broker operations; each maps to one wire error code.
#[derive(Debug, Error)]
pub enum BrokerError {
    /// No topic of that name.
    #[error("unknown topic {0:?}")]
    UnknownTopic(String),
    /// The topic has fewer partitions.
    #[error("topic {topic:?} has no partition {partition} (it has {count})")]
    UnknownPartition {
        /// Topic.
        topic: String,
        /// Partition asked for.
        partition: u32,
        /// Partitions the topic has.
        count: u32,
    },
    /// The partition failed to open at startup (damaged files, permissions, a full disk); the
    /// other partitions are served.
    #[error("partition {topic}/{partition} is unavailable: it could not be opened at startup ({reason}); fix the cause and restart the server")]
    PartitionUnavailable {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// Why it could not be opened.
        reason: String,
    },
    /// A topic of that name exists.
    #[error("topic {0:?} already exists")]
    TopicExists(String),
    /// A partition count a topic cannot grow to (not above its current count, or above the
    /// limit): Kafka's `INVALID_PARTITIONS`.
    #[error("invalid partition count: {0}")]
    InvalidPartitions(String),
    /// Bad topic name or settings.
    #[error("invalid topic config: {0}")]
    InvalidConfig(String),
    /// A request the broker cannot act on as given (a transactional id out of bounds): the
    /// client's `INVALID_REQUEST`, with what to change.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A broker or listener setting out of range (checked when a node starts).
    #[error("invalid configuration: {0}")]
    Config(#[from] crate::domain::ConfigError),
    /// A cluster-mode refusal: another broker leads, too few in-sync replicas, an `acks=all`
    /// write not acknowledged, the metadata store unavailable.
    #[error(transparent)]
    Cluster(#[from] crate::broker::cluster::ClusterError),
    /// A storage failure (the fence's refusals among them).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The lease authority refused (held, lost, invalid TTL or holder, ...), could not make a
    /// grant's epoch durable, or could not be asked.
    #[error(transparent)]
    Lease(#[from] AuthorityError),
    /// The committed-offset store refused or failed (bad group name, a limit, damage, disk).
    #[error(transparent)]
    GroupOffsets(#[from] GroupOffsetsError),
    /// A group an admin asked to delete (or to delete offsets of) has neither members nor
    /// committed offsets here (Kafka's `GROUP_ID_NOT_FOUND`).
    #[error("group {0:?} not found: it has no members and no committed offsets")]
    GroupNotFound(String),
    /// A group an admin asked to delete still has members (Kafka's `NON_EMPTY_GROUP`): stop its
    /// consumers (or wait for their sessions to expire) first.
    #[error("group {group:?} has {members} members: stop its consumers before deleting it")]
    GroupNotEmpty {
        /// The group.
        group: String,
        /// How many members it has.
        members: usize,
    },
    /// A commit named an offset past the partition's high watermark: no consumer can have read
    /// up to there.
    #[error(
        "cannot commit offset {offset} for {topic}/{partition}: it is past the high watermark {high_watermark}"
    )]
    CommitOutOfRange {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// The offset the commit named.
        offset: u64,
        /// The partition's high watermark.
        high_watermark: u64,
    },
    /// The data directory is in use by another process.
    #[error("data directory {0} is in use by another fencelog process")]
    Locked(PathBuf),
    /// Filesystem trouble with the data directory itself.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// An `Io` error with what was being done, for `map_err`.
pub(crate) fn io_error(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BrokerError {
    let context = context.into();
    move |source| BrokerError::Io { context, source }
}
