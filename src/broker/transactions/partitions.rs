//! How the transaction coordinator reaches the partitions its transactions write: their leases
//! (held as [`super::TRANSACTIONS_LEASE_HOLDER`]) and their markers.
//!
//! Why a seam here: a standalone broker holds every partition itself, so the coordinator asks
//! its own lease service and produce path ([`LocalPartitions`]); on a cluster a transaction's partitions are led by
//! other brokers, and the coordinator will reach them as a native client of its cluster
//! (docs/kafka.md, "Transactions on a cluster", step 2), through the same calls. The
//! coordinator's state machine, its registry and its timeout task do not change with where the
//! partitions are.

use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::broker::group_service::{CommitBound, GroupService};
use crate::broker::lease_service::LeaseService;
use crate::broker::produce_path::{ProducePath, ProduceRequest};
use crate::broker::producer_ids::ProducerIdSource;
use crate::broker::{blocking, Broker, BrokerError, CommittedOffset};
use crate::domain::Acks;
use crate::lease::Grant;
use crate::storage::{FlushPolicy, Partition, WriteCredential};

/// The leases and markers of the partitions transactions write.
pub trait TransactionPartitions: Send + Sync + std::fmt::Debug {
    /// The transactions' lease on `topic`/`partition` for `ttl_ms` (a grant installed in the
    /// partition's writer before it is answered).
    fn acquire<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<Grant, BrokerError>>;

    /// Extends the lease `lease_id` on `topic`/`partition`.
    fn renew<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        lease_id: u128,
    ) -> BoxFuture<'a, Result<(), BrokerError>>;

    /// Ends the lease `lease_id` on `topic`/`partition`.
    fn release<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        lease_id: u128,
    ) -> BoxFuture<'a, Result<(), BrokerError>>;

    /// Writes the control batch `marker` to `topic`/`partition` under the lease epoch
    /// `lease_epoch`, with `acks=all`: `Ok` once it is committed, and standalone once it is
    /// synced whatever the partition's flush policy (see [`sync_marker`]). Through the fence in
    /// the partition's segment writer like every append.
    fn write_marker<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        lease_epoch: u64,
        marker: Bytes,
    ) -> BoxFuture<'a, Result<(), BrokerError>>;

    /// The leader epoch of `topic`/`partition` as this broker sees it (`None` standalone,
    /// where leases never move): a lease acquired in one leader epoch is not in the next
    /// leader's table.
    fn leader_epoch(&self, topic: &str, partition: u32) -> Option<u32>;

    /// Tells `group`'s coordinator (this broker standalone, the leader of the group's offsets
    /// partition on a cluster) that `transactional_id`'s transaction ended: committed, its
    /// consumer positions `offsets` are stored; either way the group's positions are no longer
    /// held by it. Repeating it is harmless.
    fn end_offsets<'a>(
        &'a self,
        group: &'a str,
        transactional_id: &'a str,
        commit: bool,
        offsets: Vec<(String, u32, CommittedOffset)>,
    ) -> BoxFuture<'a, Result<(), BrokerError>>;
}

/// What the transaction coordinator needs of the broker, handed to it at assembly (it holds
/// no handle on the broker service above it).
#[derive(Debug, Clone)]
pub struct TransactionParts {
    /// The broker's partitions (the epoch current on each, the atomic commit's fence locks).
    pub broker: Arc<Broker>,
    /// New producer ids for transactional ids.
    pub producer_ids: ProducerIdSource,
    /// The consumer groups whose positions transactions commit.
    pub groups: GroupService,
    /// The leader rule a transactional write at a cluster partition's leader follows.
    pub reads: crate::broker::reads::ReadPath,
    /// The lease table a cluster leader's transactional writes find the transactions' lease in.
    pub leases: Arc<dyn crate::lease::LeaseAuthority>,
}

/// A standalone broker's partitions: leased and written through the broker's own lease
/// service and produce path, their groups' positions committed by its group service; its
/// markers synced in `broker`'s partitions.
#[derive(Debug)]
pub struct LocalPartitions {
    leases: LeaseService,
    producing: ProducePath,
    groups: GroupService,
    broker: Arc<Broker>,
}

impl LocalPartitions {
    /// The partitions `leases` leases and `producing` writes (`broker`'s); positions
    /// committed in `groups`.
    pub fn new(
        leases: LeaseService,
        producing: ProducePath,
        groups: GroupService,
        broker: Arc<Broker>,
    ) -> Self {
        Self {
            leases,
            producing,
            groups,
            broker,
        }
    }
}

/// Makes `partition` durable through its log end, a marker just written included, unless its
/// flush policy already synced the marker before acknowledging it (`always`). Blocking.
///
/// Why, under `interval` and `never`: the coordinator records the transaction `Complete*`
/// durably once its markers are written, and then never writes them again. A power cut that
/// kept the transaction's batches (synced by an interval, a seal or a graceful restart) but
/// lost the marker after them would leave them an open transaction no marker ever closes:
/// read_committed readers stopped at the first of them for good (`tests/cli/power_loss.rs`).
/// The cost is one sync per such partition per transaction end.
pub(super) fn sync_marker(partition: &Partition) -> Result<(), BrokerError> {
    if partition.config().flush == FlushPolicy::Always {
        return Ok(());
    }
    partition.sync()?;
    Ok(())
}

impl TransactionPartitions for LocalPartitions {
    fn acquire<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<Grant, BrokerError>> {
        Box::pin(self.leases.acquire(
            topic,
            partition,
            super::TRANSACTIONS_LEASE_HOLDER.to_string(),
            ttl_ms,
        ))
    }

    fn renew<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        lease_id: u128,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        Box::pin(async move {
            self.leases.renew(topic, partition, lease_id).await?;
            Ok(())
        })
    }

    fn release<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        lease_id: u128,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        Box::pin(self.leases.release(topic, partition, lease_id))
    }

    fn write_marker<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        lease_epoch: u64,
        marker: Bytes,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        // Submitted to the produce queue now, before the caller awaits any marker.
        let broker = Arc::clone(&self.broker);
        let topic_name = topic.to_string();
        let written = self.producing.produce(
            &self.producing.queue(),
            ProduceRequest {
                topic: topic.to_string(),
                partition,
                credential: WriteCredential::Epoch(lease_epoch),
                batch: marker.into(),
                verification: None,
            },
            Some(Acks::All),
        );
        Box::pin(async move {
            written.await?;
            blocking(move || sync_marker(&*broker.partition(&topic_name, partition)?)).await
        })
    }

    fn leader_epoch(&self, _topic: &str, _partition: u32) -> Option<u32> {
        None
    }

    fn end_offsets<'a>(
        &'a self,
        group: &'a str,
        _transactional_id: &'a str,
        commit: bool,
        offsets: Vec<(String, u32, CommittedOffset)>,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        // Standalone the coordinator's own registry says which positions a transaction holds.
        Box::pin(async move {
            if !commit {
                return Ok(());
            }
            self.groups
                .commit_offsets_within(group.to_string(), offsets, CommitBound::Existence)
                .await
                .written
        })
    }
}
