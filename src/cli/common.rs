//! What the client commands share: the `--addr` / `--json` / `--tls*` flags, the runtime, the
//! connection, output to stdout (plain or one JSON object per line), and the mapping of client
//! errors to exit statuses.

use std::fmt::Display;
use std::io::{BufWriter, Stdout, Write};
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use super::address::{check_host_port_list, AddressKind};
use super::error::codes;
use super::CliError;
use crate::client::{Client, ClientBuilder, ClientError};
use crate::server::DEFAULT_LISTEN;

/// Flags every client command takes.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// Server address, host:port; several, comma-separated, to fail over between them.
    #[arg(long, env = "FENCELOG_ADDR", default_value = DEFAULT_LISTEN)]
    pub addr: String,
    /// Print results as JSON, one object per line.
    #[arg(long)]
    pub json: bool,
    /// TLS to the server.
    #[command(flatten)]
    pub tls: super::tls::ClientTlsArgs,
    /// User to authenticate as (servers started with `--auth`); the password comes from
    /// FENCELOG_PASSWORD or --password-file.
    #[arg(long, env = "FENCELOG_USER")]
    pub user: Option<String>,
    /// File whose first line is the password (instead of FENCELOG_PASSWORD).
    #[arg(long, requires = "user")]
    pub password_file: Option<std::path::PathBuf>,
    /// Time allowed to open a connection to one address before the next is tried, e.g. `3s`
    /// (default 3s).
    #[arg(long, value_parser = parse_duration)]
    pub connect_timeout: Option<Duration>,
    /// Time a server may take to answer a quick request (metadata, versions, offsets) before
    /// it is taken for frozen and the request goes to the next address, e.g. `1s` (default 1s).
    #[arg(long, value_parser = parse_duration)]
    pub attempt_timeout: Option<Duration>,
}

/// Environment variable holding a password (for `--user` and `fencelog user add`).
pub const PASSWORD_ENV: &str = "FENCELOG_PASSWORD";

/// The password from `--password-file` (its first line) or FENCELOG_PASSWORD; an empty one is
/// refused.
pub fn read_password(password_file: Option<&std::path::Path>) -> Result<String, CliError> {
    read_secret(password_file, "--password-file", PASSWORD_ENV)
}

/// A password from `file` (its first line; the flag that named it is `file_flag`) or else the
/// environment variable `env`; an empty one is refused. Every message names both sources.
pub fn read_secret(
    file: Option<&std::path::Path>,
    file_flag: &str,
    env: &str,
) -> Result<String, CliError> {
    let password = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|error| {
                CliError::io(format!("read password file {}: {error}", path.display()))
            })?;
            text.lines().next().unwrap_or_default().to_owned()
        }
        None => std::env::var(env).map_err(|_| {
            CliError::with_code(
                codes::NO_PASSWORD,
                format!("no password: set {env} or give {file_flag} FILE"),
            )
        })?,
    };
    if password.is_empty() {
        return Err(CliError::with_code(
            codes::NO_PASSWORD,
            format!("the password is empty: set {env} or give {file_flag} FILE"),
        ));
    }
    Ok(password)
}

/// Why a command stopped early.
#[derive(Debug)]
pub enum Failure {
    /// A real error: its exit status and message.
    Cli(CliError),
    /// Stdout was closed by the reader (`fencelog consume ... | head`): not an error, stop
    /// quietly.
    BrokenPipe,
}

impl From<CliError> for Failure {
    fn from(error: CliError) -> Self {
        Failure::Cli(error)
    }
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        Failure::Cli(client_error(error))
    }
}

/// The CLI error for a client error: exit status 3 when the write was fenced, 1 otherwise; the
/// message on one line; its code and details for `--json` (see [`super::error`]).
pub fn client_error(error: ClientError) -> CliError {
    super::error::from_client(error)
}

/// Collapses any line breaks (say, in a server message) so errors stay one line.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Ends a command: a closed stdout is a normal end.
pub fn conclude(result: Result<(), Failure>) -> Result<(), CliError> {
    match result {
        Ok(()) | Err(Failure::BrokenPipe) => Ok(()),
        Err(Failure::Cli(error)) => Err(error),
    }
}

/// Runs a client command on its own current-thread runtime.
pub fn block_on<F>(command: F) -> Result<(), CliError>
where
    F: std::future::Future<Output = Result<(), Failure>>,
{
    super::init_tracing("off");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| CliError::io(format!("start runtime: {error}")))?;
    conclude(runtime.block_on(command))
}

/// Connects to `--addr` (a comma-separated list: the first that accepts; reconnects go to any).
/// A malformed `--addr` (or FENCELOG_ADDR) is refused first, saying what the address should
/// look like.
pub async fn connect(args: &ClientArgs) -> Result<Client, Failure> {
    connect_builder(args, client_builder(args)?).await
}

/// The client `--addr`, the TLS flags, `--user` and the timeout flags describe, not connected
/// yet (a command that needs other settings changes them before [`connect_builder`]).
pub fn client_builder(args: &ClientArgs) -> Result<ClientBuilder, Failure> {
    check_host_port_list("--addr", &args.addr, AddressKind::Native)?;
    let mut builder = args.tls.apply(Client::builder().addr_list(&args.addr))?;
    if let Some(user) = &args.user {
        let password = read_password(args.password_file.as_deref())?;
        builder = builder.credentials(user, password);
    }
    if let Some(timeout) = args.connect_timeout {
        builder = builder.connect_timeout(timeout);
    }
    if let Some(timeout) = args.attempt_timeout {
        builder = builder.attempt_timeout(timeout);
    }
    Ok(builder)
}

/// Connects `builder` (from [`client_builder`]); an address that does not resolve is named.
pub async fn connect_builder(args: &ClientArgs, builder: ClientBuilder) -> Result<Client, Failure> {
    builder.connect().await.map_err(|error| match error {
        ClientError::Resolve { source } => Failure::Cli(
            CliError::with_code(
                codes::CANNOT_RESOLVE,
                one_line(&format!("cannot resolve address {:?}: {source}", args.addr)),
            )
            .detail("addr", &args.addr),
        ),
        other => other.into(),
    })
}

/// Parses a duration such as `30s`, `250ms`, `7d` or `1h 30m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|error| format!("{error} (examples: 30s, 250ms, 7d)"))
}

/// Formats a duration the way [`parse_duration`] reads it.
pub fn format_duration(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

/// Stdout, buffered, printing each result as a plain line or a JSON object.
pub struct Output {
    json: bool,
    out: BufWriter<Stdout>,
}

impl Output {
    /// Output in JSON if `json`, else plain lines.
    pub fn new(json: bool) -> Self {
        Self {
            json,
            out: BufWriter::new(std::io::stdout()),
        }
    }

    /// Whether results are printed as JSON.
    pub fn json(&self) -> bool {
        self.json
    }

    /// Prints one result: `value` as a JSON object, or `plain` as a line.
    pub fn emit<T: Serialize>(&mut self, value: &T, plain: impl Display) -> Result<(), Failure> {
        let written = if self.json {
            let line = serde_json::to_string(value)
                .map_err(|error| CliError::new(format!("encode JSON: {error}")))?;
            writeln!(self.out, "{line}")
        } else {
            writeln!(self.out, "{plain}")
        };
        written.map_err(write_failure)
    }

    /// Prints a plain line (whatever the format).
    pub fn line(&mut self, text: impl Display) -> Result<(), Failure> {
        writeln!(self.out, "{text}").map_err(write_failure)
    }

    /// Pushes buffered output to stdout.
    pub fn flush(&mut self) -> Result<(), Failure> {
        self.out.flush().map_err(write_failure)
    }
}

fn write_failure(error: std::io::Error) -> Failure {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        Failure::BrokenPipe
    } else {
        Failure::Cli(CliError::io(format!("write to stdout: {error}")))
    }
}
