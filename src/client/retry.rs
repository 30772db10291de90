//! Which failed requests the client sends again by itself, and which it hands back.
//!
//! A request that failed with its connection (the server closed it, an I/O error, the server
//! at its connection limit or shutting down) has an unknown outcome: the server may have
//! carried it out before the connection died. Sending it again is only harmless when doing it
//! twice has the effect of doing it once, so only those APIs are retried automatically; the
//! others fail with the transport error and the caller, who knows what the request meant,
//! decides. A request the connection refused *before* sending it is a different case: the
//! server never saw it, so any API is sent again on the new connection.

use std::time::Duration;

use tokio::time::Instant;

use super::reconnect::jittered;
use super::{ClientConfig, ClientError};
use crate::batch::{CRC_START, MAGIC_WITH_PRODUCER};
use crate::protocol::{ApiKey, ErrorCode, Request};

/// Whether a request of `api` may be sent again after a transport failure left its outcome
/// unknown.
///
/// * Retried: `ApiVersions`, `Metadata`, `Fetch` and `ListOffsets` read and change nothing;
///   `RenewLease` twice extends the same lease twice from "now", as once would; `ReleaseLease`
///   of a lease already released answers `LEASE_LOST`, which tells the caller it is gone, as
///   wanted; `OffsetFetch` reads; `OffsetCommit` of the same offset twice stores it once;
///   `InitProducerId` twice only leaves an id unused; `AlterTopicConfig` sets absolute values,
///   so twice is once; the transaction APIs (see below).
/// * Not retried: `CreateTopic` a second time would answer `TOPIC_EXISTS` for a topic the first
///   attempt created, hiding the success (`DeleteTopic` likewise, with `UNKNOWN_TOPIC`); `AcquireLease` a second time is refused with
///   `LEASE_HELD` by the very lease the first attempt obtained (whose id the caller never
///   learnt), locking the caller out for a TTL; `Produce` a second time appends the batch twice
///   (the producer's sequence numbers, not this layer, make produce retries safe);
///   `DeleteRecords` up to the high watermark a second time deletes the records produced in
///   between too.
pub(crate) fn safe_to_retry(api: ApiKey) -> bool {
    match api {
        ApiKey::ApiVersions
        | ApiKey::Metadata
        | ApiKey::Fetch
        | ApiKey::ListOffsets
        | ApiKey::RenewLease
        | ApiKey::ReleaseLease
        | ApiKey::OffsetFetch
        | ApiKey::OffsetCommit
        | ApiKey::InitProducerId
        | ApiKey::ReplicaFetch
        | ApiKey::LeaderEpochEnd
        | ApiKey::AlterTopicConfig
        | ApiKey::VerifyTransaction
        // A transaction's positions handed over or applied again are the same positions.
        | ApiKey::TxnOffsetCommit
        | ApiKey::EndTxnOffsets => true,
        // `InitTransaction` twice only bumps the producer epoch once more (the first answer was
        // never used); `AddToTransaction` of partitions already added keeps them as they are;
        // `EndTransaction` of an outcome already reached answers success, and a commit the
        // first attempt could not make (the transaction was aborted) is refused again.
        ApiKey::InitTransaction | ApiKey::AddToTransaction | ApiKey::EndTransaction => true,
        ApiKey::CreateTopic
        | ApiKey::DeleteTopic
        | ApiKey::DeleteRecords
        | ApiKey::AcquireLease
        | ApiKey::Produce => false,
        // A second attempt after the first grew the topic would answer INVALID_CONFIG (the
        // count is no longer above the current one), hiding the success.
        ApiKey::CreatePartitions => false,
        // An exchange belongs to its connection: on a new one it must start over.
        ApiKey::AuthenticateStart | ApiKey::AuthenticateContinue => false,
    }
}

/// Whether a request of `api` only reads: it has no outcome that could be unknown, so when one
/// runs out of time after an earlier attempt failed, that failure (the server at its connection
/// limit, say) tells the caller more than "timed out" does ([`super::calls::call_on`]).
pub(crate) fn only_reads(api: ApiKey) -> bool {
    matches!(
        api,
        ApiKey::ApiVersions
            | ApiKey::Metadata
            | ApiKey::Fetch
            | ApiKey::ListOffsets
            | ApiKey::OffsetFetch
            | ApiKey::LeaderEpochEnd
    )
}

/// Whether sending `request` twice has the effect of sending it once: the APIs of
/// [`safe_to_retry`], and the produce of an idempotent producer (a magic-3 batch: the partition
/// recognises a batch it already has by its producer id and sequence, and answers it with its
/// first offsets).
pub(crate) fn is_idempotent(request: &Request) -> bool {
    match request {
        Request::Produce { batch, .. } => batch.get(CRC_START) == Some(&MAGIC_WITH_PRODUCER),
        other => safe_to_retry(other.api_key()),
    }
}

/// Whether a request that failed with `error` may be sent again (to the partition's leader, as
/// the client now knows it): always when the server certainly did not apply it (`NOT_LEADER`,
/// `LEADER_NOT_AVAILABLE`, `NOT_ENOUGH_REPLICAS`); for an idempotent request also after a
/// stale leader epoch, a write not yet replicated enough (`NOT_ENOUGH_REPLICAS_AFTER_APPEND`),
/// or a lost connection.
pub(crate) fn may_resend(error: &ClientError, idempotent: bool) -> bool {
    if let Some(code) = error.code() {
        if code.nothing_applied() {
            return true;
        }
        let transient = code.needs_metadata_refresh()
            || code == ErrorCode::NotEnoughReplicasAfterAppend
            || is_transport_failure(error);
        return idempotent && transient;
    }
    idempotent && (is_transport_failure(error) || matches!(error, ClientError::Connect { .. }))
}

/// Whether `error` means the request's connection failed (rather than the server answering the
/// request): the outcome is unknown and the next request reconnects.
pub(crate) fn is_transport_failure(error: &ClientError) -> bool {
    match error {
        ClientError::Io(_) | ClientError::Disconnected => true,
        ClientError::Server { code, .. } => {
            matches!(
                code,
                ErrorCode::TooManyConnections | ErrorCode::ShuttingDown
            )
        }
        _ => false,
    }
}

/// The pauses between the attempts of one call: capped exponential, with jitter.
pub(crate) struct RetryDelay {
    next: Duration,
    max: Duration,
}

impl RetryDelay {
    /// Starts at the configured initial reconnect backoff.
    pub(crate) fn new(config: &ClientConfig) -> Self {
        Self {
            next: config.reconnect_backoff_initial,
            max: config.reconnect_backoff_max,
        }
    }

    /// Sleeps before the next attempt, or returns `false` at once if that attempt could not
    /// start before `deadline`.
    pub(crate) async fn wait(&mut self, deadline: Instant) -> bool {
        let until = Instant::now() + jittered(self.next);
        self.next = (self.next * 2).min(self.max);
        if until >= deadline {
            return false;
        }
        tokio::time::sleep_until(until).await;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: ErrorCode) -> ClientError {
        ClientError::Server {
            code,
            message: String::new(),
        }
    }

    #[test]
    fn only_what_was_not_applied_or_is_idempotent_is_sent_again() {
        for code in [ErrorCode::LeaderNotAvailable, ErrorCode::NotEnoughReplicas] {
            assert!(may_resend(&server(code), false), "{code}");
        }
        let written = server(ErrorCode::NotEnoughReplicasAfterAppend);
        assert!(!may_resend(&written, false));
        assert!(may_resend(&written, true));
        assert!(!may_resend(&ClientError::Disconnected, false));
        assert!(may_resend(&ClientError::Disconnected, true));
        assert!(!may_resend(&server(ErrorCode::Fenced), true));
        let mut plain = crate::batch::BatchBuilder::new(1);
        plain.push(0, None, Some(b"x"));
        let plain = plain.finish();
        let produce = |batch| Request::Produce {
            topic: "t".into(),
            partition: 0,
            batch,
            acks: None,
        };
        assert!(!is_idempotent(&produce(plain)));
        let mut idempotent = crate::batch::BatchBuilder::with_producer(1, 7, 0);
        idempotent.push(0, None, Some(b"x"));
        let idempotent = idempotent.finish_with_sequence(0);
        assert!(is_idempotent(&produce(idempotent)));
    }
}
