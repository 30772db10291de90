//! Broker registrations on etcd: registering under a fresh lease, reading who holds a node id
//! (with what is left of its lease), listing the live brokers, and keeping a lease alive or
//! revoking it.
//!
//! Why a lease per registration: the key disappears when the lease lapses, so a crashed broker
//! leaves the cluster by itself within its TTL; the [`BrokerLease`] built on top decides, by
//! its own conservative deadline, whether the registration still holds.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use futures::future::BoxFuture;

use super::super::layout::ParsedKey;
use super::super::registration::LeaseKeepAlive;
use super::super::{
    decode_value, encode_value, validate_ttl, BrokerLease, HeldRegistration, MetaError,
};
use super::requests::txn_read;
use super::EtcdMetaStore;
use crate::cluster::{BrokerRegistration, NodeId};

impl EtcdMetaStore {
    /// Revokes etcd lease `lease_id` (`what` names it in errors); one already gone (expired)
    /// is what revoking wanted.
    pub(super) async fn revoke(&self, what: &'static str, lease_id: i64) -> Result<(), MetaError> {
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

    /// Grants a lease of `ttl` and puts `registration` under it if its node id is free; a held
    /// node id is `AlreadyExists`, naming the holder, and the new lease is revoked.
    pub(super) async fn register(
        &self,
        registration: BrokerRegistration,
        ttl: Duration,
    ) -> Result<BrokerLease, MetaError> {
        validate_ttl(ttl)?;
        let ttl_seconds = i64::try_from(ttl.as_millis().div_ceil(1000)).unwrap_or(i64::MAX);
        let granted_at = self.inner.clock.now();
        let mut client = self.client();
        let grant = self
            .request("grant a registration lease", async move {
                client.lease_grant(ttl_seconds, None).await
            })
            .await?;
        let lease_id = grant.id();
        let granted_ttl = Duration::from_secs(grant.ttl().unsigned_abs());
        let mut keeper = EtcdKeeper {
            store: self.clone(),
            lease_id,
            granted_ttl,
            stream: None,
            in_flight: false,
        };
        let key = self.inner.layout.broker_key(registration.node_id);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                encode_value(&registration),
                Some(PutOptions::new().with_lease(lease_id)),
            )])
            .or_else([TxnOp::get(key.clone(), None)]);
        let response = match self.txn("register the broker", txn).await {
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
            self.inner.clock.clone(),
            ttl,
            granted_at,
            granted_ttl,
            keeper,
        ))
    }

    /// The live registrations, by node id.
    pub(super) async fn live_brokers_listed(&self) -> Result<Vec<BrokerRegistration>, MetaError> {
        let prefix = self.inner.layout.brokers_prefix();
        let response = self.get_prefix("list the brokers", prefix).await?;
        let mut brokers = Vec::with_capacity(response.kvs().len());
        for kv in response.kvs() {
            let key = String::from_utf8_lossy(kv.key());
            if let Some(ParsedKey::Broker(_)) = self.inner.layout.parse(&key) {
                brokers.push(decode_value::<BrokerRegistration>(&key, kv.value())?);
            }
        }
        brokers.sort_by_key(|broker| broker.node_id);
        Ok(brokers)
    }

    /// The registration of `node_id` with its lease, or `None` if nobody holds it (or its
    /// lease just expired).
    pub(super) async fn registration_of(
        &self,
        node_id: NodeId,
    ) -> Result<Option<HeldRegistration>, MetaError> {
        let key = self.inner.layout.broker_key(node_id);
        let mut client = self.client();
        let request_key = key.clone();
        let response = self
            .request("read a broker registration", async move {
                client.get(request_key, None).await
            })
            .await?;
        let Some(kv) = response.kvs().first() else {
            return Ok(None);
        };
        let registration = decode_value::<BrokerRegistration>(&key, kv.value())?;
        let lease_id = kv.lease();
        let mut client = self.client();
        let lease = self
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
    }
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
