//! A cluster group coordinator's record of the consumer positions that transactions hold: a
//! Kafka consumer's `sendOffsetsToTransaction` sends TxnOffsetCommit to the group's
//! coordinator, which hands the positions to the transactional id's coordinator (often another
//! broker, where they wait in the transaction's replicated state) and remembers here that
//! they are held. Until that coordinator tells the outcome (`EndTxnOffsets`), OffsetFetch with
//! `require_stable` answers those partitions `UNSTABLE_OFFSET_COMMIT`, as Kafka's group
//! coordinator does, so a consumer taking the partitions over does not start from a position
//! the transaction is about to move.
//!
//! In memory only: a group coordinator that moves forgets what it held, and its successor
//! answers `require_stable` from the committed positions until the outcome arrives (the
//! positions themselves are safe in the transaction's state). Bounded in time: a hold older
//! than [`MAX_HOLD`] (the longest transaction timeout and then some) is dropped, so a lost
//! outcome never blocks readers for ever.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a hold lasts at most: the longest transaction timeout (15 minutes), plus the
/// time a coordinator may take to write a timed-out transaction's outcome.
pub const MAX_HOLD: Duration = Duration::from_secs(20 * 60);

/// The most partitions held at once on one broker; beyond it the oldest holds are dropped
/// (their partitions answer stable early, never wrongly committed).
pub const MAX_HELD_PARTITIONS: usize = 100_000;

type Key = (String, String, i32);

/// The positions held by transactions: (group, topic, partition) → (transactional id, since).
#[derive(Debug, Default)]
pub struct HeldOffsets {
    held: Mutex<HashMap<Key, (String, Instant)>>,
}

impl HeldOffsets {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (String, Instant)>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `transactional_id` holds `partitions` of `group` from now.
    pub fn hold(&self, group: &str, transactional_id: &str, partitions: &[(String, i32)]) {
        let mut held = self.held();
        let now = Instant::now();
        held.retain(|_, (_, since)| now.duration_since(*since) < MAX_HOLD);
        while held.len() + partitions.len() > MAX_HELD_PARTITIONS {
            let Some(oldest) = held
                .iter()
                .min_by_key(|(_, (_, since))| *since)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            held.remove(&oldest);
        }
        for (topic, partition) in partitions {
            held.insert(
                (group.to_string(), topic.clone(), *partition),
                (transactional_id.to_string(), now),
            );
        }
    }

    /// `transactional_id` no longer holds `partitions` of `group` (its hand-over was refused).
    pub fn release_partitions(
        &self,
        group: &str,
        transactional_id: &str,
        partitions: &[(String, i32)],
    ) {
        let mut held = self.held();
        for (topic, partition) in partitions {
            let key = (group.to_string(), topic.clone(), *partition);
            if held.get(&key).is_some_and(|(id, _)| id == transactional_id) {
                held.remove(&key);
            }
        }
    }

    /// `transactional_id`'s transaction ended: it holds nothing of `group` any more.
    pub fn release(&self, group: &str, transactional_id: &str) {
        self.held()
            .retain(|(held_group, _, _), (id, _)| held_group != group || id != transactional_id);
    }

    /// Whether a transaction holds `group`'s position in `topic`-`partition`.
    pub fn holds(&self, group: &str, topic: &str, partition: i32) -> bool {
        self.held()
            .get(&(group.to_string(), topic.to_string(), partition))
            .is_some_and(|(_, since)| since.elapsed() < MAX_HOLD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_until_the_outcome_and_only_by_its_transaction() {
        let held = HeldOffsets::default();
        let partitions = [("in".to_string(), 0), ("in".to_string(), 1)];
        held.hold("g", "tx-a", &partitions);
        assert!(held.holds("g", "in", 1));
        assert!(!held.holds("other", "in", 1));
        held.release("g", "tx-b");
        assert!(held.holds("g", "in", 0), "another transaction's outcome");
        held.release_partitions("g", "tx-a", &partitions[..1]);
        assert!(!held.holds("g", "in", 0));
        assert!(held.holds("g", "in", 1));
        held.release("g", "tx-a");
        assert!(!held.holds("g", "in", 1));
    }
}
