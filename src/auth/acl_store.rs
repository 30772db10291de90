//! [`AclStore`]: where a running server reads and changes its ACLs when a client asks it to
//! (Kafka's DescribeAcls, CreateAcls and DeleteAcls), as `fencelog acl list|add|remove` do from
//! the CLI.
//!
//! Why a trait: a standalone server's ACLs are its data directory's `acls.json`
//! ([`FileAclStore`], the same locked, atomic update the CLI makes), a cluster's are keys in
//! etcd (`crate::cluster::meta::security::EtcdSecurityStore` implements this trait there); the
//! authorizer and the listeners must not know which. Either way a change is durable before it
//! is acknowledged, and live: the server's [`Security`](super::Security) reads the file again
//! at once after a change, and every broker of a cluster follows etcd with its watch.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use super::acl::{add_acl, list_acls, remove_acl, AclEntry, Operation, TopicPattern};
use super::files::SecurityFileError;

/// A boxed future of an ACL store's answer.
pub type AclStoreFuture<T> = Pin<Box<dyn Future<Output = Result<T, AclStoreError>> + Send>>;

/// Why an ACL store did not do what was asked; each variant says whether anything was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclStoreError {
    /// The change is not valid (an invalid principal name, past the store's limits); nothing
    /// was written.
    #[error("{0}")]
    Refused(String),
    /// The store could not be read, or the change could not be made; nothing was written.
    #[error("{0}; nothing was changed, try again")]
    NotWritten(String),
    /// The store was asked to write and did not confirm (a timeout, a failed sync): the change
    /// may or may not be in place. Describe the ACLs to see; making it again is safe (grants
    /// merge, removals of what is gone change nothing).
    #[error(
        "{0}; the change may or may not have been made: list the ACLs to see, repeating it is safe"
    )]
    OutcomeUnknown(String),
}

/// Reads and changes the ACLs of a running server (see the module documentation).
pub trait AclStore: Send + Sync + fmt::Debug {
    /// Every grant, as stored now.
    fn acls(&self) -> AclStoreFuture<Vec<AclEntry>>;

    /// Grants `operations` on `pattern` to `principal` (merged into its grant on the same
    /// pattern). Returns the grant as stored.
    fn add(
        &self,
        principal: String,
        pattern: TopicPattern,
        operations: BTreeSet<Operation>,
    ) -> AclStoreFuture<AclEntry>;

    /// Takes `operations` away from `principal`'s grant on `pattern` (the grant goes when
    /// nothing is left). Returns whether it changed.
    fn remove(
        &self,
        principal: String,
        pattern: TopicPattern,
        operations: BTreeSet<Operation>,
    ) -> AclStoreFuture<bool>;
}

/// The ACL file of a standalone server's data directory (`acls.json`), changed as
/// `fencelog acl add|remove --data-dir` changes it (off the async workers: it locks and syncs).
#[derive(Debug, Clone)]
pub struct FileAclStore {
    data_dir: PathBuf,
}

impl FileAclStore {
    /// The ACL file of `data_dir`.
    pub fn new(data_dir: PathBuf) -> Self {
        Self { data_dir }
    }
}

/// A file error as a store error: a refused change wrote nothing, and neither did a file that
/// could not be read or parsed (it is read first); a failed write may have replaced the file.
fn file_error(error: SecurityFileError, writing: bool) -> AclStoreError {
    match error {
        SecurityFileError::Refused(reason) => AclStoreError::Refused(reason),
        SecurityFileError::Io {
            action: "write", ..
        } if writing => AclStoreError::OutcomeUnknown(error.to_string()),
        other => AclStoreError::NotWritten(other.to_string()),
    }
}

/// Runs a blocking file operation off the async workers.
fn blocking<T: Send + 'static>(
    writing: bool,
    operation: impl FnOnce() -> Result<T, SecurityFileError> + Send + 'static,
) -> AclStoreFuture<T> {
    Box::pin(async move {
        match tokio::task::spawn_blocking(operation).await {
            Ok(result) => result.map_err(|error| file_error(error, writing)),
            Err(join) => Err(AclStoreError::OutcomeUnknown(format!(
                "the ACL file update did not finish: {join}"
            ))),
        }
    })
}

impl AclStore for FileAclStore {
    fn acls(&self) -> AclStoreFuture<Vec<AclEntry>> {
        let data_dir = self.data_dir.clone();
        blocking(false, move || list_acls(&data_dir))
    }

    fn add(
        &self,
        principal: String,
        pattern: TopicPattern,
        operations: BTreeSet<Operation>,
    ) -> AclStoreFuture<AclEntry> {
        let data_dir = self.data_dir.clone();
        blocking(true, move || {
            add_acl(&data_dir, &principal, &pattern, &operations)
        })
    }

    fn remove(
        &self,
        principal: String,
        pattern: TopicPattern,
        operations: BTreeSet<Operation>,
    ) -> AclStoreFuture<bool> {
        let data_dir = self.data_dir.clone();
        blocking(true, move || {
            remove_acl(&data_dir, &principal, &pattern, &operations)
        })
    }
}
