//! Reading TLS certificates and keys from PEM files, shared by the server's listeners
//! ([`crate::server::tls`]) and the client ([`crate::client::TlsClientConfig`]).
//!
//! Why a module of its own: both sides read the same kinds of files (a certificate chain, a
//! private key, a CA bundle) and must fail the same way when one is wrong, with the file's name
//! and what is wrong with it, so that an operator who swapped the key and the certificate, or
//! pointed at a DER file, learns it at start-up rather than from a failed handshake later. Both
//! sides also use one crypto provider (*ring*), chosen here explicitly rather than through
//! rustls' process-wide default, so that an application linking another provider cannot make
//! the choice ambiguous.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::RootCertStore;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Largest PEM file read (certificates, keys and CA bundles are a few KiB; a system bundle is
/// under 1 MiB), so a wrong path (a log file, a device) cannot make start-up read gigabytes.
pub const PEM_FILE_BYTES_MAX: u64 = 16 * 1024 * 1024;

/// Why a TLS certificate, key or CA file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsConfigError {
    /// The file could not be read.
    #[error("cannot read {what} file {}: {source}", path.display())]
    Read {
        /// What the file was meant to hold ("certificate", "private key", "CA certificate").
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is larger than [`PEM_FILE_BYTES_MAX`].
    #[error(
        "{what} file {} is {bytes} bytes, more than the {max} a PEM file may have: is it the right file?",
        path.display(),
        max = PEM_FILE_BYTES_MAX
    )]
    TooLarge {
        /// What the file was meant to hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// The file holds no PEM section of the expected kind.
    #[error(
        "{what} file {} holds no {expected} PEM section: give a PEM file (text starting with -----BEGIN ...-----), not DER, and not the other file of the pair",
        path.display()
    )]
    NothingFound {
        /// What the file was meant to hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The PEM sections looked for, e.g. `CERTIFICATE`.
        expected: &'static str,
    },
    /// The file is not valid PEM.
    #[error("{what} file {} is not valid PEM: {reason}", path.display())]
    InvalidPem {
        /// What the file was meant to hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The parser's explanation.
        reason: String,
    },
    /// A CA file holds a certificate that cannot serve as a trust anchor.
    #[error("CA certificate file {} holds a certificate that cannot be trusted as a CA: {reason}", path.display())]
    InvalidCa {
        /// The file.
        path: PathBuf,
        /// rustls' explanation.
        reason: String,
    },
    /// The system's trusted roots could not be loaded.
    #[error("cannot load the system's trusted CA certificates ({reason}): give a CA file instead (--tls-ca)")]
    SystemRoots {
        /// What went wrong.
        reason: String,
    },
    /// A TLS server name that is neither a DNS name nor an IP address.
    #[error("{name:?} is not a DNS name or IP address a TLS certificate can hold")]
    InvalidServerName {
        /// The name given.
        name: String,
    },
    /// rustls refused the combination (a key that does not match the certificate, an
    /// unsupported key type, ...).
    #[error("{context}: {source}")]
    Rustls {
        /// What was being built, naming the files.
        context: String,
        /// rustls' error.
        source: rustls::Error,
    },
}

/// The crypto provider of every TLS configuration fencelog builds (*ring*).
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads a file of at most [`PEM_FILE_BYTES_MAX`] bytes.
fn read_pem_file(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsConfigError> {
    let read_error = |source| TlsConfigError::Read {
        what,
        path: path.to_path_buf(),
        source,
    };
    let bytes = std::fs::metadata(path).map_err(read_error)?.len();
    if bytes > PEM_FILE_BYTES_MAX {
        return Err(TlsConfigError::TooLarge {
            what,
            path: path.to_path_buf(),
            bytes,
        });
    }
    std::fs::read(path).map_err(read_error)
}

fn pem_error(
    what: &'static str,
    path: &Path,
    expected: &'static str,
    error: pem::Error,
) -> TlsConfigError {
    match error {
        pem::Error::NoItemsFound => TlsConfigError::NothingFound {
            what,
            path: path.to_path_buf(),
            expected,
        },
        other => TlsConfigError::InvalidPem {
            what,
            path: path.to_path_buf(),
            reason: other.to_string(),
        },
    }
}

/// Every certificate in a PEM file, in order (a leaf first, then its intermediates).
pub fn load_certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let text = read_pem_file(what, path)?;
    let certificates = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| pem_error(what, path, "CERTIFICATE", error))?;
    if certificates.is_empty() {
        return Err(pem_error(
            what,
            path,
            "CERTIFICATE",
            pem::Error::NoItemsFound,
        ));
    }
    Ok(certificates)
}

/// The first private key in a PEM file (PKCS#8, PKCS#1 RSA or SEC1 EC).
pub fn load_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    const WHAT: &str = "private key";
    let text = read_pem_file(WHAT, path)?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|error| {
        pem_error(
            WHAT,
            path,
            "PRIVATE KEY (or RSA PRIVATE KEY, EC PRIVATE KEY)",
            error,
        )
    })
}

/// A trust store holding every certificate of a PEM CA file.
pub fn load_ca_roots(path: &Path) -> Result<RootCertStore, TlsConfigError> {
    let mut roots = RootCertStore::empty();
    for certificate in load_certificates("CA certificate", path)? {
        roots
            .add(certificate)
            .map_err(|error| TlsConfigError::InvalidCa {
                path: path.to_path_buf(),
                reason: error.to_string(),
            })?;
    }
    Ok(roots)
}

/// A trust store holding the operating system's trusted CA certificates.
pub fn load_system_roots() -> Result<RootCertStore, TlsConfigError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let reason = match found.errors.first() {
            Some(error) => error.to_string(),
            None => "none found".to_owned(),
        };
        return Err(TlsConfigError::SystemRoots { reason });
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_named_in_the_error() {
        let error = load_certificates("certificate", Path::new("/nonexistent/server.pem"))
            .expect_err("no such file");
        let message = error.to_string();
        assert!(
            message.contains("/nonexistent/server.pem") && message.contains("certificate"),
            "{message}"
        );
    }

    #[test]
    fn a_file_without_the_expected_section_says_so() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("key-not-cert.pem");
        std::fs::write(&path, "just some text\n").unwrap();
        let error = load_certificates("certificate", &path).expect_err("no certificate");
        assert!(
            matches!(error, TlsConfigError::NothingFound { .. }),
            "{error}"
        );
        let error = load_private_key(&path).expect_err("no key");
        assert!(error.to_string().contains("PRIVATE KEY"), "{error}");
    }
}
