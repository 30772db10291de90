//! An in-memory stand-in for etcd, synchronous and deterministic: one revision counter, partition
//! keys changed only by compare-and-swap on their revision, and broker registrations under leases
//! that expire by the simulated clock. Every applied change is audited against the election and
//! ISR rules (the store is the one place that sees every state a partition went through).
//!
//! Each simulated partition is the one partition of its own topic (`topic_name`), so a partition
//! can be deleted and re-created (`lineage.rs`): the delete raises the name's tombstone and a
//! re-creation starts above it, both through the real store's rules.

use std::collections::BTreeMap;

use fencelog::cluster::meta::TopicRecord;
use fencelog::cluster::replication::LiveBrokers;
use fencelog::cluster::{LeaderEpoch, NodeId, PartitionState, Versioned};

use super::lineage::{Lineage, PartitionView};

#[derive(Debug)]
struct Lease {
    expires_ms: u64,
}

#[derive(Debug, Default)]
pub struct Store {
    revision: i64,
    /// Each partition's state; `None` while its topic is deleted.
    partitions: Vec<Option<Versioned<PartitionState>>>,
    /// Each partition's topic record and lineage id (`None` while deleted).
    topics: Vec<Option<(TopicRecord, u32)>>,
    /// Each partition's name's fence floor (its tombstone; 0 while never deleted).
    tombstones: Vec<LeaderEpoch>,
    /// Every lineage any partition had, by id (`lineage.rs`).
    pub lineages: Vec<Lineage>,
    leases: BTreeMap<u64, Lease>,
    next_lease: u64,
    /// node -> (incarnation, lease id)
    registrations: BTreeMap<NodeId, (u64, u64)>,
    /// Every applied partition change: (time, partition, old, new).
    pub changes: Vec<(u64, usize, PartitionState, PartitionState)>,
    /// Rule breaks seen when a change was applied.
    pub violations: Vec<String>,
}

impl Store {
    pub fn new(partitions: Vec<PartitionState>) -> Self {
        let mut store = Store::default();
        for (partition, state) in partitions.into_iter().enumerate() {
            store.revision += 1;
            let lineage = Lineage::initial(partition, &state);
            store
                .topics
                .push(Some((lineage.record.clone(), lineage.id)));
            store.lineages.push(lineage);
            store.tombstones.push(0);
            store.partitions.push(Some(Versioned {
                value: state,
                revision: store.revision,
            }));
        }
        store
    }

    /// Deletes partition `partition`'s topic at `now_ms` as `MetaStore::delete_topic` does: the
    /// record and state go in one step and the name's tombstone rises to the highest leader
    /// epoch the partition had (never lower than before). Returns the floor, or `None` if the
    /// topic is already deleted.
    pub fn delete(&mut self, now_ms: u64, partition: usize) -> Option<LeaderEpoch> {
        self.expire(now_ms);
        let state = self.partitions[partition].take()?;
        let (_, id) = self.topics[partition]
            .take()
            .expect("a present partition has a record");
        let before = self.tombstones[partition];
        let floor = before.max(state.value.leader_epoch);
        self.tombstones[partition] = floor;
        self.revision += 1;
        self.lineages[id as usize].mark_deleted(now_ms, state.value.leader_epoch, before, floor);
        Some(floor)
    }

    /// Re-creates partition `partition`'s topic (deleted) at `now_ms` as `MetaStore::create_topic`
    /// does for a deleted name: above its tombstone, by the real `start_above_floor`. Returns
    /// the new lineage's id, or `None` if the topic is present.
    pub fn recreate(&mut self, now_ms: u64, partition: usize) -> Option<u32> {
        self.expire(now_ms);
        if self.partitions[partition].is_some() {
            return None;
        }
        let previous = self.topics_ever(partition).last().expect("created once");
        let replicas = previous.replicas.clone();
        let id = self.lineages.len() as u32;
        let floor = self.tombstones[partition];
        let (lineage, state) = Lineage::recreated(id, partition, replicas, floor);
        self.revision += 1;
        self.topics[partition] = Some((lineage.record.clone(), id));
        self.lineages.push(lineage);
        self.partitions[partition] = Some(Versioned {
            value: state,
            revision: self.revision,
        });
        Some(id)
    }

    /// The lineages partition `partition` had, oldest first.
    pub fn topics_ever(&self, partition: usize) -> impl Iterator<Item = &Lineage> {
        self.lineages
            .iter()
            .filter(move |lineage| lineage.partition == partition)
    }

    /// What a broker's read of partition `partition` sees: its record and state, or the fence
    /// floor of its deleted name (the driver asks `deleted_topic_floor`; here it comes along).
    fn view(&self, partition: usize) -> PartitionView {
        match (&self.partitions[partition], &self.topics[partition]) {
            (Some(state), Some((record, lineage))) => PartitionView::Present {
                record: record.clone(),
                lineage: *lineage,
                state: state.clone(),
            },
            _ => PartitionView::Deleted {
                floor: self.tombstones[partition],
            },
        }
    }

    fn expire(&mut self, now_ms: u64) {
        let dead: Vec<u64> = self
            .leases
            .iter()
            .filter(|(_, lease)| lease.expires_ms <= now_ms)
            .map(|(id, _)| *id)
            .collect();
        for id in dead {
            self.leases.remove(&id);
            self.revision += 1;
        }
        let leases = &self.leases;
        self.registrations
            .retain(|_, (_, lease)| leases.contains_key(lease));
    }

    /// Grants a lease and puts the registration under it (replacing an older one).
    pub fn register(&mut self, now_ms: u64, node: NodeId, incarnation: u64, ttl_ms: u64) -> u64 {
        self.expire(now_ms);
        if let Some((registered, lease)) = self.registrations.get(&node).copied() {
            if registered == incarnation {
                // A repeated registration (a lost answer): the same lease, kept alive.
                if let Some(live) = self.leases.get_mut(&lease) {
                    live.expires_ms = now_ms + ttl_ms;
                }
                return lease;
            }
        }
        self.next_lease += 1;
        let id = self.next_lease;
        self.leases.insert(
            id,
            Lease {
                expires_ms: now_ms + ttl_ms,
            },
        );
        self.registrations.insert(node, (incarnation, id));
        self.revision += 1;
        id
    }

    /// Keeps a lease alive; false if it already expired or no longer holds the node's
    /// registration (a broker must never believe in a registration it does not have).
    pub fn keep_alive(&mut self, now_ms: u64, node: NodeId, lease: u64, ttl_ms: u64) -> bool {
        self.expire(now_ms);
        if self.registrations.get(&node).map(|(_, held)| *held) != Some(lease) {
            return false;
        }
        match self.leases.get_mut(&lease) {
            Some(live) => {
                live.expires_ms = now_ms + ttl_ms;
                true
            }
            None => false,
        }
    }

    pub fn live(&mut self, now_ms: u64) -> LiveBrokers {
        self.expire(now_ms);
        self.registrations
            .iter()
            .map(|(node, (incarnation, _))| (*node, *incarnation))
            .collect()
    }

    /// The store's revision (after expiring what is due): every registration, expiry and
    /// applied compare-and-swap raises it.
    pub fn revision(&mut self, now_ms: u64) -> i64 {
        self.expire(now_ms);
        self.revision
    }

    pub fn read(&mut self, now_ms: u64) -> Vec<PartitionView> {
        self.expire(now_ms);
        (0..self.partitions.len())
            .map(|partition| self.view(partition))
            .collect()
    }

    /// Compare-and-swap on a partition key: `Some(new revision)` if applied.
    pub fn compare_and_swap(
        &mut self,
        now_ms: u64,
        partition: usize,
        expected_revision: i64,
        state: PartitionState,
    ) -> Option<i64> {
        self.expire(now_ms);
        // A deleted key has no revision to match: a proposal read before the delete fails.
        let current = self.partitions[partition].as_ref()?;
        if current.revision != expected_revision {
            return None;
        }
        let old = current.value.clone();
        self.audit(partition, &old, &state);
        let (_, lineage) = self.topics[partition].as_ref().expect("present");
        let lineage = &mut self.lineages[*lineage as usize];
        lineage.highest_epoch = lineage.highest_epoch.max(state.leader_epoch);
        if lineage.below_floor(state.leader_epoch) {
            let rule = format!(
                "leader epoch {} of lineage {} is not above the floor {} it was created over",
                state.leader_epoch, lineage.id, lineage.floor_below
            );
            self.violations
                .push(format!("partition {partition}: {rule}"));
        }
        self.revision += 1;
        self.partitions[partition] = Some(Versioned {
            value: state.clone(),
            revision: self.revision,
        });
        self.changes.push((now_ms, partition, old, state));
        Some(self.revision)
    }

    /// Partition `partition`'s state, or `None` while its topic is deleted.
    pub fn partition(&self, partition: usize) -> Option<&Versioned<PartitionState>> {
        self.partitions[partition].as_ref()
    }

    /// The lineage id partition `partition`'s topic has now, or `None` while deleted.
    pub fn lineage_of(&self, partition: usize) -> Option<u32> {
        self.topics[partition].as_ref().map(|(_, id)| *id)
    }

    fn audit(&mut self, partition: usize, old: &PartitionState, new: &PartitionState) {
        let mut broke = |rule: String| {
            self.violations
                .push(format!("partition {partition}: {rule}: {old:?} -> {new:?}"))
        };
        if new.replicas != old.replicas || new.min_insync != old.min_insync {
            broke("replicas or min_insync changed".into());
        }
        if new.leader_epoch < old.leader_epoch {
            broke("leader epoch went down".into());
        }
        if new.leader != old.leader && new.leader_epoch != old.leader_epoch + 1 {
            broke("leader changed without a new epoch".into());
        }
        if new.leader_epoch != old.leader_epoch {
            if new.leader_epoch != old.leader_epoch + 1 {
                broke("leader epoch skipped".into());
            }
            match new.leader {
                Some(leader) if !old.isr.contains(&leader) => {
                    broke(format!("unclean election of {leader}"))
                }
                _ => {}
            }
            if new.isr.iter().any(|n| !old.isr.contains(n)) {
                broke("an election added to the ISR".into());
            }
        }
        if let Some(leader) = new.leader {
            if !new.isr.contains(&leader) {
                broke("leader not in its ISR".into());
            }
        }
    }
}
