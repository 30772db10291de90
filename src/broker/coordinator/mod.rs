//! The group coordinator: Kafka's classic consumer-group protocol (JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup), protocol-neutral, so that the Kafka listener's group APIs only
//! translate bytes.
//!
//! The coordinator does not assign partitions: as in Kafka, it elects a leader among the members,
//! relays every member's subscription metadata to it, and relays the assignment the leader
//! computes back to each member. What it owns is membership and generations:
//!
//! * A member joins (`join`); the group goes to **preparing rebalance** and waits until every
//!   known member has (re)joined, or until the longest rebalance timeout passes (members that did
//!   not rejoin are removed). The first join of an empty group also waits
//!   [`CoordinatorConfig::initial_rebalance_delay`] so that members starting together land in one
//!   generation. Then the generation is bumped, a protocol every member supports is chosen, and
//!   every pending join is answered (the leader's answer lists the members).
//! * The group is then **completing rebalance** until the leader's `sync` brings the assignment;
//!   every member's `sync` is answered with its part. Then it is **stable**.
//! * Members `heartbeat` within their session timeout; a member that does not is removed and the
//!   group rebalances. A heartbeat during a rebalance answers
//!   [`GroupError::RebalanceInProgress`], which is how members learn to rejoin.
//! * `leave` removes members at once.
//!
//! Deadlines are checked by a ticker task every [`TICK`] (the coordinator must live inside a
//! tokio runtime); calls never block on the ticker. All state is behind one lock that is never
//! held across an `await`: pending joins and syncs wait on oneshot channels.
//!
//! Static membership (`group.instance.id`) is accepted and reported; an instance that restarts
//! (joins again without a member id) replaces its previous member at once. In a stable group
//! a follower's new incarnation gets its previous assignment without a rebalance, as in Kafka
//! (KIP-345); a restarted leader, or an instance of a group that is rebalancing, rebalances
//! the group.

mod admin;
mod describe;
mod durable;
mod error;
mod group;
mod snapshot;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::domain::{ConfigError, Quantity};

pub use admin::{GroupHasMembers, GroupSubscriptions};
pub use describe::{GroupDescription, GroupListing, GroupState, MemberDescription};
use durable::DurableWriter;
pub use durable::{GroupStore, MAX_PENDING_GROUP_WRITES};
pub use error::GroupError;
use group::{Group, Member, Phase};
pub use snapshot::{GroupPersistence, GroupSnapshot, MemberSnapshot};

/// How often deadlines (rebalance timeouts, session expiries) are checked.
pub const TICK: Duration = Duration::from_millis(100);
/// Kafka's `group.initial.rebalance.delay.ms` default.
pub const DEFAULT_INITIAL_REBALANCE_DELAY: Duration = Duration::from_secs(3);
/// Kafka's `group.min.session.timeout.ms` default.
pub const DEFAULT_MIN_SESSION_TIMEOUT: Duration = Duration::from_secs(6);
/// Kafka's `group.max.session.timeout.ms` default.
pub const DEFAULT_MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Default most groups with members at once.
pub const DEFAULT_MAX_GROUPS: usize = 10_000;
/// Default most members of one group (Kafka's `group.max.size` is unbounded by default; a
/// bound keeps one group from holding the broker's memory).
pub const DEFAULT_MAX_MEMBERS_PER_GROUP: usize = 1000;
/// Longest group id, in bytes (one limit for both group protocols).
pub use crate::broker::consumer_groups::MAX_GROUP_ID_BYTES;

/// Limits and timings of the coordinator.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// How long the first rebalance of an empty group waits for more members.
    pub initial_rebalance_delay: Duration,
    /// Shortest session timeout a member may ask for.
    pub min_session_timeout: Duration,
    /// Longest session timeout a member may ask for.
    pub max_session_timeout: Duration,
    /// Most groups with members at once.
    pub max_groups: usize,
    /// Most members of one group.
    pub max_members_per_group: usize,
    /// Timings and limits of the consumer-protocol (KIP-848) groups.
    pub consumer: crate::broker::consumer_groups::ConsumerGroupConfig,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        Self {
            initial_rebalance_delay: DEFAULT_INITIAL_REBALANCE_DELAY,
            min_session_timeout: DEFAULT_MIN_SESSION_TIMEOUT,
            max_session_timeout: DEFAULT_MAX_SESSION_TIMEOUT,
            max_groups: DEFAULT_MAX_GROUPS,
            max_members_per_group: DEFAULT_MAX_MEMBERS_PER_GROUP,
            consumer: Default::default(),
        }
    }
}

impl CoordinatorConfig {
    /// Checks the limits: the session timeout bounds in order, at least one group and one
    /// member per group, and the consumer-protocol groups' limits.
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_at_most(
            "min_session_timeout",
            Quantity::duration(self.min_session_timeout),
            "max_session_timeout",
            Quantity::duration(self.max_session_timeout),
        )?;
        ConfigError::check_positive("max_groups", Quantity::count(self.max_groups))?;
        ConfigError::check_positive(
            "max_members_per_group",
            Quantity::count(self.max_members_per_group),
        )?;
        self.consumer.validate()
    }
}

/// A member's request to join (or rejoin) a group.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    /// The group.
    pub group_id: String,
    /// Empty for a new member; the id the coordinator gave it otherwise.
    pub member_id: String,
    /// The static instance id, if the client has one.
    pub group_instance_id: Option<String>,
    /// The client's id (a prefix of the member ids it gets).
    pub client_id: String,
    /// The address the member connects from, as admins see it (Kafka's form: `/` then the IP
    /// address).
    pub client_host: String,
    /// Removed when no heartbeat arrives for this long.
    pub session_timeout: Duration,
    /// How long a rebalance waits for this member to rejoin.
    pub rebalance_timeout: Duration,
    /// E.g. `consumer`; every member of a group must use the same.
    pub protocol_type: String,
    /// The member's supported protocols (assignors), most preferred first, each with its
    /// subscription metadata.
    pub protocols: Vec<(String, Bytes)>,
    /// A new member (empty id) is first given an id with [`GroupError::MemberIdRequired`] and
    /// must join again with it (Kafka's JoinGroup v4+).
    pub require_known_member_id: bool,
}

/// One member as the leader sees it in its join answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedMember {
    /// The member's id.
    pub member_id: String,
    /// Its static instance id, if any.
    pub group_instance_id: Option<String>,
    /// Its metadata for the chosen protocol.
    pub metadata: Bytes,
}

/// The answer to a join, once the rebalance completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResponse {
    /// The new generation.
    pub generation_id: i32,
    /// The group's protocol type.
    pub protocol_type: String,
    /// The protocol (assignor) chosen.
    pub protocol_name: String,
    /// The leader's member id.
    pub leader: String,
    /// This member's id.
    pub member_id: String,
    /// Every member, for the leader; empty for the others.
    pub members: Vec<JoinedMember>,
}

/// A member's sync: the leader brings every member's assignment.
#[derive(Debug, Clone)]
pub struct SyncRequest {
    /// The group.
    pub group_id: String,
    /// The generation the member joined.
    pub generation_id: i32,
    /// The member.
    pub member_id: String,
    /// From the leader: `(member id, assignment)` for the members; empty from the others.
    pub assignments: Vec<(String, Bytes)>,
}

/// The consumer-group coordinator of one broker.
pub struct GroupCoordinator {
    config: CoordinatorConfig,
    groups: Mutex<HashMap<String, Group>>,
    /// Where snapshots of groups go when they change generation or empty (a cluster's
    /// offsets partitions); unset standalone, where [`Self::store_in`] writes them instead.
    persistence: std::sync::OnceLock<GroupPersistence>,
    /// Where groups are written durably (a standalone broker's `DATA/groups/`); unset on a
    /// cluster, where the offsets partitions hold them (see [`Self::store_in`]).
    durable: std::sync::OnceLock<DurableWriter>,
    /// This coordinator, for the tasks that finish a sync once its snapshot is written.
    this: Weak<Self>,
}

impl std::fmt::Debug for GroupCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCoordinator")
            .field("config", &self.config)
            .field("groups", &self.lock().len())
            .field("persists", &self.persists())
            .finish()
    }
}

impl GroupCoordinator {
    /// A coordinator with its ticker task (stops once the coordinator is dropped). Must be
    /// called inside a tokio runtime.
    pub fn start(config: CoordinatorConfig) -> Arc<Self> {
        let coordinator = Arc::new_cyclic(|this| Self {
            config,
            groups: Mutex::new(HashMap::new()),
            persistence: std::sync::OnceLock::new(),
            durable: std::sync::OnceLock::new(),
            this: this.clone(),
        });
        tokio::spawn(tick_until_dropped(Arc::downgrade(&coordinator)));
        coordinator
    }

    /// Hands every later group snapshot to `persistence` (see [`GroupSnapshot`]). Only the
    /// first call takes effect.
    pub fn persist_with(&self, persistence: GroupPersistence) {
        let _ = self.persistence.set(persistence);
    }

    /// Installs `loaded` (the groups `store` held when the broker started: each stays in its
    /// generation, its members' sessions starting now) and writes every later change of a
    /// group to `store`: a generation completing (before any member's sync is answered),
    /// members leaving or expiring, the group emptying. Only the first call takes effect.
    pub fn store_in(&self, store: Arc<dyn GroupStore>, loaded: Vec<(String, GroupSnapshot)>) {
        if self.durable.set(DurableWriter::start(store)).is_err() {
            return;
        }
        for (group_id, snapshot) in &loaded {
            self.restore(group_id, snapshot);
        }
    }

    /// Queues `group`'s snapshot for the durable store, if there is one (call it under the
    /// lock, right after the change, so writes keep the order of the changes).
    fn store(&self, group_id: &str, group: &Group) -> Option<durable::WriteDone> {
        let writer = self.durable.get()?;
        Some(writer.enqueue(group_id.to_owned(), GroupSnapshot::of(group)))
    }

    /// [`Self::store`] for a group whose leader's assignment was just stored.
    fn store_completed(&self, group_id: &str, group: &Group) -> Option<durable::WriteDone> {
        let writer = self.durable.get()?;
        Some(writer.enqueue(group_id.to_owned(), GroupSnapshot::of_completed(group)))
    }

    /// Hands `snapshots` to the persistence, if any (called after the lock is released).
    fn persist(&self, snapshots: Vec<(String, GroupSnapshot)>) {
        if let Some(persistence) = self.persistence.get() {
            for (group_id, snapshot) in snapshots {
                persistence(group_id, snapshot);
            }
        }
    }

    /// Whether group snapshots are persisted (a cluster): only then are they taken.
    fn persists(&self) -> bool {
        self.persistence.get().is_some()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Group>> {
        // Every critical section leaves the groups consistent before it can panic.
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Joins (or rejoins) a group; resolves once the rebalance this join is part of completes.
    pub async fn join(&self, request: JoinRequest) -> Result<JoinResponse, GroupError> {
        let answer = self.start_join(request, Instant::now())?;
        answer.await.unwrap_or(Err(GroupError::RebalanceInProgress))
    }

    fn start_join(
        &self,
        request: JoinRequest,
        now: Instant,
    ) -> Result<oneshot::Receiver<Result<JoinResponse, GroupError>>, GroupError> {
        validate_group_id(&request.group_id)?;
        let session = request.session_timeout;
        if session < self.config.min_session_timeout || session > self.config.max_session_timeout {
            return Err(GroupError::InvalidSessionTimeout {
                asked: session,
                min: self.config.min_session_timeout,
                max: self.config.max_session_timeout,
            });
        }
        if request.protocol_type.is_empty() || request.protocols.is_empty() {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        let mut groups = self.lock();
        if !groups.contains_key(&request.group_id) && groups.len() >= self.config.max_groups {
            return Err(GroupError::TooManyGroups {
                max: self.config.max_groups,
            });
        }
        let group = groups.entry(request.group_id.clone()).or_default();
        if !group.accepts_protocols(&request.protocol_type, &request.protocols) {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        let member_id = if request.member_id.is_empty() {
            let member_id = group.new_member_id(&request.client_id);
            if let Some(answered) =
                self.rejoin_static_follower(&request.group_id, group, &request, &member_id, now)
            {
                return Ok(answered);
            }
            if let Some(instance_id) = &request.group_instance_id {
                // A restarted static member (which left no LeaveGroup behind): its previous
                // incarnation is replaced at once, as in Kafka, rather than held until its
                // session expires. Kafka gives static members their id without the
                // MEMBER_ID_REQUIRED round trip too.
                group.remove_instance(instance_id);
            } else if request.require_known_member_id {
                group.pending_member_ids.insert(member_id.clone());
                return Err(GroupError::MemberIdRequired { member_id });
            }
            member_id
        } else if group.members.contains_key(&request.member_id)
            || group.pending_member_ids.remove(&request.member_id)
        {
            request.member_id.clone()
        } else {
            return Err(GroupError::UnknownMemberId);
        };
        if !group.members.contains_key(&member_id)
            && group.members.len() >= self.config.max_members_per_group
        {
            return Err(GroupError::GroupMaxSizeReached {
                max: self.config.max_members_per_group,
            });
        }
        let (answer, answered) = oneshot::channel();
        let member = group
            .members
            .entry(member_id.clone())
            .or_insert_with(|| Member::new(member_id, now));
        member.group_instance_id = request.group_instance_id;
        member.client_id = request.client_id;
        member.client_host = request.client_host;
        member.session_timeout = request.session_timeout;
        member.rebalance_timeout = request.rebalance_timeout;
        member.protocols = request.protocols;
        member.last_heartbeat = now;
        if let Some(previous) = member.join_waiter.replace(answer) {
            // A second join while the first waits: the first is superseded.
            let _ = previous.send(Err(GroupError::RebalanceInProgress));
        }
        group.protocol_type = Some(request.protocol_type);
        if !matches!(group.phase, Phase::PreparingRebalance { .. }) {
            group.prepare_rebalance(now, self.config.initial_rebalance_delay);
        }
        group.complete_if_ready(now, false);
        Ok(answered)
    }

    /// A restarted static member (KIP-345) of a stable group that is not its leader takes its
    /// previous incarnation's place and assignment without a rebalance, as in Kafka: the join
    /// is answered at once in the current generation (once the new member id is stored), and
    /// the member's sync returns the assignment. `None` when that does not apply (no such
    /// instance, a group not stable, the leader, or a member that does not support the
    /// group's protocol): the caller rebalances as for any join.
    fn rejoin_static_follower(
        &self,
        group_id: &str,
        group: &mut Group,
        request: &JoinRequest,
        member_id: &str,
        now: Instant,
    ) -> Option<oneshot::Receiver<Result<JoinResponse, GroupError>>> {
        let instance_id = request.group_instance_id.as_deref()?;
        let protocol = group.protocol.clone()?;
        let previous = group
            .members
            .values()
            .find(|member| member.group_instance_id.as_deref() == Some(instance_id))?;
        let is_leader = group.leader.as_deref() == Some(previous.member_id.as_str());
        let supports = request.protocols.iter().any(|(name, _)| *name == protocol);
        if !matches!(group.phase, Phase::Stable) || is_leader || !supports {
            return None;
        }
        let previous_id = previous.member_id.clone();
        let assignment = previous.assignment.clone();
        tracing::info!(%previous_id, %member_id, instance_id, "static member rejoined: previous assignment kept");
        group.remove_member(&previous_id);
        let mut member = Member::new(member_id.to_owned(), now);
        member.group_instance_id = request.group_instance_id.clone();
        member.client_id = request.client_id.clone();
        member.client_host = request.client_host.clone();
        member.session_timeout = request.session_timeout;
        member.rebalance_timeout = request.rebalance_timeout;
        member.protocols = request.protocols.clone();
        member.assignment = assignment;
        group.members.insert(member_id.to_owned(), member);
        let response = JoinResponse {
            generation_id: group.generation,
            protocol_type: group.protocol_type.clone().unwrap_or_default(),
            protocol_name: protocol,
            leader: group.leader.clone().unwrap_or_default(),
            member_id: member_id.to_owned(),
            members: Vec::new(),
        };
        let (answer, answered) = oneshot::channel();
        match self.store(group_id, group) {
            None => {
                let _ = answer.send(Ok(response));
            }
            Some(written) => {
                tokio::spawn(async move {
                    // A failed write is logged by the writer: after a restart the previous
                    // incarnation is restored and replaced again when the instance rejoins.
                    let _ = written.await;
                    let _ = answer.send(Ok(response));
                });
            }
        }
        Some(answered)
    }

    /// Syncs a member after its join: the leader's sync brings the assignment; every member's
    /// sync resolves to its part once the leader's has arrived.
    pub async fn sync(&self, request: SyncRequest) -> Result<Bytes, GroupError> {
        let mut stable = None;
        let answered = {
            let mut groups = self.lock();
            let group = groups
                .get_mut(&request.group_id)
                .ok_or(GroupError::UnknownMemberId)?;
            group.check_member(&request.member_id, request.generation_id)?;
            match group.phase {
                Phase::PreparingRebalance { .. } => return Err(GroupError::RebalanceInProgress),
                Phase::Stable => {
                    return Ok(group.members[&request.member_id].assignment.clone());
                }
                Phase::Empty => return Err(GroupError::UnknownMemberId),
                Phase::CompletingRebalance => {}
            }
            let (answer, answered) = oneshot::channel();
            if let Some(member) = group.members.get_mut(&request.member_id) {
                member.sync_waiter = Some(answer);
            }
            if group.leader.as_deref() == Some(request.member_id.as_str()) {
                group.store_assignment(request.assignments);
                match self.store_completed(&request.group_id, group) {
                    Some(written) => {
                        self.finish_sync_once_written(&request.group_id, group.generation, written)
                    }
                    None => {
                        group.answer_syncs();
                        if self.persists() {
                            stable = Some((request.group_id.clone(), GroupSnapshot::of(group)));
                        }
                    }
                }
            }
            answered
        };
        self.persist(stable.into_iter().collect());
        answered
            .await
            .unwrap_or(Err(GroupError::RebalanceInProgress))
    }

    /// Answers the syncs of `group_id`'s generation `generation` once its snapshot is written
    /// (a task, so that the answer does not depend on the leader's request staying alive).
    /// A failed write answers them [`GroupError::StoreFailed`] and the group rebalances: an
    /// assignment the store does not hold is never handed out.
    fn finish_sync_once_written(
        &self,
        group_id: &str,
        generation: i32,
        written: durable::WriteDone,
    ) {
        let this = self.this.clone();
        let group_id = group_id.to_owned();
        tokio::spawn(async move {
            let result = written
                .await
                .unwrap_or_else(|_| Err("the group state writer stopped".into()));
            let Some(coordinator) = this.upgrade() else {
                return;
            };
            let mut groups = coordinator.lock();
            let Some(group) = groups.get_mut(&group_id) else {
                return;
            };
            if group.generation != generation || !matches!(group.phase, Phase::CompletingRebalance)
            {
                // Rebalancing again already (a member joined or left): its syncs were answered.
                return;
            }
            match result {
                Ok(()) => group.answer_syncs(),
                Err(reason) => {
                    group.fail_syncs(&GroupError::StoreFailed { reason });
                    group.prepare_rebalance(Instant::now(), Duration::ZERO);
                }
            }
        });
    }

    /// Records a member's heartbeat. Answers [`GroupError::RebalanceInProgress`] while the
    /// group rebalances: the member must join again.
    pub fn heartbeat(
        &self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
    ) -> Result<(), GroupError> {
        let mut groups = self.lock();
        let group = groups
            .get_mut(group_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if !group.members.contains_key(member_id) {
            return Err(GroupError::UnknownMemberId);
        }
        if let Some(member) = group.members.get_mut(member_id) {
            member.last_heartbeat = Instant::now();
        }
        if matches!(group.phase, Phase::PreparingRebalance { .. }) {
            return Err(GroupError::RebalanceInProgress);
        }
        group.check_member(member_id, generation_id)
    }

    /// Removes members from a group at once (a consumer closing); the rest rebalance. With a
    /// durable store, answers once the change is written (a failed write is logged: the
    /// members are gone here, and after a restart the ones left behind in the store expire by
    /// their session timeout).
    pub async fn leave(
        &self,
        group_id: &str,
        member_ids: &[String],
    ) -> Vec<Result<(), GroupError>> {
        let (results, written) = self.leave_now(group_id, member_ids);
        if let Some(written) = written {
            let _ = written.await;
        }
        results
    }

    fn leave_now(
        &self,
        group_id: &str,
        member_ids: &[String],
    ) -> (Vec<Result<(), GroupError>>, Option<durable::WriteDone>) {
        let mut groups = self.lock();
        let Some(group) = groups.get_mut(group_id) else {
            let results = member_ids
                .iter()
                .map(|_| Err(GroupError::UnknownMemberId))
                .collect();
            return (results, None);
        };
        let was_empty = matches!(group.phase, Phase::Empty);
        let results: Vec<Result<(), GroupError>> = member_ids
            .iter()
            .map(|member_id| match group.remove_member(member_id) {
                true => Ok(()),
                false => Err(GroupError::UnknownMemberId),
            })
            .collect();
        group.after_membership_change(Instant::now(), self.config.initial_rebalance_delay);
        let written = match results.iter().any(Result::is_ok) && !was_empty {
            true => self.store(group_id, group),
            false => None,
        };
        let emptied = (!was_empty && matches!(group.phase, Phase::Empty) && self.persists())
            .then(|| (group_id.to_owned(), GroupSnapshot::of(group)));
        if group.is_forgettable() {
            groups.remove(group_id);
        }
        drop(groups);
        self.persist(emptied.into_iter().collect());
        (results, written)
    }

    /// Whether an offset commit from `member_id` in `generation_id` may be stored: a member of
    /// the current generation, or a consumer outside any group (`generation_id` < 0, empty
    /// member id) committing for a group without members.
    ///
    /// As in Kafka, a member's commit is accepted while the group prepares a rebalance (a
    /// consumer commits what it processed in its revoke callback, or auto-commits, before it
    /// rejoins: refusing it makes the next owner read those records again) and refused only
    /// while the group completes one (the new generation's assignment is not known yet).
    pub fn check_commit(
        &self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
    ) -> Result<(), GroupError> {
        validate_group_id(group_id)?;
        let groups = self.lock();
        let group = groups.get(group_id);
        let has_members = group.is_some_and(|group| !group.members.is_empty());
        if generation_id < 0 && member_id.is_empty() {
            return match has_members {
                false => Ok(()),
                true => Err(GroupError::IllegalGeneration {
                    got: generation_id,
                    current: group.map_or(0, |group| group.generation),
                }),
            };
        }
        let group = group.ok_or(GroupError::UnknownMemberId)?;
        group.check_member(member_id, generation_id)?;
        if matches!(group.phase, Phase::CompletingRebalance) {
            return Err(GroupError::RebalanceInProgress);
        }
        Ok(())
    }

    /// Checks every deadline: rebalance timeouts and initial delays, session expiries.
    fn tick(&self, now: Instant) {
        let persists = self.persists();
        let mut emptied = Vec::new();
        let mut groups = self.lock();
        for (group_id, group) in groups.iter_mut() {
            let was_empty = matches!(group.phase, Phase::Empty);
            let members = group.members.len();
            group.tick(now, self.config.initial_rebalance_delay);
            if !was_empty && group.members.len() < members {
                // Members expired: the store must not bring them back after a restart. Nobody
                // waits for this write.
                drop(self.store(group_id, group));
            }
            if persists && !was_empty && matches!(group.phase, Phase::Empty) {
                emptied.push((group_id.clone(), GroupSnapshot::of(group)));
            }
        }
        groups.retain(|_, group| !group.is_forgettable());
        drop(groups);
        self.persist(emptied);
    }
}

async fn tick_until_dropped(coordinator: Weak<GroupCoordinator>) {
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(coordinator) = coordinator.upgrade() else {
            return;
        };
        coordinator.tick(Instant::now());
    }
}

fn validate_group_id(group_id: &str) -> Result<(), GroupError> {
    if group_id.is_empty() || group_id.len() > MAX_GROUP_ID_BYTES {
        return Err(GroupError::InvalidGroupId {
            max: MAX_GROUP_ID_BYTES,
        });
    }
    Ok(())
}
