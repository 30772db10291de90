//! The transaction coordinator of a standalone broker: drives each transactional id's state
//! machine ([`super::state`]) with the broker's leases and the fence.
//!
//! The rule every operation keeps: a transactional write is a leased write. `AddPartitionsToTxn`
//! acquires the partition's lease for `kafka-txn:T` and records its epoch `F` durably before it
//! answers; the Kafka produce path writes the transaction's batches with
//! `WriteCredential::Epoch(F)`; markers are written with `F` too. Whenever an instance must be
//! cut off (a new `InitProducerId`, a timeout, a restart of the broker), every partition of its
//! open transaction is *re-granted* first: a new lease for `kafka-txn:T` with epoch `F' > F`,
//! installed in the segment writer before the abort marker is written with it. A zombie's
//! write still carrying `F` is then refused by the fence in the writer's critical section,
//! however late it arrives, and one that arrived earlier sits before the abort marker, inside
//! the aborted transaction (the loom model `loom_zombie_append_races_regrant_and_abort` in
//! `crate::lease::local`).
//!
//! Why the coordinator's own producer-epoch check is not the safety argument: a produce that
//! passed it an instant before the epoch moved still reaches the writer; only the writer can
//! order it against the marker. The coordinator's check only gives a zombie an early, clear
//! answer.
//!
//! A produce and the `EndTxn` of the same id are ordered by a per-id gate: each produce of a
//! transaction holds a read guard of the gate until its appends are answered, and `EndTxn`
//! takes the write guard after the state left `Ongoing` (so no new produce can start), before
//! it writes markers. A batch of the transaction therefore never lands after its own marker,
//! where it would open a transaction that no marker closes (Kafka's "hanging transaction",
//! KIP-890), even from a client that does not wait for its produce answers before committing.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, PoisonError, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{OwnedRwLockReadGuard, RwLock};
use tracing::{info, warn};

use super::{
    lease_holder, write_markers, EndOutcome, InitOutcome, MarkerError, TransactionMetadata,
    TransactionRegistry, TxnError, TxnPartition, TxnState, UpdateError,
};
use crate::batch::ControlMarker;
use crate::broker::service::CommitBound;
use crate::broker::{BrokerError, BrokerService, CommittedOffset};
use crate::lease::{AuthorityError, LeaseError};

/// How much longer than the transaction timeout a transaction's leases last: the timeout task
/// aborts an expired transaction (writing its markers with the lease epoch) well inside it.
pub const TRANSACTION_LEASE_GRACE_MS: u64 = 15_000;
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
    /// The partition's lease is held by someone else (a native holder, or this id's lease not
    /// released yet): the transaction waits (`CONCURRENT_TRANSACTIONS`, retriable).
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
    /// A marker was not written: the outcome is decided and durable; the markers are written
    /// again by the timeout task.
    #[error(transparent)]
    Markers(#[from] MarkerError),
}

impl From<UpdateError> for CoordinatorError {
    fn from(error: UpdateError) -> Self {
        match error {
            UpdateError::Refused(refused) => Self::Refused(refused),
            UpdateError::Store(error) => Self::Store(error),
        }
    }
}

/// The coordinator: the registry of transactional ids and the per-id produce gates.
pub struct TransactionCoordinator {
    registry: TransactionRegistry,
    gates: std::sync::Mutex<HashMap<String, Arc<RwLock<()>>>>,
}

impl std::fmt::Debug for TransactionCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionCoordinator")
            .finish_non_exhaustive()
    }
}

/// Milliseconds since the Unix epoch (transaction start times, as Kafka reports them).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

impl TransactionCoordinator {
    /// Opens the transaction states of the data directory `data`.
    pub fn open(data: &Path) -> io::Result<Self> {
        Ok(Self {
            registry: TransactionRegistry::open(data)?,
            gates: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// Every transactional id's state (DescribeTransactions, ListTransactions).
    pub fn all(&self) -> Vec<TransactionMetadata> {
        self.registry.all()
    }

    /// One transactional id's state.
    pub fn get(&self, transactional_id: &str) -> Option<TransactionMetadata> {
        self.registry.get(transactional_id)
    }

    fn gate(&self, transactional_id: &str) -> Arc<RwLock<()>> {
        let mut gates = self.gates.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(gates.entry(transactional_id.to_string()).or_default())
    }

    /// Brings every id left mid-transaction by a restart to a safe state, before any client is
    /// served: a prepared outcome's markers are written, and an open transaction's partitions
    /// are re-granted to it (the lease table starts empty, and a native holder must not take a
    /// partition with an open transaction on it and stall read_committed readers for ever).
    pub async fn recover(&self, service: &Arc<BrokerService>) {
        for state in self.registry.all() {
            let id = state.transactional_id.clone();
            let recovered = match state.state {
                TxnState::Ongoing => self.regrant(service, &id).await.map(drop),
                TxnState::PrepareCommit | TxnState::PrepareAbort => {
                    match self.regrant(service, &id).await {
                        Ok(_) => self.complete(service, &id).await,
                        Err(error) => Err(error),
                    }
                }
                _ => Ok(()),
            };
            match recovered {
                Ok(()) => {
                    info!(transactional_id = %id, state = state.state.kafka_name(), "transaction recovered")
                }
                Err(error) => {
                    warn!(transactional_id = %id, %error, "transaction not recovered yet; retried by the timeout task")
                }
            }
        }
    }

    /// Starts the task that aborts expired transactions and finishes prepared ones, every
    /// [`TRANSACTION_CHECK_INTERVAL`], until the service is dropped or shuts down.
    pub fn start_timeouts(self: &Arc<Self>, service: &Arc<BrokerService>) {
        let coordinator = Arc::downgrade(self);
        let service: Weak<BrokerService> = Arc::downgrade(service);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(TRANSACTION_CHECK_INTERVAL);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let (Some(coordinator), Some(service)) = (coordinator.upgrade(), service.upgrade())
                else {
                    return;
                };
                coordinator.tick(&service).await;
            }
        });
    }

    /// One pass of the timeout task.
    async fn tick(&self, service: &Arc<BrokerService>) {
        let now = now_ms();
        for state in self.registry.all() {
            let id = &state.transactional_id;
            let result = if state.is_expired(now) {
                info!(transactional_id = %id, timeout_ms = state.timeout_ms, "transaction timed out: aborting it");
                self.expire(service, id).await
            } else if state.state.is_preparing() {
                match self.regrant_if_needed(service, id).await {
                    Ok(()) => self.complete(service, id).await,
                    Err(error) => Err(error),
                }
            } else {
                Ok(())
            };
            if let Err(error) = result {
                warn!(transactional_id = %id, %error, "transaction not completed yet; retrying");
            }
        }
    }

    /// Aborts `transactional_id`'s transaction if it is still open past its timeout, with the
    /// producer epoch bumped (the instance that let it expire is fenced).
    async fn expire(
        &self,
        service: &Arc<BrokerService>,
        transactional_id: &str,
    ) -> Result<(), CoordinatorError> {
        let spare = self.spare_producer_id(service, transactional_id).await?;
        self.abort_open(service, transactional_id, |current| {
            current.expire(now_ms(), || spare.expect("taken when near the end"))
        })
        .await
    }

    /// A new producer id if `transactional_id` is new or its next epoch bump may exhaust the
    /// epochs (taken before an update, as it is async and durable; an unused one is skipped).
    async fn spare_producer_id(
        &self,
        service: &Arc<BrokerService>,
        transactional_id: &str,
    ) -> Result<Option<i64>, CoordinatorError> {
        let needs_id = self.registry.read(transactional_id, |state| {
            state.is_none_or(|state| state.producer_epoch >= super::MAX_PRODUCER_EPOCH - 1)
        });
        Ok(if needs_id {
            Some(service.init_producer_id().await?.0)
        } else {
            None
        })
    }

    /// `InitProducerId` with a transactional id: the id's producer id and a new producer epoch.
    /// An open transaction of the previous instance is aborted first (its partitions re-granted,
    /// so the instance is fenced at the writer, then abort markers written); then the epoch is
    /// bumped again for the caller.
    pub async fn init_producer_id(
        &self,
        service: &Arc<BrokerService>,
        transactional_id: &str,
        timeout_ms: i64,
    ) -> Result<(i64, i16), CoordinatorError> {
        if !(1..=MAX_TRANSACTION_TIMEOUT_MS).contains(&timeout_ms) {
            return Err(TxnError::InvalidTimeout {
                requested_ms: timeout_ms,
                max_ms: MAX_TRANSACTION_TIMEOUT_MS,
            }
            .into());
        }
        let spare = self.spare_producer_id(service, transactional_id).await?;
        let abort_first = self
            .registry
            .update(transactional_id, |current| match current {
                None => {
                    let producer_id = spare.expect("a new id has a spare producer id");
                    let state = TransactionMetadata::new(transactional_id, producer_id, timeout_ms);
                    Ok((state, false))
                }
                Some(current) => match current
                    .init_producer_id(timeout_ms, || spare.expect("taken when near the end"))?
                {
                    InitOutcome::Ready(next) => Ok((next, false)),
                    InitOutcome::AbortFirst(next) => Ok((next, true)),
                },
            })
            .await?;
        if abort_first {
            info!(%transactional_id, "a new instance: aborting the previous instance's open transaction");
            self.regrant(service, transactional_id).await?;
            self.complete(service, transactional_id).await?;
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

    /// `AddPartitionsToTxn`: each partition's lease for `kafka-txn:T`, recorded durably. One
    /// result per partition, in order; partitions already in the transaction succeed at once.
    pub async fn add_partitions(
        &self,
        service: &Arc<BrokerService>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<(String, i32)>,
    ) -> Result<Vec<((String, i32), Result<(), CoordinatorError>)>, CoordinatorError> {
        let current =
            self.registry
                .get(transactional_id)
                .ok_or(TxnError::InvalidProducerIdMapping {
                    given: producer_id,
                    current: -1,
                })?;
        current.check_add(producer_id, producer_epoch)?;
        let timeout_ms = current.timeout_ms;
        let missing: Vec<(String, i32)> = current
            .missing_partitions(partitions.iter().map(|(topic, p)| (topic.as_str(), *p)))
            .into_iter()
            .map(|(topic, p)| (topic.to_string(), p))
            .collect();
        let mut granted = Vec::new();
        let mut refused: HashMap<(String, i32), CoordinatorError> = HashMap::new();
        for (topic, partition) in missing {
            match self
                .lease(service, transactional_id, &topic, partition, timeout_ms)
                .await
            {
                Ok(grant) => granted.push(grant),
                Err(error) => {
                    refused.insert((topic, partition), error);
                }
            }
        }
        let recorded = self
            .registry
            .update(transactional_id, |current| {
                let current = current.ok_or(TxnError::InvalidProducerIdMapping {
                    given: producer_id,
                    current: -1,
                })?;
                Ok((
                    current.add_partitions(producer_id, producer_epoch, &granted, now_ms())?,
                    (),
                ))
            })
            .await;
        if let Err(error) = recorded {
            // The leases just taken are not the transaction's: give them back.
            self.release(service, &granted).await;
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

    /// A lease on `topic`-`partition` for `kafka-txn:T`, lasting the transaction timeout plus
    /// [`TRANSACTION_LEASE_GRACE_MS`].
    async fn lease(
        &self,
        service: &Arc<BrokerService>,
        transactional_id: &str,
        topic: &str,
        partition: i32,
        timeout_ms: i64,
    ) -> Result<TxnPartition, CoordinatorError> {
        let index = u32::try_from(partition).map_err(|_| {
            BrokerError::InvalidPartitions(format!("partition {partition} of {topic} is negative"))
        })?;
        let ttl_ms = (timeout_ms.max(0) as u64).saturating_add(TRANSACTION_LEASE_GRACE_MS);
        match service
            .acquire_lease(topic, index, lease_holder(transactional_id), ttl_ms)
            .await
        {
            Ok(grant) => Ok(TxnPartition {
                topic: topic.to_string(),
                partition,
                lease_epoch: grant.epoch,
                lease_id: grant.lease_id,
            }),
            Err(BrokerError::Lease(AuthorityError::Refused(LeaseError::Held {
                holder,
                expires_in_ms,
                ..
            }))) => Err(CoordinatorError::PartitionLeased {
                topic: topic.to_string(),
                partition,
                holder,
                expires_in_ms,
            }),
            Err(error) => Err(error.into()),
        }
    }

    /// Releases the leases of `partitions` (a lease already gone is fine: it fenced nothing of
    /// ours that matters any more).
    async fn release(&self, service: &Arc<BrokerService>, partitions: &[TxnPartition]) {
        for partition in partitions {
            let Ok(index) = u32::try_from(partition.partition) else {
                continue;
            };
            if partition.lease_id == 0 {
                continue;
            }
            if let Err(error) = service
                .release_lease(&partition.topic, index, partition.lease_id)
                .await
            {
                tracing::debug!(topic = %partition.topic, partition = partition.partition, %error, "transaction lease not released");
            }
        }
    }

    /// Re-grants every partition of the id's transaction to `kafka-txn:T` with a new epoch and
    /// records the epochs durably: whatever wrote with the old epochs is fenced from now on.
    async fn regrant(
        &self,
        service: &Arc<BrokerService>,
        transactional_id: &str,
    ) -> Result<TransactionMetadata, CoordinatorError> {
        let state = self
            .registry
            .get(transactional_id)
            .expect("regrant of a known id");
        self.release(service, &state.partitions).await;
        let mut regranted = Vec::with_capacity(state.partitions.len());
        let mut first_error = None;
        for partition in &state.partitions {
            match self
                .lease(
                    service,
                    transactional_id,
                    &partition.topic,
                    partition.partition,
                    state.timeout_ms,
                )
                .await
            {
                Ok(grant) => regranted.push(grant),
                Err(error) => {
                    // Keep the old epoch: the marker is tried again with a new grant later.
                    regranted.push(TxnPartition {
                        lease_id: 0,
                        ..partition.clone()
                    });
                    first_error.get_or_insert(error);
                }
            }
        }
        let next = self
            .registry
            .update(transactional_id, |current| {
                let mut next = current.expect("regrant of a known id").clone();
                next.partitions = regranted;
                Ok((next.clone(), next))
            })
            .await?;
        match first_error {
            Some(error) => Err(error),
            None => Ok(next),
        }
    }

    /// Re-grants a prepared transaction's partitions whose lease is not known to be live (after
    /// a restart, or a grant that failed).
    async fn regrant_if_needed(
        &self,
        service: &Arc<BrokerService>,
        transactional_id: &str,
    ) -> Result<(), CoordinatorError> {
        let all_held = self.registry.read(transactional_id, |state| {
            state.is_some_and(|state| state.partitions.iter().all(|p| p.lease_id != 0))
        });
        if all_held {
            return Ok(());
        }
        self.regrant(service, transactional_id).await.map(drop)
    }

    /// Writes the prepared outcome's markers, applies (commit) the pending offsets, releases the
    /// leases and stores `Complete*`. Anything that fails leaves the state prepared, to be
    /// completed again (a second marker of the same outcome is harmless).
    async fn complete(
        &self,
        service: &Arc<BrokerService>,
        transactional_id: &str,
    ) -> Result<(), CoordinatorError> {
        let Some(state) = self
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
        write_markers(service, &state, marker).await?;
        if marker == ControlMarker::Commit {
            for (group, topics) in &state.pending_offsets {
                let offsets = topics
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
                    .collect();
                service
                    .commit_offsets_within(group.clone(), offsets, CommitBound::Existence)
                    .await
                    .written?;
            }
        }
        self.release(service, &state.partitions).await;
        self.registry
            .update(transactional_id, |current| {
                let current = current.expect("completing a known id");
                let next = current.complete().unwrap_or_else(|| current.clone());
                Ok((next, ()))
            })
            .await?;
        Ok(())
    }

    /// Moves an open transaction to `PrepareAbort` with `decide`, fences it (re-grant) and
    /// completes the abort.
    async fn abort_open(
        &self,
        service: &Arc<BrokerService>,
        transactional_id: &str,
        decide: impl FnOnce(&TransactionMetadata) -> Option<TransactionMetadata>,
    ) -> Result<(), CoordinatorError> {
        let decided = self
            .registry
            .update(transactional_id, |current| {
                let current = current.expect("aborting a known id");
                match decide(current) {
                    Some(next) => Ok((next, true)),
                    None => Ok((current.clone(), false)),
                }
            })
            .await?;
        if !decided {
            return Ok(());
        }
        self.regrant(service, transactional_id).await?;
        self.complete(service, transactional_id).await
    }

    /// `AddOffsetsToTxn`: the group's offsets will commit with the transaction.
    pub async fn add_offsets(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        group: &str,
    ) -> Result<(), CoordinatorError> {
        self.registry
            .update(transactional_id, |current| {
                let current = current.ok_or(TxnError::InvalidProducerIdMapping {
                    given: producer_id,
                    current: -1,
                })?;
                Ok((
                    current.add_offsets(producer_id, producer_epoch, group, now_ms())?,
                    (),
                ))
            })
            .await?;
        Ok(())
    }

    /// `TxnOffsetCommit`: positions held until the transaction commits.
    pub async fn commit_offsets(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        group: &str,
        offsets: Vec<(String, i32, super::PendingOffset)>,
    ) -> Result<(), CoordinatorError> {
        self.registry
            .update(transactional_id, |current| {
                let current = current.ok_or(TxnError::InvalidProducerIdMapping {
                    given: producer_id,
                    current: -1,
                })?;
                Ok((
                    current.commit_offsets(producer_id, producer_epoch, group, offsets)?,
                    (),
                ))
            })
            .await?;
        Ok(())
    }

    /// `EndTxn`: decides the outcome durably, waits for the transaction's produces in flight,
    /// writes the markers and completes. `Ok` once the outcome is decided and durable: a marker
    /// that could not be written yet is written by the timeout task (Kafka's coordinator answers
    /// the same way, and writes its markers after answering).
    pub async fn end(
        &self,
        service: &Arc<BrokerService>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<(), CoordinatorError> {
        let prepared = self
            .registry
            .update(transactional_id, |current| {
                let current = current.ok_or(TxnError::InvalidProducerIdMapping {
                    given: producer_id,
                    current: -1,
                })?;
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
        if let Err(error) = self.complete(service, transactional_id).await {
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
        let epoch = self.registry.read(transactional_id, |state| {
            state
                .ok_or(TxnError::InvalidProducerIdMapping {
                    given: producer_id,
                    current: -1,
                })?
                .produce_epoch(producer_id, producer_epoch, topic, partition)
        })?;
        Ok((epoch, guard))
    }
}
