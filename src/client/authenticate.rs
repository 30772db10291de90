//! The client's side of authentication: a SCRAM-SHA-256 exchange (AuthenticateStart, then
//! AuthenticateContinue) run on every new connection before the connection is handed out, so
//! a reconnect authenticates again without the caller noticing.

use std::fmt;

use bytes::Bytes;

use super::connection::Connection;
use super::ClientError;
use crate::auth::{ClientExchange, MECHANISM};
use crate::protocol::{Request, Response};

/// A user name and password. The password is never printed (`Debug` hides it).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name (the principal the server's ACLs name).
    pub user: String,
    /// The password.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// Runs the exchange on a fresh connection. A refusal becomes
/// [`ClientError::AuthenticationFailed`], which is not retried; a server whose final message
/// does not prove it knows the credential is refused the same way.
pub(crate) async fn authenticate(
    connection: &Connection,
    credentials: &Credentials,
) -> Result<(), ClientError> {
    let (mut exchange, first) = ClientExchange::start(&credentials.user, &credentials.password);
    let server_first = match call(
        connection,
        Request::AuthenticateStart {
            mechanism: MECHANISM.to_owned(),
            message: Bytes::from(first),
        },
    )
    .await?
    {
        Response::AuthenticateStart { message } => message,
        other => return Err(unexpected(&other)),
    };
    let last = exchange.respond(&server_first).map_err(failed)?;
    let server_final = match call(
        connection,
        Request::AuthenticateContinue {
            message: Bytes::from(last),
        },
    )
    .await?
    {
        Response::AuthenticateContinue { message } => message,
        other => return Err(unexpected(&other)),
    };
    exchange.verify(&server_final).map_err(failed)
}

async fn call(connection: &Connection, request: Request) -> Result<Response, ClientError> {
    let slot = connection
        .enqueue(request)
        .await
        .map_err(|not_sent| not_sent.error)?;
    connection.response(slot).await
}

fn failed(error: crate::auth::ScramError) -> ClientError {
    ClientError::AuthenticationFailed {
        message: format!("authentication failed: {error}"),
    }
}

fn unexpected(response: &Response) -> ClientError {
    ClientError::Protocol(crate::protocol::ProtocolError::Malformed(format!(
        "{} response to an authentication request",
        response.api_key()
    )))
}
