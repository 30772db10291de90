//! [`ClientBuilder`]: the bootstrap addresses and every limit of a [`Client`], set by name.
//!
//! A builder rather than more `connect_*` functions because a client now has many knobs
//! (timeouts, in-flight limit, frame limit, reconnect backoff, TLS) and several addresses, and most
//! callers change one or two of them.

use std::time::Duration;

use super::{Client, ClientConfig, ClientError, TlsClientConfig};

/// Builds a [`Client`]: `Client::builder().addrs(["a:1", "b:2"]).connect().await`.
///
/// Addresses are `host:port` strings, resolved at every (re)connect, tried in turn. Limits start
/// at [`ClientConfig::default`].
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct ClientBuilder {
    addrs: Vec<String>,
    config: ClientConfig,
    /// Set by [`ClientBuilder::tls_server_name`], applied at `connect` so that the order of
    /// the calls does not matter.
    tls_server_name: Option<String>,
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

    /// Time a server may take to answer a prompt request (`ApiVersions`, `Metadata`, ...)
    /// before its connection is taken for dead and the request goes to the next address (see
    /// [`ClientConfig::attempt_timeout`]).
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.config.attempt_timeout = timeout;
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

    /// Connects with TLS to every address: the server's certificate must be signed by a CA
    /// that `tls` trusts and be valid for the host of the address dialled (or for
    /// [`ClientBuilder::tls_server_name`]).
    ///
    /// ```no_run
    /// use fencelog::client::{Client, TlsClientConfig};
    ///
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// let tls = TlsClientConfig::ca_file("ca.pem")?
    ///     .with_client_certificate("client.pem", "client.key")?; // for mutual TLS only
    /// let client = Client::builder()
    ///     .addr_list("broker-1.example:7171,broker-2.example:7171")
    ///     .tls(tls)
    ///     .connect()
    ///     .await?;
    /// # let _ = client;
    /// # Ok(()) }
    /// ```
    pub fn tls(mut self, tls: TlsClientConfig) -> Self {
        self.config.tls = Some(tls);
        self
    }

    /// Checks every server's certificate against `name` instead of the host of the address
    /// dialled (connecting by IP address to a certificate that names a host, say). Needs
    /// [`ClientBuilder::tls`].
    pub fn tls_server_name(mut self, name: impl Into<String>) -> Self {
        self.tls_server_name = Some(name.into());
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
    pub async fn connect(mut self) -> Result<Client, ClientError> {
        if let Some(name) = self.tls_server_name.take() {
            let Some(tls) = self.config.tls.take() else {
                return Err(ClientError::InvalidArgument(
                    "a TLS server name was given without TLS settings (ClientBuilder::tls)"
                        .to_owned(),
                ));
            };
            let tls = tls
                .with_server_name(&name)
                .map_err(|error| ClientError::InvalidArgument(error.to_string()))?;
            self.config.tls = Some(tls);
        }
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
