//! Where `fencelog user` and `fencelog acl` make their changes: a standalone server's data
//! directory (`--data-dir`, the default), or a cluster's etcd (`--etcd URL [--cluster-name
//! NAME]`), which every broker of the cluster watches, so a change reaches all of them without
//! a restart.
//!
//! Why one type for both commands: the two stores must answer the same questions the same way
//! (added or updated, removed or absent, a listing), and the commands should not care which one
//! they talk to.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::Args;

use super::error::{self, codes};
use super::serve::DEFAULT_DATA_DIR;
use super::CliError;
use crate::auth::acl::{self, AclEntry, TopicPattern};
use crate::auth::{users, Operation};
use crate::cluster::meta::layout::DEFAULT_CLUSTER_NAME;

/// Runs `$body` with `$store` (the cluster's store) and returns its result when `--etcd` was
/// given; without the `etcd` feature, returns that it cannot.
macro_rules! on_cluster {
    ($target:ident, |$store:ident| $body:expr) => {
        if $target.on_cluster() {
            #[cfg(feature = "etcd")]
            return $target.on_etcd(|$store| async move { $body });
            #[cfg(not(feature = "etcd"))]
            return Err(CliError::invalid_argument(
                "--etcd: this build has no etcd client (built without the `etcd` feature)",
            ));
        }
    };
}

/// The flags naming the store of users and ACLs.
#[derive(Debug, Args)]
pub struct SecurityTarget {
    /// Data directory of a standalone server (not used with --etcd).
    #[arg(long, env = "FENCELOG_DATA_DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Change the users and ACLs of the cluster whose metadata lives in etcd at these client
    /// URLs (comma-separated), instead of a data directory's: every broker of the cluster picks
    /// the change up without a restart.
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    pub etcd: Vec<String>,
    /// The cluster's name in etcd (with --etcd).
    #[arg(long, value_name = "NAME", env = "FENCELOG_CLUSTER", default_value = DEFAULT_CLUSTER_NAME)]
    pub cluster_name: String,
    /// Whether notes on stderr are JSON (the command's `--json`), set by the command.
    #[arg(skip)]
    pub json: bool,
}

/// Files only a fencelog data directory holds: the server's lock, and the users' and ACLs'
/// files and lock. A directory with none of them (and not empty) is someone else's.
const DATA_DIRECTORY_MARKERS: [&str; 4] = [
    crate::broker::LOCK_FILE,
    crate::auth::files::USERS_FILE,
    crate::auth::files::ACLS_FILE,
    crate::auth::files::SECURITY_LOCK_FILE,
];

impl SecurityTarget {
    /// The same target, its notes printed as JSON when `json`.
    pub fn with_json(mut self, json: bool) -> Self {
        self.json = json;
        self
    }

    fn on_cluster(&self) -> bool {
        !self.etcd.is_empty()
    }

    /// Where the change went, for messages: `DIR` or `cluster NAME in etcd URL`.
    pub fn describe(&self) -> String {
        if self.on_cluster() {
            format!(
                "cluster {} in etcd {}",
                self.cluster_name,
                self.etcd.join(",")
            )
        } else {
            self.data_dir.display().to_string()
        }
    }

    /// Adds `name` or changes its password; returns whether it existed.
    pub fn add_user(&self, name: &str, password: &str) -> Result<bool, CliError> {
        on_cluster!(self, |store| store.add_user(name, password).await);
        self.in_data_dir(|dir| users::add_user(dir, name, password))
    }

    /// Removes `name`; returns whether it existed.
    pub fn remove_user(&self, name: &str) -> Result<bool, CliError> {
        on_cluster!(self, |store| store.remove_user(name).await);
        self.in_data_dir(|dir| users::remove_user(dir, name))
    }

    /// The user names, sorted.
    pub fn list_users(&self) -> Result<Vec<String>, CliError> {
        on_cluster!(self, |store| Ok(store
            .users()
            .await?
            .users
            .into_keys()
            .collect()));
        self.check_existing_data_dir()?;
        users::list_users(&self.data_dir).map_err(failed)
    }

    /// Grants `operations` on `pattern` to `principal`; returns the grant as stored.
    pub fn add_acl(
        &self,
        principal: &str,
        pattern: &TopicPattern,
        operations: &BTreeSet<Operation>,
    ) -> Result<AclEntry, CliError> {
        on_cluster!(self, |store| store
            .add_acl(principal, pattern, operations)
            .await);
        self.in_data_dir(|dir| acl::add_acl(dir, principal, pattern, operations))
    }

    /// Takes `operations` on `pattern` away from `principal`; returns whether a grant changed.
    pub fn remove_acl(
        &self,
        principal: &str,
        pattern: &TopicPattern,
        operations: &BTreeSet<Operation>,
    ) -> Result<bool, CliError> {
        on_cluster!(self, |store| store
            .remove_acl(principal, pattern, operations)
            .await);
        self.in_data_dir(|dir| acl::remove_acl(dir, principal, pattern, operations))
    }

    /// Every grant.
    pub fn list_acls(&self) -> Result<Vec<AclEntry>, CliError> {
        on_cluster!(self, |store| Ok(store.acls().await?.acls));
        self.check_existing_data_dir()?;
        acl::list_acls(&self.data_dir).map_err(failed)
    }

    /// Makes a change in the data directory, which creates the directory if it does not exist:
    /// that is how a new setup starts (README's "Locking it down" adds users before the first
    /// `serve`), so it is allowed, but a mistyped `--data-dir` would otherwise go unnoticed
    /// (the server never sees the users), hence the note on stderr naming what was created.
    /// An existing directory must be a fencelog data directory (or empty): writing users into
    /// some other directory is refused.
    fn in_data_dir<T>(
        &self,
        change: impl FnOnce(&Path) -> Result<T, crate::auth::SecurityFileError>,
    ) -> Result<T, CliError> {
        let existed = self.data_dir.exists();
        if existed {
            check_data_directory(&self.data_dir)?;
        }
        let result = change(&self.data_dir).map_err(failed)?;
        if !existed && self.data_dir.is_dir() {
            let note = CliError::with_code("DATA_DIRECTORY_CREATED", created_note(&self.data_dir))
                .detail("data_dir", self.data_dir.display().to_string());
            error::warn(self.json, "note", &note);
        }
        Ok(result)
    }

    /// A listing reads a directory that must exist and be a data directory: listing a mistyped
    /// one would print nothing and look like "no users".
    fn check_existing_data_dir(&self) -> Result<(), CliError> {
        if !self.data_dir.exists() {
            return Err(not_a_data_directory(
                &self.data_dir,
                format!(
                    "{} does not exist: give the --data-dir your server uses",
                    self.data_dir.display()
                ),
            ));
        }
        check_data_directory(&self.data_dir)
    }

    /// Runs `operation` on the cluster's store in etcd, on a runtime of its own.
    #[cfg(feature = "etcd")]
    fn on_etcd<T, F>(
        &self,
        operation: impl FnOnce(crate::cluster::meta::security::EtcdSecurityStore) -> F,
    ) -> Result<T, CliError>
    where
        F: std::future::Future<
            Output = Result<T, crate::cluster::meta::security::SecurityStoreError>,
        >,
    {
        use crate::cluster::meta::security::EtcdSecurityStore;
        use crate::cluster::meta::{EtcdConfig, EtcdMetaStore};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| CliError::io(format!("start runtime: {error}")))?;
        runtime.block_on(async {
            let config =
                EtcdConfig::new(self.etcd.clone()).with_cluster_name(self.cluster_name.clone());
            let store = EtcdMetaStore::connect(config).await.map_err(|error| {
                CliError::with_code(codes::SECURITY_STORE_ERROR, format!("--etcd: {error}"))
            })?;
            operation(EtcdSecurityStore::new(store))
                .await
                .map_err(|error| {
                    CliError::with_code(codes::SECURITY_STORE_ERROR, error.to_string())
                })
        })
    }
}

/// Refuses an existing `data_dir` that is neither empty nor a fencelog data directory.
fn check_data_directory(data_dir: &Path) -> Result<(), CliError> {
    let mut entries = match std::fs::read_dir(data_dir) {
        Ok(entries) => entries,
        Err(error) => {
            return Err(not_a_data_directory(
                data_dir,
                format!(
                    "{}: {error}: give the --data-dir your server uses",
                    data_dir.display()
                ),
            ))
        }
    };
    let empty = entries.next().is_none();
    if empty
        || DATA_DIRECTORY_MARKERS
            .iter()
            .any(|marker| data_dir.join(marker).exists())
    {
        return Ok(());
    }
    Err(not_a_data_directory(
        data_dir,
        format!(
            "{} is not a fencelog data directory (it has none of {}): give the --data-dir your server uses, or a new directory to start one",
            data_dir.display(),
            DATA_DIRECTORY_MARKERS.join(", ")
        ),
    ))
}

fn not_a_data_directory(data_dir: &Path, message: String) -> CliError {
    CliError::with_code(codes::NOT_A_DATA_DIRECTORY, message)
        .detail("data_dir", data_dir.display().to_string())
}

/// The note `user`/`acl` print when a change created the data directory.
fn created_note(data_dir: &Path) -> String {
    format!(
        "created data directory {dir} (it did not exist); if that is a typo, remove it and give the --data-dir your server uses (`fencelog serve --data-dir {dir}` serves these users and ACLs)",
        dir = data_dir.display()
    )
}

fn failed(error: crate::auth::SecurityFileError) -> CliError {
    match error {
        crate::auth::SecurityFileError::Refused(reason) => CliError::invalid_argument(reason),
        other => CliError::with_code(codes::SECURITY_STORE_ERROR, other.to_string()),
    }
}
