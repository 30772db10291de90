//! Where a new topic's replicas go: a pure function of the live brokers, so that it can be
//! tested for spread and determinism without a cluster, and so that every broker that computed
//! it would compute the same thing.
//!
//! Kafka's rack-unaware assignment: brokers sorted by node id; partition `p`'s first replica
//! (its preferred leader) is broker `(start + p) mod n`; the other replicas follow it at a
//! distance that shifts by one every `n` partitions, so that neither leaders nor followers pile
//! up on a few brokers. Kafka picks `start` and the first shift at random; here `start` is given
//! (derived from the topic name by [`topic_start`]) and the shift starts at 0, so the answer is
//! deterministic.
//!
//! The initial state of each partition: leader = the first replica, ISR = every replica (nothing
//! is written yet, so all are in sync), leader epoch [`INITIAL_LEADER_EPOCH`].

use thiserror::Error;

use crate::cluster::{LeaderEpoch, NodeId, PartitionState};

/// The leader epoch of a partition's first leader: 1, so that leader epoch 0 always means "no
/// leader epoch installed yet" on a replica (a fresh log's floor), never a real leader, and so
/// that the first leader's producer epoch base (`1 << 32`) is above every epoch a standalone
/// partition used.
pub const INITIAL_LEADER_EPOCH: LeaderEpoch = 1;

/// Why replicas could not be placed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PlacementError {
    /// Fewer live brokers than the replication factor: no partition could get distinct replicas.
    #[error(
        "replication factor {replication_factor} needs at least that many live brokers, but \
         {live} are registered; start more brokers or lower the replication factor"
    )]
    NotEnoughBrokers {
        /// Live brokers.
        live: usize,
        /// Replicas asked for.
        replication_factor: u16,
    },
    /// No partitions, or a replication factor of zero.
    #[error(
        "a topic needs at least one partition and one replica (asked for {partition_count} \
         partitions of {replication_factor} replicas)"
    )]
    Empty {
        /// Partitions asked for.
        partition_count: u32,
        /// Replicas asked for.
        replication_factor: u16,
    },
}

/// The initial states of `partition_count` partitions of `replication_factor` replicas each,
/// spread over `live_brokers` (order and duplicates do not matter) starting at broker index
/// `start` (taken modulo the broker count). `min_insync` is copied into each state.
pub fn place_replicas_from(
    live_brokers: &[NodeId],
    partition_count: u32,
    replication_factor: u16,
    min_insync: u16,
    start: u32,
) -> Result<Vec<PartitionState>, PlacementError> {
    if partition_count == 0 || replication_factor == 0 {
        return Err(PlacementError::Empty {
            partition_count,
            replication_factor,
        });
    }
    let mut brokers = live_brokers.to_vec();
    brokers.sort_unstable();
    brokers.dedup();
    let count = brokers.len();
    if count < usize::from(replication_factor) {
        return Err(PlacementError::NotEnoughBrokers {
            live: count,
            replication_factor,
        });
    }
    let start = start as usize % count;
    let mut shift = 0usize;
    let mut states = Vec::with_capacity(partition_count as usize);
    for partition in 0..partition_count as usize {
        if partition > 0 && partition.is_multiple_of(count) {
            shift += 1;
        }
        let first = (start + partition) % count;
        let mut replicas = Vec::with_capacity(usize::from(replication_factor));
        replicas.push(brokers[first]);
        for follower in 0..usize::from(replication_factor) - 1 {
            // Kafka's replicaIndex: never `first` again, and distinct for distinct `follower`
            // (`(shift + follower) mod (count - 1)` takes `replication_factor - 1 <= count - 1`
            // distinct values).
            let distance = 1 + (shift + follower) % (count - 1);
            replicas.push(brokers[(first + distance) % count]);
        }
        states.push(PartitionState {
            leader: Some(replicas[0]),
            leader_epoch: INITIAL_LEADER_EPOCH,
            isr: replicas.clone(),
            replicas,
            min_insync,
        });
    }
    Ok(states)
}

/// [`place_replicas_from`] starting where [`topic_start`] says for a topic of this name.
pub fn place_replicas(
    live_brokers: &[NodeId],
    topic: &str,
    partition_count: u32,
    replication_factor: u16,
    min_insync: u16,
) -> Result<Vec<PartitionState>, PlacementError> {
    place_replicas_from(
        live_brokers,
        partition_count,
        replication_factor,
        min_insync,
        topic_start(topic),
    )
}

/// A start index derived from the topic name (FNV-1a), stable across versions and machines, so
/// that many one-partition topics do not all get their leader on the lowest node id.
pub fn topic_start(topic: &str) -> u32 {
    const FNV_OFFSET_BASIS: u32 = 0x811c_9dc5;
    const FNV_PRIME: u32 = 0x0100_0193;
    topic.bytes().fold(FNV_OFFSET_BASIS, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    fn counts(values: impl Iterator<Item = NodeId>) -> BTreeMap<NodeId, usize> {
        let mut counts = BTreeMap::new();
        for value in values {
            *counts.entry(value).or_insert(0) += 1;
        }
        counts
    }

    /// Kafka's layout for 3 brokers, 6 partitions, 2 replicas, start 0: leaders round robin,
    /// followers shift by one after each round.
    #[test]
    fn layout_matches_kafka_round_robin_with_shift() {
        let states = place_replicas_from(&[1, 2, 3], 6, 2, 2, 0).unwrap();
        let replicas: Vec<Vec<NodeId>> = states.iter().map(|s| s.replicas.clone()).collect();
        assert_eq!(
            replicas,
            vec![
                vec![1, 2],
                vec![2, 3],
                vec![3, 1],
                vec![1, 3],
                vec![2, 1],
                vec![3, 2]
            ]
        );
    }

    /// Leaders and replicas are spread evenly: with partitions a multiple of the broker count,
    /// every broker leads the same number of partitions and holds the same number of replicas.
    #[test]
    fn leaders_and_replicas_are_spread_evenly() {
        for brokers in 1..=7u32 {
            let live: Vec<NodeId> = (10..10 + brokers).collect();
            for replication_factor in 1..=brokers.min(4) as u16 {
                for start in [0, 5, 11] {
                    let partition_count = brokers * 4;
                    let states =
                        place_replicas_from(&live, partition_count, replication_factor, 1, start)
                            .unwrap();
                    let leaders = counts(states.iter().map(|s| s.leader.unwrap()));
                    assert!(leaders.values().all(|&n| n == 4), "{leaders:?}");
                    let replicas = counts(states.iter().flat_map(|s| s.replicas.clone()));
                    let each = 4 * usize::from(replication_factor);
                    assert!(replicas.values().all(|&n| n == each), "{replicas:?}");
                    for state in &states {
                        let distinct: BTreeSet<_> = state.replicas.iter().collect();
                        assert_eq!(distinct.len(), usize::from(replication_factor));
                    }
                }
            }
        }
    }

    /// The same input gives the same placement, whatever the order of the broker list.
    #[test]
    fn placement_is_deterministic() {
        let one = place_replicas(&[3, 1, 2, 2], "orders", 8, 3, 2).unwrap();
        let two = place_replicas(&[1, 2, 3], "orders", 8, 3, 2).unwrap();
        assert_eq!(one, two);
    }

    /// The initial state: leader = first replica, ISR = all replicas, leader epoch 1.
    #[test]
    fn initial_state_is_led_by_the_first_replica() {
        for state in place_replicas(&[1, 2, 3, 4], "t", 5, 3, 2).unwrap() {
            assert_eq!(state.leader, Some(state.replicas[0]));
            assert_eq!(state.isr, state.replicas);
            assert_eq!(state.leader_epoch, INITIAL_LEADER_EPOCH);
            assert_eq!(state.min_insync, 2);
        }
    }

    /// Fewer live brokers than the replication factor is an error naming both numbers.
    #[test]
    fn too_few_brokers_is_an_error() {
        assert_eq!(
            place_replicas(&[1, 2], "t", 1, 3, 2),
            Err(PlacementError::NotEnoughBrokers {
                live: 2,
                replication_factor: 3
            })
        );
        assert!(place_replicas(&[1, 2], "t", 0, 1, 1).is_err());
    }

    /// Different topic names start at different brokers, so single-partition topics spread.
    #[test]
    fn single_partition_topics_spread_over_brokers() {
        let leaders: BTreeSet<NodeId> = (0..30)
            .map(|n| {
                place_replicas(&[1, 2, 3], &format!("topic-{n}"), 1, 1, 1).unwrap()[0]
                    .leader
                    .unwrap()
            })
            .collect();
        assert_eq!(leaders.len(), 3);
    }
}
