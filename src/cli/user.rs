//! `fencelog user add|remove|list`: the SCRAM-SHA-256 credentials of a data directory, or with
//! `--etcd` of a cluster. Works while servers run (they pick changes up without a restart).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde::Serialize;

use super::common::{conclude, read_password, Output};
use super::error::codes;
use super::security_target::SecurityTarget;
use super::CliError;

/// Arguments of `fencelog user`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  FENCELOG_PASSWORD=... fencelog user add alice --data-dir /var/lib/fencelog
  fencelog user list --data-dir /var/lib/fencelog
  fencelog user remove alice --etcd http://127.0.0.1:2379")]
pub struct UserArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: UserCommand,
}

impl UserArgs {
    /// Whether `--json` was given.
    pub fn json(&self) -> bool {
        match &self.command {
            UserCommand::Add { json, .. }
            | UserCommand::Remove { json, .. }
            | UserCommand::List { json, .. } => *json,
        }
    }
}

/// `fencelog user` subcommands.
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Add a user, or change its password (from FENCELOG_PASSWORD or --password-file).
    #[command(after_help = "Examples:
  FENCELOG_PASSWORD=... fencelog user add alice --data-dir /var/lib/fencelog
  fencelog user add alice --password-file alice.pw --etcd http://127.0.0.1:2379")]
    Add {
        /// The user name.
        name: String,
        /// File whose first line is the password (instead of FENCELOG_PASSWORD).
        #[arg(long)]
        password_file: Option<PathBuf>,
        /// Where the users live.
        #[command(flatten)]
        target: SecurityTarget,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a user.
    #[command(after_help = "Examples:
  fencelog user remove alice --data-dir /var/lib/fencelog")]
    Remove {
        /// The user name.
        name: String,
        /// Where the users live.
        #[command(flatten)]
        target: SecurityTarget,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the user names (never any credential).
    #[command(after_help = "Examples:
  fencelog user list --data-dir /var/lib/fencelog --json")]
    List {
        /// Where the users live.
        #[command(flatten)]
        target: SecurityTarget,
        /// One JSON object per user.
        #[arg(long)]
        json: bool,
    },
}

/// What `user add` and `user remove` print with `--json`: the user and the change made
/// (`added`, `updated`, `removed`), in the `action` field every changing command prints.
#[derive(Debug, Serialize)]
struct Changed<'a> {
    user: &'a str,
    action: &'static str,
}

/// A listed user with `--json`.
#[derive(Debug, Serialize)]
struct Listed<'a> {
    user: &'a str,
}

/// Runs a `fencelog user` command.
pub fn run(args: UserArgs) -> Result<(), CliError> {
    match args.command {
        UserCommand::Add {
            name,
            password_file,
            target,
            json,
        } => {
            let target = target.with_json(json);
            let password = read_password(password_file.as_deref())?;
            let existed = target.add_user(&name, &password)?;
            let action = if existed { "updated" } else { "added" };
            let mut out = Output::new(json);
            conclude(
                out.emit(
                    &Changed {
                        user: &name,
                        action,
                    },
                    format!("{action} user {name}"),
                )
                .and_then(|()| out.flush()),
            )
        }
        UserCommand::Remove { name, target, json } => {
            let target = target.with_json(json);
            if !target.remove_user(&name)? {
                return Err(CliError::with_code(
                    codes::UNKNOWN_USER,
                    format!(
                        "no user {name:?} in {}: `fencelog user list` shows who there is",
                        target.describe()
                    ),
                )
                .detail("user", &name));
            }
            let mut out = Output::new(json);
            conclude(
                out.emit(
                    &Changed {
                        user: &name,
                        action: "removed",
                    },
                    format!("removed user {name}"),
                )
                .and_then(|()| out.flush()),
            )
        }
        UserCommand::List { target, json } => {
            let target = target.with_json(json);
            let names = target.list_users()?;
            let mut out = Output::new(json);
            conclude(
                names
                    .iter()
                    .try_for_each(|name| out.emit(&Listed { user: name }, name))
                    .and_then(|()| out.flush()),
            )
        }
    }
}
