//! Claiming this broker's node id: registering it, and when the store already holds a
//! registration of the node id, deciding whose it is before doing anything else.
//!
//! Why: two processes with one node id would both follow (and one could lead) the same
//! replicas, resetting each other's progress at the leader (the ISR flaps) and writing two
//! different logs under one name. So a registration refused with `AlreadyExists` is examined:
//! - **This process's own** (the same incarnation): a registration this driver gave up as lost
//!   while the store kept it. It happens when etcd restarts: etcd restores its leases with a
//!   fresh TTL, so waiting for the old lease to lapse kept a broker unregistered for a whole
//!   TTL after etcd was back. The old lease is revoked and a new registration taken at once.
//! - **Another process's**: live or dead cannot be told from the value, and the restart of a
//!   broker after `kill -9` looks exactly like a second broker (its old registration is live
//!   for up to its TTL). So the holder's lease is watched for at most its granted TTL (plus
//!   [`HOLDER_WAIT_MARGIN`]): a dead holder's lease only runs down and its key disappears, and
//!   the claim registers at once; a live holder renews it (its remaining TTL goes up) or is
//!   still there after its TTL, and the claim is refused with [`NodeIdInUse`], which names the
//!   holder's address. The driver then stops, and `serve` exits non-zero.
//!
//! A restarted broker therefore waits at most its previous process's TTL (and says so in its
//! log), never forever; a second broker with a live node id is refused within about one renewal
//! interval (a third of the holder's TTL), at most the TTL and the margin.

use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::clock::Clock;
use crate::cluster::meta::{BrokerLease, HeldRegistration, MetaError, MetaStore};
use crate::cluster::{BrokerRegistration, NodeId};

/// How often the lease of another process's registration of this node id is read while the
/// claim waits to see whether that process is alive.
pub const HOLDER_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// How long past the holder's granted TTL the claim still waits for its registration to
/// disappear: etcd removes an expired lease's keys a moment after the TTL, not at its instant.
pub const HOLDER_WAIT_MARGIN: Duration = Duration::from_secs(2);

/// Most registration attempts in one claim (a registration that vanished between the refusal
/// and the read, or this process's own lease revoked, is tried again at once).
pub const CLAIM_ATTEMPTS_MAX: usize = 4;

/// Another live process holds this broker's node id. Nothing was registered.
#[derive(Debug, Clone, Error)]
#[error(
    "node id {node_id} is in use by another live broker at {holder_address} (incarnation \
     {holder_incarnation}; {evidence}): two brokers must never share a node id. Give this broker \
     another --node-id, or stop the broker at {holder_address} first. (A broker restarted after \
     a crash waits for its previous registration to lapse instead of being refused.)"
)]
pub struct NodeIdInUse {
    /// The node id asked for.
    pub node_id: NodeId,
    /// The native address the holder registered.
    pub holder_address: String,
    /// The holder's incarnation.
    pub holder_incarnation: u64,
    /// How the holder was seen to be alive.
    pub evidence: &'static str,
}

/// What became of a claim.
#[derive(Debug)]
pub(super) enum Claim {
    /// Registered: the node id is this process's.
    Registered(BrokerLease),
    /// Another live process holds the node id.
    Refused(NodeIdInUse),
    /// No answer either way now (the store unavailable, the driver stopping), with why; try
    /// again later.
    NotNow(String),
}

/// What the store, the clock and the stop signal of one claim are.
pub(super) struct Claimant<'a> {
    pub store: &'a Arc<dyn MetaStore>,
    pub clock: &'a Arc<dyn Clock>,
    pub stop: &'a CancellationToken,
    pub ttl: Duration,
}

impl Claimant<'_> {
    /// Claims `registration.node_id` for this process. See the module docs.
    pub(super) async fn claim(&self, registration: &BrokerRegistration) -> Claim {
        let node_id = registration.node_id;
        for _attempt in 0..CLAIM_ATTEMPTS_MAX {
            let registered = tokio::time::timeout(
                self.ttl,
                self.store.register_broker(registration.clone(), self.ttl),
            )
            .await;
            match registered {
                Ok(Ok(lease)) => return Claim::Registered(lease),
                Ok(Err(MetaError::AlreadyExists { .. })) => {}
                Ok(Err(error)) => return Claim::NotNow(error.to_string()),
                Err(_elapsed) => {
                    return Claim::NotNow(format!(
                        "registering took longer than the registration TTL ({:?})",
                        self.ttl
                    ))
                }
            }
            let holder = match self.store.broker_registration(node_id).await {
                Ok(Some(holder)) => holder,
                // It lapsed between the refusal and the read: register again.
                Ok(None) => continue,
                Err(error) => return Claim::NotNow(error.to_string()),
            };
            if holder.registration.incarnation == registration.incarnation {
                info!(
                    node_id,
                    lease = holder.lease_id,
                    "the metadata store still holds this process's previous registration (etcd \
                     restarted?); revoking it to register again at once"
                );
                if let Err(error) = self.store.revoke_lease(holder.lease_id).await {
                    return Claim::NotNow(error.to_string());
                }
                continue;
            }
            match self.watch_holder(&holder).await {
                HolderFate::Gone => continue,
                HolderFate::Alive(evidence) => {
                    return Claim::Refused(NodeIdInUse {
                        node_id,
                        holder_address: holder.registration.native_addr.clone(),
                        holder_incarnation: holder.registration.incarnation,
                        evidence,
                    })
                }
                HolderFate::Unknown(reason) => return Claim::NotNow(reason),
            }
        }
        Claim::NotNow(format!(
            "the registration of node id {node_id} kept changing over {CLAIM_ATTEMPTS_MAX} attempts"
        ))
    }

    /// Watches another process's registration of the node id until it disappears (that process
    /// is dead), is renewed or replaced (it is alive), or outlives its TTL (alive).
    async fn watch_holder(&self, holder: &HeldRegistration) -> HolderFate {
        let node_id = holder.registration.node_id;
        let wait = holder.granted_ttl + HOLDER_WAIT_MARGIN;
        info!(
            node_id,
            holder = %holder.registration.native_addr,
            holder_incarnation = holder.registration.incarnation,
            wait_ms = wait.as_millis() as u64,
            "node id is registered by another process; waiting for its registration to lapse \
             (a crashed broker's lapses within its TTL; a live broker's is renewed, and then \
             this broker refuses to start)"
        );
        let deadline = self.clock.now() + wait;
        let mut remaining = holder.remaining_ttl;
        loop {
            tokio::select! {
                () = self.stop.cancelled() => return HolderFate::Unknown("the broker is stopping".into()),
                () = tokio::time::sleep(HOLDER_POLL_INTERVAL) => {}
            }
            match self.store.broker_registration(node_id).await {
                Ok(None) => return HolderFate::Gone,
                Ok(Some(now)) if now.lease_id != holder.lease_id => {
                    return HolderFate::Alive("it registered again while this broker watched")
                }
                Ok(Some(now)) if now.remaining_ttl > remaining => {
                    return HolderFate::Alive(
                        "its registration was renewed while this broker watched",
                    )
                }
                Ok(Some(now)) => remaining = now.remaining_ttl,
                Err(error) => return HolderFate::Unknown(error.to_string()),
            }
            if self.clock.now() >= deadline {
                return HolderFate::Alive("its registration outlived its TTL");
            }
        }
    }
}

/// What watching another process's registration showed.
enum HolderFate {
    /// It disappeared: that process is dead.
    Gone,
    /// That process is alive, with how it showed.
    Alive(&'static str),
    /// The store could not tell (unavailable, or this broker is stopping).
    Unknown(String),
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::clock::SystemClock;
    use crate::cluster::meta::MemoryMetaStore;

    const TTL: Duration = Duration::from_secs(1);

    fn registration(incarnation: u64) -> BrokerRegistration {
        BrokerRegistration {
            node_id: 4,
            native_addr: format!("127.0.0.1:{}", 9000 + incarnation),
            kafka_addr: None,
            incarnation,
            registered_at_ms: None,
        }
    }

    async fn claim(store: &Arc<dyn MetaStore>, incarnation: u64) -> Claim {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let stop = CancellationToken::new();
        Claimant {
            store,
            clock: &clock,
            stop: &stop,
            ttl: TTL,
        }
        .claim(&registration(incarnation))
        .await
    }

    /// A claim of a node id whose holder is alive (it renews its registration) is refused,
    /// naming the holder's address, and the holder keeps its registration.
    #[tokio::test]
    async fn a_claim_of_a_live_holders_node_id_is_refused_naming_its_address() {
        let store: Arc<dyn MetaStore> = Arc::new(MemoryMetaStore::new());
        let holder = store.register_broker(registration(1), TTL).await.unwrap();
        match claim(&store, 2).await {
            Claim::Refused(error) => {
                assert_eq!(error.holder_address, "127.0.0.1:9001");
                assert!(error.to_string().contains("--node-id"), "{error}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        let held = store.broker_registration(4).await.unwrap().unwrap();
        assert_eq!(held.lease_id, holder.lease_id());
    }

    /// A dead holder (it stopped renewing, as a process killed with -9) is waited out: the
    /// claim registers once its registration lapses, within about its TTL.
    #[tokio::test]
    async fn a_claim_registers_once_a_dead_holders_registration_lapses() {
        let store: Arc<dyn MetaStore> = Arc::new(MemoryMetaStore::new());
        store
            .register_broker(registration(1), TTL)
            .await
            .unwrap()
            .abandon();
        let started = Instant::now();
        match claim(&store, 2).await {
            Claim::Registered(lease) => assert_eq!(lease.registration().incarnation, 2),
            other => panic!("expected a registration, got {other:?}"),
        }
        assert!(started.elapsed() < TTL + HOLDER_WAIT_MARGIN);
    }

    /// This process's own registration, which the store kept after the process gave it up (as
    /// etcd does across a restart), is revoked and replaced at once, without waiting it out.
    #[tokio::test]
    async fn a_claim_replaces_this_processs_own_kept_registration_at_once() {
        let store: Arc<dyn MetaStore> = Arc::new(MemoryMetaStore::new());
        let old = store.register_broker(registration(7), TTL).await.unwrap();
        let old_lease = old.lease_id();
        old.abandon();
        let started = Instant::now();
        match claim(&store, 7).await {
            Claim::Registered(lease) => assert_ne!(lease.lease_id(), old_lease),
            other => panic!("expected a registration, got {other:?}"),
        }
        assert!(
            started.elapsed() < TTL / 2,
            "it waited {:?}",
            started.elapsed()
        );
    }
}
