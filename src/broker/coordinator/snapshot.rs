//! A group's membership as it is persisted in a cluster (`crate::broker::offsets_topic`): what a
//! coordinator that takes a group over needs so that a stable group stays stable.
//!
//! Kafka writes a group's metadata (generation, protocol, leader, every member with its
//! subscription and assignment) to `__consumer_offsets` each time a generation completes; a new
//! coordinator reads it back and answers the members' heartbeats in that generation as if
//! nothing had happened. We do the same: a snapshot is taken when the leader's assignment
//! arrives (the group becomes stable) and when the group empties, handed to the coordinator's
//! [`GroupPersistence`] (which appends it to the group's offsets partition), and restored with
//! [`GroupCoordinator::restore`] by the next coordinator. Restored members get a fresh session
//! (their last heartbeat is the restore): a member that really is gone expires one session
//! timeout later, as it would have on the old coordinator.
//!
//! A snapshot that never reached the log (the coordinator died between the assignment and the
//! append) costs a rebalance, never a silent reset: the members' next heartbeat answers
//! `UNKNOWN_MEMBER_ID` and they join again.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::group::{Group, Member, Phase};
use super::{GroupCoordinator, GroupError};

/// Called with a group's snapshot whenever it should be persisted (see the module docs). Runs
/// under no lock of the coordinator's; must not block.
pub type GroupPersistence = Arc<dyn Fn(String, GroupSnapshot) + Send + Sync>;

/// A group's membership at one generation (no members: the group emptied).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSnapshot {
    /// The generation.
    pub generation: i32,
    /// E.g. `consumer`.
    pub protocol_type: Option<String>,
    /// The protocol (assignor) chosen for the generation.
    pub protocol: Option<String>,
    /// The leader's member id.
    pub leader: Option<String>,
    /// Every member of the generation.
    pub members: Vec<MemberSnapshot>,
    /// Members left or expired after the generation completed: the group was rebalancing, and
    /// a restored group starts a rebalance (its members rejoin) instead of being stable.
    /// Absent (false) in snapshots written before the field existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rebalance: bool,
}

/// One member of a [`GroupSnapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberSnapshot {
    /// The member id.
    pub member_id: String,
    /// Its static instance id, if any.
    pub group_instance_id: Option<String>,
    /// The client id it joined with.
    pub client_id: String,
    /// The address it joined from.
    pub client_host: String,
    /// Its session timeout, in milliseconds.
    pub session_timeout_ms: u64,
    /// Its rebalance timeout, in milliseconds.
    pub rebalance_timeout_ms: u64,
    /// Its metadata for the chosen protocol (base64).
    pub subscription: String,
    /// Its assignment (base64).
    pub assignment: String,
}

fn encode(bytes: &Bytes) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn decode(text: &str) -> Bytes {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map(Bytes::from)
        .unwrap_or_default()
}

impl GroupSnapshot {
    /// The snapshot of `group` now.
    pub(super) fn of(group: &Group) -> Self {
        let protocol = group.protocol.clone();
        let members = match group.phase {
            Phase::Empty => Vec::new(),
            _ => group
                .members
                .values()
                .map(|member| MemberSnapshot {
                    member_id: member.member_id.clone(),
                    group_instance_id: member.group_instance_id.clone(),
                    client_id: member.client_id.clone(),
                    client_host: member.client_host.clone(),
                    session_timeout_ms: member.session_timeout.as_millis() as u64,
                    rebalance_timeout_ms: member.rebalance_timeout.as_millis() as u64,
                    subscription: encode(
                        &member.metadata_for(protocol.as_deref().unwrap_or_default()),
                    ),
                    assignment: encode(&member.assignment),
                })
                .collect(),
        };
        Self {
            generation: group.generation,
            protocol_type: group.protocol_type.clone(),
            protocol,
            leader: group.leader.clone(),
            members,
            // Between generations (members left or expired, or a rebalance completed but
            // its assignment is not known yet): a group restored from this must rebalance.
            rebalance: matches!(
                group.phase,
                Phase::PreparingRebalance { .. } | Phase::CompletingRebalance
            ),
        }
    }

    /// The snapshot of `group` whose leader's assignment was just stored: the generation is
    /// complete (the group becomes stable once this is written).
    pub(super) fn of_completed(group: &Group) -> Self {
        Self {
            rebalance: false,
            ..Self::of(group)
        }
    }

    /// The group this snapshot describes, stable in its generation, every member's session
    /// starting `now`.
    fn restore(&self, now: Instant) -> Group {
        let protocol = self.protocol.clone().unwrap_or_default();
        let mut group = Group::default();
        group.phase = Phase::Stable;
        group.generation = self.generation;
        group.protocol_type = self.protocol_type.clone();
        group.protocol = self.protocol.clone();
        group.leader = self.leader.clone();
        for saved in &self.members {
            let mut member = Member::new(saved.member_id.clone(), now);
            member.group_instance_id = saved.group_instance_id.clone();
            member.client_id = saved.client_id.clone();
            member.client_host = saved.client_host.clone();
            member.session_timeout = Duration::from_millis(saved.session_timeout_ms);
            member.rebalance_timeout = Duration::from_millis(saved.rebalance_timeout_ms);
            member.protocols = vec![(protocol.clone(), decode(&saved.subscription))];
            member.assignment = decode(&saved.assignment);
            group.members.insert(saved.member_id.clone(), member);
        }
        if self.rebalance {
            // No initial delay: the group is not empty.
            group.prepare_rebalance(now, Duration::ZERO);
        }
        group
    }
}

impl GroupCoordinator {
    /// Installs `snapshot` as group `group_id` (a coordinator taking the group over), unless
    /// this coordinator already holds the group in that generation or a later one. A snapshot
    /// without members removes the group.
    pub fn restore(&self, group_id: &str, snapshot: &GroupSnapshot) {
        let mut groups = self.lock();
        if groups
            .get(group_id)
            .is_some_and(|current| current.generation >= snapshot.generation)
        {
            return;
        }
        if snapshot.members.is_empty() {
            groups.remove(group_id);
            return;
        }
        groups.insert(group_id.to_owned(), snapshot.restore(Instant::now()));
    }

    /// Forgets every group `is_moved` names (their coordinator is now another broker): their
    /// pending joins and syncs are answered `NOT_COORDINATOR`, so the members look for the new
    /// one.
    pub fn forget_groups(&self, is_moved: impl Fn(&str) -> bool) {
        let mut groups = self.lock();
        groups.retain(|group_id, group| {
            if !is_moved(group_id) {
                return true;
            }
            for member in group.members.values_mut() {
                if let Some(waiter) = member.join_waiter.take() {
                    let _ = waiter.send(Err(GroupError::NotCoordinator));
                }
                if let Some(waiter) = member.sync_waiter.take() {
                    let _ = waiter.send(Err(GroupError::NotCoordinator));
                }
            }
            false
        });
    }
}
