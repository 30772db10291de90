//! The successful response bodies of the native protocol, one enum variant per API.
//!
//! The variants are what the broker answers and the client receives; the bytes of each variant
//! live in its API's file under `api/`, and the methods here only dispatch to them. Failed
//! responses carry an [`ErrorResponse`](super::ErrorResponse) instead (see `error_response`).

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
    ApiKey, ApiVersionRange, ClusterMetadata, LeaderEpochEndPartition, ProtocolError,
    ReplicaFetchedPartition, TopicMetadata, SERVER_SOFTWARE,
};

/// A successful response body, one variant per API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// Server software and supported API versions.
    ApiVersions {
        /// Server software and version, e.g. [`SERVER_SOFTWARE`].
        server: String,
        /// One entry per supported API.
        apis: Vec<ApiVersionRange>,
    },
    /// The topic was created. Empty body.
    CreateTopic,
    /// The topic was deleted. Empty body.
    DeleteTopic,
    /// The partition's records below the asked offset are deleted.
    DeleteRecords {
        /// The partition's log start now (its first offset still readable).
        low_watermark: u64,
    },
    /// The topic's config after the change.
    AlterTopicConfig {
        /// Its settings now.
        config: crate::domain::TopicConfig,
    },
    /// The topic's partition count after the grow (with `validate_only`: the count it would
    /// have).
    CreatePartitions {
        /// Its partitions now.
        partition_count: u32,
    },
    /// Topic descriptions.
    Metadata {
        /// The requested topics (or all of them).
        topics: Vec<TopicMetadata>,
        /// Version 1: the brokers and the partitions' replication state; `None` in version 0.
        cluster: Option<ClusterMetadata>,
    },
    /// A lease was granted.
    AcquireLease {
        /// The new epoch (fencing token) to stamp into produced batches.
        epoch: u64,
        /// Secret identifying this lease for renew and release.
        lease_id: u128,
        /// Granted lease duration in milliseconds.
        ttl_ms: u64,
    },
    /// A lease was renewed.
    RenewLease {
        /// The lease's epoch (unchanged by renewal).
        epoch: u64,
        /// Milliseconds until the renewed lease expires.
        ttl_ms: u64,
    },
    /// The lease was released. Empty body.
    ReleaseLease,
    /// A batch was appended.
    Produce {
        /// Offset of the batch's first record.
        base_offset: u64,
        /// Offset of the batch's last record.
        last_offset: u64,
        /// The partition's next offset after the append.
        log_end_offset: u64,
    },
    /// Batches read from a partition.
    Fetch {
        /// Offset up to which data is durable and visible to readers.
        high_watermark: u64,
        /// Oldest offset still stored.
        log_start_offset: u64,
        /// Whole stored batches, concatenated on the wire as one `bytes32`.
        /// The encoder writes the parts back to back; the decoder does not
        /// split them (that needs the storage format's batch headers): it
        /// yields a single zero-copy chunk, or an empty `Vec` for no data.
        batches: Vec<Bytes>,
        /// Version 1's last stable offset and next offset (either isolation); `None` in
        /// version 0. The encoder writes the version-1 layout exactly when this is `Some`.
        committed: Option<fetch::CommittedRead>,
    },
    /// A partition's offsets and epoch.
    ListOffsets {
        /// Oldest offset still stored.
        earliest: u64,
        /// Next offset to be written (log end offset).
        latest: u64,
        /// The partition's current epoch.
        epoch: u64,
        /// Version 1: the first offset whose record timestamp is at or after the request's
        /// timestamp, -1 if none is; `None` in version 0.
        offset_for_timestamp: Option<i64>,
    },
    /// A producer id for idempotent appends.
    InitProducerId {
        /// The id to stamp into magic-3 batches.
        producer_id: i64,
        /// The producer's first session.
        producer_epoch: i16,
    },
    /// The offset was committed durably. Empty body.
    OffsetCommit,
    /// A group's committed position.
    OffsetFetch {
        /// The offset of the next record the group will read; `None` (-1 on the wire) when it
        /// committed nothing. At most `i64::MAX`.
        offset: Option<u64>,
        /// The text stored with the offset (empty when nothing is committed).
        metadata: String,
    },
    /// The server-first SCRAM message (salt, iterations, nonce).
    AuthenticateStart {
        /// `r=NONCE,s=SALT,i=ITERATIONS`.
        message: Bytes,
    },
    /// The connection is authenticated; the server proves it knows the credential.
    AuthenticateContinue {
        /// `v=SERVER_SIGNATURE`.
        message: Bytes,
    },
    /// The leader's answer to a follower's fetch, per partition.
    ReplicaFetch {
        /// One entry per partition asked for.
        partitions: Vec<ReplicaFetchedPartition>,
    },
    /// Where the asked leader epochs ended, per partition.
    LeaderEpochEnd {
        /// One entry per partition asked about.
        partitions: Vec<LeaderEpochEndPartition>,
    },
    /// The transactional id's producer id and its new producer epoch.
    InitTransaction {
        /// Stable for the transactional id.
        producer_id: i64,
        /// This instance's epoch: every older instance is fenced.
        producer_epoch: i16,
    },
    /// The partitions joined the transaction. Empty body.
    AddToTransaction,
    /// The transaction's outcome is decided and durable. Empty body.
    EndTransaction,
    /// The producer's transaction is open and includes the partition. Empty body.
    VerifyTransaction,
    /// The transaction holds the positions. Empty body.
    TxnOffsetCommit,
    /// The group's coordinator applied the outcome. Empty body.
    EndTxnOffsets,
}

impl Response {
    /// The `ApiVersions` answer of this build.
    pub fn supported_api_versions() -> Response {
        Response::ApiVersions {
            server: SERVER_SOFTWARE.to_owned(),
            apis: ApiVersionRange::supported(),
        }
    }

    /// The API this response answers.
    pub fn api_key(&self) -> ApiKey {
        match self {
            Response::ApiVersions { .. } => ApiKey::ApiVersions,
            Response::CreateTopic => ApiKey::CreateTopic,
            Response::DeleteTopic => ApiKey::DeleteTopic,
            Response::DeleteRecords { .. } => ApiKey::DeleteRecords,
            Response::AlterTopicConfig { .. } => ApiKey::AlterTopicConfig,
            Response::CreatePartitions { .. } => ApiKey::CreatePartitions,
            Response::Metadata { .. } => ApiKey::Metadata,
            Response::AcquireLease { .. } => ApiKey::AcquireLease,
            Response::RenewLease { .. } => ApiKey::RenewLease,
            Response::ReleaseLease => ApiKey::ReleaseLease,
            Response::Produce { .. } => ApiKey::Produce,
            Response::Fetch { .. } => ApiKey::Fetch,
            Response::ListOffsets { .. } => ApiKey::ListOffsets,
            Response::InitProducerId { .. } => ApiKey::InitProducerId,
            Response::OffsetCommit => ApiKey::OffsetCommit,
            Response::OffsetFetch { .. } => ApiKey::OffsetFetch,
            Response::AuthenticateStart { .. } => ApiKey::AuthenticateStart,
            Response::AuthenticateContinue { .. } => ApiKey::AuthenticateContinue,
            Response::ReplicaFetch { .. } => ApiKey::ReplicaFetch,
            Response::LeaderEpochEnd { .. } => ApiKey::LeaderEpochEnd,
            Response::InitTransaction { .. } => ApiKey::InitTransaction,
            Response::AddToTransaction => ApiKey::AddToTransaction,
            Response::EndTransaction => ApiKey::EndTransaction,
            Response::VerifyTransaction => ApiKey::VerifyTransaction,
            Response::TxnOffsetCommit => ApiKey::TxnOffsetCommit,
            Response::EndTxnOffsets => ApiKey::EndTxnOffsets,
        }
    }

    /// Exact size of the body [`encode_body`](Self::encode_body) writes.
    pub(in crate::protocol) fn body_len(&self) -> usize {
        match self {
            Response::ApiVersions { server, apis } => api_versions::response_body_len(server, apis),
            Response::CreateTopic => create_topic::response_body_len(),
            Response::DeleteTopic => delete_topic::response_body_len(),
            Response::DeleteRecords { .. } => delete_records::response_body_len(),
            Response::AlterTopicConfig { .. } => alter_topic_config::response_body_len(),
            Response::CreatePartitions { .. } => create_partitions::response_body_len(),
            Response::Metadata { topics, cluster } => {
                metadata::response_body_len(topics, cluster.as_ref())
            }
            Response::AcquireLease { .. } => acquire_lease::response_body_len(),
            Response::RenewLease { .. } => renew_lease::response_body_len(),
            Response::ReleaseLease => release_lease::response_body_len(),
            Response::Produce { .. } => produce::response_body_len(),
            Response::Fetch {
                batches, committed, ..
            } => fetch::response_body_len(batches, *committed),
            Response::ListOffsets {
                offset_for_timestamp,
                ..
            } => list_offsets::response_body_len(*offset_for_timestamp),
            Response::InitProducerId { .. } => init_producer_id::response_body_len(),
            Response::OffsetCommit => offset_commit::response_body_len(),
            Response::OffsetFetch { metadata, .. } => offset_fetch::response_body_len(metadata),
            Response::AuthenticateStart { message }
            | Response::AuthenticateContinue { message } => authenticate::message_body_len(message),
            Response::ReplicaFetch { partitions } => replica_fetch::response_body_len(partitions),
            Response::LeaderEpochEnd { partitions } => {
                leader_epoch_end::response_body_len(partitions)
            }
            Response::InitTransaction { .. } => init_transaction::response_body_len(),
            Response::AddToTransaction
            | Response::EndTransaction
            | Response::VerifyTransaction
            | Response::TxnOffsetCommit
            | Response::EndTxnOffsets => 0,
        }
    }

    /// Appends the body (not the header) to `dst`; on failure `dst` may hold part of it.
    pub(in crate::protocol) fn encode_body(&self, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        match self {
            Response::ApiVersions { server, apis } => {
                api_versions::encode_response(dst, server, apis)
            }
            Response::CreateTopic => create_topic::encode_response(dst),
            Response::DeleteTopic => delete_topic::encode_response(dst),
            Response::DeleteRecords { low_watermark } => {
                delete_records::encode_response(dst, *low_watermark)
            }
            Response::AlterTopicConfig { config } => {
                alter_topic_config::encode_response(dst, config)
            }
            Response::CreatePartitions { partition_count } => {
                create_partitions::encode_response(dst, *partition_count)
            }
            Response::Metadata { topics, cluster } => {
                metadata::encode_response(dst, topics, cluster.as_ref())
            }
            Response::AcquireLease {
                epoch,
                lease_id,
                ttl_ms,
            } => acquire_lease::encode_response(dst, *epoch, *lease_id, *ttl_ms),
            Response::RenewLease { epoch, ttl_ms } => {
                renew_lease::encode_response(dst, *epoch, *ttl_ms)
            }
            Response::ReleaseLease => release_lease::encode_response(dst),
            Response::Produce {
                base_offset,
                last_offset,
                log_end_offset,
            } => produce::encode_response(dst, *base_offset, *last_offset, *log_end_offset),
            Response::Fetch {
                high_watermark,
                log_start_offset,
                batches,
                committed,
            } => {
                fetch::encode_response(dst, *high_watermark, *log_start_offset, batches, *committed)
            }
            Response::ListOffsets {
                earliest,
                latest,
                epoch,
                offset_for_timestamp,
            } => list_offsets::encode_response(
                dst,
                *earliest,
                *latest,
                *epoch,
                *offset_for_timestamp,
            ),
            Response::InitProducerId {
                producer_id,
                producer_epoch,
            } => init_producer_id::encode_response(dst, *producer_id, *producer_epoch),
            Response::OffsetCommit => offset_commit::encode_response(dst),
            Response::OffsetFetch { offset, metadata } => {
                offset_fetch::encode_response(dst, *offset, metadata)
            }
            Response::AuthenticateStart { message }
            | Response::AuthenticateContinue { message } => {
                authenticate::encode_message(dst, "message", message)
            }
            Response::ReplicaFetch { partitions } => {
                replica_fetch::encode_response(dst, partitions)
            }
            Response::LeaderEpochEnd { partitions } => {
                leader_epoch_end::encode_response(dst, partitions)
            }
            Response::InitTransaction {
                producer_id,
                producer_epoch,
            } => init_transaction::encode_response(dst, *producer_id, *producer_epoch),
            // Empty bodies.
            Response::AddToTransaction
            | Response::EndTransaction
            | Response::VerifyTransaction
            | Response::TxnOffsetCommit
            | Response::EndTxnOffsets => Ok(()),
        }
    }

    /// Reads the body of a successful response to `api_key` in `version`; the caller checks
    /// nothing is left over.
    pub(in crate::protocol) fn decode_body(
        api_key: ApiKey,
        version: u16,
        r: &mut Reader,
    ) -> Result<Response, WireError> {
        match api_key {
            ApiKey::ApiVersions => api_versions::decode_response(r),
            ApiKey::CreateTopic => create_topic::decode_response(r),
            ApiKey::DeleteTopic => delete_topic::decode_response(r),
            ApiKey::DeleteRecords => delete_records::decode_response(r),
            ApiKey::AlterTopicConfig => alter_topic_config::decode_response(r),
            ApiKey::CreatePartitions => create_partitions::decode_response(r),
            ApiKey::Metadata => metadata::decode_response(r, version),
            ApiKey::AcquireLease => acquire_lease::decode_response(r),
            ApiKey::RenewLease => renew_lease::decode_response(r),
            ApiKey::ReleaseLease => release_lease::decode_response(r),
            ApiKey::Produce => produce::decode_response(r),
            ApiKey::Fetch => fetch::decode_response(r, version),
            ApiKey::ListOffsets => list_offsets::decode_response(r, version),
            ApiKey::InitProducerId => init_producer_id::decode_response(r),
            ApiKey::OffsetCommit => offset_commit::decode_response(r),
            ApiKey::OffsetFetch => offset_fetch::decode_response(r),
            ApiKey::AuthenticateStart => authenticate::decode_start_response(r),
            ApiKey::AuthenticateContinue => authenticate::decode_continue_response(r),
            ApiKey::ReplicaFetch => replica_fetch::decode_response(r),
            ApiKey::LeaderEpochEnd => leader_epoch_end::decode_response(r),
            ApiKey::InitTransaction => init_transaction::decode_response(r),
            ApiKey::AddToTransaction => add_to_transaction::decode_response(r),
            ApiKey::EndTransaction => end_transaction::decode_response(r),
            ApiKey::VerifyTransaction => verify_transaction::decode_response(r),
            ApiKey::TxnOffsetCommit => txn_offsets::decode_commit_response(r),
            ApiKey::EndTxnOffsets => txn_offsets::decode_end_response(r),
        }
    }
}
