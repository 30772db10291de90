//! What the client knows about the cluster: the brokers' addresses and, per partition, its
//! leader, leader epoch and replica count, learnt from `Metadata` version 1 and from the leader
//! hints of `NOT_LEADER` answers.
//!
//! Why leader epochs decide which news wins: answers arrive from different brokers at different
//! times, and a broker behind on metadata may name an old leader. A route is replaced only by
//! one of the same or a newer leader epoch, so the cache never goes back to a deposed leader.
//!
//! A cache that knows a single broker (a standalone server, or a one-broker cluster) routes
//! nothing: every request goes to the bootstrap connection, exactly as a client without this
//! cache would, which keeps proxies, tunnels and port forwards in front of one server working.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::domain::{LeaderEpoch, NodeId};
use crate::protocol::ClusterMetadata;

/// Longest the client trusts its metadata without asking again (Kafka's `metadata.max.age.ms`
/// default): after this a request first refreshes it.
pub const METADATA_MAX_AGE: Duration = Duration::from_secs(300);

/// The most partitions the cache remembers; a refresh that describes more keeps the first ones
/// (the others are routed through the bootstrap connection and learn their leader from
/// `NOT_LEADER` hints).
pub const MAX_CACHED_PARTITIONS: usize = 100_000;

/// Where one partition's requests go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    /// Its leader, if one is known.
    pub(crate) leader: Option<NodeId>,
    /// The leader epoch the route was learnt at.
    pub(crate) leader_epoch: LeaderEpoch,
    /// How many brokers hold a copy (0 when learnt from a hint only).
    pub(crate) replicas: usize,
}

/// The client's view of the cluster.
#[derive(Debug, Default)]
pub(crate) struct MetadataCache {
    brokers: HashMap<NodeId, String>,
    partitions: HashMap<(String, u32), Route>,
    /// Partitions per topic, as the last full answer listed them.
    partition_counts: HashMap<String, u32>,
    /// When a full `Metadata` answer was last applied.
    refreshed_at: Option<Instant>,
    /// An answer said the view is out of date: refresh before the next routed request.
    stale: bool,
    /// The last full answer listed a single broker and no hint named another since: route
    /// nothing.
    single_broker: bool,
    /// The bootstrap server does not know `Metadata` version 1 (an older server): route
    /// nothing, never ask again.
    unsupported: bool,
}

impl MetadataCache {
    /// Whether a routed request should refresh the view first: it was marked stale, or it is
    /// older than [`METADATA_MAX_AGE`]. Never for a server without cluster metadata.
    pub(crate) fn needs_refresh(&self, now: Instant) -> bool {
        if self.unsupported {
            return false;
        }
        self.stale
            || self
                .refreshed_at
                .is_some_and(|at| now.saturating_duration_since(at) >= METADATA_MAX_AGE)
    }

    /// Applies a full `Metadata` version-1 answer: the broker list is replaced, each partition's
    /// route unless the cache already knows a newer leader epoch for it.
    pub(crate) fn apply(&mut self, cluster: &ClusterMetadata, now: Instant) {
        self.brokers = cluster
            .brokers
            .iter()
            .map(|broker| (broker.node_id, broker.address.clone()))
            .collect();
        for partition in &cluster.partitions {
            let key = (partition.topic.clone(), partition.partition);
            if !self.partitions.contains_key(&key) && self.partitions.len() >= MAX_CACHED_PARTITIONS
            {
                continue;
            }
            let route = Route {
                leader: partition.leader,
                leader_epoch: partition.leader_epoch,
                replicas: partition.replicas.len(),
            };
            self.learn(key, route);
        }
        self.partition_counts.clear();
        for partition in &cluster.partitions {
            let count = self
                .partition_counts
                .entry(partition.topic.clone())
                .or_default();
            *count = (*count).max(partition.partition.saturating_add(1));
        }
        self.single_broker = self.brokers.len() <= 1;
        self.refreshed_at = Some(now);
        self.stale = false;
    }

    /// A `NOT_LEADER` answer named `leader` at `address` in `leader_epoch`.
    pub(crate) fn learn_leader(
        &mut self,
        topic: &str,
        partition: u32,
        leader: NodeId,
        address: &str,
        leader_epoch: LeaderEpoch,
    ) {
        let key = (topic.to_owned(), partition);
        let replicas = self.partitions.get(&key).map_or(0, |route| route.replicas);
        if self.learn(
            key,
            Route {
                leader: Some(leader),
                leader_epoch,
                replicas,
            },
        ) {
            self.brokers.insert(leader, address.to_owned());
            // Another broker than the one asked leads: there is more than one.
            self.single_broker = false;
        }
    }

    /// Takes `route` unless the cache knows a newer leader epoch; true if it was taken.
    fn learn(&mut self, key: (String, u32), route: Route) -> bool {
        match self.partitions.get(&key) {
            Some(known) if known.leader_epoch > route.leader_epoch => false,
            _ => {
                self.partitions.insert(key, route);
                true
            }
        }
    }

    /// The view is out of date (an error said so, or a connection to a broker was lost).
    pub(crate) fn mark_stale(&mut self) {
        if !self.unsupported {
            self.stale = true;
        }
    }

    /// The bootstrap server answered `UNSUPPORTED_VERSION` to `Metadata` version 1.
    pub(crate) fn mark_unsupported(&mut self) {
        self.unsupported = true;
        self.stale = false;
    }

    /// Whether requests are routed at all: the cache knows more than one broker.
    pub(crate) fn routes(&self) -> bool {
        !self.unsupported && !self.single_broker && !self.brokers.is_empty()
    }

    /// The leader of `topic`/`partition` and its address, when requests for it should go
    /// there rather than to the bootstrap connection.
    pub(crate) fn leader_of(&self, topic: &str, partition: u32) -> Option<(NodeId, String)> {
        if !self.routes() {
            return None;
        }
        let leader = self
            .partitions
            .get(&(topic.to_owned(), partition))?
            .leader?;
        let address = self.brokers.get(&leader)?;
        Some((leader, address.clone()))
    }

    /// How many partitions `topic` has, if the last full answer listed it.
    pub(crate) fn partition_count(&self, topic: &str) -> Option<u32> {
        self.partition_counts.get(topic).copied()
    }

    /// How many brokers hold a copy of `topic`/`partition`, if a full answer said.
    pub(crate) fn replicas_of(&self, topic: &str, partition: u32) -> Option<usize> {
        self.partitions
            .get(&(topic.to_owned(), partition))
            .map(|route| route.replicas)
            .filter(|replicas| *replicas > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{BrokerMetadata, PartitionMetadata};

    fn cluster(leader: NodeId, leader_epoch: LeaderEpoch, brokers: u32) -> ClusterMetadata {
        ClusterMetadata {
            brokers: (0..brokers)
                .map(|node_id| BrokerMetadata {
                    node_id,
                    address: format!("127.0.0.1:{}", 7000 + node_id),
                })
                .collect(),
            partitions: vec![PartitionMetadata {
                topic: "orders".into(),
                partition: 0,
                leader: Some(leader),
                leader_epoch,
                replicas: (0..brokers).collect(),
                isr: (0..brokers).collect(),
                high_watermark: 0,
            }],
        }
    }

    #[test]
    fn a_single_broker_routes_nothing() {
        let mut cache = MetadataCache::default();
        cache.apply(&cluster(0, 0, 1), Instant::now());
        assert_eq!(cache.leader_of("orders", 0), None);
        assert_eq!(cache.replicas_of("orders", 0), Some(1));
    }

    #[test]
    fn an_older_leader_epoch_never_replaces_a_newer_route() {
        let mut cache = MetadataCache::default();
        cache.apply(&cluster(1, 5, 3), Instant::now());
        assert_eq!(
            cache.leader_of("orders", 0),
            Some((1, "127.0.0.1:7001".into()))
        );
        cache.learn_leader("orders", 0, 2, "127.0.0.1:7002", 6);
        assert_eq!(
            cache.leader_of("orders", 0),
            Some((2, "127.0.0.1:7002".into()))
        );
        // A broker behind on metadata still names node 1 in epoch 5: ignored.
        cache.apply(&cluster(1, 5, 3), Instant::now());
        assert_eq!(
            cache.leader_of("orders", 0),
            Some((2, "127.0.0.1:7002".into()))
        );
        assert_eq!(cache.replicas_of("orders", 0), Some(3));
    }

    #[test]
    fn a_hint_alone_is_enough_to_route() {
        let mut cache = MetadataCache::default();
        cache.learn_leader("orders", 0, 2, "127.0.0.1:7002", 1);
        assert_eq!(
            cache.leader_of("orders", 0),
            Some((2, "127.0.0.1:7002".into()))
        );
        assert_eq!(cache.replicas_of("orders", 0), None);
    }

    #[test]
    fn refreshes_when_stale_or_old_and_never_against_an_old_server() {
        let start = Instant::now();
        let mut cache = MetadataCache::default();
        assert!(!cache.needs_refresh(start));
        cache.mark_stale();
        assert!(cache.needs_refresh(start));
        cache.apply(&cluster(0, 0, 2), start);
        assert!(!cache.needs_refresh(start));
        assert!(cache.needs_refresh(start + METADATA_MAX_AGE));
        cache.mark_unsupported();
        cache.mark_stale();
        assert!(!cache.needs_refresh(start + METADATA_MAX_AGE));
        assert!(!cache.routes());
    }
}
