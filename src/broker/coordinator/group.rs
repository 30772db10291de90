//! One group's state machine: its members, its generation and its phase. Every method runs
//! under the coordinator's lock and only moves state and answers waiters; none blocks.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{GroupError, JoinResponse, JoinedMember};

/// Where a group is in its rebalance cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// No members.
    Empty,
    /// Waiting for the members to (re)join.
    PreparingRebalance {
        /// Members that have not rejoined by then are removed.
        deadline: Instant,
        /// The rebalance does not complete before this (the initial delay of an empty group).
        not_before: Instant,
    },
    /// Joined; waiting for the leader's assignment.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
}

/// One member.
#[derive(Debug)]
pub(super) struct Member {
    pub(super) member_id: String,
    pub(super) group_instance_id: Option<String>,
    /// The client id it joined with (for admins).
    pub(super) client_id: String,
    /// The address it joined from (for admins).
    pub(super) client_host: String,
    pub(super) session_timeout: Duration,
    pub(super) rebalance_timeout: Duration,
    pub(super) protocols: Vec<(String, Bytes)>,
    pub(super) last_heartbeat: Instant,
    pub(super) assignment: Bytes,
    pub(super) join_waiter: Option<oneshot::Sender<Result<JoinResponse, GroupError>>>,
    pub(super) sync_waiter: Option<oneshot::Sender<Result<Bytes, GroupError>>>,
}

impl Member {
    pub(super) fn new(member_id: String, now: Instant) -> Self {
        Self {
            member_id,
            group_instance_id: None,
            client_id: String::new(),
            client_host: String::new(),
            session_timeout: Duration::ZERO,
            rebalance_timeout: Duration::ZERO,
            protocols: Vec::new(),
            last_heartbeat: now,
            assignment: Bytes::new(),
            join_waiter: None,
            sync_waiter: None,
        }
    }

    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(name, _)| name == protocol)
    }

    pub(super) fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, metadata)| metadata.clone())
            .unwrap_or_default()
    }
}

/// A group.
#[derive(Debug)]
pub(super) struct Group {
    pub(super) phase: Phase,
    pub(super) generation: i32,
    pub(super) protocol_type: Option<String>,
    pub(super) protocol: Option<String>,
    pub(super) leader: Option<String>,
    /// By member id (ordered, so the first member is deterministic).
    pub(super) members: BTreeMap<String, Member>,
    /// Ids handed out with `MEMBER_ID_REQUIRED`, not yet joined with.
    pub(super) pending_member_ids: BTreeSet<String>,
    /// Makes member ids unique within the group.
    next_member: u64,
}

impl Default for Group {
    fn default() -> Self {
        Self {
            phase: Phase::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending_member_ids: BTreeSet::new(),
            next_member: 0,
        }
    }
}

impl Group {
    /// A fresh member id: the client id, then a number unique in this group and a random part
    /// (so an id of a forgotten group is not handed out again to someone else).
    pub(super) fn new_member_id(&mut self, client_id: &str) -> String {
        self.next_member += 1;
        let prefix: String = client_id.chars().take(64).collect();
        format!(
            "{prefix}-{}-{:016x}",
            self.next_member,
            rand::random::<u64>()
        )
    }

    /// Whether a member with this protocol type and these protocols may join: the type must be
    /// the group's, and one protocol must be supported by every current member too.
    pub(super) fn accepts_protocols(
        &self,
        protocol_type: &str,
        protocols: &[(String, Bytes)],
    ) -> bool {
        if self.members.is_empty() {
            return true;
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        protocols
            .iter()
            .any(|(name, _)| self.members.values().all(|member| member.supports(name)))
    }

    /// Starts a rebalance: members must rejoin by the longest rebalance timeout. An empty
    /// group's first rebalance also waits `initial_delay` for more members.
    pub(super) fn prepare_rebalance(&mut self, now: Instant, initial_delay: Duration) {
        let was_empty = self.generation == 0 || matches!(self.phase, Phase::Empty);
        let longest = self
            .members
            .values()
            .map(|member| member.rebalance_timeout)
            .max()
            .unwrap_or_default();
        let not_before = if was_empty { now + initial_delay } else { now };
        self.phase = Phase::PreparingRebalance {
            deadline: (now + longest).max(not_before),
            not_before,
        };
        for member in self.members.values_mut() {
            if let Some(waiter) = member.sync_waiter.take() {
                let _ = waiter.send(Err(GroupError::RebalanceInProgress));
            }
        }
    }

    /// Completes the rebalance if every member has rejoined (and any initial delay is over), or
    /// if `deadline_passed` (then members that did not rejoin are removed first).
    pub(super) fn complete_if_ready(&mut self, now: Instant, deadline_passed: bool) {
        let Phase::PreparingRebalance { not_before, .. } = self.phase else {
            return;
        };
        if deadline_passed {
            self.members
                .retain(|_, member| member.join_waiter.is_some());
        } else if now < not_before || self.members.values().any(|m| m.join_waiter.is_none()) {
            return;
        }
        if self.members.is_empty() {
            self.become_empty();
            return;
        }
        self.generation = self.generation.wrapping_add(1).max(1);
        let protocol = self.select_protocol();
        if !self
            .leader
            .as_ref()
            .is_some_and(|leader| self.members.contains_key(leader))
        {
            self.leader = self.members.keys().next().cloned();
        }
        let leader = self.leader.clone().unwrap_or_default();
        let everyone: Vec<JoinedMember> = self
            .members
            .values()
            .map(|member| JoinedMember {
                member_id: member.member_id.clone(),
                group_instance_id: member.group_instance_id.clone(),
                metadata: member.metadata_for(&protocol),
            })
            .collect();
        for member in self.members.values_mut() {
            member.assignment = Bytes::new();
            member.last_heartbeat = now;
            if let Some(waiter) = member.join_waiter.take() {
                let _ = waiter.send(Ok(JoinResponse {
                    generation_id: self.generation,
                    protocol_type: self.protocol_type.clone().unwrap_or_default(),
                    protocol_name: protocol.clone(),
                    leader: leader.clone(),
                    member_id: member.member_id.clone(),
                    members: if member.member_id == leader {
                        everyone.clone()
                    } else {
                        Vec::new()
                    },
                }));
            }
        }
        self.protocol = Some(protocol);
        self.phase = Phase::CompletingRebalance;
    }

    /// The protocol supported by every member that most members prefer (each votes for its
    /// most preferred one among those).
    fn select_protocol(&self) -> String {
        let candidates: Vec<&str> = self
            .members
            .values()
            .next()
            .map(|first| {
                first
                    .protocols
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .filter(|name| self.members.values().all(|member| member.supports(name)))
                    .collect()
            })
            .unwrap_or_default();
        let mut votes: HashMap<&str, usize> = HashMap::new();
        for member in self.members.values() {
            if let Some((name, _)) = member
                .protocols
                .iter()
                .find(|(name, _)| candidates.contains(&name.as_str()))
            {
                *votes.entry(name.as_str()).or_default() += 1;
            }
        }
        candidates
            .iter()
            .max_by_key(|name| {
                (
                    votes.get(*name).copied().unwrap_or(0),
                    std::cmp::Reverse(*name),
                )
            })
            .map(|name| name.to_string())
            .unwrap_or_default()
    }

    /// The leader's assignment, stored per member; nobody is answered yet (the group stays
    /// completing its rebalance until [`Self::answer_syncs`]).
    pub(super) fn store_assignment(&mut self, assignments: Vec<(String, Bytes)>) {
        for (member_id, assignment) in assignments {
            if let Some(member) = self.members.get_mut(&member_id) {
                member.assignment = assignment;
            }
        }
    }

    /// Every waiting sync answered with its member's assignment: the group is stable.
    pub(super) fn answer_syncs(&mut self) {
        for member in self.members.values_mut() {
            if let Some(waiter) = member.sync_waiter.take() {
                let _ = waiter.send(Ok(member.assignment.clone()));
            }
        }
        self.phase = Phase::Stable;
    }

    /// Every waiting sync answered `error` (the assignment could not be kept).
    pub(super) fn fail_syncs(&mut self, error: &GroupError) {
        for member in self.members.values_mut() {
            if let Some(waiter) = member.sync_waiter.take() {
                let _ = waiter.send(Err(error.clone()));
            }
        }
    }

    /// A known member of the current generation?
    pub(super) fn check_member(&self, member_id: &str, generation: i32) -> Result<(), GroupError> {
        if !self.members.contains_key(member_id) {
            return Err(GroupError::UnknownMemberId);
        }
        if generation != self.generation {
            return Err(GroupError::IllegalGeneration {
                got: generation,
                current: self.generation,
            });
        }
        Ok(())
    }

    /// Removes a member, failing whatever it waits on. False if it was not a member.
    pub(super) fn remove_member(&mut self, member_id: &str) -> bool {
        let Some(mut member) = self.members.remove(member_id) else {
            return self.pending_member_ids.remove(member_id);
        };
        if let Some(waiter) = member.join_waiter.take() {
            let _ = waiter.send(Err(GroupError::UnknownMemberId));
        }
        if let Some(waiter) = member.sync_waiter.take() {
            let _ = waiter.send(Err(GroupError::UnknownMemberId));
        }
        true
    }

    /// Removes the member that joined with static instance id `instance_id`, if any, failing
    /// whatever it waits on (a new incarnation of the instance is joining).
    pub(super) fn remove_instance(&mut self, instance_id: &str) {
        let previous: Vec<String> = self
            .members
            .values()
            .filter(|member| member.group_instance_id.as_deref() == Some(instance_id))
            .map(|member| member.member_id.clone())
            .collect();
        for member_id in previous {
            tracing::info!(%member_id, instance_id, "static member replaced by a new incarnation");
            self.remove_member(&member_id);
        }
    }

    /// After members left or expired: rebalance the rest, or become empty.
    pub(super) fn after_membership_change(&mut self, now: Instant, initial_delay: Duration) {
        if self.members.is_empty() {
            self.become_empty();
        } else if matches!(self.phase, Phase::PreparingRebalance { .. }) {
            self.complete_if_ready(now, false);
        } else {
            self.prepare_rebalance(now, initial_delay);
        }
    }

    fn become_empty(&mut self) {
        if !matches!(self.phase, Phase::Empty) {
            self.generation = self.generation.wrapping_add(1).max(1);
        }
        self.phase = Phase::Empty;
        self.leader = None;
        self.protocol = None;
    }

    /// A group with nothing to remember: no members, no ids handed out.
    pub(super) fn is_forgettable(&self) -> bool {
        self.members.is_empty() && self.pending_member_ids.is_empty()
    }

    /// Deadlines: removes members whose session expired (members waiting in a join are not
    /// expired: the rebalance timeout covers them), and completes a rebalance whose time has
    /// come. As in Kafka, a member that stopped (crashed, or closed without leaving) expires by
    /// its session timeout during a rebalance too, so the members that did rejoin are answered
    /// then instead of waiting for the longest rebalance timeout (`max.poll.interval.ms`, 5 min
    /// by default in the clients).
    pub(super) fn tick(&mut self, now: Instant, initial_delay: Duration) {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|member| {
                member.join_waiter.is_none()
                    && now >= member.last_heartbeat + member.session_timeout
            })
            .map(|member| member.member_id.clone())
            .collect();
        for member_id in &expired {
            tracing::info!(%member_id, "group member's session expired");
            self.remove_member(member_id);
        }
        if let Phase::PreparingRebalance { deadline, .. } = self.phase {
            self.complete_if_ready(now, now >= deadline);
            return;
        }
        if !expired.is_empty() {
            self.after_membership_change(now, initial_delay);
        }
    }
}
