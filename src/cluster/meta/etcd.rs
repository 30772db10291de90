//! The metadata store on etcd v3, through the `etcd-client` crate (gRPC).
//!
//! Every write that must not race is one etcd transaction: a registration is put only if the
//! broker's key is absent (`create_revision == 0`) and under its lease; a topic and all its
//! partition keys are put only if the topic key is absent; a partition state is replaced only if
//! its `mod_revision` is the one the caller read (and the key still exists). A lost comparison
//! reads the current value in the same transaction, so a `Conflict` carries what won.
//!
//! Each unary request is bounded by the request timeout (a named const, overridable in
//! [`EtcdConfig`]); a failure says which endpoints were tried. The client reconnects by itself
//! (tonic's channel); the lease keeper and the watch re-open their streams after an etcd
//! restart or a change of etcd leader (`require_leader` makes a member without a leader refuse
//! rather than serve stale data).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, GetResponse, KeyValue,
    PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use futures::future::BoxFuture;
use tokio::sync::mpsc;

use super::layout::{prefix_range_end, KeyLayout, ParsedKey, DEFAULT_CLUSTER_NAME};
use super::registration::LeaseKeepAlive;
use super::watch::{MetaEvent, MetaSnapshot, MetaWatch};
use super::{
    decode_value, encode_value, prepare_new_partitions, start_above_floor, validate_new_topic,
    validate_ttl, validate_watch_capacity, BrokerLease, GrownTopic, HeldRegistration, MetaError,
    MetaStore, PartitionId, PartitionStates, TopicRecord, TopicTombstone,
    TOPIC_DELETE_ATTEMPTS_MAX, TOPIC_TOMBSTONES_MAX,
};
use crate::clock::{Clock, SystemClock};
use crate::cluster::{BrokerRegistration, LeaderEpoch, NodeId, PartitionState, Versioned};
use crate::domain::TopicConfig;

/// How long connecting to an etcd endpoint may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long one etcd request may take before it counts as unavailable.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// HTTP/2 ping interval on the connection to etcd, so that a dead connection (a paused or
/// partitioned etcd) is noticed by a watch or a keep-alive stream that is otherwise idle.
pub const TRANSPORT_PING_INTERVAL: Duration = Duration::from_secs(2);

/// How long an HTTP/2 ping may go unanswered before the connection is dropped.
pub const TRANSPORT_PING_TIMEOUT: Duration = Duration::from_secs(2);

/// Keys read per request when taking a snapshot (pages at one revision).
pub const SNAPSHOT_PAGE_KEYS: i64 = 500;

/// Where the etcd store connects and how patient it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// etcd client URLs (`http://host:port` or `host:port`), any member of the cluster.
    pub endpoints: Vec<String>,
    /// The cluster's name: every key lives under `/fencelog/<cluster_name>/`.
    pub cluster_name: String,
    /// [`CONNECT_TIMEOUT`] by default.
    pub connect_timeout: Duration,
    /// [`REQUEST_TIMEOUT`] by default.
    pub request_timeout: Duration,
}

impl EtcdConfig {
    /// Defaults for `endpoints`, cluster name [`DEFAULT_CLUSTER_NAME`].
    pub fn new<S: Into<String>>(endpoints: impl IntoIterator<Item = S>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            cluster_name: DEFAULT_CLUSTER_NAME.to_owned(),
            connect_timeout: CONNECT_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
        }
    }

    /// The same, for cluster `name`.
    pub fn with_cluster_name(mut self, name: impl Into<String>) -> Self {
        self.cluster_name = name.into();
        self
    }
}

/// The metadata store on etcd; cheap to clone (clones share the connection).
#[derive(Clone)]
pub struct EtcdMetaStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    layout: KeyLayout,
    config: EtcdConfig,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for EtcdMetaStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdMetaStore")
            .field("endpoints", &self.inner.config.endpoints)
            .field("prefix", &self.inner.layout.prefix())
            .finish()
    }
}

impl EtcdMetaStore {
    /// Connects to etcd and checks that it answers (a read of the cluster's prefix).
    pub async fn connect(config: EtcdConfig) -> Result<Self, MetaError> {
        Self::connect_with_clock(config, Arc::new(SystemClock)).await
    }

    /// [`connect`](Self::connect), with the registration's local deadline read from `clock`:
    /// the driver compares that deadline with its own clock, so both must be the same one.
    pub async fn connect_with_clock(
        config: EtcdConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, MetaError> {
        if config.endpoints.is_empty() {
            return Err(MetaError::Invalid(
                "no etcd endpoints given (--etcd host:port,...)".into(),
            ));
        }
        let layout = KeyLayout::new(&config.cluster_name)?;
        let options = ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_keep_alive(TRANSPORT_PING_INTERVAL, TRANSPORT_PING_TIMEOUT)
            .with_keep_alive_while_idle(true)
            .with_require_leader(true);
        let endpoints = config.endpoints.join(",");
        let client = match tokio::time::timeout(
            config.connect_timeout,
            Client::connect(&config.endpoints, Some(options)),
        )
        .await
        {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => {
                return Err(MetaError::Unavailable {
                    endpoints,
                    reason: format!("connect: {error}"),
                })
            }
            Err(_elapsed) => {
                return Err(MetaError::Unavailable {
                    endpoints,
                    reason: format!("connect took longer than {:?}", config.connect_timeout),
                })
            }
        };
        let store = Self {
            inner: Arc::new(Inner {
                client,
                layout,
                config,
                clock,
            }),
        };
        let prefix = store.inner.layout.prefix().to_owned();
        let mut client = store.client();
        store
            .request("read the cluster prefix", async move {
                client
                    .get(
                        prefix,
                        Some(GetOptions::new().with_prefix().with_count_only()),
                    )
                    .await
            })
            .await?;
        Ok(store)
    }

    /// The changes after `revision` (exclusive of it), without a snapshot: for a consumer that
    /// kept its state and the revision it was current at. If etcd compacted that history away,
    /// the first event is a `Resync`.
    pub fn watch_after(
        &self,
        revision: i64,
        capacity: usize,
    ) -> Result<mpsc::Receiver<MetaEvent>, MetaError> {
        validate_watch_capacity(capacity)?;
        let (sender, events) = mpsc::channel(capacity);
        super::etcd_watch::spawn(self.clone(), sender, revision + 1);
        Ok(events)
    }

    /// The key layout in use.
    pub fn layout(&self) -> &KeyLayout {
        &self.inner.layout
    }

    /// A handle on the client (cheap: it shares the channel).
    pub(super) fn client(&self) -> Client {
        self.inner.client.clone()
    }

    pub(super) fn config(&self) -> &EtcdConfig {
        &self.inner.config
    }

    /// `Unavailable` for `reason`, naming the endpoints.
    pub(super) fn unavailable(&self, reason: String) -> MetaError {
        MetaError::Unavailable {
            endpoints: self.inner.config.endpoints.join(","),
            reason,
        }
    }

    /// Revokes etcd lease `lease_id` (`what` names it in errors); one already gone (expired)
    /// is what revoking wanted.
    async fn revoke(&self, what: &'static str, lease_id: i64) -> Result<(), MetaError> {
        let mut client = self.client();
        match self
            .request(what, async move { client.lease_revoke(lease_id).await })
            .await
        {
            Ok(_) => Ok(()),
            Err(MetaError::Unavailable { reason, .. }) if reason.contains("lease not found") => {
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    /// Runs one etcd request within the request timeout, mapping its failure.
    pub(super) async fn request<T>(
        &self,
        what: &str,
        request: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, MetaError> {
        match tokio::time::timeout(self.inner.config.request_timeout, request).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(error)) => Err(self.map_error(what, error)),
            Err(_elapsed) => Err(self.unavailable(format!(
                "{what}: no answer within {:?}",
                self.inner.config.request_timeout
            ))),
        }
    }

    /// etcd refusing the request itself (too many operations, a request too large) is
    /// `Invalid`; anything else (transport, no leader, timeouts) is `Unavailable`.
    fn map_error(&self, what: &str, error: etcd_client::Error) -> MetaError {
        if let etcd_client::Error::GRpcStatus(status) = &error {
            if matches!(
                status.code(),
                tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition
            ) {
                return MetaError::Invalid(format!("{what}: etcd refused: {}", status.message()));
            }
        }
        self.unavailable(format!("{what}: {error}"))
    }

    async fn txn(&self, what: &str, txn: Txn) -> Result<TxnResponse, MetaError> {
        let mut client = self.client();
        self.request(what, async move { client.txn(txn).await })
            .await
    }

    async fn get_prefix(&self, what: &str, prefix: String) -> Result<GetResponse, MetaError> {
        let mut client = self.client();
        self.request(what, async move {
            client
                .get(prefix, Some(GetOptions::new().with_prefix()))
                .await
        })
        .await
    }

    /// Everything under the cluster's prefix at one revision, read in pages.
    pub(super) async fn snapshot(&self) -> Result<MetaSnapshot, MetaError> {
        let prefix = self.inner.layout.prefix().to_owned();
        let range_end = prefix_range_end(&prefix);
        let mut from = prefix.into_bytes();
        let mut revision = 0;
        let mut snapshot = MetaSnapshot::default();
        loop {
            let mut client = self.client();
            let options = GetOptions::new()
                .with_range(range_end.clone())
                .with_limit(SNAPSHOT_PAGE_KEYS)
                .with_revision(revision);
            let key = from.clone();
            let page = self
                .request("read a snapshot", async move {
                    client.get(key, Some(options)).await
                })
                .await?;
            if revision == 0 {
                revision = page.header().map_or(0, |header| header.revision());
            }
            for kv in page.kvs() {
                self.add_to_snapshot(&mut snapshot, kv)?;
            }
            match page.kvs().last() {
                Some(last) if page.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        snapshot.revision = revision;
        snapshot.brokers.sort_by_key(|broker| broker.node_id);
        snapshot.topics.sort_by(|a, b| a.name.cmp(&b.name));
        snapshot.partitions.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(snapshot)
    }

    fn add_to_snapshot(&self, snapshot: &mut MetaSnapshot, kv: &KeyValue) -> Result<(), MetaError> {
        let key = String::from_utf8_lossy(kv.key());
        match self.inner.layout.parse(&key) {
            Some(ParsedKey::Broker(_)) => snapshot.brokers.push(decode_value(&key, kv.value())?),
            Some(ParsedKey::Topic(_)) => snapshot.topics.push(decode_value(&key, kv.value())?),
            Some(ParsedKey::Partition(id)) => snapshot.partitions.push((
                id,
                Versioned {
                    value: decode_value(&key, kv.value())?,
                    revision: kv.mod_revision(),
                },
            )),
            None => {}
        }
        Ok(())
    }
}

/// A name's fence floor as read, with the revisions a transaction compares against (0: the key
/// is absent, which etcd compares as mod revision 0).
#[derive(Debug, Clone, Copy, Default)]
struct FloorRead {
    /// The name's own tombstone and its mod revision.
    own: Option<(LeaderEpoch, i64)>,
    /// The folded floor of names without a tombstone, and its mod revision.
    folded: Option<(LeaderEpoch, i64)>,
}

impl FloorRead {
    /// The floor the name has: its tombstone, else the folded floor.
    fn floor(&self) -> LeaderEpoch {
        match (self.own, self.folded) {
            (Some((own, _)), _) => own,
            (None, Some((folded, _))) => folded,
            (None, None) => 0,
        }
    }

    fn own_revision(&self) -> i64 {
        self.own.map_or(0, |(_, revision)| revision)
    }

    fn folded_revision(&self) -> i64 {
        self.folded.map_or(0, |(_, revision)| revision)
    }
}

impl EtcdMetaStore {
    /// Decodes a tombstone key-value into its floor and mod revision.
    fn tombstone_of(key: &str, kv: &KeyValue) -> Result<(LeaderEpoch, i64), MetaError> {
        let tombstone: TopicTombstone = decode_value(key, kv.value())?;
        Ok((tombstone.leader_epoch_floor, kv.mod_revision()))
    }

    /// Reads `topic`'s tombstone and the folded floor at one revision.
    async fn read_floor(&self, topic: &str) -> Result<FloorRead, MetaError> {
        let layout = &self.inner.layout;
        let own_key = layout.topic_tombstone_key(topic);
        let folded_key = layout.folded_tombstone_key();
        let txn = Txn::new().and_then([
            TxnOp::get(own_key.clone(), None),
            TxnOp::get(folded_key.clone(), None),
        ]);
        let response = self.txn("read the topic's fence floor", txn).await?;
        let mut read = FloorRead::default();
        for kv in txn_read(&response) {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            if key == own_key {
                read.own = Some(Self::tombstone_of(&key, &kv)?);
            } else if key == folded_key {
                read.folded = Some(Self::tombstone_of(&key, &kv)?);
            }
        }
        Ok(read)
    }

    /// One attempt at creating `topic` above its name's fence floor: `None` if a delete of the
    /// name changed the floor between the read and the transaction (read again).
    async fn try_create_topic(
        &self,
        topic: &TopicRecord,
        partitions: &[PartitionState],
    ) -> Result<Option<Vec<Versioned<PartitionState>>>, MetaError> {
        let floor = self.read_floor(&topic.name).await?;
        let mut topic = topic.clone();
        let mut partitions = partitions.to_vec();
        start_above_floor(&mut topic, &mut partitions, floor.floor())?;
        let layout = &self.inner.layout;
        let topic_key = layout.topic_key(&topic.name);
        let mut puts = Vec::with_capacity(partitions.len() + 1);
        puts.push(TxnOp::put(topic_key.clone(), encode_value(&topic), None));
        for (index, state) in partitions.iter().enumerate() {
            let id = PartitionId::new(&topic.name, index as u32);
            puts.push(TxnOp::put(
                layout.partition_key(&id),
                encode_value(state),
                None,
            ));
        }
        let txn = Txn::new()
            .when([
                Compare::create_revision(topic_key.clone(), CompareOp::Equal, 0),
                Compare::mod_revision(
                    layout.topic_tombstone_key(&topic.name),
                    CompareOp::Equal,
                    floor.own_revision(),
                ),
                Compare::mod_revision(
                    layout.folded_tombstone_key(),
                    CompareOp::Equal,
                    floor.folded_revision(),
                ),
            ])
            .and_then(puts)
            .or_else([TxnOp::get(topic_key, None)]);
        let response = self.txn("create the topic", txn).await?;
        if !response.succeeded() {
            if txn_read(&response).is_empty() {
                return Ok(None);
            }
            return Err(MetaError::AlreadyExists {
                what: format!("topic {}", topic.name),
            });
        }
        let revision = txn_revision(&response);
        Ok(Some(
            partitions
                .into_iter()
                .map(|value| Versioned { value, revision })
                .collect(),
        ))
    }

    /// One attempt at deleting `topic` and raising its tombstone: `None` if anything read
    /// changed before the transaction (an election raised an epoch: read again), `NotFound` if
    /// the topic is gone.
    ///
    /// The read and the compares: the topic record's mod revision; every partition key of the
    /// topic at a mod revision no later than the read (one range compare, so a topic of any
    /// partition count fits etcd's operation limit); the name's tombstone and the folded floor
    /// at the mod revisions read; and each tombstone folded away unchanged.
    async fn try_delete_topic(&self, topic: &str) -> Result<Option<TopicTombstone>, MetaError> {
        let layout = &self.inner.layout;
        let topic_key = layout.topic_key(topic);
        let partitions_prefix = layout.topic_partitions_prefix(topic);
        let own_key = layout.topic_tombstone_key(topic);
        let folded_key = layout.folded_tombstone_key();
        let tombstones_prefix = layout.topic_tombstones_prefix();
        let read = Txn::new().and_then([
            TxnOp::get(topic_key.clone(), None),
            TxnOp::get(
                partitions_prefix.clone(),
                Some(GetOptions::new().with_prefix()),
            ),
            TxnOp::get(
                tombstones_prefix.clone(),
                Some(GetOptions::new().with_prefix()),
            ),
            TxnOp::get(folded_key.clone(), None),
        ]);
        let response = self.txn("read the topic to delete", read).await?;
        let read_revision = txn_revision(&response);
        let mut topic_revision = None;
        let mut highest: LeaderEpoch = 0;
        let mut tombstones: Vec<(String, LeaderEpoch, i64)> = Vec::new();
        let mut folded: Option<(LeaderEpoch, i64)> = None;
        for kv in txn_read(&response) {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            if key == topic_key {
                let record: TopicRecord = decode_value(&key, kv.value())?;
                highest = highest.max(record.first_leader_epoch());
                topic_revision = Some(kv.mod_revision());
            } else if key.starts_with(&partitions_prefix) {
                let state: PartitionState = decode_value(&key, kv.value())?;
                highest = highest.max(state.leader_epoch);
            } else if let Some(name) = key.strip_prefix(&tombstones_prefix) {
                let (floor, revision) = Self::tombstone_of(&key, &kv)?;
                tombstones.push((name.to_owned(), floor, revision));
            } else if key == folded_key {
                folded = Some(Self::tombstone_of(&key, &kv)?);
            }
        }
        let Some(topic_revision) = topic_revision else {
            return Err(MetaError::NotFound {
                what: format!("topic {topic}"),
            });
        };
        let own = tombstones
            .iter()
            .find(|(name, _, _)| name == topic)
            .map(|(_, floor, revision)| (*floor, *revision));
        let floor_read = FloorRead { own, folded };
        let leader_epoch_floor = highest.max(floor_read.floor());
        let tombstone = TopicTombstone { leader_epoch_floor };
        // Fold the lowest other tombstones while the names kept would pass the limit.
        let listed = tombstones.len() + usize::from(own.is_none());
        let mut others: Vec<&(String, LeaderEpoch, i64)> = tombstones
            .iter()
            .filter(|(name, _, _)| name != topic)
            .collect();
        others.sort_by_key(|(name, floor, _)| (*floor, name.clone()));
        let folding = &others[..listed
            .saturating_sub(TOPIC_TOMBSTONES_MAX)
            .min(others.len())];
        let mut compares = vec![
            Compare::mod_revision(topic_key.clone(), CompareOp::Equal, topic_revision),
            Compare::mod_revision(
                partitions_prefix.clone(),
                CompareOp::Less,
                read_revision + 1,
            )
            .with_range(prefix_range_end(&partitions_prefix)),
            Compare::mod_revision(own_key.clone(), CompareOp::Equal, floor_read.own_revision()),
            Compare::mod_revision(
                folded_key.clone(),
                CompareOp::Equal,
                floor_read.folded_revision(),
            ),
        ];
        let mut operations = vec![
            // Partitions first, the record last: a watcher sees the topic go as one event.
            TxnOp::delete(partitions_prefix, Some(DeleteOptions::new().with_prefix())),
            TxnOp::delete(topic_key, None),
            TxnOp::put(own_key, encode_value(&tombstone), None),
        ];
        if !folding.is_empty() {
            let mut folded_floor = floor_read.folded.map_or(0, |(floor, _)| floor);
            for (name, floor, revision) in folding {
                let key = layout.topic_tombstone_key(name);
                compares.push(Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    *revision,
                ));
                operations.push(TxnOp::delete(key, None));
                folded_floor = folded_floor.max(*floor);
            }
            let folded_tombstone = TopicTombstone {
                leader_epoch_floor: folded_floor,
            };
            operations.push(TxnOp::put(
                folded_key,
                encode_value(&folded_tombstone),
                None,
            ));
        }
        let txn = Txn::new().when(compares).and_then(operations);
        let response = self.txn("delete the topic", txn).await?;
        Ok(response.succeeded().then_some(tombstone))
    }
}

/// The revision a transaction was applied at.
fn txn_revision(response: &TxnResponse) -> i64 {
    response.header().map_or(0, |header| header.revision())
}

/// The key-values a transaction's `get` branch read.
fn txn_read(response: &TxnResponse) -> Vec<KeyValue> {
    response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get.kvs().to_vec()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// Renews and revokes one etcd lease over a keep-alive stream, re-opened when it breaks.
struct EtcdKeeper {
    store: EtcdMetaStore,
    lease_id: i64,
    granted_ttl: Duration,
    stream: Option<(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream)>,
    /// A keep-alive was cancelled before its answer arrived: the stream's next message would
    /// answer the old request (sent earlier than the new one), so the stream is replaced.
    in_flight: bool,
}

impl EtcdKeeper {
    async fn renew(&mut self) -> Result<Option<Duration>, MetaError> {
        if std::mem::replace(&mut self.in_flight, true) {
            self.stream = None;
        }
        let result = self.renew_once().await;
        self.in_flight = false;
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    async fn renew_once(&mut self) -> Result<Option<Duration>, MetaError> {
        let Some((keeper, stream)) = self.stream.as_mut() else {
            // Opening the stream sends one keep-alive and reads its answer.
            let mut client = self.store.client();
            let lease_id = self.lease_id;
            let opened = tokio::time::timeout(
                self.store.config().request_timeout,
                client.lease_keep_alive(lease_id),
            )
            .await;
            return match opened {
                Ok(Ok(stream)) => {
                    self.stream = Some(stream);
                    Ok(Some(self.granted_ttl))
                }
                // etcd-client's words for a keep-alive answered with TTL 0.
                Ok(Err(etcd_client::Error::LeaseKeepAliveError(message)))
                    if message == "lease not found" =>
                {
                    Ok(None)
                }
                Ok(Err(error)) => Err(self.store.unavailable(format!("keep-alive: {error}"))),
                Err(_elapsed) => Err(self.store.unavailable("keep-alive: no answer".into())),
            };
        };
        keeper
            .keep_alive()
            .await
            .map_err(|error| self.store.unavailable(format!("keep-alive: {error}")))?;
        match stream.message().await {
            Ok(Some(answer)) if answer.ttl() > 0 => {
                Ok(Some(Duration::from_secs(answer.ttl().unsigned_abs())))
            }
            Ok(Some(_)) => Ok(None),
            Ok(None) => Err(self
                .store
                .unavailable("keep-alive: the stream ended".into())),
            Err(error) => Err(self.store.unavailable(format!("keep-alive: {error}"))),
        }
    }
}

impl LeaseKeepAlive for EtcdKeeper {
    fn keep_alive(&mut self) -> BoxFuture<'_, Result<Option<Duration>, MetaError>> {
        Box::pin(self.renew())
    }

    fn revoke(&mut self) -> BoxFuture<'_, Result<(), MetaError>> {
        Box::pin(async move {
            self.stream = None;
            self.store
                .revoke("revoke the registration lease", self.lease_id)
                .await
        })
    }
}

impl MetaStore for EtcdMetaStore {
    fn register_broker(
        &self,
        registration: BrokerRegistration,
        ttl: Duration,
    ) -> BoxFuture<'static, Result<BrokerLease, MetaError>> {
        let store = self.clone();
        Box::pin(async move {
            validate_ttl(ttl)?;
            let ttl_seconds = i64::try_from(ttl.as_millis().div_ceil(1000)).unwrap_or(i64::MAX);
            let granted_at = store.inner.clock.now();
            let mut client = store.client();
            let grant = store
                .request("grant a registration lease", async move {
                    client.lease_grant(ttl_seconds, None).await
                })
                .await?;
            let lease_id = grant.id();
            let granted_ttl = Duration::from_secs(grant.ttl().unsigned_abs());
            let mut keeper = EtcdKeeper {
                store: store.clone(),
                lease_id,
                granted_ttl,
                stream: None,
                in_flight: false,
            };
            let key = store.inner.layout.broker_key(registration.node_id);
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    encode_value(&registration),
                    Some(PutOptions::new().with_lease(lease_id)),
                )])
                .or_else([TxnOp::get(key.clone(), None)]);
            let response = match store.txn("register the broker", txn).await {
                Ok(response) => response,
                Err(error) => {
                    let _best_effort = keeper.revoke().await;
                    return Err(error);
                }
            };
            if !response.succeeded() {
                let _best_effort = keeper.revoke().await;
                let holder = match txn_read(&response).first() {
                    Some(kv) => match decode_value::<BrokerRegistration>(&key, kv.value()) {
                        Ok(current) => format!(
                            " (registered by incarnation {} at {})",
                            current.incarnation, current.native_addr
                        ),
                        Err(_) => String::new(),
                    },
                    None => String::new(),
                };
                return Err(MetaError::AlreadyExists {
                    what: format!("broker {}{holder}", registration.node_id),
                });
            }
            Ok(BrokerLease::start(
                registration,
                lease_id,
                store.inner.clock.clone(),
                ttl,
                granted_at,
                granted_ttl,
                keeper,
            ))
        })
    }

    fn live_brokers(&self) -> BoxFuture<'static, Result<Vec<BrokerRegistration>, MetaError>> {
        let store = self.clone();
        Box::pin(async move {
            let prefix = store.inner.layout.brokers_prefix();
            let response = store.get_prefix("list the brokers", prefix).await?;
            let mut brokers = Vec::with_capacity(response.kvs().len());
            for kv in response.kvs() {
                let key = String::from_utf8_lossy(kv.key());
                if let Some(ParsedKey::Broker(_)) = store.inner.layout.parse(&key) {
                    brokers.push(decode_value::<BrokerRegistration>(&key, kv.value())?);
                }
            }
            brokers.sort_by_key(|broker| broker.node_id);
            Ok(brokers)
        })
    }

    fn broker_registration(
        &self,
        node_id: NodeId,
    ) -> BoxFuture<'static, Result<Option<HeldRegistration>, MetaError>> {
        let store = self.clone();
        Box::pin(async move {
            let key = store.inner.layout.broker_key(node_id);
            let mut client = store.client();
            let request_key = key.clone();
            let response = store
                .request("read a broker registration", async move {
                    client.get(request_key, None).await
                })
                .await?;
            let Some(kv) = response.kvs().first() else {
                return Ok(None);
            };
            let registration = decode_value::<BrokerRegistration>(&key, kv.value())?;
            let lease_id = kv.lease();
            let mut client = store.client();
            let lease = store
                .request("read a registration's lease", async move {
                    client.lease_time_to_live(lease_id, None).await
                })
                .await?;
            // A negative TTL: the lease expired (its key goes with it).
            let Ok(remaining) = u64::try_from(lease.ttl()) else {
                return Ok(None);
            };
            Ok(Some(HeldRegistration {
                registration,
                lease_id,
                granted_ttl: Duration::from_secs(lease.granted_ttl().unsigned_abs()),
                remaining_ttl: Duration::from_secs(remaining),
            }))
        })
    }

    fn revoke_lease(&self, lease_id: i64) -> BoxFuture<'static, Result<(), MetaError>> {
        let store = self.clone();
        Box::pin(async move { store.revoke("revoke a registration lease", lease_id).await })
    }

    fn create_topic(
        &self,
        topic: TopicRecord,
        partitions: Vec<PartitionState>,
    ) -> BoxFuture<'static, Result<Vec<Versioned<PartitionState>>, MetaError>> {
        let store = self.clone();
        Box::pin(async move {
            validate_new_topic(&topic, &partitions)?;
            for _attempt in 0..TOPIC_DELETE_ATTEMPTS_MAX {
                if let Some(created) = store.try_create_topic(&topic, &partitions).await? {
                    return Ok(created);
                }
            }
            Err(MetaError::Contended {
                what: format!("create topic {} (deletes of its name raced it)", topic.name),
                attempts: TOPIC_DELETE_ATTEMPTS_MAX,
            })
        })
    }

    fn topics(&self) -> BoxFuture<'static, Result<Vec<TopicRecord>, MetaError>> {
        let store = self.clone();
        Box::pin(async move {
            let prefix = store.inner.layout.topics_prefix();
            let response = store.get_prefix("list the topics", prefix).await?;
            let mut topics = Vec::with_capacity(response.kvs().len());
            for kv in response.kvs() {
                let key = String::from_utf8_lossy(kv.key());
                if let Some(ParsedKey::Topic(_)) = store.inner.layout.parse(&key) {
                    topics.push(decode_value::<TopicRecord>(&key, kv.value())?);
                }
            }
            topics.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(topics)
        })
    }

    fn delete_topic(&self, topic: &str) -> BoxFuture<'static, Result<TopicTombstone, MetaError>> {
        let store = self.clone();
        let topic = topic.to_owned();
        Box::pin(async move {
            super::layout::validate_name("topic name", &topic)?;
            for _attempt in 0..TOPIC_DELETE_ATTEMPTS_MAX {
                if let Some(tombstone) = store.try_delete_topic(&topic).await? {
                    return Ok(tombstone);
                }
            }
            Err(MetaError::Contended {
                what: format!("delete topic {topic} (its partitions kept changing)"),
                attempts: TOPIC_DELETE_ATTEMPTS_MAX,
            })
        })
    }

    fn alter_topic_config(
        &self,
        topic: &str,
        expected: TopicConfig,
        config: TopicConfig,
    ) -> BoxFuture<'static, Result<TopicRecord, MetaError>> {
        let store = self.clone();
        let topic = topic.to_owned();
        Box::pin(async move {
            super::layout::validate_name("topic name", &topic)?;
            let key = store.inner.layout.topic_key(&topic);
            for _attempt in 0..TOPIC_DELETE_ATTEMPTS_MAX {
                let read = Txn::new().and_then([TxnOp::get(key.clone(), None)]);
                let response = store.txn("read the topic to alter", read).await?;
                let Some(kv) = txn_read(&response).into_iter().next() else {
                    return Err(MetaError::NotFound {
                        what: format!("topic {topic}"),
                    });
                };
                let mut record: TopicRecord = decode_value(&key, kv.value())?;
                if record.config != expected {
                    return Err(MetaError::TopicConfigChanged {
                        topic,
                        current: record.config,
                    });
                }
                record.config = config;
                // The record unchanged since the read (not deleted, not re-created, no other
                // field rewritten): else read again.
                let txn = Txn::new()
                    .when([
                        Compare::version(key.clone(), CompareOp::Greater, 0),
                        Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision()),
                    ])
                    .and_then([TxnOp::put(key.clone(), encode_value(&record), None)]);
                if store
                    .txn("compare-and-swap the topic record", txn)
                    .await?
                    .succeeded()
                {
                    return Ok(record);
                }
            }
            Err(MetaError::Contended {
                what: format!("alter the config of topic {topic}"),
                attempts: TOPIC_DELETE_ATTEMPTS_MAX,
            })
        })
    }

    fn create_partitions(
        &self,
        topic: &str,
        expected_count: u32,
        partitions: Vec<PartitionState>,
    ) -> BoxFuture<'static, Result<GrownTopic, MetaError>> {
        let store = self.clone();
        let topic = topic.to_owned();
        Box::pin(async move {
            super::layout::validate_name("topic name", &topic)?;
            let layout = &store.inner.layout;
            let key = layout.topic_key(&topic);
            for _attempt in 0..TOPIC_DELETE_ATTEMPTS_MAX {
                let read = Txn::new().and_then([TxnOp::get(key.clone(), None)]);
                let response = store.txn("read the topic to grow", read).await?;
                let Some(kv) = txn_read(&response).into_iter().next() else {
                    return Err(MetaError::NotFound {
                        what: format!("topic {topic}"),
                    });
                };
                let record: TopicRecord = decode_value(&key, kv.value())?;
                let mut states = partitions.clone();
                let grown = prepare_new_partitions(&record, expected_count, &mut states)?;
                let mut puts = Vec::with_capacity(states.len() + 1);
                puts.push(TxnOp::put(key.clone(), encode_value(&grown), None));
                for (offset, state) in states.iter().enumerate() {
                    let index = expected_count + u32::try_from(offset).expect("at most 127 new");
                    puts.push(TxnOp::put(
                        layout.partition_key(&PartitionId::new(&topic, index)),
                        encode_value(state),
                        None,
                    ));
                }
                // The record unchanged since the read (not deleted, not re-created, not grown
                // by another, no config change): else read again, and a grow that came first
                // answers `PartitionCountChanged` on the next read.
                let txn = Txn::new()
                    .when([
                        Compare::version(key.clone(), CompareOp::Greater, 0),
                        Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision()),
                    ])
                    .and_then(puts);
                let response = store.txn("grow the topic", txn).await?;
                if response.succeeded() {
                    let revision = txn_revision(&response);
                    let created = states
                        .into_iter()
                        .map(|value| Versioned { value, revision })
                        .collect();
                    return Ok((grown, created));
                }
            }
            Err(MetaError::Contended {
                what: format!("add partitions to topic {topic}"),
                attempts: TOPIC_DELETE_ATTEMPTS_MAX,
            })
        })
    }

    fn deleted_topic_floor(
        &self,
        topic: &str,
    ) -> BoxFuture<'static, Result<LeaderEpoch, MetaError>> {
        let store = self.clone();
        let topic = topic.to_owned();
        Box::pin(async move {
            super::layout::validate_name("topic name", &topic)?;
            Ok(store.read_floor(&topic).await?.floor())
        })
    }

    fn partition_state(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, Result<Versioned<PartitionState>, MetaError>> {
        let store = self.clone();
        Box::pin(async move {
            let key = store.inner.layout.partition_key(&partition);
            let mut client = store.client();
            let request_key = key.clone();
            let response = store
                .request("read the partition state", async move {
                    client.get(request_key, None).await
                })
                .await?;
            let kv = response.kvs().first().ok_or_else(|| MetaError::NotFound {
                what: format!("partition {partition}"),
            })?;
            Ok(Versioned {
                value: decode_value(&key, kv.value())?,
                revision: kv.mod_revision(),
            })
        })
    }

    fn partition_states(&self) -> BoxFuture<'static, Result<PartitionStates, MetaError>> {
        let store = self.clone();
        Box::pin(async move {
            let prefix = store.inner.layout.partitions_prefix();
            let response = store
                .get_prefix("list the partition states", prefix)
                .await?;
            let mut states = Vec::with_capacity(response.kvs().len());
            for kv in response.kvs() {
                let key = String::from_utf8_lossy(kv.key());
                if let Some(ParsedKey::Partition(id)) = store.inner.layout.parse(&key) {
                    let value = decode_value(&key, kv.value())?;
                    states.push((
                        id,
                        Versioned {
                            value,
                            revision: kv.mod_revision(),
                        },
                    ));
                }
            }
            states.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(states)
        })
    }

    fn compare_and_swap_partition(
        &self,
        partition: PartitionId,
        expected_revision: i64,
        state: PartitionState,
    ) -> BoxFuture<'static, Result<Versioned<PartitionState>, MetaError>> {
        let store = self.clone();
        Box::pin(async move {
            let key = store.inner.layout.partition_key(&partition);
            // `version > 0` too: a deleted key has mod_revision 0, and a CAS must never
            // re-create the partition of a deleted topic.
            let txn = Txn::new()
                .when([
                    Compare::version(key.clone(), CompareOp::Greater, 0),
                    Compare::mod_revision(key.clone(), CompareOp::Equal, expected_revision),
                ])
                .and_then([TxnOp::put(key.clone(), encode_value(&state), None)])
                .or_else([TxnOp::get(key.clone(), None)]);
            let response = store
                .txn("compare-and-swap the partition state", txn)
                .await?;
            if response.succeeded() {
                return Ok(Versioned {
                    value: state,
                    revision: txn_revision(&response),
                });
            }
            match txn_read(&response).first() {
                None => Err(MetaError::NotFound {
                    what: format!("partition {partition}"),
                }),
                Some(kv) => Err(MetaError::Conflict {
                    partition,
                    expected_revision,
                    current: Box::new(Versioned {
                        value: decode_value(&key, kv.value())?,
                        revision: kv.mod_revision(),
                    }),
                }),
            }
        })
    }

    fn watch(&self, capacity: usize) -> BoxFuture<'static, Result<MetaWatch, MetaError>> {
        let store = self.clone();
        Box::pin(async move {
            validate_watch_capacity(capacity)?;
            let snapshot = store.snapshot().await?;
            let (sender, events) = mpsc::channel(capacity);
            super::etcd_watch::spawn(store, sender, snapshot.revision + 1);
            Ok(MetaWatch { snapshot, events })
        })
    }
}
