//! The records of the offsets topic: what one append to a group's offsets partition says, as
//! JSON in the record's value (keyed by the group id, so a later compaction can keep the last
//! record of each group).
//!
//! JSON because these records are few (a consumer commits every few seconds), read back only
//! when a coordinator takes a partition over, and worth being readable with
//! `fencelog consume __consumer_offsets` when something looks wrong. A record whose value does
//! not decode is not ours (a marker a leader wrote) and is skipped, never read as a commit.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::batch::BatchBuilder;
use crate::broker::coordinator::GroupSnapshot;
use crate::broker::transaction_state::TransactionMetadata;

/// One record of the offsets topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OffsetsRecord {
    /// Positions `group` committed, all in one record so a commit is all or none.
    Commit {
        /// The group.
        group: String,
        /// Each position.
        offsets: Vec<CommitEntry>,
    },
    /// `group`'s membership after a generation completed or the group emptied.
    Group {
        /// The group.
        group: String,
        /// Its membership.
        snapshot: GroupSnapshot,
    },
    /// Every group's positions in `topic` are forgotten (the topic was deleted).
    ForgetTopic {
        /// The deleted topic.
        topic: String,
    },
    /// An admin deleted `group`'s positions in `partitions` (Kafka's OffsetDelete), or, when
    /// `partitions` is `None`, the whole group: every position and its membership snapshot
    /// (Kafka's DeleteGroups).
    Delete {
        /// The group.
        group: String,
        /// The positions deleted; `None`: the whole group.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        partitions: Option<Vec<PartitionRef>>,
    },
    /// A transactional id's whole coordinator state after a change (issue 31: on a cluster the
    /// transaction coordinator of an id is the leader of the id's offsets partition, see
    /// docs/kafka.md, "Transactions on a cluster"); `None`: the id was forgotten (idle past its
    /// expiration). A broker that predates it skips it, as any record not its own.
    Transaction {
        /// The transactional id.
        transactional_id: String,
        /// Its state.
        state: Option<TransactionMetadata>,
    },
}

/// One topic partition a [`OffsetsRecord::Delete`] names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRef {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
}

/// One committed position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitEntry {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// The offset of the next record the group will read.
    pub offset: u64,
    /// What the committer stored with it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub metadata: String,
    /// The lineage of the topic it was committed for: the leader epoch the topic's partitions
    /// started at (`TopicRecord::first_leader_epoch`). A position whose lineage is not the
    /// topic's now belongs to a deleted topic of the same name and is not read. 0 (records
    /// written before the field existed) means the initial leader epoch.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lineage: u32,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

impl OffsetsRecord {
    /// The group the record is about (none for a topic's deletion or a transaction).
    pub fn group(&self) -> Option<&str> {
        match self {
            OffsetsRecord::Commit { group, .. }
            | OffsetsRecord::Group { group, .. }
            | OffsetsRecord::Delete { group, .. } => Some(group),
            OffsetsRecord::ForgetTopic { .. } | OffsetsRecord::Transaction { .. } => None,
        }
    }

    /// The record's key in its batch: the group, or `transaction:` and the transactional id
    /// (so a later compaction keeps the last record of each, and an id never collides with a
    /// group of the same name).
    fn key(&self) -> Option<String> {
        match self {
            OffsetsRecord::Transaction {
                transactional_id, ..
            } => Some(format!("transaction:{transactional_id}")),
            other => other.group().map(str::to_owned),
        }
    }

    /// The record as a one-record batch in fencelog's stored format, without a lease (the
    /// offsets topic grants none; its writers are fenced by the leader epoch).
    pub fn to_batch(&self, timestamp_ms: i64) -> Bytes {
        let value = serde_json::to_vec(self).expect("offsets records serialize to JSON");
        let mut batch = BatchBuilder::new(0);
        batch.push(
            timestamp_ms,
            self.key().as_deref().map(str::as_bytes),
            Some(&value),
        );
        batch.finish()
    }

    /// The record a stored value holds, or `None` if it is not one of ours.
    pub fn decode(value: &[u8]) -> Option<Self> {
        serde_json::from_slice(value).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_record_round_trips_under_its_own_key() {
        let state = TransactionMetadata::new("billing", 7, 60_000);
        let record = OffsetsRecord::Transaction {
            transactional_id: "billing".into(),
            state: Some(state),
        };
        let batch = record.to_batch(7);
        let records = crate::batch::decode_batch(&batch).unwrap();
        assert_eq!(records[0].key.as_deref(), Some(&b"transaction:billing"[..]));
        let decoded = OffsetsRecord::decode(records[0].value.as_deref().unwrap()).unwrap();
        assert_eq!(decoded, record);
    }

    /// A record survives its batch: encoded, validated and decoded back, it is the same.
    #[test]
    fn a_record_round_trips_through_its_batch() {
        let record = OffsetsRecord::Commit {
            group: "billing".into(),
            offsets: vec![CommitEntry {
                topic: "orders".into(),
                partition: 3,
                offset: 42,
                metadata: "m".into(),
                lineage: 9,
            }],
        };
        let batch = record.to_batch(7);
        let records = crate::batch::decode_batch(&batch).unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].key.as_deref(), Some(&b"billing"[..]));
        let value = records[0].value.as_ref().unwrap();
        assert_eq!(OffsetsRecord::decode(value), Some(record));
        assert_eq!(OffsetsRecord::decode(b"not json"), None);
    }
}
