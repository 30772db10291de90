//! The TLS flags of the command line: `serve`'s certificate, key and client CA
//! ([`ServeTlsArgs`]), and the client commands' CA, client certificate and server name
//! ([`ClientTlsArgs`]), each with its environment variable.
//!
//! Why in one file: the two sides' flags must read alike and fail alike (a bad file is named at
//! start-up, exit status 1), and the client flags are shared by every client command, `bench`
//! and `demo`.

use std::path::PathBuf;

use clap::Args;

use super::error::codes;
use super::CliError;
use crate::client::{ClientBuilder, TlsClientConfig};
use crate::server::ServerTls;

/// TLS flags of `fencelog serve`: TLS on every listener when a certificate is given.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "TLS")]
pub struct ServeTlsArgs {
    /// Serve TLS on every listener (native and Kafka) with this PEM certificate chain (the
    /// server's certificate first); needs --tls-key.
    #[arg(long = "tls-cert", env = "FENCELOG_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long = "tls-key", env = "FENCELOG_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by a CA of this PEM file (mutual TLS); needs
    /// --tls-cert.
    #[arg(
        long = "tls-client-ca",
        env = "FENCELOG_TLS_CLIENT_CA",
        requires = "tls_cert"
    )]
    pub tls_client_ca: Option<PathBuf>,
    /// On a cluster (--etcd) with --tls-cert: the PEM CA file followers check their leaders'
    /// certificates against (defaults to --tls-client-ca). Each broker's certificate must name
    /// the host of the address it advertises.
    #[arg(
        long = "peer-tls-ca",
        env = "FENCELOG_PEER_TLS_CA",
        requires = "tls_cert"
    )]
    pub peer_tls_ca: Option<PathBuf>,
}

impl ServeTlsArgs {
    /// The TLS of this broker's connections to other brokers (a follower's to its leader), or
    /// `None` without `--tls-cert`: brokers that serve TLS speak it to each other too. It
    /// trusts `--peer-tls-ca` (else `--tls-client-ca`) and presents this broker's own
    /// certificate to a leader that asks for one (mutual TLS with `--tls-client-ca`).
    pub fn peer_tls(&self) -> Result<Option<TlsClientConfig>, CliError> {
        let (Some(certificate), Some(private_key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let Some(ca) = self.peer_tls_ca.as_ref().or(self.tls_client_ca.as_ref()) else {
            return Err(CliError::invalid_argument(
                "--tls-cert on a cluster needs --peer-tls-ca FILE (or --tls-client-ca FILE): the CA a follower checks its leader's certificate against",
            ));
        };
        let fail = |error: crate::tls::TlsConfigError| {
            CliError::with_code(codes::TLS_ERROR, format!("inter-broker TLS: {error}"))
        };
        TlsClientConfig::ca_file(ca)
            .and_then(|tls| tls.with_client_certificate(certificate, private_key))
            .map(Some)
            .map_err(fail)
    }

    /// The listeners' TLS, or `None` without `--tls-cert`. A file that cannot be used is an
    /// error naming it.
    pub fn server_tls(&self) -> Result<Option<ServerTls>, CliError> {
        let (Some(certificate), Some(private_key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        ServerTls::from_pem_files(certificate, private_key, self.tls_client_ca.as_deref())
            .map(Some)
            .map_err(|error| CliError::with_code(codes::TLS_ERROR, format!("TLS: {error}")))
    }
}

/// TLS flags of every client command: TLS is on when any of them is given.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "TLS")]
pub struct ClientTlsArgs {
    /// Connect with TLS, trusting the system's CA certificates (implied by the other --tls-*
    /// flags).
    #[arg(long = "tls")]
    pub tls: bool,
    /// Connect with TLS, trusting the CA certificates of this PEM file instead of the system's.
    #[arg(long = "tls-ca", env = "FENCELOG_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Present this PEM client certificate (mutual TLS); needs --tls-key.
    #[arg(
        long = "tls-cert",
        env = "FENCELOG_TLS_CLIENT_CERT",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(
        long = "tls-key",
        env = "FENCELOG_TLS_CLIENT_KEY",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// Check the server's certificate against this name instead of the host of --addr.
    #[arg(long = "tls-server-name")]
    pub tls_server_name: Option<String>,
}

impl ClientTlsArgs {
    /// Whether any TLS flag was given.
    pub fn enabled(&self) -> bool {
        self.tls
            || self.tls_ca.is_some()
            || self.tls_cert.is_some()
            || self.tls_server_name.is_some()
    }

    /// The client's TLS settings, or `None` without TLS flags. A file that cannot be used is an
    /// error naming it.
    pub fn client_tls(&self) -> Result<Option<TlsClientConfig>, CliError> {
        if !self.enabled() {
            return Ok(None);
        }
        let fail = |error: crate::tls::TlsConfigError| {
            CliError::with_code(codes::TLS_ERROR, format!("TLS: {error}"))
        };
        let mut tls = match &self.tls_ca {
            Some(ca) => TlsClientConfig::ca_file(ca),
            None => TlsClientConfig::system_roots(),
        }
        .map_err(fail)?;
        if let (Some(certificate), Some(private_key)) = (&self.tls_cert, &self.tls_key) {
            tls = tls
                .with_client_certificate(certificate, private_key)
                .map_err(fail)?;
        }
        if let Some(name) = &self.tls_server_name {
            tls = tls.with_server_name(name).map_err(fail)?;
        }
        Ok(Some(tls))
    }

    /// `builder` with the client's TLS settings when any TLS flag was given.
    pub fn apply(&self, builder: ClientBuilder) -> Result<ClientBuilder, CliError> {
        Ok(match self.client_tls()? {
            Some(tls) => builder.tls(tls),
            None => builder,
        })
    }
}
