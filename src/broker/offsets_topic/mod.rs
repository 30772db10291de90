//! Committed offsets and group membership that survive a lost broker: in a cluster they live in
//! the replicated internal topic [`OFFSETS_TOPIC`] (Kafka's `__consumer_offsets` is the model),
//! not on one broker's disk.
//!
//! * A group belongs to one offsets partition, chosen by its id alone
//!   ([`offsets_partition`]); the **leader** of that partition is the group's coordinator. Every
//!   broker and client computes the same partition, so FindCoordinator (Kafka) and the native
//!   client's routing (a `NOT_LEADER` naming that partition's leader) agree without asking.
//! * A commit is one record ([`OffsetsRecord::Commit`]) appended to the partition with
//!   `acks=all` under flush `always`: acknowledged means fsynced on every in-sync replica, so
//!   it survives as data does. A deposed coordinator cannot acknowledge one: its append never
//!   reaches the high watermark, which the followers' leader epoch fence and the ISR's
//!   compare-and-swap in etcd guard (the same fence as any data partition's).
//! * A broker that becomes leader of an offsets partition **loads** it (waits until its high
//!   watermark covers its log end, so everything an earlier coordinator acknowledged is in,
//!   then replays the records into an [`OffsetsState`]) before it answers for any of its groups;
//!   meanwhile its groups answer `COORDINATOR_LOAD_IN_PROGRESS`. The load is tied to the leader
//!   epoch it was made in: a broker that loses and regains leadership loads again.
//! * Membership is persisted the same way ([`OffsetsRecord::Group`], see
//!   [`crate::broker::coordinator::GroupSnapshot`]) and restored into the group coordinator by
//!   the load, so a stable group stays stable across a coordinator move.
//! * A position carries the **lineage** of its topic (the leader epoch the topic's partitions
//!   started at, [`CommitEntry::lineage`]) and is read only while the topic in the cluster's
//!   view has that lineage: a deleted topic's positions are never read as those of a topic
//!   re-created under its name, without any write at delete time (a delete cannot fail half
//!   way through the offsets partitions).
//!
//! The topic is created by the first broker that needs it, with [`OffsetsTopicConfig`]'s
//! partitions and replication factor, and only once that many brokers are live: like Kafka's
//! `offsets.topic.replication.factor`, a cluster does not quietly create its offsets topic with
//! fewer copies than asked (groups answer `COORDINATOR_NOT_AVAILABLE`, saying why, until then).
//!
//! Not yet: the offsets topic is not compacted; its log grows by one small record per commit
//! and a takeover replays all of it (`docs/replication.md`, "Groups on a cluster").

mod record;
mod state;
mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::{mpsc, OnceCell};
use tracing::{debug, info, warn};

use super::cluster::{ClusterDriver, ClusterError};
use super::coordinator::{GroupCoordinator, GroupSnapshot};
use super::groups::{
    CommittedOffset, GroupOffsetsConfig, GroupOffsetsError, PartitionCommits, PartitionKey,
};
use super::{Broker, BrokerError};
use crate::domain::{FlushPolicy, LeaderEpoch, Replication, TopicConfig};
use crate::storage::WriteCredential;

pub use crate::domain::{offsets_partition, OFFSETS_TOPIC};
pub use record::{CommitEntry, OffsetsRecord, PartitionRef};
pub use state::OffsetsState;
pub use store::ReplicatedOffsetStore;

pub use super::cluster::offsets_config::{
    OffsetsTopicConfig, DEFAULT_OFFSETS_LOAD_WAIT, DEFAULT_OFFSETS_PARTITIONS,
    DEFAULT_OFFSETS_REPLICATION_FACTOR, OFFSETS_SEGMENT_BYTES,
};

/// Most group snapshots waiting to be appended; past it a snapshot is dropped (with a warning):
/// the group then rebalances if its coordinator moves, and nothing else is lost.
pub const GROUP_SNAPSHOT_QUEUE: usize = 1024;
/// Bytes read at a time while loading an offsets partition.
const LOAD_READ_BYTES: usize = 1024 * 1024;

impl OffsetsTopicConfig {
    /// The topic settings of the offsets topic: every commit synced before it is acknowledged.
    fn topic_config() -> TopicConfig {
        TopicConfig {
            segment_bytes: OFFSETS_SEGMENT_BYTES,
            flush: FlushPolicy::Always,
            ..TopicConfig::default()
        }
    }
}

/// One offsets partition this broker leads (or led), as loaded in one leader epoch.
#[derive(Debug)]
struct Slot {
    partition: u32,
    leader_epoch: LeaderEpoch,
    /// Set once the partition was read; a failed load leaves it unset for the next caller.
    loaded: OnceCell<()>,
    state: Mutex<OffsetsState>,
    /// Set when an append's outcome is unknown: the next request loads again rather than
    /// answer from a state that may lack a record the log has.
    stale: std::sync::atomic::AtomicBool,
}

impl Slot {
    fn state(&self) -> std::sync::MutexGuard<'_, OffsetsState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The replicated committed offsets of a cluster broker (see the module docs).
#[derive(Debug)]
pub struct ReplicatedOffsets {
    broker: Arc<Broker>,
    driver: Arc<ClusterDriver>,
    limits: GroupOffsetsConfig,
    slots: Mutex<HashMap<u32, Arc<Slot>>>,
    /// Held while this broker creates the offsets topic, so one request creates it.
    creating: tokio::sync::Mutex<()>,
    /// Snapshots to append, in the order the coordinator took them.
    snapshots: mpsc::Sender<(String, GroupSnapshot)>,
    snapshot_queue: Mutex<Option<mpsc::Receiver<(String, GroupSnapshot)>>>,
}

impl ReplicatedOffsets {
    /// The offsets of `broker`, a member of `driver`'s cluster, within `limits` (the same as
    /// standalone: group name, metadata, groups and positions per group).
    pub fn new(
        broker: Arc<Broker>,
        driver: Arc<ClusterDriver>,
        limits: GroupOffsetsConfig,
    ) -> Self {
        let (snapshots, queue) = mpsc::channel(GROUP_SNAPSHOT_QUEUE);
        Self {
            broker,
            driver,
            limits,
            slots: Mutex::new(HashMap::new()),
            creating: tokio::sync::Mutex::new(()),
            snapshots,
            snapshot_queue: Mutex::new(Some(queue)),
        }
    }

    fn config(&self) -> &OffsetsTopicConfig {
        &self.driver.config().offsets
    }

    /// Connects `coordinator` to the offsets topic: its snapshots are appended by a task (on the
    /// current runtime) that ends with the coordinator. Once only; later calls do nothing.
    pub fn attach(self: &Arc<Self>, coordinator: &Arc<GroupCoordinator>) {
        let Some(mut queue) = self
            .snapshot_queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        let sender = self.snapshots.clone();
        coordinator.persist_with(Arc::new(move |group, snapshot| {
            if sender.try_send((group, snapshot)).is_err() {
                warn!("group snapshot queue full: a snapshot was dropped (the group rebalances if its coordinator moves)");
            }
        }));
        let offsets: Weak<Self> = Arc::downgrade(self);
        let coordinator = Arc::downgrade(coordinator);
        tokio::spawn(async move {
            while let Some((group, snapshot)) = queue.recv().await {
                let (Some(offsets), Some(coordinator)) = (offsets.upgrade(), coordinator.upgrade())
                else {
                    return;
                };
                let record = OffsetsRecord::Group {
                    group: group.clone(),
                    snapshot,
                };
                if let Err(error) = offsets.append(&coordinator, &group, record).await {
                    debug!(%group, %error, "group snapshot not persisted");
                }
            }
        });
    }

    /// The broker that coordinates `group`: the leader of its offsets partition (creating the
    /// offsets topic first if the cluster has none).
    pub async fn coordinator_of(&self, group: &str) -> Result<crate::domain::NodeId, BrokerError> {
        let partitions = self.ensure_topic(group).await?;
        let partition = offsets_partition(group, partitions);
        let state = self.driver.partition_state(OFFSETS_TOPIC, partition);
        state.leader.ok_or_else(|| {
            ClusterError::CoordinatorNotAvailable {
                group: group.to_owned(),
                reason: format!(
                    "{OFFSETS_TOPIC}/{partition} has no leader (leader epoch {})",
                    state.leader_epoch
                ),
            }
            .into()
        })
    }

    /// Ok when this broker coordinates `group` now (leads its offsets partition and has loaded
    /// it); else who does, or why nobody can yet.
    pub async fn require_coordinator(
        &self,
        coordinator: &GroupCoordinator,
        group: &str,
    ) -> Result<(), BrokerError> {
        self.slot(coordinator, group).await.map(|_| ())
    }

    /// The group's offsets partition, loaded, once this broker coordinates it.
    async fn slot(
        &self,
        coordinator: &GroupCoordinator,
        group: &str,
    ) -> Result<Arc<Slot>, BrokerError> {
        let partitions = self.ensure_topic(group).await?;
        let partition = offsets_partition(group, partitions);
        self.slot_of(coordinator, group, partitions, partition)
            .await
    }

    /// Offsets partition `partition` (of `partitions`), loaded, once this broker leads it;
    /// `group` names what the caller wanted from it, in errors.
    async fn slot_of(
        &self,
        coordinator: &GroupCoordinator,
        group: &str,
        partitions: u32,
        partition: u32,
    ) -> Result<Arc<Slot>, BrokerError> {
        if let Err(refused) = self.driver.require_leader(OFFSETS_TOPIC, partition) {
            self.drop_slot(coordinator, partitions, partition);
            return Err(self.not_coordinator(group, partition, refused));
        }
        let leader_epoch = self
            .driver
            .partition_state(OFFSETS_TOPIC, partition)
            .leader_epoch;
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            match slots.get(&partition) {
                Some(slot)
                    if slot.leader_epoch == leader_epoch
                        && !slot.stale.load(std::sync::atomic::Ordering::Acquire) =>
                {
                    Arc::clone(slot)
                }
                _ => {
                    let slot = Arc::new(Slot {
                        partition,
                        leader_epoch,
                        loaded: OnceCell::new(),
                        state: Mutex::new(OffsetsState::default()),
                        stale: Default::default(),
                    });
                    slots.insert(partition, Arc::clone(&slot));
                    slot
                }
            }
        };
        slot.loaded
            .get_or_try_init(|| self.load(coordinator, group, &slot, partitions))
            .await?;
        Ok(slot)
    }

    /// Forgets what this broker loaded of `partition` (it no longer leads it), and its groups.
    fn drop_slot(&self, coordinator: &GroupCoordinator, partitions: u32, partition: u32) {
        let removed = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&partition);
        if removed.is_some() {
            info!(
                partition,
                "no longer the coordinator of this offsets partition's groups"
            );
            coordinator.forget_groups(|group| offsets_partition(group, partitions) == partition);
        }
    }

    fn not_coordinator(&self, group: &str, partition: u32, refused: BrokerError) -> BrokerError {
        match refused {
            BrokerError::Cluster(ClusterError::NotLeader {
                leader,
                leader_epoch,
                ..
            }) => ClusterError::NotCoordinator {
                group: group.to_owned(),
                offsets_topic: OFFSETS_TOPIC,
                offsets_partition: partition,
                leader,
                leader_epoch,
            }
            .into(),
            BrokerError::Cluster(ClusterError::LeaderNotAvailable { leader_epoch, .. }) => {
                ClusterError::CoordinatorNotAvailable {
                    group: group.to_owned(),
                    reason: format!(
                        "{OFFSETS_TOPIC}/{partition} has no leader serving yet (leader epoch {leader_epoch})"
                    ),
                }
                .into()
            }
            other => other,
        }
    }

    /// The offsets topic's partition count, creating the topic first if the cluster has none.
    async fn ensure_topic(&self, group: &str) -> Result<u32, BrokerError> {
        if let Some(count) = self.driver.partition_count(OFFSETS_TOPIC) {
            return Ok(count);
        }
        let _creating = self.creating.lock().await;
        if let Some(count) = self.driver.partition_count(OFFSETS_TOPIC) {
            return Ok(count);
        }
        let config = self.config().clone();
        let live = self.driver.live_broker_count();
        if live < usize::from(config.replication_factor) {
            return Err(ClusterError::CoordinatorNotAvailable {
                group: group.to_owned(),
                reason: format!(
                    "the offsets topic {OFFSETS_TOPIC} needs {} live brokers for its replication factor and {live} are live; start more brokers or set `serve --offsets-replication-factor`",
                    config.replication_factor
                ),
            }
            .into());
        }
        let replication = Replication {
            factor: config.replication_factor,
            min_insync: None,
        };
        info!(
            partitions = config.partitions,
            replication_factor = config.replication_factor,
            "creating the offsets topic"
        );
        match self
            .driver
            .create_topic(
                OFFSETS_TOPIC.to_owned(),
                config.partitions,
                OffsetsTopicConfig::topic_config(),
                Some(replication),
            )
            .await
        {
            Ok(()) | Err(BrokerError::TopicExists(_)) => {}
            Err(error) => {
                return Err(ClusterError::CoordinatorNotAvailable {
                    group: group.to_owned(),
                    reason: format!("creating the offsets topic {OFFSETS_TOPIC} failed: {error}"),
                }
                .into())
            }
        }
        self.driver.partition_count(OFFSETS_TOPIC).ok_or_else(|| {
            ClusterError::CoordinatorNotAvailable {
                group: group.to_owned(),
                reason: format!("the offsets topic {OFFSETS_TOPIC} is being created"),
            }
            .into()
        })
    }

    /// Reads the slot's partition into its state: waits until the high watermark covers the
    /// log end (every record an earlier coordinator may have acknowledged), replays every
    /// record below it, and restores the groups' membership into `coordinator`.
    async fn load(
        &self,
        coordinator: &GroupCoordinator,
        group: &str,
        slot: &Slot,
        partitions: u32,
    ) -> Result<(), BrokerError> {
        let loading = || -> BrokerError {
            ClusterError::CoordinatorLoading {
                group: group.to_owned(),
                offsets_topic: OFFSETS_TOPIC,
                offsets_partition: slot.partition,
            }
            .into()
        };
        let target = self.broker.partition(OFFSETS_TOPIC, slot.partition)?;
        let log_end = target.log_end_offset();
        let mut changes = target.subscribe();
        let covered = matches!(
            tokio::time::timeout(
                self.config().load_wait,
                changes.wait_for(|high_watermark| *high_watermark >= log_end),
            )
            .await,
            Ok(Ok(_))
        );
        if !covered {
            return Err(loading());
        }
        let partition = slot.partition;
        let state = super::blocking(move || {
            let mut state = OffsetsState::default();
            let mut offset = target.log_start_offset();
            let mut skipped = 0usize;
            loop {
                let read = target.read(offset, LOAD_READ_BYTES)?;
                if read.batches.is_empty() {
                    break;
                }
                for batch in &read.batches {
                    let records =
                        crate::batch::decode_batch(batch).map_err(|error| BrokerError::Io {
                            context: format!("load {OFFSETS_TOPIC}/{partition} at offset {offset}"),
                            source: std::io::Error::new(std::io::ErrorKind::InvalidData, error),
                        })?;
                    for stored in records {
                        if stored.offset >= read.high_watermark {
                            break;
                        }
                        match stored.value.as_deref().and_then(OffsetsRecord::decode) {
                            Some(record) => state.apply(stored.offset, &record),
                            None => skipped += 1,
                        }
                        offset = stored.offset + 1;
                    }
                }
                if offset >= read.high_watermark {
                    break;
                }
            }
            if skipped > 0 {
                debug!(
                    partition,
                    skipped, "offsets partition records that are not ours"
                );
            }
            Ok(state)
        })
        .await?;
        for (group_id, snapshot) in state.live_snapshots() {
            coordinator.restore(group_id, snapshot);
        }
        info!(
            partition,
            leader_epoch = slot.leader_epoch,
            groups = state.group_count(),
            "offsets partition loaded: coordinating its groups"
        );
        debug_assert!(partitions > 0);
        *slot.state() = state;
        Ok(())
    }

    /// Appends `record` about `group` to the group's offsets partition and waits until every
    /// in-sync replica has it; then applies it to the loaded state.
    async fn append(
        &self,
        coordinator: &GroupCoordinator,
        group: &str,
        record: OffsetsRecord,
    ) -> Result<(), BrokerError> {
        let slot = self.slot(coordinator, group).await?;
        let partition = slot.partition;
        self.driver
            .check_produce(OFFSETS_TOPIC, partition, crate::domain::Acks::All)
            .map_err(|refused| self.not_coordinator(group, partition, refused))?;
        let target = self.broker.partition(OFFSETS_TOPIC, partition)?;
        let batch = record.to_batch(crate::batch::now_ms());
        let pending = target.append_pending_as(WriteCredential::Unleased, &batch)?;
        let appended = if target.acknowledge_blocks() {
            let target = Arc::clone(&target);
            super::blocking(move || Ok(target.acknowledge(pending)?)).await
        } else {
            target.acknowledge(pending).map_err(BrokerError::from)
        };
        let outcome_unknown = |cause: String| -> BrokerError {
            slot.stale.store(true, std::sync::atomic::Ordering::Release);
            ClusterError::CommitOutcomeUnknown {
                group: group.to_owned(),
                cause,
            }
            .into()
        };
        let appended = appended.map_err(|error| outcome_unknown(error.to_string()))?;
        if let Err(error) = self
            .driver
            .await_commit(
                OFFSETS_TOPIC,
                partition,
                appended.last_offset,
                crate::domain::Acks::All,
            )
            .await
        {
            return Err(outcome_unknown(error.to_string()));
        }
        slot.state().apply(appended.base_offset, &record);
        Ok(())
    }

    /// Commits several positions of `group` in one record (all or none), acknowledged once
    /// every in-sync replica of the group's offsets partition has it. The limits are the
    /// standalone store's.
    pub async fn commit(
        &self,
        coordinator: &GroupCoordinator,
        group: &str,
        offsets: PartitionCommits,
    ) -> Result<(), BrokerError> {
        self.check_group(group)?;
        let slot = self.slot(coordinator, group).await?;
        {
            let state = slot.state();
            if !state.has_group(group) && state.group_count() >= self.limits.max_groups {
                return Err(GroupOffsetsError::TooManyGroups {
                    max: self.limits.max_groups,
                }
                .into());
            }
            let new = offsets
                .iter()
                .filter(|((topic, partition), _)| {
                    state.committed(group, topic, *partition).is_none()
                })
                .count();
            if state.offset_count(group) + new > self.limits.max_offsets_per_group {
                return Err(GroupOffsetsError::TooManyOffsets {
                    group: group.to_owned(),
                    max: self.limits.max_offsets_per_group,
                }
                .into());
            }
        }
        let record = OffsetsRecord::Commit {
            group: group.to_owned(),
            offsets: offsets
                .into_iter()
                .map(|((topic, partition), committed)| CommitEntry {
                    lineage: self.driver.topic_lineage(&topic).unwrap_or(0),
                    topic,
                    partition,
                    offset: committed.offset,
                    metadata: committed.metadata,
                })
                .collect(),
        };
        self.append(coordinator, group, record).await
    }

    /// Deletes `group`'s positions in `partitions`, or with `None` the whole group (every
    /// position and its membership snapshot): one [`OffsetsRecord::Delete`], acknowledged once
    /// every in-sync replica of the group's offsets partition has it.
    pub async fn delete(
        &self,
        coordinator: &GroupCoordinator,
        group: &str,
        partitions: Option<Vec<PartitionKey>>,
    ) -> Result<(), BrokerError> {
        self.check_group(group)?;
        let record = OffsetsRecord::Delete {
            group: group.to_owned(),
            partitions: partitions.map(|keys| {
                keys.into_iter()
                    .map(|(topic, partition)| PartitionRef { topic, partition })
                    .collect()
            }),
        };
        self.append(coordinator, group, record).await
    }

    /// Every position `group` committed, from its coordinator's loaded state.
    pub async fn committed_all(
        &self,
        coordinator: &GroupCoordinator,
        group: &str,
    ) -> Result<PartitionCommits, BrokerError> {
        self.check_group(group)?;
        let slot = self.slot(coordinator, group).await?;
        let all = slot
            .state()
            .committed_all(group, |topic| self.driver.topic_lineage(topic));
        Ok(all)
    }

    /// The position `group` committed for `topic/partition`, if any.
    pub async fn committed(
        &self,
        coordinator: &GroupCoordinator,
        group: &str,
        topic: &str,
        partition: u32,
    ) -> Result<Option<CommittedOffset>, BrokerError> {
        self.check_group(group)?;
        let slot = self.slot(coordinator, group).await?;
        let Some(lineage) = self.driver.topic_lineage(topic) else {
            return Ok(None);
        };
        let committed = slot
            .state()
            .committed_in_lineage(group, topic, partition, lineage);
        Ok(committed)
    }

    /// Stores transactional id `transactional_id`'s whole state (`None`: forgets the id) in the
    /// id's offsets partition, acknowledged once every in-sync replica has it: the broker that
    /// leads the partition next loads it, so a transaction's producer epoch and outcome move
    /// with its coordinator (issue 31; docs/kafka.md, "Transactions on a cluster",
    /// step 1). Only the partition's leader, once loaded, may store; another broker is told who
    /// does (`NotCoordinator`, naming the id as its "group").
    pub async fn save_transaction(
        &self,
        coordinator: &GroupCoordinator,
        transactional_id: &str,
        state: Option<crate::broker::transaction_state::TransactionMetadata>,
    ) -> Result<(), BrokerError> {
        check_transactional_id(transactional_id)?;
        if let Some(state) = &state {
            if state.transactional_id != transactional_id {
                return Err(BrokerError::InvalidRequest(format!(
                    "the state of transactional id {:?} cannot be stored as {transactional_id:?}",
                    state.transactional_id
                )));
            }
        }
        let record = OffsetsRecord::Transaction {
            transactional_id: transactional_id.to_owned(),
            state,
        };
        self.append(coordinator, transactional_id, record).await
    }

    /// `transactional_id`'s state as this broker, its coordinator, loaded it from the id's
    /// offsets partition (`None`: the id has none).
    pub async fn transaction(
        &self,
        coordinator: &GroupCoordinator,
        transactional_id: &str,
    ) -> Result<Option<crate::broker::transaction_state::TransactionMetadata>, BrokerError> {
        Ok(self
            .transaction_in_epoch(coordinator, transactional_id)
            .await?
            .0)
    }

    /// [`transaction`](Self::transaction), with the leader epoch of the offsets partition it
    /// was loaded in: the coordinator epoch this broker's markers for the id carry, so that a
    /// later coordinator's markers fence this one's (docs/kafka.md, "Transactions on a
    /// cluster", step 2).
    pub async fn transaction_in_epoch(
        &self,
        coordinator: &GroupCoordinator,
        transactional_id: &str,
    ) -> Result<
        (
            Option<crate::broker::transaction_state::TransactionMetadata>,
            LeaderEpoch,
        ),
        BrokerError,
    > {
        check_transactional_id(transactional_id)?;
        let slot = self.slot(coordinator, transactional_id).await?;
        let state = slot.state().transaction(transactional_id).cloned();
        Ok((state, slot.leader_epoch))
    }

    /// Every transactional id's state in the offsets partitions this broker leads, each with
    /// the leader epoch it was loaded in (the transaction coordinator's timeout task: what a
    /// broker takes over when it becomes a leader, it completes or times out). A partition
    /// still loading is left for the next call.
    pub async fn led_transactions(
        &self,
        coordinator: &GroupCoordinator,
    ) -> Vec<(
        crate::broker::transaction_state::TransactionMetadata,
        LeaderEpoch,
    )> {
        let Some(partitions) = self.driver.partition_count(OFFSETS_TOPIC) else {
            return Vec::new();
        };
        let node = self.driver.node_id();
        let mut led = Vec::new();
        for partition in 0..partitions {
            if self.driver.partition_state(OFFSETS_TOPIC, partition).leader != Some(node) {
                continue;
            }
            let key = format!("{OFFSETS_TOPIC}/{partition}");
            match self.slot_of(coordinator, &key, partitions, partition).await {
                Ok(slot) => led.extend(
                    slot.state()
                        .transactions()
                        .map(|state| (state.clone(), slot.leader_epoch)),
                ),
                Err(error) => debug!(partition, %error, "offsets partition not loaded yet"),
            }
        }
        led
    }

    /// The groups with committed positions among the offsets partitions this broker has
    /// loaded (what it coordinates), sorted.
    pub fn group_names(&self) -> Vec<String> {
        let slots: Vec<Arc<Slot>> = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let mut names: Vec<String> = slots
            .iter()
            .filter(|slot| slot.loaded.initialized())
            .flat_map(|slot| slot.state().group_names())
            .collect();
        names.sort_unstable();
        names
    }

    fn check_group(&self, group: &str) -> Result<(), BrokerError> {
        let max = self.limits.max_group_name_bytes;
        if group.is_empty() || group.len() > max {
            return Err(GroupOffsetsError::InvalidGroupName {
                bytes: group.len(),
                max,
            }
            .into());
        }
        Ok(())
    }
}

/// A transactional id is stored under the same bound as standalone
/// ([`crate::broker::transaction_state::MAX_TRANSACTIONAL_ID_BYTES`]), so an id valid on one broker
/// is valid on a cluster.
fn check_transactional_id(transactional_id: &str) -> Result<(), BrokerError> {
    let max = crate::broker::transaction_state::MAX_TRANSACTIONAL_ID_BYTES;
    if transactional_id.is_empty() || transactional_id.len() > max {
        return Err(BrokerError::InvalidRequest(format!(
            "a transactional id is 1 to {max} bytes, not {}",
            transactional_id.len()
        )));
    }
    Ok(())
}
