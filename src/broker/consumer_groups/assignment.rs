//! An assignment: which partitions of which topics, by topic name (the Kafka listener turns
//! names into topic ids and back: the coordinator knows no wire format).

use std::collections::{BTreeMap, BTreeSet};

/// Partitions by topic name. A topic with no partitions is never stored.
pub type Assignment = BTreeMap<String, BTreeSet<u32>>;

/// Every `(topic, partition)` of `assignment`.
pub fn pairs(assignment: &Assignment) -> impl Iterator<Item = (&str, u32)> {
    assignment
        .iter()
        .flat_map(|(topic, partitions)| partitions.iter().map(move |p| (topic.as_str(), *p)))
}

/// Whether `assignment` holds `topic`/`partition`.
pub fn holds(assignment: &Assignment, topic: &str, partition: u32) -> bool {
    assignment
        .get(topic)
        .is_some_and(|partitions| partitions.contains(&partition))
}

/// Adds `topic`/`partition`.
pub fn insert(assignment: &mut Assignment, topic: &str, partition: u32) {
    assignment
        .entry(topic.to_owned())
        .or_default()
        .insert(partition);
}

/// Removes `topic`/`partition` (and the topic once empty).
pub fn remove(assignment: &mut Assignment, topic: &str, partition: u32) {
    if let Some(partitions) = assignment.get_mut(topic) {
        partitions.remove(&partition);
        if partitions.is_empty() {
            assignment.remove(topic);
        }
    }
}

/// The partitions of `a` that are also in `b`.
pub fn intersection(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (topic, partition) in pairs(a) {
        if holds(b, topic, partition) {
            insert(&mut out, topic, partition);
        }
    }
    out
}

/// The partitions of `a` that are not in `b`.
pub fn difference(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (topic, partition) in pairs(a) {
        if !holds(b, topic, partition) {
            insert(&mut out, topic, partition);
        }
    }
    out
}

/// Whether `a` and `b` share a partition.
pub fn intersects(a: &Assignment, b: &Assignment) -> bool {
    pairs(a).any(|(topic, partition)| holds(b, topic, partition))
}

/// How many partitions `assignment` holds.
pub fn count(assignment: &Assignment) -> usize {
    assignment.values().map(BTreeSet::len).sum()
}
