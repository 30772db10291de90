//! Sending each partition's requests to the partition's leader, and sending them again when
//! that is safe.
//!
//! A client starts with its bootstrap connection only (`reconnect::Endpoint`), and sends a
//! partition's request there until it learns otherwise: a standalone server (or any single
//! broker) never costs an extra request. A broker that does not lead the partition answers
//! `NOT_LEADER` naming the leader it knows; the client then opens a connection to that broker
//! (one per broker, at most [`MAX_BROKER_CONNECTIONS`]), refreshes its metadata from the
//! bootstrap connection (`Metadata` version 1) and sends the request again. The metadata is also
//! refreshed on `LEADER_NOT_AVAILABLE`, `FENCED_LEADER_EPOCH`, `UNKNOWN_LEADER_EPOCH`, after a
//! lost connection to a broker of a multi-broker cluster, and once it is older than
//! [`METADATA_MAX_AGE`](super::metadata_cache::METADATA_MAX_AGE).
//!
//! What is sent again, at most [`MAX_ROUTING_ATTEMPTS`] times in all, with backoff, within the
//! request's timeout (`retry::may_resend`): any request the server certainly did not apply
//! (`NOT_LEADER`, `LEADER_NOT_AVAILABLE`, `NOT_ENOUGH_REPLICAS`), and idempotent requests
//! (reads, and produces of an idempotent producer, whose sequence numbers make a duplicate
//! harmless) after anything transient. A plain produce whose connection died mid-request is
//! never sent again: it fails with [`ClientError::OutcomeUnknown`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::metadata_cache::MetadataCache;
use super::reconnect::Endpoint;
use super::{call_on, ClientConfig, ClientError};
use crate::domain::NodeId;
use crate::protocol::{Acks, ClusterMetadata, ErrorCode, Request, Response, TopicMetadata};

/// The most connections a client keeps to brokers other than its bootstrap connection; beyond
/// it, the connection of another broker is closed (its requests in flight finish) to make room.
pub const MAX_BROKER_CONNECTIONS: usize = 64;

/// The most times one call sends its request (the first time included) while following
/// leaders and waiting out elections.
pub const MAX_ROUTING_ATTEMPTS: u32 = 8;

/// The bootstrap connection, the connections to leaders, and what the client knows of the
/// cluster.
pub(crate) struct Routing {
    bootstrap: Arc<Endpoint>,
    cache: Mutex<MetadataCache>,
    brokers: tokio::sync::Mutex<HashMap<NodeId, BrokerEndpoint>>,
    /// Held by the one caller refreshing the metadata; the others wait and reuse its answer.
    refreshing: tokio::sync::Mutex<()>,
}

/// A connection to one broker, and the address it was opened to.
struct BrokerEndpoint {
    address: String,
    endpoint: Arc<Endpoint>,
}

/// A full `Metadata` version-1 answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterAnswer {
    pub(crate) topics: Vec<TopicMetadata>,
    pub(crate) cluster: ClusterMetadata,
}

impl Routing {
    /// Routing over `bootstrap`, knowing nothing of the cluster yet.
    pub(crate) fn new(bootstrap: Arc<Endpoint>) -> Self {
        Self {
            bootstrap,
            cache: Mutex::new(MetadataCache::default()),
            brokers: tokio::sync::Mutex::new(HashMap::new()),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    fn config(&self) -> &ClientConfig {
        self.bootstrap.config()
    }

    fn cache(&self) -> MutexGuard<'_, MetadataCache> {
        // Only plain values are replaced under this lock; a panic cannot leave it half-written.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where a request for `topic`/`partition` goes: its leader's connection when the client
    /// knows a leader in a multi-broker cluster, the bootstrap connection otherwise. Refreshes
    /// the metadata first when it is stale or old (a failed refresh keeps the old view).
    pub(crate) async fn endpoint_for(
        &self,
        topic: &str,
        partition: u32,
        deadline: Instant,
    ) -> Result<Arc<Endpoint>, ClientError> {
        if self.cache().needs_refresh(Instant::now()) {
            if let Err(error) = self.refresh(deadline).await {
                tracing::debug!(%error, "metadata refresh failed; routing with the old view");
            }
        }
        let leader = self.cache().leader_of(topic, partition);
        match leader {
            None => Ok(Arc::clone(&self.bootstrap)),
            Some((node, address)) => self.broker_endpoint(node, address, deadline).await,
        }
    }

    /// The connection to broker `node` at `address`, opened (within `deadline`) if there is
    /// none yet or the broker moved.
    async fn broker_endpoint(
        &self,
        node: NodeId,
        address: String,
        deadline: Instant,
    ) -> Result<Arc<Endpoint>, ClientError> {
        let mut brokers = self.brokers.lock().await;
        if let Some(known) = brokers.get(&node) {
            if known.address == address {
                return Ok(Arc::clone(&known.endpoint));
            }
        }
        let connect = Endpoint::connect(vec![address.clone()], self.config().clone());
        let opened = match tokio::time::timeout_at(deadline, connect).await {
            Ok(Ok(endpoint)) => Arc::new(endpoint),
            Ok(Err(error)) => {
                self.cache().mark_stale();
                return Err(error);
            }
            Err(_) => {
                self.cache().mark_stale();
                return Err(ClientError::Timeout {
                    after: self.config().request_timeout,
                });
            }
        };
        tracing::debug!(node, %address, "connected to a partition leader");
        if brokers.len() >= MAX_BROKER_CONNECTIONS && !brokers.contains_key(&node) {
            if let Some(evicted) = brokers.keys().next().copied() {
                brokers.remove(&evicted);
            }
        }
        brokers.insert(
            node,
            BrokerEndpoint {
                address,
                endpoint: Arc::clone(&opened),
            },
        );
        Ok(opened)
    }

    /// Asks the bootstrap connection for the whole cluster's metadata and applies it. An older
    /// server that does not know `Metadata` version 1 turns routing off for good.
    pub(crate) async fn refresh(&self, deadline: Instant) -> Result<(), ClientError> {
        let waiting_since = Instant::now();
        let _refreshing = self.refreshing.lock().await;
        // Another caller refreshed while this one waited: use its answer.
        if !self.cache().needs_refresh(waiting_since) {
            return Ok(());
        }
        self.describe(Vec::new(), deadline).await.map(drop)
    }

    /// `Metadata` version 1 for `topics` (all when empty) from the bootstrap connection; the
    /// cache learns from the answer.
    pub(crate) async fn describe(
        &self,
        topics: Vec<String>,
        deadline: Instant,
    ) -> Result<ClusterAnswer, ClientError> {
        let timeout = deadline.saturating_duration_since(Instant::now());
        let request = Request::Metadata {
            topics,
            cluster: true,
        };
        match call_on(&self.bootstrap, request, timeout).await {
            Ok(Response::Metadata {
                topics,
                cluster: Some(cluster),
            }) => {
                self.cache().apply(&cluster, Instant::now());
                Ok(ClusterAnswer { topics, cluster })
            }
            Ok(other) => Err(ClientError::Protocol(
                crate::protocol::ProtocolError::Malformed(format!(
                    "unexpected {} response to Metadata version 1",
                    other.api_key()
                )),
            )),
            Err(error) => {
                if error.code() == Some(ErrorCode::UnsupportedVersion) {
                    self.cache().mark_unsupported();
                }
                Err(error)
            }
        }
    }

    /// What a failed request for `topic`/`partition` tells about the cluster: a `NOT_LEADER`
    /// hint is taken at once; every code that says the view is stale, and a lost connection in
    /// a multi-broker cluster, mark it for a refresh before the next routed request.
    pub(crate) fn learn(&self, topic: &str, partition: u32, error: &ClientError) {
        let mut cache = self.cache();
        if let ClientError::NotLeader {
            leader: Some(leader),
            address,
            leader_epoch,
            ..
        } = error
        {
            if !address.is_empty() {
                cache.learn_leader(topic, partition, *leader, address, *leader_epoch);
            }
        }
        // A leader that cannot be reached may be gone for good (killed, its partitions moved
        // on): look it up again rather than dial the same address until the deadline.
        let unreachable = matches!(error, ClientError::Connect { .. });
        let stale = error.code().is_some_and(ErrorCode::needs_metadata_refresh)
            || (cache.routes() && (super::retry::is_transport_failure(error) || unreachable));
        if stale {
            cache.mark_stale();
        }
    }

    /// `acks` when the caller chose none: `All` for a partition the client knows is replicated,
    /// else `None` (Produce version 0: the broker's own default, which is the same rule).
    pub(crate) fn default_acks(&self, topic: &str, partition: u32) -> Option<Acks> {
        self.cache()
            .replicas_of(topic, partition)
            .filter(|replicas| *replicas > 1)
            .map(|_| Acks::All)
    }

    /// How many partitions `topic` has, if the last metadata answer listed it.
    pub(crate) fn partition_count(&self, topic: &str) -> Option<u32> {
        self.cache().partition_count(topic)
    }

    /// Marks the view out of date: the next routed request refreshes it first.
    pub(crate) fn mark_stale(&self) {
        self.cache().mark_stale();
    }

    /// Whether the client routes requests to leaders (it knows several brokers).
    pub(crate) fn routes(&self) -> bool {
        self.cache().routes()
    }
}

/// How long is left until `deadline`.
pub(crate) fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}
