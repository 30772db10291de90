//! The `fencelog` command line: one file per subcommand; `main.rs` only parses and dispatches.
//!
//! Exit statuses are a contract: 0 on success, 3 when a write was rejected as fenced, 4 when
//! whether a write landed is unknown, 1 for any other error. An error is one line on stderr:
//! `error: MESSAGE`, or with `--json` one JSON object `{"error": {"code", "message", ...}}`
//! (see [`error`]). docs/cli.md is the reference for users.

pub mod acl;
pub mod address;
pub mod bench;
pub mod cluster;
pub mod common;
pub mod consume;
pub mod demo;
pub mod error;
pub mod lease;
pub mod logging;
pub mod produce;
mod produce_transaction;
pub mod security_target;
pub mod serve;
pub mod test_clock;
pub mod tls;
pub mod topic;
pub mod user;

use clap::{Parser, Subcommand};

pub use error::CliError;

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
#[command(after_help = "Examples:
  fencelog serve
  fencelog topic create orders --partitions 1
  fencelog lease acquire orders 0 --holder a --ttl 30s
  printf 'order 1\\norder 2\\n' | fencelog produce orders --partition 0 --epoch 1
  fencelog consume orders --partition 0 --from 0
  fencelog demo")]
#[command(after_long_help = "\
Every client command takes --addr (or FENCELOG_ADDR) and --json: results as one JSON object per
line on stdout, an error as one JSON object {\"error\":{\"code\",\"message\",...}} on stderr.
Exit status: 0 success, 3 fenced, 4 outcome unknown, 1 any other error. docs/cli.md has the
JSON fields of every command.

Examples:
  fencelog serve
  fencelog topic create orders --partitions 1
  fencelog lease acquire orders 0 --holder a --ttl 30s
  printf 'order 1\\norder 2\\n' | fencelog produce orders --partition 0 --epoch 1
  fencelog consume orders --partition 0 --from 0
  fencelog demo")]
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

impl Command {
    /// Whether `--json` was given: the error, if any, is then printed as JSON too.
    pub fn json(&self) -> bool {
        match self {
            Command::Serve(_) | Command::Demo(_) => false,
            Command::Topic(args) => args.json(),
            Command::Lease(args) => args.json(),
            Command::Produce(args) => args.client.json,
            Command::Consume(args) => args.client.json,
            Command::Bench(args) => args.json,
            Command::User(args) => args.json(),
            Command::Acl(args) => args.json(),
            Command::Cluster(args) => args.json(),
        }
    }
}

/// Runs a parsed command line and returns the exit status.
pub fn run(cli: Cli) -> i32 {
    logging::choose_format(cli.log_format);
    let json = cli.command.json();
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
            eprintln!("{}", error.render(json));
            error.status
        }
    }
}

/// Reports a command line clap refused, or prints the `--help`/`--version` it asked for, and
/// returns the exit status: 0 for help and version, 1 for a usage error (the CLI contract, not
/// clap's 2). With `--json` among the arguments the usage error is one JSON object too, code
/// `INVALID_ARGUMENT`, like every other error.
pub fn report_parse_error(error: &clap::Error) -> i32 {
    if !error.use_stderr() {
        let _ = error.print();
        return EXIT_OK;
    }
    if std::env::args_os().any(|arg| arg == "--json") {
        let error = CliError::invalid_argument(usage_message(&error.render().to_string()));
        eprintln!("{}", error.render(true));
    } else {
        let _ = error.print();
    }
    EXIT_ERROR
}

/// clap's usage error as one line: the error, its tips and the usage line, without the
/// `error: ` prefix and the pointer to `--help`.
fn usage_message(rendered: &str) -> String {
    let parts: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("For more information"))
        .collect();
    let joined = parts.join("; ");
    joined.strip_prefix("error: ").unwrap_or(&joined).to_owned()
}

/// Sets up tracing to stderr in the `--log-format` chosen (colour only for a terminal, see
/// [`logging`]): `RUST_LOG` if set, else `default_filter`.
pub fn init_tracing(default_filter: &str) {
    logging::init(default_filter);
}
