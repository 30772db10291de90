//! The `fencelog` command line: one file per subcommand; `main.rs` only parses and dispatches.
//!
//! Exit statuses are a contract: 0 on success, 3 when a write was rejected as fenced, 1 for any
//! other error (printed as one line on stderr).

pub mod acl;
pub mod address;
pub mod bench;
pub mod cluster;
pub mod common;
pub mod consume;
pub mod demo;
pub mod lease;
pub mod logging;
pub mod produce;
pub mod security_target;
pub mod serve;
pub mod tls;
pub mod topic;
pub mod user;

use clap::{Parser, Subcommand};

/// Exit status for success.
pub const EXIT_OK: i32 = 0;
/// Exit status for any error other than fencing.
pub const EXIT_ERROR: i32 = 1;
/// Exit status when a write was rejected because its epoch is stale.
pub const EXIT_FENCED: i32 = 3;
/// Exit status when whether a write landed is unknown (`fencelog produce`: a line may or may
/// not be in the log; read the partition before writing it again).
pub const EXIT_OUTCOME_UNKNOWN: i32 = 4;

/// fencelog: an append-only log server whose partitions are guarded by leases and fencing tokens.
#[derive(Debug, Parser)]
#[command(name = "fencelog", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Log line format on stderr: `text` for people, `json` (one object per line) for log
    /// shippers.
    #[arg(long, global = true, env = "FENCELOG_LOG_FORMAT", value_enum, default_value_t = logging::LogFormat::Text)]
    pub log_format: logging::LogFormat,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server.
    Serve(serve::ServeArgs),
    /// Manage topics: create, list, describe, alter, add-partitions, delete, delete-records.
    Topic(topic::TopicArgs),
    /// Acquire, renew and release a partition's write lease.
    Lease(lease::LeaseArgs),
    /// Append stdin lines to a partition, one record per line, under a fencing epoch.
    Produce(produce::ProduceArgs),
    /// Print a partition's records, one per line.
    Consume(consume::ConsumeArgs),
    /// Show a paused lease holder being fenced, against a real server.
    Demo(demo::DemoArgs),
    /// Measure throughput and latency (produce, consume, both, lease failover).
    Bench(bench::BenchArgs),
    /// Add, remove and list the users a server with `--auth` accepts (SCRAM-SHA-256).
    User(user::UserArgs),
    /// Grant, revoke and list what each user may do on which topics.
    Acl(acl::AclArgs),
    /// Show the cluster: brokers, and each partition's leader, replicas and ISR.
    Cluster(cluster::ClusterArgs),
}

/// An error of a CLI command: its exit status and a one-line message.
#[derive(Debug)]
pub struct CliError {
    /// Exit status.
    pub status: i32,
    /// The line printed on stderr.
    pub message: String,
}

impl CliError {
    /// A plain error (exit status 1).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            status: EXIT_ERROR,
            message: message.into(),
        }
    }
}

/// Runs a parsed command line and returns the exit status.
pub fn run(cli: Cli) -> i32 {
    logging::choose_format(cli.log_format);
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Topic(args) => topic::run(args),
        Command::Lease(args) => lease::run(args),
        Command::Produce(args) => produce::run(args),
        Command::Consume(args) => consume::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Bench(args) => bench::run(args),
        Command::User(args) => user::run(args),
        Command::Acl(args) => acl::run(args),
        Command::Cluster(args) => cluster::run(args),
    };
    match result {
        Ok(()) => EXIT_OK,
        Err(error) => {
            eprintln!("error: {}", error.message);
            error.status
        }
    }
}

/// Sets up tracing to stderr in the `--log-format` chosen (colour only for a terminal, see
/// [`logging`]): `RUST_LOG` if set, else `default_filter`.
pub fn init_tracing(default_filter: &str) {
    logging::init(default_filter);
}
