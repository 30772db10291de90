//! One consumer-protocol group's state: its epochs, its members, and the target assignment
//! the assignor computed for the current group epoch.
//!
//! Two epochs, as in KIP-848: the **group epoch** moves whenever what the assignment depends
//! on changes (a member joins, leaves, expires or changes its subscription; a subscribed
//! topic's partition count changes); the **assignment epoch** is the group epoch the target
//! was computed for. Each member has its own **member epoch**: the assignment epoch it has
//! reconciled to (see [`super::reconcile`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::assignment::{self, Assignment};
use super::assignor::Assignor;

/// One member of a consumer-protocol group.
#[derive(Debug, Clone)]
pub struct Member {
    /// The member's id (the client generates it from ConsumerGroupHeartbeat v1).
    pub member_id: String,
    /// Its static instance id (`group.instance.id`), if any.
    pub instance_id: Option<String>,
    /// Its rack, if it said.
    pub rack_id: Option<String>,
    /// The client id it joined with.
    pub client_id: String,
    /// The address it connects from (Kafka's form: `/` then the IP address).
    pub client_host: String,
    /// The assignment epoch it reconciled to (0 before its first assignment).
    pub member_epoch: i32,
    /// Its epoch before the last move: a heartbeat whose answer was lost still carries it.
    pub previous_epoch: i32,
    /// The topics it reads.
    pub subscribed_topics: BTreeSet<String>,
    /// The assignor it asked for, if any.
    pub server_assignor: Option<Assignor>,
    /// How long it may take to revoke partitions before it is removed.
    pub rebalance_timeout: Duration,
    /// What it has been told it owns.
    pub assigned: Assignment,
    /// What it has been told to give up and has not confirmed yet: given to nobody meanwhile.
    pub revoking: Assignment,
    /// When `revoking` must be confirmed by.
    pub revoke_deadline: Option<Instant>,
    /// The member epoch at which it was given each partition it holds (in `assigned` or
    /// `revoking`), KIP-1251: a commit carrying an older member epoch is still the member's
    /// own for a partition it has held since that epoch (its heartbeat moved the epoch while
    /// the commit was in flight), and stale for any other.
    pub assigned_at: BTreeMap<(String, u32), i32>,
    /// Its last heartbeat: it is removed a session timeout after it.
    pub last_heartbeat: Instant,
    /// A static member that left with epoch -2: it keeps its assignment for its next
    /// incarnation until its session expires.
    pub static_left: bool,
}

impl Member {
    /// A member that just joined and owns nothing.
    pub fn new(member_id: String, rebalance_timeout: Duration, now: Instant) -> Self {
        Self {
            member_id,
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            member_epoch: 0,
            previous_epoch: 0,
            subscribed_topics: BTreeSet::new(),
            server_assignor: None,
            rebalance_timeout,
            assigned: Assignment::new(),
            revoking: Assignment::new(),
            revoke_deadline: None,
            assigned_at: BTreeMap::new(),
            last_heartbeat: now,
            static_left: false,
        }
    }
}

impl Member {
    /// Brings `assigned_at` in line with what the member holds now: partitions it let go are
    /// forgotten, partitions new to it are stamped with its current epoch.
    pub fn stamp_assignment_epochs(&mut self) {
        let held: BTreeSet<(String, u32)> = assignment::pairs(&self.assigned)
            .chain(assignment::pairs(&self.revoking))
            .map(|(topic, partition)| (topic.to_owned(), partition))
            .collect();
        self.assigned_at.retain(|key, _| held.contains(key));
        for key in held {
            self.assigned_at.entry(key).or_insert(self.member_epoch);
        }
    }

    /// Whether a commit in `epoch` (older than the member's) may commit `topic`/`partition`:
    /// the member has held it since `epoch` or before (KIP-1251).
    pub fn held_since(&self, epoch: i32, topic: &str, partition: u32) -> bool {
        self.assigned_at
            .get(&(topic.to_owned(), partition))
            .is_some_and(|assigned_at| *assigned_at <= epoch)
    }
}

/// A consumer-protocol group.
#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    /// Moves whenever the target must be recomputed.
    pub group_epoch: i32,
    /// The group epoch `target` was computed for.
    pub assignment_epoch: i32,
    /// Every member's target assignment, by member id.
    pub target: BTreeMap<String, Assignment>,
    /// The assignor that computed `target`.
    pub assignor: Option<Assignor>,
    /// The partition counts of the subscribed topics when `group_epoch` last moved.
    pub subscribed_counts: BTreeMap<String, u32>,
    /// The members, by member id.
    pub members: BTreeMap<String, Member>,
}

impl ConsumerGroup {
    /// Removes members whose session expired, and members that did not confirm a revocation
    /// within their rebalance timeout (their partitions go to others). Returns whether any was
    /// removed (the group epoch moved).
    pub fn expire(&mut self, session_timeout: Duration, now: Instant) -> bool {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|member| {
                let session_over =
                    now.saturating_duration_since(member.last_heartbeat) > session_timeout;
                let revoke_over = member
                    .revoke_deadline
                    .is_some_and(|deadline| now > deadline);
                session_over || revoke_over
            })
            .map(|member| member.member_id.clone())
            .collect();
        for member_id in &expired {
            tracing::info!(%member_id, "consumer group member expired");
            self.remove(member_id);
        }
        !expired.is_empty()
    }

    /// Removes a member; the group epoch moves. Its partitions are free at once.
    pub fn remove(&mut self, member_id: &str) -> bool {
        let removed = self.members.remove(member_id).is_some();
        if removed {
            self.target.remove(member_id);
            self.group_epoch += 1;
        }
        removed
    }

    /// The assignor the members ask for most (ties to the earlier name), else the default.
    pub fn chosen_assignor(&self) -> Assignor {
        let mut votes: BTreeMap<Assignor, usize> = BTreeMap::new();
        for assignor in self.members.values().filter_map(|m| m.server_assignor) {
            *votes.entry(assignor).or_default() += 1;
        }
        votes
            .into_iter()
            .max_by(|(a, x), (b, y)| x.cmp(y).then(b.cmp(a)))
            .map_or(Assignor::DEFAULT, |(assignor, _)| assignor)
    }

    /// The partition counts of the topics some member subscribes to (those that exist).
    pub fn counts_of_subscribed(&self, topics: &BTreeMap<String, u32>) -> BTreeMap<String, u32> {
        self.members
            .values()
            .flat_map(|member| member.subscribed_topics.iter())
            .filter_map(|topic| Some((topic.clone(), *topics.get(topic)?)))
            .collect()
    }

    /// Whether a subscribed topic appeared, went, or changed its partition count since the
    /// last call (the group epoch must move then).
    pub fn refresh_topics(&mut self, topics: &BTreeMap<String, u32>) -> bool {
        let counts = self.counts_of_subscribed(topics);
        let changed = counts != self.subscribed_counts;
        self.subscribed_counts = counts;
        changed
    }

    /// Recomputes the target if the group epoch moved past it.
    pub fn update_target(&mut self) {
        if self.assignment_epoch >= self.group_epoch {
            return;
        }
        let assignor = self.chosen_assignor();
        let subscriptions = self
            .members
            .iter()
            .map(|(id, member)| (id.clone(), member.subscribed_topics.clone()))
            .collect();
        self.target = assignor.assign(&subscriptions, &self.subscribed_counts, &self.target);
        self.assignor = Some(assignor);
        self.assignment_epoch = self.group_epoch;
    }

    /// Every partition some member other than `member_id` owns or is still revoking.
    pub fn owned_by_others(&self, member_id: &str) -> Assignment {
        let mut owned = Assignment::new();
        for member in self.members.values().filter(|m| m.member_id != member_id) {
            for (topic, partition) in
                assignment::pairs(&member.assigned).chain(assignment::pairs(&member.revoking))
            {
                assignment::insert(&mut owned, topic, partition);
            }
        }
        owned
    }

    /// The live member with this static instance id, if any.
    pub fn member_of_instance(&self, instance_id: &str) -> Option<&Member> {
        self.members
            .values()
            .find(|member| member.instance_id.as_deref() == Some(instance_id))
    }

    /// Whether every member has reconciled to the target.
    pub fn is_stable(&self) -> bool {
        self.members.values().all(|member| {
            member.revoking.is_empty()
                && member.member_epoch == self.assignment_epoch
                && self.target_of(&member.member_id) == member.assigned
        })
    }

    /// `member_id`'s target (empty when it has none).
    pub fn target_of(&self, member_id: &str) -> Assignment {
        self.target.get(member_id).cloned().unwrap_or_default()
    }
}
