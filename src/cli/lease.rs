//! `fencelog lease acquire|renew|release`: manage a partition's write lease by hand.
//!
//! A lease acquired here is not renewed automatically: renew it before its TTL runs out, or let
//! it expire. Its epoch is what `fencelog produce --epoch` writes under.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde::Serialize;

use super::common::{self, ClientArgs, Failure, Output};
use super::CliError;
use crate::client::{format_lease_id, parse_lease_id};

/// Arguments of `fencelog lease`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fencelog lease acquire orders 0 --holder svc-a --ttl 10s
  fencelog lease renew orders 0 --lease-id 2261bdf9e6a18ccd6e4487aaa85813e7
  fencelog lease release orders 0 --lease-id 2261bdf9e6a18ccd6e4487aaa85813e7")]
pub struct LeaseArgs {
    /// What to do with the lease.
    #[command(subcommand)]
    pub command: LeaseCommand,
}

impl LeaseArgs {
    /// Whether `--json` was given.
    pub fn json(&self) -> bool {
        match &self.command {
            LeaseCommand::Acquire(args) => args.client.json,
            LeaseCommand::Renew(args) | LeaseCommand::Release(args) => args.client.json,
        }
    }
}

/// Lease subcommands.
#[derive(Debug, Subcommand)]
pub enum LeaseCommand {
    /// Become the writer of a partition: get a new epoch and a lease id.
    ///
    /// Prints `epoch E lease_id HEX ttl_ms T` (with --json: {"topic", "partition", "action":
    /// "acquired", "holder", "epoch", "lease_id", "ttl_ms"}, the lease id as a 32-digit
    /// lowercase hex string). Fails while another live lease exists (LEASE_HELD, naming the
    /// holder). The lease is not renewed automatically.
    Acquire(AcquireArgs),
    /// Extend a live lease by its TTL.
    #[command(after_help = "Examples:
  fencelog lease renew orders 0 --lease-id 2261bdf9e6a18ccd6e4487aaa85813e7")]
    ///
    /// Prints `epoch E ttl_ms T` (with --json: {"topic", "partition", "action": "renewed",
    /// "epoch", "ttl_ms"}).
    Renew(LeaseIdArgs),
    /// Give a lease up at once so another writer can acquire the partition.
    #[command(after_help = "Examples:
  fencelog lease release orders 0 --lease-id 2261bdf9e6a18ccd6e4487aaa85813e7")]
    ///
    /// Prints `released TOPIC/PARTITION` (with --json: {"topic", "partition", "action":
    /// "released", "released": true}).
    Release(LeaseIdArgs),
}

/// Arguments of `fencelog lease acquire`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fencelog lease acquire orders 0 --holder svc-a --ttl 10s
  EPOCH=$(fencelog lease acquire orders 0 --json | jq .epoch)")]
pub struct AcquireArgs {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// Who is writing (shown to others in "lease held" errors).
    #[arg(long, default_value = "fencelog-cli")]
    pub holder: String,
    /// Lease duration, e.g. `10s`, `2m`.
    #[arg(long, default_value = "30s", value_parser = common::parse_duration)]
    pub ttl: Duration,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// Arguments of `fencelog lease renew` and `fencelog lease release`.
#[derive(Debug, Args)]
pub struct LeaseIdArgs {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// The lease id printed by `lease acquire` (32 hex digits).
    #[arg(long, value_parser = parse_id)]
    pub lease_id: u128,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

fn parse_id(text: &str) -> Result<u128, String> {
    parse_lease_id(text)
        .map_err(|_| "expected the 32 hex digits printed by `lease acquire`".to_owned())
}

/// What `lease acquire --json` prints: the fields issue 3 promised (`epoch`, `lease_id`,
/// `ttl_ms`) and, as every command, the partition and the `action`.
#[derive(Serialize)]
struct AcquiredJson<'a> {
    topic: &'a str,
    partition: u32,
    action: &'static str,
    holder: &'a str,
    epoch: u64,
    lease_id: String,
    ttl_ms: u64,
}

#[derive(Serialize)]
struct RenewedJson<'a> {
    topic: &'a str,
    partition: u32,
    action: &'static str,
    epoch: u64,
    ttl_ms: u64,
}

/// `released: true` is the older field, kept for scripts; `action` is every command's.
#[derive(Serialize)]
struct ReleasedJson<'a> {
    topic: &'a str,
    partition: u32,
    action: &'static str,
    released: bool,
}

/// Runs `fencelog lease ...`.
pub fn run(args: LeaseArgs) -> Result<(), CliError> {
    match args.command {
        LeaseCommand::Acquire(args) => common::block_on(acquire(args)),
        LeaseCommand::Renew(args) => common::block_on(renew(args)),
        LeaseCommand::Release(args) => common::block_on(release(args)),
    }
}

async fn acquire(args: AcquireArgs) -> Result<(), Failure> {
    let client = common::connect(&args.client).await?;
    let lease = client
        .acquire_lease(&args.topic, args.partition, &args.holder, args.ttl)
        .await?;
    let json = AcquiredJson {
        topic: &args.topic,
        partition: args.partition,
        action: "acquired",
        holder: &args.holder,
        epoch: lease.epoch,
        lease_id: format_lease_id(lease.lease_id),
        ttl_ms: lease.ttl_ms,
    };
    let mut out = Output::new(args.client.json);
    out.emit(
        &json,
        format_args!(
            "epoch {} lease_id {} ttl_ms {}",
            json.epoch, json.lease_id, json.ttl_ms
        ),
    )?;
    out.flush()
}

async fn renew(args: LeaseIdArgs) -> Result<(), Failure> {
    let client = common::connect(&args.client).await?;
    let renewed = client
        .renew_lease(&args.topic, args.partition, args.lease_id)
        .await?;
    let mut out = Output::new(args.client.json);
    out.emit(
        &RenewedJson {
            topic: &args.topic,
            partition: args.partition,
            action: "renewed",
            epoch: renewed.epoch,
            ttl_ms: renewed.ttl_ms,
        },
        format_args!("epoch {} ttl_ms {}", renewed.epoch, renewed.ttl_ms),
    )?;
    out.flush()
}

async fn release(args: LeaseIdArgs) -> Result<(), Failure> {
    let client = common::connect(&args.client).await?;
    client
        .release_lease(&args.topic, args.partition, args.lease_id)
        .await?;
    let mut out = Output::new(args.client.json);
    out.emit(
        &ReleasedJson {
            topic: &args.topic,
            partition: args.partition,
            action: "released",
            released: true,
        },
        format_args!("released {}/{}", args.topic, args.partition),
    )?;
    out.flush()
}
