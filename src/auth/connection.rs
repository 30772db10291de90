//! One connection's authentication, whatever its protocol: not started, a SCRAM exchange half
//! way, or done with a principal; and the count of refusals after which the connection closes.
//!
//! Both listeners drive the same state machine: the native protocol with its AuthenticateStart
//! (key 13) and AuthenticateContinue (key 14), the Kafka listener with SaslHandshake v1 and two
//! SaslAuthenticate requests (KIP-152), or SaslHandshake v0 and two raw token frames (KIP-43).

use std::sync::Arc;

use super::authorizer::{Access, Security};
use super::scram::{ClientFirst, ScramError, ServerExchange, MECHANISM};

/// Refusals (requests before authentication, failed exchanges) after which an unauthenticated
/// connection is closed.
pub const MAX_AUTHENTICATION_FAILURES: u32 = 3;

/// Why an authentication step was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthenticationError {
    /// The server runs without `--auth`.
    #[error("authentication is not enabled on this server (start it with `serve --auth`), so there is nothing to authenticate; connect without credentials")]
    NotEnabled,
    /// The connection is already authenticated.
    #[error("this connection is already authenticated")]
    AlreadyAuthenticated,
    /// A continue step without a started exchange.
    #[error("no authentication exchange is in progress: start one first")]
    NotStarted,
    /// A mechanism other than SCRAM-SHA-256.
    #[error("unsupported mechanism {0:?}: this server offers SCRAM-SHA-256")]
    UnsupportedMechanism(String),
    /// The credentials do not match (the message does not say whether the user exists).
    #[error("authentication failed: invalid user name or password")]
    Failed,
    /// The client's message does not follow SCRAM.
    #[error("authentication failed: {0}")]
    Malformed(String),
}

impl AuthenticationError {
    /// Whether the error is a state error (wrong step) rather than a failed authentication.
    pub fn is_state_error(&self) -> bool {
        matches!(
            self,
            Self::NotEnabled | Self::AlreadyAuthenticated | Self::NotStarted
        )
    }
}

/// A connection's authentication state.
#[derive(Debug, Default)]
pub struct ConnectionAuthentication {
    security: Option<Arc<Security>>,
    exchange: Option<ServerExchange>,
    principal: Option<Arc<str>>,
    failures: u32,
}

impl ConnectionAuthentication {
    /// The state of a new connection; `security` is `None` without `--auth`.
    pub fn new(security: Option<Arc<Security>>) -> Self {
        Self {
            security,
            ..Self::default()
        }
    }

    /// Whether requests other than ApiVersions and authentication must be refused.
    pub fn is_required(&self) -> bool {
        self.security.is_some() && self.principal.is_none()
    }

    /// Whether authentication is on for this server.
    pub fn is_enabled(&self) -> bool {
        self.security.is_some()
    }

    /// The authenticated user.
    pub fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// What the connection may do (everything without `--auth`). Only meaningful once
    /// [`Self::is_required`] is false.
    pub fn access(&self) -> Access {
        match (&self.security, &self.principal) {
            (Some(security), Some(principal)) => {
                Access::as_principal(Arc::clone(security), Arc::clone(principal))
            }
            _ => Access::open(),
        }
    }

    /// Counts a refusal; returns whether the connection has used up its allowance and must be
    /// closed.
    pub fn refused(&mut self) -> bool {
        self.failures = self.failures.saturating_add(1);
        self.failures >= MAX_AUTHENTICATION_FAILURES
    }

    /// Checks that `mechanism` can be used now (the SASL handshake step).
    pub fn check_mechanism(&self, mechanism: &str) -> Result<(), AuthenticationError> {
        if self.security.is_none() {
            return Err(AuthenticationError::NotEnabled);
        }
        if self.principal.is_some() {
            return Err(AuthenticationError::AlreadyAuthenticated);
        }
        if mechanism != MECHANISM {
            return Err(AuthenticationError::UnsupportedMechanism(
                mechanism.to_owned(),
            ));
        }
        Ok(())
    }

    /// The first step: the client-first message in, the server-first message out.
    pub fn start(&mut self, client_first: &[u8]) -> Result<Vec<u8>, AuthenticationError> {
        let Some(security) = &self.security else {
            return Err(AuthenticationError::NotEnabled);
        };
        if self.principal.is_some() {
            return Err(AuthenticationError::AlreadyAuthenticated);
        }
        let first = ClientFirst::parse(client_first).map_err(malformed)?;
        let credential = security.credential(&first.user);
        let (exchange, server_first) = ServerExchange::start(first, credential);
        self.exchange = Some(exchange);
        Ok(server_first)
    }

    /// The last step: the client-final message in, the server-final message out; on success the
    /// connection is authenticated.
    pub fn finish(&mut self, client_final: &[u8]) -> Result<Vec<u8>, AuthenticationError> {
        if self.security.is_none() {
            return Err(AuthenticationError::NotEnabled);
        }
        if self.principal.is_some() {
            return Err(AuthenticationError::AlreadyAuthenticated);
        }
        let exchange = self
            .exchange
            .take()
            .ok_or(AuthenticationError::NotStarted)?;
        match exchange.finish(client_final) {
            Ok(server_final) => {
                tracing::debug!(principal = exchange.user(), "connection authenticated");
                self.principal = Some(Arc::from(exchange.user()));
                self.failures = 0;
                Ok(server_final)
            }
            Err(ScramError::InvalidProof) => {
                tracing::info!(user = exchange.user(), "authentication failed");
                Err(AuthenticationError::Failed)
            }
            Err(error) => Err(malformed(error)),
        }
    }

    /// Whether an exchange is half way (its next step is [`Self::finish`]).
    pub fn in_exchange(&self) -> bool {
        self.exchange.is_some()
    }
}

fn malformed(error: ScramError) -> AuthenticationError {
    AuthenticationError::Malformed(error.to_string())
}
