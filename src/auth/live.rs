//! [`LiveSecurity`]: users and ACLs held in memory and replaced whole by whoever keeps them
//! current (on a cluster, the watch of the users and ACLs in etcd,
//! `crate::cluster::meta::security`), read by [`Security`](super::Security) on every
//! authentication and authorization.
//!
//! Why a type of its own and not one more file: on a cluster the users and ACLs are the
//! cluster's, not one broker's, and a change must reach every broker without a restart. The
//! authorizer must not know where they come from (files, etcd, a test), only that it reads a
//! consistent version: each of the two is swapped as one `Arc`, so a reader sees the old or the
//! new set, never a mix. The tasks that feed it are kept here and aborted when it is dropped.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use tokio::task::JoinHandle;
use tokio_util::task::AbortOnDropHandle;

use super::acl::AclFile;
use super::users::UserFile;

/// The current users and ACLs of a cluster, replaced whole on every change.
#[derive(Debug, Default)]
pub struct LiveSecurity {
    users: RwLock<Arc<UserFile>>,
    acls: RwLock<Arc<AclFile>>,
    /// The tasks keeping the two current; aborted with this value.
    feeders: Mutex<Vec<AbortOnDropHandle<()>>>,
}

impl LiveSecurity {
    /// Starts from `users` and `acls` (what was read at start).
    pub fn new(users: UserFile, acls: AclFile) -> Self {
        Self {
            users: RwLock::new(Arc::new(users)),
            acls: RwLock::new(Arc::new(acls)),
            feeders: Mutex::new(Vec::new()),
        }
    }

    /// The users now.
    pub fn users(&self) -> Arc<UserFile> {
        Arc::clone(&self.users.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The ACLs now.
    pub fn acls(&self) -> Arc<AclFile> {
        Arc::clone(&self.acls.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces every user.
    pub fn replace_users(&self, users: UserFile) {
        *self.users.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(users);
    }

    /// Replaces every ACL.
    pub fn replace_acls(&self, acls: AclFile) {
        *self.acls.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(acls);
    }

    /// Keeps `task` (one that feeds this value) until this value is dropped, then aborts it.
    /// The task should hold only a `Weak` reference, or it keeps this value alive itself.
    pub fn attach(&self, task: JoinHandle<()>) {
        self.feeders
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(AbortOnDropHandle::new(task));
    }
}
