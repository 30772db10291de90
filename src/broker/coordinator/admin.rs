//! What an admin may do to a group besides looking at it: delete it once it has no members
//! (Kafka's DeleteGroups; the committed offsets are deleted by the broker service).

use super::GroupCoordinator;

/// Why a group could not be removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupHasMembers {
    /// How many members it has.
    pub members: usize,
}

impl GroupCoordinator {
    /// Removes group `group_id` if it has no members: `Ok(true)` if the coordinator knew it,
    /// `Ok(false)` if it did not (it may still have committed offsets), `Err` with the member
    /// count if it has members (Kafka's `NON_EMPTY_GROUP`). Member ids handed out but never
    /// joined with are forgotten with it (their join is then answered as a new member's).
    pub fn remove_empty_group(&self, group_id: &str) -> Result<bool, GroupHasMembers> {
        let mut groups = self.lock();
        match groups.get(group_id) {
            None => Ok(false),
            Some(group) if !group.members.is_empty() => Err(GroupHasMembers {
                members: group.members.len(),
            }),
            Some(_) => {
                groups.remove(group_id);
                Ok(true)
            }
        }
    }
}

/// What the members of a group subscribed with, for an admin deciding which committed offsets
/// the group may lose (Kafka's OffsetDelete refuses the topics an active consumer group reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSubscriptions {
    /// The members' protocol type (`consumer` for Kafka consumers); `None` before any joined.
    pub protocol_type: Option<String>,
    /// Each member's subscription metadata: for the group's chosen protocol, or before one is
    /// chosen the member's first (most preferred) one. Empty when the group has no members.
    pub metadata: Vec<bytes::Bytes>,
}

impl GroupCoordinator {
    /// The subscriptions of group `group_id`'s members, or `None` if the coordinator does not
    /// know the group.
    pub fn subscriptions(&self, group_id: &str) -> Option<GroupSubscriptions> {
        let groups = self.lock();
        let group = groups.get(group_id)?;
        let metadata = group
            .members
            .values()
            .map(|member| match &group.protocol {
                Some(protocol) => member.metadata_for(protocol),
                None => member
                    .protocols
                    .first()
                    .map(|(_, metadata)| metadata.clone())
                    .unwrap_or_default(),
            })
            .collect();
        Some(GroupSubscriptions {
            protocol_type: group.protocol_type.clone(),
            metadata,
        })
    }
}
