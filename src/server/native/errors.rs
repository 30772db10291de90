//! Mapping of broker errors to native wire errors: one code each, the message a user can act on,
//! the epochs for the fencing errors, and the details a client acts on without parsing the
//! message (`LEASE_HELD`: holder and time left; `OFFSET_OUT_OF_RANGE`: the valid range;
//! `NOT_LEADER`: the leader). Every match is exhaustive, so a new error variant cannot silently
//! become `INTERNAL`.
//!
//! This is what the error alone says. Two refusals lack part of their code's details (an
//! OffsetCommit past the high watermark does not know the log start; a partition's storage does
//! not know who leads it): the listener completes them from the service as it answers
//! (`super::refusals`), so what reaches a client always has what `docs/protocol.md` promises.

use crate::broker::{BrokerError, GroupOffsetsError};
use crate::domain::LeaderEpoch;
use crate::lease::{AuthorityError, LeaseError};
use crate::protocol::{ErrorCode, ErrorDetails, ErrorResponse};
use crate::storage::{FenceError, ReplicaError, SequenceError, StorageError};

/// The wire error for a broker error, from the error alone: without the log start for
/// [`BrokerError::CommitOutOfRange`] (no details) and naming no leader for a storage layer's
/// `NOT_LEADER`; `super::refusals::refusal` completes both from the service.
pub fn to_error_response(error: &BrokerError) -> ErrorResponse {
    let message = error_chain(error);
    let plain = |code| ErrorResponse::new(code, message.clone());
    match error {
        BrokerError::UnknownTopic(_) => plain(ErrorCode::UnknownTopic),
        BrokerError::UnknownPartition { .. } => plain(ErrorCode::UnknownPartition),
        BrokerError::PartitionUnavailable { .. } => plain(ErrorCode::PartitionUnavailable),
        BrokerError::TopicExists(_) => plain(ErrorCode::TopicExists),
        BrokerError::InvalidConfig(_)
        | BrokerError::InvalidPartitions(_)
        | BrokerError::Config(_) => plain(ErrorCode::InvalidConfig),
        BrokerError::InvalidRequest(_) => plain(ErrorCode::InvalidRequest),
        BrokerError::Locked(_) | BrokerError::Io { .. } => plain(ErrorCode::StorageError),
        BrokerError::Storage(storage) => storage_error(storage, message),
        BrokerError::Lease(AuthorityError::Refused(lease)) => lease_error(lease, message),
        BrokerError::Lease(AuthorityError::Install { source, .. }) => {
            storage_error(source, message)
        }
        BrokerError::Lease(AuthorityError::Unavailable(_)) => plain(ErrorCode::Internal),
        BrokerError::GroupOffsets(group) => plain(group_offsets_code(group)),
        // The check knew the high watermark, not the log start: `super::refusals` adds the
        // details.
        BrokerError::CommitOutOfRange { .. } => plain(ErrorCode::OffsetOutOfRange),
        BrokerError::GroupNotFound(_) | BrokerError::GroupNotEmpty { .. } => {
            plain(ErrorCode::InvalidGroup)
        }
        BrokerError::Cluster(cluster) => cluster_error(cluster, message),
    }
}

fn cluster_error(error: &crate::broker::cluster::ClusterError, message: String) -> ErrorResponse {
    use crate::broker::cluster::ClusterError;
    let plain = |code| ErrorResponse::new(code, message.clone());
    match error {
        ClusterError::NotLeader {
            topic,
            partition,
            leader,
            leader_epoch,
        } => ErrorResponse::not_leader(topic, *partition, leader.clone(), *leader_epoch),
        ClusterError::LeaderNotAvailable { .. } => plain(ErrorCode::LeaderNotAvailable),
        ClusterError::NotEnoughReplicas { .. } => plain(ErrorCode::NotEnoughReplicas),
        ClusterError::TooManyWaiters { .. } => plain(ErrorCode::ResourceExhausted),
        ClusterError::NotAcknowledged { .. } => plain(ErrorCode::NotEnoughReplicasAfterAppend),
        // A native client finds a group's coordinator as it finds a partition's leader: the
        // refusal names the leader of the group's offsets partition.
        ClusterError::NotCoordinator {
            offsets_topic,
            offsets_partition,
            leader,
            leader_epoch,
            ..
        } => ErrorResponse::not_leader(
            offsets_topic,
            *offsets_partition,
            leader.clone(),
            *leader_epoch,
        ),
        ClusterError::CoordinatorLoading { .. } | ClusterError::CoordinatorNotAvailable { .. } => {
            plain(ErrorCode::LeaderNotAvailable)
        }
        ClusterError::CommitOutcomeUnknown { .. } => plain(ErrorCode::NotEnoughReplicasAfterAppend),
        ClusterError::InternalTopic { .. } => plain(ErrorCode::InvalidRequest),
        ClusterError::Meta(_) => plain(ErrorCode::Internal),
        ClusterError::OutcomeUnknown(_) => plain(ErrorCode::Internal),
        ClusterError::Unsupported(_) => plain(ErrorCode::InvalidRequest),
        ClusterError::ClusterRequired(_) => plain(ErrorCode::ClusterRequired),
    }
}

fn group_offsets_code(error: &GroupOffsetsError) -> ErrorCode {
    match error {
        GroupOffsetsError::InvalidGroupName { .. } => ErrorCode::InvalidGroup,
        GroupOffsetsError::InvalidTopicName { .. } => ErrorCode::InvalidRequest,
        GroupOffsetsError::MetadataTooLarge { .. } => ErrorCode::OffsetMetadataTooLarge,
        GroupOffsetsError::TooManyGroups { .. } | GroupOffsetsError::TooManyOffsets { .. } => {
            ErrorCode::GroupLimitReached
        }
        GroupOffsetsError::Corrupt { .. } => ErrorCode::CorruptData,
        GroupOffsetsError::Io { .. } => ErrorCode::StorageError,
        GroupOffsetsError::InvalidConfig(_) => ErrorCode::Internal,
    }
}

fn lease_error(error: &LeaseError, message: String) -> ErrorResponse {
    let plain = |code| ErrorResponse::new(code, message.clone());
    match error {
        LeaseError::Held {
            holder,
            expires_in_ms,
            current_epoch,
            ..
        } => ErrorResponse::lease_held(message.clone(), *current_epoch, holder, *expires_in_ms),
        LeaseError::Lost {
            current_epoch,
            live,
            ..
        } => ErrorResponse::lease_lost(
            message.clone(),
            *current_epoch,
            live.as_ref()
                .map(|live| (live.holder.clone(), live.expires_in_ms)),
        ),
        LeaseError::InvalidTtl { .. }
        | LeaseError::InvalidHolder { .. }
        | LeaseError::TooManySlots { .. } => plain(ErrorCode::InvalidRequest),
        // No larger fencing token exists: nothing a client can do, as for an internal error.
        LeaseError::EpochExhausted { .. } => plain(ErrorCode::Internal),
        // The local authority turns install failures into `AuthorityError::Install` with the
        // storage error typed; a table used elsewhere only has a boxed cause.
        LeaseError::Install { .. } => plain(ErrorCode::StorageError),
    }
}

pub(super) fn storage_error(error: &StorageError, message: String) -> ErrorResponse {
    if let Some(resource) = error.exhausted_resource() {
        return ErrorResponse::new(
            ErrorCode::ResourceExhausted,
            format!("{resource}; nothing was changed, retry later: {message}"),
        );
    }
    let plain = |code| ErrorResponse::new(code, message.clone());
    match error {
        StorageError::Fence(FenceError::Fenced { epoch, current }) => {
            ErrorResponse::with_epochs(ErrorCode::Fenced, message.clone(), *epoch, *current)
        }
        StorageError::Fence(FenceError::UnknownEpoch { epoch, current }) => {
            ErrorResponse::with_epochs(ErrorCode::UnknownEpoch, message.clone(), *epoch, *current)
        }
        // Native writes always carry an epoch; a native client never meets this one.
        StorageError::Fence(FenceError::Leased { current }) => {
            ErrorResponse::with_epochs(ErrorCode::Fenced, message.clone(), 0, *current)
        }
        StorageError::Fence(FenceError::EpochNotNewer { .. }) => plain(ErrorCode::Internal),
        StorageError::Sequence(sequence) => plain(match sequence {
            SequenceError::OutOfOrder { .. } => ErrorCode::OutOfOrderSequence,
            SequenceError::Duplicate { .. } => ErrorCode::DuplicateSequence,
            SequenceError::StaleProducerEpoch { .. } => ErrorCode::InvalidProducerEpoch,
            SequenceError::StaleCoordinatorEpoch { .. } => ErrorCode::CoordinatorFenced,
            SequenceError::UnverifiedTransaction { .. } => ErrorCode::InvalidTransactionState,
            SequenceError::UnknownProducer { .. } | SequenceError::ForgottenResend { .. } => {
                ErrorCode::UnknownProducer
            }
        }),
        StorageError::InvalidBatch(_) => plain(ErrorCode::InvalidBatch),
        StorageError::BatchTooLarge { .. } => plain(ErrorCode::BatchTooLarge),
        StorageError::OffsetOutOfRange {
            offset,
            earliest,
            latest,
            ..
        } => ErrorResponse::offset_out_of_range(message.clone(), *offset, *earliest, *latest),
        StorageError::Corrupt { .. } => plain(ErrorCode::CorruptData),
        StorageError::Failed { .. } | StorageError::DiskFailed { .. } | StorageError::Io { .. } => {
            plain(ErrorCode::StorageError)
        }
        StorageError::InvalidConfig(_) => plain(ErrorCode::InvalidConfig),
        // The storage layer knows the leader epoch it follows, not who leads: the details name
        // no leader ("refresh the metadata"), and `super::refusals` names the one the cluster
        // layer knows when the request says which partition it was about.
        StorageError::NotLeader { leader_epoch } => leader_unknown(message.clone(), *leader_epoch),
        StorageError::Replica(ReplicaError::FencedLeaderEpoch { epoch, current }) => {
            ErrorResponse::with_epochs(
                ErrorCode::FencedLeaderEpoch,
                message.clone(),
                u64::from(*epoch),
                u64::from(*current),
            )
        }
        StorageError::Replica(ReplicaError::UnknownLeaderEpoch { epoch, current }) => {
            ErrorResponse::with_epochs(
                ErrorCode::UnknownLeaderEpoch,
                message.clone(),
                u64::from(*epoch),
                u64::from(*current),
            )
        }
        StorageError::Replica(ReplicaError::NotLeader { leader_epoch }) => {
            leader_unknown(message.clone(), *leader_epoch)
        }
        StorageError::Replica(_)
        | StorageError::ReplicaOffsetMismatch { .. }
        | StorageError::ReplicaDiverged { .. }
        | StorageError::StartOverBelowLogEnd { .. }
        | StorageError::NotSpliceable => plain(ErrorCode::Internal),
        StorageError::Deleted { .. } => plain(ErrorCode::UnknownTopic),
    }
}

/// `NOT_LEADER` from a replica that follows `leader_epoch` without knowing its leader: the
/// details say "no node" and an empty address, as section 4 of `docs/protocol.md` spells it.
fn leader_unknown(message: String, leader_epoch: LeaderEpoch) -> ErrorResponse {
    ErrorResponse {
        details: Some(ErrorDetails::NotLeader {
            leader: None,
            address: String::new(),
            leader_epoch,
        }),
        ..ErrorResponse::new(ErrorCode::NotLeader, message)
    }
}

/// The error and its sources on one line: "a: b: c".
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}
