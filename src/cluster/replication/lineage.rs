//! Whether a replica's local copy of a topic belongs to the topic the metadata store has under
//! its name, sans I/O: the rules the broker's driver applies to its local topics (and the
//! deterministic simulation applies to its in-memory logs) after a topic was deleted from the
//! cluster and maybe re-created under the same name (`docs/replication.md`, "Topic delete on a
//! cluster").
//!
//! A topic name's successive topics are its *lineages*. Only their leader epochs tell them
//! apart: the store starts a re-created topic above every epoch of the deleted ones (the name's
//! tombstone, [`crate::cluster::meta::TopicTombstone`]), so
//! * the store has a record of the name: the local copy is of an older lineage when it has
//!   more partitions than the record (a topic only grows: fewer is a grow not applied here
//!   yet), or a partition's leader-epoch floor or history has an epoch below the record's
//!   `first_leader_epoch` ([`older_lineage`]);
//! * the store has no record of the name: the local copy is a deleted lineage's when the name's
//!   fence floor is above 0 and covers every leader epoch the copy holds ([`deleted_lineage`]).
//!   A copy without a tombstone, or with epochs above it, is kept and not served (a wrong
//!   `--cluster-name`, or a store restored from an old backup, must not erase data).
//!
//! The functions only judge; deleting the copy is the caller's I/O. They live here, not in the
//! driver, so that the simulation runs the very rules the broker runs.

use std::fmt;

use crate::cluster::meta::TopicRecord;
use crate::cluster::LeaderEpoch;

/// The leader epochs one local partition holds: its leader-epoch floor and the epochs of its
/// leader-epoch history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalEpochs {
    /// The highest leader epoch installed (0: never followed or led).
    pub floor: LeaderEpoch,
    /// The epochs of its history entries.
    pub history: Vec<LeaderEpoch>,
}

impl LocalEpochs {
    /// The highest epoch the partition holds (its floor or a history entry's).
    pub fn highest(&self) -> LeaderEpoch {
        self.history
            .iter()
            .copied()
            .fold(self.floor, LeaderEpoch::max)
    }
}

/// Why a local copy is of an older lineage than the store's record of the name (its `Display`
/// is the reason the driver logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OlderLineage {
    /// The local copy has more partitions than the record (a topic never shrinks).
    PartitionCount {
        /// Partitions of the local copy.
        local: usize,
        /// Partitions of the topic in the store.
        store: u32,
    },
    /// The local copy holds a leader epoch below the record's first one: only a deleted topic
    /// of the same name can have written it.
    EpochBelowFirst {
        /// The lowest such epoch.
        epoch: LeaderEpoch,
        /// The record's first leader epoch.
        first: LeaderEpoch,
    },
}

impl fmt::Display for OlderLineage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OlderLineage::PartitionCount { local, store } => write!(
                f,
                "the local copy has {local} partitions, the topic in the store {store}"
            ),
            OlderLineage::EpochBelowFirst { epoch, first } => write!(
                f,
                "the local copy holds leader epoch {epoch}, below {first} where the topic in the \
                 store starts (a deleted topic of the same name)"
            ),
        }
    }
}

/// Why the local copy (`local_partitions` partitions holding `epochs`) is of an older lineage
/// than `record`, or `None` if it is the record's own.
pub fn older_lineage(
    local_partitions: usize,
    epochs: &[LocalEpochs],
    record: &TopicRecord,
) -> Option<OlderLineage> {
    // Fewer partitions than the record is a grow this broker has not applied yet (its driver
    // adds them); more can only be an older topic of the name, since a topic never shrinks.
    if local_partitions > record.partition_count as usize {
        return Some(OlderLineage::PartitionCount {
            local: local_partitions,
            store: record.partition_count,
        });
    }
    let first = record.first_leader_epoch();
    let below = epochs
        .iter()
        .flat_map(|partition| {
            let floor = (partition.floor != 0).then_some(partition.floor);
            floor.into_iter().chain(partition.history.iter().copied())
        })
        .filter(|epoch| *epoch < first)
        .min();
    below.map(|epoch| OlderLineage::EpochBelowFirst { epoch, first })
}

/// Whether a local copy holding `epochs`, of a name the store has no record of and whose fence
/// floor is `floor`, is a deleted lineage's (see the module docs).
pub fn deleted_lineage(epochs: &[LocalEpochs], floor: LeaderEpoch) -> bool {
    floor > 0 && epochs.iter().all(|partition| partition.highest() <= floor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::TopicConfig;

    fn record(partitions: u32, first: LeaderEpoch) -> TopicRecord {
        let mut record = TopicRecord::new("t", partitions, 3, TopicConfig::default());
        record.first_leader_epoch = first;
        record
    }

    fn epochs(floor: LeaderEpoch, history: &[LeaderEpoch]) -> LocalEpochs {
        LocalEpochs {
            floor,
            history: history.to_vec(),
        }
    }

    /// A copy with epochs below where the record starts, or another partition count, is of an
    /// older lineage; a fresh copy (no epochs) or one with only the record's epochs is not.
    #[test]
    fn a_copy_with_epochs_below_the_first_is_an_older_lineage() {
        let recreated = record(1, 8);
        assert_eq!(
            older_lineage(1, &[epochs(7, &[2, 5])], &recreated),
            Some(OlderLineage::EpochBelowFirst { epoch: 2, first: 8 })
        );
        assert!(older_lineage(1, &[epochs(9, &[5, 9])], &recreated).is_some());
        assert!(older_lineage(1, &[epochs(0, &[])], &recreated).is_none());
        assert!(older_lineage(1, &[epochs(9, &[9])], &recreated).is_none());
        assert_eq!(
            older_lineage(2, &[epochs(0, &[]), epochs(0, &[])], &recreated),
            Some(OlderLineage::PartitionCount { local: 2, store: 1 })
        );
        // Fewer local partitions than the record is a grow not applied yet, not a lineage.
        assert!(older_lineage(1, &[epochs(9, &[9])], &record(3, 8)).is_none());
        assert!(older_lineage(1, &[epochs(7, &[7])], &record(3, 8)).is_some());
        // A record written before first_leader_epoch existed reads as the initial epoch.
        let legacy = record(1, 0);
        assert!(older_lineage(1, &[epochs(3, &[2, 3])], &legacy).is_none());
    }

    /// The reasons read as the driver has always logged them.
    #[test]
    fn the_reasons_read_as_before() {
        let reason = OlderLineage::EpochBelowFirst { epoch: 2, first: 8 }.to_string();
        assert_eq!(
            reason,
            "the local copy holds leader epoch 2, below 8 where the topic in the store starts \
             (a deleted topic of the same name)"
        );
        let reason = OlderLineage::PartitionCount { local: 2, store: 1 }.to_string();
        assert_eq!(
            reason,
            "the local copy has 2 partitions, the topic in the store 1"
        );
    }

    /// A copy of a name the store lacks is deleted only when a floor covers all its epochs.
    #[test]
    fn only_a_floor_covering_every_epoch_deletes_an_absent_copy() {
        assert!(deleted_lineage(&[epochs(5, &[2, 5])], 5));
        assert!(deleted_lineage(&[epochs(0, &[])], 5));
        assert!(!deleted_lineage(&[epochs(6, &[6])], 5));
        assert!(!deleted_lineage(&[epochs(2, &[2])], 0), "never deleted");
    }
}
