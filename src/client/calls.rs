//! How one request reaches a server and its answer comes back: on the bootstrap connection or
//! routed to a partition's leader, sent again when that is safe, within its timeout.
//!
//! Every call of the [`Client`] (admin, leases, produce, fetch) goes through these few
//! functions, so the rules about what is retried and what a timeout reports live here once
//! instead of in each call.

use std::time::Duration;

use tokio::time::Instant;

use super::reconnect::Endpoint;
use super::retry::{self, RetryDelay};
use super::routing::{self, MAX_ROUTING_ATTEMPTS};
use super::{Client, ClientError};
use crate::protocol::{Request, Response};

/// Extracts the expected variant of a response; anything else cannot come from a correct
/// server (responses are decoded by the API of the request they answer).
macro_rules! expect_response {
    ($response:expr, $pattern:pat => $value:expr) => {
        match $response {
            $pattern => Ok($value),
            other => Err($crate::client::ClientError::Protocol(
                $crate::protocol::ProtocolError::Malformed(format!(
                    "unexpected {} response",
                    other.api_key()
                )),
            )),
        }
    };
}
// A path for the sibling modules: a `macro_rules!` macro alone is in scope only textually, below
// its definition in this file.
pub(super) use expect_response;

impl Client {
    /// Sends any request on the bootstrap connection and returns its response (an error
    /// response as [`ClientError::Server`]), within `timeout`, without routing. For brokers'
    /// replication (a follower's `ReplicaFetch` and `LeaderEpochEnd` to its leader) and tools.
    pub async fn request(
        &self,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, ClientError> {
        self.call_within(request, timeout).await
    }

    pub(super) async fn call(&self, request: Request) -> Result<Response, ClientError> {
        self.call_within(request, self.config().request_timeout)
            .await
    }

    /// Sends `request` on the bootstrap connection (see [`call_on`]).
    async fn call_within(
        &self,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, ClientError> {
        call_on(&self.endpoint, request, timeout).await
    }

    /// Sends a request about `topic`/`partition` to the partition's leader as the client knows
    /// it (the bootstrap connection until it knows better), following `NOT_LEADER` hints and
    /// sending the request again when that is safe (`retry::may_resend`), at most
    /// [`MAX_ROUTING_ATTEMPTS`] times within `timeout`. A produce that is not idempotent and
    /// lost its connection after being sent fails with [`ClientError::OutcomeUnknown`].
    pub(super) async fn call_partition(
        &self,
        topic: &str,
        partition: u32,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, ClientError> {
        let deadline = Instant::now() + timeout;
        let idempotent = retry::is_idempotent(&request);
        let is_produce = request.api_key() == crate::protocol::ApiKey::Produce;
        let mut delay = RetryDelay::new(self.config());
        let mut attempt = 0;
        loop {
            attempt += 1;
            let sent = match self.routing.endpoint_for(topic, partition, deadline).await {
                // Nothing was sent: any request may go again once the view is refreshed.
                Err(error) => Err((error, false)),
                Ok(endpoint) => {
                    let remaining = routing::remaining(deadline);
                    call_on(&endpoint, request.clone(), remaining)
                        .await
                        .map_err(|error| match error {
                            // The caller's budget is the whole request's, not this attempt's.
                            ClientError::Timeout { .. } => {
                                (ClientError::Timeout { after: timeout }, true)
                            }
                            other => (other, true),
                        })
                }
            };
            let (error, was_sent) = match sent {
                Ok(response) => return Ok(response),
                Err(failed) => failed,
            };
            self.routing.learn(topic, partition, &error);
            let again = if was_sent {
                retry::may_resend(&error, idempotent)
            } else {
                self.routing.routes()
            };
            if !again || attempt >= MAX_ROUTING_ATTEMPTS || !delay.wait(deadline).await {
                if was_sent && is_produce && !idempotent && retry::is_transport_failure(&error) {
                    return Err(ClientError::OutcomeUnknown {
                        cause: Box::new(error),
                    });
                }
                return Err(error);
            }
            tracing::debug!(%error, topic, partition, attempt, "sending the request again");
        }
    }

    /// Sends a request about `topic`/`partition` to its leader within the request timeout.
    pub(super) async fn call_routed(
        &self,
        topic: &str,
        partition: u32,
        request: Request,
    ) -> Result<Response, ClientError> {
        let timeout = self.config().request_timeout;
        self.call_partition(topic, partition, request, timeout)
            .await
    }
}

/// Sends `request` on a live connection of `endpoint` (reconnecting if needed) and waits for its
/// response, all within `timeout`. A request refused unsent (by a dead connection, or one whose
/// server did not answer its first exchange: `Connection::enqueue`) is sent on the next; one
/// that failed with its connection is sent again only if its API is safe to repeat. A read that
/// runs out of time after a failed attempt fails with that attempt's error, not a timeout.
pub(crate) async fn call_on(
    endpoint: &Endpoint,
    request: Request,
    timeout: Duration,
) -> Result<Response, ClientError> {
    let deadline = Instant::now() + timeout;
    let only_reads = retry::only_reads(request.api_key());
    // A read that runs out of time mid-attempt after an earlier attempt failed reports that
    // failure: it says why (the server at its connection limit, shutting down), and a read has
    // no outcome to be unknown. Anything else reports the timeout: its outcome is unknown.
    let mut last_failure: Option<ClientError> = None;
    let timed_out = |last_failure: Option<ClientError>| match last_failure {
        Some(failure) if only_reads => failure,
        _ => ClientError::Timeout { after: timeout },
    };
    let repeatable = retry::safe_to_retry(request.api_key());
    let mut delay = RetryDelay::new(endpoint.config());
    let mut request = Some(request);
    loop {
        let connection = endpoint.connection(deadline).await?;
        let Some(unsent) = request.take() else {
            return Err(ClientError::Disconnected);
        };
        let outgoing = if repeatable {
            let copy = unsent.clone();
            request = Some(unsent);
            copy
        } else {
            unsent
        };
        let slot = match tokio::time::timeout_at(deadline, connection.enqueue(outgoing)).await {
            Err(_) => return Err(timed_out(last_failure)),
            Ok(Ok(slot)) => slot,
            // Unsent (a dead connection, or a server that did not answer its first exchange):
            // any API may go on the next connection, which the reconnect opens to the next
            // address.
            Ok(Err(not_sent)) => {
                request = Some(not_sent.request);
                if !not_sent.retriable || !delay.wait(deadline).await {
                    return Err(not_sent.error);
                }
                last_failure = Some(not_sent.error);
                continue;
            }
        };
        let error = match tokio::time::timeout_at(deadline, connection.response(slot)).await {
            Err(_) => return Err(timed_out(last_failure)),
            Ok(Ok(response)) => return Ok(response),
            Ok(Err(error)) => error,
        };
        if !(repeatable && retry::is_transport_failure(&error)) {
            return Err(error);
        }
        tracing::debug!(%error, "request failed with its connection; retrying");
        if !delay.wait(deadline).await {
            return Err(error);
        }
        last_failure = Some(error);
    }
}
