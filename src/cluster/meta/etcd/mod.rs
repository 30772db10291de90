//! The metadata store on etcd v3, through the `etcd-client` crate (gRPC).
//!
//! Every write that must not race is one etcd transaction: a registration is put only if the
//! broker's key is absent (`create_revision == 0`) and under its lease; a topic and all its
//! partition keys are put only if the topic key is absent; a partition state is replaced only if
//! its `mod_revision` is the one the caller read (and the key still exists). A lost comparison
//! reads the current value in the same transaction, so a `Conflict` carries what won. A change
//! that reads before it writes (a topic deleted, re-created, altered or grown) is tried again
//! after a lost comparison by the one retry loop of `cas.rs`, with backoff and jitter.
//!
//! Each unary request is bounded by the request timeout (a named const, overridable in
//! [`EtcdConfig`]); a failure says which endpoints were tried. The client reconnects by itself
//! (tonic's channel); the lease keeper and the watch re-open their streams after an etcd
//! restart or a change of etcd leader (`require_leader` makes a member without a leader refuse
//! rather than serve stale data).
//!
//! One job per file: `config.rs` (endpoints and timeouts), `requests.rs` (one bounded request
//! and its errors), `cas.rs` (when to try a lost comparison again, by the shared
//! `crate::cluster::backoff`), `topics.rs` (the topic
//! changes), `leases.rs` (registrations and their keep-alive), `partitions.rs` (partition
//! states and their compare-and-swap), `snapshot.rs` and `watch.rs` (reading and following the
//! cluster's prefix), `store.rs` (the [`MetaStore`](super::MetaStore) trait on top).

use std::fmt;
use std::sync::Arc;

use etcd_client::{Client, ConnectOptions, GetOptions};

use super::layout::KeyLayout;
use super::MetaError;
use crate::clock::{Clock, SystemClock};

pub(in crate::cluster::meta) mod cas;
mod config;
mod leases;
mod partitions;
mod requests;
mod snapshot;
mod store;
mod topics;
pub(in crate::cluster::meta) mod watch;

pub use cas::{COMPARE_AND_SWAP_RETRY_BASE, COMPARE_AND_SWAP_RETRY_CAP};
pub use config::{
    EtcdConfig, CONNECT_TIMEOUT, REQUEST_TIMEOUT, TRANSPORT_PING_INTERVAL, TRANSPORT_PING_TIMEOUT,
};
pub use snapshot::SNAPSHOT_PAGE_KEYS;

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

    /// The key layout in use.
    pub fn layout(&self) -> &KeyLayout {
        &self.inner.layout
    }

    /// A handle on the client (cheap: it shares the channel).
    pub(in crate::cluster::meta) fn client(&self) -> Client {
        self.inner.client.clone()
    }

    pub(in crate::cluster::meta) fn config(&self) -> &EtcdConfig {
        &self.inner.config
    }
}
