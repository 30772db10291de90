//! [`ClientConfig`]: a client's limits, timeouts and reconnect backoff, with their defaults and
//! the check that they make sense.
//!
//! Kept apart from [`Client`](super::Client) so the values a caller can tune, and what they
//! default to, read in one place; the builder and the connection code only consume them.

use std::time::Duration;

use tokio::sync::Semaphore;

use super::{Credentials, TlsClientConfig};
use crate::domain::{ConfigError, Quantity};
use crate::protocol::DEFAULT_MAX_FRAME_BYTES;

/// Default most requests in flight on one connection.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;
/// Default time allowed to establish the TCP connection: a loopback or LAN connect takes
/// microseconds or is refused at once, so a few seconds only wait out a lost SYN or two before
/// the next address is tried.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Default time allowed for a request, from queueing to response, every attempt included.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time a server may take to answer a request it answers from memory (`ApiVersions`,
/// `Metadata`, `ListOffsets`, `InitProducerId`, an authentication step) before its connection is
/// taken for dead (a frozen or overloaded server) and the request, safe to repeat, goes to the
/// next address. Well below the request timeout, so one frozen broker costs a command about a
/// second, not its whole budget.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
/// Extra time a fetch is allowed beyond its `max_wait`.
pub const DEFAULT_FETCH_SLACK: Duration = Duration::from_secs(5);
/// Default pause after the first failed reconnect attempt (then doubled, with jitter).
pub const DEFAULT_RECONNECT_BACKOFF_INITIAL: Duration = Duration::from_millis(50);
/// Default longest pause between reconnect attempts.
pub const DEFAULT_RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Default most time one call spends reconnecting before it fails with the last connect error.
pub const DEFAULT_RECONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Limits and timeouts of a [`Client`](super::Client).
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Time allowed to establish the TCP connection (per resolved address), and as much again
    /// for the TLS handshake when [`tls`](Self::tls) is set. A connection that does not open in
    /// time counts as a failed attempt: the next address is tried.
    pub connect_timeout: Duration,
    /// Time allowed for a request, from queueing to its response, every attempt included.
    pub request_timeout: Duration,
    /// Time a server may take to answer a request it answers promptly (`ApiVersions`,
    /// `Metadata`, `ListOffsets`, `InitProducerId`, authentication) once that request is the
    /// oldest unanswered on its connection. Past it the connection is failed as unresponsive
    /// (the server is frozen or overloaded): every request on it fails as a transport failure,
    /// and those safe to repeat go again on a new connection, to the next address. Requests
    /// the server may hold on purpose are not bound by it: a fetch is allowed its `max_wait`
    /// plus [`fetch_slack`](Self::fetch_slack); a produce, topic creation or lease grant, which
    /// wait for disks and replicas, only the request timeout.
    pub attempt_timeout: Duration,
    /// A fetch is allowed `max(request_timeout, max_wait + fetch_slack)`.
    pub fetch_slack: Duration,
    /// Most requests in flight on the connection; more callers wait for a slot.
    pub max_in_flight: usize,
    /// Largest frame sent or accepted; at least the server's limit.
    pub max_frame_bytes: usize,
    /// Pause after the first failed reconnect attempt; doubled after each further failure.
    pub reconnect_backoff_initial: Duration,
    /// Longest pause between reconnect attempts.
    pub reconnect_backoff_max: Duration,
    /// Most time one call spends reconnecting before it fails with the last connect error.
    pub reconnect_timeout: Duration,
    /// TLS with every server connected to when set (the handshake is part of connecting, within
    /// `connect_timeout`); plain TCP otherwise.
    pub tls: Option<TlsClientConfig>,
    /// User name and password for servers with `--auth`: the client authenticates (SCRAM-SHA-256)
    /// on every new connection before using it. `None` connects without authenticating.
    pub credentials: Option<Credentials>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
            fetch_slack: DEFAULT_FETCH_SLACK,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            reconnect_backoff_initial: DEFAULT_RECONNECT_BACKOFF_INITIAL,
            reconnect_backoff_max: DEFAULT_RECONNECT_BACKOFF_MAX,
            reconnect_timeout: DEFAULT_RECONNECT_TIMEOUT,
            tls: None,
            credentials: None,
        }
    }
}

impl ClientConfig {
    /// Checks the values: at most a semaphore's permits in flight (0 is taken as 1), at least one
    /// byte per frame, positive timeouts, a positive initial reconnect backoff and a cap at least as long.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = |field, value| ConfigError::check_positive(field, Quantity::duration(value));
        positive("connect_timeout", self.connect_timeout)?;
        positive("request_timeout", self.request_timeout)?;
        positive("attempt_timeout", self.attempt_timeout)?;
        ConfigError::check_range(
            "max_in_flight",
            Quantity::count(self.max_in_flight),
            Quantity::Count(0),
            Quantity::count(Semaphore::MAX_PERMITS),
        )?;
        ConfigError::check_range(
            "max_frame_bytes",
            Quantity::bytes(self.max_frame_bytes),
            Quantity::Bytes(1),
            Quantity::Bytes(u64::from(u32::MAX)),
        )?;
        positive("reconnect_backoff_initial", self.reconnect_backoff_initial)?;
        ConfigError::check_at_most(
            "reconnect_backoff_initial",
            Quantity::duration(self.reconnect_backoff_initial),
            "reconnect_backoff_max",
            Quantity::duration(self.reconnect_backoff_max),
        )
    }
}
