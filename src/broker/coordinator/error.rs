//! Why the coordinator refused a group request. Each maps onto one Kafka error code in the
//! Kafka listener (named in each variant's doc).

use std::time::Duration;

use thiserror::Error;

/// A refused group request.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum GroupError {
    /// Empty or too long (`INVALID_GROUP_ID`, 24).
    #[error("group id must be 1 to {max} bytes")]
    InvalidGroupId {
        /// Longest allowed.
        max: usize,
    },
    /// Outside the broker's bounds (`INVALID_SESSION_TIMEOUT`, 26).
    #[error("session timeout {asked:?} is outside {min:?}..={max:?}")]
    InvalidSessionTimeout {
        /// What the member asked for.
        asked: Duration,
        /// Shortest allowed.
        min: Duration,
        /// Longest allowed.
        max: Duration,
    },
    /// Another protocol type than the group's, or no protocol every member supports
    /// (`INCONSISTENT_GROUP_PROTOCOL`, 23).
    #[error("the member's protocols are not compatible with the group's")]
    InconsistentGroupProtocol,
    /// Not a member (expired, left, or never joined) (`UNKNOWN_MEMBER_ID`, 25).
    #[error("unknown member id: rejoin the group")]
    UnknownMemberId,
    /// Another generation than the group's (`ILLEGAL_GENERATION`, 22).
    #[error("generation {got} is not the group's current generation {current}: rejoin the group")]
    IllegalGeneration {
        /// The generation the member sent.
        got: i32,
        /// The group's.
        current: i32,
    },
    /// The group is rebalancing: join again (`REBALANCE_IN_PROGRESS`, 27).
    #[error("the group is rebalancing: rejoin")]
    RebalanceInProgress,
    /// A new member must join again with the id given here (`MEMBER_ID_REQUIRED`, 79).
    #[error("join again with member id {member_id}")]
    MemberIdRequired {
        /// The id to join with.
        member_id: String,
    },
    /// The group is full (`GROUP_MAX_SIZE_REACHED`, 81).
    #[error("the group has its maximum of {max} members")]
    GroupMaxSizeReached {
        /// The limit.
        max: usize,
    },
    /// The broker coordinates its maximum of groups (`COORDINATOR_NOT_AVAILABLE`, 15:
    /// retriable, as the condition passes when groups empty).
    #[error("the coordinator holds its maximum of {max} groups")]
    TooManyGroups {
        /// The limit.
        max: usize,
    },
    /// This broker no longer coordinates the group (its offsets partition moved to another
    /// broker): find the coordinator again (`NOT_COORDINATOR`, 16).
    #[error("this broker no longer coordinates the group: find its coordinator again")]
    NotCoordinator,
    /// The group's new generation could not be written to the broker's store, so its
    /// assignment is not handed out; the group rebalances (`COORDINATOR_NOT_AVAILABLE`, 15:
    /// retriable).
    #[error("the group's state could not be stored ({reason}): rejoin")]
    StoreFailed {
        /// What failed.
        reason: String,
    },
}
