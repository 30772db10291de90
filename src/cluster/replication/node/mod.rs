//! One broker's replica of one partition as a single state machine: everything the broker
//! decides for it (whether to stand for election, take over, follow, stop following, what a
//! leader does with a read, a tick, a renewal or a sync) is [`ReplicaNode::step`], a pure
//! function of the input, the time and read-only queries of the replica's log, returning
//! [`Effect`]s for the caller to carry out.
//!
//! raft-rs's `RawNode`/`Ready` is the model: the node owns the engines ([`Leader`],
//! [`Follower`], [`Elector`]) and the rules that join them, and knows nothing of sockets, etcd,
//! tasks or clocks. Two callers drive it: the broker's cluster driver
//! (`crate::broker::cluster::driver`, real etcd, real connections, the tokio timer) and the
//! deterministic simulation (`tests/replication_sim`, a seeded network, an in-memory store, a
//! virtual clock). Because both run this code, the simulation tests the decisions the broker
//! makes, not a copy of them.
//!
//! The caller's side of the contract, per effect:
//! - [`Effect::Propose`]: send the compare-and-swap; give what became of it back as
//!   [`Input::ElectionOutcome`] or [`Input::IsrOutcome`].
//! - [`Effect::Reread`]: read the partition state from the store; give it back as
//!   [`Input::View`].
//! - [`Effect::InstallLeaderEpoch`]: call [`ReplicaLog::become_leader`]; give the result back as
//!   [`Input::LeaderEpochInstalled`]. Nothing is served in the new epoch before that.
//! - [`Effect::StartFollowing`] / [`Effect::FollowerStep`]: carry out the follower's action
//!   (talk to the leader, change the log) and give the result back as [`Input::Follower`] with
//!   the same generation; [`Effect::StopFollowing`]: abandon that generation's I/O.
//! - [`Effect::AdvanceHighWatermark`], [`Effect::Complete`]: apply to the log, answer the
//!   `acks=all` producer.
//! - [`Effect::WakeAt`]: step [`Input::Wake`] at (or after) that time; a caller that steps
//!   [`Input::Tick`] often enough may ignore it.
//!
//! Producers and followers reach the leader through the request methods
//! ([`ReplicaNode::check_produce`], [`ReplicaNode::await_commit`], [`ReplicaNode::serve_fetch`],
//! …), which answer at once and return effects like a step.

mod io;

pub use io::{
    Effect, Effects, ElectionOutcome, FollowerEvent, Input, ProposalPurpose, ReplicaNodeConfig,
    StopReason, DEFAULT_FOLLOWER_RESTART_PAUSE_MS,
};

use super::election::{ElectionDecision, Elector};
use super::follower::{Follower, FollowerAction};
use super::leader::{
    AcksAllError, Leader, LeaderOutput, LeaderStart, ProduceRefusal, WaiterCompletion,
};
use super::{EpochEndRequest, FetchError, FetchRequest, FetchServe, LiveBrokers, ReplicaLog};
use crate::cluster::replica_log::ReplicaLogError;
use crate::cluster::{LeaderEpoch, PartitionState, Versioned};

/// What this broker does for the replica.
#[derive(Debug)]
enum Role {
    /// Waiting for the state to name a leader, for an election, or for a restart pause.
    Idle,
    /// Won an election in this state; waiting for the log to install its epoch.
    Installing(Versioned<PartitionState>),
    /// Leading.
    Leading(Box<Leader>),
    /// Following, as follower `generation`.
    Following { generation: u64, follower: Follower },
}

/// One broker's replica of one partition. See the module docs.
#[derive(Debug)]
pub struct ReplicaNode {
    config: ReplicaNodeConfig,
    role: Role,
    elector: Elector,
    view: Option<Versioned<PartitionState>>,
    live: LiveBrokers,
    registration: u64,
    registration_valid_until_ms: u64,
    /// An election proposal is under way.
    electing: bool,
    next_generation: u64,
    /// No follower starts before this (a restart pause).
    follow_after_ms: u64,
    /// Truncations below a high watermark, over every follower this node ran.
    truncations_below_high_watermark: u64,
}

impl ReplicaNode {
    /// A replica that knows nothing yet: it waits for a view and a registration.
    pub fn new(config: ReplicaNodeConfig) -> Self {
        let elector = Elector::new(config.node_id, config.replication.election_backoff_ms);
        Self {
            config,
            role: Role::Idle,
            elector,
            view: None,
            live: LiveBrokers::new(),
            registration: 0,
            registration_valid_until_ms: 0,
            electing: false,
            next_generation: 0,
            follow_after_ms: 0,
            truncations_below_high_watermark: 0,
        }
    }

    /// This node's settings.
    pub fn config(&self) -> &ReplicaNodeConfig {
        &self.config
    }

    /// The partition state last seen.
    pub fn view(&self) -> Option<&Versioned<PartitionState>> {
        self.view.as_ref()
    }

    /// The leader engine, when this broker leads (and was not deposed).
    pub fn leader(&self) -> Option<&Leader> {
        match &self.role {
            Role::Leading(leader) if !leader.is_deposed() => Some(leader),
            _ => None,
        }
    }

    /// The epoch this broker leads in, if it leads and was not deposed.
    pub fn leading_epoch(&self) -> Option<LeaderEpoch> {
        self.leader().map(Leader::epoch)
    }

    /// Whether this broker leads and may act at `now_ms` (its registration valid by its own
    /// clock).
    pub fn is_leading(&self, now_ms: u64) -> bool {
        self.leader()
            .is_some_and(|leader| leader.can_acknowledge(now_ms))
    }

    /// The follower running, with its generation.
    pub fn follower(&self) -> Option<(u64, &Follower)> {
        match &self.role {
            Role::Following {
                generation,
                follower,
            } => Some((*generation, follower)),
            _ => None,
        }
    }

    /// Whether an election proposal or a take-over is under way.
    pub fn is_electing(&self) -> bool {
        self.electing || matches!(self.role, Role::Installing(_))
    }

    /// Truncations below a high watermark, over every follower this node ran (zero unless
    /// committed records were lost, which only a power cut of every replica can do).
    pub fn truncations_below_high_watermark(&self) -> u64 {
        let running = self.follower().map_or(0, |(_, follower)| {
            follower.truncations_below_high_watermark()
        });
        self.truncations_below_high_watermark + running
    }

    /// Takes `input` at `now_ms`; `log` is this replica's log, for queries only.
    pub fn step(&mut self, now_ms: u64, log: &dyn ReplicaLog, input: Input) -> Effects {
        let mut effects = Effects::new();
        match input {
            Input::View { state, live } => {
                self.live = live;
                let newer = self
                    .view
                    .as_ref()
                    .is_none_or(|seen| seen.revision <= state.revision);
                if newer {
                    self.view = Some(state);
                }
                if let (Role::Leading(leader), Some(view)) = (&mut self.role, &self.view) {
                    let output = leader.on_partition_read(now_ms, view);
                    self.leader_output(output, &mut effects);
                }
                self.reconcile(now_ms, &mut effects);
            }
            Input::Registration {
                registration,
                valid_until_ms,
            } => {
                self.registration = registration;
                self.registration_valid_until_ms = valid_until_ms;
                if let Role::Leading(leader) = &mut self.role {
                    leader.on_registration_renewed(registration, valid_until_ms);
                }
                self.reconcile(now_ms, &mut effects);
            }
            Input::LocalDurable { durable_end_offset } => {
                if let Role::Leading(leader) = &mut self.role {
                    let output = leader.on_local_durable(now_ms, durable_end_offset);
                    self.leader_output(output, &mut effects);
                }
            }
            Input::Tick => {
                if let Role::Leading(leader) = &mut self.role {
                    let output = leader.on_tick(now_ms, &self.live);
                    self.leader_output(output, &mut effects);
                }
                self.reconcile(now_ms, &mut effects);
            }
            Input::Wake => self.reconcile(now_ms, &mut effects),
            Input::ElectionOutcome(outcome) => {
                self.electing = false;
                self.on_election_outcome(now_ms, outcome, &mut effects);
            }
            Input::LeaderEpochInstalled {
                leader_epoch,
                result,
            } => self.on_leader_epoch_installed(now_ms, log, leader_epoch, result, &mut effects),
            Input::IsrOutcome {
                leader_epoch,
                outcome,
            } => {
                if let Role::Leading(leader) = &mut self.role {
                    if leader.epoch() == leader_epoch {
                        let output = leader.on_cas_outcome(now_ms, outcome);
                        self.leader_output(output, &mut effects);
                    }
                }
            }
            Input::Follower { generation, event } => {
                self.on_follower_event(now_ms, log, generation, event, &mut effects)
            }
        }
        effects
    }

    /// Stops whatever runs (the replica moved away, the topic was deleted, the broker shuts
    /// down): a leader is deposed (its waiters answered with an unknown outcome), a follower
    /// abandoned.
    pub fn stop(&mut self) -> Effects {
        let mut effects = Effects::new();
        self.depose(&mut effects);
        self.stop_following(StopReason::Stopped, &mut effects);
        if matches!(self.role, Role::Installing(_)) {
            self.role = Role::Idle;
        }
        effects
    }

    // ----- requests to the leader -----

    /// Whether a produce may be written now: this broker leads (and with `acks_all`, the ISR is
    /// at least `min_insync` and the waiters are below their limit). `Ok` carries the epoch to
    /// append in.
    pub fn check_produce(
        &mut self,
        now_ms: u64,
        acks_all: bool,
    ) -> (Result<LeaderEpoch, ProduceRefusal>, Effects) {
        let mut effects = Effects::new();
        let Role::Leading(leader) = &mut self.role else {
            return (Err(ProduceRefusal::NotLeader), effects);
        };
        let epoch = leader.epoch();
        let result = if acks_all {
            leader.check_produce(now_ms).map(|()| epoch)
        } else if leader.can_acknowledge(now_ms) {
            Ok(epoch)
        } else {
            Err(ProduceRefusal::NotLeader)
        };
        if leader.is_deposed() {
            let output = leader.depose_now();
            self.leader_output(output, &mut effects);
        }
        (result, effects)
    }

    /// A produce without `acks=all` was appended: the leader counts what its log made durable.
    pub fn appended(&mut self, now_ms: u64, log: &dyn ReplicaLog) -> Effects {
        self.step(
            now_ms,
            log,
            Input::LocalDurable {
                durable_end_offset: log.durable_end_offset(),
            },
        )
    }

    /// An `acks=all` produce (the caller's id `id`) was appended with its last record at
    /// `last_offset`: it is answered through an [`Effect::Complete`] once the high watermark
    /// passes it (perhaps in these effects), or with an unknown outcome when it cannot be.
    pub fn await_commit(
        &mut self,
        now_ms: u64,
        log: &dyn ReplicaLog,
        id: u64,
        last_offset: u64,
    ) -> Effects {
        let mut effects = Effects::new();
        let Role::Leading(leader) = &mut self.role else {
            effects.push(Effect::Complete(WaiterCompletion {
                id,
                result: Err(AcksAllError::Deposed),
            }));
            return effects;
        };
        if !leader.can_acknowledge(now_ms) {
            effects.push(Effect::Complete(WaiterCompletion {
                id,
                result: Err(AcksAllError::Deposed),
            }));
            return effects;
        }
        if last_offset < leader.high_watermark() {
            // Committed already (a concurrent produce's progress carried it over).
            effects.push(Effect::Complete(WaiterCompletion { id, result: Ok(()) }));
            return effects;
        }
        let mut output = leader.on_appended(now_ms, id, last_offset);
        if !output.deposed {
            merge(
                &mut output,
                leader.on_local_durable(now_ms, log.durable_end_offset()),
            );
        }
        self.leader_output(output, &mut effects);
        effects
    }

    /// Answers a follower's fetch (or records its progress report). `Ok` says which records to
    /// send.
    pub fn serve_fetch(
        &mut self,
        now_ms: u64,
        log: &dyn ReplicaLog,
        request: &FetchRequest,
    ) -> (Result<FetchServe, FetchError>, Effects) {
        let mut effects = Effects::new();
        let Role::Leading(leader) = &mut self.role else {
            return (Err(FetchError::NotLeader), effects);
        };
        let (result, output) = leader.on_fetch(now_ms, request, log);
        self.leader_output(output, &mut effects);
        (result, effects)
    }

    /// Answers a follower's epoch-end question.
    pub fn serve_epoch_end(
        &mut self,
        now_ms: u64,
        log: &dyn ReplicaLog,
        request: &EpochEndRequest,
    ) -> (Result<Option<(LeaderEpoch, u64)>, FetchError>, Effects) {
        let mut effects = Effects::new();
        let Role::Leading(leader) = &mut self.role else {
            return (Err(FetchError::NotLeader), effects);
        };
        let (result, output) = leader.on_epoch_end(now_ms, request, log);
        self.leader_output(output, &mut effects);
        (result, effects)
    }

    // ----- the rules -----

    /// Brings the role in line with the state last read: a follower of another leader or epoch
    /// stops, the elector decides, and an idle replica follows the leader named.
    fn reconcile(&mut self, now_ms: u64, effects: &mut Effects) {
        let Some(view) = self.view.clone() else {
            return;
        };
        if let Role::Following { follower, .. } = &self.role {
            if view.value.leader != Some(follower.leader())
                || view.value.leader_epoch != follower.leader_epoch()
            {
                self.stop_following(StopReason::LeaderChanged, effects);
            }
        }
        if self.is_electing() {
            return;
        }
        let registered = now_ms < self.registration_valid_until_ms;
        let leading = self.leading_epoch();
        match self
            .elector
            .decide(now_ms, &view, &self.live, leading, registered)
        {
            ElectionDecision::Propose(proposal) => {
                self.electing = true;
                effects.push(Effect::Propose {
                    proposal,
                    purpose: ProposalPurpose::Election,
                });
                return;
            }
            ElectionDecision::Wait { until_ms } => effects.push(Effect::WakeAt(until_ms)),
            ElectionDecision::Nothing => {}
        }
        let Some(leader) = view.value.leader else {
            return;
        };
        if !matches!(self.role, Role::Idle) || leader == self.config.node_id {
            return;
        }
        if now_ms < self.follow_after_ms {
            effects.push(Effect::WakeAt(self.follow_after_ms));
            return;
        }
        self.next_generation += 1;
        let generation = self.next_generation;
        let (follower, first) = Follower::new(
            self.config.node_id,
            self.config.incarnation,
            leader,
            view.value.leader_epoch,
            &self.config.replication,
        );
        self.role = Role::Following {
            generation,
            follower,
        };
        effects.push(Effect::StartFollowing {
            generation,
            leader,
            leader_epoch: view.value.leader_epoch,
            first,
        });
    }

    fn on_election_outcome(
        &mut self,
        now_ms: u64,
        outcome: ElectionOutcome,
        effects: &mut Effects,
    ) {
        match outcome {
            ElectionOutcome::Won(won) => {
                if self
                    .view
                    .as_ref()
                    .is_some_and(|seen| seen.revision > won.revision)
                {
                    // The state moved on past the win before its answer came.
                    self.reconcile(now_ms, effects);
                    return;
                }
                let leader_epoch = won.value.leader_epoch;
                self.view = Some(won.clone());
                self.depose(effects);
                self.stop_following(StopReason::Elected, effects);
                self.role = Role::Installing(won);
                effects.push(Effect::InstallLeaderEpoch { leader_epoch });
            }
            ElectionOutcome::Lost {
                current: Some(current),
            } => {
                if self
                    .view
                    .as_ref()
                    .is_none_or(|seen| seen.revision <= current.revision)
                {
                    self.view = Some(current);
                }
                self.reconcile(now_ms, effects);
            }
            ElectionOutcome::Lost { current: None } | ElectionOutcome::Unknown => {
                effects.push(Effect::Reread);
            }
        }
    }

    fn on_leader_epoch_installed(
        &mut self,
        now_ms: u64,
        log: &dyn ReplicaLog,
        leader_epoch: LeaderEpoch,
        result: Result<(), ReplicaLogError>,
        effects: &mut Effects,
    ) {
        let Role::Installing(won) = &self.role else {
            return;
        };
        if won.value.leader_epoch != leader_epoch {
            return;
        }
        let won = won.clone();
        self.role = Role::Idle;
        if result.is_err() {
            effects.push(Effect::Reread);
            return;
        }
        let start = LeaderStart {
            partition: won,
            log_end_offset: log.log_end_offset(),
            durable_end_offset: log.durable_end_offset(),
            high_watermark: log.high_watermark(),
            now_ms,
            registration_valid_until_ms: self.registration_valid_until_ms,
            registration: self.registration,
        };
        match Leader::new(self.config.node_id, self.config.replication.clone(), start) {
            Ok(leader) => {
                effects.push(Effect::Leading {
                    leader_epoch,
                    from_offset: leader.epoch_start_offset(),
                    high_watermark: leader.high_watermark(),
                });
                self.role = Role::Leading(Box::new(leader));
            }
            Err(_) => effects.push(Effect::Reread),
        }
    }

    fn on_follower_event(
        &mut self,
        now_ms: u64,
        log: &dyn ReplicaLog,
        generation: u64,
        event: FollowerEvent,
        effects: &mut Effects,
    ) {
        let Role::Following {
            generation: running,
            follower,
        } = &mut self.role
        else {
            return;
        };
        if *running != generation {
            return;
        }
        let action = match event {
            FollowerEvent::BecameFollower(result) => follower.on_became_follower(log, result),
            FollowerEvent::EpochEnd(answer) => follower.on_epoch_end(log, answer),
            FollowerEvent::Truncated(result) => follower.on_truncated(log, result),
            FollowerEvent::StartedOver(result) => follower.on_started_over(log, result),
            FollowerEvent::Fetched(response) => follower.on_fetch_response(log, response),
            FollowerEvent::Appended(result) => follower.on_appended(log, result),
            FollowerEvent::Retry => follower.retry(log),
        };
        match action {
            FollowerAction::RereadMetadata => {
                // The finished-follower rule: this leader or epoch is not the right one (or the
                // log refused a step). Start over from a fresh read, after a pause.
                self.stop_following(StopReason::Finished, effects);
                self.follow_after_ms = now_ms.saturating_add(self.config.follower_restart_pause_ms);
                effects.push(Effect::Reread);
                effects.push(Effect::WakeAt(self.follow_after_ms));
            }
            action => effects.push(Effect::FollowerStep { generation, action }),
        }
    }

    /// Applies a leader engine's output.
    fn leader_output(&mut self, output: LeaderOutput, effects: &mut Effects) {
        let Role::Leading(leader) = &self.role else {
            return;
        };
        let leader_epoch = leader.epoch();
        if let Some(high_watermark) = output.high_watermark {
            effects.push(Effect::AdvanceHighWatermark(high_watermark));
        }
        effects.extend(output.completions.into_iter().map(Effect::Complete));
        if let Some(proposal) = output.proposal {
            effects.push(Effect::Propose {
                proposal,
                purpose: ProposalPurpose::Isr { leader_epoch },
            });
        }
        if output.deposed {
            self.role = Role::Idle;
            effects.push(Effect::Deposed { leader_epoch });
            effects.push(Effect::Reread);
        } else if output.reread {
            effects.push(Effect::Reread);
        }
    }

    /// Deposes a leader now (its waiters answered as deposed).
    fn depose(&mut self, effects: &mut Effects) {
        if let Role::Leading(leader) = &mut self.role {
            let output = leader.depose_now();
            let leader_epoch = leader.epoch();
            effects.extend(output.completions.into_iter().map(Effect::Complete));
            effects.push(Effect::Deposed { leader_epoch });
            self.role = Role::Idle;
        }
    }

    fn stop_following(&mut self, reason: StopReason, effects: &mut Effects) {
        if let Role::Following {
            generation,
            follower,
        } = &self.role
        {
            self.truncations_below_high_watermark += follower.truncations_below_high_watermark();
            effects.push(Effect::StopFollowing {
                generation: *generation,
                reason,
            });
            self.role = Role::Idle;
        }
    }
}

/// Merges a later engine output into an earlier one.
fn merge(into: &mut LeaderOutput, later: LeaderOutput) {
    into.completions.extend(later.completions);
    if later.high_watermark.is_some() {
        into.high_watermark = later.high_watermark;
    }
    if later.proposal.is_some() {
        into.proposal = later.proposal;
    }
    into.reread |= later.reread;
    into.deposed |= later.deposed;
}

#[cfg(test)]
mod tests;
