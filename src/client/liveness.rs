//! Noticing a server that stopped answering (a gray failure): how long each request may wait
//! for its answer, and the watch that fails a connection whose server is past that.
//!
//! Why the connection, not the call, decides: a frozen server (SIGSTOP, a stalled VM, a
//! listener whose process hangs) still accepts TCP connections in the kernel, so connecting
//! proves nothing, and a call that merely gives up waiting leaves the connection looking
//! healthy for the next call. Failing the connection instead turns the silence into an
//! ordinary transport failure: every request on it fails with an unknown outcome, those safe to
//! repeat are sent again (`retry`), and the reconnect (`reconnect`) moves on to the next
//! address. One frozen broker among `--addr A,B,C` then costs a command about
//! [`ClientConfig::attempt_timeout`], not its whole request timeout.
//!
//! Why only the oldest unanswered request is watched: the server answers a connection's
//! requests in order, so a request queued behind a long-polling fetch is not late while the
//! fetch may still wait. The clock of a request starts when it becomes the oldest (or when it
//! is written, if it is the only one), and runs for its patience ([`Patience::of`]):
//! * requests answered from memory (see [`answered_promptly`]): the attempt timeout;
//! * a fetch: its `max_wait` plus [`ClientConfig::fetch_slack`] (the server holds it on purpose);
//! * everything else (a produce waiting for a sync or for replicas, a topic created across a
//!   cluster, a lease grant written durably, a broker's replication requests): no watch; the
//!   caller's own timeout bounds it, as before.
//!
//! Why a connection must be answered once before it carries an unwatched request
//! ([`needs_an_answered_connection`]): the watch cannot tell a frozen server from a busy one
//! on a request the server may hold, and most such requests (a lease grant, a topic creation,
//! a plain produce) must not be sent twice, so once written to a frozen server they could only
//! wait for the caller's timeout and end with an unknown outcome. A connection whose server
//! has answered something on it (its first exchange: authentication, or a prompt request,
//! an `ApiVersions` sent for the purpose if the caller's is not one) has shown a working
//! process behind it, not only a kernel accepting connections; one that has not answered
//! within the attempt timeout is failed before anything unwatched is written on it, so the
//! request goes, unsent, to the next address. A server that freezes later, between the first
//! exchange and the request, still holds it: that narrower window is what remains.

use std::sync::Arc;
use std::time::Duration;

use super::connection::Shared;
use super::{ClientConfig, ClientError};
use crate::protocol::{ApiKey, Request};

/// The two settings a request's patience is made of, kept by each connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Patience {
    attempt_timeout: Duration,
    fetch_slack: Duration,
}

impl Patience {
    /// From the client's configuration.
    pub(crate) fn new(config: &ClientConfig) -> Self {
        Self {
            attempt_timeout: config.attempt_timeout,
            fetch_slack: config.fetch_slack,
        }
    }

    /// How long the server may take to answer `request` once it is the oldest unanswered
    /// request on its connection, or `None` when only the caller's timeout bounds it.
    pub(crate) fn of(&self, request: &Request) -> Option<Duration> {
        match request {
            Request::Fetch { max_wait_ms, .. } => {
                Some(Duration::from_millis(u64::from(*max_wait_ms)) + self.fetch_slack)
            }
            other if answered_promptly(other.api_key()) => Some(self.attempt_timeout),
            _ => None,
        }
    }
}

/// Whether the server answers requests of `api` from what it holds in memory, without waiting
/// for a disk sync, a replica, etcd or new data: a late answer then means a server that is not
/// working, not one that is busy on the caller's behalf. Every one of them is also safe to
/// repeat (`retry::safe_to_retry`), or belongs to a connection's setup (authentication), so
/// failing its connection loses nothing.
pub(crate) fn answered_promptly(api: ApiKey) -> bool {
    matches!(
        api,
        ApiKey::ApiVersions
            | ApiKey::Metadata
            | ApiKey::ListOffsets
            | ApiKey::InitProducerId
            | ApiKey::AuthenticateStart
            | ApiKey::AuthenticateContinue
    )
}

/// Whether a request of `api` is written only on a connection whose server has answered
/// something on it: every request not answered promptly, since only those are watched
/// promptly (see the module documentation). A prompt request may be the connection's first
/// exchange itself.
pub(crate) fn needs_an_answered_connection(api: ApiKey) -> bool {
    !answered_promptly(api)
}

/// The error a connection fails with when its server let a request wait past its patience.
fn unresponsive(peer: std::net::SocketAddr, waited: Duration) -> ClientError {
    ClientError::Io(Arc::new(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "no answer from {peer} within {waited:?}: the server is frozen or overloaded \
             (the connection was dropped; requests safe to repeat go to the next address)"
        ),
    )))
}

/// Watches one connection until it fails: whenever its oldest unanswered request has waited
/// past its patience, fails the connection. Runs as the connection's third task, beside the
/// reader and the writer, and is woken whenever the oldest request changes.
pub(super) async fn watch(shared: Arc<Shared>, peer: std::net::SocketAddr) {
    loop {
        if shared.is_failed() {
            return;
        }
        match shared.plan_watch() {
            None => shared.head_changed().await,
            Some((due, patience)) => {
                tokio::select! {
                    () = tokio::time::sleep_until(due) => {
                        // Still the same state? The oldest may have been answered just now.
                        if shared
                            .oldest_due()
                            .is_some_and(|(due, _)| due <= tokio::time::Instant::now())
                        {
                            shared.fail(unresponsive(peer, patience));
                            return;
                        }
                    }
                    () = shared.head_changed() => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves: only what the server answers from memory is held to the attempt timeout; a fetch
    // gets its own wait on top, and a produce (which waits for syncs and replicas) no watch.
    #[test]
    fn prompt_requests_get_the_attempt_timeout_and_long_polls_their_wait() {
        let config = ClientConfig::default();
        let patience = |request: &Request| Patience::new(&config).of(request);
        let metadata = Request::Metadata {
            topics: Vec::new(),
            cluster: true,
        };
        assert_eq!(patience(&metadata), Some(config.attempt_timeout));
        assert_eq!(
            patience(&Request::ApiVersions),
            Some(config.attempt_timeout)
        );
        let fetch = Request::Fetch {
            topic: "t".into(),
            partition: 0,
            offset: 0,
            max_bytes: 1,
            max_wait_ms: 10_000,
            read_committed: None,
        };
        assert_eq!(
            patience(&fetch),
            Some(Duration::from_secs(10) + config.fetch_slack)
        );
        let produce = Request::Produce {
            topic: "t".into(),
            partition: 0,
            batch: bytes::Bytes::new(),
            acks: None,
        };
        assert_eq!(patience(&produce), None);
        assert!(!answered_promptly(ApiKey::CreateTopic));
        assert!(!answered_promptly(ApiKey::AcquireLease));
    }
}
