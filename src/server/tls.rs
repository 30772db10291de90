//! TLS on the server's listeners: the acceptor built from PEM files ([`ServerTls`]), and the
//! step between an accepted TCP socket and the generic connection loop.
//!
//! Why the handshake runs in the connection's own task, under its permit: a handshake costs a
//! round trip or two and some public-key arithmetic, and a client can stall it on purpose. In
//! the accept loop one slow client would stop every other from being accepted; in its own task
//! it holds one connection slot (the server-wide limit still bounds them all) for at most
//! [`TLS_HANDSHAKE_TIMEOUT`], and a failed handshake (a plain-TCP client, a wrong CA, no client
//! certificate under mutual TLS) is logged with the peer and closes that connection alone.
//!
//! Without TLS the socket goes to the connection loop as it is: the plain-TCP path keeps its
//! owned halves and vectored writes; the TLS stream is split with `tokio::io::split`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::broadcast;
use tokio_rustls::server::TlsStream;

use super::connection::Refusal;
use tokio_rustls::TlsAcceptor;
use tracing::info;

use super::connection::{self, SplitStream};
use super::protocol::Protocol;
use super::ServerConfig;
use crate::broker::BrokerService;
use crate::tls::{crypto_provider, load_ca_roots, load_certificates, load_private_key};

pub use crate::tls::TlsConfigError;

/// Default longest a client may take to complete the TLS handshake before its connection is
/// closed.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest a connection beyond the connection limit is given to complete its handshake and
/// read the refusal.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);

/// TLS for every listener of a server: the certificate it presents, and, for mutual TLS, the CA
/// that must have signed its clients' certificates. Set it as [`ServerConfig::tls`].
#[derive(Clone)]
pub struct ServerTls {
    acceptor: TlsAcceptor,
    handshake_timeout: Duration,
    client_certificates_required: bool,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ServerTls")
            .field("handshake_timeout", &self.handshake_timeout)
            .field(
                "client_certificates_required",
                &self.client_certificates_required,
            )
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// TLS with the certificate chain of `certificate` (PEM, the server's certificate first)
    /// and the key of `private_key` (PEM); with `client_ca`, every client must present a
    /// certificate signed by a CA of that PEM file (mutual TLS).
    pub fn from_pem_files(
        certificate: &Path,
        private_key: &Path,
        client_ca: Option<&Path>,
    ) -> Result<Self, TlsConfigError> {
        let chain = load_certificates("certificate", certificate)?;
        let key = load_private_key(private_key)?;
        let provider = crypto_provider();
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsConfigError::Rustls {
                context: "TLS protocol versions".to_owned(),
                source,
            })?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(client_ca) => {
                let roots = Arc::new(load_ca_roots(client_ca)?);
                let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|error| TlsConfigError::InvalidCa {
                        path: client_ca.to_path_buf(),
                        reason: error.to_string(),
                    })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config =
            builder
                .with_single_cert(chain, key)
                .map_err(|source| TlsConfigError::Rustls {
                    context: format!(
                        "the private key {} does not fit the certificate {}",
                        private_key.display(),
                        certificate.display()
                    ),
                    source,
                })?;
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            handshake_timeout: TLS_HANDSHAKE_TIMEOUT,
            client_certificates_required: client_ca.is_some(),
        })
    }

    /// TLS with a rustls configuration built by the caller (its own certificate resolver or
    /// client verifier).
    pub fn from_rustls(config: Arc<rustls::ServerConfig>) -> Self {
        Self {
            acceptor: TlsAcceptor::from(config),
            handshake_timeout: TLS_HANDSHAKE_TIMEOUT,
            client_certificates_required: false,
        }
    }

    /// Replaces the longest a handshake may take ([`TLS_HANDSHAKE_TIMEOUT`] by default).
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// The longest a handshake may take.
    pub fn handshake_timeout(&self) -> Duration {
        self.handshake_timeout
    }

    /// Whether clients must present a certificate (mutual TLS, from [`Self::from_pem_files`]).
    pub fn client_certificates_required(&self) -> bool {
        self.client_certificates_required
    }

    /// Runs the handshake within `timeout`; `None` (logged with the peer) when it fails, times
    /// out or the server stops meanwhile.
    async fn handshake(
        &self,
        socket: TcpStream,
        peer: SocketAddr,
        timeout: Duration,
        stop: &mut broadcast::Receiver<()>,
    ) -> Option<TlsStream<TcpStream>> {
        tokio::select! {
            _ = stop.recv() => None,
            stream = self.accept(socket, peer, timeout) => stream,
        }
    }

    /// Runs the handshake within `timeout`; `None` (logged with the peer) when it fails or
    /// times out. The HTTP listener's way in; the protocol listeners' goes through
    /// [`Self::handshake`], which also gives up when the server stops.
    pub(crate) async fn accept(
        &self,
        socket: TcpStream,
        peer: SocketAddr,
        timeout: Duration,
    ) -> Option<TlsStream<TcpStream>> {
        match tokio::time::timeout(timeout, self.acceptor.accept(socket)).await {
            Ok(Ok(stream)) => Some(stream),
            Ok(Err(error)) => {
                info!(%peer, %error, "TLS handshake failed (a client without TLS, or one that does not trust this server's certificate?); closing connection");
                None
            }
            Err(_) => {
                info!(%peer, timeout_ms = timeout.as_millis() as u64, "TLS handshake timed out; closing connection");
                None
            }
        }
    }
}

impl SplitStream for TlsStream<TcpStream> {
    type Read = ReadHalf<Self>;
    type Write = WriteHalf<Self>;

    fn into_halves(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }
}

/// Serves an accepted socket: over TLS when the listener's config has it (after the
/// handshake), as plain TCP otherwise.
pub(super) async fn serve_socket<P: Protocol>(
    protocol: Arc<P>,
    socket: TcpStream,
    peer: SocketAddr,
    service: Arc<BrokerService>,
    config: Arc<ServerConfig>,
    mut stop: broadcast::Receiver<()>,
) {
    let Some(tls) = config.tls.clone() else {
        return connection::serve(protocol, socket, peer, service, config, stop).await;
    };
    let timeout = tls.handshake_timeout;
    if let Some(stream) = tls.handshake(socket, peer, timeout, &mut stop).await {
        connection::serve(protocol, stream, peer, service, config, stop).await;
    }
}

/// Refuses a connection at accept: over TLS when the listener has it (the refusal is written
/// inside the TLS session, or the client could not read it), as plain TCP otherwise. Takes at
/// most about two [`REFUSAL_TIMEOUT`]s.
pub(super) async fn refuse_socket<P: Protocol>(
    protocol: Arc<P>,
    socket: TcpStream,
    peer: SocketAddr,
    config: Arc<ServerConfig>,
    mut stop: broadcast::Receiver<()>,
    refusal: Refusal,
) {
    let Some(tls) = config.tls.clone() else {
        return connection::refuse(protocol, socket, peer, refusal).await;
    };
    let timeout = REFUSAL_TIMEOUT.min(tls.handshake_timeout);
    if let Some(stream) = tls.handshake(socket, peer, timeout, &mut stop).await {
        refuse_and_close(protocol, stream, peer, refusal).await;
    }
}

async fn refuse_and_close<P, S>(protocol: Arc<P>, mut stream: S, peer: SocketAddr, refusal: Refusal)
where
    P: Protocol,
    S: AsyncRead + AsyncWrite + Unpin,
{
    connection::refuse(protocol, &mut stream, peer, refusal).await;
    // TLS's close_notify: the client reads the refusal, then a clean end of stream.
    let closed = tokio::time::timeout(
        REFUSAL_TIMEOUT,
        tokio::io::AsyncWriteExt::shutdown(&mut stream),
    )
    .await;
    if !matches!(closed, Ok(Ok(()))) {
        tracing::debug!(%peer, "TLS close after a refusal failed or timed out");
    }
}
