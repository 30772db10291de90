//! The request bodies of the native protocol, one enum variant per API.
//!
//! The variants are what the broker and the client handle; the bytes of each variant live in its
//! API's file under `api/`, and the methods here only dispatch to them.

use bytes::{Bytes, BytesMut};

use super::api::{
    acquire_lease, add_to_transaction, alter_topic_config, api_versions, authenticate,
    create_partitions, create_topic, delete_records, delete_topic, end_transaction, fetch,
    init_producer_id, init_transaction, leader_epoch_end, list_offsets, metadata, offset_commit,
    offset_fetch, produce, release_lease, renew_lease, replica_fetch, txn_offsets,
    verify_transaction,
};
use super::wire::{Reader, WireError};
use super::{
    Acks, ApiKey, LeaderEpochQuery, ProtocolError, ReplicaFetch, Replication, TransactionPartition,
    TransactionProducer, TxnOffset,
};
use crate::domain::{TopicConfig, TopicConfigChange};

/// A request body, one variant per API (see `docs/protocol.md` for the
/// semantics of each field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Ask which API versions the server supports. Empty body.
    ApiVersions,
    /// Create a topic.
    CreateTopic {
        /// Topic name.
        name: String,
        /// Number of partitions.
        partitions: u32,
        /// Topic configuration.
        config: TopicConfig,
        /// How the partitions are replicated; `Some` makes the request version 1 (`None`: one
        /// copy, as version 0).
        replication: Option<Replication>,
    },
    /// Change a topic's live settings.
    AlterTopicConfig {
        /// Topic name.
        name: String,
        /// What to change.
        change: TopicConfigChange,
    },
    /// Grow a topic to a partition count (the new total).
    CreatePartitions {
        /// Topic name.
        name: String,
        /// The partition count wanted, above the current one.
        partition_count: u32,
        /// Only check; change nothing.
        validate_only: bool,
    },
    /// Delete a partition's records below an offset.
    DeleteRecords {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// Records below it are deleted; `u64::MAX`: every record below the high watermark.
        offset: u64,
    },
    /// Delete a topic.
    DeleteTopic {
        /// Topic name.
        name: String,
    },
    /// Describe topics.
    Metadata {
        /// Topics to describe; empty means all topics.
        topics: Vec<String>,
        /// Also describe the cluster (brokers, leaders, replicas, ISR, high watermarks): makes
        /// the request version 1.
        cluster: bool,
    },
    /// Acquire the write lease of a partition.
    AcquireLease {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// Free-form identity of the would-be writer, for logs and errors.
        holder: String,
        /// Requested lease duration in milliseconds.
        ttl_ms: u64,
    },
    /// Renew a lease.
    RenewLease {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// The id returned by `AcquireLease`.
        lease_id: u128,
    },
    /// Release a lease.
    ReleaseLease {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// The id returned by `AcquireLease`.
        lease_id: u128,
    },
    /// Append one record batch.
    Produce {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// One record batch in its stored format (epoch inside its header).
        /// When decoded, this is a zero-copy slice of the received frame.
        batch: Bytes,
        /// When the produce is acknowledged; `Some` makes the request version 1 (`None`: the
        /// broker's default, `all` on a replicated partition, `leader` otherwise).
        acks: Option<Acks>,
    },
    /// Read batches.
    Fetch {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// First offset wanted.
        offset: u64,
        /// Soft cap on the bytes of batches returned.
        max_bytes: u32,
        /// How long the server may wait for data if none is available yet.
        max_wait_ms: u32,
        /// Version 1's isolation: `Some(true)` reads committed records only (stop at the last
        /// stable offset, leave out aborted transactions and markers), `Some(false)` every
        /// record as version 0 does; `None` is version 0.
        read_committed: Option<bool>,
    },
    /// Read a partition's offsets and epoch.
    ListOffsets {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// Also find the first offset whose record timestamp is at or after this (ms); `Some`
        /// makes the request version 1.
        timestamp: Option<i64>,
    },
    /// Obtain a producer id for idempotent appends.
    InitProducerId,
    /// Store a consumer group's position in a partition.
    OffsetCommit {
        /// Consumer group name.
        group: String,
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// The offset of the next record the group will read.
        offset: u64,
        /// Free-form text stored with the offset (empty for none).
        metadata: String,
    },
    /// Read a consumer group's committed position in a partition.
    OffsetFetch {
        /// Consumer group name.
        group: String,
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
    },
    /// Start authenticating (SCRAM-SHA-256).
    AuthenticateStart {
        /// The SASL mechanism name; `SCRAM-SHA-256`.
        mechanism: String,
        /// The client-first message (`n,,n=USER,r=NONCE`).
        message: Bytes,
    },
    /// Finish authenticating.
    AuthenticateContinue {
        /// The client-final message (`c=...,r=...,p=PROOF`).
        message: Bytes,
    },
    /// A follower's fetch from the leader (cluster only).
    ReplicaFetch(ReplicaFetch),
    /// Where leader epochs ended in the leader's log (cluster only).
    LeaderEpochEnd {
        /// One question per partition.
        partitions: Vec<LeaderEpochQuery>,
    },
    /// Start (or take over) a transactional id for native atomic appends.
    InitTransaction {
        /// The transactional id (at most 120 bytes).
        transactional_id: String,
        /// An open transaction older than this is aborted (at most 15 minutes).
        timeout_ms: u32,
    },
    /// Partitions join the producer's open transaction (all or none).
    AddToTransaction {
        /// Whose transaction.
        producer: TransactionProducer,
        /// The partitions, each with the writer's lease epoch there.
        partitions: Vec<TransactionPartition>,
    },
    /// Commit or abort the producer's open transaction.
    EndTransaction {
        /// Whose transaction.
        producer: TransactionProducer,
        /// `true` commits, `false` aborts.
        commit: bool,
    },
    /// Broker to broker: whether the producer's transaction is open and includes
    /// `topic`/`partition` (the coordinator answers).
    VerifyTransaction {
        /// Whose transaction.
        producer: TransactionProducer,
        /// The partition's topic.
        topic: String,
        /// The partition.
        partition: u32,
    },
    /// Broker to broker: a Kafka transaction's consumer positions for `group`, handed to the
    /// transactional id's coordinator.
    TxnOffsetCommit {
        /// Whose transaction.
        producer: TransactionProducer,
        /// The consumer group.
        group: String,
        /// The positions.
        offsets: Vec<TxnOffset>,
    },
    /// Broker to broker: a transaction's outcome, told to `group`'s coordinator.
    EndTxnOffsets {
        /// The consumer group.
        group: String,
        /// The transaction's id.
        transactional_id: String,
        /// `true`: the transaction committed, store `offsets`.
        commit: bool,
        /// The positions to store (empty on abort).
        offsets: Vec<TxnOffset>,
    },
}

impl Request {
    /// The API this request belongs to.
    pub fn api_key(&self) -> ApiKey {
        match self {
            Request::ApiVersions => ApiKey::ApiVersions,
            Request::CreateTopic { .. } => ApiKey::CreateTopic,
            Request::DeleteTopic { .. } => ApiKey::DeleteTopic,
            Request::DeleteRecords { .. } => ApiKey::DeleteRecords,
            Request::AlterTopicConfig { .. } => ApiKey::AlterTopicConfig,
            Request::CreatePartitions { .. } => ApiKey::CreatePartitions,
            Request::Metadata { .. } => ApiKey::Metadata,
            Request::AcquireLease { .. } => ApiKey::AcquireLease,
            Request::RenewLease { .. } => ApiKey::RenewLease,
            Request::ReleaseLease { .. } => ApiKey::ReleaseLease,
            Request::Produce { .. } => ApiKey::Produce,
            Request::Fetch { .. } => ApiKey::Fetch,
            Request::ListOffsets { .. } => ApiKey::ListOffsets,
            Request::InitProducerId => ApiKey::InitProducerId,
            Request::OffsetCommit { .. } => ApiKey::OffsetCommit,
            Request::OffsetFetch { .. } => ApiKey::OffsetFetch,
            Request::AuthenticateStart { .. } => ApiKey::AuthenticateStart,
            Request::AuthenticateContinue { .. } => ApiKey::AuthenticateContinue,
            Request::ReplicaFetch(_) => ApiKey::ReplicaFetch,
            Request::LeaderEpochEnd { .. } => ApiKey::LeaderEpochEnd,
            Request::InitTransaction { .. } => ApiKey::InitTransaction,
            Request::AddToTransaction { .. } => ApiKey::AddToTransaction,
            Request::EndTransaction { .. } => ApiKey::EndTransaction,
            Request::VerifyTransaction { .. } => ApiKey::VerifyTransaction,
            Request::TxnOffsetCommit { .. } => ApiKey::TxnOffsetCommit,
            Request::EndTxnOffsets { .. } => ApiKey::EndTxnOffsets,
        }
    }

    /// The version of the API this request is encoded in: the lowest that carries its fields.
    pub fn api_version(&self) -> u16 {
        match self {
            Request::ListOffsets { timestamp, .. } => list_offsets::request_version(*timestamp),
            Request::Metadata { cluster, .. } => metadata::request_version(*cluster),
            Request::Produce { acks, .. } => produce::request_version(*acks),
            Request::CreateTopic { replication, .. } => create_topic::request_version(*replication),
            Request::ReplicaFetch(fetch) => replica_fetch::request_version(fetch),
            Request::Fetch { read_committed, .. } => fetch::request_version(*read_committed),
            _ => 0,
        }
    }

    /// Exact size of the body [`encode_body`](Self::encode_body) writes.
    pub(in crate::protocol) fn body_len(&self) -> usize {
        match self {
            Request::ApiVersions => api_versions::request_body_len(),
            Request::CreateTopic {
                name, replication, ..
            } => create_topic::request_body_len(name, *replication),
            Request::DeleteTopic { name } => delete_topic::request_body_len(name),
            Request::DeleteRecords { topic, .. } => delete_records::request_body_len(topic),
            Request::AlterTopicConfig { name, .. } => alter_topic_config::request_body_len(name),
            Request::CreatePartitions { name, .. } => create_partitions::request_body_len(name),
            Request::Metadata { topics, .. } => metadata::request_body_len(topics),
            Request::AcquireLease { topic, holder, .. } => {
                acquire_lease::request_body_len(topic, holder)
            }
            Request::RenewLease { topic, .. } => renew_lease::request_body_len(topic),
            Request::ReleaseLease { topic, .. } => release_lease::request_body_len(topic),
            Request::Produce {
                topic, batch, acks, ..
            } => produce::request_body_len(topic, batch, *acks),
            Request::Fetch {
                topic,
                read_committed,
                ..
            } => fetch::request_body_len(topic, *read_committed),
            Request::ListOffsets {
                topic, timestamp, ..
            } => list_offsets::request_body_len(topic, *timestamp),
            Request::InitProducerId => init_producer_id::request_body_len(),
            Request::OffsetCommit {
                group,
                topic,
                metadata,
                ..
            } => offset_commit::request_body_len(group, topic, metadata),
            Request::OffsetFetch { group, topic, .. } => {
                offset_fetch::request_body_len(group, topic)
            }
            Request::AuthenticateStart { mechanism, message } => {
                authenticate::start_request_body_len(mechanism, message)
            }
            Request::AuthenticateContinue { message } => authenticate::message_body_len(message),
            Request::ReplicaFetch(fetch) => replica_fetch::request_body_len(fetch),
            Request::LeaderEpochEnd { partitions } => {
                leader_epoch_end::request_body_len(partitions)
            }
            Request::InitTransaction {
                transactional_id, ..
            } => init_transaction::request_body_len(transactional_id),
            Request::AddToTransaction {
                producer,
                partitions,
            } => add_to_transaction::request_body_len(producer, partitions),
            Request::EndTransaction { producer, .. } => end_transaction::request_body_len(producer),
            Request::VerifyTransaction {
                producer, topic, ..
            } => verify_transaction::request_body_len(producer, topic),
            Request::TxnOffsetCommit {
                producer,
                group,
                offsets,
            } => txn_offsets::commit_request_len(producer, group, offsets),
            Request::EndTxnOffsets {
                group,
                transactional_id,
                offsets,
                ..
            } => txn_offsets::end_request_len(group, transactional_id, offsets),
        }
    }

    /// Appends the body (not the header) to `dst`; on failure `dst` may hold part of it.
    pub(in crate::protocol) fn encode_body(&self, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        match self {
            Request::ApiVersions => api_versions::encode_request(dst),
            Request::CreateTopic {
                name,
                partitions,
                config,
                replication,
            } => create_topic::encode_request(dst, name, *partitions, config, *replication),
            Request::DeleteTopic { name } => delete_topic::encode_request(dst, name),
            Request::DeleteRecords {
                topic,
                partition,
                offset,
            } => delete_records::encode_request(dst, topic, *partition, *offset),
            Request::AlterTopicConfig { name, change } => {
                alter_topic_config::encode_request(dst, name, change)
            }
            Request::CreatePartitions {
                name,
                partition_count,
                validate_only,
            } => create_partitions::encode_request(dst, name, *partition_count, *validate_only),
            Request::Metadata { topics, .. } => metadata::encode_request(dst, topics),
            Request::AcquireLease {
                topic,
                partition,
                holder,
                ttl_ms,
            } => acquire_lease::encode_request(dst, topic, *partition, holder, *ttl_ms),
            Request::RenewLease {
                topic,
                partition,
                lease_id,
            } => renew_lease::encode_request(dst, topic, *partition, *lease_id),
            Request::ReleaseLease {
                topic,
                partition,
                lease_id,
            } => release_lease::encode_request(dst, topic, *partition, *lease_id),
            Request::Produce {
                topic,
                partition,
                batch,
                acks,
            } => produce::encode_request(dst, topic, *partition, batch, *acks),
            Request::Fetch {
                topic,
                partition,
                offset,
                max_bytes,
                max_wait_ms,
                read_committed,
            } => fetch::encode_request(
                dst,
                topic,
                *partition,
                *offset,
                *max_bytes,
                *max_wait_ms,
                *read_committed,
            ),
            Request::ListOffsets {
                topic,
                partition,
                timestamp,
            } => list_offsets::encode_request(dst, topic, *partition, *timestamp),
            Request::InitProducerId => init_producer_id::encode_request(dst),
            Request::OffsetCommit {
                group,
                topic,
                partition,
                offset,
                metadata,
            } => offset_commit::encode_request(dst, group, topic, *partition, *offset, metadata),
            Request::OffsetFetch {
                group,
                topic,
                partition,
            } => offset_fetch::encode_request(dst, group, topic, *partition),
            Request::AuthenticateStart { mechanism, message } => {
                authenticate::encode_start_request(dst, mechanism, message)
            }
            Request::AuthenticateContinue { message } => {
                authenticate::encode_message(dst, "message", message)
            }
            Request::ReplicaFetch(fetch) => replica_fetch::encode_request(dst, fetch),
            Request::LeaderEpochEnd { partitions } => {
                leader_epoch_end::encode_request(dst, partitions)
            }
            Request::InitTransaction {
                transactional_id,
                timeout_ms,
            } => init_transaction::encode_request(dst, transactional_id, *timeout_ms),
            Request::AddToTransaction {
                producer,
                partitions,
            } => add_to_transaction::encode_request(dst, producer, partitions),
            Request::EndTransaction { producer, commit } => {
                end_transaction::encode_request(dst, producer, *commit)
            }
            Request::VerifyTransaction {
                producer,
                topic,
                partition,
            } => verify_transaction::encode_request(dst, producer, topic, *partition),
            Request::TxnOffsetCommit {
                producer,
                group,
                offsets,
            } => txn_offsets::encode_commit_request(dst, producer, group, offsets),
            Request::EndTxnOffsets {
                group,
                transactional_id,
                commit,
                offsets,
            } => txn_offsets::encode_end_request(dst, group, transactional_id, *commit, offsets),
        }
    }

    /// Reads the body of a request for `api_key` in `version`; the caller checks nothing is
    /// left over.
    pub(in crate::protocol) fn decode_body(
        api_key: ApiKey,
        version: u16,
        r: &mut Reader,
    ) -> Result<Request, WireError> {
        match api_key {
            ApiKey::ApiVersions => api_versions::decode_request(r),
            ApiKey::CreateTopic => create_topic::decode_request(r, version),
            ApiKey::DeleteTopic => delete_topic::decode_request(r),
            ApiKey::DeleteRecords => delete_records::decode_request(r),
            ApiKey::AlterTopicConfig => alter_topic_config::decode_request(r),
            ApiKey::CreatePartitions => create_partitions::decode_request(r),
            ApiKey::Metadata => metadata::decode_request(r, version),
            ApiKey::AcquireLease => acquire_lease::decode_request(r),
            ApiKey::RenewLease => renew_lease::decode_request(r),
            ApiKey::ReleaseLease => release_lease::decode_request(r),
            ApiKey::Produce => produce::decode_request(r, version),
            ApiKey::Fetch => fetch::decode_request(r, version),
            ApiKey::ListOffsets => list_offsets::decode_request(r, version),
            ApiKey::InitProducerId => init_producer_id::decode_request(r),
            ApiKey::OffsetCommit => offset_commit::decode_request(r),
            ApiKey::OffsetFetch => offset_fetch::decode_request(r),
            ApiKey::AuthenticateStart => authenticate::decode_start_request(r),
            ApiKey::AuthenticateContinue => authenticate::decode_continue_request(r),
            ApiKey::ReplicaFetch => replica_fetch::decode_request(r, version),
            ApiKey::LeaderEpochEnd => leader_epoch_end::decode_request(r),
            ApiKey::InitTransaction => init_transaction::decode_request(r),
            ApiKey::AddToTransaction => add_to_transaction::decode_request(r),
            ApiKey::EndTransaction => end_transaction::decode_request(r),
            ApiKey::VerifyTransaction => verify_transaction::decode_request(r),
            ApiKey::TxnOffsetCommit => txn_offsets::decode_commit_request(r),
            ApiKey::EndTxnOffsets => txn_offsets::decode_end_request(r),
        }
    }
}
