//! The node's vocabulary: its settings, what it is told ([`Input`]) and what it asks for
//! ([`Effect`]). See the parent module for the contract of each effect.

use super::super::follower::FollowerAction;
use super::super::leader::WaiterCompletion;
use super::super::{
    CasOutcome, FetchError, FetchResponse, LiveBrokers, Proposal, ReplicationConfig,
};
use crate::cluster::replica_log::ReplicaLogError;
use crate::cluster::{LeaderEpoch, NodeId, PartitionState, Versioned};

/// Default of [`ReplicaNodeConfig::follower_restart_pause_ms`].
pub const DEFAULT_FOLLOWER_RESTART_PAUSE_MS: u64 = 100;

/// Who this replica is and the settings of its engines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaNodeConfig {
    /// This broker.
    pub node_id: NodeId,
    /// This process's incarnation (random per start; followers send it with their fetches).
    pub incarnation: u64,
    /// The replication engines' limits and timers.
    pub replication: ReplicationConfig,
    /// A follower that stopped to have the partition state read again (the leader refused it,
    /// the log refused a step) is not started again before this long, so a refusal that
    /// persists does not spin.
    pub follower_restart_pause_ms: u64,
}

impl ReplicaNodeConfig {
    /// The defaults for broker `node_id` in incarnation `incarnation`.
    pub fn new(node_id: NodeId, incarnation: u64, replication: ReplicationConfig) -> Self {
        Self {
            node_id,
            incarnation,
            replication,
            follower_restart_pause_ms: DEFAULT_FOLLOWER_RESTART_PAUSE_MS,
        }
    }
}

/// What happened that the node must know of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The partition state and the live registrations as last read (a watch event, a periodic
    /// read, or the re-read an [`Effect::Reread`] asked for). A state older than one already
    /// seen is ignored.
    View {
        /// The partition state with its revision.
        state: Versioned<PartitionState>,
        /// The live brokers.
        live: LiveBrokers,
    },
    /// This broker's registration: the store's lease id (0: none) and until when it is valid
    /// by this broker's own conservative clock (0: not registered). Sent on every renewal.
    Registration {
        /// The lease id.
        registration: u64,
        /// Its local deadline.
        valid_until_ms: u64,
    },
    /// The local log is durable up to here (the flush policy synced it).
    LocalDurable {
        /// The durable end offset.
        durable_end_offset: u64,
    },
    /// The periodic timer: a leader fails produces past their deadline and proposes ISR
    /// changes; every replica reconciles with the state last read.
    Tick,
    /// A time named by [`Effect::WakeAt`] came: reconcile (an election turn, a follower's
    /// restart pause).
    Wake,
    /// What became of an election proposal.
    ElectionOutcome(ElectionOutcome),
    /// [`ReplicaLog::become_leader`](crate::cluster::replica_log::ReplicaLog::become_leader) returned (after [`Effect::InstallLeaderEpoch`]).
    LeaderEpochInstalled {
        /// The epoch installed.
        leader_epoch: LeaderEpoch,
        /// What the log said.
        result: Result<(), ReplicaLogError>,
    },
    /// What became of an ISR change proposed by the leader of `leader_epoch`.
    IsrOutcome {
        /// The epoch of the leader that proposed it.
        leader_epoch: LeaderEpoch,
        /// The store's answer.
        outcome: CasOutcome,
    },
    /// The result of a follower's action, for the follower of `generation`.
    Follower {
        /// The generation named by the effect that asked for the action.
        generation: u64,
        /// The result.
        event: FollowerEvent,
    },
}

/// What became of an election proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElectionOutcome {
    /// Written: this broker leads in the state's epoch.
    Won(Versioned<PartitionState>),
    /// Someone else wrote first; `current` is the state the store holds, when it said.
    Lost {
        /// The partition state now.
        current: Option<Versioned<PartitionState>>,
    },
    /// No answer (the store was unreachable, the answer lost).
    Unknown,
}

/// The result of a follower's action ([`FollowerAction`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowerEvent {
    /// [`ReplicaLog::become_follower`](crate::cluster::replica_log::ReplicaLog::become_follower) returned.
    BecameFollower(Result<(), ReplicaLogError>),
    /// The leader answered the epoch-end question.
    EpochEnd(Result<Option<(LeaderEpoch, u64)>, FetchError>),
    /// [`ReplicaLog::truncate_to`](crate::cluster::replica_log::ReplicaLog::truncate_to) returned.
    Truncated(Result<(), ReplicaLogError>),
    /// [`ReplicaLog::start_over_at`](crate::cluster::replica_log::ReplicaLog::start_over_at) returned.
    StartedOver(Result<(), ReplicaLogError>),
    /// The leader answered a fetch.
    Fetched(Result<FetchResponse, FetchError>),
    /// The append of the fetched records returned (the new log end).
    Appended(Result<u64, ReplicaLogError>),
    /// The request or its answer was lost: do the step again.
    Retry,
}

/// What a proposal is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProposalPurpose {
    /// This broker stands for leader.
    Election,
    /// The leader of `leader_epoch` changes the ISR.
    Isr {
        /// The proposing leader's epoch.
        leader_epoch: LeaderEpoch,
    },
}

/// What the caller must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Send this compare-and-swap to the store.
    Propose {
        /// The proposal.
        proposal: Proposal,
        /// What it is for (where its outcome goes).
        purpose: ProposalPurpose,
    },
    /// Read the partition state from the store.
    Reread,
    /// Take over the log in this epoch ([`ReplicaLog::become_leader`](crate::cluster::replica_log::ReplicaLog::become_leader)).
    InstallLeaderEpoch {
        /// The won epoch.
        leader_epoch: LeaderEpoch,
    },
    /// This broker leads from here (for logs and counters).
    Leading {
        /// The epoch.
        leader_epoch: LeaderEpoch,
        /// The first offset of the epoch.
        from_offset: u64,
        /// The high watermark it starts from.
        high_watermark: u64,
    },
    /// The leader of this epoch was deposed: every `acks=all` producer waiting was answered
    /// (through [`Effect::Complete`]) with an unknown outcome.
    Deposed {
        /// The epoch.
        leader_epoch: LeaderEpoch,
    },
    /// Start a follower of `leader` in `leader_epoch`; its first action is `first`.
    StartFollowing {
        /// Names this follower in later inputs and effects.
        generation: u64,
        /// The leader.
        leader: NodeId,
        /// Its epoch.
        leader_epoch: LeaderEpoch,
        /// The first action.
        first: FollowerAction,
    },
    /// The follower's next action.
    FollowerStep {
        /// Which follower.
        generation: u64,
        /// The action.
        action: FollowerAction,
    },
    /// Abandon the follower of `generation` (its I/O and its results).
    StopFollowing {
        /// Which follower.
        generation: u64,
        /// Why.
        reason: StopReason,
    },
    /// Raise the log's high watermark ([`ReplicaLog::advance_high_watermark`](crate::cluster::replica_log::ReplicaLog::advance_high_watermark)).
    AdvanceHighWatermark(u64),
    /// Answer an `acks=all` produce.
    Complete(WaiterCompletion),
    /// Step [`Input::Wake`] at this time.
    WakeAt(u64),
}

/// Why a follower stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The state names another leader or epoch.
    LeaderChanged,
    /// The follower asked for the state to be read again (the leader refused it, the log
    /// refused a step): a new one starts from the read, after a pause.
    Finished,
    /// This broker won an election.
    Elected,
    /// The replica stops ([`ReplicaNode::stop`](super::ReplicaNode::stop)).
    Stopped,
}

/// The effects of one step, in the order they must be carried out.
pub type Effects = Vec<Effect>;
