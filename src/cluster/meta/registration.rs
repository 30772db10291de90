//! A broker's registration, held: the lease keeper that renews it in the background and the
//! conservative local answer to "am I still registered?".
//!
//! etcd decides when a lease expires, by its own clock, and restarts the countdown when its
//! leader changes; the broker can only know when it last heard "renewed". So the handle computes
//! a local deadline on a monotonic clock: *the moment the last successful keep-alive was sent* +
//! TTL − margin. Until then etcd cannot have expired the lease (its countdown started after the
//! request was sent, and the margin covers clock-rate differences); after it, the broker must
//! behave as unregistered (a leader stops acknowledging). Loss is final: once the deadline
//! passed, a late keep-alive success does not bring the handle back, since for a while it said
//! "lost" and others may have acted on the lease's expiry; the broker registers again instead.
//!
//! The keeper runs as a task; the store implementation supplies the two calls it needs
//! ([`LeaseKeepAlive`]). Dropping the handle revokes the lease (best effort), `close` revokes
//! and waits, `abandon` stops renewing without revoking (what a crash looks like to etcd).

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::{oneshot, watch};

use super::MetaError;
use crate::clock::Clock;
use crate::cluster::backoff::Backoff;
use crate::cluster::BrokerRegistration;

/// Keep-alives per TTL: one every `ttl / KEEP_ALIVES_PER_TTL`, so two can fail before the local
/// deadline passes.
pub const KEEP_ALIVES_PER_TTL: u32 = 3;

/// Retries per TTL after failed keep-alives, at the slowest: the wait before the next try grows
/// (jittered, see `crate::cluster::backoff`) from `ttl / KEEP_ALIVE_FIRST_RETRIES_PER_TTL` up to
/// `ttl / KEEP_ALIVE_RETRIES_PER_TTL`. Not slower: the lease is still valid and worth keeping
/// until the local deadline, and a broker holds only one, so its retries cost little.
pub const KEEP_ALIVE_RETRIES_PER_TTL: u32 = 10;

/// Retries per TTL right after a keep-alive failed (the first wait's step is
/// `ttl / KEEP_ALIVE_FIRST_RETRIES_PER_TTL`): a blip (an etcd leader change) is retried soon.
pub const KEEP_ALIVE_FIRST_RETRIES_PER_TTL: u32 = 40;

/// The local deadline's margin, in percent of the TTL: the deadline is the last successful
/// keep-alive's send time + TTL × (100 − this) / 100.
pub const LOCAL_DEADLINE_MARGIN_PERCENT: u32 = 20;

/// Longest wait between two checks of the local deadline while waiting for the loss of a
/// registration (the clock may be a test's manual clock, which tokio's timer does not follow).
pub const LOSS_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// What the keeper task needs from a store to hold one lease.
pub trait LeaseKeepAlive: Send + 'static {
    /// Renews the lease once: `Some(ttl)` with the TTL the store renewed it for, `None` when the
    /// store no longer has it (expired or revoked), an error when the store could not be asked.
    fn keep_alive(&mut self) -> BoxFuture<'_, Result<Option<Duration>, MetaError>>;

    /// Revokes the lease: the registration key disappears at once.
    fn revoke(&mut self) -> BoxFuture<'_, Result<(), MetaError>>;
}

/// Why a registration is no longer held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegistrationLoss {
    /// No keep-alive succeeded before the local deadline (the store was unreachable, or the
    /// broker was paused).
    DeadlinePassed,
    /// The store answered that the lease is gone (it expired there, or someone revoked it).
    Expired,
    /// The handle was closed or dropped: the lease was revoked.
    Closed,
    /// The handle was abandoned: keep-alives stopped, the lease expires on its own.
    Abandoned,
}

impl fmt::Display for RegistrationLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RegistrationLoss::DeadlinePassed => "no keep-alive succeeded before the local deadline",
            RegistrationLoss::Expired => "the metadata store expired the lease",
            RegistrationLoss::Closed => "the registration was revoked",
            RegistrationLoss::Abandoned => "keep-alives were stopped",
        })
    }
}

/// What the handle tells the keeper task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Command {
    Keep,
    Revoke,
    Abandon,
}

#[derive(Debug)]
struct State {
    valid_until: Instant,
    loss: Option<RegistrationLoss>,
}

/// What the handle and its keeper task share.
#[derive(Debug)]
struct Shared {
    clock: Arc<dyn Clock>,
    ttl: Duration,
    state: Mutex<State>,
    /// Bumped on every change of `state`, to wake `lost()`.
    changed: watch::Sender<u64>,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The loss, if any, making a passed deadline final.
    fn loss(&self) -> Option<RegistrationLoss> {
        let now = self.clock.now();
        let mut state = self.state();
        if state.loss.is_none() && now >= state.valid_until {
            state.loss = Some(RegistrationLoss::DeadlinePassed);
            drop(state);
            self.changed.send_modify(|generation| *generation += 1);
            return Some(RegistrationLoss::DeadlinePassed);
        }
        state.loss
    }

    fn mark_lost(&self, loss: RegistrationLoss) {
        let mut state = self.state();
        if state.loss.is_none() {
            state.loss = Some(loss);
        }
        drop(state);
        self.changed.send_modify(|generation| *generation += 1);
    }

    /// A keep-alive sent at `sent_at` succeeded with `granted` TTL: extends the deadline, unless
    /// it passed meanwhile (loss is final).
    fn renewed(&self, sent_at: Instant, granted: Duration) {
        if self.loss().is_some() {
            return;
        }
        let deadline = local_deadline(sent_at, self.ttl, granted);
        let mut state = self.state();
        if deadline > state.valid_until {
            state.valid_until = deadline;
        }
    }
}

/// `sent_at` + the shorter of the asked and granted TTL, less the margin.
fn local_deadline(sent_at: Instant, asked: Duration, granted: Duration) -> Instant {
    let ttl = asked.min(granted);
    sent_at + ttl * (100 - LOCAL_DEADLINE_MARGIN_PERCENT) / 100
}

/// A broker registration, kept alive in the background. See the module docs.
pub struct BrokerLease {
    registration: BrokerRegistration,
    lease_id: i64,
    shared: Arc<Shared>,
    command: watch::Sender<Command>,
    closed: Option<oneshot::Receiver<Result<(), MetaError>>>,
}

impl fmt::Debug for BrokerLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerLease")
            .field("node_id", &self.registration.node_id)
            .field("lease_id", &self.lease_id)
            .field("valid", &self.is_valid())
            .finish()
    }
}

impl BrokerLease {
    /// Starts holding lease `lease_id`, granted by a request sent at `granted_at` for `ttl`
    /// (the store granted `granted_ttl`), renewed through `keeper` on the current tokio runtime.
    /// For store implementations.
    pub fn start(
        registration: BrokerRegistration,
        lease_id: i64,
        clock: Arc<dyn Clock>,
        ttl: Duration,
        granted_at: Instant,
        granted_ttl: Duration,
        keeper: impl LeaseKeepAlive,
    ) -> Self {
        let (changed, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            clock,
            ttl,
            state: Mutex::new(State {
                valid_until: local_deadline(granted_at, ttl, granted_ttl),
                loss: None,
            }),
            changed,
        });
        let (command, commands) = watch::channel(Command::Keep);
        let (closed_sender, closed) = oneshot::channel();
        tokio::spawn(keep(shared.clone(), keeper, commands, closed_sender));
        Self {
            registration,
            lease_id,
            shared,
            command,
            closed: Some(closed),
        }
    }

    /// What is registered.
    pub fn registration(&self) -> &BrokerRegistration {
        &self.registration
    }

    /// The store's id of the lease (etcd's lease id).
    pub fn lease_id(&self) -> i64 {
        self.lease_id
    }

    /// The TTL asked for.
    pub fn ttl(&self) -> Duration {
        self.shared.ttl
    }

    /// True while the registration certainly holds: before the local deadline, and not lost.
    pub fn is_valid(&self) -> bool {
        self.shared.loss().is_none()
    }

    /// The local deadline (see the module docs), or `None` once the registration is lost.
    pub fn valid_until(&self) -> Option<Instant> {
        if self.shared.loss().is_some() {
            return None;
        }
        Some(self.shared.state().valid_until)
    }

    /// Why the registration is lost, or `None` while it holds.
    pub fn loss(&self) -> Option<RegistrationLoss> {
        self.shared.loss()
    }

    /// Resolves when the registration is lost, with why.
    pub async fn lost(&self) -> RegistrationLoss {
        let mut changes = self.shared.changed.subscribe();
        loop {
            if let Some(loss) = self.shared.loss() {
                return loss;
            }
            let remaining = self
                .shared
                .state()
                .valid_until
                .saturating_duration_since(self.shared.clock.now());
            tokio::select! {
                _ = changes.changed() => {}
                () = tokio::time::sleep(remaining.min(LOSS_CHECK_INTERVAL)) => {}
            }
        }
    }

    /// Revokes the registration and waits for the store's answer.
    pub async fn close(mut self) -> Result<(), MetaError> {
        self.command.send_replace(Command::Revoke);
        match self.closed.take() {
            Some(closed) => closed.await.unwrap_or(Ok(())),
            None => Ok(()),
        }
    }

    /// Stops renewing without revoking, as a crashed broker would: the store expires the lease
    /// after its TTL. For tests and fault injection.
    pub fn abandon(self) {
        self.command.send_replace(Command::Abandon);
    }
}

impl Drop for BrokerLease {
    fn drop(&mut self) {
        // After `abandon` the command is already `Abandon` and stays so; otherwise revoke (best
        // effort: the task may be gone with its runtime, and then the lease expires by TTL).
        self.command.send_if_modified(|command| {
            if *command == Command::Keep {
                *command = Command::Revoke;
                true
            } else {
                false
            }
        });
    }
}

/// The keeper task: renews every `ttl / KEEP_ALIVES_PER_TTL` until told to stop or the
/// registration is lost.
async fn keep(
    shared: Arc<Shared>,
    mut keeper: impl LeaseKeepAlive,
    mut commands: watch::Receiver<Command>,
    closed: oneshot::Sender<Result<(), MetaError>>,
) {
    let interval = shared.ttl / KEEP_ALIVES_PER_TTL;
    let mut retries = Backoff::new(
        shared.ttl / KEEP_ALIVE_FIRST_RETRIES_PER_TTL,
        shared.ttl / KEEP_ALIVE_RETRIES_PER_TTL,
    );
    let mut wait = interval;
    // Failed keep-alives in a row: the first is a warning, the retries only debug lines, so a
    // broker cut off from the store does not log one per retry.
    let mut failures: u32 = 0;
    loop {
        let command = tokio::select! {
            changed = commands.changed() => match changed {
                Ok(()) => *commands.borrow_and_update(),
                Err(_) => Command::Revoke,
            },
            () = tokio::time::sleep(wait) => Command::Keep,
        };
        match command {
            Command::Keep => {}
            Command::Abandon => {
                shared.mark_lost(RegistrationLoss::Abandoned);
                return;
            }
            Command::Revoke => {
                shared.mark_lost(RegistrationLoss::Closed);
                let result = revoke(&mut keeper, interval).await;
                let _unwanted = closed.send(result);
                return;
            }
        }
        if let Some(loss) = shared.loss() {
            if loss == RegistrationLoss::DeadlinePassed {
                // Others may already act on the expiry; make the store agree at once.
                if let Err(error) = revoke(&mut keeper, interval).await {
                    tracing::debug!(%error, "could not revoke a lapsed registration");
                }
            }
            return;
        }
        let sent_at = shared.clock.now();
        match tokio::time::timeout(interval, keeper.keep_alive()).await {
            Ok(Ok(Some(granted))) => {
                shared.renewed(sent_at, granted);
                wait = interval;
                retries.reset();
                if failures > 0 {
                    tracing::info!(failures, "registration keep-alive succeeded again");
                    failures = 0;
                }
            }
            Ok(Ok(None)) => {
                tracing::warn!("the broker registration's lease is gone from the metadata store");
                shared.mark_lost(RegistrationLoss::Expired);
                return;
            }
            Ok(Err(error)) => {
                failures += 1;
                if failures == 1 {
                    tracing::warn!(%error, "registration keep-alive failed; retrying");
                } else {
                    tracing::debug!(%error, failures, "registration keep-alive failed again");
                }
                wait = retries.next_delay();
            }
            Err(_elapsed) => {
                failures += 1;
                if failures == 1 {
                    tracing::warn!(timeout = ?interval, "registration keep-alive timed out; retrying");
                } else {
                    tracing::debug!(timeout = ?interval, failures, "registration keep-alive timed out again");
                }
                wait = retries.next_delay();
            }
        }
    }
}

/// Revokes with a time limit.
async fn revoke(keeper: &mut impl LeaseKeepAlive, limit: Duration) -> Result<(), MetaError> {
    match tokio::time::timeout(limit, keeper.revoke()).await {
        Ok(result) => result,
        Err(_elapsed) => Err(MetaError::Unavailable {
            endpoints: "the metadata store".into(),
            reason: format!("revoking the registration took longer than {limit:?}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::*;
    use crate::clock::ManualClock;

    #[derive(Clone, Default)]
    struct FakeLease {
        renewals: Arc<AtomicUsize>,
        revoked: Arc<AtomicBool>,
        gone: Arc<AtomicBool>,
    }

    impl LeaseKeepAlive for FakeLease {
        fn keep_alive(&mut self) -> BoxFuture<'_, Result<Option<Duration>, MetaError>> {
            self.renewals.fetch_add(1, Ordering::SeqCst);
            let gone = self.gone.load(Ordering::SeqCst);
            Box::pin(async move { Ok((!gone).then_some(Duration::from_secs(10))) })
        }

        fn revoke(&mut self) -> BoxFuture<'_, Result<(), MetaError>> {
            self.revoked.store(true, Ordering::SeqCst);
            Box::pin(async { Ok(()) })
        }
    }

    /// Lease `lease_id`, granted now on `clock` for `ttl` and renewed through `fake`.
    fn held(
        lease_id: i64,
        clock: &Arc<ManualClock>,
        ttl: Duration,
        fake: &FakeLease,
    ) -> BrokerLease {
        BrokerLease::start(
            registration(),
            lease_id,
            clock.clone(),
            ttl,
            clock.now(),
            ttl,
            fake.clone(),
        )
    }

    fn registration() -> BrokerRegistration {
        BrokerRegistration {
            node_id: 1,
            native_addr: "127.0.0.1:9000".into(),
            kafka_addr: None,
            incarnation: 7,
            registered_at_ms: None,
        }
    }

    /// The local deadline is the grant's send time + 80% of the TTL, on the injected clock, and
    /// passing it loses the registration for good.
    #[tokio::test(start_paused = true)]
    async fn local_deadline_is_conservative_and_final() {
        let clock = Arc::new(ManualClock::new());
        let ttl = Duration::from_secs(10);
        let fake = FakeLease::default();
        let lease = held(1, &clock, ttl, &fake);
        assert!(lease.is_valid());
        clock.advance(Duration::from_millis(7_999));
        assert!(lease.is_valid());
        clock.advance(Duration::from_millis(1));
        assert!(!lease.is_valid());
        assert_eq!(lease.lost().await, RegistrationLoss::DeadlinePassed);
        // A keep-alive that succeeds afterwards does not bring it back.
        tokio::time::sleep(ttl).await;
        assert!(!lease.is_valid());
    }

    /// Keep-alives move the deadline; the store saying "gone" loses the registration.
    #[tokio::test(start_paused = true)]
    async fn keep_alives_extend_until_the_store_says_gone() {
        let clock = Arc::new(ManualClock::new());
        let ttl = Duration::from_secs(3);
        let fake = FakeLease::default();
        let lease = held(1, &clock, ttl, &fake);
        let first = lease.valid_until().unwrap();
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        assert!(fake.renewals.load(Ordering::SeqCst) >= 1);
        assert!(lease.valid_until().unwrap() > first);
        fake.gone.store(true, Ordering::SeqCst);
        assert_eq!(lease.lost().await, RegistrationLoss::Expired);
    }

    /// Dropping the handle revokes; abandoning it does not.
    #[tokio::test(start_paused = true)]
    async fn drop_revokes_and_abandon_does_not() {
        let clock = Arc::new(ManualClock::new());
        let ttl = Duration::from_secs(3);
        let dropped = FakeLease::default();
        let lease = held(1, &clock, ttl, &dropped);
        drop(lease);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(dropped.revoked.load(Ordering::SeqCst));

        let abandoned = FakeLease::default();
        let lease = held(2, &clock, ttl, &abandoned);
        lease.abandon();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!abandoned.revoked.load(Ordering::SeqCst));
        assert_eq!(abandoned.renewals.load(Ordering::SeqCst), 0);

        let closed = FakeLease::default();
        let lease = held(3, &clock, ttl, &closed);
        lease.close().await.unwrap();
        assert!(closed.revoked.load(Ordering::SeqCst));
    }
}
