//! [`Security`]: what a server with `--auth` checks, in one place both listeners call, so the
//! native and Kafka listeners cannot drift apart. It knows the users (for authentication), the
//! ACLs and the super users, and answers "may principal P do operation O on topic T?".
//!
//! The users and ACLs come from one of two sources: the files of a standalone server's data
//! directory ([`Security::open`]), or a [`LiveSecurity`] kept current by someone else (a
//! cluster's users and ACLs in etcd, [`Security::live`]). Both are read per decision, so a change
//! takes effect without a restart.
//!
//! A principal whose user was removed while its connection was open is refused everything from
//! then on (its connection stays open, and every request is `NOT_AUTHORIZED`): removing a user
//! revokes what it may do at once, not at its next login, so a stolen password stops working
//! when its user is removed. Changing a password (`user add` again) keeps open connections.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rand::RngCore;

use super::acl::{AclEntry, AclFile, Operation, TopicPattern};
use super::acl_store::{AclStore, AclStoreError, FileAclStore};
use super::files::{LiveFile, SecurityFileError, ACLS_FILE, RELOAD_INTERVAL, USERS_FILE};
use super::live::LiveSecurity;
use super::scram::{decoy_credential, ScramCredential};
use super::users::UserFile;

/// Where a server's users and ACLs come from.
#[derive(Debug)]
enum Source {
    /// `users.json` and `acls.json` of the data directory (standalone).
    Files {
        users: LiveFile<UserFile>,
        acls: LiveFile<AclFile>,
    },
    /// Kept current by another component (a cluster's users and ACLs in etcd).
    Live(Arc<LiveSecurity>),
}

/// Where an administrator changes the users and ACLs: the flag the CLI's `acl add` takes, named
/// in refusals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityStore {
    /// A data directory's files (`--data-dir DIR`).
    DataDirectory,
    /// A cluster's etcd (`--etcd URL`).
    Etcd,
}

impl SecurityStore {
    fn flag(self) -> &'static str {
        match self {
            SecurityStore::DataDirectory => "--data-dir DIR",
            SecurityStore::Etcd => "--etcd URL",
        }
    }
}

/// The server's authentication and authorization state (present only with `--auth`).
#[derive(Debug)]
pub struct Security {
    source: Source,
    store: SecurityStore,
    super_users: BTreeSet<String>,
    /// The cluster's broker principal (`serve --broker-user`): it may replicate every topic
    /// (follow a leader), and nothing else unless an ACL grants it.
    broker_principal: Option<String>,
    /// Derives decoy credentials for unknown users; random per server process.
    decoy_secret: [u8; 32],
    /// Where clients' ACL changes (Kafka's CreateAcls, DeleteAcls) are written: the data
    /// directory's file standalone, etcd on a cluster ([`Security::with_acl_store`]).
    acl_store: Option<Arc<dyn AclStore>>,
}

/// A refused request: who, what, on which resource, and how to grant it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("principal {principal:?} is not authorized to {operation} on {resource}; {remedy}")]
pub struct NotAuthorized {
    /// The authenticated user.
    pub principal: String,
    /// What it tried.
    pub operation: Operation,
    /// `topic "NAME"`, or `any topic` for requests without one (InitProducerId, groups).
    pub resource: String,
    /// What to do about it: the grant that would allow it, or why no grant would.
    remedy: String,
}

impl NotAuthorized {
    fn new(
        principal: &str,
        operation: Operation,
        topic: Option<&str>,
        store: SecurityStore,
    ) -> Self {
        let pattern = topic.unwrap_or("'*'");
        Self {
            principal: principal.to_owned(),
            operation,
            resource: Self::resource(topic),
            remedy: format!(
                "an administrator can grant it with `fencelog acl add --principal {principal} --topic {pattern} --ops {operation} {}`",
                store.flag()
            ),
        }
    }

    /// The refusal of a request on a connection whose user was removed after it logged in.
    fn removed(principal: &str, operation: Operation, topic: Option<&str>) -> Self {
        Self {
            principal: principal.to_owned(),
            operation,
            resource: Self::resource(topic),
            remedy: format!(
                "user {principal:?} was removed after this connection authenticated, so it may do nothing more: reconnect as an existing user"
            ),
        }
    }

    /// The refusal of a change only a super user may make (granting or revoking ACLs: a grant
    /// can give any right on any topic, so only a principal that has them all may make one).
    fn super_user_only(principal: &str, resource: &str) -> Self {
        Self {
            principal: principal.to_owned(),
            operation: Operation::Admin,
            resource: resource.to_owned(),
            remedy: "only a super user may, because a grant can give any right on any topic: \
                     connect as a user named by `serve --super-user NAME`"
                .to_owned(),
        }
    }

    fn resource(topic: Option<&str>) -> String {
        topic.map_or_else(
            || "any topic".to_owned(),
            |topic| format!("topic {topic:?}"),
        )
    }
}

impl Security {
    /// Reads `users.json` and `acls.json` of `data_dir` (missing files are empty: nobody can log
    /// in, and only super users may act). A file that does not parse is an error.
    pub fn open(
        data_dir: &Path,
        super_users: impl IntoIterator<Item = String>,
    ) -> Result<Self, SecurityFileError> {
        let mut security = Self::with_source(
            Source::Files {
                users: LiveFile::open(data_dir.join(USERS_FILE))?,
                acls: LiveFile::open(data_dir.join(ACLS_FILE))?,
            },
            SecurityStore::DataDirectory,
            super_users,
        );
        security.acl_store = Some(Arc::new(FileAclStore::new(data_dir.to_path_buf())));
        Ok(security)
    }

    /// Writes clients' ACL changes to `store` (a cluster's etcd) instead of refusing them.
    pub fn with_acl_store(mut self, store: Arc<dyn AclStore>) -> Self {
        self.acl_store = Some(store);
        self
    }

    /// Reads users and ACLs from `live` (a cluster's, kept current from etcd), naming `store`
    /// in refusals.
    pub fn live(
        live: Arc<LiveSecurity>,
        store: SecurityStore,
        super_users: impl IntoIterator<Item = String>,
    ) -> Self {
        Self::with_source(Source::Live(live), store, super_users)
    }

    fn with_source(
        source: Source,
        store: SecurityStore,
        super_users: impl IntoIterator<Item = String>,
    ) -> Self {
        let mut decoy_secret = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut decoy_secret);
        Self {
            source,
            store,
            super_users: super_users.into_iter().collect(),
            broker_principal: None,
            decoy_secret,
            acl_store: None,
        }
    }

    /// Names the cluster's broker principal (see [`Security::may_replicate`]).
    pub fn with_broker_principal(mut self, principal: impl Into<String>) -> Self {
        self.broker_principal = Some(principal.into());
        self
    }

    /// Whether `principal` may replicate `topic` (fetch it as a follower, ask where its leader
    /// epochs end): the broker principal always, anyone else with `admin` on the topic.
    pub fn may_replicate(&self, principal: &str, topic: &str) -> Result<(), NotAuthorized> {
        if self.broker_principal.as_deref() == Some(principal) {
            self.check_exists(principal, Operation::Admin, Some(topic))?;
            return Ok(());
        }
        self.authorize(principal, Operation::Admin, topic)
    }

    /// The credential to run an exchange against: the user's (re-reading the users file if it
    /// changed, so a user added a moment ago can log in), or a decoy that no password matches.
    pub fn credential(&self, user: &str) -> ScramCredential {
        self.users(Duration::ZERO)
            .users
            .get(user)
            .and_then(|stored| stored.credential())
            .unwrap_or_else(|| decoy_credential(&self.decoy_secret, user))
    }

    /// Whether `password` is `user`'s (the console's login form). The same work is done for a
    /// user that does not exist (against a decoy credential), and the keys are compared in
    /// constant time, so the answer's timing says nothing about which part was wrong.
    pub fn check_password(&self, user: &str, password: &str) -> bool {
        let credential = self.credential(user);
        let derived = ScramCredential::derive(password, &credential.salt, credential.iterations);
        let difference = derived
            .stored_key
            .iter()
            .zip(credential.stored_key.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        difference == 0 && self.users(Duration::ZERO).users.contains_key(user)
    }

    /// The users, re-read from the file if the last check is older than `max_age`.
    fn users(&self, max_age: Duration) -> Arc<UserFile> {
        match &self.source {
            Source::Files { users, .. } => users.current(max_age),
            Source::Live(live) => live.users(),
        }
    }

    fn acls(&self) -> Arc<AclFile> {
        match &self.source {
            Source::Files { acls, .. } => acls.current(RELOAD_INTERVAL),
            Source::Live(live) => live.acls(),
        }
    }

    /// Refuses a principal whose user no longer exists (removed after it authenticated).
    fn check_exists(
        &self,
        principal: &str,
        operation: Operation,
        topic: Option<&str>,
    ) -> Result<(), NotAuthorized> {
        if self.users(RELOAD_INTERVAL).users.contains_key(principal) {
            Ok(())
        } else {
            Err(NotAuthorized::removed(principal, operation, topic))
        }
    }

    fn is_super_user(&self, principal: &str) -> bool {
        self.super_users.contains(principal)
    }

    /// Whether `principal` may do `operation` on `topic`.
    pub fn authorize(
        &self,
        principal: &str,
        operation: Operation,
        topic: &str,
    ) -> Result<(), NotAuthorized> {
        self.check_exists(principal, operation, Some(topic))?;
        if self.is_super_user(principal) || self.acls().allows(principal, operation, topic) {
            return Ok(());
        }
        Err(NotAuthorized::new(
            principal,
            operation,
            Some(topic),
            self.store,
        ))
    }

    /// Whether `principal` may do `operation` on some topic (for requests that name none:
    /// InitProducerId, group membership).
    pub fn authorize_somewhere(
        &self,
        principal: &str,
        operation: Operation,
    ) -> Result<(), NotAuthorized> {
        self.check_exists(principal, operation, None)?;
        if self.is_super_user(principal) || self.acls().allows_somewhere(principal, operation) {
            return Ok(());
        }
        Err(NotAuthorized::new(principal, operation, None, self.store))
    }

    /// Whether `principal` is a super user (and still exists): what changing ACLs needs.
    pub fn authorize_super_user(
        &self,
        principal: &str,
        resource: &str,
    ) -> Result<(), NotAuthorized> {
        self.check_exists(principal, Operation::Admin, None)?;
        if self.is_super_user(principal) {
            return Ok(());
        }
        Err(NotAuthorized::super_user_only(principal, resource))
    }

    fn acl_store(&self) -> Result<&Arc<dyn AclStore>, AclStoreError> {
        self.acl_store.as_ref().ok_or_else(|| {
            AclStoreError::Refused(
                "this server has no store for ACL changes; change them with `fencelog acl add|remove`"
                    .to_owned(),
            )
        })
    }

    /// Every grant as stored now (read from the store, so a change just made is in it).
    pub async fn stored_acls(&self) -> Result<Vec<AclEntry>, AclStoreError> {
        match (&self.source, &self.acl_store) {
            (Source::Live(live), None) => Ok(live.acls().acls.clone()),
            _ => self.acl_store()?.acls().await,
        }
    }

    /// Grants `operations` on `pattern` to `principal`, durably; the next decision sees it.
    pub async fn add_acl(
        &self,
        principal: &str,
        pattern: &TopicPattern,
        operations: &BTreeSet<Operation>,
    ) -> Result<AclEntry, AclStoreError> {
        let result = self
            .acl_store()?
            .add(principal.to_owned(), pattern.clone(), operations.clone())
            .await;
        self.reload_acls();
        result
    }

    /// Takes `operations` away from `principal`'s grant on `pattern`, durably; the next
    /// decision sees it. Returns whether the grant changed.
    pub async fn remove_acl(
        &self,
        principal: &str,
        pattern: &TopicPattern,
        operations: &BTreeSet<Operation>,
    ) -> Result<bool, AclStoreError> {
        let result = self
            .acl_store()?
            .remove(principal.to_owned(), pattern.clone(), operations.clone())
            .await;
        self.reload_acls();
        result
    }

    /// Reads the ACL file again now (standalone), so a change made through this server applies
    /// to the very next request rather than within [`RELOAD_INTERVAL`]. A cluster's brokers
    /// follow etcd with their watch.
    fn reload_acls(&self) {
        if let Source::Files { acls, .. } = &self.source {
            acls.current(Duration::ZERO);
        }
    }

    /// Whether `principal` may see `topic` in Metadata (any operation on it).
    pub fn may_see(&self, principal: &str, topic: &str) -> bool {
        self.check_exists(principal, Operation::Consume, Some(topic))
            .is_ok()
            && (self.is_super_user(principal) || self.acls().allows_any(principal, topic))
    }
}

/// What one connection may do: everything when the server runs without `--auth`, else what its
/// authenticated principal's ACLs allow. Cheap to clone into a request's future.
#[derive(Debug, Clone, Default)]
pub struct Access {
    checked: Option<(Arc<Security>, Arc<str>)>,
}

impl Access {
    /// No checks: the server runs without `--auth`.
    pub fn open() -> Self {
        Self::default()
    }

    /// Checks against `security` as `principal`.
    pub fn as_principal(security: Arc<Security>, principal: Arc<str>) -> Self {
        Self {
            checked: Some((security, principal)),
        }
    }

    /// The authenticated principal, if authentication is on.
    pub fn principal(&self) -> Option<&str> {
        self.checked.as_ref().map(|(_, principal)| &**principal)
    }

    /// Whether this connection may do `operation` on `topic`.
    pub fn check(&self, operation: Operation, topic: &str) -> Result<(), NotAuthorized> {
        match &self.checked {
            None => Ok(()),
            Some((security, principal)) => security.authorize(principal, operation, topic),
        }
    }

    /// Whether this connection may do `operation` on some topic.
    pub fn check_somewhere(&self, operation: Operation) -> Result<(), NotAuthorized> {
        match &self.checked {
            None => Ok(()),
            Some((security, principal)) => security.authorize_somewhere(principal, operation),
        }
    }

    /// Replicating a topic as a follower (see [`Security::may_replicate`]).
    pub fn check_replicate(&self, topic: &str) -> Result<(), NotAuthorized> {
        match &self.checked {
            None => Ok(()),
            Some((security, principal)) => security.may_replicate(principal, topic),
        }
    }

    /// Deleting a topic: the `admin` operation (for the DeleteTopic APIs).
    pub fn check_delete_topic(&self, topic: &str) -> Result<(), NotAuthorized> {
        self.check(Operation::Admin, topic)
    }

    /// The server's security, when authentication is on.
    pub fn security(&self) -> Option<&Arc<Security>> {
        self.checked.as_ref().map(|(security, _)| security)
    }

    /// Whether this connection's principal is a super user (changing ACLs on `resource`).
    pub fn check_super_user(&self, resource: &str) -> Result<(), NotAuthorized> {
        match &self.checked {
            None => Ok(()),
            Some((security, principal)) => security.authorize_super_user(principal, resource),
        }
    }

    /// Whether Metadata shows `topic` to this connection.
    pub fn may_see(&self, topic: &str) -> bool {
        match &self.checked {
            None => true,
            Some((security, principal)) => security.may_see(principal, topic),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::acl::{parse_operations, AclEntry, TopicPattern, ACLS_FORMAT};
    use crate::auth::users::{new_stored_user, USERS_FORMAT};

    fn users(names: &[&str]) -> UserFile {
        UserFile {
            format: USERS_FORMAT,
            users: names
                .iter()
                .map(|name| (name.to_string(), new_stored_user(name, "pw").unwrap()))
                .collect(),
        }
    }

    /// A live source's replacements are seen by the next decision; a principal whose user was
    /// removed is refused everything (the broker principal's replication too), saying why; a
    /// refusal on a cluster names `--etcd`.
    #[test]
    fn live_changes_apply_to_the_next_decision_and_removal_revokes() {
        let live = Arc::new(LiveSecurity::new(
            users(&["alice", "broker"]),
            AclFile::default(),
        ));
        let security = Security::live(Arc::clone(&live), SecurityStore::Etcd, Vec::new())
            .with_broker_principal("broker");
        let refused = security
            .authorize("alice", Operation::Produce, "orders")
            .unwrap_err();
        assert!(refused.to_string().contains("--etcd URL"), "{refused}");
        live.replace_acls(AclFile {
            format: ACLS_FORMAT,
            acls: vec![AclEntry {
                principal: "alice".into(),
                topic: TopicPattern::parse("orders*").unwrap(),
                operations: parse_operations("produce").unwrap(),
            }],
        });
        security
            .authorize("alice", Operation::Produce, "orders")
            .unwrap();
        assert!(security.may_replicate("broker", "orders").is_ok());
        assert!(security.may_replicate("alice", "orders").is_err());
        live.replace_users(users(&[]));
        let removed = security
            .authorize("alice", Operation::Produce, "orders")
            .unwrap_err();
        assert!(removed.to_string().contains("was removed"), "{removed}");
        assert!(!security.may_see("alice", "orders"));
        assert!(security.may_replicate("broker", "orders").is_err());
    }
}
