//! A cluster broker's way to the partitions its transactions write: as a native client of its
//! own cluster (docs/kafka.md, "Transactions on a cluster", step 2). Each partition's
//! leader grants the lease and writes the marker, through the fence in its segment writer, as
//! for any client; the client routes each request to the partition's leader and follows leader
//! changes.
//!
//! The lease is the coordinators' shared one ([`crate::lease::SHARED_HOLDER`]): a grant while
//! another coordinator holds it joins it. So a coordinator never releases it (another one may
//! be using it): it lapses one TTL after the last coordinator stopped renewing it, and only
//! then may a native client take the partition.
//!
//! The client authenticates as the broker user (`serve --broker-user`) and speaks TLS to the
//! brokers when they serve it (`--peer-tls-ca`), as followers do to their leaders.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::OnceCell;

use super::partitions::TransactionPartitions;
use super::TRANSACTIONS_LEASE_HOLDER;
use crate::broker::cluster::ClusterDriver;
use crate::broker::{BrokerError, CommittedOffset};
use crate::client::{Client, ClientConfig, ClientError};
use crate::domain::Acks;
use crate::lease::{AuthorityError, Grant, LeaseError};
use crate::protocol::{TransactionProducer, TxnOffset};
use crate::storage::{FenceError, StorageError};

/// How long the coordinator's client waits to connect to a broker.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one lease or marker request may take (a marker waits for `acks=all`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one call keeps dialling a broker that does not answer before it gives up on it
/// and looks the partition's leader up again: a broker's questions must follow a failover
/// (a leader waiting for a verification holds its producer's later produces), not wait out
/// the request timeout on a dead address.
const RECONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// The partitions of a cluster, reached through a native client of it.
#[derive(Debug)]
pub struct ClusterPartitions {
    driver: Arc<ClusterDriver>,
    client: OnceCell<Client>,
}

impl ClusterPartitions {
    /// The partitions of `driver`'s cluster; the client connects on first use.
    pub fn new(driver: Arc<ClusterDriver>) -> Self {
        Self {
            driver,
            client: OnceCell::new(),
        }
    }

    /// The client of the cluster, connected to the live brokers first.
    async fn client(&self) -> Result<&Client, BrokerError> {
        self.client
            .get_or_try_init(|| async {
                let addrs: Vec<String> = self
                    .driver
                    .brokers()
                    .into_iter()
                    .filter(|broker| !broker.native_addr.is_empty())
                    .map(|broker| broker.native_addr)
                    .collect();
                let config = self.driver.config();
                Client::builder()
                    .addrs(addrs)
                    .config(ClientConfig {
                        connect_timeout: CONNECT_TIMEOUT,
                        request_timeout: REQUEST_TIMEOUT,
                        reconnect_timeout: RECONNECT_TIMEOUT,
                        reconnect_backoff_max: RECONNECT_TIMEOUT,
                        credentials: config.peer_credentials.clone(),
                        tls: config.peer_tls.clone(),
                        ..ClientConfig::default()
                    })
                    .connect()
                    .await
                    .map_err(|error| unreached("connect to the cluster", &error))
            })
            .await
    }
}

/// A client's failure as the broker error the coordinator acts on: a held lease (the
/// transaction waits), a fenced write (the lease was lost), anything else (retried later).
fn broker_error(topic: &str, partition: u32, error: ClientError) -> BrokerError {
    match error {
        ClientError::LeaseHeld {
            holder,
            expires_in,
            current_epoch,
            ..
        } => BrokerError::Lease(AuthorityError::Refused(LeaseError::Held {
            topic: topic.to_owned(),
            partition,
            holder,
            expires_in_ms: u64::try_from(expires_in.as_millis()).unwrap_or(u64::MAX),
            current_epoch,
        })),
        ClientError::Fenced { epoch, current } => {
            BrokerError::Storage(StorageError::Fence(FenceError::Fenced { epoch, current }))
        }
        // The partition's leader could not be reached or moved (a failover): the transaction
        // waits for its new leader, as for any leader change (retriable).
        other if other.is_retriable() && other.code().is_none_or(|code| code.is_retriable()) => {
            BrokerError::Cluster(crate::broker::cluster::ClusterError::LeaderNotAvailable {
                topic: topic.to_owned(),
                partition,
                leader_epoch: 0,
            })
        }
        other => unreached(&format!("{topic}-{partition}"), &other),
    }
}

fn unreached(what: &str, error: &ClientError) -> BrokerError {
    BrokerError::Io {
        context: format!("the transaction coordinator's request for {what}"),
        source: std::io::Error::other(error.to_string()),
    }
}

impl TransactionPartitions for ClusterPartitions {
    fn acquire<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<Grant, BrokerError>> {
        Box::pin(async move {
            let lease = self
                .client()
                .await?
                .acquire_lease(
                    topic,
                    partition,
                    TRANSACTIONS_LEASE_HOLDER,
                    Duration::from_millis(ttl_ms),
                )
                .await
                .map_err(|error| broker_error(topic, partition, error))?;
            Ok(Grant {
                epoch: lease.epoch,
                lease_id: lease.lease_id,
                ttl_ms: lease.ttl_ms,
                holder: TRANSACTIONS_LEASE_HOLDER.to_owned(),
                joined: false,
            })
        })
    }

    fn renew<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        lease_id: u128,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        Box::pin(async move {
            self.client()
                .await?
                .renew_lease(topic, partition, lease_id)
                .await
                .map(|_| ())
                .map_err(|error| broker_error(topic, partition, error))
        })
    }

    /// Never released (see the module docs): it lapses when no coordinator renews it.
    fn release<'a>(
        &'a self,
        _topic: &'a str,
        _partition: u32,
        _lease_id: u128,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        Box::pin(async { Ok(()) })
    }

    fn write_marker<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        _lease_epoch: u64,
        marker: Bytes,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        // The marker's header carries the lease epoch it is written under.
        Box::pin(async move {
            self.client()
                .await?
                .produce_with_acks(topic, partition, marker, Acks::All)
                .await
                .map(|_| ())
                .map_err(|error| broker_error(topic, partition, error))
        })
    }

    fn leader_epoch(&self, topic: &str, partition: u32) -> Option<u32> {
        Some(self.driver.partition_state(topic, partition).leader_epoch)
    }

    fn end_offsets<'a>(
        &'a self,
        group: &'a str,
        transactional_id: &'a str,
        commit: bool,
        offsets: Vec<(String, u32, CommittedOffset)>,
    ) -> BoxFuture<'a, Result<(), BrokerError>> {
        Box::pin(async move {
            let offsets = offsets
                .into_iter()
                .map(|(topic, partition, committed)| TxnOffset {
                    topic,
                    partition,
                    offset: committed.offset,
                    leader_epoch: -1,
                    metadata: committed.metadata,
                })
                .collect();
            self.client()
                .await?
                .end_txn_offsets(group, transactional_id, commit, offsets)
                .await
                .map_err(|error| unreached(&format!("group {group}'s positions"), &error))
        })
    }
}

impl ClusterPartitions {
    /// Whether this broker leads `key`'s offsets partition now (coordinates the transactional
    /// id or group `key`), as its cluster view says.
    pub fn coordinates(&self, key: &str) -> bool {
        use crate::domain::{offsets_partition, OFFSETS_TOPIC};
        self.driver
            .partition_count(OFFSETS_TOPIC)
            .is_some_and(|partitions| {
                let partition = offsets_partition(key, partitions);
                self.driver.partition_state(OFFSETS_TOPIC, partition).leader
                    == Some(self.driver.node_id())
            })
    }

    /// The client of the cluster, for a broker-to-broker call (its failure to connect as a
    /// client error, like the call's own).
    async fn peer(&self) -> Result<&Client, ClientError> {
        self.client()
            .await
            .map_err(|error| ClientError::Io(Arc::new(std::io::Error::other(error.to_string()))))
    }

    /// Asks `producer`'s transaction coordinator (the leader of the transactional id's offsets
    /// partition) whether its transaction is open with `topic`/`partition` in it: a
    /// partition leader's verification before a transaction's first batch there (see
    /// [`crate::storage::verification`]). The coordinator's refusal comes back as the client
    /// error it is (`INVALID_TRANSACTION_STATE`, `PRODUCER_FENCED`, ...).
    pub async fn verify_transaction(
        &self,
        producer: TransactionProducer,
        topic: &str,
        partition: u32,
    ) -> Result<(), ClientError> {
        self.peer()
            .await?
            .verify_transaction(producer, topic, partition)
            .await
    }

    /// As a group's coordinator: hands a transaction's consumer positions for `group` to the
    /// transactional id's coordinator (Kafka's TxnOffsetCommit on a cluster).
    pub async fn txn_offset_commit(
        &self,
        producer: TransactionProducer,
        group: &str,
        offsets: Vec<TxnOffset>,
    ) -> Result<(), ClientError> {
        self.peer()
            .await?
            .txn_offset_commit(producer, group, offsets)
            .await
    }
}
