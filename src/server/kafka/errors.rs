//! Broker errors as Kafka error codes: one code each, the closest Kafka has, so a Kafka client
//! takes the action Kafka would make it take (retry a storage error, refresh metadata for an
//! unknown partition, give up on an invalid config). Every match is exhaustive, so a new error
//! variant cannot silently become `UNKNOWN_SERVER_ERROR`.
//!
//! Produce's fencing errors (`INVALID_PRODUCER_EPOCH`, `PRODUCER_FENCED`, sequence errors) depend
//! on the request version and belong with the Produce handler; here they map to their plain
//! meaning.

use kafka_protocol::ResponseError;

use crate::broker::consumer_groups::ConsumerGroupError;
use crate::broker::coordinator::GroupError;
use crate::broker::transactions::{CoordinatorError, TxnError};
use crate::broker::{BrokerError, GroupOffsetsError};
use crate::lease::AuthorityError;
use crate::storage::{FenceError, ReplicaError, SequenceError, StorageError};

/// The Kafka error for an ACL store's refusal (CreateAcls, DeleteAcls, DescribeAcls): an
/// invalid change is `INVALID_REQUEST`; a change not made `UNKNOWN_SERVER_ERROR`; a change whose
/// outcome is unknown `REQUEST_TIMED_OUT`, Kafka's word for "may still have happened", never a
/// plain failure.
pub fn acl_store_error(error: &crate::auth::AclStoreError) -> ResponseError {
    use crate::auth::AclStoreError;
    match error {
        AclStoreError::Refused(_) => ResponseError::InvalidRequest,
        AclStoreError::NotWritten(_) => ResponseError::UnknownServerError,
        AclStoreError::OutcomeUnknown(_) => ResponseError::RequestTimedOut,
    }
}

/// The Kafka error for a broker error.
pub fn kafka_error(error: &BrokerError) -> ResponseError {
    match error {
        BrokerError::UnknownTopic(_) | BrokerError::UnknownPartition { .. } => {
            ResponseError::UnknownTopicOrPartition
        }
        BrokerError::TopicExists(_) => ResponseError::TopicAlreadyExists,
        BrokerError::InvalidConfig(_) | BrokerError::Config(_) => ResponseError::InvalidConfig,
        BrokerError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
        BrokerError::InvalidRequest(_) => ResponseError::InvalidRequest,
        BrokerError::Locked(_) | BrokerError::Io { .. } => ResponseError::KafkaStorageError,
        BrokerError::PartitionUnavailable { .. } => ResponseError::KafkaStorageError,
        BrokerError::Storage(storage) => storage_error(storage),
        BrokerError::Lease(AuthorityError::Install { source, .. }) => storage_error(source),
        BrokerError::Lease(AuthorityError::Refused(_)) => ResponseError::ProducerFenced,
        BrokerError::Lease(AuthorityError::Unavailable(_)) => ResponseError::UnknownServerError,
        BrokerError::GroupOffsets(group) => group_offsets_error(group),
        BrokerError::CommitOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        BrokerError::GroupNotFound(_) => ResponseError::GroupIdNotFound,
        BrokerError::GroupNotEmpty { .. } => ResponseError::NonEmptyGroup,
        BrokerError::Cluster(cluster) => cluster_error(cluster),
    }
}

/// The Kafka error for a cluster-mode refusal.
fn cluster_error(error: &crate::broker::cluster::ClusterError) -> ResponseError {
    use crate::broker::cluster::ClusterError;
    match error {
        ClusterError::NotLeader { .. } => ResponseError::NotLeaderOrFollower,
        ClusterError::LeaderNotAvailable { .. } => ResponseError::LeaderNotAvailable,
        ClusterError::NotEnoughReplicas { .. } => ResponseError::NotEnoughReplicas,
        ClusterError::TooManyWaiters { .. } => ResponseError::RequestTimedOut,
        ClusterError::NotAcknowledged { .. } => ResponseError::NotEnoughReplicasAfterAppend,
        ClusterError::NotCoordinator { .. } => ResponseError::NotCoordinator,
        ClusterError::CoordinatorLoading { .. } => ResponseError::CoordinatorLoadInProgress,
        ClusterError::CoordinatorNotAvailable { .. } => ResponseError::CoordinatorNotAvailable,
        ClusterError::CommitOutcomeUnknown { .. } => ResponseError::RequestTimedOut,
        ClusterError::InternalTopic { .. } => ResponseError::InvalidTopicException,
        ClusterError::Meta(_) => ResponseError::UnknownServerError,
        // Kafka's own word for "not done in time, may still complete" (DeleteTopics' timeout).
        ClusterError::OutcomeUnknown(_) => ResponseError::RequestTimedOut,
        ClusterError::Unsupported(_) => ResponseError::InvalidRequest,
        ClusterError::ClusterRequired(_) => ResponseError::InvalidReplicationFactor,
    }
}

/// The Kafka error for a refusal of the group coordinator (the code each variant documents).
pub fn group_error(error: &GroupError) -> ResponseError {
    match error {
        GroupError::InvalidGroupId { .. } => ResponseError::InvalidGroupId,
        GroupError::InvalidSessionTimeout { .. } => ResponseError::InvalidSessionTimeout,
        GroupError::InconsistentGroupProtocol => ResponseError::InconsistentGroupProtocol,
        GroupError::UnknownMemberId => ResponseError::UnknownMemberId,
        GroupError::IllegalGeneration { .. } => ResponseError::IllegalGeneration,
        GroupError::RebalanceInProgress => ResponseError::RebalanceInProgress,
        GroupError::MemberIdRequired { .. } => ResponseError::MemberIdRequired,
        GroupError::GroupMaxSizeReached { .. } => ResponseError::GroupMaxSizeReached,
        GroupError::TooManyGroups { .. } | GroupError::StoreFailed { .. } => {
            ResponseError::CoordinatorNotAvailable
        }
        GroupError::NotCoordinator => ResponseError::NotCoordinator,
    }
}

/// The Kafka error for a refusal of the consumer-protocol coordinator (the code each variant
/// documents).
pub fn consumer_group_error(error: &ConsumerGroupError) -> ResponseError {
    match error {
        ConsumerGroupError::InvalidGroupId { .. } => ResponseError::InvalidGroupId,
        ConsumerGroupError::InvalidRequest { .. } => ResponseError::InvalidRequest,
        ConsumerGroupError::UnknownMemberId => ResponseError::UnknownMemberId,
        ConsumerGroupError::FencedMemberEpoch { .. } => ResponseError::FencedMemberEpoch,
        ConsumerGroupError::StaleMemberEpoch { .. } => ResponseError::StaleMemberEpoch,
        ConsumerGroupError::UnreleasedInstanceId { .. } => ResponseError::UnreleasedInstanceId,
        ConsumerGroupError::GroupMaxSizeReached { .. } => ResponseError::GroupMaxSizeReached,
        ConsumerGroupError::UnsupportedAssignor { .. } => ResponseError::UnsupportedAssignor,
        ConsumerGroupError::TooManyGroups { .. } => ResponseError::CoordinatorNotAvailable,
        ConsumerGroupError::ClassicGroup { .. } => ResponseError::GroupIdNotFound,
    }
}

fn group_offsets_error(error: &GroupOffsetsError) -> ResponseError {
    match error {
        GroupOffsetsError::InvalidGroupName { .. } => ResponseError::InvalidGroupId,
        GroupOffsetsError::InvalidTopicName { .. } => ResponseError::InvalidTopicException,
        GroupOffsetsError::MetadataTooLarge { .. } => ResponseError::OffsetMetadataTooLarge,
        GroupOffsetsError::TooManyGroups { .. } | GroupOffsetsError::TooManyOffsets { .. } => {
            ResponseError::PolicyViolation
        }
        GroupOffsetsError::Corrupt { .. } => ResponseError::CorruptMessage,
        GroupOffsetsError::Io { .. } => ResponseError::KafkaStorageError,
        GroupOffsetsError::InvalidConfig(_) => ResponseError::UnknownServerError,
    }
}

fn storage_error(error: &StorageError) -> ResponseError {
    match error {
        StorageError::Fence(FenceError::Fenced { .. } | FenceError::Leased { .. }) => {
            ResponseError::ProducerFenced
        }
        StorageError::Fence(FenceError::UnknownEpoch { .. }) => ResponseError::InvalidProducerEpoch,
        StorageError::Fence(FenceError::EpochNotNewer { .. }) => ResponseError::UnknownServerError,
        StorageError::Sequence(sequence) => match sequence {
            SequenceError::OutOfOrder { .. } => ResponseError::OutOfOrderSequenceNumber,
            SequenceError::Duplicate { .. } => ResponseError::DuplicateSequenceNumber,
            SequenceError::StaleProducerEpoch { .. } => ResponseError::InvalidProducerEpoch,
            SequenceError::StaleCoordinatorEpoch { .. } => {
                ResponseError::TransactionCoordinatorFenced
            }
            SequenceError::UnverifiedTransaction { .. } => ResponseError::InvalidTxnState,
            SequenceError::UnknownProducer { .. } | SequenceError::ForgottenResend { .. } => {
                ResponseError::UnknownProducerId
            }
        },
        StorageError::InvalidBatch(_) => ResponseError::CorruptMessage,
        StorageError::BatchTooLarge { .. } => ResponseError::MessageTooLarge,
        StorageError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        StorageError::Corrupt { .. } => ResponseError::CorruptMessage,
        StorageError::Failed { .. } | StorageError::DiskFailed { .. } | StorageError::Io { .. } => {
            ResponseError::KafkaStorageError
        }
        StorageError::InvalidConfig(_) => ResponseError::InvalidConfig,
        StorageError::NotLeader { .. } => ResponseError::NotLeaderOrFollower,
        StorageError::Replica(ReplicaError::FencedLeaderEpoch { .. }) => {
            ResponseError::FencedLeaderEpoch
        }
        StorageError::Replica(ReplicaError::UnknownLeaderEpoch { .. }) => {
            ResponseError::UnknownLeaderEpoch
        }
        StorageError::Replica(ReplicaError::NotLeader { .. }) => ResponseError::NotLeaderOrFollower,
        StorageError::Replica(_)
        | StorageError::ReplicaOffsetMismatch { .. }
        | StorageError::ReplicaDiverged { .. }
        | StorageError::StartOverBelowLogEnd { .. }
        | StorageError::NotSpliceable => ResponseError::UnknownServerError,
        StorageError::Deleted { .. } => ResponseError::UnknownTopicOrPartition,
    }
}

/// The Kafka error for a transaction coordinator's refusal. `fenced` is what the request's
/// version calls a fenced producer: `PRODUCER_FENCED` (90) where the client knows it,
/// `INVALID_PRODUCER_EPOCH` (47) for older versions; both are fatal to the producer.
pub fn coordinator_error(error: &CoordinatorError, fenced: ResponseError) -> ResponseError {
    match error {
        CoordinatorError::Refused(refused) => match refused {
            TxnError::InvalidProducerIdMapping { .. } => ResponseError::InvalidProducerIdMapping,
            TxnError::ProducerFenced { .. } => fenced,
            TxnError::ConcurrentTransactions { .. } => ResponseError::ConcurrentTransactions,
            TxnError::InvalidTxnState { .. } | TxnError::PartitionNotAdded { .. } => {
                ResponseError::InvalidTxnState
            }
            TxnError::InvalidTimeout { .. } => ResponseError::InvalidTransactionTimeout,
            TxnError::TooManyIds { .. } | TxnError::TooManyPartitions { .. } => {
                ResponseError::PolicyViolation
            }
        },
        // Nothing changed and the client retries (the state file could not be written).
        CoordinatorError::Store(_) => ResponseError::CoordinatorNotAvailable,
        CoordinatorError::PartitionLeased { .. } => ResponseError::ConcurrentTransactions,
        // A prepared outcome whose markers are still to be written: retry.
        CoordinatorError::Markers(_) => ResponseError::ConcurrentTransactions,
        // A partition of the transaction whose leader is changing (on a cluster): the
        // transaction's request is retried, as for a partition a native holder leases.
        CoordinatorError::Broker(BrokerError::Cluster(
            crate::broker::cluster::ClusterError::LeaderNotAvailable { .. }
            | crate::broker::cluster::ClusterError::NotLeader { .. },
        )) => ResponseError::ConcurrentTransactions,
        CoordinatorError::Broker(broker) => kafka_error(broker),
        // Native atomic appends' refusals (never reached through the Kafka listener).
        CoordinatorError::Unleased { .. } => ResponseError::InvalidRequest,
        CoordinatorError::Fenced { .. } | CoordinatorError::CommitRefused { .. } => fenced,
    }
}

/// [`coordinator_error`]'s `fenced` for an API whose versions from `first_fenced_version` on
/// know `PRODUCER_FENCED` (KIP-588).
pub fn fenced_code(version: i16, first_fenced_version: i16) -> ResponseError {
    if version >= first_fenced_version {
        ResponseError::ProducerFenced
    } else {
        ResponseError::InvalidProducerEpoch
    }
}
