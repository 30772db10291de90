//! `fencelog user add|remove|list`: the SCRAM-SHA-256 credentials of a data directory. Works
//! while a server runs on the directory (the server picks changes up without a restart).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde::Serialize;

use super::common::{conclude, read_password, Output};
use super::serve::DEFAULT_DATA_DIR;
use super::CliError;
use crate::auth::users;

/// Arguments of `fencelog user`.
#[derive(Debug, Args)]
pub struct UserArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: UserCommand,
}

/// `fencelog user` subcommands.
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Add a user, or change its password (from FENCELOG_PASSWORD or --password-file).
    Add {
        /// The user name.
        name: String,
        /// File whose first line is the password (instead of FENCELOG_PASSWORD).
        #[arg(long)]
        password_file: Option<PathBuf>,
        /// Data directory.
        #[arg(long, env = "FENCELOG_DATA_DIR", default_value = DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a user.
    Remove {
        /// The user name.
        name: String,
        /// Data directory.
        #[arg(long, env = "FENCELOG_DATA_DIR", default_value = DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the user names (never any credential).
    List {
        /// Data directory.
        #[arg(long, env = "FENCELOG_DATA_DIR", default_value = DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        /// One JSON object per user.
        #[arg(long)]
        json: bool,
    },
}

/// What `user add` and `user remove` print with `--json`.
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
    let failed = |error: crate::auth::SecurityFileError| CliError::new(error.to_string());
    match args.command {
        UserCommand::Add {
            name,
            password_file,
            data_dir,
            json,
        } => {
            let password = read_password(password_file.as_deref())?;
            let existed = users::add_user(&data_dir, &name, &password).map_err(failed)?;
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
        UserCommand::Remove {
            name,
            data_dir,
            json,
        } => {
            if !users::remove_user(&data_dir, &name).map_err(failed)? {
                return Err(CliError::new(format!(
                    "no user {name:?} in {}",
                    data_dir.display()
                )));
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
        UserCommand::List { data_dir, json } => {
            let names = users::list_users(&data_dir).map_err(failed)?;
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
