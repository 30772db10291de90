//! `fencelog acl add|remove|list`: which user may do which operations on which topics, in a data
//! directory or with `--etcd` in a cluster. Works while servers run (a standalone server picks
//! changes up within [`RELOAD_INTERVAL`](crate::auth::files::RELOAD_INTERVAL), a cluster's
//! brokers as soon as their etcd watch delivers them).

use clap::{Args, Subcommand};
use serde::Serialize;

use super::common::{conclude, Output};
use super::error::codes;
use super::security_target::SecurityTarget;
use super::CliError;
use crate::auth::acl::{parse_operations, AclEntry, TopicPattern};

/// Arguments of `fencelog acl`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fencelog acl add --principal alice --topic 'orders-*' --ops produce,lease --data-dir DIR
  fencelog acl list --data-dir DIR
  fencelog acl remove --principal alice --topic 'orders-*' --ops lease --data-dir DIR")]
pub struct AclArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: AclCommand,
}

/// The flags `acl add` and `acl remove` share.
#[derive(Debug, Args)]
pub struct AclChange {
    /// The user the grant is for.
    #[arg(long)]
    pub principal: String,
    /// Topics: `*`, a name, or a prefix ending in `*` (e.g. `orders-*`).
    #[arg(long)]
    pub topic: String,
    /// Comma-separated operations: create, lease, produce, consume, admin; or `all`.
    #[arg(long)]
    pub ops: String,
    /// Where the ACLs live.
    #[command(flatten)]
    pub target: SecurityTarget,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

impl AclArgs {
    /// Whether `--json` was given.
    pub fn json(&self) -> bool {
        match &self.command {
            AclCommand::Add(change) | AclCommand::Remove(change) => change.json,
            AclCommand::List { json, .. } => *json,
        }
    }
}

/// `fencelog acl` subcommands.
#[derive(Debug, Subcommand)]
pub enum AclCommand {
    /// Grant operations on topics to a user.
    #[command(after_help = "Examples:
  fencelog acl add --principal alice --topic 'orders-*' --ops produce,lease --data-dir DIR
  fencelog acl add --principal reporting --topic '*' --ops consume --etcd http://127.0.0.1:2379")]
    Add(AclChange),
    /// Take operations on topics away from a user.
    #[command(after_help = "Examples:
  fencelog acl remove --principal alice --topic 'orders-*' --ops lease --data-dir DIR")]
    Remove(AclChange),
    /// List every grant.
    #[command(after_help = "Examples:
  fencelog acl list --data-dir DIR --json")]
    List {
        /// Where the ACLs live.
        #[command(flatten)]
        target: SecurityTarget,
        /// One JSON object per grant.
        #[arg(long)]
        json: bool,
    },
}

/// A grant as printed with `--json`; `acl add` and `acl remove` add the change made
/// (`added`, `removed`) in the `action` field every changing command prints.
#[derive(Debug, Serialize)]
struct Printed<'a> {
    principal: &'a str,
    topic: &'a str,
    ops: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<&'static str>,
}

fn printed(entry: &AclEntry) -> (Printed<'_>, String) {
    let ops: Vec<&'static str> = entry.operations.iter().map(|op| op.name()).collect();
    let plain = format!(
        "{} {} {}",
        entry.principal,
        entry.topic.as_str(),
        ops.join(",")
    );
    (
        Printed {
            principal: &entry.principal,
            topic: entry.topic.as_str(),
            ops,
            action: None,
        },
        plain,
    )
}

/// Runs a `fencelog acl` command.
pub fn run(args: AclArgs) -> Result<(), CliError> {
    match args.command {
        AclCommand::Add(mut change) => {
            change.target.json = change.json;
            let (pattern, operations) = parse(&change)?;
            let entry = change
                .target
                .add_acl(&change.principal, &pattern, &operations)?;
            let (mut json, plain) = printed(&entry);
            json.action = Some("added");
            let mut out = Output::new(change.json);
            conclude(out.emit(&json, plain).and_then(|()| out.flush()))
        }
        AclCommand::Remove(mut change) => {
            change.target.json = change.json;
            let (pattern, operations) = parse(&change)?;
            let changed = change
                .target
                .remove_acl(&change.principal, &pattern, &operations)?;
            if !changed {
                return Err(CliError::with_code(
                    codes::NO_SUCH_GRANT,
                    format!(
                        "no such grant: {} has none of {} on {}: `fencelog acl list` shows the grants",
                        change.principal,
                        change.ops,
                        pattern.as_str()
                    ),
                )
                .detail("principal", &change.principal)
                .detail("topic", pattern.as_str())
                .detail("ops", &change.ops));
            }
            let mut out = Output::new(change.json);
            let removed = Printed {
                principal: &change.principal,
                topic: pattern.as_str(),
                ops: operations.iter().map(|op| op.name()).collect(),
                action: Some("removed"),
            };
            let plain = format!(
                "removed {} from {} on {}",
                change.ops,
                change.principal,
                pattern.as_str()
            );
            conclude(out.emit(&removed, plain).and_then(|()| out.flush()))
        }
        AclCommand::List { target, json } => {
            let target = target.with_json(json);
            let entries = target.list_acls()?;
            let mut out = Output::new(json);
            conclude(
                entries
                    .iter()
                    .try_for_each(|entry| {
                        let (json, plain) = printed(entry);
                        out.emit(&json, plain)
                    })
                    .and_then(|()| out.flush()),
            )
        }
    }
}

fn parse(
    change: &AclChange,
) -> Result<
    (
        TopicPattern,
        std::collections::BTreeSet<crate::auth::Operation>,
    ),
    CliError,
> {
    crate::auth::users::validate_user_name(&change.principal)
        .map_err(|error| CliError::invalid_argument(error.to_string()))?;
    let pattern = TopicPattern::parse(&change.topic).map_err(CliError::invalid_argument)?;
    let operations = parse_operations(&change.ops).map_err(CliError::invalid_argument)?;
    Ok((pattern, operations))
}
