//! Native atomic appends from the client side: a [`TransactionalProducer`] appends to several
//! partitions under the caller's leases and commits them all or none.
//!
//! ```no_run
//! # async fn example(client: fencelog::client::Client) -> Result<(), fencelog::client::ClientError> {
//! use std::time::Duration;
//! let a = client.acquire_lease("orders", 0, "me", Duration::from_secs(30)).await?;
//! let b = client.acquire_lease("orders", 1, "me", Duration::from_secs(30)).await?;
//! let mut producer = client.init_transaction("order-writer", Duration::from_secs(60)).await?;
//! producer.send("orders", 0, a.epoch, &[(None, "debit".into())]).await?;
//! producer.send("orders", 1, b.epoch, &[(None, "credit".into())]).await?;
//! producer.commit().await?; // both, or (an error) neither
//! # Ok(()) }
//! ```
//!
//! Every outcome is told as it is: `commit` returning `Ok` means every batch is published to
//! read_committed readers; an error whose [`ClientError::outcome`] is `NotWritten` (fenced on a
//! partition, a newer instance, an abort) means none of it ever will be; `Unknown` (the answer
//! was lost) means the transaction may have committed: read before writing it again.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;

use super::calls::expect_response;
use super::{Client, ClientError, ProduceAck};
use crate::batch::{add_sequence, now_ms, BatchBuilder};
use crate::protocol::{Request, Response, TransactionPartition, TransactionProducer, TxnOffset};

/// A transactional id's producer for native atomic appends (see the module docs). One open
/// transaction at a time; a new one starts with the first [`send`](Self::send) after a commit
/// or an abort.
#[derive(Debug)]
pub struct TransactionalProducer {
    client: Client,
    producer: TransactionProducer,
    /// The next sequence number per partition (sequences run on across transactions of one
    /// producer epoch).
    sequences: HashMap<(String, u32), i32>,
    /// The partitions of the open transaction, with the epoch each joined with.
    added: HashMap<(String, u32), u64>,
}

impl Client {
    /// Broker to broker (a partition leader's question before a Kafka transaction's first
    /// batch there): whether `producer`'s transaction is open with `topic`/`partition` in it,
    /// asked at the transactional id's coordinator (the leader of its offsets partition,
    /// found as a group's coordinator is). Needs the broker principal or `admin` on the topic.
    pub async fn verify_transaction(
        &self,
        producer: TransactionProducer,
        topic: &str,
        partition: u32,
    ) -> Result<(), ClientError> {
        let group = producer.transactional_id.clone();
        let request = Request::VerifyTransaction {
            producer,
            topic: topic.to_owned(),
            partition,
        };
        let response = self.call_group(&group, request).await?;
        expect_response!(response, Response::VerifyTransaction => ())
    }

    /// Broker to broker (a group's coordinator, answering Kafka's TxnOffsetCommit): hands a
    /// transaction's consumer positions for `group` to the transactional id's coordinator,
    /// which holds them until the transaction ends.
    pub async fn txn_offset_commit(
        &self,
        producer: TransactionProducer,
        group: &str,
        offsets: Vec<TxnOffset>,
    ) -> Result<(), ClientError> {
        let transactional_id = producer.transactional_id.clone();
        let request = Request::TxnOffsetCommit {
            producer,
            group: group.to_owned(),
            offsets,
        };
        let response = self.call_group(&transactional_id, request).await?;
        expect_response!(response, Response::TxnOffsetCommit => ())
    }

    /// Broker to broker (a transactional id's coordinator, once the transaction is decided
    /// and its markers written): tells `group`'s coordinator the outcome; on commit it stores
    /// `offsets`. Repeating it is harmless.
    pub async fn end_txn_offsets(
        &self,
        group: &str,
        transactional_id: &str,
        commit: bool,
        offsets: Vec<TxnOffset>,
    ) -> Result<(), ClientError> {
        let request = Request::EndTxnOffsets {
            group: group.to_owned(),
            transactional_id: transactional_id.to_owned(),
            commit,
            offsets,
        };
        let response = self.call_group(group, request).await?;
        expect_response!(response, Response::EndTxnOffsets => ())
    }

    /// Starts (or takes over) `transactional_id`: the id's producer id with a new producer
    /// epoch, which fences every earlier instance (its open transaction is aborted first). An
    /// open transaction older than `timeout` is aborted by the server.
    pub async fn init_transaction(
        &self,
        transactional_id: &str,
        timeout: Duration,
    ) -> Result<TransactionalProducer, ClientError> {
        let request = Request::InitTransaction {
            transactional_id: transactional_id.to_owned(),
            timeout_ms: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
        };
        let response = self.call(request).await?;
        let (producer_id, producer_epoch) = expect_response!(response, Response::InitTransaction { producer_id, producer_epoch } => (producer_id, producer_epoch))?;
        Ok(TransactionalProducer {
            client: self.clone(),
            producer: TransactionProducer {
                transactional_id: transactional_id.to_owned(),
                producer_id,
                producer_epoch,
            },
            sequences: HashMap::new(),
            added: HashMap::new(),
        })
    }
}

impl TransactionalProducer {
    /// The transactional id with its producer id and epoch.
    pub fn producer(&self) -> &TransactionProducer {
        &self.producer
    }

    /// The partitions of the open transaction.
    pub fn partitions(&self) -> BTreeSet<(String, u32)> {
        self.added.keys().cloned().collect()
    }

    /// Adds partitions to the open transaction (opening one), each with the epoch of the
    /// caller's lease there; all or none. [`send`](Self::send) adds its partition itself.
    pub async fn add_partitions(
        &mut self,
        partitions: &[(&str, u32, u64)],
    ) -> Result<(), ClientError> {
        let missing: Vec<TransactionPartition> = partitions
            .iter()
            .filter(|(topic, partition, _)| {
                !self.added.contains_key(&((*topic).to_owned(), *partition))
            })
            .map(|(topic, partition, epoch)| TransactionPartition {
                topic: (*topic).to_owned(),
                partition: *partition,
                epoch: *epoch,
            })
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let request = Request::AddToTransaction {
            producer: self.producer.clone(),
            partitions: missing.clone(),
        };
        let response = self.client.call(request).await?;
        expect_response!(response, Response::AddToTransaction => ())?;
        for partition in missing {
            self.added
                .insert((partition.topic, partition.partition), partition.epoch);
        }
        Ok(())
    }

    /// Appends `records` (key, value) to `topic`-`partition` as one transactional batch under
    /// `epoch` (the caller's lease there), adding the partition to the transaction first if
    /// needed. Visible to read_committed readers once the transaction commits.
    pub async fn send(
        &mut self,
        topic: &str,
        partition: u32,
        epoch: u64,
        records: &[(Option<Bytes>, Bytes)],
    ) -> Result<ProduceAck, ClientError> {
        self.add_partitions(&[(topic, partition, epoch)]).await?;
        let key = (topic.to_owned(), partition);
        let sequence = self.sequences.get(&key).copied().unwrap_or(0);
        let mut batch = BatchBuilder::with_producer(
            epoch,
            self.producer.producer_id,
            self.producer.producer_epoch,
        )
        .transactional();
        let timestamp = now_ms();
        for (key, value) in records {
            batch.push(timestamp, key.as_deref(), Some(value));
        }
        let count = batch.len();
        let ack = self
            .client
            .produce(topic, partition, batch.finish_with_sequence(sequence))
            .await?;
        self.sequences.insert(key, add_sequence(sequence, count));
        Ok(ack)
    }

    /// Commits the open transaction: every partition's batches become visible to read_committed
    /// readers at once, or (an error) none ever does. The server commits only while the
    /// caller's epoch is still current on every partition; if a partition was granted to
    /// someone else, the transaction is aborted and this fails with `FENCED`. Nothing open:
    /// nothing to do.
    pub async fn commit(&mut self) -> Result<(), ClientError> {
        self.end(true).await
    }

    /// Aborts the open transaction: none of it is ever visible to read_committed readers.
    pub async fn abort(&mut self) -> Result<(), ClientError> {
        self.end(false).await
    }

    async fn end(&mut self, commit: bool) -> Result<(), ClientError> {
        if self.added.is_empty() {
            return Ok(());
        }
        let request = Request::EndTransaction {
            producer: self.producer.clone(),
            commit,
        };
        let ended = self.client.call(request).await;
        // Whatever the answer, this transaction is over on the client's side: a refusal aborted
        // it, and an unknown outcome must be read, not continued.
        self.added.clear();
        let response = ended?;
        expect_response!(response, Response::EndTransaction => ())
    }
}
