//! Topic delete and re-create in the simulation (`docs/replication.md`, "Topic delete on a
//! cluster"). Each simulated partition is the one partition of its own topic; a delete removes
//! its record and state from the store and raises the name's tombstone, a re-creation starts
//! every leader epoch above it through the real `fencelog::cluster::meta::start_above_floor`.
//! Each broker judges its local copy on every read with the real
//! `fencelog::cluster::replication::lineage` rules (the driver's) and wipes a copy of an older
//! or deleted lineage before it takes part in the new one.
//!
//! Every topic a partition ever had is a *lineage* with an id (the sim's bookkeeping: the
//! brokers' judgement never reads it). Records carry the id of the lineage whose leader wrote
//! them, so a record of a deleted lineage served, replicated or acknowledged in a newer one is
//! caught where it happens, and the checker (`check`) verifies the floors: epochs of a new
//! lineage above its floor, producer epochs granted by it above those of every older one, a
//! floor that never goes down.

use std::collections::BTreeMap;

use fencelog::cluster::meta::{first_leader_epoch_above, start_above_floor, TopicRecord};
use fencelog::cluster::replica_log::ReplicaLog;
use fencelog::cluster::replication::lineage::{
    deleted_lineage, older_lineage, LocalEpochs, OlderLineage,
};
use fencelog::cluster::{LeaderEpoch, NodeId, PartitionState, Versioned};
use fencelog::domain::TopicConfig;

use super::log::SimLog;

/// The name of partition `partition`'s topic.
pub fn topic_name(partition: usize) -> String {
    format!("t{partition}")
}

/// One topic a partition had.
#[derive(Debug, Clone)]
pub struct Lineage {
    pub id: u32,
    pub partition: usize,
    /// The record the store created it with.
    pub record: TopicRecord,
    pub replicas: Vec<NodeId>,
    /// The name's fence floor when it was created (0 for the initial lineage).
    pub floor_below: LeaderEpoch,
    /// A re-creation (the initial lineage starts below `INITIAL_LEADER_EPOCH`, at 0).
    pub recreated: bool,
    /// The highest leader epoch its partition state had.
    pub highest_epoch: LeaderEpoch,
    /// When it was deleted: (time, floor before, floor after).
    pub deleted: Option<(u64, LeaderEpoch, LeaderEpoch)>,
}

impl Lineage {
    pub fn initial(partition: usize, state: &PartitionState) -> Lineage {
        Lineage {
            id: partition as u32,
            partition,
            record: TopicRecord::new(topic_name(partition), 1, 3, TopicConfig::default()),
            replicas: state.replicas.clone(),
            floor_below: 0,
            recreated: false,
            highest_epoch: state.leader_epoch,
            deleted: None,
        }
    }

    /// A topic re-created over the fence floor `floor`, and its partition's first state.
    pub fn recreated(
        id: u32,
        partition: usize,
        replicas: Vec<NodeId>,
        floor: LeaderEpoch,
    ) -> (Lineage, PartitionState) {
        let mut record = TopicRecord::new(topic_name(partition), 1, 3, TopicConfig::default());
        let mut state = PartitionState {
            replicas: replicas.clone(),
            leader: Some(replicas[0]),
            leader_epoch: 0,
            isr: replicas.clone(),
            min_insync: 2,
        };
        start_above_floor(&mut record, std::slice::from_mut(&mut state), floor)
            .expect("the simulation never uses up the leader epochs");
        let lineage = Lineage {
            id,
            partition,
            record,
            replicas,
            floor_below: floor,
            recreated: true,
            highest_epoch: state.leader_epoch,
            deleted: None,
        };
        (lineage, state)
    }

    /// Whether `epoch` is not above the floor this lineage was created over (a re-creation's
    /// epochs must all be above it).
    pub fn below_floor(&self, epoch: LeaderEpoch) -> bool {
        self.recreated && epoch <= self.floor_below
    }

    pub fn mark_deleted(
        &mut self,
        now_ms: u64,
        highest: LeaderEpoch,
        before: LeaderEpoch,
        after: LeaderEpoch,
    ) {
        self.highest_epoch = self.highest_epoch.max(highest);
        self.deleted = Some((now_ms, before, after));
    }
}

/// What a broker's read shows of one partition.
#[derive(Debug, Clone)]
pub enum PartitionView {
    Present {
        record: TopicRecord,
        /// The sim's id of the lineage (labels the local copy; never judged by).
        lineage: u32,
        state: Versioned<PartitionState>,
    },
    /// The topic is deleted; the name's fence floor.
    Deleted { floor: LeaderEpoch },
}

/// The local copy's epochs as the driver reads them from a partition's files.
pub fn local_epochs(log: &SimLog) -> Vec<LocalEpochs> {
    vec![LocalEpochs {
        floor: log.leader_epoch_floor(),
        history: log.history().into_iter().map(|(epoch, _)| epoch).collect(),
    }]
}

/// What a broker does with its local copy of a partition on a read, by the driver's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// The copy is the store's topic's (or there is none and the topic is present): take part.
    Keep,
    /// The copy is of an older lineage than the store's record: wipe it, then take part.
    Older(OlderLineage),
    /// The topic is deleted and the floor covers the copy: wipe it, take no part.
    Deleted,
    /// The topic is deleted but the copy holds epochs above the floor: keep it, serve nothing.
    KeptAbsent,
}

/// Judges the local copy `log` (if any) against `view`.
pub fn judge(log: Option<&SimLog>, view: &PartitionView) -> Judgement {
    let Some(log) = log else {
        return Judgement::Keep;
    };
    let epochs = local_epochs(log);
    match view {
        PartitionView::Present { record, .. } => match older_lineage(1, &epochs, record) {
            Some(reason) => Judgement::Older(reason),
            None => Judgement::Keep,
        },
        PartitionView::Deleted { floor } => {
            if deleted_lineage(&epochs, *floor) {
                Judgement::Deleted
            } else {
                Judgement::KeptAbsent
            }
        }
    }
}

/// Producer epochs a lineage's leaders granted: (lowest, highest).
pub type Grants = BTreeMap<(usize, u32), (u64, u64)>;

/// Records a producer epoch granted in `lineage` of `partition`.
pub fn grant(grants: &mut Grants, partition: usize, lineage: u32, producer_epoch: u64) {
    let entry = grants
        .entry((partition, lineage))
        .or_insert((producer_epoch, producer_epoch));
    entry.0 = entry.0.min(producer_epoch);
    entry.1 = entry.1.max(producer_epoch);
}

/// The end-of-run checks of lineages: each deletion's floor covers the lineage's epochs and
/// never went down; each re-creation starts where `first_leader_epoch_above` says, above the
/// floor; producer epochs granted by a lineage are above every one granted by an older lineage
/// of the partition.
pub fn check(lineages: &[Lineage], grants: &Grants) -> Vec<String> {
    let mut failures = Vec::new();
    let mut floors: BTreeMap<usize, LeaderEpoch> = BTreeMap::new();
    for lineage in lineages {
        let partition = lineage.partition;
        let floor = floors.entry(partition).or_default();
        if lineage.recreated {
            if lineage.floor_below < *floor {
                failures.push(format!(
                    "p{partition}: lineage {} created over floor {}, below the floor {} raised before",
                    lineage.id, lineage.floor_below, floor
                ));
            }
            let first = first_leader_epoch_above(&lineage.record.name, lineage.floor_below);
            if first.ok() != Some(lineage.record.first_leader_epoch()) {
                failures.push(format!(
                    "p{partition}: lineage {} starts at {}, not above its floor {}",
                    lineage.id,
                    lineage.record.first_leader_epoch(),
                    lineage.floor_below
                ));
            }
        }
        if let Some((at, before, after)) = lineage.deleted {
            if after < before || after < *floor {
                failures.push(format!(
                    "p{partition}: the tombstone went down from {} to {after} at {at} ms",
                    before.max(*floor)
                ));
            }
            if after < lineage.highest_epoch {
                failures.push(format!(
                    "p{partition}: lineage {} deleted at {at} ms with epoch {} above its floor {after}",
                    lineage.id, lineage.highest_epoch
                ));
            }
            *floor = after;
        }
    }
    for ((partition, lineage), (lowest, _)) in grants {
        for ((older_partition, older), (_, highest)) in grants {
            if older_partition == partition && older < lineage && highest >= lowest {
                failures.push(format!(
                    "p{partition}: lineage {lineage} granted producer epoch {lowest:#x}, not above {highest:#x} granted by the older lineage {older}"
                ));
            }
        }
    }
    failures
}
