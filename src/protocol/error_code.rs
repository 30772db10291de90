//! Wire error codes: the `u16` a response header carries to say whether the
//! request succeeded and, if not, why.
//!
//! The codes are part of the wire contract (see `docs/protocol.md`), so their
//! numeric values never change and retired codes are never reused. Clients
//! branch on them — most importantly on whether a failure is worth retrying —
//! which is why [`ErrorCode::is_retriable`] lives next to the numbers rather
//! than in client code.

use std::fmt;

/// Why a request failed (or [`ErrorCode::None`] when it did not).
///
/// The discriminants are the on-wire values. A value this build does not know
/// is not mapped to a catch-all variant: [`ErrorCode::from_u16`] returns
/// `None`, and response decoding reports
/// [`ProtocolError::UnknownErrorCode`](super::ProtocolError::UnknownErrorCode)
/// with the raw value and the server's message, so nothing is silently
/// misclassified as retriable or not.
#[repr(u16)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorCode {
    /// Success; only ever appears in a response header, never in an error body.
    None = 0,
    /// The request's epoch is older than the partition's current epoch: a newer
    /// lease holder exists and this writer has been fenced off for good.
    Fenced = 1,
    /// The request's epoch is newer than any epoch the partition has issued.
    UnknownEpoch = 2,
    /// The epoch is current but its lease expired or was released (or the
    /// lease id does not match); the writer must acquire a new lease.
    LeaseLost = 3,
    /// The partition has a live lease held by someone else.
    LeaseHeld = 4,
    /// The topic does not exist.
    UnknownTopic = 5,
    /// The topic exists but has no partition with that index.
    UnknownPartition = 6,
    /// `CreateTopic` named a topic that already exists.
    TopicExists = 7,
    /// The produced record batch is malformed (bad CRC, magic, length, ...).
    InvalidBatch = 8,
    /// The produced record batch exceeds the server's batch size limit.
    BatchTooLarge = 9,
    /// The request body could not be parsed or has invalid field values.
    InvalidRequest = 10,
    /// The API exists but not in the requested version.
    UnsupportedVersion = 11,
    /// The API key is not known to the server.
    UnknownApi = 12,
    /// The fetch offset is outside `[log_start_offset, log_end_offset]`.
    OffsetOutOfRange = 13,
    /// The server failed to read or write its storage.
    StorageError = 14,
    /// Stored data failed an integrity check.
    CorruptData = 15,
    /// A topic configuration value is invalid.
    InvalidConfig = 16,
    /// The server is shutting down and accepts no more work.
    ShuttingDown = 17,
    /// The server refused the connection because it has too many.
    TooManyConnections = 18,
    /// A frame exceeded the maximum frame size; the connection is closed.
    FrameTooLarge = 19,
    /// An unexpected server-side failure (a bug); see the message.
    Internal = 20,
    /// An idempotent producer's batch does not follow its last appended batch: an earlier batch
    /// failed or was lost. Nothing was appended; the producer must resend the missing batch
    /// or start a new session (a higher producer epoch, sequence 0).
    OutOfOrderSequence = 21,
    /// The batch was appended already, too long ago for the partition to return its offsets.
    DuplicateSequence = 22,
    /// The batch's producer epoch is older than the producer's current session on the partition.
    InvalidProducerEpoch = 23,
    /// The partition has no state for this producer id (never seen, or forgotten) and the batch
    /// does not start a session (sequence 0).
    UnknownProducer = 24,
    /// A consumer group name is empty or longer than the server allows.
    InvalidGroup = 25,
    /// The metadata stored with a committed offset is longer than the server allows.
    OffsetMetadataTooLarge = 26,
    /// The server holds committed offsets of its maximum of groups, or the group of its maximum
    /// of partitions.
    GroupLimitReached = 27,
    /// The server runs with authentication on and this connection has not authenticated: only
    /// ApiVersions, AuthenticateStart and AuthenticateContinue are answered. The connection
    /// closes after a few such refusals.
    AuthenticationRequired = 29,
    /// The user name or password is wrong (the message does not say which), or the client's
    /// SCRAM message is malformed.
    AuthenticationFailed = 30,
    /// The authenticated principal's ACLs do not allow the operation on the resource; the
    /// message names the principal, the operation and the resource. Nothing was changed.
    NotAuthorized = 31,
    /// An authentication step out of order: AuthenticateContinue without a start, a second
    /// authentication, or authentication on a server that runs without it.
    IllegalAuthenticationState = 32,
    /// The partition could not be opened when the server started (damaged files, permissions);
    /// the server's other partitions are served. An operator must fix the cause and restart
    /// the server: retrying as is cannot succeed.
    PartitionUnavailable = 33,
    /// The server ran out of a resource for this request (file descriptors, disk space, its
    /// request memory budget); nothing changed. Retriable: it may succeed once the resource frees.
    ResourceExhausted = 34,
    /// This broker does not lead the partition. Nothing was done. The error body's details name
    /// the leader this broker knows (node id, address, leader epoch), so the client can go
    /// there at once; retriable there (after refreshing its metadata if no leader is named).
    NotLeader = 35,
    /// A replication request carried a leader epoch older than the partition's current one: the
    /// sender's view of the partition is stale (a follower behind on metadata, or a deposed
    /// leader). Nothing was done. Error body: the rejected and the current leader epoch.
    FencedLeaderEpoch = 36,
    /// A replication request carried a leader epoch newer than any this broker installed: this
    /// broker is behind on metadata. Nothing was done. Error body: both leader epochs.
    UnknownLeaderEpoch = 37,
    /// The partition's in-sync replicas are fewer than its `min_insync`: an `acks=all` produce
    /// was refused and **nothing was written**. Retriable once followers catch up.
    NotEnoughReplicas = 38,
    /// The batch **was written** on the leader, but not replicated to enough in-sync replicas
    /// in time; it may still become committed, or be truncated by a failover. Only an
    /// idempotent producer may resend it (the sequence makes the resend harmless).
    NotEnoughReplicasAfterAppend = 39,
    /// The partition has no leader right now (an election is in progress, or no in-sync replica
    /// is alive). Nothing was done. Retriable after a metadata refresh and a back-off.
    LeaderNotAvailable = 40,
    /// The request needs a broker that is part of a cluster (started with `--etcd`): replica
    /// fetches, leader-epoch queries, a replication factor above 1. This broker runs
    /// standalone; not retriable against it.
    ClusterRequired = 41,
    /// A newer instance of the transactional id took over (`InitTransaction` bumped its producer
    /// epoch): this instance is fenced for good and its open transaction was aborted. Not
    /// retriable: close the producer.
    ProducerFenced = 42,
    /// The transaction request does not fit the transaction's state (a commit of a transaction
    /// the server aborted, a producer id that is not the transactional id's, ...). Nothing was
    /// done. Not retriable as is.
    InvalidTransactionState = 43,
    /// The transactional id's previous transaction is still completing (its markers are being
    /// written). Nothing was done. Retriable after a short back-off.
    ConcurrentTransactions = 44,
    /// A transaction marker from a coordinator that was deposed: the partition already took a
    /// marker of the same producer from a newer coordinator (a higher coordinator epoch).
    /// Nothing was written. Not retriable: the transaction's current coordinator writes its
    /// markers (Kafka's `TRANSACTION_COORDINATOR_FENCED`).
    CoordinatorFenced = 45,
}

impl ErrorCode {
    /// Every code, in wire order; handy for exhaustive tests and docs. Values are not contiguous:
    /// ranges are reserved for codes of other builds.
    pub const ALL: [ErrorCode; 45] = [
        ErrorCode::None,
        ErrorCode::Fenced,
        ErrorCode::UnknownEpoch,
        ErrorCode::LeaseLost,
        ErrorCode::LeaseHeld,
        ErrorCode::UnknownTopic,
        ErrorCode::UnknownPartition,
        ErrorCode::TopicExists,
        ErrorCode::InvalidBatch,
        ErrorCode::BatchTooLarge,
        ErrorCode::InvalidRequest,
        ErrorCode::UnsupportedVersion,
        ErrorCode::UnknownApi,
        ErrorCode::OffsetOutOfRange,
        ErrorCode::StorageError,
        ErrorCode::CorruptData,
        ErrorCode::InvalidConfig,
        ErrorCode::ShuttingDown,
        ErrorCode::TooManyConnections,
        ErrorCode::FrameTooLarge,
        ErrorCode::Internal,
        ErrorCode::OutOfOrderSequence,
        ErrorCode::DuplicateSequence,
        ErrorCode::InvalidProducerEpoch,
        ErrorCode::UnknownProducer,
        ErrorCode::InvalidGroup,
        ErrorCode::OffsetMetadataTooLarge,
        ErrorCode::GroupLimitReached,
        ErrorCode::AuthenticationRequired,
        ErrorCode::AuthenticationFailed,
        ErrorCode::NotAuthorized,
        ErrorCode::IllegalAuthenticationState,
        ErrorCode::PartitionUnavailable,
        ErrorCode::ResourceExhausted,
        ErrorCode::NotLeader,
        ErrorCode::FencedLeaderEpoch,
        ErrorCode::UnknownLeaderEpoch,
        ErrorCode::NotEnoughReplicas,
        ErrorCode::NotEnoughReplicasAfterAppend,
        ErrorCode::LeaderNotAvailable,
        ErrorCode::ClusterRequired,
        ErrorCode::ProducerFenced,
        ErrorCode::InvalidTransactionState,
        ErrorCode::ConcurrentTransactions,
        ErrorCode::CoordinatorFenced,
    ];

    /// Maps a wire value to a code; `None` for values this build does not know
    /// (a newer server), so callers must decide explicitly how to treat them.
    pub fn from_u16(value: u16) -> Option<ErrorCode> {
        Self::ALL.into_iter().find(|code| code.as_u16() == value)
    }

    /// The on-wire value.
    pub fn as_u16(self) -> u16 {
        self as u16
    }

    /// Whether sending the *same* request again later may succeed.
    ///
    /// Retriable codes describe a transient condition of the server or of the
    /// partition (another holder's lease may expire, the server may come back,
    /// a storage hiccup may pass). Everything else needs the client to change
    /// something first — in particular a fenced or lease-lost writer must
    /// never blindly retry, as that is exactly what fencing exists to stop.
    pub fn is_retriable(self) -> bool {
        matches!(
            self,
            ErrorCode::LeaseHeld
                | ErrorCode::StorageError
                | ErrorCode::ShuttingDown
                | ErrorCode::TooManyConnections
                | ErrorCode::ResourceExhausted
                | ErrorCode::NotLeader
                | ErrorCode::NotEnoughReplicas
                | ErrorCode::LeaderNotAvailable
                | ErrorCode::ConcurrentTransactions
        )
    }

    /// Whether the client's view of the cluster is stale when this code comes back: it should
    /// refresh its metadata (leaders, leader epochs) before it sends the request again.
    pub fn needs_metadata_refresh(self) -> bool {
        matches!(
            self,
            ErrorCode::NotLeader
                | ErrorCode::LeaderNotAvailable
                | ErrorCode::FencedLeaderEpoch
                | ErrorCode::UnknownLeaderEpoch
        )
    }

    /// Whether the server certainly did not apply the request (so any request, a produce that
    /// is not idempotent included, may be sent again): the broker was not the leader, had no
    /// leader, or refused before writing for lack of in-sync replicas.
    pub fn nothing_applied(self) -> bool {
        matches!(
            self,
            ErrorCode::NotLeader | ErrorCode::LeaderNotAvailable | ErrorCode::NotEnoughReplicas
        )
    }

    /// What an answer with this code says about the produced batch: written, not written, or
    /// unknown. The one table every client path classifies produce outcomes with (the library
    /// producer, `fencelog produce`, and the Kafka listener's mapping keeps each class), so a
    /// client never reports "not written" for a batch that may be in the log.
    ///
    /// The answer covers the batch *and every earlier send of it*: the server answers an exact
    /// resend of a batch it holds with its original offsets whatever the lease epoch is now,
    /// so a refusal of a resend means that no earlier send landed either, except where this
    /// table says [`Outcome::Unknown`].
    pub fn outcome(self) -> Outcome {
        match self {
            ErrorCode::None => Outcome::Written,
            // Appended already, longer ago than the partition remembers offsets for.
            ErrorCode::DuplicateSequence => Outcome::Written,
            // Written on the leader, not yet on enough replicas: it may become committed, or be
            // cut by a failover.
            ErrorCode::NotEnoughReplicasAfterAppend => Outcome::Unknown,
            // The partition forgot the producer: an earlier send of the batch may have landed.
            ErrorCode::UnknownProducer => Outcome::Unknown,
            // The server failed while writing or before answering: it may be in the log.
            ErrorCode::StorageError | ErrorCode::Internal | ErrorCode::ShuttingDown => {
                Outcome::Unknown
            }
            ErrorCode::Fenced
            | ErrorCode::UnknownEpoch
            | ErrorCode::LeaseLost
            | ErrorCode::LeaseHeld
            | ErrorCode::UnknownTopic
            | ErrorCode::UnknownPartition
            | ErrorCode::TopicExists
            | ErrorCode::InvalidBatch
            | ErrorCode::BatchTooLarge
            | ErrorCode::InvalidRequest
            | ErrorCode::UnsupportedVersion
            | ErrorCode::UnknownApi
            | ErrorCode::OffsetOutOfRange
            | ErrorCode::CorruptData
            | ErrorCode::InvalidConfig
            | ErrorCode::TooManyConnections
            | ErrorCode::FrameTooLarge
            | ErrorCode::OutOfOrderSequence
            | ErrorCode::InvalidProducerEpoch
            | ErrorCode::InvalidGroup
            | ErrorCode::OffsetMetadataTooLarge
            | ErrorCode::GroupLimitReached
            | ErrorCode::AuthenticationRequired
            | ErrorCode::AuthenticationFailed
            | ErrorCode::NotAuthorized
            | ErrorCode::IllegalAuthenticationState
            | ErrorCode::PartitionUnavailable
            | ErrorCode::ResourceExhausted
            | ErrorCode::NotLeader
            | ErrorCode::FencedLeaderEpoch
            | ErrorCode::UnknownLeaderEpoch
            | ErrorCode::NotEnoughReplicas
            | ErrorCode::LeaderNotAvailable
            | ErrorCode::ClusterRequired
            | ErrorCode::ProducerFenced
            | ErrorCode::InvalidTransactionState
            | ErrorCode::ConcurrentTransactions
            | ErrorCode::CoordinatorFenced => Outcome::NotWritten,
        }
    }

    /// Whether a produce answered with this code tells the outcome of every earlier send of the
    /// same batch too, not only of this request: the partition gave it after its resend check
    /// (an exact resend of a batch it holds is answered with its offsets, whatever the lease
    /// epoch), or it refuses an epoch that cannot have written anything. The other refusals
    /// (not the leader, too few replicas, a busy server, ...) come before the partition looks
    /// at the batch: they say that *this* request wrote nothing, and a client that got no
    /// answer to an earlier send must report the batch's outcome as unknown.
    pub fn covers_earlier_sends(self) -> bool {
        matches!(
            self,
            ErrorCode::None
                | ErrorCode::Fenced
                | ErrorCode::UnknownEpoch
                | ErrorCode::OutOfOrderSequence
                | ErrorCode::DuplicateSequence
                | ErrorCode::UnknownProducer
                | ErrorCode::NotEnoughReplicasAfterAppend
        )
    }

    /// Whether the error body's `epoch` / `current_epoch` fields are
    /// meaningful for this code (they are 0 otherwise).
    pub fn carries_epochs(self) -> bool {
        matches!(
            self,
            ErrorCode::Fenced
                | ErrorCode::UnknownEpoch
                | ErrorCode::LeaseLost
                | ErrorCode::FencedLeaderEpoch
                | ErrorCode::UnknownLeaderEpoch
        )
    }

    /// The short, stable, upper-case name used in logs and documentation.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::None => "NONE",
            ErrorCode::Fenced => "FENCED",
            ErrorCode::UnknownEpoch => "UNKNOWN_EPOCH",
            ErrorCode::LeaseLost => "LEASE_LOST",
            ErrorCode::LeaseHeld => "LEASE_HELD",
            ErrorCode::UnknownTopic => "UNKNOWN_TOPIC",
            ErrorCode::UnknownPartition => "UNKNOWN_PARTITION",
            ErrorCode::TopicExists => "TOPIC_EXISTS",
            ErrorCode::InvalidBatch => "INVALID_BATCH",
            ErrorCode::BatchTooLarge => "BATCH_TOO_LARGE",
            ErrorCode::InvalidRequest => "INVALID_REQUEST",
            ErrorCode::UnsupportedVersion => "UNSUPPORTED_VERSION",
            ErrorCode::UnknownApi => "UNKNOWN_API",
            ErrorCode::OffsetOutOfRange => "OFFSET_OUT_OF_RANGE",
            ErrorCode::StorageError => "STORAGE_ERROR",
            ErrorCode::CorruptData => "CORRUPT_DATA",
            ErrorCode::InvalidConfig => "INVALID_CONFIG",
            ErrorCode::ShuttingDown => "SHUTTING_DOWN",
            ErrorCode::TooManyConnections => "TOO_MANY_CONNECTIONS",
            ErrorCode::FrameTooLarge => "FRAME_TOO_LARGE",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::OutOfOrderSequence => "OUT_OF_ORDER_SEQUENCE",
            ErrorCode::DuplicateSequence => "DUPLICATE_SEQUENCE",
            ErrorCode::InvalidProducerEpoch => "INVALID_PRODUCER_EPOCH",
            ErrorCode::UnknownProducer => "UNKNOWN_PRODUCER",
            ErrorCode::InvalidGroup => "INVALID_GROUP",
            ErrorCode::OffsetMetadataTooLarge => "OFFSET_METADATA_TOO_LARGE",
            ErrorCode::GroupLimitReached => "GROUP_LIMIT_REACHED",
            ErrorCode::AuthenticationRequired => "AUTHENTICATION_REQUIRED",
            ErrorCode::AuthenticationFailed => "AUTHENTICATION_FAILED",
            ErrorCode::NotAuthorized => "NOT_AUTHORIZED",
            ErrorCode::IllegalAuthenticationState => "ILLEGAL_AUTHENTICATION_STATE",
            ErrorCode::PartitionUnavailable => "PARTITION_UNAVAILABLE",
            ErrorCode::ResourceExhausted => "RESOURCE_EXHAUSTED",
            ErrorCode::NotLeader => "NOT_LEADER",
            ErrorCode::FencedLeaderEpoch => "FENCED_LEADER_EPOCH",
            ErrorCode::UnknownLeaderEpoch => "UNKNOWN_LEADER_EPOCH",
            ErrorCode::NotEnoughReplicas => "NOT_ENOUGH_REPLICAS",
            ErrorCode::NotEnoughReplicasAfterAppend => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
            ErrorCode::LeaderNotAvailable => "LEADER_NOT_AVAILABLE",
            ErrorCode::ClusterRequired => "CLUSTER_REQUIRED",
            ErrorCode::ProducerFenced => "PRODUCER_FENCED",
            ErrorCode::InvalidTransactionState => "INVALID_TRANSACTION_STATE",
            ErrorCode::ConcurrentTransactions => "CONCURRENT_TRANSACTIONS",
            ErrorCode::CoordinatorFenced => "COORDINATOR_FENCED",
        }
    }
}

/// What a produce's answer says about its batch (see [`ErrorCode::outcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The batch is in the log (once), at the offsets answered when there are any.
    Written,
    /// The batch is not in the log: neither this send nor an earlier one of it landed.
    NotWritten,
    /// The batch may or may not be in the log: read the partition to find out. Never to be
    /// reported as a failure to write.
    Unknown,
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_values_round_trip_and_are_in_order() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_u16(code.as_u16()), Some(code));
        }
        assert_eq!(ErrorCode::from_u16(46), None);
        assert!(ErrorCode::ALL.windows(2).all(|pair| pair[0] < pair[1]));
        assert_eq!(ErrorCode::from_u16(28), None);
        assert_eq!(ErrorCode::from_u16(u16::MAX), None);
    }

    #[test]
    fn fixed_values_do_not_drift() {
        assert_eq!(ErrorCode::Fenced.as_u16(), 1);
        assert_eq!(ErrorCode::LeaseHeld.as_u16(), 4);
        assert_eq!(ErrorCode::InvalidRequest.as_u16(), 10);
        assert_eq!(ErrorCode::FrameTooLarge.as_u16(), 19);
        assert_eq!(ErrorCode::Internal.as_u16(), 20);
        assert_eq!(ErrorCode::OutOfOrderSequence.as_u16(), 21);
        assert_eq!(ErrorCode::UnknownProducer.as_u16(), 24);
        assert_eq!(ErrorCode::InvalidGroup.as_u16(), 25);
        assert_eq!(ErrorCode::OffsetMetadataTooLarge.as_u16(), 26);
        assert_eq!(ErrorCode::GroupLimitReached.as_u16(), 27);
        assert_eq!(ErrorCode::AuthenticationRequired.as_u16(), 29);
        assert_eq!(ErrorCode::AuthenticationFailed.as_u16(), 30);
        assert_eq!(ErrorCode::NotAuthorized.as_u16(), 31);
        assert_eq!(ErrorCode::IllegalAuthenticationState.as_u16(), 32);
        assert_eq!(ErrorCode::PartitionUnavailable.as_u16(), 33);
        assert_eq!(ErrorCode::ResourceExhausted.as_u16(), 34);
        assert!(ErrorCode::ResourceExhausted.is_retriable());
        assert_eq!(ErrorCode::NotLeader.as_u16(), 35);
        assert_eq!(ErrorCode::FencedLeaderEpoch.as_u16(), 36);
        assert_eq!(ErrorCode::UnknownLeaderEpoch.as_u16(), 37);
        assert_eq!(ErrorCode::NotEnoughReplicas.as_u16(), 38);
        assert_eq!(ErrorCode::NotEnoughReplicasAfterAppend.as_u16(), 39);
        assert_eq!(ErrorCode::LeaderNotAvailable.as_u16(), 40);
        assert_eq!(ErrorCode::ClusterRequired.as_u16(), 41);
        assert_eq!(ErrorCode::ProducerFenced.as_u16(), 42);
        assert_eq!(ErrorCode::InvalidTransactionState.as_u16(), 43);
        assert_eq!(ErrorCode::ConcurrentTransactions.as_u16(), 44);
        assert_eq!(ErrorCode::CoordinatorFenced.as_u16(), 45);
        assert!(!ErrorCode::CoordinatorFenced.is_retriable());
        assert!(!ErrorCode::PartitionUnavailable.is_retriable());
    }

    #[test]
    fn cluster_codes_say_what_a_client_may_do() {
        for code in [
            ErrorCode::NotLeader,
            ErrorCode::LeaderNotAvailable,
            ErrorCode::NotEnoughReplicas,
        ] {
            assert!(code.is_retriable() && code.nothing_applied(), "{code}");
        }
        // Written but not replicated: a blind resend would append the batch twice.
        assert!(!ErrorCode::NotEnoughReplicasAfterAppend.is_retriable());
        assert!(!ErrorCode::NotEnoughReplicasAfterAppend.nothing_applied());
        assert!(!ErrorCode::ClusterRequired.is_retriable());
        assert!(ErrorCode::FencedLeaderEpoch.needs_metadata_refresh());
        assert!(ErrorCode::FencedLeaderEpoch.carries_epochs());
        assert!(!ErrorCode::NotEnoughReplicas.needs_metadata_refresh());
    }

    /// The outcome table: a batch written but not replicated, or whose producer the partition
    /// forgot, is never classified as not written; a fenced or refused batch is.
    #[test]
    fn outcomes_never_call_a_possibly_written_batch_not_written() {
        assert_eq!(ErrorCode::None.outcome(), Outcome::Written);
        assert_eq!(ErrorCode::DuplicateSequence.outcome(), Outcome::Written);
        for code in [
            ErrorCode::NotEnoughReplicasAfterAppend,
            ErrorCode::UnknownProducer,
            ErrorCode::StorageError,
            ErrorCode::Internal,
        ] {
            assert_eq!(code.outcome(), Outcome::Unknown, "{code}");
        }
        for code in [
            ErrorCode::Fenced,
            ErrorCode::UnknownEpoch,
            ErrorCode::BatchTooLarge,
            ErrorCode::NotEnoughReplicas,
            ErrorCode::NotLeader,
        ] {
            assert_eq!(code.outcome(), Outcome::NotWritten, "{code}");
        }
        // Whatever a code says was not applied is not written.
        for code in ErrorCode::ALL {
            if code.nothing_applied() {
                assert_eq!(code.outcome(), Outcome::NotWritten, "{code}");
            }
        }
    }

    #[test]
    fn names_are_unique_and_fencing_is_not_retriable() {
        let mut names: Vec<_> = ErrorCode::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ErrorCode::ALL.len());
        assert!(!ErrorCode::Fenced.is_retriable());
        assert!(!ErrorCode::LeaseLost.is_retriable());
        assert!(ErrorCode::LeaseHeld.is_retriable());
        assert_eq!(ErrorCode::UnknownEpoch.to_string(), "UNKNOWN_EPOCH");
        // The consumer-group refusals need a different request (a name, shorter metadata) or an
        // operator (the group limits): retrying them as they are cannot succeed.
        for code in [
            ErrorCode::InvalidGroup,
            ErrorCode::OffsetMetadataTooLarge,
            ErrorCode::GroupLimitReached,
        ] {
            assert!(!code.is_retriable(), "{code}");
        }
    }
}
