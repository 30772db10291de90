//! An in-memory stand-in for etcd, synchronous and deterministic: one revision counter, partition
//! keys changed only by compare-and-swap on their revision, and broker registrations under leases
//! that expire by the simulated clock. Every applied change is audited against the election and
//! ISR rules (the store is the one place that sees every state a partition went through).

use std::collections::BTreeMap;

use fencelog::cluster::replication::LiveBrokers;
use fencelog::cluster::{NodeId, PartitionState, Versioned};

#[derive(Debug)]
struct Lease {
    expires_ms: u64,
}

#[derive(Debug, Default)]
pub struct Store {
    revision: i64,
    partitions: Vec<Versioned<PartitionState>>,
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
        for state in partitions {
            store.revision += 1;
            store.partitions.push(Versioned {
                value: state,
                revision: store.revision,
            });
        }
        store
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

    pub fn read(&mut self, now_ms: u64) -> Vec<Versioned<PartitionState>> {
        self.expire(now_ms);
        self.partitions.clone()
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
        let current = &self.partitions[partition];
        if current.revision != expected_revision {
            return None;
        }
        let old = current.value.clone();
        self.audit(partition, &old, &state);
        self.revision += 1;
        self.partitions[partition] = Versioned {
            value: state.clone(),
            revision: self.revision,
        };
        self.changes.push((now_ms, partition, old, state));
        Some(self.revision)
    }

    pub fn partition(&self, partition: usize) -> &Versioned<PartitionState> {
        &self.partitions[partition]
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
