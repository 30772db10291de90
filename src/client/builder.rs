//! [`ClientBuilder`]: the bootstrap addresses and every limit of a [`Client`], set by name.
//!
//! A builder rather than more `connect_*` functions because a client now has many knobs
//! (timeouts, in-flight limit, frame limit, reconnect backoff) and several addresses, and most
//! callers change one or two of them.

use std::time::Duration;

use super::{Client, ClientConfig, ClientError};

/// Builds a [`Client`]: `Client::builder().addrs(["a:1", "b:2"]).connect().await`.
///
/// Addresses are `host:port` strings, resolved at every (re)connect, tried in turn. Limits start
/// at [`ClientConfig::default`].
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct ClientBuilder {
    addrs: Vec<String>,
    config: ClientConfig,
}

impl ClientBuilder {
    /// Adds bootstrap addresses (`host:port`).
    pub fn addrs<I, S>(mut self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.addrs.extend(addrs.into_iter().map(Into::into));
        self
    }

    /// Adds one bootstrap address (`host:port`).
    pub fn addr(self, addr: impl Into<String>) -> Self {
        self.addrs([addr])
    }

    /// Adds the addresses of a comma-separated list (`"a:1,b:2"`, blanks around commas ignored),
    /// the form `--addr` and `FENCELOG_ADDR` take.
    pub fn addr_list(self, list: &str) -> Self {
        self.addrs(split_addr_list(list))
    }

    /// Replaces every limit and timeout at once.
    pub fn config(mut self, config: ClientConfig) -> Self {
        self.config = config;
        self
    }

    /// Time allowed to establish a TCP connection (per resolved address).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// Time allowed for a request, reconnects and retries included.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.config.request_timeout = timeout;
        self
    }

    /// Most requests in flight on the connection.
    pub fn max_in_flight(mut self, max_in_flight: usize) -> Self {
        self.config.max_in_flight = max_in_flight;
        self
    }

    /// Largest frame sent or accepted.
    pub fn max_frame_bytes(mut self, max_frame_bytes: usize) -> Self {
        self.config.max_frame_bytes = max_frame_bytes;
        self
    }

    /// Pause after the first failed reconnect attempt, and the cap the doubling stops at.
    pub fn reconnect_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.config.reconnect_backoff_initial = initial;
        self.config.reconnect_backoff_max = max;
        self
    }

    /// Most time one call spends reconnecting before it fails with the last connect error.
    pub fn reconnect_timeout(mut self, timeout: Duration) -> Self {
        self.config.reconnect_timeout = timeout;
        self
    }

    /// Authenticates every connection as `user` with `password` (SCRAM-SHA-256), for servers
    /// started with `--auth`. A refusal is [`ClientError::AuthenticationFailed`], never retried.
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.config.credentials = Some(super::Credentials {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// Connects to the first address that accepts (each tried once). Fails with
    /// [`ClientError::InvalidArgument`] without addresses or with an invalid configuration, and
    /// with the last address's connect error if none accepts.
    pub async fn connect(self) -> Result<Client, ClientError> {
        Client::connect_to(self.addrs, self.config).await
    }
}

/// The non-empty, trimmed entries of a comma-separated address list.
pub(crate) fn split_addr_list(list: &str) -> impl Iterator<Item = String> + '_ {
    list.split(',')
        .map(str::trim)
        .filter(|addr| !addr.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_lists_split_on_commas_and_ignore_blanks() {
        let builder = ClientBuilder::default().addr_list(" a:1, b:2 ,,c:3 ");
        assert_eq!(builder.addrs, ["a:1", "b:2", "c:3"]);
        assert!(ClientBuilder::default().addr_list(" , ").addrs.is_empty());
    }
}
