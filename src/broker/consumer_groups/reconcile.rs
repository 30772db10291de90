//! Moving one member from what it owns towards its target, KIP-848's reconciliation (Kafka's
//! `CurrentAssignmentBuilder`), one heartbeat at a time:
//!
//! 1. A member still revoking stays where it is until a heartbeat's owned partitions no longer
//!    hold any partition it was asked to revoke (or its rebalance timeout removes it).
//! 2. A member that owns partitions outside its target is told to revoke them: its assignment
//!    shrinks to what it keeps, its epoch does not move, and the revoked partitions are given
//!    to nobody until it confirms.
//! 3. Otherwise it moves to the assignment epoch and gets its target, except the partitions
//!    another member still owns or revokes (*unreleased*): those come on a later heartbeat,
//!    once their previous owner let them go.
//!
//! So a partition is never assigned to two members at once.

use std::time::Instant;

use super::assignment::{self, Assignment};
use super::group::ConsumerGroup;

/// Reconciles `member_id` (a member of `group`) given the partitions its heartbeat says it
/// owns (`None`: unchanged since its last heartbeat).
pub fn reconcile(
    group: &mut ConsumerGroup,
    member_id: &str,
    owned: Option<&Assignment>,
    now: Instant,
) {
    move_towards_target(group, member_id, owned, now);
    if let Some(member) = group.members.get_mut(member_id) {
        member.stamp_assignment_epochs();
    }
}

fn move_towards_target(
    group: &mut ConsumerGroup,
    member_id: &str,
    owned: Option<&Assignment>,
    now: Instant,
) {
    let target = group.target_of(member_id);
    let assignment_epoch = group.assignment_epoch;
    let others = group.owned_by_others(member_id);
    let Some(member) = group.members.get_mut(member_id) else {
        return;
    };
    if !member.revoking.is_empty() {
        match owned {
            Some(owned) if !assignment::intersects(owned, &member.revoking) => {
                member.revoking.clear();
                member.revoke_deadline = None;
            }
            _ => return,
        }
    }
    if member.member_epoch == assignment_epoch && member.assigned == target {
        return;
    }
    let keep = assignment::intersection(&member.assigned, &target);
    let revoke = assignment::difference(&member.assigned, &target);
    if !revoke.is_empty() {
        member.assigned = keep;
        member.revoking = revoke;
        member.revoke_deadline = Some(now + member.rebalance_timeout);
        return;
    }
    if member.member_epoch != assignment_epoch {
        member.previous_epoch = member.member_epoch;
        member.member_epoch = assignment_epoch;
    }
    let mut assigned = keep;
    for (topic, partition) in assignment::pairs(&target) {
        if !assignment::holds(&others, topic, partition) {
            assignment::insert(&mut assigned, topic, partition);
        }
    }
    member.assigned = assigned;
}
