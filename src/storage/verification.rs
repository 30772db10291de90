//! A replicated partition's leader checks, before it writes the first batch of a Kafka
//! transaction, that the transaction's coordinator (often another broker) has the partition in
//! that producer's open transaction (KIP-890's verification). Without it a batch delayed past
//! its own transaction's marker would open a transaction no marker closes, and read_committed
//! readers would stop there for good (Kafka's "hanging transaction").
//!
//! A check at the coordinator followed by an append at the leader races the coordinator's
//! marker: the coordinator answers "ongoing", the transaction ends and its marker lands, then
//! the batch lands after it. So the question lives in the partition's producer state, under
//! the fence lock with the appends:
//!
//! 1. **Before** the leader asks the coordinator it records an entry for the producer id and
//!    producer epoch ([`Verifications::begin`]) and gets the entry's guard (a number).
//! 2. Any marker of that producer removes the entry ([`Verifications::on_marker`]).
//! 3. Once the coordinator says "ongoing", the append carries the guard into the writer's
//!    critical section, and a transactional batch that would open a transaction there is
//!    taken only while the entry with that guard is still present ([`Verifications::check`]).
//!
//! Recording the entry *after* the answer would not do: the answer can be overtaken by the
//! marker on the network. Requests asked while one entry stands share its guard (each asked
//! after the entry was made, so a marker since would have removed it); a marker starts a new
//! generation, and an older request's guard no longer matches. A refused batch is retried:
//! the coordinator then answers that the transaction is over.
//!
//! In memory only and bounded ([`MAX_PENDING_VERIFICATIONS`]): a new leader asks again, and an
//! entry pushed out only makes its request retry.

use std::collections::HashMap;

/// The most producers one partition keeps a pending verification for; beyond it the oldest
/// entry is dropped (its request is refused, and retried).
pub const MAX_PENDING_VERIFICATIONS: usize = 4096;

/// A pending verification: the producer epoch it was asked for and its guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pending {
    producer_epoch: i16,
    guard: u64,
}

/// The pending verifications of one partition, by producer id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verifications {
    pending: HashMap<i64, Pending>,
    /// The last guard handed out (guards are never reused while the partition is open).
    last_guard: u64,
}

impl Verifications {
    /// The guard of `producer_id`'s pending verification at `producer_epoch`, recorded now if
    /// there is none (or one of another producer epoch).
    pub fn begin(&mut self, producer_id: i64, producer_epoch: i16) -> u64 {
        if let Some(pending) = self.pending.get(&producer_id) {
            if pending.producer_epoch == producer_epoch {
                return pending.guard;
            }
        }
        if self.pending.len() >= MAX_PENDING_VERIFICATIONS
            && !self.pending.contains_key(&producer_id)
        {
            let oldest = self
                .pending
                .iter()
                .min_by_key(|(_, pending)| pending.guard)
                .map(|(&producer_id, _)| producer_id);
            if let Some(oldest) = oldest {
                self.pending.remove(&oldest);
            }
        }
        self.last_guard += 1;
        let guard = self.last_guard;
        self.pending.insert(
            producer_id,
            Pending {
                producer_epoch,
                guard,
            },
        );
        guard
    }

    /// Whether a batch of `producer_id` at `producer_epoch` carrying `guard` may open a
    /// transaction: its verification is still pending with that guard.
    pub fn check(&self, producer_id: i64, producer_epoch: i16, guard: Option<u64>) -> bool {
        let Some(guard) = guard else {
            return false;
        };
        self.pending.get(&producer_id)
            == Some(&Pending {
                producer_epoch,
                guard,
            })
    }

    /// A marker of `producer_id` was appended: its transaction here ended, and whatever was
    /// asked before no longer vouches for a batch.
    pub fn on_marker(&mut self, producer_id: i64) {
        self.pending.remove(&producer_id);
    }

    /// `producer_id`'s transaction opened here: later batches of it need no verification.
    pub fn on_opened(&mut self, producer_id: i64) {
        self.pending.remove(&producer_id);
    }

    /// Forgets every pending verification (the partition changed role, or its log was cut):
    /// requests in flight are refused and retried.
    pub fn clear(&mut self) {
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_ends_a_generation_and_its_guards() {
        let mut verifications = Verifications::default();
        let first = verifications.begin(7, 0);
        assert_eq!(verifications.begin(7, 0), first, "asked meanwhile: shared");
        assert!(verifications.check(7, 0, Some(first)));
        assert!(!verifications.check(7, 1, Some(first)), "another epoch");
        assert!(!verifications.check(7, 0, None), "never asked");
        verifications.on_marker(7);
        assert!(
            !verifications.check(7, 0, Some(first)),
            "overtaken by a marker"
        );
        let second = verifications.begin(7, 0);
        assert_ne!(second, first);
        assert!(
            !verifications.check(7, 0, Some(first)),
            "an older request's answer"
        );
        assert!(verifications.check(7, 0, Some(second)));
    }

    #[test]
    fn bounded_by_dropping_the_oldest() {
        let mut verifications = Verifications::default();
        let oldest = verifications.begin(0, 0);
        for producer_id in 1..MAX_PENDING_VERIFICATIONS as i64 {
            verifications.begin(producer_id, 0);
        }
        let newest = verifications.begin(-5, 0);
        assert!(!verifications.check(0, 0, Some(oldest)));
        assert!(verifications.check(-5, 0, Some(newest)));
        assert_eq!(verifications.pending.len(), MAX_PENDING_VERIFICATIONS);
    }
}
