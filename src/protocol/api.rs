//! The APIs of the native protocol: their keys, the versions this build supports, and (in
//! `api/`, one file per API) each API's request and response bodies.
//!
//! Everything about one API's bytes lives in its own file: the size, encoding and decoding of its
//! request body and of its response body, in the order `docs/protocol.md` lists the fields. The
//! [`Request`](super::Request) and [`Response`](super::Response) enums only dispatch to those
//! files, so adding or changing an API touches one file plus one arm per dispatching match.

use std::fmt;

pub(in crate::protocol) mod acquire_lease;
pub(in crate::protocol) mod add_to_transaction;
pub(in crate::protocol) mod alter_topic_config;
pub(in crate::protocol) mod api_versions;
pub(in crate::protocol) mod authenticate;
pub(in crate::protocol) mod create_partitions;
pub(in crate::protocol) mod create_topic;
pub(in crate::protocol) mod delete_records;
pub(in crate::protocol) mod delete_topic;
pub(in crate::protocol) mod end_transaction;
pub(in crate::protocol) mod fetch;
pub(in crate::protocol) mod init_producer_id;
pub(in crate::protocol) mod init_transaction;
pub(in crate::protocol) mod leader_epoch_end;
pub(in crate::protocol) mod list_offsets;
pub(in crate::protocol) mod metadata;
pub(in crate::protocol) mod offset_commit;
pub(in crate::protocol) mod offset_fetch;
pub(in crate::protocol) mod produce;
pub(in crate::protocol) mod release_lease;
pub(in crate::protocol) mod renew_lease;
pub(in crate::protocol) mod replica_fetch;
pub(in crate::protocol) mod txn_offsets;
pub(in crate::protocol) mod verify_transaction;

/// Which operation a request asks for; the first field of every request
/// header. The discriminants are the wire values.
#[repr(u16)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ApiKey {
    /// Discover the server software and the API versions it supports.
    ApiVersions = 0,
    /// Create a topic with a number of partitions and a configuration.
    CreateTopic = 1,
    /// Describe some or all topics.
    Metadata = 2,
    /// Take the write lease of a partition, obtaining a new epoch.
    AcquireLease = 3,
    /// Extend a lease before it expires.
    RenewLease = 4,
    /// Give a lease up early.
    ReleaseLease = 5,
    /// Append one record batch to a partition.
    Produce = 6,
    /// Read record batches from a partition.
    Fetch = 7,
    /// Read a partition's offset range and current epoch.
    ListOffsets = 8,
    /// Obtain a producer id for idempotent appends.
    InitProducerId = 9,
    /// Store a consumer group's position in a partition.
    OffsetCommit = 10,
    /// Read a consumer group's committed position in a partition.
    OffsetFetch = 11,
    /// Delete a topic with its data, leases and committed offsets.
    DeleteTopic = 12,
    /// Start authenticating: the mechanism and the client's first SCRAM message.
    AuthenticateStart = 13,
    /// Finish authenticating: the client's final SCRAM message (the proof).
    AuthenticateContinue = 14,
    /// A follower pulls batches from the leader of the partitions it replicates (cluster only).
    ReplicaFetch = 15,
    /// Where a leader epoch ended in the leader's log, for truncation (cluster only).
    LeaderEpochEnd = 16,
    /// Change a topic's live settings (segment size, retention).
    AlterTopicConfig = 17,
    /// Grow a topic to a partition count (partitions are only ever added).
    CreatePartitions = 18,
    /// Delete a partition's records below an offset (move its log start).
    DeleteRecords = 19,
    /// Start or take over a transactional id for native atomic appends (fences its previous
    /// instance).
    InitTransaction = 20,
    /// Partitions join a native transaction, each under the writer's lease epoch.
    AddToTransaction = 21,
    /// Commit or abort a native transaction: all of its partitions, or none.
    EndTransaction = 22,
    /// Broker to broker: is a Kafka producer's transaction open with this partition in it (a
    /// partition leader asks the transactional id's coordinator before the first batch)?
    VerifyTransaction = 23,
    /// Broker to broker: a group's coordinator hands a Kafka transaction's consumer positions
    /// to the transactional id's coordinator.
    TxnOffsetCommit = 24,
    /// Broker to broker: a transactional id's coordinator tells a group's coordinator the
    /// transaction's outcome (commit: store its positions).
    EndTxnOffsets = 25,
}

impl ApiKey {
    /// Every API, in wire order (keys are not contiguous: a key reserved for an API of another
    /// build is never reused).
    pub const ALL: [ApiKey; 26] = [
        ApiKey::ApiVersions,
        ApiKey::CreateTopic,
        ApiKey::Metadata,
        ApiKey::AcquireLease,
        ApiKey::RenewLease,
        ApiKey::ReleaseLease,
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::ListOffsets,
        ApiKey::InitProducerId,
        ApiKey::OffsetCommit,
        ApiKey::OffsetFetch,
        ApiKey::DeleteTopic,
        ApiKey::AuthenticateStart,
        ApiKey::AuthenticateContinue,
        ApiKey::ReplicaFetch,
        ApiKey::LeaderEpochEnd,
        ApiKey::AlterTopicConfig,
        ApiKey::CreatePartitions,
        ApiKey::DeleteRecords,
        ApiKey::InitTransaction,
        ApiKey::AddToTransaction,
        ApiKey::EndTransaction,
        ApiKey::VerifyTransaction,
        ApiKey::TxnOffsetCommit,
        ApiKey::EndTxnOffsets,
    ];

    /// Maps a wire value to an API; `None` for keys this build does not know.
    pub fn from_u16(value: u16) -> Option<ApiKey> {
        Self::ALL.into_iter().find(|key| key.as_u16() == value)
    }

    /// The on-wire value.
    pub fn as_u16(self) -> u16 {
        self as u16
    }

    /// The API's name as used in docs and logs.
    pub fn name(self) -> &'static str {
        match self {
            ApiKey::ApiVersions => "ApiVersions",
            ApiKey::CreateTopic => "CreateTopic",
            ApiKey::Metadata => "Metadata",
            ApiKey::AcquireLease => "AcquireLease",
            ApiKey::RenewLease => "RenewLease",
            ApiKey::ReleaseLease => "ReleaseLease",
            ApiKey::Produce => "Produce",
            ApiKey::Fetch => "Fetch",
            ApiKey::ListOffsets => "ListOffsets",
            ApiKey::InitProducerId => "InitProducerId",
            ApiKey::OffsetCommit => "OffsetCommit",
            ApiKey::OffsetFetch => "OffsetFetch",
            ApiKey::DeleteTopic => "DeleteTopic",
            ApiKey::AuthenticateStart => "AuthenticateStart",
            ApiKey::AuthenticateContinue => "AuthenticateContinue",
            ApiKey::ReplicaFetch => "ReplicaFetch",
            ApiKey::LeaderEpochEnd => "LeaderEpochEnd",
            ApiKey::AlterTopicConfig => "AlterTopicConfig",
            ApiKey::CreatePartitions => "CreatePartitions",
            ApiKey::DeleteRecords => "DeleteRecords",
            ApiKey::InitTransaction => "InitTransaction",
            ApiKey::AddToTransaction => "AddToTransaction",
            ApiKey::EndTransaction => "EndTransaction",
            ApiKey::VerifyTransaction => "VerifyTransaction",
            ApiKey::TxnOffsetCommit => "TxnOffsetCommit",
            ApiKey::EndTxnOffsets => "EndTxnOffsets",
        }
    }

    /// Oldest version of this API the build understands.
    pub fn min_version(self) -> u16 {
        0
    }

    /// Newest version of this API the build understands.
    pub fn max_version(self) -> u16 {
        match self {
            // Version 1 adds the timestamp lookup.
            ApiKey::ListOffsets => 1,
            // Version 1 adds the brokers and each partition's leader, replicas and ISR.
            ApiKey::Metadata => 1,
            // Version 1 adds `acks`.
            ApiKey::Produce => 1,
            // Version 1 adds the replication factor and `min_insync`.
            ApiKey::CreateTopic => 1,
            // Version 1 adds each partition's `log_end_offset` (pipelined fetches, reports).
            ApiKey::ReplicaFetch => 1,
            // Version 1 adds the isolation level (read_committed) and, in the response, the
            // last stable offset and the next offset to fetch.
            ApiKey::Fetch => 1,
            _ => 0,
        }
    }

    /// Whether `version` is within `min_version..=max_version`.
    pub fn supports_version(self, version: u16) -> bool {
        (self.min_version()..=self.max_version()).contains(&version)
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One entry of an `ApiVersions` response.
///
/// `api_key` is the raw `u16` rather than an [`ApiKey`] so that a client can
/// read the list from a newer server that supports APIs it has never heard of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ApiVersionRange {
    /// The API's wire key.
    pub api_key: u16,
    /// Oldest supported version.
    pub min_version: u16,
    /// Newest supported version.
    pub max_version: u16,
}

impl ApiVersionRange {
    /// The ranges this build supports, one per [`ApiKey`], in key order.
    pub fn supported() -> Vec<ApiVersionRange> {
        ApiKey::ALL
            .iter()
            .map(|k| ApiVersionRange {
                api_key: k.as_u16(),
                min_version: k.min_version(),
                max_version: k.max_version(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_their_wire_values() {
        for key in ApiKey::ALL {
            assert_eq!(ApiKey::from_u16(key.as_u16()), Some(key));
        }
        assert!(ApiKey::ALL.windows(2).all(|pair| pair[0] < pair[1]));
        assert_eq!(ApiKey::OffsetCommit.as_u16(), 10);
        assert_eq!(ApiKey::OffsetFetch.as_u16(), 11);
        assert_eq!(ApiKey::DeleteTopic.as_u16(), 12);
        assert_eq!(ApiKey::AuthenticateStart.as_u16(), 13);
        assert_eq!(ApiKey::AuthenticateContinue.as_u16(), 14);
        assert_eq!(ApiKey::ReplicaFetch.as_u16(), 15);
        assert_eq!(ApiKey::LeaderEpochEnd.as_u16(), 16);
        assert_eq!(ApiKey::AlterTopicConfig.as_u16(), 17);
        assert_eq!(ApiKey::CreatePartitions.as_u16(), 18);
        assert_eq!(ApiKey::DeleteRecords.as_u16(), 19);
        assert_eq!(ApiKey::InitTransaction.as_u16(), 20);
        assert_eq!(ApiKey::AddToTransaction.as_u16(), 21);
        assert_eq!(ApiKey::EndTransaction.as_u16(), 22);
        assert_eq!(ApiKey::VerifyTransaction.as_u16(), 23);
        assert_eq!(ApiKey::TxnOffsetCommit.as_u16(), 24);
        assert_eq!(ApiKey::EndTxnOffsets.as_u16(), 25);
        assert_eq!(ApiKey::from_u16(u16::MAX), None);
        assert_eq!(ApiVersionRange::supported().len(), ApiKey::ALL.len());
    }
}
