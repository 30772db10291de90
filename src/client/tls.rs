//! TLS for the client: which CAs it trusts ([`TlsClientConfig`]), its own certificate for
//! mutual TLS, the server name it checks, the handshake after each TCP connect, and handshake
//! failures told in words a user can act on.
//!
//! Why the server name comes from each address: a client given `a.example:7171,b.example:7171`
//! must check each broker's certificate against the name it dialled, at the first connect and at
//! every reconnect, so the name is taken from the `host:port` being connected, unless the user
//! overrides it (connecting by IP to a certificate that only names a host).
//!
//! Why the failures are rewritten: rustls reports `invalid peer certificate: UnknownIssuer` or
//! `received corrupt message of type InvalidContentType`; the user needs "the server's
//! certificate is not signed by a CA you trust: give its CA" and "the server does not speak
//! TLS".

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{AlertDescription, CertificateError, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::ClientError;
use crate::tls::{
    crypto_provider, load_ca_roots, load_certificates, load_private_key, load_system_roots,
    TlsConfigError,
};

/// TLS settings of a client: the CAs it trusts, its certificate for mutual TLS, and the server
/// name to check when it differs from the host connected to. Give it to
/// [`ClientBuilder::tls`](super::ClientBuilder::tls).
///
/// Files are read when the settings are built, so a wrong path fails here, naming the file.
#[derive(Clone)]
pub struct TlsClientConfig {
    roots: Arc<RootCertStore>,
    rustls: Arc<rustls::ClientConfig>,
    server_name: Option<ServerName<'static>>,
    client_certificate: bool,
}

impl std::fmt::Debug for TlsClientConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("TlsClientConfig")
            .field("trusted_roots", &self.roots.len())
            .field("server_name", &self.server_name)
            .field("client_certificate", &self.client_certificate)
            .finish_non_exhaustive()
    }
}

impl TlsClientConfig {
    /// Trusts the operating system's CA certificates (a server certificate from a public CA).
    pub fn system_roots() -> Result<Self, TlsConfigError> {
        Self::trusting(load_system_roots()?)
    }

    /// Trusts the CA certificates of a PEM file (a private CA, or the server's self-signed
    /// certificate).
    pub fn ca_file(path: impl AsRef<Path>) -> Result<Self, TlsConfigError> {
        Self::trusting(load_ca_roots(path.as_ref())?)
    }

    /// Trusts the CAs of `roots`.
    pub fn trusting(roots: RootCertStore) -> Result<Self, TlsConfigError> {
        let roots = Arc::new(roots);
        let rustls = builder(&roots)?.with_no_client_auth();
        Ok(Self {
            roots,
            rustls: Arc::new(rustls),
            server_name: None,
            client_certificate: false,
        })
    }

    /// Presents the certificate chain of `certificate` (PEM, the client's certificate first)
    /// with the key of `private_key` (PEM) to servers that ask for one (mutual TLS).
    pub fn with_client_certificate(
        mut self,
        certificate: impl AsRef<Path>,
        private_key: impl AsRef<Path>,
    ) -> Result<Self, TlsConfigError> {
        let (certificate, private_key) = (certificate.as_ref(), private_key.as_ref());
        let chain = load_certificates("client certificate", certificate)?;
        let key = load_private_key(private_key)?;
        let rustls = builder(&self.roots)?
            .with_client_auth_cert(chain, key)
            .map_err(|source| TlsConfigError::Rustls {
                context: format!(
                    "the private key {} does not fit the client certificate {}",
                    private_key.display(),
                    certificate.display()
                ),
                source,
            })?;
        self.rustls = Arc::new(rustls);
        self.client_certificate = true;
        Ok(self)
    }

    /// Checks the server's certificate against `name` (a DNS name or an IP address) instead of
    /// the host of the address connected to.
    pub fn with_server_name(mut self, name: &str) -> Result<Self, TlsConfigError> {
        self.server_name = Some(parse_server_name(name)?);
        Ok(self)
    }

    /// The name checked instead of the host connected to, if one was set.
    pub fn server_name(&self) -> Option<String> {
        self.server_name
            .as_ref()
            .map(ServerName::to_str)
            .map(Into::into)
    }

    /// Whether a client certificate is presented.
    pub fn has_client_certificate(&self) -> bool {
        self.client_certificate
    }

    /// The name to check for a connection to `addr` (`host:port`).
    pub(crate) fn server_name_for(&self, addr: &str) -> Result<ServerName<'static>, ClientError> {
        match &self.server_name {
            Some(name) => Ok(name.clone()),
            None => parse_server_name(host_of(addr)),
        }
        .map_err(|error| ClientError::InvalidArgument(error.to_string()))
    }

    /// Runs the handshake on a connected socket within `timeout`.
    pub(crate) async fn handshake(
        &self,
        socket: TcpStream,
        addr: SocketAddr,
        server_name: ServerName<'static>,
        timeout: Duration,
    ) -> Result<TlsStream<TcpStream>, ClientError> {
        let connector = TlsConnector::from(Arc::clone(&self.rustls));
        let name = server_name.to_str().into_owned();
        match tokio::time::timeout(timeout, connector.connect(server_name, socket)).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(error)) => Err(ClientError::Tls {
                addr,
                reason: describe(&error, &name),
            }),
            Err(_) => Err(ClientError::Tls {
                addr,
                reason: format!("no TLS handshake within {timeout:?}"),
            }),
        }
    }
}

fn builder(
    roots: &Arc<RootCertStore>,
) -> Result<
    rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>,
    TlsConfigError,
> {
    Ok(
        rustls::ClientConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsConfigError::Rustls {
                context: "TLS protocol versions".to_owned(),
                source,
            })?
            .with_root_certificates(Arc::clone(roots)),
    )
}

fn parse_server_name(name: &str) -> Result<ServerName<'static>, TlsConfigError> {
    ServerName::try_from(name.to_owned()).map_err(|_| TlsConfigError::InvalidServerName {
        name: name.to_owned(),
    })
}

/// The host of `host:port`, `[v6]:port` or a bare host.
fn host_of(addr: &str) -> &str {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match addr.rsplit_once(':') {
        Some((host, _port)) if !host.contains(':') => host,
        _ => addr,
    }
}

/// A transport error as the client reports it: a TLS failure (an alert from the server, say a
/// client certificate it refused) as [`ClientError::Tls`], anything else as
/// [`ClientError::Io`].
pub(crate) fn transport_error(error: Arc<std::io::Error>, peer: SocketAddr) -> ClientError {
    let is_tls = error
        .get_ref()
        .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some());
    if is_tls {
        ClientError::Tls {
            addr: peer,
            reason: describe(&error, ""),
        }
    } else {
        ClientError::Io(error)
    }
}

/// Whether a frame length read from a server is in fact the start of a TLS record (an alert
/// or handshake: content type 21 or 22, version 3.x): the server speaks TLS and this client
/// does not.
pub(crate) fn is_tls_record_start(declared_length: usize) -> bool {
    matches!(declared_length >> 16, 0x1503 | 0x1603)
}

/// What went wrong in a handshake, in words a user can act on.
fn describe(error: &std::io::Error, server_name: &str) -> String {
    let Some(tls) = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return match error.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                "the server closed the connection during the TLS handshake: it probably does not speak TLS on this port (connect without TLS, or turn TLS on at the server)".to_owned()
            }
            _ => format!("TLS handshake failed: {error}"),
        };
    };
    match tls {
        rustls::Error::InvalidCertificate(problem) => describe_certificate(problem, server_name),
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            format!("the server does not speak TLS on this port (connect without TLS, or turn TLS on at the server): {tls}")
        }
        rustls::Error::AlertReceived(AlertDescription::CertificateRequired) => {
            "the server requires a client certificate (mutual TLS): give one with --tls-cert and --tls-key".to_owned()
        }
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateRevoked),
        ) => format!(
            "the server refused this client's certificate ({alert:?}): give a certificate signed by the CA the server trusts for clients"
        ),
        other => format!("TLS handshake failed: {other}"),
    }
}

fn describe_certificate(problem: &CertificateError, server_name: &str) -> String {
    match problem {
        CertificateError::UnknownIssuer => {
            "the server's certificate is not signed by a CA this client trusts: give the CA that signed it (--tls-ca FILE)".to_owned()
        }
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            format!(
                "the server's certificate is not valid for the name {server_name:?} ({problem:?}): connect by a name the certificate holds, or set --tls-server-name"
            )
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            format!("the server's certificate has expired ({problem:?})")
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            format!("the server's certificate is not valid yet (check the clocks): {problem:?}")
        }
        other => format!("the server's certificate was refused: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_taken_from_every_address_form() {
        assert_eq!(host_of("localhost:7171"), "localhost");
        assert_eq!(host_of("127.0.0.1:7171"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7171"), "::1");
        assert_eq!(host_of("broker.example"), "broker.example");
        assert_eq!(host_of("::1"), "::1");
    }

    #[test]
    fn tls_records_are_told_apart_from_frame_lengths() {
        // An alert record: type 21, version 3.3, length 2.
        assert!(is_tls_record_start(
            u32::from_be_bytes([0x15, 3, 3, 0]) as usize
        ));
        assert!(is_tls_record_start(
            u32::from_be_bytes([0x16, 3, 1, 0]) as usize
        ));
        assert!(!is_tls_record_start(1024));
    }
}
