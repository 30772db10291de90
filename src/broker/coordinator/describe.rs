//! Read-only views of the coordinator's groups, for the admin APIs (Kafka's DescribeGroups and
//! ListGroups): what state a group is in, which protocol it chose and who its members are.
//!
//! These take the coordinator's lock for a copy and return owned values, so an admin request
//! never holds up joins and heartbeats for longer than the copy takes. Only groups with members
//! (or member ids handed out) live in the coordinator; a group that only has committed offsets
//! is the broker's to report (as [`GroupState::Empty`]).

use bytes::Bytes;

use super::group::{Group, Phase};
use super::GroupCoordinator;

/// Where a group is in its rebalance cycle, named as Kafka names group states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// No members (a group known only by its committed offsets, or whose members all left).
    Empty,
    /// Waiting for the members to (re)join.
    PreparingRebalance,
    /// Every member joined; waiting for the leader's assignment.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
    /// Not known at all: no members and no committed offsets.
    Dead,
}

impl GroupState {
    /// Every state, in the order of the rebalance cycle.
    pub const ALL: [GroupState; 5] = [
        Self::Empty,
        Self::PreparingRebalance,
        Self::CompletingRebalance,
        Self::Stable,
        Self::Dead,
    ];

    /// The state's name as Kafka's admin APIs spell it (`Stable`, `PreparingRebalance`, ...).
    pub fn kafka_name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::PreparingRebalance => "PreparingRebalance",
            Self::CompletingRebalance => "CompletingRebalance",
            Self::Stable => "Stable",
            Self::Dead => "Dead",
        }
    }
}

/// One member of a group, as an admin sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// The member's id.
    pub member_id: String,
    /// Its static instance id, if any.
    pub group_instance_id: Option<String>,
    /// The client id it joined with.
    pub client_id: String,
    /// The address it joined from (Kafka's form: `/` then the IP address).
    pub client_host: String,
    /// Its subscription metadata for the group's chosen protocol (empty unless the group is
    /// stable, as in Kafka).
    pub metadata: Bytes,
    /// The assignment the leader gave it (empty unless the group is stable).
    pub assignment: Bytes,
}

/// One group with members, as an admin sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// The group's id.
    pub group_id: String,
    /// Its state.
    pub state: GroupState,
    /// Its generation (0 before the first rebalance); Kafka's DescribeGroups does not carry
    /// it, but an operator (and a test) can tell a rebalance happened by it.
    pub generation: i32,
    /// The protocol type its members use (e.g. `consumer`); empty if none joined yet.
    pub protocol_type: String,
    /// The protocol (assignor) chosen; empty unless the group is stable, as in Kafka.
    pub protocol: String,
    /// Its members.
    pub members: Vec<MemberDescription>,
}

/// One group in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// The group's id.
    pub group_id: String,
    /// Its state.
    pub state: GroupState,
    /// The protocol type its members use; empty if none joined yet.
    pub protocol_type: String,
}

impl GroupCoordinator {
    /// The group as it is now, or `None` if the coordinator does not know it (no members and no
    /// member ids handed out).
    pub fn describe(&self, group_id: &str) -> Option<GroupDescription> {
        let groups = self.lock();
        groups.get(group_id).map(|group| describe(group_id, group))
    }

    /// Every group the coordinator knows (those with members or member ids handed out), sorted
    /// by id.
    pub fn list(&self) -> Vec<GroupListing> {
        let groups = self.lock();
        let mut listings: Vec<GroupListing> = groups
            .iter()
            .map(|(group_id, group)| GroupListing {
                group_id: group_id.clone(),
                state: state_of(group),
                protocol_type: group.protocol_type.clone().unwrap_or_default(),
            })
            .collect();
        listings.sort_by(|left, right| left.group_id.cmp(&right.group_id));
        listings
    }
}

fn state_of(group: &Group) -> GroupState {
    match group.phase {
        Phase::Empty => GroupState::Empty,
        Phase::PreparingRebalance { .. } => GroupState::PreparingRebalance,
        Phase::CompletingRebalance => GroupState::CompletingRebalance,
        Phase::Stable => GroupState::Stable,
    }
}

fn describe(group_id: &str, group: &Group) -> GroupDescription {
    let state = state_of(group);
    // As Kafka's coordinator: protocol, metadata and assignments only once the group is stable
    // (before that they are about to change).
    let stable = state == GroupState::Stable;
    let protocol = match stable {
        true => group.protocol.clone().unwrap_or_default(),
        false => String::new(),
    };
    let members = group
        .members
        .values()
        .map(|member| MemberDescription {
            member_id: member.member_id.clone(),
            group_instance_id: member.group_instance_id.clone(),
            client_id: member.client_id.clone(),
            client_host: member.client_host.clone(),
            metadata: match stable {
                true => member.metadata_for(&protocol),
                false => Bytes::new(),
            },
            assignment: match stable {
                true => member.assignment.clone(),
                false => Bytes::new(),
            },
        })
        .collect();
    GroupDescription {
        group_id: group_id.to_string(),
        state,
        generation: group.generation,
        protocol_type: group.protocol_type.clone().unwrap_or_default(),
        protocol,
        members,
    }
}
