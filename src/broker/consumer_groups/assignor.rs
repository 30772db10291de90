//! The server-side assignors: from every member's subscription and the subscribed topics'
//! partition counts to each member's target assignment (KIP-848: the coordinator, not a
//! leader member, computes it).
//!
//! * `uniform` (the default, as in Kafka): every partition of the subscribed topics to exactly
//!   one subscribed member, the counts balanced (within one partition where the subscriptions
//!   allow it), and sticky: a member keeps the partitions it had in the previous target up to
//!   its fair share, so a member joining or leaving moves as few partitions as it can.
//! * `range`: per topic, the subscribed members in member id order take contiguous ranges of
//!   its partitions (the first `count % members` one more), Kafka's range assignor: members
//!   subscribed to the same topics get the same partition numbers of each (co-partitioning).
//!
//! Both are pure functions of their input, so a target can be recomputed at any time.

use std::collections::{BTreeMap, BTreeSet};

use super::assignment::{self, Assignment};

/// A server-side assignor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Assignor {
    /// Balanced and sticky.
    Uniform,
    /// Per-topic contiguous ranges.
    Range,
}

impl Assignor {
    /// What a group uses when no member names an assignor (Kafka's default too).
    pub const DEFAULT: Assignor = Assignor::Uniform;

    /// The assignor of this name, as clients spell it (`group.remote.assignor`).
    pub fn named(name: &str) -> Option<Assignor> {
        match name {
            "uniform" => Some(Assignor::Uniform),
            "range" => Some(Assignor::Range),
            _ => None,
        }
    }

    /// The name clients use and ConsumerGroupDescribe reports.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }

    /// Every member's target: `subscriptions` by member id, `counts` the partition count of
    /// every subscribed topic that exists, `previous` the last target (for stickiness).
    pub fn assign(
        self,
        subscriptions: &BTreeMap<String, BTreeSet<String>>,
        counts: &BTreeMap<String, u32>,
        previous: &BTreeMap<String, Assignment>,
    ) -> BTreeMap<String, Assignment> {
        match self {
            Assignor::Uniform => uniform(subscriptions, counts, previous),
            Assignor::Range => range(subscriptions, counts),
        }
    }
}

fn range(
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    counts: &BTreeMap<String, u32>,
) -> BTreeMap<String, Assignment> {
    let mut targets: BTreeMap<String, Assignment> = subscriptions
        .keys()
        .map(|member| (member.clone(), Assignment::new()))
        .collect();
    for (topic, &count) in counts {
        let members: Vec<&String> = subscriptions
            .iter()
            .filter(|(_, topics)| topics.contains(topic))
            .map(|(member, _)| member)
            .collect();
        if members.is_empty() {
            continue;
        }
        let k = members.len() as u32;
        let (per, extra) = (count / k, count % k);
        for (i, member) in members.into_iter().enumerate() {
            let i = i as u32;
            let start = i * per + i.min(extra);
            let len = per + u32::from(i < extra);
            let target = targets.entry(member.clone()).or_default();
            for partition in start..start + len {
                assignment::insert(target, topic, partition);
            }
        }
    }
    targets
}

fn uniform(
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    counts: &BTreeMap<String, u32>,
    previous: &BTreeMap<String, Assignment>,
) -> BTreeMap<String, Assignment> {
    let subscribers = |topic: &str| {
        subscriptions
            .values()
            .filter(|topics| topics.contains(topic))
            .count()
    };
    // A member's fair share: its part of each topic it reads, the partitions of a topic split
    // evenly over the topic's subscribers, rounded up.
    let quota: BTreeMap<&String, usize> = subscriptions
        .iter()
        .map(|(member, topics)| {
            let share: f64 = topics
                .iter()
                .filter_map(|topic| {
                    let count = *counts.get(topic)?;
                    Some(f64::from(count) / subscribers(topic) as f64)
                })
                .sum();
            (member, (share - 1e-9).ceil().max(0.0) as usize)
        })
        .collect();
    let mut targets: BTreeMap<String, Assignment> = subscriptions
        .keys()
        .map(|member| (member.clone(), Assignment::new()))
        .collect();
    let mut taken = Assignment::new();
    // Sticky: what each member had, while it still reads the topic, up to its share.
    for (member, topics) in subscriptions {
        let Some(before) = previous.get(member) else {
            continue;
        };
        let target = targets.entry(member.clone()).or_default();
        for (topic, partition) in assignment::pairs(before) {
            let exists = counts.get(topic).is_some_and(|count| partition < *count);
            if !exists
                || !topics.contains(topic)
                || assignment::holds(&taken, topic, partition)
                || assignment::count(target) >= quota[member]
            {
                continue;
            }
            assignment::insert(target, topic, partition);
            assignment::insert(&mut taken, topic, partition);
        }
    }
    // The rest, each to the least loaded member that reads its topic.
    for (topic, &count) in counts {
        for partition in 0..count {
            if assignment::holds(&taken, topic, partition) {
                continue;
            }
            let least = subscriptions
                .iter()
                .filter(|(_, topics)| topics.contains(topic))
                .map(|(member, _)| member)
                .min_by_key(|member| (assignment::count(&targets[*member]), (*member).clone()));
            if let Some(member) = least {
                let member = member.clone();
                if let Some(target) = targets.get_mut(&member) {
                    assignment::insert(target, topic, partition);
                }
                assignment::insert(&mut taken, topic, partition);
            }
        }
    }
    balance(subscriptions, &mut targets);
    targets
}

/// Moves partitions from the most to the least loaded members (that read the partition's
/// topic) until no such move narrows a gap of more than one. Bounded by the partition count
/// times the member count.
fn balance(
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    targets: &mut BTreeMap<String, Assignment>,
) {
    let total: usize = targets.values().map(assignment::count).sum();
    for _ in 0..total.saturating_mul(targets.len()).max(1) {
        let mut by_load: Vec<(usize, String)> = targets
            .iter()
            .map(|(member, target)| (assignment::count(target), member.clone()))
            .collect();
        by_load.sort();
        let mut moved = false;
        'search: for (high, from) in by_load.iter().rev() {
            for (low, to) in &by_load {
                if *high <= low + 1 {
                    break;
                }
                let readable = subscriptions.get(to);
                let candidate = targets[from]
                    .iter()
                    .rev()
                    .filter(|(topic, _)| readable.is_some_and(|topics| topics.contains(*topic)))
                    .find_map(|(topic, partitions)| {
                        partitions
                            .last()
                            .map(|partition| (topic.clone(), *partition))
                    });
                if let Some((topic, partition)) = candidate {
                    if let Some(source) = targets.get_mut(from) {
                        assignment::remove(source, &topic, partition);
                    }
                    if let Some(sink) = targets.get_mut(to) {
                        assignment::insert(sink, &topic, partition);
                    }
                    moved = true;
                    break 'search;
                }
            }
        }
        if !moved {
            return;
        }
    }
}
