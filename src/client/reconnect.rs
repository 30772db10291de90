//! The client's one live connection and how it is replaced: the bootstrap addresses, the current
//! [`Connection`], and a reconnect with capped exponential backoff and jitter.
//!
//! Why a connection is replaced lazily, by the next request, and not by a background task: a
//! client that nobody uses should not keep dialling a server that is down, and the caller that
//! needs the connection is the one whose time budget (the request timeout) bounds the attempt.
//! Concurrent callers that find the connection dead queue on one lock, so only one of them dials;
//! the others take the connection it opened, or its error if it gave up while they waited.
//!
//! Backoff: after a failed attempt (every bootstrap address tried once, in turn from the one
//! after the last that worked) the next waits `delay × U(0.5, 1.0)`, and `delay` doubles up to
//! [`ClientConfig::reconnect_backoff_max`]; a success resets it. One call spends at most
//! [`ClientConfig::reconnect_timeout`] (and never beyond its own deadline) reconnecting before it
//! fails with the last connect error. The backoff state outlives the call, so a burst of calls
//! against a server that is down does not dial it in a tight loop.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::connection::Connection;
use super::{ClientConfig, ClientError};

/// The bootstrap addresses, the live connection, and the reconnect state.
pub(crate) struct Endpoint {
    addrs: Vec<String>,
    config: ClientConfig,
    current: Mutex<Current>,
    /// Held by the one caller reconnecting; the others wait on it.
    reconnect: tokio::sync::Mutex<Backoff>,
}

/// The connection requests go to, and the address it reached.
struct Current {
    connection: Arc<Connection>,
}

/// What the reconnect remembers between attempts.
struct Backoff {
    /// Delay before the next attempt after a failure (doubled per failure, capped).
    delay: Duration,
    /// No attempt before this instant (set by a failure).
    not_before: Option<Instant>,
    /// The last failed attempt: when it ended, and why.
    last_failure: Option<(Instant, ClientError)>,
    /// Index of the bootstrap address tried first in the next attempt.
    next_addr: usize,
}

impl Endpoint {
    /// Connects to the first of `addrs` that accepts (each tried once, no backoff): a client
    /// that cannot reach any server at start fails at once rather than after a reconnect budget.
    pub(crate) async fn connect(
        addrs: Vec<String>,
        config: ClientConfig,
    ) -> Result<Endpoint, ClientError> {
        if addrs.is_empty() {
            return Err(ClientError::InvalidArgument(
                "no server address given".to_owned(),
            ));
        }
        let mut next_addr = 0;
        let connection = open_any(&addrs, &config, &mut next_addr).await?;
        Ok(Endpoint {
            addrs,
            current: Mutex::new(Current {
                connection: Arc::new(connection),
            }),
            reconnect: tokio::sync::Mutex::new(Backoff {
                delay: config.reconnect_backoff_initial,
                not_before: None,
                last_failure: None,
                next_addr,
            }),
            config,
        })
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The bootstrap addresses.
    pub(crate) fn addrs(&self) -> &[String] {
        &self.addrs
    }

    /// The address of the current (or last) connection.
    pub(crate) fn peer(&self) -> SocketAddr {
        self.lock().connection.peer()
    }

    fn lock(&self) -> MutexGuard<'_, Current> {
        // Only an `Arc` is swapped under this lock; a panic cannot leave it half-written.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current connection if it has not failed.
    fn usable(&self) -> Option<Arc<Connection>> {
        let current = self.lock();
        (!current.connection.is_failed()).then(|| Arc::clone(&current.connection))
    }

    /// A live connection: the current one, or a new one if it failed. Fails with the last
    /// connect error once reconnecting has taken `reconnect_timeout` or reached `deadline`.
    pub(crate) async fn connection(
        &self,
        deadline: Instant,
    ) -> Result<Arc<Connection>, ClientError> {
        if let Some(connection) = self.usable() {
            return Ok(connection);
        }
        let waiting_since = Instant::now();
        let mut backoff = self.reconnect.lock().await;
        // Another caller may have reconnected, or given up, while this one waited.
        if let Some(connection) = self.usable() {
            return Ok(connection);
        }
        if let Some((ended, error)) = &backoff.last_failure {
            if *ended >= waiting_since {
                return Err(error.clone());
            }
        }
        let give_up = deadline.min(waiting_since + self.config.reconnect_timeout);
        loop {
            if let Some(not_before) = backoff.not_before {
                if not_before > give_up {
                    return Err(backoff.last_error());
                }
                tokio::time::sleep_until(not_before).await;
            }
            let attempt = open_any(&self.addrs, &self.config, &mut backoff.next_addr);
            let outcome = match tokio::time::timeout_at(give_up, attempt).await {
                Ok(outcome) => outcome,
                Err(_) => Err(ClientError::Connect {
                    addr: self.peer(),
                    source: Arc::new(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "reconnect budget spent while connecting",
                    )),
                }),
            };
            match outcome {
                Ok(connection) => {
                    let connection = Arc::new(connection);
                    tracing::debug!(peer = %connection.peer(), "client reconnected");
                    self.lock().connection = Arc::clone(&connection);
                    backoff.succeeded(&self.config);
                    return Ok(connection);
                }
                // Wrong credentials stay wrong: no backoff loop.
                Err(error) if error.is_authentication_failure() => return Err(error),
                Err(error) => {
                    tracing::debug!(%error, "client reconnect failed");
                    backoff.failed(&self.config, error.clone());
                    if Instant::now() >= give_up {
                        return Err(error);
                    }
                }
            }
        }
    }
}

impl Backoff {
    fn succeeded(&mut self, config: &ClientConfig) {
        self.delay = config.reconnect_backoff_initial;
        self.not_before = None;
        self.last_failure = None;
    }

    fn failed(&mut self, config: &ClientConfig, error: ClientError) {
        let now = Instant::now();
        self.not_before = Some(now + jittered(self.delay));
        self.delay = (self.delay * 2).min(config.reconnect_backoff_max);
        self.last_failure = Some((now, error));
    }

    fn last_error(&self) -> ClientError {
        self.last_failure
            .as_ref()
            .map_or(ClientError::Disconnected, |(_, error)| error.clone())
    }
}

/// `delay` scaled by a random factor in `[0.5, 1.0]`, so clients cut off together do not all
/// come back at the same instant.
pub(crate) fn jittered(delay: Duration) -> Duration {
    delay.mul_f64(rand::thread_rng().gen_range(0.5..=1.0))
}

/// Tries every address once, starting at `*next`; on success `*next` points at the one after
/// it, so the next reconnect starts elsewhere. Fails with the last address's error.
async fn open_any(
    addrs: &[String],
    config: &ClientConfig,
    next: &mut usize,
) -> Result<Connection, ClientError> {
    let mut last_error = None;
    for step in 0..addrs.len() {
        let index = (*next + step) % addrs.len();
        match open_one(&addrs[index], config).await {
            Ok(connection) => {
                *next = (index + 1) % addrs.len();
                return Ok(connection);
            }
            Err(error) if error.is_authentication_failure() => return Err(error),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or(ClientError::Disconnected))
}

/// Resolves one address (again at every attempt: a name may move), connects to it, and
/// authenticates when the configuration has credentials.
async fn open_one(addr: &str, config: &ClientConfig) -> Result<Connection, ClientError> {
    let resolved: Vec<SocketAddr> =
        tokio::time::timeout(config.connect_timeout, tokio::net::lookup_host(addr))
            .await
            .map_err(|_| ClientError::Resolve {
                source: Arc::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {:?}", config.connect_timeout),
                )),
            })?
            .map_err(|source| ClientError::Resolve {
                source: Arc::new(source),
            })?
            .collect();
    let connection = Connection::open(resolved, addr, config).await?;
    if let Some(credentials) = &config.credentials {
        let exchange = super::authenticate::authenticate(&connection, credentials);
        tokio::time::timeout(config.request_timeout, exchange)
            .await
            .map_err(|_| ClientError::Timeout {
                after: config.request_timeout,
            })??;
    }
    Ok(connection)
}
