//! What one offsets partition says: every group's committed positions and last membership
//! snapshot, rebuilt by applying the partition's records in log order.
//!
//! Each value remembers the log offset of the record that set it, and a record only replaces
//! values set at lower offsets: a coordinator applies its own commits as their replication
//! completes, which may be out of log order, and must end in the state a replay of the log would
//! give.

use std::collections::HashMap;

use super::record::OffsetsRecord;
use crate::broker::coordinator::GroupSnapshot;
use crate::broker::groups::{CommittedOffset, PartitionCommits, PartitionKey};
use crate::broker::transaction_state::TransactionMetadata;
use crate::cluster::meta::INITIAL_LEADER_EPOCH;
use crate::cluster::LeaderEpoch;

/// One committed position, with the log offset of the record that set it and the lineage of the
/// topic it was committed for (`CommitEntry::lineage`, 0 read as the initial leader epoch).
#[derive(Debug, Clone)]
struct Position {
    committed: CommittedOffset,
    at: u64,
    lineage: LeaderEpoch,
}

/// A group's part of the state.
#[derive(Debug, Default, Clone)]
struct GroupRecords {
    /// Position by topic and partition.
    offsets: HashMap<PartitionKey, Position>,
    /// The last membership snapshot, with the log offset that set it.
    snapshot: Option<(GroupSnapshot, u64)>,
}

/// The state of one offsets partition (see the module docs).
#[derive(Debug, Default, Clone)]
pub struct OffsetsState {
    groups: HashMap<String, GroupRecords>,
    /// Each transactional id's last state, with the log offset that set it.
    transactions: HashMap<String, (TransactionMetadata, u64)>,
}

impl OffsetsState {
    /// Applies `record`, stored at `log_offset`.
    pub fn apply(&mut self, log_offset: u64, record: &OffsetsRecord) {
        match record {
            OffsetsRecord::Commit { group, offsets } => {
                let entries = &mut self.groups.entry(group.clone()).or_default().offsets;
                for entry in offsets {
                    let key = (entry.topic.clone(), entry.partition);
                    if entries
                        .get(&key)
                        .is_some_and(|position| position.at > log_offset)
                    {
                        continue;
                    }
                    let position = Position {
                        committed: CommittedOffset {
                            offset: entry.offset,
                            metadata: entry.metadata.clone(),
                        },
                        at: log_offset,
                        lineage: entry.lineage.max(INITIAL_LEADER_EPOCH),
                    };
                    entries.insert(key, position);
                }
            }
            OffsetsRecord::Group { group, snapshot } => {
                let records = self.groups.entry(group.clone()).or_default();
                if records
                    .snapshot
                    .as_ref()
                    .is_some_and(|(_, at)| *at > log_offset)
                {
                    return;
                }
                records.snapshot = Some((snapshot.clone(), log_offset));
            }
            OffsetsRecord::Delete { group, partitions } => {
                if let Some(records) = self.groups.get_mut(group) {
                    let earlier = |at: u64| at < log_offset;
                    match partitions {
                        None => {
                            records.offsets.retain(|_, position| !earlier(position.at));
                            if records
                                .snapshot
                                .as_ref()
                                .is_some_and(|(_, at)| earlier(*at))
                            {
                                records.snapshot = None;
                            }
                        }
                        Some(partitions) => {
                            for named in partitions {
                                let key = (named.topic.clone(), named.partition);
                                if records.offsets.get(&key).is_some_and(|p| earlier(p.at)) {
                                    records.offsets.remove(&key);
                                }
                            }
                        }
                    }
                }
            }
            OffsetsRecord::ForgetTopic { topic } => {
                for records in self.groups.values_mut() {
                    records
                        .offsets
                        .retain(|(name, _), position| name != topic || position.at > log_offset);
                }
            }
            OffsetsRecord::Transaction {
                transactional_id,
                state,
            } => {
                if self
                    .transactions
                    .get(transactional_id)
                    .is_some_and(|(_, at)| *at > log_offset)
                {
                    return;
                }
                match state {
                    Some(state) => {
                        self.transactions
                            .insert(transactional_id.clone(), (state.clone(), log_offset));
                    }
                    None => {
                        self.transactions.remove(transactional_id);
                    }
                }
            }
        }
        self.groups
            .retain(|_, records| !records.offsets.is_empty() || records.snapshot.is_some());
    }

    /// `transactional_id`'s last state in this partition, if it has one.
    pub fn transaction(&self, transactional_id: &str) -> Option<&TransactionMetadata> {
        self.transactions
            .get(transactional_id)
            .map(|(state, _)| state)
    }

    /// Every transactional id's last state in this partition (what its coordinator loads).
    pub fn transactions(&self) -> impl Iterator<Item = &TransactionMetadata> {
        self.transactions.values().map(|(state, _)| state)
    }

    /// The position `group` committed for `topic/partition`, if any, whatever its lineage.
    pub fn committed(&self, group: &str, topic: &str, partition: u32) -> Option<CommittedOffset> {
        self.position(group, topic, partition)
            .map(|position| position.committed.clone())
    }

    /// The position `group` committed for `topic/partition` of the topic whose lineage (first
    /// leader epoch) is `lineage`: a position committed for a deleted topic of the same name is
    /// not this topic's.
    pub fn committed_in_lineage(
        &self,
        group: &str,
        topic: &str,
        partition: u32,
        lineage: LeaderEpoch,
    ) -> Option<CommittedOffset> {
        self.position(group, topic, partition)
            .filter(|position| position.lineage == lineage.max(INITIAL_LEADER_EPOCH))
            .map(|position| position.committed.clone())
    }

    fn position(&self, group: &str, topic: &str, partition: u32) -> Option<&Position> {
        self.groups
            .get(group)?
            .offsets
            .get(&(topic.to_owned(), partition))
    }

    /// Every position `group` committed for a topic whose lineage `lineage_of` (the topic's
    /// first leader epoch, `None` for a topic that does not exist) is the position's, sorted by
    /// topic and partition.
    pub fn committed_all(
        &self,
        group: &str,
        lineage_of: impl Fn(&str) -> Option<LeaderEpoch>,
    ) -> PartitionCommits {
        let mut all: PartitionCommits = self
            .groups
            .get(group)
            .map(|records| {
                records
                    .offsets
                    .iter()
                    .filter(|((topic, _), position)| {
                        lineage_of(topic).map(|lineage| lineage.max(INITIAL_LEADER_EPOCH))
                            == Some(position.lineage)
                    })
                    .map(|(key, position)| (key.clone(), position.committed.clone()))
                    .collect()
            })
            .unwrap_or_default();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// How many positions `group` holds.
    pub fn offset_count(&self, group: &str) -> usize {
        self.groups
            .get(group)
            .map_or(0, |records| records.offsets.len())
    }

    /// Whether `group` has anything recorded.
    pub fn has_group(&self, group: &str) -> bool {
        self.groups.contains_key(group)
    }

    /// How many groups have something recorded.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// The groups whose last snapshot has members, with it (for a coordinator taking over).
    pub fn live_snapshots(&self) -> impl Iterator<Item = (&str, &GroupSnapshot)> {
        self.groups.iter().filter_map(|(group, records)| {
            records
                .snapshot
                .as_ref()
                .filter(|(snapshot, _)| !snapshot.members.is_empty())
                .map(|(snapshot, _)| (group.as_str(), snapshot))
        })
    }

    /// The names of every group with committed positions, sorted.
    pub fn group_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .groups
            .iter()
            .filter(|(_, records)| !records.offsets.is_empty())
            .map(|(name, _)| name.clone())
            .collect();
        names.sort_unstable();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::CommitEntry;
    use super::*;

    /// A transactional id's state is the one of its last record in log order, whatever order
    /// the records are applied in; a forgotten id is gone; groups of the same name are apart.
    #[test]
    fn a_transactional_ids_last_record_wins_and_forgetting_removes_it() {
        let record = |epoch: i16| {
            let mut state = TransactionMetadata::new("t", 7, 60_000);
            state.producer_epoch = epoch;
            OffsetsRecord::Transaction {
                transactional_id: "t".into(),
                state: Some(state),
            }
        };
        let epochs = |state: &OffsetsState| -> Vec<i16> {
            state.transactions().map(|t| t.producer_epoch).collect()
        };
        let mut state = OffsetsState::default();
        state.apply(5, &record(2));
        state.apply(3, &record(1));
        assert_eq!(
            epochs(&state),
            [2],
            "an older record applied late changes nothing"
        );
        state.apply(6, &commit("t", "orders", 0, 1));
        assert_eq!(epochs(&state), [2]);
        assert!(state.committed("t", "orders", 0).is_some());
        state.apply(
            9,
            &OffsetsRecord::Transaction {
                transactional_id: "t".into(),
                state: None,
            },
        );
        assert!(epochs(&state).is_empty());
        assert!(
            state.committed("t", "orders", 0).is_some(),
            "the group is untouched"
        );
    }

    fn commit(group: &str, topic: &str, partition: u32, offset: u64) -> OffsetsRecord {
        OffsetsRecord::Commit {
            group: group.into(),
            offsets: vec![CommitEntry {
                topic: topic.into(),
                partition,
                offset,
                metadata: String::new(),
                lineage: 0,
            }],
        }
    }

    /// Applied out of log order, commits end where the log order puts them.
    #[test]
    fn the_record_later_in_the_log_wins_whatever_the_order_applied() {
        let mut state = OffsetsState::default();
        state.apply(11, &commit("g", "t", 0, 7));
        state.apply(10, &commit("g", "t", 0, 5));
        state.apply(10, &commit("g", "t", 1, 3));
        assert_eq!(state.committed("g", "t", 0).unwrap().offset, 7);
        assert_eq!(state.committed("g", "t", 1).unwrap().offset, 3);
        assert_eq!(state.offset_count("g"), 2);
        assert_eq!(
            state.committed_all("g", |_| Some(1))[0].0,
            ("t".to_string(), 0)
        );
    }

    /// A deleted topic's positions go, later commits of a re-created one stay.
    #[test]
    fn forgetting_a_topic_removes_only_what_came_before() {
        let mut state = OffsetsState::default();
        state.apply(1, &commit("g", "t", 0, 5));
        state.apply(2, &commit("g", "u", 0, 1));
        state.apply(4, &commit("h", "t", 0, 9));
        state.apply(3, &OffsetsRecord::ForgetTopic { topic: "t".into() });
        assert_eq!(state.committed("g", "t", 0), None);
        assert_eq!(state.committed("g", "u", 0).unwrap().offset, 1);
        assert_eq!(state.committed("h", "t", 0).unwrap().offset, 9);
        state.apply(5, &OffsetsRecord::ForgetTopic { topic: "u".into() });
        assert!(!state.has_group("g"));
        assert_eq!(state.group_names(), vec!["h".to_string()]);
    }

    /// A position committed for a deleted topic is not read as a re-created one's: it carries
    /// the old lineage, until a commit of the new lineage replaces it.
    #[test]
    fn a_deleted_lineages_position_is_not_the_recreated_topics() {
        let mut state = OffsetsState::default();
        state.apply(1, &commit("g", "t", 0, 5));
        state.apply(2, &commit("g", "u", 0, 2));
        assert_eq!(
            state.committed_in_lineage("g", "t", 0, 1).unwrap().offset,
            5
        );
        assert_eq!(
            state.committed_in_lineage("g", "t", 0, 0).unwrap().offset,
            5
        );
        assert_eq!(state.committed_in_lineage("g", "t", 0, 8), None);
        let recreated = |topic: &str| match topic {
            "t" => Some(8),
            "u" => Some(1),
            _ => None,
        };
        assert_eq!(state.committed_all("g", recreated).len(), 1);
        assert_eq!(state.committed_all("g", |_| None), vec![]);
        let mut again = commit("g", "t", 0, 1);
        if let OffsetsRecord::Commit { offsets, .. } = &mut again {
            offsets[0].lineage = 8;
        }
        state.apply(3, &again);
        assert_eq!(
            state.committed_in_lineage("g", "t", 0, 8).unwrap().offset,
            1
        );
        assert_eq!(state.committed_all("g", recreated).len(), 2);
    }

    /// An admin's delete removes what came before it in the log: the named positions, or the
    /// whole group with its snapshot; a commit later in the log stays.
    #[test]
    fn a_delete_removes_what_came_before_it() {
        use super::super::record::PartitionRef;
        let mut state = OffsetsState::default();
        state.apply(1, &commit("g", "t", 0, 5));
        state.apply(2, &commit("g", "t", 1, 6));
        state.apply(5, &commit("g", "u", 0, 7));
        let named = OffsetsRecord::Delete {
            group: "g".into(),
            partitions: Some(vec![PartitionRef {
                topic: "t".into(),
                partition: 0,
            }]),
        };
        state.apply(3, &named);
        assert_eq!(state.committed("g", "t", 0), None);
        assert_eq!(state.committed("g", "t", 1).unwrap().offset, 6);
        let whole = OffsetsRecord::Delete {
            group: "g".into(),
            partitions: None,
        };
        state.apply(4, &whole);
        assert_eq!(state.committed("g", "t", 1), None);
        assert_eq!(
            state.committed("g", "u", 0).unwrap().offset,
            7,
            "later in the log"
        );
        state.apply(6, &whole);
        assert!(!state.has_group("g"));
    }
}
