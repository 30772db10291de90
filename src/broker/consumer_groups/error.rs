//! Why the consumer-protocol coordinator refused a request. Each maps onto one Kafka error code
//! in the Kafka listener (named in each variant's doc); the messages say what the member does
//! next.

use thiserror::Error;

/// A refused ConsumerGroupHeartbeat, ConsumerGroupDescribe or offset request.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConsumerGroupError {
    /// Empty or too long (`INVALID_GROUP_ID`, 24).
    #[error("group id must be 1 to {max} bytes")]
    InvalidGroupId {
        /// Longest allowed.
        max: usize,
    },
    /// A malformed request: what is wrong with it (`INVALID_REQUEST`, 42).
    #[error("invalid consumer group heartbeat: {reason}")]
    InvalidRequest {
        /// What is wrong, and what to send instead.
        reason: String,
    },
    /// Not a member (expired, left, fenced, or the coordinator restarted or moved): join again
    /// with epoch 0 (`UNKNOWN_MEMBER_ID`, 25).
    #[error("unknown member id: join the group again with member epoch 0")]
    UnknownMemberId,
    /// The member's epoch is not its current one (it missed a reconciliation or was removed):
    /// give up every partition and join again with epoch 0 (`FENCED_MEMBER_EPOCH`, 110).
    #[error("member epoch {got} is fenced (current {current}): release every partition and join again with epoch 0")]
    FencedMemberEpoch {
        /// The epoch the member sent.
        got: i32,
        /// The member's epoch here.
        current: i32,
    },
    /// An offset request with an older epoch than the member's: heartbeat, then retry with the
    /// epoch it returns (`STALE_MEMBER_EPOCH`, 113).
    #[error("member epoch {got} is stale (current {current}): retry with the epoch the next heartbeat returns")]
    StaleMemberEpoch {
        /// The epoch the request carried.
        got: i32,
        /// The member's epoch here.
        current: i32,
    },
    /// Another live member uses this static instance id; it must leave first
    /// (`UNRELEASED_INSTANCE_ID`, 111).
    #[error("instance id {instance_id} is used by a live member: that member must leave first")]
    UnreleasedInstanceId {
        /// The instance id.
        instance_id: String,
    },
    /// The group is full (`GROUP_MAX_SIZE_REACHED`, 81).
    #[error("the group has its maximum of {max} members")]
    GroupMaxSizeReached {
        /// The limit.
        max: usize,
    },
    /// A server assignor this broker does not have (`UNSUPPORTED_ASSIGNOR`, 112).
    #[error("server assignor {name:?} is not supported: use \"uniform\" or \"range\"")]
    UnsupportedAssignor {
        /// The name asked for.
        name: String,
    },
    /// The broker coordinates its maximum of consumer-protocol groups
    /// (`COORDINATOR_NOT_AVAILABLE`, 15: retriable, as groups empty).
    #[error("the coordinator holds its maximum of {max} consumer groups")]
    TooManyGroups {
        /// The limit.
        max: usize,
    },
    /// The group id belongs to a classic group with members (`GROUP_ID_NOT_FOUND`, 69, as
    /// Kafka answers): use another group id, or wait until the classic members left.
    #[error("group {group_id} is a classic group with members, not a consumer-protocol group: use another group id or let its members leave first")]
    ClassicGroup {
        /// The group.
        group_id: String,
    },
}
