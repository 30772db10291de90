//! The lease keeper: the background task that renews a producer's lease and stops the producer
//! the moment it can no longer be sure it holds the partition.
//!
//! It runs apart from the batching task so that renewals never wait behind batches (a slow
//! produce must not let the lease lapse), and it is the only place that decides the lease is
//! gone: fenced, lost, or not confirmed for a whole TTL.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Shared;
use crate::client::{Client, ClientError, Lease};

/// Renews the lease every third of its TTL until fenced or aborted. A transient failure (the
/// client reconnects on its own) is retried sooner; the lease itself says when it is too late
/// (`LEASE_LOST`). If no renewal succeeds for a whole TTL, the lease may have expired on the
/// server: the producer stops then rather than go on believing it leads.
pub(super) async fn keep_lease(client: Client, shared: Arc<Shared>, lease: Lease) {
    let period = |ttl_ms: u64| Duration::from_millis((ttl_ms / 3).max(1));
    let mut ttl = Duration::from_millis(lease.ttl_ms);
    let mut every = period(lease.ttl_ms);
    // When the lease was last known live: the send time of the last successful renewal.
    let mut confirmed = Instant::now();
    let mut next = confirmed + every;
    loop {
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        let deadline = confirmed + ttl;
        let renewal = client.renew_lease(&shared.topic, shared.partition, lease.lease_id);
        match tokio::time::timeout_at(deadline, renewal).await {
            Ok(Ok(renewed)) => {
                every = period(renewed.ttl_ms);
                ttl = Duration::from_millis(renewed.ttl_ms);
                confirmed = sent;
                next = sent + every;
            }
            Ok(Err(error)) if error.is_fencing() => {
                shared.kill(error);
                return;
            }
            Ok(Err(error)) if Instant::now() < deadline => {
                tracing::warn!(topic = %shared.topic, partition = shared.partition, %error, "lease renewal failed; retrying");
                next = (Instant::now() + every / 4).min(deadline);
            }
            _ => {
                shared.kill(ClientError::LeaseExpired {
                    unconfirmed_for: confirmed.elapsed(),
                });
                return;
            }
        }
    }
}
