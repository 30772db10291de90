//! The transaction coordinator of a standalone broker: drives each transactional id's state
//! machine ([`super::state`]) with the broker's leases, the fence and the partitions' producer
//! state.
//!
//! **Leases: transactions against native holders.** While any open transaction includes a
//! partition, the coordinator holds that partition's lease as
//! [`super::TRANSACTIONS_LEASE_HOLDER`] (one lease shared by every transaction on the partition,
//! renewed by the timeout task and released when the last of them ends; reached through
//! [`super::TransactionPartitions`], the broker's own service standalone). Every transactional record and marker is written with
//! `WriteCredential::Epoch(F)`, `F` that lease's epoch, through the fence in the segment
//! writer. So a native client's grant on the partition fences every transactional write that
//! follows it, and a partition a native holder leases is never taken from it: the transaction
//! is told `CONCURRENT_TRANSACTIONS` until that lease ends.
//!
//! **Zombies: the producer epoch, checked in the writer.** Kafka lets several transactional
//! producers write one partition at once (a read_committed reader stops at the first open
//! transaction), so one partition lease cannot tell two instances of one transactional id
//! apart. The producer epoch does: a new instance's `InitProducerId` (or a timeout) bumps it
//! durably, and the previous instance's open transaction is aborted with markers carrying the
//! *bumped* producer epoch. The partition's producer state, which the segment writer consults
//! inside the same critical section as the fence check and the append, then refuses every batch
//! of the older epoch on that partition (`INVALID_PRODUCER_EPOCH`): a zombie's batch either
//! landed before the marker (it is inside the aborted transaction) or is refused, however late
//! it arrives; there is no third order (the loom model
//! `loom_zombie_append_races_abort_marker` in `crate::lease::local`). The coordinator's own
//! epoch check on every request only gives the zombie an early, clear answer.
//!
//! **Order of a produce and its EndTxn.** Each produce of a transaction holds a read guard of
//! the id's gate until its appends are answered, and `EndTxn` takes the write guard after the
//! state left `Ongoing` (so no new produce can start), before it writes markers: a batch of the
//! transaction never lands after its own marker, where it would open a transaction no marker
//! closes (Kafka's "hanging transaction", KIP-890), even from a client that commits without
//! waiting for its produce answers.

mod offsets;
mod timeouts;

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::Path;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedRwLockReadGuard, RwLock};
use tracing::{info, warn};

use super::TransactionParts;
use super::{
    write_markers, EndOutcome, InitOutcome, MarkerError, TransactionMetadata, TransactionRegistry,
    TxnError, TxnPartition, TxnState, UpdateError,
};
use crate::batch::ControlMarker;
use crate::broker::group_service::CommitBound;
use crate::broker::{Broker, BrokerError, CommittedOffset};
use crate::lease::{AuthorityError, LeaseError};

/// The TTL of the coordinator's lease on a partition with open transactions; the timeout task
/// renews it every third of that while a transaction uses it, so it outlives the coordinator
/// by at most this much (then a native client may take the partition).
pub const TRANSACTIONS_LEASE_TTL_MS: u64 = 30_000;
/// The longest `transaction.timeout.ms` accepted (Kafka's `transaction.max.timeout.ms`
/// default, 15 minutes); a longer one is `INVALID_TRANSACTION_TIMEOUT`.
pub const MAX_TRANSACTION_TIMEOUT_MS: i64 = 15 * 60 * 1000;
/// How often the timeout task looks for expired transactions and prepared ones whose markers
/// are still to be written.
pub const TRANSACTION_CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// Why a coordinator request was not done.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// The state machine refused it (the client's error).
    #[error(transparent)]
    Refused(#[from] TxnError),
    /// The new state could not be written; nothing changed.
    #[error("transaction state not written: {0}")]
    Store(#[source] io::Error),
    /// The partition's lease is held by a native client: the transaction waits
    /// (`CONCURRENT_TRANSACTIONS`, retriable).
    #[error("{topic}-{partition} is leased by {holder:?} for another {expires_in_ms} ms: a transaction never fences a lease holder; retry when that lease ends")]
    PartitionLeased {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// Who holds it.
        holder: String,
        /// How long the lease lasts unless renewed.
        expires_in_ms: u64,
    },
    /// The partition could not be leased or written for another reason (unknown topic, not the
    /// leader, a full disk).
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// A native atomic append named a partition with epoch 0: its transactions write under
    /// leases.
    #[error("{topic}-{partition}: a native transaction writes under a lease; acquire the partition's lease and add it with that epoch")]
    Unleased {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// A native atomic append added a partition with an epoch that is not current there.
    #[error("fenced: epoch {epoch} < current {current} on {topic}-{partition}")]
    Fenced {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The epoch the writer gave.
        epoch: u64,
        /// The partition's current epoch.
        current: u64,
    },
    /// A native atomic commit's marker was refused by a partition (most often its fence: the
    /// writer's lease there was granted to someone else): nothing was written, and the
    /// transaction is aborted.
    #[error("{partition}: {source}; the transaction was aborted, none of it is visible")]
    CommitRefused {
        /// `topic/partition`.
        partition: String,
        /// Why.
        #[source]
        source: crate::storage::StorageError,
    },
    /// A marker was not written: the outcome is decided and durable; the markers are written
    /// again by the timeout task.
    #[error(transparent)]
    Markers(Box<MarkerError>),
}

impl From<MarkerError> for CoordinatorError {
    fn from(error: MarkerError) -> Self {
        Self::Markers(Box::new(error))
    }
}

impl From<io::Error> for CoordinatorError {
    fn from(error: io::Error) -> Self {
        Self::Store(error)
    }
}

impl From<UpdateError> for CoordinatorError {
    fn from(error: UpdateError) -> Self {
        match error {
            UpdateError::Refused(refused) => Self::Refused(refused),
            UpdateError::Store(error) => Self::Store(error),
            UpdateError::Cluster(error) => Self::Broker(error),
        }
    }
}

/// A broker-to-broker transaction question that failed (a cluster's partition leader asking a
/// coordinator, a group's coordinator handing positions over): the other broker's refusal,
/// with its code, or no answer (`code` `None`: it could not be reached in time).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct PeerError {
    /// The other broker's error code, if it answered.
    pub code: Option<crate::protocol::ErrorCode>,
    /// What happened, for the client's message.
    pub message: String,
}

impl From<crate::client::ClientError> for PeerError {
    fn from(error: crate::client::ClientError) -> Self {
        Self {
            code: error.code(),
            message: error.to_string(),
        }
    }
}

/// The coordinator's lease on one partition, shared by the open transactions that include it.
#[derive(Debug)]
struct SharedLease {
    epoch: u64,
    lease_id: u128,
    renewed_at: Instant,
    /// On a cluster: the partition's leader epoch when the lease was granted (the lease lives
    /// in that leader's table; a new leader's table does not have it).
    leader_epoch: Option<u32>,
    /// The transactional ids whose open transaction includes the partition.
    users: BTreeSet<String>,
}

type PartitionKey = (String, i32);

/// The coordinator: the registry of transactional ids, the shared partition leases and the
/// per-id produce gates.
pub struct TransactionCoordinator {
    pub(super) registry: TransactionRegistry,
    /// What the coordinator needs of the broker: its partitions, producer ids and groups.
    pub(super) parts: TransactionParts,
    /// Where the transactions' partitions are leased and written.
    partitions: Arc<dyn super::TransactionPartitions>,
    /// On a cluster: the same partitions as a client of the cluster, through which this
    /// broker, as a partition's leader, asks other coordinators to verify transactions.
    cluster: Option<Arc<super::ClusterPartitions>>,
    gates: std::sync::Mutex<HashMap<String, Arc<RwLock<()>>>>,
    /// The partitions leased for transactions (read by the produce path, synchronously).
    leases: std::sync::Mutex<HashMap<PartitionKey, SharedLease>>,
    /// Serialises acquiring, renewing and releasing those leases.
    lease_changes: tokio::sync::Mutex<()>,
    /// On a cluster, as groups' coordinator: the positions transactions coordinated elsewhere
    /// hold (handed over by Kafka's TxnOffsetCommit here), until their outcome arrives.
    held_offsets: super::held_offsets::HeldOffsets,
}

impl std::fmt::Debug for TransactionCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionCoordinator")
            .finish_non_exhaustive()
    }
}

pub use super::now_ms;

/// The refusal of a request for a transactional id the coordinator does not know: its producer
/// id cannot be the id's (`INVALID_PRODUCER_ID_MAPPING`; the producer calls InitProducerId).
pub(super) fn unknown(producer_id: i64) -> TxnError {
    TxnError::InvalidProducerIdMapping {
        given: producer_id,
        current: -1,
    }
}

/// `current`, or the refusal of a request for an id the coordinator does not know.
fn known(
    current: Option<&TransactionMetadata>,
    producer_id: i64,
) -> Result<&TransactionMetadata, TxnError> {
    current.ok_or(unknown(producer_id))
}

/// The epoch current on `topic`-`partition` now.
pub(super) fn current_epoch(
    broker: &Broker,
    topic: &str,
    partition: i32,
) -> Result<u64, BrokerError> {
    let index = super::markers::partition_index(topic, partition)?;
    Ok(broker.partition(topic, index)?.current_epoch())
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl TransactionCoordinator {
    /// Opens the transaction states of the data directory `data`.
    pub fn open(
        data: &Path,
        parts: TransactionParts,
        partitions: super::LocalPartitions,
    ) -> io::Result<Self> {
        Ok(Self {
            registry: TransactionRegistry::open(data)?,
            parts,
            partitions: Arc::new(partitions),
            cluster: None,
            gates: std::sync::Mutex::new(HashMap::new()),
            leases: std::sync::Mutex::new(HashMap::new()),
            lease_changes: tokio::sync::Mutex::new(()),
            held_offsets: Default::default(),
        })
    }

    /// The coordinator of a cluster broker: each transactional id's state in its offsets
    /// partition (this broker coordinates the ids of the partitions it leads), the partitions
    /// reached through `cluster` (docs/kafka.md, "Transactions on a cluster").
    pub fn replicated(
        registry: TransactionRegistry,
        parts: TransactionParts,
        cluster: Arc<super::ClusterPartitions>,
    ) -> Self {
        Self {
            registry,
            parts,
            partitions: Arc::clone(&cluster) as Arc<dyn super::TransactionPartitions>,
            cluster: Some(cluster),
            gates: std::sync::Mutex::new(HashMap::new()),
            leases: std::sync::Mutex::new(HashMap::new()),
            lease_changes: tokio::sync::Mutex::new(()),
            held_offsets: Default::default(),
        }
    }

    /// Whether this broker coordinates `transactional_id` now: standalone always; on a cluster
    /// when it leads the id's offsets partition.
    pub fn coordinates(&self, transactional_id: &str) -> bool {
        self.cluster
            .as_ref()
            .is_none_or(|cluster| cluster.coordinates(transactional_id))
    }

    /// Whether this coordinator runs on a cluster (its partitions' leaders verify each
    /// transaction's first batch with it; standalone the produce gate orders them).
    pub fn is_replicated(&self) -> bool {
        self.cluster.is_some()
    }

    /// `VerifyTransaction`, answered as `transactional_id`'s coordinator: Ok when the
    /// producer's transaction is open and includes `topic`-`partition`, read from where the
    /// state is durable (so only the id's coordinator answers, and from the log's state).
    pub async fn verify(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> Result<(), CoordinatorError> {
        let state = self.registry.durable_state(transactional_id).await?;
        state.as_ref().ok_or(unknown(producer_id))?.produce_epoch(
            producer_id,
            producer_epoch,
            topic,
            partition,
        )?;
        Ok(())
    }

    /// As a partition's leader on a cluster: asks `transactional_id`'s coordinator (wherever
    /// it is) whether the producer's transaction is open with `topic`/`partition` in it.
    /// `None` standalone (nothing to ask: the produce gate orders a transaction's batches
    /// before its markers).
    pub async fn verify_at_coordinator(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: u32,
    ) -> Option<Result<(), PeerError>> {
        let cluster = self.cluster.as_ref()?;
        let producer = crate::protocol::TransactionProducer {
            transactional_id: transactional_id.to_string(),
            producer_id,
            producer_epoch,
        };
        Some(
            cluster
                .verify_transaction(producer, topic, partition)
                .await
                .map_err(PeerError::from),
        )
    }

    /// Every transactional id's state (DescribeTransactions, ListTransactions).
    pub fn all(&self) -> Vec<TransactionMetadata> {
        self.registry.all()
    }

    /// One transactional id's state.
    pub fn get(&self, transactional_id: &str) -> Option<TransactionMetadata> {
        self.registry.get(transactional_id)
    }

    /// Whether an unfinished transaction holds a position of `group` on `topic`-`partition`
    /// that it will commit (OffsetFetch's `require_stable`: the position is not stable yet).
    pub fn has_pending_offset(&self, group: &str, topic: &str, partition: i32) -> bool {
        self.held_offsets.holds(group, topic, partition)
            || self.registry.any(|state| {
                !matches!(
                    state.state,
                    TxnState::CompleteCommit | TxnState::CompleteAbort
                ) && state
                    .pending_offsets
                    .get(group)
                    .and_then(|topics| topics.get(topic))
                    .is_some_and(|partitions| partitions.contains_key(&partition))
            })
    }

    fn gate(&self, transactional_id: &str) -> Arc<RwLock<()>> {
        Arc::clone(
            lock(&self.gates)
                .entry(transactional_id.to_string())
                .or_default(),
        )
    }

    /// The epoch of the transactions' lease on `topic`-`partition`, if the coordinator holds it.
    fn lease_epoch(&self, topic: &str, partition: i32) -> Option<u64> {
        lock(&self.leases)
            .get(&(topic.to_string(), partition))
            .map(|lease| lease.epoch)
    }

    /// A new producer id if `transactional_id` is new or its next epoch bump may exhaust the
    /// epochs (taken before an update, as it is async and durable; an unused one is skipped).
    async fn spare_producer_id(
        &self,
        transactional_id: &str,
    ) -> Result<Option<i64>, CoordinatorError> {
        let needs_id = self.registry.read(transactional_id, |state| {
            state.is_none_or(|state| state.producer_epoch >= super::MAX_PRODUCER_EPOCH - 1)
        });
        Ok(if needs_id {
            Some(self.parts.producer_ids.next().await?)
        } else {
            None
        })
    }

    /// `InitProducerId` with a transactional id: the id's producer id and a new producer epoch.
    /// An open transaction of the previous instance is aborted first, with markers of the
    /// bumped epoch (which fence the previous instance on those partitions); then the epoch is
    /// bumped again for the caller. `expected` is the producer id and epoch a running producer
    /// sends to bump its own epoch (KIP-360, InitProducerId v3+); any other than the id's
    /// current ones is `PRODUCER_FENCED` (a newer instance took over), as Kafka answers.
    pub async fn init_producer_id(
        &self,
        transactional_id: &str,
        timeout_ms: i64,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), CoordinatorError> {
        if !(1..=MAX_TRANSACTION_TIMEOUT_MS).contains(&timeout_ms) {
            return Err(TxnError::InvalidTimeout {
                requested_ms: timeout_ms,
                max_ms: MAX_TRANSACTION_TIMEOUT_MS,
            }
            .into());
        }
        let spare = self.spare_producer_id(transactional_id).await?;
        let ready =
            |current: &TransactionMetadata| -> Result<(TransactionMetadata, bool), TxnError> {
                match current
                    .init_producer_id(timeout_ms, || spare.expect("taken when near the end"))?
                {
                    InitOutcome::Ready(next) => Ok((next, false)),
                    InitOutcome::AbortFirst(next) => Ok((next, true)),
                }
            };
        let abort_first = self
            .registry
            .update(transactional_id, |current| match current {
                None => {
                    let producer_id = spare.expect("a new id has a spare producer id");
                    let state = TransactionMetadata::new(transactional_id, producer_id, timeout_ms);
                    Ok((state, false))
                }
                Some(current) => {
                    if let Some((producer_id, producer_epoch)) = expected {
                        if (producer_id, producer_epoch)
                            != (current.producer_id, current.producer_epoch)
                        {
                            return Err(TxnError::ProducerFenced {
                                given: producer_epoch,
                                current: current.producer_epoch,
                            });
                        }
                    }
                    ready(current)
                }
            })
            .await?;
        if abort_first {
            info!(%transactional_id, "a new instance: aborting the previous instance's open transaction");
            self.complete(transactional_id).await?;
            let spare = self.spare_producer_id(transactional_id).await?;
            self.registry
                .update(transactional_id, |current| {
                    let current = current.expect("the id exists");
                    match current
                        .init_producer_id(timeout_ms, || spare.expect("taken when near the end"))?
                    {
                        InitOutcome::Ready(next) => Ok((next, ())),
                        InitOutcome::AbortFirst(_) => Err(TxnError::ConcurrentTransactions {
                            state: current.state.kafka_name(),
                        }),
                    }
                })
                .await?;
        }
        let state = self
            .registry
            .get(transactional_id)
            .expect("the id was just stored");
        Ok((state.producer_id, state.producer_epoch))
    }

    /// `AddPartitionsToTxn`: each partition joins the transactions' lease on it (acquired if
    /// the coordinator does not hold it), then the partitions are recorded durably. One result
    /// per partition, in order; partitions already in the transaction succeed at once.
    pub async fn add_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<(String, i32)>,
    ) -> Result<Vec<((String, i32), Result<(), CoordinatorError>)>, CoordinatorError> {
        let current = self
            .registry
            .get(transactional_id)
            .ok_or(unknown(producer_id))?;
        current.check_add(producer_id, producer_epoch)?;
        if current.is_client_leased() {
            return Err(TxnError::InvalidTxnState {
                operation: "add a Kafka producer's partition to a native writer's",
                state: current.state.kafka_name(),
            }
            .into());
        }
        let missing: Vec<(String, i32)> = current
            .missing_partitions(partitions.iter().map(|(topic, p)| (topic.as_str(), *p)))
            .into_iter()
            .map(|(topic, p)| (topic.to_string(), p))
            .collect();
        let mut joined = Vec::new();
        let mut refused: HashMap<(String, i32), CoordinatorError> = HashMap::new();
        for (topic, partition) in missing {
            match self.lease(transactional_id, &topic, partition).await {
                Ok(lease_epoch) => joined.push(TxnPartition {
                    topic,
                    partition,
                    lease_epoch,
                    client_leased: false,
                }),
                Err(error) => {
                    refused.insert((topic, partition), error);
                }
            }
        }
        let recorded = self
            .registry
            .update(transactional_id, |current| {
                let current = known(current, producer_id)?;
                Ok((
                    current.add_partitions(producer_id, producer_epoch, &joined, now_ms())?,
                    (),
                ))
            })
            .await;
        if let Err(error) = recorded {
            // The partitions did not join: leave their leases.
            self.leave(transactional_id, &joined).await;
            return Err(error.into());
        }
        Ok(partitions
            .into_iter()
            .map(|key| {
                let result = refused.remove(&key).map_or(Ok(()), Err);
                (key, result)
            })
            .collect())
    }

    /// Writes the prepared outcome's markers (with the producer's current epoch, under the
    /// transactions' lease of each partition), applies (commit) the pending offsets, leaves the
    /// leases and stores `Complete*`. Anything that fails leaves the state prepared, to be
    /// completed again (a second marker of the same outcome is harmless).
    async fn complete(&self, transactional_id: &str) -> Result<(), CoordinatorError> {
        let Some(mut state) = self
            .registry
            .get(transactional_id)
            .filter(|state| state.state.is_preparing())
        else {
            return Ok(());
        };
        let marker = match state.state {
            TxnState::PrepareCommit => ControlMarker::Commit,
            _ => ControlMarker::Abort,
        };
        self.hold_leases(transactional_id).await?;
        for partition in &mut state.partitions {
            if partition.client_leased {
                // A writer's own lease: an abort may always be written (it only hides), and a
                // prepared commit was decided while the writer's epoch was current on every
                // partition at once (`commit_atomically`), so both settle under the epoch
                // current now, whoever holds it.
                partition.lease_epoch =
                    current_epoch(&self.parts.broker, &partition.topic, partition.partition)?;
            } else if let Some(epoch) = self.lease_epoch(&partition.topic, partition.partition) {
                partition.lease_epoch = epoch;
            }
        }
        let coordinator_epoch = self.registry.coordinator_epoch(transactional_id);
        if let Err(error) =
            write_markers(self.partitions.as_ref(), &state, marker, coordinator_epoch).await
        {
            // A marker refused by the fence: the lease was lost (a native client took the
            // partition after it lapsed); the next attempt leases the partition again.
            if matches!(
                error.source,
                BrokerError::Storage(crate::storage::StorageError::Fence(_))
            ) {
                lock(&self.leases).remove(&(error.topic.clone(), error.partition));
            }
            return Err(error.into());
        }
        self.settle(transactional_id, &state, marker).await
    }

    /// What follows a prepared outcome's markers: the pending offsets applied (commit), the
    /// state stored `Complete*`, and the coordinator's leases left.
    pub(super) async fn settle(
        &self,
        transactional_id: &str,
        state: &TransactionMetadata,
        marker: ControlMarker,
    ) -> Result<(), CoordinatorError> {
        // Every group the transaction holds positions of learns the outcome (on a cluster its
        // coordinator may be another broker, and holds those positions unstable until then).
        let commit = marker == ControlMarker::Commit;
        for (group, topics) in &state.pending_offsets {
            let offsets = if commit {
                topics
                    .iter()
                    .flat_map(|(topic, partitions)| {
                        partitions.iter().filter_map(move |(partition, pending)| {
                            Some((
                                topic.clone(),
                                u32::try_from(*partition).ok()?,
                                CommittedOffset {
                                    offset: u64::try_from(pending.offset).ok()?,
                                    metadata: pending.metadata.clone().unwrap_or_default(),
                                },
                            ))
                        })
                    })
                    .collect()
            } else {
                Vec::new()
            };
            self.partitions
                .end_offsets(group, transactional_id, commit, offsets)
                .await?;
        }
        self.registry
            .update(transactional_id, |current| {
                let current = current.expect("completing a known id");
                let next = current.complete().unwrap_or_else(|| current.clone());
                Ok((next, ()))
            })
            .await?;
        self.leave(transactional_id, &state.partitions).await;
        Ok(())
    }

    /// `EndTxn`: decides the outcome durably, waits for the transaction's produces in flight,
    /// writes the markers and completes. `Ok` once the outcome is decided and durable: a marker
    /// that could not be written yet is written by the timeout task (Kafka's coordinator answers
    /// the same way, and writes its markers after answering).
    pub async fn end(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<(), CoordinatorError> {
        let prepared = self
            .registry
            .update(transactional_id, |current| {
                let current = known(current, producer_id)?;
                match current.end(producer_id, producer_epoch, commit)? {
                    EndOutcome::Prepare(next) => Ok((next, true)),
                    EndOutcome::AlreadyDone => Ok((current.clone(), false)),
                }
            })
            .await?;
        if !prepared {
            return Ok(());
        }
        // No produce of this transaction starts now (the state is not Ongoing); wait for those
        // in flight so that none lands after the marker.
        let gate = self.gate(transactional_id);
        let _no_produce_in_flight = gate.write().await;
        if let Err(error) = self.complete(transactional_id).await {
            warn!(%transactional_id, %error, "the transaction's outcome is decided; its markers are written again shortly");
        }
        Ok(())
    }

    /// The lease epoch a transactional produce of (`producer_id`, `producer_epoch`) writes to
    /// `topic`-`partition` with, and the guard that keeps the transaction's `EndTxn` from
    /// writing markers until the produce is answered. Synchronous: the produce path starts
    /// appends in request order.
    pub fn produce_epoch(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> Result<(u64, OwnedRwLockReadGuard<()>), TxnError> {
        let guard = self.gate(transactional_id).try_read_owned().map_err(|_| {
            TxnError::ConcurrentTransactions {
                state: "PrepareCommit",
            }
        })?;
        let recorded = self.registry.read(transactional_id, |state| {
            state.ok_or(unknown(producer_id))?.produce_epoch(
                producer_id,
                producer_epoch,
                topic,
                partition,
            )
        })?;
        // The lease's current epoch (re-acquired after a restart); the recorded one if the
        // lease is being re-acquired right now (the write is then refused by the fence, and
        // the client retries).
        let epoch = self.lease_epoch(topic, partition).unwrap_or(recorded);
        Ok((epoch, guard))
    }
}
