//! [`CliError`], the error of every command, and how it is printed: one `error: MESSAGE` line
//! on stderr, or with `--json` one JSON object on stderr,
//! `{"error": {"code": "...", "message": "...", <details>}}`.
//!
//! Why stderr under `--json` too: stdout carries the results and nothing else (one object per
//! result, so `fencelog produce --json | jq .offset` never meets an error object), stderr
//! carries what is said about the run (the error, `produce`'s resend summary, warnings), each
//! line one JSON object under `--json`. The exit status says which of the two happened.
//!
//! Why a `code` as well as the message: scripts branch on the code (`TOPIC_EXISTS`, `FENCED`,
//! `LEASE_HELD`, ...), never on wording, and the details carry the values the message names
//! (epochs, the lease holder, the offset range) so nobody has to parse them out of the text.
//! A server's refusal keeps the server's code ([`ErrorCode`]'s name); failures the command
//! finds itself have the codes in [`codes`].

use serde::Serialize;
use serde_json::{Map, Value};

use super::{EXIT_ERROR, EXIT_FENCED};
use crate::client::ClientError;
use crate::protocol::ErrorCode;

/// The codes of failures a command finds itself, before or without a server's answer (a
/// server's refusal has the server's code, e.g. `TOPIC_EXISTS`).
pub mod codes {
    /// Any other failure; the message says what.
    pub const ERROR: &str = "ERROR";
    /// A flag or argument is malformed, missing or out of range (clap's usage errors too).
    pub const INVALID_ARGUMENT: &str = "INVALID_ARGUMENT";
    /// No password (or an empty one) for `--user` or `user add`.
    pub const NO_PASSWORD: &str = "NO_PASSWORD";
    /// A file, stdin or stdout could not be read or written.
    pub const IO_ERROR: &str = "IO_ERROR";
    /// `--addr` does not resolve.
    pub const CANNOT_RESOLVE: &str = "CANNOT_RESOLVE";
    /// No connection could be made to any address of `--addr`.
    pub const CANNOT_CONNECT: &str = "CANNOT_CONNECT";
    /// An established connection failed (reset, closed, or the bytes did not follow the
    /// protocol: often the wrong port).
    pub const CONNECTION_ERROR: &str = "CONNECTION_ERROR";
    /// No answer in time.
    pub const TIMEOUT: &str = "TIMEOUT";
    /// TLS could not be set up (a flag's file) or failed with the server.
    pub const TLS_ERROR: &str = "TLS_ERROR";
    /// A fetched batch failed its integrity check on the client.
    pub const CORRUPT_BATCH: &str = "CORRUPT_BATCH";
    /// A produce was sent and no answer came: it may or may not have been appended.
    pub const OUTCOME_UNKNOWN: &str = "OUTCOME_UNKNOWN";
    /// A lease could not be renewed for a whole TTL: it may have expired.
    pub const LEASE_EXPIRED: &str = "LEASE_EXPIRED";
    /// `user remove` of a user that does not exist.
    pub const UNKNOWN_USER: &str = "UNKNOWN_USER";
    /// `acl remove` of operations the principal was not granted.
    pub const NO_SUCH_GRANT: &str = "NO_SUCH_GRANT";
    /// `--data-dir` names a directory that is not a fencelog data directory.
    pub const NOT_A_DATA_DIRECTORY: &str = "NOT_A_DATA_DIRECTORY";
    /// The users and ACLs could not be read or changed (a damaged file, etcd unreachable).
    pub const SECURITY_STORE_ERROR: &str = "SECURITY_STORE_ERROR";
    /// `fencelog demo`'s story did not end as fencing promises.
    pub const DEMO_FAILED: &str = "DEMO_FAILED";
}

/// An error of a CLI command: its exit status, its code, a one-line message saying what to do,
/// and the values the message names, as JSON fields.
#[derive(Debug, Clone)]
pub struct CliError {
    /// Exit status.
    pub status: i32,
    /// The line printed on stderr (after `error: `), or `error.message` with `--json`.
    pub message: String,
    /// The machine-readable code: a server's [`ErrorCode`] name or one of [`codes`].
    pub code: String,
    /// Fields of `error` with `--json` besides `code` and `message` (epochs, holder, line, ...).
    pub details: Map<String, Value>,
}

impl CliError {
    /// A plain error (exit status 1, code `ERROR`).
    pub fn new(message: impl Into<String>) -> Self {
        Self::with_code(codes::ERROR, message)
    }

    /// An error with exit status 1 and `code`.
    pub fn with_code(code: &str, message: impl Into<String>) -> Self {
        Self {
            status: EXIT_ERROR,
            message: message.into(),
            code: code.to_owned(),
            details: Map::new(),
        }
    }

    /// An invalid flag or argument (code `INVALID_ARGUMENT`).
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::with_code(codes::INVALID_ARGUMENT, message)
    }

    /// A file, stdin or stdout that failed (code `IO_ERROR`).
    pub fn io(message: impl Into<String>) -> Self {
        Self::with_code(codes::IO_ERROR, message)
    }

    /// The same error with one more JSON field (`code` and `message` are taken).
    pub fn detail(mut self, key: &str, value: impl Serialize) -> Self {
        if key != "code" && key != "message" {
            let value = serde_json::to_value(value).unwrap_or(Value::Null);
            self.details.insert(key.to_owned(), value);
        }
        self
    }

    /// The object printed with `--json`: `{"error": {"code", "message", <details>}}`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(Keyed {
            error: Some(self.body()),
            warning: None,
        })
        .unwrap_or(Value::Null)
    }

    /// The line printed on stderr: `error: MESSAGE`, or the JSON object.
    pub fn render(&self, json: bool) -> String {
        if json {
            // Serialized from the struct, not the `Value`: `code` and `message` come first.
            let keyed = Keyed {
                error: Some(self.body()),
                warning: None,
            };
            serde_json::to_string(&keyed).unwrap_or_default()
        } else {
            format!("error: {}", self.message)
        }
    }

    fn body(&self) -> Body<'_> {
        Body {
            code: &self.code,
            message: &self.message,
            details: &self.details,
        }
    }
}

/// `{"error": ...}` or `{"warning": ...}`.
#[derive(Serialize)]
struct Keyed<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<Body<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warning: Option<Body<'a>>,
}

/// What `error` (or `warning`) holds: the code, the message, then the details.
#[derive(Serialize)]
struct Body<'a> {
    code: &'a str,
    message: &'a str,
    #[serde(flatten)]
    details: &'a Map<String, Value>,
}

/// A warning or note said on stderr while a command goes on: `PREFIX: MESSAGE` (`warning`,
/// `note`), or with `--json` `{"warning": {"code", "message", <details>}}`.
pub fn warn(json: bool, prefix: &str, warning: &CliError) {
    eprintln!("{}", render_warning(json, prefix, warning));
}

fn render_warning(json: bool, prefix: &str, warning: &CliError) -> String {
    if json {
        let keyed = Keyed {
            error: None,
            warning: Some(warning.body()),
        };
        serde_json::to_string(&keyed).unwrap_or_default()
    } else {
        format!("{prefix}: {}", warning.message)
    }
}

/// The CLI error for a client error: exit status 3 when the write was fenced, 1 otherwise; the
/// message on one line; the code and details of the error.
pub fn from_client(error: ClientError) -> CliError {
    let status = if error.is_fenced() {
        EXIT_FENCED
    } else {
        EXIT_ERROR
    };
    let code = client_code(&error);
    let message = super::common::one_line(&error.to_string());
    let mut cli = if code == ErrorCode::AuthenticationRequired.to_string() {
        // The server's words are for protocol implementers (which requests to send); a user of
        // the CLI needs to know which settings to give. A client with credentials authenticates
        // as it connects, so this answer means none were given.
        CliError::with_code(&code, NO_CREDENTIALS_HINT).detail("server_message", message)
    } else {
        CliError::with_code(&code, message)
    };
    cli.status = status;
    add_client_details(cli, &error)
}

/// What a command without credentials is told by a server started with `--auth`.
pub const NO_CREDENTIALS_HINT: &str = "this server requires authentication (it runs with --auth) and no credentials were given: set FENCELOG_USER and FENCELOG_PASSWORD (or --user, --password-file)";

/// The code of a client error: the server's code when it answered one, else the client's.
fn client_code(error: &ClientError) -> String {
    if let Some(code) = error.code() {
        return code.to_string();
    }
    match error {
        ClientError::AuthenticationFailed { message } => authentication_code(message).to_string(),
        ClientError::OutcomeUnknown { .. } => codes::OUTCOME_UNKNOWN.to_owned(),
        ClientError::ProducerHalted { cause } => client_code(cause),
        ClientError::Resolve { .. } => codes::CANNOT_RESOLVE.to_owned(),
        ClientError::Connect { .. } => codes::CANNOT_CONNECT.to_owned(),
        ClientError::Io(_) | ClientError::Disconnected | ClientError::Protocol(_) => {
            codes::CONNECTION_ERROR.to_owned()
        }
        ClientError::Timeout { .. } => codes::TIMEOUT.to_owned(),
        ClientError::Tls { .. } => codes::TLS_ERROR.to_owned(),
        ClientError::CorruptBatch(_) => codes::CORRUPT_BATCH.to_owned(),
        ClientError::LeaseExpired { .. } => codes::LEASE_EXPIRED.to_owned(),
        ClientError::InvalidArgument(_) => codes::INVALID_ARGUMENT.to_owned(),
        _ => codes::ERROR.to_owned(),
    }
}

/// Which of the two authentication codes a client's authentication error carries: the client
/// keeps the server's code as the message's prefix (`AUTHENTICATION_REQUIRED: ...`); a
/// failure of the client's own SCRAM checks is `AUTHENTICATION_FAILED`.
pub fn authentication_code(message: &str) -> ErrorCode {
    let required = ErrorCode::AuthenticationRequired.to_string();
    if message.starts_with(&format!("{required}:")) {
        ErrorCode::AuthenticationRequired
    } else {
        ErrorCode::AuthenticationFailed
    }
}

/// The values a client error names, as JSON fields (under the wire's names for them).
fn add_client_details(cli: CliError, error: &ClientError) -> CliError {
    match error {
        ClientError::Fenced { epoch, current } | ClientError::UnknownEpoch { epoch, current } => {
            cli.detail("epoch", epoch).detail("current_epoch", current)
        }
        ClientError::LeaseLost {
            current_epoch,
            holder,
            expires_in,
        } if !holder.is_empty() => cli
            .detail("current_epoch", current_epoch)
            .detail("holder", holder)
            .detail("expires_in_ms", millis(*expires_in)),
        ClientError::LeaseLost { current_epoch, .. } => cli.detail("current_epoch", current_epoch),
        ClientError::LeaseHeld {
            holder,
            expires_in,
            current_epoch,
            ..
        } => cli
            .detail("holder", holder)
            .detail("expires_in_ms", millis(*expires_in))
            .detail("current_epoch", current_epoch),
        ClientError::OffsetOutOfRange {
            offset,
            earliest,
            latest,
        } => cli
            .detail("offset", offset)
            .detail("earliest", earliest)
            .detail("latest", latest),
        ClientError::NotLeader {
            leader,
            address,
            leader_epoch,
            ..
        } => cli
            .detail("leader", leader)
            .detail("leader_address", address)
            .detail("leader_epoch", leader_epoch),
        ClientError::Connect { addr, .. } | ClientError::Tls { addr, .. } => {
            cli.detail("addr", addr.to_string())
        }
        ClientError::Timeout { after } => cli.detail("timeout_ms", millis(*after)),
        ClientError::OutcomeUnknown { cause } => cli.detail("cause", client_code(cause).as_str()),
        ClientError::ProducerHalted { cause } => add_client_details(cli, cause),
        ClientError::LeaseExpired { unconfirmed_for } => {
            cli.detail("unconfirmed_ms", millis(*unconfirmed_for))
        }
        _ => cli,
    }
}

fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ErrorResponse;

    /// The JSON form is one object whose `error` has the code, the message and the details,
    /// and parses back as JSON whatever the message holds.
    #[test]
    fn the_json_form_is_one_object_with_code_message_and_details() {
        let error = CliError::with_code("TOPIC_EXISTS", "topic \"x\" exists; pick \"another\"")
            .detail("topic", "x")
            .detail("partition", 0);
        let line = error.render(true);
        let parsed: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(parsed["error"]["code"], "TOPIC_EXISTS");
        assert_eq!(parsed["error"]["message"], error.message);
        assert_eq!(parsed["error"]["topic"], "x");
        assert_eq!(parsed["error"]["partition"], 0);
        assert_eq!(parsed, error.to_json());
        assert!(
            line.starts_with(r#"{"error":{"code":"TOPIC_EXISTS","message":"#),
            "{line}"
        );
        assert_eq!(error.render(false), format!("error: {}", error.message));
    }

    /// A fenced write keeps exit status 3 and names both epochs as fields.
    #[test]
    fn a_fenced_client_error_has_its_epochs_and_exit_status_3() {
        let error = from_client(ClientError::Fenced {
            epoch: 1,
            current: 2,
        });
        assert_eq!(error.status, EXIT_FENCED);
        assert_eq!(error.message, "fenced: epoch 1 < current 2");
        let json = error.to_json();
        assert_eq!(json["error"]["code"], "FENCED");
        assert_eq!(json["error"]["epoch"], 1);
        assert_eq!(json["error"]["current_epoch"], 2);
    }

    /// The client keeps AUTHENTICATION_REQUIRED as its message's prefix; the CLI reads the code
    /// back from it (the hint for a client without credentials depends on it).
    #[test]
    fn authentication_required_is_told_apart_from_a_refused_password() {
        for (code, expected) in [
            (ErrorCode::AuthenticationRequired, "AUTHENTICATION_REQUIRED"),
            (ErrorCode::AuthenticationFailed, "AUTHENTICATION_FAILED"),
        ] {
            let error =
                ClientError::from_error_response(ErrorResponse::new(code, "the server's words"));
            let cli = from_client(error);
            assert_eq!(cli.code, expected);
            assert_eq!(
                cli.message.starts_with(NO_CREDENTIALS_HINT),
                code == ErrorCode::AuthenticationRequired,
                "{}",
                cli.message
            );
        }
    }

    /// A warning under `--json` has the shape of an error, under `warning`.
    #[test]
    fn a_warning_renders_like_an_error_under_its_own_key() {
        let warning = CliError::with_code("COMMITTED_OFFSET_GONE", "resuming at 4").detail("x", 1);
        let parsed: Value =
            serde_json::from_str(&render_warning(true, "warning", &warning)).unwrap();
        assert_eq!(parsed["warning"]["code"], "COMMITTED_OFFSET_GONE");
        assert_eq!(parsed["warning"]["message"], "resuming at 4");
        assert_eq!(parsed["warning"]["x"], 1);
        assert_eq!(
            render_warning(false, "warning", &warning),
            "warning: resuming at 4"
        );
    }
}
