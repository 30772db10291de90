//! How a transactional produce writes one partition: the one answer the Kafka produce path
//! asks for ([`TransactionCoordinator::writer_for`]) instead of deciding by itself how this
//! broker's transactions are held.
//!
//! Standalone the coordinator holds every partition's transactions' lease itself and a
//! produce holds its transaction's gate until answered, so EndTxn's markers never overtake it.
//! On a cluster the partition's leader writes under the transactions' lease in its own lease
//! table (the coordinators hold it there) and verifies a transaction's first batch with the
//! transactional id's coordinator (docs/kafka.md, "Transactions on a cluster", step 3).

use tokio::sync::OwnedRwLockReadGuard;

use super::{TransactionCoordinator, TxnError};
use crate::broker::BrokerError;

/// How a transactional produce writes one partition: under the transactions' lease epoch, as
/// the producer it was looked up for, and (standalone) holding the transaction's gate or (on a
/// cluster) after the coordinator verified a transaction this partition has not seen open.
#[derive(Debug)]
pub struct TransactionWrite {
    /// The transactions' lease epoch on the partition (the credential).
    pub epoch: u64,
    /// The producer id and epoch of the request's batches.
    pub producer: (i64, i16),
    /// Standalone: held until the appends are answered, so EndTxn's markers wait for them.
    pub gate: Option<OwnedRwLockReadGuard<()>>,
    /// On a cluster: the guard of the verification this leader recorded, to ask the
    /// transactional id's coordinator about before the appends (`None`: the producer's
    /// transaction is open here already).
    pub verification: Option<u64>,
}

/// Why a transactional produce may not write a partition now.
#[derive(Debug, thiserror::Error)]
pub enum WriteRefusal {
    /// The coordinator refused the producer (fenced, not in a transaction with the
    /// partition, ...).
    #[error(transparent)]
    Refused(#[from] TxnError),
    /// The partition cannot take it here (not its leader, unknown).
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// On a cluster: the transactions' lease is not held at this leader now (retriable: the
    /// transaction's coordinator leases the partition again, or the transaction times out).
    #[error("{topic}-{partition}: the transactions' lease is not held here now; the transaction's coordinator takes it again shortly (retry), or the transaction times out")]
    NotLeased {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
    },
}

impl TransactionCoordinator {
    /// How `transactional_id`'s producer (`producer`: its id and epoch) writes
    /// `topic`/`partition` now (see the module docs). Synchronous: the produce path starts
    /// appends in request order.
    pub fn writer_for(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        topic: &str,
        partition: u32,
    ) -> Result<TransactionWrite, WriteRefusal> {
        if self.is_replicated() {
            return self.cluster_writer_for(producer, topic, partition);
        }
        let index = i32::try_from(partition).unwrap_or(i32::MAX);
        let (epoch, gate) =
            self.produce_epoch(transactional_id, producer.0, producer.1, topic, index)?;
        Ok(TransactionWrite {
            epoch,
            producer,
            gate: Some(gate),
            verification: None,
        })
    }

    /// A transactional write at a cluster partition's leader: under the epoch of the
    /// transactions' live lease in this leader's own lease table, and, unless the producer's
    /// transaction is open on the partition already, after a verification recorded now,
    /// before the question.
    fn cluster_writer_for(
        &self,
        producer: (i64, i16),
        topic: &str,
        partition: u32,
    ) -> Result<TransactionWrite, WriteRefusal> {
        let target = self.parts.reads.leader_partition(topic, partition)?;
        let epoch = match self.parts.leases.lookup(topic, partition) {
            Some(lease) if lease.holder == crate::lease::SHARED_HOLDER => lease.epoch,
            _ => {
                tracing::info!(%topic, partition, "a transactional produce without the transactions' lease here");
                return Err(WriteRefusal::NotLeased {
                    topic: topic.to_owned(),
                    partition,
                });
            }
        };
        Ok(TransactionWrite {
            epoch,
            producer,
            gate: None,
            verification: target.begin_verification(producer.0, producer.1),
        })
    }
}

/// Why a transaction's consumer positions (Kafka's TxnOffsetCommit) were not taken.
#[derive(Debug, thiserror::Error)]
pub enum OffsetsRefusal {
    /// This broker, the transactional id's coordinator, refused them.
    #[error(transparent)]
    Here(#[from] super::CoordinatorError),
    /// On a cluster: the transactional id's coordinator (another broker, reached as a client)
    /// refused them or could not be reached.
    #[error(transparent)]
    Elsewhere(#[from] super::PeerError),
}

impl TransactionCoordinator {
    /// Kafka's TxnOffsetCommit, as `group`'s coordinator: `transactional_id`'s transaction
    /// takes the positions `offsets`, committed with it. Standalone the coordinator records them
    /// itself; on a cluster the transactional id's coordinator may be another broker, and they
    /// are handed over to it.
    pub async fn txn_offset_commit(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        group: &str,
        offsets: Vec<(String, i32, super::PendingOffset)>,
    ) -> Result<(), OffsetsRefusal> {
        let (producer_id, producer_epoch) = producer;
        if self.is_replicated() {
            return match self
                .hand_over_offsets(
                    transactional_id,
                    producer_id,
                    producer_epoch,
                    group,
                    offsets,
                )
                .await
            {
                None | Some(Ok(())) => Ok(()),
                Some(Err(error)) => Err(error.into()),
            };
        }
        Ok(self
            .commit_offsets(
                transactional_id,
                producer_id,
                producer_epoch,
                group,
                offsets,
            )
            .await?)
    }
}

impl TransactionCoordinator {
    /// Why native atomic appends are refused here, if they are: their commit holds every
    /// partition's fence lock at once, which only a broker holding every partition can
    /// (docs/kafka.md, "Transactions on a cluster", step 4): a cluster's coordinator refuses.
    pub fn atomic_appends_refusal(&self) -> Option<&'static str> {
        self.is_replicated().then_some(
            "native atomic appends run on a standalone server: their commit holds every partition's fence lock at once, which a cluster's brokers cannot",
        )
    }

    /// Why a client's lease under `holder` is refused here, if it is: the coordinator's holder
    /// name is its own standalone (a native lease under it would pass for the coordinator's in
    /// every "held by" message). On a cluster the brokers' coordinators ask for it at each
    /// partition's leader and join it there (`lease::SHARED_HOLDER`), and authorization lets
    /// only the broker principal name it.
    pub fn reserved_holder_refusal(&self, holder: &str) -> Option<String> {
        (holder == super::TRANSACTIONS_LEASE_HOLDER && !self.is_replicated()).then(|| {
            format!("the lease holder name {:?} is reserved for the transaction coordinator: choose another --holder", super::TRANSACTIONS_LEASE_HOLDER)
        })
    }
}
