//! Log output on stderr: human text or JSON lines, colour only for a person at a terminal.
//!
//! Colour escapes are for eyes, not files: they are written only when stderr is a terminal and
//! `NO_COLOR` is unset or empty (<https://no-color.org>), so a log redirected to a file or
//! collected by systemd or Docker stays plain text. `--log-format json` (or
//! `FENCELOG_LOG_FORMAT=json`) writes one JSON object per line for log shippers (Loki, Vector,
//! Elasticsearch), with the event's fields as keys.

use std::io::IsTerminal;
use std::sync::OnceLock;

use clap::ValueEnum;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields`, and the span.
    Json,
}

/// The format chosen on the command line, set once before the command runs.
static CHOSEN_FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Remembers the `--log-format` of this process (the first call wins).
pub fn choose_format(format: LogFormat) {
    let _ = CHOSEN_FORMAT.set(format);
}

/// Whether log lines may carry colour escapes: stderr is a terminal and `NO_COLOR` is unset or
/// empty.
pub fn use_colour() -> bool {
    let no_colour = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
    !no_colour && std::io::stderr().is_terminal()
}

/// Sets up tracing to stderr in the chosen format: `RUST_LOG` if set, else `default_filter`.
pub fn init(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second initialization (tests running commands in one process) keeps the first.
    let _ = match CHOSEN_FORMAT.get().copied().unwrap_or_default() {
        LogFormat::Text => builder.with_ansi(use_colour()).try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}
