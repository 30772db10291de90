//! The cluster's vocabulary that every layer names: a broker's id, a partition's leader epoch,
//! and how a producer epoch packs the leader epoch it was granted under.
//!
//! Why here and not in `crate::cluster`: storage checks leader epochs in its fence, the native
//! protocol and the client carry node ids and leader epochs on the wire, and the broker decides
//! with them; none of those should depend on the replication machinery to name a number.

use std::fmt;
use std::str::FromStr;

/// A broker's identity in the cluster (`serve --node-id N`), stable across restarts.
pub type NodeId = u32;

/// The leader epoch of a partition: raised by one (by etcd compare-and-swap) on every change of
/// leader. It fences a deposed leader at the followers, as the producer epoch fences a deposed
/// producer at the leader.
pub type LeaderEpoch = u32;

/// The producer epoch a partition's leader installs when it takes over in `leader_epoch`, before
/// it serves anything: `leader_epoch << 32`. Every lease grant by this leader is above it (a
/// grant is `current + 1`) and below every grant of any later leader, so grants by a deposed
/// leader and by its successor can never collide, without an etcd round trip per grant. Like a
/// creation epoch it is installed, never granted.
pub fn producer_epoch_base(leader_epoch: LeaderEpoch) -> u64 {
    u64::from(leader_epoch) << 32
}

/// The leader epoch a producer epoch was granted under (the inverse of
/// [`producer_epoch_base`]).
pub fn leader_epoch_of_producer_epoch(producer_epoch: u64) -> LeaderEpoch {
    (producer_epoch >> 32) as LeaderEpoch
}

/// When a produce is acknowledged (the native Produce version 1 and Kafka's `acks`; the numbers
/// are Kafka's wire values). A request without `acks` gets the broker's default: `All` on a
/// replicated partition, `Leader` otherwise. `acks=0` (no answer at all) is not offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Acks {
    /// Once the leader appended the batch (and, under flush `always`, synced it). Wire value 1.
    Leader,
    /// Once every in-sync replica has it (the high watermark passed it), and only while the
    /// partition has at least `min_insync` in-sync replicas. Wire value -1.
    All,
}

impl Acks {
    /// The wire value (Kafka's): 1 or -1.
    pub fn as_i16(self) -> i16 {
        match self {
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }

    /// The `acks` for a wire value; `None` for anything but 1 and -1 (0 included: not offered).
    pub fn from_i16(value: i16) -> Option<Acks> {
        match value {
            1 => Some(Acks::Leader),
            -1 => Some(Acks::All),
            _ => None,
        }
    }

    /// The name the CLI uses: `leader` or `all`.
    pub fn name(self) -> &'static str {
        match self {
            Acks::Leader => "leader",
            Acks::All => "all",
        }
    }
}

impl fmt::Display for Acks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Acks {
    type Err = String;

    /// `leader` (or `1`) and `all` (or `-1`).
    fn from_str(text: &str) -> Result<Acks, String> {
        match text {
            "leader" | "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            other => Err(format!(
                "acks {other:?} is not offered: use `all` (every in-sync replica) or `leader`"
            )),
        }
    }
}

/// How a topic's partitions are replicated (`--replication-factor`, `--min-insync`; the native
/// CreateTopic version 1, Kafka's `replication_factor` and `min.insync.replicas`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Replication {
    /// How many brokers hold a copy of each partition (1: no replication). A standalone server
    /// accepts only 1.
    pub factor: u16,
    /// The smallest in-sync replica set with which the leader accepts `acks=all` writes;
    /// `None` (0 on the wire): the default, `min(2, factor)`.
    pub min_insync: Option<u16>,
}

impl Replication {
    /// `min_insync` with its default applied: `min(2, factor)`.
    pub fn effective_min_insync(&self) -> u16 {
        self.min_insync.unwrap_or(self.factor.min(2))
    }

    /// Why these settings can never be honoured, whatever the cluster (`None`: they can).
    pub fn invalid(&self) -> Option<String> {
        if self.factor == 0 {
            return Some("replication factor 0: every partition needs at least one copy".into());
        }
        let min_insync = self.effective_min_insync();
        if min_insync > self.factor {
            return Some(format!(
                "min_insync {min_insync} is above the replication factor {}: no write could ever be acknowledged with acks=all",
                self.factor
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_producer_epoch_base_round_trips_to_its_leader_epoch() {
        for leader_epoch in [0, 1, 7, u32::MAX] {
            let base = producer_epoch_base(leader_epoch);
            assert_eq!(leader_epoch_of_producer_epoch(base), leader_epoch);
            assert_eq!(leader_epoch_of_producer_epoch(base + 1), leader_epoch);
        }
    }

    #[test]
    fn acks_wire_values_are_kafkas() {
        assert_eq!(Acks::from_i16(Acks::All.as_i16()), Some(Acks::All));
        assert_eq!(Acks::from_i16(Acks::Leader.as_i16()), Some(Acks::Leader));
        assert_eq!(Acks::from_i16(0), None);
    }
}
