//! A cluster's users and ACLs in etcd, under the cluster's prefix: the changes
//! `fencelog user|acl add|remove|list --etcd` make, the read a broker does at start, and the
//! watch that keeps every broker's [`LiveSecurity`] current without a restart.
//!
//! ```text
//! /fencelog/<cluster>/users/<name>                 StoredUser JSON (SCRAM-SHA-256, no password)
//! /fencelog/<cluster>/acls/<principal>/<pattern>   AclEntry JSON
//! ```
//!
//! Why one key per user and per grant, not one document: two administrators changing different
//! users never overwrite each other, and a change to one grant is one compare-and-swap on its
//! key (`acl add` merges operations into an existing grant only if the key is still at the
//! revision it read). Why the same value types as the standalone files ([`StoredUser`],
//! [`AclEntry`]): the authorizer reads one shape whatever the store.
//!
//! A value that does not decode (something other than fencelog wrote it) is never read as "no
//! such user" or "no grant": reading it (`list`, a broker's start) fails with
//! [`MetaError::Corrupt`] naming the key; a damaged value arriving through the watch is logged
//! with its key and the broker keeps the last good version of that key (as a standalone server
//! keeps the last good version of a damaged file).
//!
//! How many users and grants a cluster may hold is bounded ([`SecurityLimits`]): the CLI refuses
//! to add past the limit, and a broker refuses to start with more (and, once running, leaves
//! out, with an error in its log, what a racing `add` put past it), so what a broker holds in
//! memory and reads from etcd stays bounded.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError, Weak};

use etcd_client::{Compare, CompareOp, EventType, GetOptions, KeyValue, Txn, TxnOp, WatchOptions};

use super::etcd::cas::retry_compare_and_swap;
use super::etcd::watch::watch_backoff;
use super::etcd::EtcdMetaStore;
use super::layout::prefix_range_end;
use super::{decode_value, encode_value, MetaError};
use crate::auth::acl::{AclEntry, AclFile, Operation, TopicPattern, ACLS_FORMAT};
use crate::auth::acl_store::{AclStore, AclStoreError, AclStoreFuture};
use crate::auth::users::{new_stored_user, validate_user_name, StoredUser, UserFile, USERS_FORMAT};
use crate::auth::LiveSecurity;
use crate::cluster::backoff::Backoff;

/// Default of [`SecurityLimits::users_max`].
pub const DEFAULT_CLUSTER_USERS_MAX: usize = 10_000;
/// Default of [`SecurityLimits::acls_max`].
pub const DEFAULT_CLUSTER_ACLS_MAX: usize = 10_000;
/// Keys read per request when reading the users or the ACLs (pages at one revision, so a
/// large set never exceeds gRPC's message limit).
pub const SECURITY_PAGE_KEYS: i64 = 500;
/// Most attempts of a read-modify-write of one grant that keeps losing its compare-and-swap to
/// concurrent changes of the same grant.
pub const ACL_UPDATE_ATTEMPTS_MAX: u32 = 16;

/// How many users and grants one cluster may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecurityLimits {
    /// Most users ([`DEFAULT_CLUSTER_USERS_MAX`]).
    pub users_max: usize,
    /// Most grants, one per principal and topic pattern ([`DEFAULT_CLUSTER_ACLS_MAX`]).
    pub acls_max: usize,
}

impl Default for SecurityLimits {
    fn default() -> Self {
        Self {
            users_max: DEFAULT_CLUSTER_USERS_MAX,
            acls_max: DEFAULT_CLUSTER_ACLS_MAX,
        }
    }
}

/// Why a change to, or a read of, a cluster's users and ACLs failed.
#[derive(Debug, thiserror::Error)]
pub enum SecurityStoreError {
    /// etcd could not be reached, or a stored value is damaged (the key is named).
    #[error(transparent)]
    Meta(#[from] MetaError),
    /// The change itself was refused (an invalid name, an empty password, ...).
    #[error("{0}")]
    Refused(String),
    /// Adding would pass the cluster's user limit.
    #[error("the cluster has {count} users, its limit (SecurityLimits::users_max is {limit}): remove users it no longer needs with `fencelog user remove NAME --etcd URL` first")]
    TooManyUsers {
        /// Users stored now.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// Adding would pass the cluster's grant limit.
    #[error("the cluster has {count} ACL entries, its limit (SecurityLimits::acls_max is {limit}): remove grants it no longer needs with `fencelog acl remove ... --etcd URL`, or grant by topic prefix ('orders-*') instead of per topic")]
    TooManyAcls {
        /// Grants stored now.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// A grant kept changing under this change.
    #[error("the grant {key} changed {ACL_UPDATE_ATTEMPTS_MAX} times while this change was being made; nothing was written: try again")]
    Contended {
        /// The grant's key.
        key: String,
    },
}

impl From<crate::auth::SecurityFileError> for SecurityStoreError {
    fn from(error: crate::auth::SecurityFileError) -> Self {
        SecurityStoreError::Refused(error.to_string())
    }
}

/// A store error as an ACL store's: a refused change and a lost compare-and-swap race wrote
/// nothing; an etcd error during a write may have happened after etcd applied it.
fn acl_store_error(error: SecurityStoreError, writing: bool) -> AclStoreError {
    match error {
        SecurityStoreError::Refused(_)
        | SecurityStoreError::TooManyUsers { .. }
        | SecurityStoreError::TooManyAcls { .. } => AclStoreError::Refused(error.to_string()),
        SecurityStoreError::Contended { .. } => AclStoreError::NotWritten(error.to_string()),
        SecurityStoreError::Meta(_) if writing => AclStoreError::OutcomeUnknown(error.to_string()),
        SecurityStoreError::Meta(_) => AclStoreError::NotWritten(error.to_string()),
    }
}

/// A broker's ACL changes (Kafka's CreateAcls, DeleteAcls) go to etcd, as `fencelog acl
/// add|remove --etcd` do; every broker's watch then applies them.
impl AclStore for EtcdSecurityStore {
    fn acls(&self) -> AclStoreFuture<Vec<AclEntry>> {
        let store = self.clone();
        Box::pin(async move {
            store
                .acls()
                .await
                .map(|file| file.acls)
                .map_err(|error| acl_store_error(error, false))
        })
    }

    fn add(
        &self,
        principal: String,
        pattern: TopicPattern,
        operations: BTreeSet<Operation>,
    ) -> AclStoreFuture<AclEntry> {
        let store = self.clone();
        Box::pin(async move {
            store
                .add_acl(&principal, &pattern, &operations)
                .await
                .map_err(|error| acl_store_error(error, true))
        })
    }

    fn remove(
        &self,
        principal: String,
        pattern: TopicPattern,
        operations: BTreeSet<Operation>,
    ) -> AclStoreFuture<bool> {
        let store = self.clone();
        Box::pin(async move {
            store
                .remove_acl(&principal, &pattern, &operations)
                .await
                .map_err(|error| acl_store_error(error, true))
        })
    }
}

/// A cluster's users and ACLs in etcd; cheap to clone (clones share the connection).
#[derive(Debug, Clone)]
pub struct EtcdSecurityStore {
    store: EtcdMetaStore,
    limits: SecurityLimits,
}

impl EtcdSecurityStore {
    /// The users and ACLs of the cluster `store` is connected to, with the default limits.
    pub fn new(store: EtcdMetaStore) -> Self {
        Self {
            store,
            limits: SecurityLimits::default(),
        }
    }

    /// The same, with `limits`.
    pub fn with_limits(mut self, limits: SecurityLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The etcd key of user `name` (for messages).
    pub fn user_key(&self, name: &str) -> String {
        self.store.layout().user_key(name)
    }

    /// Adds `name` with `password`, or replaces its password. Returns whether it existed.
    pub async fn add_user(&self, name: &str, password: &str) -> Result<bool, SecurityStoreError> {
        let stored = new_stored_user(name, password)?;
        let key = self.user_key(name);
        let existed = self.get(&key).await?.is_some();
        if !existed {
            let count = self.count(self.store.layout().users_prefix()).await?;
            if count >= self.limits.users_max {
                return Err(SecurityStoreError::TooManyUsers {
                    count,
                    limit: self.limits.users_max,
                });
            }
        }
        let mut client = self.store.client();
        let value = encode_value(&stored);
        self.store
            .request("write the user", async move {
                client.put(key, value, None).await
            })
            .await?;
        Ok(existed)
    }

    /// Removes `name`. Returns whether it existed.
    pub async fn remove_user(&self, name: &str) -> Result<bool, SecurityStoreError> {
        validate_user_name(name)?;
        let key = self.user_key(name);
        let mut client = self.store.client();
        let response = self
            .store
            .request(
                "remove the user",
                async move { client.delete(key, None).await },
            )
            .await?;
        Ok(response.deleted() > 0)
    }

    /// Every user, checked: a damaged credential is an error naming its key.
    pub async fn users(&self) -> Result<UserFile, SecurityStoreError> {
        let (kvs, _revision) = self
            .read_prefix(self.store.layout().users_prefix(), 0)
            .await?;
        let mut users = BTreeMap::new();
        for kv in &kvs {
            let (name, stored) = self.decode_user(kv)?;
            users.insert(name, stored);
        }
        Ok(UserFile {
            format: USERS_FORMAT,
            users,
        })
    }

    /// Grants `operations` on `pattern` to `principal`, merged into its existing grant on the
    /// same pattern. Returns the grant as stored.
    pub async fn add_acl(
        &self,
        principal: &str,
        pattern: &TopicPattern,
        operations: &BTreeSet<Operation>,
    ) -> Result<AclEntry, SecurityStoreError> {
        validate_user_name(principal)?;
        let entry = self
            .update_acl(principal, pattern, |current| {
                let mut entry = current.unwrap_or_else(|| AclEntry {
                    principal: principal.to_owned(),
                    topic: pattern.clone(),
                    operations: BTreeSet::new(),
                });
                entry.operations.extend(operations.iter().copied());
                Some(entry)
            })
            .await?;
        Ok(entry.expect("a grant being added is never empty"))
    }

    /// Takes `operations` away from `principal`'s grant on `pattern` (the grant goes when
    /// nothing is left). Returns whether it changed.
    pub async fn remove_acl(
        &self,
        principal: &str,
        pattern: &TopicPattern,
        operations: &BTreeSet<Operation>,
    ) -> Result<bool, SecurityStoreError> {
        validate_user_name(principal)?;
        let mut changed = false;
        self.update_acl(principal, pattern, |current| {
            let mut entry = current?;
            let before = entry.operations.len();
            entry
                .operations
                .retain(|operation| !operations.contains(operation));
            changed = entry.operations.len() != before;
            (!entry.operations.is_empty()).then_some(entry)
        })
        .await?;
        Ok(changed)
    }

    /// Every grant, checked: a damaged one is an error naming its key.
    pub async fn acls(&self) -> Result<AclFile, SecurityStoreError> {
        let (kvs, _revision) = self
            .read_prefix(self.store.layout().acls_prefix(), 0)
            .await?;
        let acls = kvs
            .iter()
            .map(|kv| self.decode_acl(kv))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AclFile {
            format: ACLS_FORMAT,
            acls,
        })
    }

    /// Reads the users and ACLs for a broker that starts (a damaged value, or more than the
    /// limits, is an error) and keeps `live` current from then on with two watches, until
    /// `live` is dropped.
    pub async fn load_and_follow(&self) -> Result<Arc<LiveSecurity>, SecurityStoreError> {
        let (users, users_revision) = self.read_users().await?;
        let (acls, acls_revision) = self.read_acls().await?;
        let live = Arc::new(LiveSecurity::new(
            UserFile {
                format: USERS_FORMAT,
                users: users.clone(),
            },
            AclFile {
                format: ACLS_FORMAT,
                acls: acls.values().cloned().collect(),
            },
        ));
        let weak = Arc::downgrade(&live);
        live.attach(tokio::spawn(follow(
            self.clone(),
            weak.clone(),
            Known::Users(users),
            users_revision,
        )));
        live.attach(tokio::spawn(follow(
            self.clone(),
            weak,
            Known::Acls(acls),
            acls_revision,
        )));
        Ok(live)
    }

    /// Every user by name at one revision, checked against the limit.
    async fn read_users(&self) -> Result<(BTreeMap<String, StoredUser>, i64), SecurityStoreError> {
        let (kvs, revision) = self
            .read_prefix(self.store.layout().users_prefix(), 0)
            .await?;
        if kvs.len() > self.limits.users_max {
            return Err(SecurityStoreError::TooManyUsers {
                count: kvs.len(),
                limit: self.limits.users_max,
            });
        }
        let mut users = BTreeMap::new();
        for kv in &kvs {
            let (name, stored) = self.decode_user(kv)?;
            users.insert(name, stored);
        }
        Ok((users, revision))
    }

    /// Every grant by key at one revision, checked against the limit.
    async fn read_acls(&self) -> Result<(BTreeMap<String, AclEntry>, i64), SecurityStoreError> {
        let (kvs, revision) = self
            .read_prefix(self.store.layout().acls_prefix(), 0)
            .await?;
        if kvs.len() > self.limits.acls_max {
            return Err(SecurityStoreError::TooManyAcls {
                count: kvs.len(),
                limit: self.limits.acls_max,
            });
        }
        let mut acls = BTreeMap::new();
        for kv in &kvs {
            acls.insert(key_of(kv), self.decode_acl(kv)?);
        }
        Ok((acls, revision))
    }

    /// Replaces the grant of `principal` on `pattern` by `change(current)` (`None`: delete it)
    /// with a compare-and-swap on its key, retried (up to [`ACL_UPDATE_ATTEMPTS_MAX`] attempts,
    /// by the etcd store's one retry loop) when a concurrent change wins. Returns the grant
    /// written.
    async fn update_acl(
        &self,
        principal: &str,
        pattern: &TopicPattern,
        change: impl FnMut(Option<AclEntry>) -> Option<AclEntry> + Send,
    ) -> Result<Option<AclEntry>, SecurityStoreError> {
        let key = self.store.layout().acl_key(principal, pattern.as_str());
        // Lent to one attempt at a time (the attempts run one after another; the lock is never
        // held across an await).
        let change = std::sync::Mutex::new(change);
        retry_compare_and_swap(
            ACL_UPDATE_ATTEMPTS_MAX as usize,
            || self.try_update_acl(&key, &change),
            || SecurityStoreError::Contended { key: key.clone() },
        )
        .await
    }

    /// One attempt of [`update_acl`](Self::update_acl): `None` if the grant changed between
    /// the read and the write (nothing written: read again), else the grant written.
    async fn try_update_acl(
        &self,
        key: &str,
        change: &std::sync::Mutex<impl FnMut(Option<AclEntry>) -> Option<AclEntry>>,
    ) -> Result<Option<Option<AclEntry>>, SecurityStoreError> {
        let current = self.get(key).await?;
        let (entry, revision) = match &current {
            Some(kv) => (Some(self.decode_acl(kv)?), kv.mod_revision()),
            None => (None, 0),
        };
        let existed = entry.is_some();
        let next = (change.lock().unwrap_or_else(PoisonError::into_inner))(entry);
        if !existed && next.is_some() {
            let count = self.count(self.store.layout().acls_prefix()).await?;
            if count >= self.limits.acls_max {
                return Err(SecurityStoreError::TooManyAcls {
                    count,
                    limit: self.limits.acls_max,
                });
            }
        }
        // mod_revision 0 compares equal only while the key is absent.
        let unchanged = Compare::mod_revision(key, CompareOp::Equal, revision);
        let write = match &next {
            Some(entry) => TxnOp::put(key, encode_value(entry), None),
            None if existed => TxnOp::delete(key, None),
            None => return Ok(Some(None)),
        };
        let txn = Txn::new().when([unchanged]).and_then([write]);
        let mut client = self.store.client();
        let response = self
            .store
            .request("write the grant", async move { client.txn(txn).await })
            .await?;
        Ok(response.succeeded().then_some(next))
    }

    /// The key-value at `key`, if any.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        let mut client = self.store.client();
        let key = key.to_owned();
        let response = self
            .store
            .request(
                "read a security key",
                async move { client.get(key, None).await },
            )
            .await?;
        Ok(response.kvs().first().cloned())
    }

    /// How many keys start with `prefix`.
    async fn count(&self, prefix: String) -> Result<usize, MetaError> {
        let mut client = self.store.client();
        let response = self
            .store
            .request("count security keys", async move {
                client
                    .get(
                        prefix,
                        Some(GetOptions::new().with_prefix().with_count_only()),
                    )
                    .await
            })
            .await?;
        Ok(usize::try_from(response.count()).unwrap_or(usize::MAX))
    }

    /// Every key-value under `prefix` at one revision (`0`: the latest), read in pages of
    /// [`SECURITY_PAGE_KEYS`], with the revision read at.
    async fn read_prefix(
        &self,
        prefix: String,
        mut revision: i64,
    ) -> Result<(Vec<KeyValue>, i64), MetaError> {
        let range_end = prefix_range_end(&prefix);
        let mut from = prefix.into_bytes();
        let mut kvs = Vec::new();
        loop {
            let mut client = self.store.client();
            let options = GetOptions::new()
                .with_range(range_end.clone())
                .with_limit(SECURITY_PAGE_KEYS)
                .with_revision(revision);
            let key = from.clone();
            let page = self
                .store
                .request("read the users or ACLs", async move {
                    client.get(key, Some(options)).await
                })
                .await?;
            if revision == 0 {
                revision = page.header().map_or(0, |header| header.revision());
            }
            kvs.extend_from_slice(page.kvs());
            match page.kvs().last() {
                Some(last) if page.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return Ok((kvs, revision)),
            }
        }
    }

    /// A user's name and credential, checked: the value decodes, and holds a usable
    /// SCRAM-SHA-256 credential.
    fn decode_user(&self, kv: &KeyValue) -> Result<(String, StoredUser), MetaError> {
        let key = key_of(kv);
        let corrupt = |reason: String| MetaError::Corrupt {
            key: key.clone(),
            reason,
        };
        let name = self
            .store
            .layout()
            .parse_user_key(&key)
            .ok_or_else(|| corrupt("not a user key".into()))?;
        validate_user_name(name).map_err(|error| corrupt(error.to_string()))?;
        let stored: StoredUser = decode_value(&key, kv.value())?;
        if stored.credential().is_none() {
            return Err(corrupt(
                "not a usable SCRAM-SHA-256 credential (mechanism, iterations or a key's encoding is wrong); set the password again with `fencelog user add NAME --etcd URL`".into(),
            ));
        }
        Ok((name.to_owned(), stored))
    }

    /// A grant, checked: the value decodes, names the principal and pattern of its key, and
    /// grants something.
    fn decode_acl(&self, kv: &KeyValue) -> Result<AclEntry, MetaError> {
        let key = key_of(kv);
        let corrupt = |reason: String| MetaError::Corrupt {
            key: key.clone(),
            reason,
        };
        let (principal, pattern) = self
            .store
            .layout()
            .parse_acl_key(&key)
            .ok_or_else(|| corrupt("not an ACL key (acls/<principal>/<pattern>)".into()))?;
        let entry: AclEntry = decode_value(&key, kv.value())?;
        if entry.principal != principal || entry.topic.as_str() != pattern {
            return Err(corrupt(format!(
                "the grant is for principal {:?} on {:?}, but its key names {principal:?} on {pattern:?}",
                entry.principal,
                entry.topic.as_str()
            )));
        }
        if entry.operations.is_empty() {
            return Err(corrupt("the grant has no operations".into()));
        }
        Ok(entry)
    }
}

fn key_of(kv: &KeyValue) -> String {
    String::from_utf8_lossy(kv.key()).into_owned()
}

/// What a watch knows: the last good value of every key of the set it follows.
enum Known {
    Users(BTreeMap<String, StoredUser>),
    Acls(BTreeMap<String, AclEntry>),
}

impl Known {
    fn name(&self) -> &'static str {
        match self {
            Known::Users(_) => "users",
            Known::Acls(_) => "ACLs",
        }
    }
}

/// Keeps one set of `live` current: watches its prefix from `revision + 1`, applies each put
/// and delete, and publishes the set after each etcd response. When the watch breaks (etcd
/// restarted, its leader changed) or etcd compacted the revision it needs, it reads the whole
/// set again and watches from there. Ends when `live` is dropped.
async fn follow(
    store: EtcdSecurityStore,
    live: Weak<LiveSecurity>,
    mut known: Known,
    mut revision: i64,
) {
    let mut backoff = watch_backoff();
    loop {
        match watch_from(&store, &live, &mut known, &mut revision, &mut backoff).await {
            Ok(()) => return,
            Err(reason) => {
                tracing::warn!(set = known.name(), %reason, "security watch broke; reading again");
                backoff.wait().await;
                if live.strong_count() == 0 {
                    return;
                }
                match reread(&store, &known).await {
                    Ok((fresh, fresh_revision)) => {
                        known = fresh;
                        revision = fresh_revision;
                        if !publish(&live, &known) {
                            return;
                        }
                    }
                    // Keep serving with what is known: a damaged value is named in the log.
                    Err(error) => {
                        tracing::error!(set = known.name(), %error, "could not read the cluster's security settings again; keeping the last good version")
                    }
                }
            }
        }
    }
}

/// The whole set again (damaged values keep failing the read; the caller keeps what it knew).
async fn reread(
    store: &EtcdSecurityStore,
    known: &Known,
) -> Result<(Known, i64), SecurityStoreError> {
    Ok(match known {
        Known::Users(_) => {
            let (users, revision) = store.read_users().await?;
            (Known::Users(users), revision)
        }
        Known::Acls(_) => {
            let (acls, revision) = store.read_acls().await?;
            (Known::Acls(acls), revision)
        }
    })
}

/// Follows the prefix from `revision + 1`; `Ok` when `live` is gone, `Err` when the watch must
/// be opened again.
async fn watch_from(
    store: &EtcdSecurityStore,
    live: &Weak<LiveSecurity>,
    known: &mut Known,
    revision: &mut i64,
    backoff: &mut Backoff,
) -> Result<(), String> {
    let layout = store.store.layout();
    let prefix = match known {
        Known::Users(_) => layout.users_prefix(),
        Known::Acls(_) => layout.acls_prefix(),
    };
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(*revision + 1);
    let mut client = store.store.client();
    let mut stream = store
        .store
        .request("watch the users or ACLs", async move {
            client.watch(prefix, Some(options)).await
        })
        .await
        .map_err(|error| error.to_string())?;
    loop {
        let response = match stream.message().await {
            Ok(Some(response)) => response,
            Ok(None) => return Err("etcd ended the watch stream".into()),
            Err(error) => return Err(error.to_string()),
        };
        backoff.reset();
        if response.compact_revision() > 0 {
            return Err("etcd compacted the revisions the watch needed".into());
        }
        if response.canceled() {
            return Err(format!(
                "etcd cancelled the watch: {}",
                response.cancel_reason()
            ));
        }
        let mut changed = false;
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            *revision = (*revision).max(kv.mod_revision());
            changed |= apply(store, known, kv, event.event_type() == EventType::Put);
        }
        if changed && !publish(live, known) {
            return Ok(());
        }
        if live.strong_count() == 0 {
            return Ok(());
        }
    }
}

/// Applies one put or delete to what is known; returns whether anything changed. A damaged
/// value, or a new key past the limit, is logged with its key and left out (the key keeps its
/// last good value).
fn apply(store: &EtcdSecurityStore, known: &mut Known, kv: &KeyValue, put: bool) -> bool {
    let key = key_of(kv);
    match known {
        Known::Users(users) => {
            let Some(name) = store.store.layout().parse_user_key(&key) else {
                return false;
            };
            if !put {
                return users.remove(name).is_some();
            }
            if !users.contains_key(name) && users.len() >= store.limits.users_max {
                tracing::error!(%key, limit = store.limits.users_max, "a user past the cluster's limit is left out: remove users, then add it again");
                return false;
            }
            match store.decode_user(kv) {
                Ok((name, stored)) => {
                    tracing::info!(user = %name, "user added or changed");
                    users.insert(name, stored);
                    true
                }
                Err(error) => {
                    tracing::error!(%error, "keeping the last good version of this user");
                    false
                }
            }
        }
        Known::Acls(acls) => {
            if !put {
                return acls.remove(&key).is_some();
            }
            if !acls.contains_key(&key) && acls.len() >= store.limits.acls_max {
                tracing::error!(%key, limit = store.limits.acls_max, "a grant past the cluster's limit is left out: remove grants, then add it again");
                return false;
            }
            match store.decode_acl(kv) {
                Ok(entry) => {
                    tracing::info!(%key, "grant added or changed");
                    acls.insert(key, entry);
                    true
                }
                Err(error) => {
                    tracing::error!(%error, "keeping the last good version of this grant");
                    false
                }
            }
        }
    }
}

/// Hands the set to `live`; `false` when `live` is gone.
fn publish(live: &Weak<LiveSecurity>, known: &Known) -> bool {
    let Some(live) = live.upgrade() else {
        return false;
    };
    match known {
        Known::Users(users) => live.replace_users(UserFile {
            format: USERS_FORMAT,
            users: users.clone(),
        }),
        Known::Acls(acls) => live.replace_acls(AclFile {
            format: ACLS_FORMAT,
            acls: acls.values().cloned().collect(),
        }),
    }
    true
}
