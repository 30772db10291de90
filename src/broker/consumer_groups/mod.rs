//! The coordinator of KIP-848 consumer-protocol groups (Kafka's `group.protocol=consumer`):
//! membership, epochs, server-side assignment and reconciliation, protocol-neutral (the Kafka
//! listener's ConsumerGroupHeartbeat and ConsumerGroupDescribe handlers translate).
//!
//! Unlike the classic protocol ([`super::coordinator`]), there is no join barrier and no
//! leader member: every member heartbeats on its own ([`heartbeat::heartbeat`]), the
//! coordinator computes every member's target assignment with a server-side assignor
//! ([`assignor`]) whenever the group epoch moves, and moves each member towards its target
//! without ever giving a partition to two members ([`reconcile`]).
//!
//! Membership lives in memory only. After a broker restart, or on a cluster once the group's
//! offsets partition moved to another broker, members get `UNKNOWN_MEMBER_ID` and join again
//! with epoch 0; committed offsets are in the same store as classic groups' and survive.
//! Deadlines (sessions, revocations) are checked whenever the group is touched, which its
//! live members do every heartbeat interval, so no ticker is needed.

pub mod assignment;
pub mod assignor;
mod error;
mod group;
pub mod heartbeat;
mod reconcile;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::domain::{ConfigError, Quantity};

pub use assignment::Assignment;
pub use assignor::Assignor;
pub use error::ConsumerGroupError;
use group::ConsumerGroup;
pub use heartbeat::{HeartbeatAnswer, HeartbeatRequest, LEAVE_EPOCH, STATIC_LEAVE_EPOCH};

/// Kafka's `group.consumer.heartbeat.interval.ms` default.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
/// Kafka's `group.consumer.session.timeout.ms` default.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(45);
/// The rebalance timeout of a member that did not send one (Kafka's `max.poll.interval.ms`
/// default, which clients send as theirs).
pub const DEFAULT_REBALANCE_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest rebalance timeout a member gets, whatever it asks for: a member that never
/// confirms a revocation holds those partitions from everyone this long at most.
pub const DEFAULT_MAX_REBALANCE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Default most consumer-protocol groups with members at once.
pub const DEFAULT_MAX_GROUPS: usize = 10_000;
/// Default most members of one group (Kafka's `group.consumer.max.size` is unbounded by
/// default; a bound keeps one group from holding the broker's memory).
pub const DEFAULT_MAX_MEMBERS_PER_GROUP: usize = 1000;
/// Default most topics one member subscribes to.
pub const DEFAULT_MAX_SUBSCRIBED_TOPICS: usize = 10_000;
/// Longest member id, instance id or rack id, in bytes (clients send a 22-character UUID as
/// member id).
pub const MAX_MEMBER_ID_BYTES: usize = 255;
/// Longest group id, in bytes (the same for classic groups: `coordinator` uses this one).
pub const MAX_GROUP_ID_BYTES: usize = 255;

/// Timings and limits of the consumer-protocol coordinator.
#[derive(Debug, Clone)]
pub struct ConsumerGroupConfig {
    /// How often members heartbeat (told in every answer).
    pub heartbeat_interval: Duration,
    /// A member without a heartbeat for this long is removed.
    pub session_timeout: Duration,
    /// The rebalance timeout of a member that sent none.
    pub default_rebalance_timeout: Duration,
    /// The longest rebalance timeout a member gets.
    pub max_rebalance_timeout: Duration,
    /// Most groups with members at once.
    pub max_groups: usize,
    /// Most members of one group.
    pub max_members_per_group: usize,
    /// Most topics one member subscribes to.
    pub max_subscribed_topics: usize,
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            default_rebalance_timeout: DEFAULT_REBALANCE_TIMEOUT,
            max_rebalance_timeout: DEFAULT_MAX_REBALANCE_TIMEOUT,
            max_groups: DEFAULT_MAX_GROUPS,
            max_members_per_group: DEFAULT_MAX_MEMBERS_PER_GROUP,
            max_subscribed_topics: DEFAULT_MAX_SUBSCRIBED_TOPICS,
        }
    }
}

impl ConsumerGroupConfig {
    /// Checks the limits: a heartbeat interval shorter than the session, positive bounds.
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_positive(
            "consumer_heartbeat_interval",
            Quantity::duration(self.heartbeat_interval),
        )?;
        ConfigError::check_at_most(
            "consumer_heartbeat_interval",
            Quantity::duration(self.heartbeat_interval),
            "consumer_session_timeout",
            Quantity::duration(self.session_timeout),
        )?;
        ConfigError::check_positive("consumer_max_groups", Quantity::count(self.max_groups))?;
        ConfigError::check_positive(
            "consumer_max_members_per_group",
            Quantity::count(self.max_members_per_group),
        )?;
        ConfigError::check_positive(
            "consumer_max_subscribed_topics",
            Quantity::count(self.max_subscribed_topics),
        )
    }
}

/// Where a consumer-protocol group is, named as Kafka names its states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConsumerGroupState {
    /// No members.
    Empty,
    /// Some member has not reached its target yet.
    Reconciling,
    /// Every member has its target.
    Stable,
}

impl ConsumerGroupState {
    /// The state's name as Kafka's admin APIs spell it.
    pub fn kafka_name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::Reconciling => "Reconciling",
            Self::Stable => "Stable",
        }
    }
}

/// One member, as an admin sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerMemberDescription {
    /// The member's id.
    pub member_id: String,
    /// Its static instance id.
    pub instance_id: Option<String>,
    /// Its rack.
    pub rack_id: Option<String>,
    /// Its epoch.
    pub member_epoch: i32,
    /// Its client id.
    pub client_id: String,
    /// Its address.
    pub client_host: String,
    /// The topics it reads.
    pub subscribed_topics: Vec<String>,
    /// What it owns.
    pub assignment: Assignment,
    /// What it will own once reconciled.
    pub target: Assignment,
}

/// A group, as an admin sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupDescription {
    /// Its state.
    pub state: ConsumerGroupState,
    /// Its group epoch.
    pub group_epoch: i32,
    /// The epoch of its target assignment.
    pub assignment_epoch: i32,
    /// The assignor of its target.
    pub assignor: Assignor,
    /// Its members, by member id.
    pub members: Vec<ConsumerMemberDescription>,
}

/// The consumer-protocol coordinator of one broker: every group behind one lock, never held
/// across an `await` (nothing here waits).
#[derive(Debug)]
pub struct ConsumerGroups {
    config: ConsumerGroupConfig,
    groups: Mutex<HashMap<String, ConsumerGroup>>,
}

impl ConsumerGroups {
    /// A coordinator without groups.
    pub fn new(config: ConsumerGroupConfig) -> Self {
        Self {
            config,
            groups: Mutex::new(HashMap::new()),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &ConsumerGroupConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, ConsumerGroup>> {
        // Every critical section leaves the groups consistent before it can panic.
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A member's heartbeat (join, stay, leave). `topics` holds every topic's partition count,
    /// as the broker knows them now.
    pub fn heartbeat(
        &self,
        request: HeartbeatRequest,
        topics: &BTreeMap<String, u32>,
        now: Instant,
    ) -> Result<HeartbeatAnswer, ConsumerGroupError> {
        validate_group_id(&request.group_id)?;
        let assignor = heartbeat::validate(&request, &self.config)?;
        let mut groups = self.lock();
        let group_id = request.group_id.clone();
        if !groups.contains_key(&group_id) {
            if request.member_epoch != 0 {
                return Err(ConsumerGroupError::UnknownMemberId);
            }
            if groups.len() >= self.config.max_groups {
                return Err(ConsumerGroupError::TooManyGroups {
                    max: self.config.max_groups,
                });
            }
        }
        let group = groups.entry(group_id.clone()).or_default();
        let answer = heartbeat::heartbeat(group, request, assignor, topics, &self.config, now);
        if group.members.is_empty() {
            groups.remove(&group_id);
        }
        answer
    }

    /// Whether `group_id` is a consumer-protocol group with members (a classic member may not
    /// join it).
    pub fn has_members(&self, group_id: &str) -> bool {
        self.lock()
            .get(group_id)
            .is_some_and(|group| !group.members.is_empty())
    }

    /// Checks an offset commit or fetch of `member_id` in `member_epoch`. `None` when the group
    /// is not a consumer-protocol group with members (the classic rules apply).
    ///
    /// A commit outside the group (empty member id, negative epoch) is refused while it has
    /// members (`UNKNOWN_MEMBER_ID`, as Kafka); a newer epoch than the member's is fenced; an
    /// older one is stale (the member heartbeats and retries), except, for a commit
    /// (`committing` names its partitions), when the member has held every one of them since
    /// that epoch: Kafka's KIP-1251 assignment epochs. Without them a periodic commit that
    /// crosses the heartbeat moving the member's epoch fails although the member owns all it
    /// commits. A fetch (`committing` is `None`) must carry the current epoch.
    pub fn check_offsets(
        &self,
        group_id: &str,
        member_id: &str,
        member_epoch: i32,
        committing: Option<&[(&str, u32)]>,
        now: Instant,
    ) -> Option<Result<(), ConsumerGroupError>> {
        let mut groups = self.lock();
        let group = groups.get_mut(group_id)?;
        group.expire(self.config.session_timeout, now);
        if group.members.is_empty() {
            groups.remove(group_id);
            return None;
        }
        let Some(member) = group.members.get(member_id) else {
            return Some(Err(ConsumerGroupError::UnknownMemberId));
        };
        let current = member.member_epoch;
        Some(match member_epoch {
            got if got > current => Err(ConsumerGroupError::FencedMemberEpoch { got, current }),
            got if got < current => match committing {
                Some(partitions)
                    if partitions
                        .iter()
                        .all(|(topic, partition)| member.held_since(got, topic, *partition)) =>
                {
                    Ok(())
                }
                _ => Err(ConsumerGroupError::StaleMemberEpoch { got, current }),
            },
            _ => Ok(()),
        })
    }

    /// The group's description, `None` if it has no members.
    pub fn describe(&self, group_id: &str, now: Instant) -> Option<ConsumerGroupDescription> {
        let mut groups = self.lock();
        let group = groups.get_mut(group_id)?;
        group.expire(self.config.session_timeout, now);
        if group.members.is_empty() {
            groups.remove(group_id);
            return None;
        }
        let members = group
            .members
            .values()
            .map(|member| ConsumerMemberDescription {
                member_id: member.member_id.clone(),
                instance_id: member.instance_id.clone(),
                rack_id: member.rack_id.clone(),
                member_epoch: member.member_epoch,
                client_id: member.client_id.clone(),
                client_host: member.client_host.clone(),
                subscribed_topics: member.subscribed_topics.iter().cloned().collect(),
                assignment: member.assigned.clone(),
                target: group.target_of(&member.member_id),
            })
            .collect();
        Some(ConsumerGroupDescription {
            state: match group.is_stable() {
                true => ConsumerGroupState::Stable,
                false => ConsumerGroupState::Reconciling,
            },
            group_epoch: group.group_epoch,
            assignment_epoch: group.assignment_epoch,
            assignor: group.assignor.unwrap_or(Assignor::DEFAULT),
            members,
        })
    }

    /// Every group with members and its state, sorted by group id.
    pub fn list(&self, now: Instant) -> Vec<(String, ConsumerGroupState)> {
        let mut groups = self.lock();
        for group in groups.values_mut() {
            group.expire(self.config.session_timeout, now);
        }
        groups.retain(|_, group| !group.members.is_empty());
        let mut listed: Vec<(String, ConsumerGroupState)> = groups
            .iter()
            .map(|(group_id, group)| {
                let state = match group.is_stable() {
                    true => ConsumerGroupState::Stable,
                    false => ConsumerGroupState::Reconciling,
                };
                (group_id.clone(), state)
            })
            .collect();
        listed.sort();
        listed
    }
}

fn validate_group_id(group_id: &str) -> Result<(), ConsumerGroupError> {
    if group_id.is_empty() || group_id.len() > MAX_GROUP_ID_BYTES {
        return Err(ConsumerGroupError::InvalidGroupId {
            max: MAX_GROUP_ID_BYTES,
        });
    }
    Ok(())
}
