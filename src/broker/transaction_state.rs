//! The state machine of one transactional id, as Kafka's `TransactionMetadata` and
//! `TransactionCoordinator` run it, without I/O.
//!
//! Every operation takes the current metadata (by reference) and returns either a refusal
//! ([`TxnError`], one variant per Kafka error a client is told) or the *next* metadata. The
//! caller writes the next metadata durably and only then installs it and answers, so a restart
//! never forgets a producer epoch that a client was told about (which would un-fence a zombie)
//! or a partition whose lease it holds (which would leave a transaction open for ever).
//!
//! States (Kafka's, minus `Dead` and `PrepareEpochFence`, which the bumped epoch in
//! `PrepareAbort` covers):
//!
//! ```text
//! Empty ──add──▶ Ongoing ──end(commit)──▶ PrepareCommit ──markers written──▶ CompleteCommit
//!                   │                                                             │
//!                   └──end(abort), timeout, new instance──▶ PrepareAbort ──▶ CompleteAbort
//! Complete* ──add──▶ Ongoing (a new transaction)
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Longest transactional id accepted, in bytes: its hex name (twice as long, plus `.json`) must
/// fit a file name (255 bytes on common file systems). A longer id is refused
/// ([`io::ErrorKind::InvalidInput`], told to the client as `INVALID_REQUEST`).
pub const MAX_TRANSACTIONAL_ID_BYTES: usize = 120;

/// The last producer epoch a transactional id may use; past it `InitProducerId` hands out a new
/// producer id at epoch 0 (Kafka does the same: `Short.MaxValue - 1`, keeping `MaxValue` free
/// for the abort that fences an exhausted epoch).
pub const MAX_PRODUCER_EPOCH: i16 = i16::MAX - 1;

/// How long an id with nothing open is kept after its last change (Kafka's
/// `transactional.id.expiration.ms` default, 7 days); then it is forgotten, and its next
/// `InitProducerId` starts it again with a new producer id.
pub const TRANSACTIONAL_ID_EXPIRATION_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// Most transactional ids a broker keeps at once: a new one past it is refused
/// (`TxnError::TooManyIds`) until idle ones expire. Each is a small file and a map entry.
pub const MAX_TRANSACTIONAL_IDS: usize = 100_000;

/// Where a transactional id's current transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnState {
    /// No transaction open (a new id, or nothing added since `InitProducerId`).
    Empty,
    /// Partitions or offsets were added; records may be written.
    Ongoing,
    /// `EndTxn(commit)` accepted: commit markers are being written.
    PrepareCommit,
    /// An abort was decided (`EndTxn(abort)`, a timeout, a new instance): abort markers are
    /// being written.
    PrepareAbort,
    /// The last transaction's commit markers are all written.
    CompleteCommit,
    /// The last transaction's abort markers are all written.
    CompleteAbort,
}

impl TxnState {
    /// Kafka's name for the state (DescribeTransactions, ListTransactions' filter).
    pub fn kafka_name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::Ongoing => "Ongoing",
            Self::PrepareCommit => "PrepareCommit",
            Self::PrepareAbort => "PrepareAbort",
            Self::CompleteCommit => "CompleteCommit",
            Self::CompleteAbort => "CompleteAbort",
        }
    }

    /// Whether markers are being written (requests other than retries wait:
    /// `CONCURRENT_TRANSACTIONS`).
    pub fn is_preparing(self) -> bool {
        matches!(self, Self::PrepareCommit | Self::PrepareAbort)
    }
}

/// A partition in the open transaction, with the epoch `F` of the transactions' lease there:
/// the transaction's records and its marker are written with `WriteCredential::Epoch(F)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnPartition {
    /// The topic.
    pub topic: String,
    /// The partition index (Kafka's i32).
    pub partition: i32,
    /// The lease epoch `F` of the transactions' lease on this partition when it joined (the
    /// coordinator's shared lease may be re-acquired later, after a restart: writes and
    /// markers use its current epoch).
    pub lease_epoch: u64,
    /// The writer leases the partition itself (a native atomic append): `lease_epoch` is that
    /// lease's epoch, checked still current on every partition at once when the transaction
    /// commits; the coordinator neither acquires nor releases the lease. `false`: the
    /// coordinator holds it (a Kafka transaction).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub client_leased: bool,
}

/// An offset sent by `TxnOffsetCommit`, applied to the group's committed offsets when the
/// transaction commits, dropped when it aborts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingOffset {
    /// The next offset the group will read.
    pub offset: i64,
    /// The leader epoch the client saw (-1: none).
    pub leader_epoch: i32,
    /// The client's metadata string.
    pub metadata: Option<String>,
}

/// A refusal, named after the Kafka error the client is told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    /// The producer id is not this transactional id's (`INVALID_PRODUCER_ID_MAPPING`).
    #[error("producer id {given} is not transactional id's producer id {current}: call InitProducerId again")]
    InvalidProducerIdMapping {
        /// The request's producer id.
        given: i64,
        /// The transactional id's producer id.
        current: i64,
    },
    /// An older producer epoch: another instance with the same transactional id took over
    /// (`PRODUCER_FENCED`, `INVALID_PRODUCER_EPOCH` for clients that predate it).
    #[error("producer epoch {given} is older than the transactional id's epoch {current}: a newer producer with the same transactional.id fenced this one; close it")]
    ProducerFenced {
        /// The request's producer epoch.
        given: i16,
        /// The transactional id's producer epoch.
        current: i16,
    },
    /// Markers of the previous transaction are still being written (`CONCURRENT_TRANSACTIONS`,
    /// retriable).
    #[error("the previous transaction is still completing ({state}): retry shortly")]
    ConcurrentTransactions {
        /// The state being completed.
        state: &'static str,
    },
    /// The request does not fit the state (`INVALID_TXN_STATE`).
    #[error("cannot {operation} a transaction in state {state}")]
    InvalidTxnState {
        /// What was asked.
        operation: &'static str,
        /// The state it does not fit.
        state: &'static str,
    },
    /// A partition written by a transactional producer was not added to its transaction
    /// (`INVALID_TXN_STATE` on Produce; Kafka before KIP-890 answers the same).
    #[error("{topic}-{partition} was not added to the transaction: call AddPartitionsToTxn first")]
    PartitionNotAdded {
        /// The topic written.
        topic: String,
        /// The partition written.
        partition: i32,
    },
    /// The broker keeps [`MAX_TRANSACTIONAL_IDS`] ids already (`POLICY_VIOLATION`).
    #[error("this broker already keeps {max} transactional ids (MAX_TRANSACTIONAL_IDS); reuse an id, or wait for idle ones to expire ({days} days)", days = TRANSACTIONAL_ID_EXPIRATION_MS / 86_400_000)]
    TooManyIds {
        /// The limit.
        max: usize,
    },
    /// A native atomic append would span more partitions than its commit may lock at once.
    #[error("a native transaction spans at most {max} partitions (MAX_ATOMIC_PARTITIONS); commit and start another")]
    TooManyPartitions {
        /// The limit.
        max: usize,
    },
    /// The requested timeout is above the broker's limit (`INVALID_TRANSACTION_TIMEOUT`).
    #[error("transaction timeout {requested_ms} ms is above the broker's limit {max_ms} ms (transaction.max.timeout.ms)")]
    InvalidTimeout {
        /// The client's `transaction.timeout.ms`.
        requested_ms: i64,
        /// The broker's limit.
        max_ms: i64,
    },
}

/// The answer to `InitProducerId` for an id that exists.
#[derive(Debug, Clone, PartialEq)]
pub enum InitOutcome {
    /// Store this and answer with its producer id and epoch.
    Ready(TransactionMetadata),
    /// The previous instance's transaction is open: store this (`PrepareAbort` with the bumped
    /// epoch, fencing the old instance), write its abort markers, complete it, and answer
    /// `CONCURRENT_TRANSACTIONS` so the client retries (as Kafka does).
    AbortFirst(TransactionMetadata),
}

/// The answer to `EndTxn`.
#[derive(Debug, Clone, PartialEq)]
pub enum EndOutcome {
    /// Store this (`PrepareCommit`/`PrepareAbort`), write the markers, release the leases,
    /// apply (commit) or drop (abort) the pending offsets, then [`TransactionMetadata::complete`].
    Prepare(TransactionMetadata),
    /// A retry of an `EndTxn` that already completed the same way: answer success.
    AlreadyDone,
}

/// One transactional id's state: what the coordinator stores durably.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionMetadata {
    /// The transactional id `T`.
    pub transactional_id: String,
    /// Its producer id: stable across instances until the epoch is exhausted.
    pub producer_id: i64,
    /// The current instance's producer epoch; older ones are fenced.
    pub producer_epoch: i16,
    /// Where the current transaction is.
    pub state: TxnState,
    /// The client's `transaction.timeout.ms`: an open transaction older than this is aborted.
    pub timeout_ms: i64,
    /// When the open transaction started (its first add), ms since the epoch; -1 if none.
    pub start_ms: i64,
    /// The partitions of the open (or completing) transaction.
    pub partitions: Vec<TxnPartition>,
    /// Pending offsets: group -> topic -> partition -> offset.
    pub pending_offsets: BTreeMap<String, BTreeMap<String, BTreeMap<i32, PendingOffset>>>,
    /// The groups added by `AddOffsetsToTxn`.
    pub groups: Vec<String>,
    /// When the state last changed, ms since the Unix epoch (set by the registry on every
    /// update): an id idle for [`TRANSACTIONAL_ID_EXPIRATION_MS`] with nothing open is
    /// forgotten, as Kafka's `transactional.id.expiration.ms` does.
    #[serde(default)]
    pub updated_ms: i64,
}

impl TransactionMetadata {
    /// A new transactional id's state after its first `InitProducerId`.
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i64) -> Self {
        Self {
            transactional_id: transactional_id.to_string(),
            producer_id,
            producer_epoch: 0,
            state: TxnState::Empty,
            timeout_ms,
            start_ms: -1,
            partitions: Vec::new(),
            pending_offsets: BTreeMap::new(),
            groups: Vec::new(),
            updated_ms: 0,
        }
    }

    /// `InitProducerId` of a new instance: bumps the epoch (fencing the previous instance), or
    /// hands out `new_producer_id` at epoch 0 once the epoch is exhausted. `new_producer_id` is
    /// called only then.
    pub fn init_producer_id(
        &self,
        timeout_ms: i64,
        new_producer_id: impl FnOnce() -> i64,
    ) -> Result<InitOutcome, TxnError> {
        match self.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                Err(TxnError::ConcurrentTransactions {
                    state: self.state.kafka_name(),
                })
            }
            TxnState::Ongoing => {
                let mut next = self.bumped(new_producer_id);
                next.state = TxnState::PrepareAbort;
                Ok(InitOutcome::AbortFirst(next))
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let mut next = self.bumped(new_producer_id);
                next.timeout_ms = timeout_ms;
                next.state = TxnState::Empty;
                next.start_ms = -1;
                Ok(InitOutcome::Ready(next))
            }
        }
    }

    /// The same id with the next producer epoch, or a new producer id at epoch 0 past
    /// [`MAX_PRODUCER_EPOCH`].
    fn bumped(&self, new_producer_id: impl FnOnce() -> i64) -> Self {
        let mut next = self.clone();
        if self.producer_epoch >= MAX_PRODUCER_EPOCH {
            next.producer_id = new_producer_id();
            next.producer_epoch = 0;
        } else {
            next.producer_epoch += 1;
        }
        next
    }

    /// The producer id and epoch of a request checked against this id's.
    fn check_producer(&self, producer_id: i64, producer_epoch: i16) -> Result<(), TxnError> {
        if producer_id != self.producer_id {
            return Err(TxnError::InvalidProducerIdMapping {
                given: producer_id,
                current: self.producer_id,
            });
        }
        if producer_epoch != self.producer_epoch {
            return Err(TxnError::ProducerFenced {
                given: producer_epoch,
                current: self.producer_epoch,
            });
        }
        Ok(())
    }

    /// Checks that something may be added to the transaction now, and returns the next state
    /// with the transaction open (started at `now_ms` if it was not).
    fn opened(&self, producer_id: i64, producer_epoch: i16, now_ms: i64) -> Result<Self, TxnError> {
        self.check_producer(producer_id, producer_epoch)?;
        if self.state.is_preparing() {
            return Err(TxnError::ConcurrentTransactions {
                state: self.state.kafka_name(),
            });
        }
        let mut next = self.clone();
        if self.state != TxnState::Ongoing {
            next.state = TxnState::Ongoing;
            next.start_ms = now_ms;
            next.partitions.clear();
            next.pending_offsets.clear();
            next.groups.clear();
        }
        Ok(next)
    }

    /// Which of `partitions` are not in the transaction yet (the caller acquires their leases,
    /// then calls [`Self::add_partitions`] with the epochs).
    pub fn missing_partitions<'a>(
        &self,
        partitions: impl IntoIterator<Item = (&'a str, i32)>,
    ) -> Vec<(&'a str, i32)> {
        partitions
            .into_iter()
            .filter(|(topic, partition)| self.lease_epoch_of(topic, *partition).is_none())
            .collect()
    }

    /// Checks an `AddPartitionsToTxn` before any lease is acquired.
    pub fn check_add(&self, producer_id: i64, producer_epoch: i16) -> Result<(), TxnError> {
        self.opened(producer_id, producer_epoch, 0).map(|_| ())
    }

    /// `AddPartitionsToTxn`: the partitions (with the lease epochs acquired for them) join the
    /// transaction. A partition already in it keeps its first epoch.
    pub fn add_partitions(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TxnPartition],
        now_ms: i64,
    ) -> Result<Self, TxnError> {
        let mut next = self.opened(producer_id, producer_epoch, now_ms)?;
        for partition in partitions {
            if next
                .lease_epoch_of(&partition.topic, partition.partition)
                .is_none()
            {
                next.partitions.push(partition.clone());
            }
        }
        Ok(next)
    }

    /// `AddOffsetsToTxn`: the group's offsets will be committed with the transaction.
    pub fn add_offsets(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        group: &str,
        now_ms: i64,
    ) -> Result<Self, TxnError> {
        let mut next = self.opened(producer_id, producer_epoch, now_ms)?;
        if !next.groups.iter().any(|known| known == group) {
            next.groups.push(group.to_string());
        }
        Ok(next)
    }

    /// `TxnOffsetCommit`: offsets of a group added by `AddOffsetsToTxn`, held until the end.
    pub fn commit_offsets(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        group: &str,
        offsets: impl IntoIterator<Item = (String, i32, PendingOffset)>,
    ) -> Result<Self, TxnError> {
        self.check_producer(producer_id, producer_epoch)?;
        if self.state != TxnState::Ongoing || !self.groups.iter().any(|known| known == group) {
            return Err(TxnError::InvalidTxnState {
                operation: "commit offsets of a group not added to",
                state: self.state.kafka_name(),
            });
        }
        let mut next = self.clone();
        let group_offsets = next.pending_offsets.entry(group.to_string()).or_default();
        for (topic, partition, offset) in offsets {
            group_offsets
                .entry(topic)
                .or_default()
                .insert(partition, offset);
        }
        Ok(next)
    }

    /// `EndTxn`: decides the transaction's outcome.
    pub fn end(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<EndOutcome, TxnError> {
        self.check_producer(producer_id, producer_epoch)?;
        let operation = if commit { "commit" } else { "abort" };
        match (self.state, commit) {
            (TxnState::Ongoing, _) => {
                let mut next = self.clone();
                next.state = if commit {
                    TxnState::PrepareCommit
                } else {
                    TxnState::PrepareAbort
                };
                Ok(EndOutcome::Prepare(next))
            }
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
                Ok(EndOutcome::AlreadyDone)
            }
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                Err(TxnError::ConcurrentTransactions {
                    state: self.state.kafka_name(),
                })
            }
            // An abort with nothing added is fine for Kafka's clients (abort_transaction right
            // after begin_transaction): nothing to write.
            (TxnState::Empty, false) => Ok(EndOutcome::AlreadyDone),
            (state, _) => Err(TxnError::InvalidTxnState {
                operation,
                state: state.kafka_name(),
            }),
        }
    }

    /// The transaction's markers are written and its leases released: `Complete*`, nothing
    /// held. `None` if not preparing.
    pub fn complete(&self) -> Option<Self> {
        let state = match self.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            _ => return None,
        };
        let mut next = self.clone();
        next.state = state;
        next.start_ms = -1;
        next.partitions.clear();
        next.pending_offsets.clear();
        next.groups.clear();
        Some(next)
    }

    /// Whether the id has nothing open and has been idle past
    /// [`TRANSACTIONAL_ID_EXPIRATION_MS`] at `now_ms`: it may be forgotten.
    pub fn is_idle_expired(&self, now_ms: i64) -> bool {
        matches!(
            self.state,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        ) && now_ms.saturating_sub(self.updated_ms) > TRANSACTIONAL_ID_EXPIRATION_MS
    }

    /// Whether the open transaction ran past its timeout at `now_ms`.
    pub fn is_expired(&self, now_ms: i64) -> bool {
        self.state == TxnState::Ongoing && now_ms.saturating_sub(self.start_ms) > self.timeout_ms
    }

    /// The abort of an expired transaction: `PrepareAbort` with the epoch bumped, so the
    /// timed-out producer is fenced (Kafka bumps it too); `None` if not expired.
    pub fn expire(&self, now_ms: i64, new_producer_id: impl FnOnce() -> i64) -> Option<Self> {
        if !self.is_expired(now_ms) {
            return None;
        }
        let mut next = self.bumped(new_producer_id);
        next.state = TxnState::PrepareAbort;
        Some(next)
    }

    /// The lease epoch `F` a transactional Produce writes to `topic`-`partition` with.
    pub fn produce_epoch(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> Result<u64, TxnError> {
        self.check_producer(producer_id, producer_epoch)?;
        if self.state != TxnState::Ongoing {
            return Err(TxnError::InvalidTxnState {
                operation: "produce to",
                state: self.state.kafka_name(),
            });
        }
        match self
            .partitions
            .iter()
            .find(|known| known.topic == topic && known.partition == partition)
        {
            // A native writer's own lease: a Kafka producer never writes under it.
            Some(known) if known.client_leased => Err(TxnError::InvalidTxnState {
                operation: "produce (as a Kafka producer) to a native writer's",
                state: self.state.kafka_name(),
            }),
            Some(known) => Ok(known.lease_epoch),
            None => Err(TxnError::PartitionNotAdded {
                topic: topic.to_string(),
                partition,
            }),
        }
    }

    /// Whether the open transaction is a native atomic append (its partitions are leased by
    /// the writer itself): Kafka's transaction APIs leave it alone.
    pub fn is_client_leased(&self) -> bool {
        self.partitions
            .iter()
            .any(|partition| partition.client_leased)
    }

    pub(super) fn lease_epoch_of(&self, topic: &str, partition: i32) -> Option<u64> {
        self.partitions
            .iter()
            .find(|known| known.topic == topic && known.partition == partition)
            .map(|known| known.lease_epoch)
    }
}
