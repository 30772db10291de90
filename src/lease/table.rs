//! The lease table: who may write to which partition, and with which epoch.
//!
//! A lease is a *liveness* tool, not a safety tool. Its TTL exists so that
//! when a holder crashes or is partitioned away, its partition can be handed
//! to someone else without a person stepping in. Safety comes from the epoch
//! (fencing token) attached to every grant: the storage writer refuses writes
//! carrying an epoch older than the one it has installed, so a stale holder
//! that still *believes* it owns the partition cannot corrupt it. Issuance
//! (this table) and enforcement (the writer) are deliberately kept apart: the
//! table never decides whether a write is allowed, and the writer never
//! decides who holds a lease. The only bridge between them is
//! [`EpochInstaller`], through which a new epoch is made durable and installed
//! in the writer *before* the table hands it out, so no client can ever hold
//! an epoch the writer has not yet fenced everyone else out with.
//!
//! Time is always passed in as a monotonic [`Instant`] (`now`); the table
//! never reads the clock itself, which keeps tests deterministic and keeps
//! wall-clock jumps from expiring or resurrecting leases.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rand::Rng;

use crate::domain::{ConfigError, Quantity};

/// Shortest lease a client may ask for by default. Shorter leases would make
/// holders spend most of their time renewing and turn scheduling hiccups into
/// spurious failovers.
pub const DEFAULT_MIN_TTL_MS: u64 = 100;

/// Longest lease a client may ask for by default (5 minutes). This bounds how
/// long a crashed holder can keep its partition unavailable.
pub const DEFAULT_MAX_TTL_MS: u64 = 5 * 60 * 1000;

/// Default cap on the number of slots the table will create. It only exists
/// as a backstop: callers are expected to validate that a partition exists
/// before acquiring it, so the real bound is the number of partitions.
pub const DEFAULT_MAX_SLOTS: usize = 1 << 20;

/// Longest holder name accepted, in bytes. Holder names are echoed back in
/// errors and metadata, so an unbounded name would let one client make every
/// other client's responses (and the server's memory) arbitrarily large.
pub const MAX_HOLDER_BYTES: usize = 256;

/// Makes a new epoch durable and installs it in the partition's writer.
///
/// This is the one place where issuance meets enforcement: the table calls
/// [`install_epoch`](Self::install_epoch) before recording a grant, so by the
/// time a client learns its epoch, the writer already rejects every older
/// one. Implementations are expected to be the writer (or a handle on it) of
/// exactly the partition being acquired.
pub trait EpochInstaller {
    /// Why installing an epoch failed (e.g. the fsync of the epoch file).
    type Error: std::error::Error + Send + Sync + 'static;

    /// The epoch the writer currently enforces (0 if none was ever installed).
    fn current_epoch(&self) -> u64;

    /// Durably records `epoch` and installs it in the writer, so that writes
    /// carrying older epochs are refused from now on.
    ///
    /// May block (it typically fsyncs); async callers should run
    /// [`LeaseTable::acquire`] on a blocking thread. On error no lease is
    /// granted and the table's state is unchanged.
    fn install_epoch(&self, epoch: u64) -> Result<(), Self::Error>;

    /// Called when the acquire finds the partition's previous lease expired (it ran out
    /// unrenewed and unreleased), before the new grant; for metrics. Does nothing by default.
    fn lease_expired(&self, _expired: &ExpiredLease) {}
}

/// A lease found run out (unrenewed, unreleased) when the table next looked at its partition:
/// what the metrics keep of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredLease {
    /// Its epoch.
    pub epoch: u64,
    /// Its holder.
    pub holder: String,
    /// How long before it was found it ran out (it is found lazily, by the next acquire,
    /// renewal or release on the partition).
    pub expired_for: std::time::Duration,
}

/// Tunables of a [`LeaseTable`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Shortest TTL a client may request, in milliseconds.
    pub min_ttl_ms: u64,
    /// Longest TTL a client may request, in milliseconds.
    pub max_ttl_ms: u64,
    /// Backstop on how many partition slots may exist at once; see
    /// [`DEFAULT_MAX_SLOTS`].
    pub max_slots: usize,
}

impl LeaseConfig {
    /// Checks the bounds: `min_ttl_ms` at least 1 and at most `max_ttl_ms`, `max_slots` at
    /// least 1.
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_positive("min_ttl_ms", Quantity::Millis(self.min_ttl_ms))?;
        ConfigError::check_at_most(
            "min_ttl_ms",
            Quantity::Millis(self.min_ttl_ms),
            "max_ttl_ms",
            Quantity::Millis(self.max_ttl_ms),
        )?;
        ConfigError::check_positive("max_slots", Quantity::count(self.max_slots))
    }
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            min_ttl_ms: DEFAULT_MIN_TTL_MS,
            max_ttl_ms: DEFAULT_MAX_TTL_MS,
            max_slots: DEFAULT_MAX_SLOTS,
        }
    }
}

/// A successful [`LeaseTable::acquire`].
///
/// `Debug` redacts `lease_id`: the id is the bearer credential for renew and
/// release, so it must not end up in logs by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Grant {
    /// The fencing token the holder must attach to its writes. It is already
    /// installed in the writer when this value is returned.
    pub epoch: u64,
    /// Random, unguessable id that proves ownership on renew and release.
    pub lease_id: u128,
    /// How long the lease lasts without a renewal, in milliseconds.
    pub ttl_ms: u64,
    /// The holder name the lease was granted to.
    pub holder: String,
    /// Whether this grant joined the live lease of [`SHARED_HOLDER`] (the same epoch and lease
    /// id, nothing installed) rather than granting a new epoch.
    pub joined: bool,
}

/// The one holder name whose lease is shared: the Kafka transaction coordinators'. On a cluster
/// the transactional ids that write one partition are often coordinated by different brokers,
/// and Kafka lets their transactions write the partition at once, so a grant to this holder
/// while it holds the partition's live lease **joins** that lease (the same epoch and lease id,
/// its expiry extended to the later of the two) instead of being refused as held. Any other
/// holder is refused while it is live, and it is refused while any other holder's lease is live:
/// a transaction never fences a native holder. What fences a deposed coordinator is the
/// coordinator epoch its markers carry, checked by the partition's producer state
/// (docs/kafka.md, "Transactions on a cluster"). The native listener refuses the name
/// to clients.
pub const SHARED_HOLDER: &str = "kafka-transactions";

impl fmt::Debug for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grant")
            .field("epoch", &self.epoch)
            .field("lease_id", &"<redacted>")
            .field("ttl_ms", &self.ttl_ms)
            .field("holder", &self.holder)
            .finish()
    }
}

/// A successful [`LeaseTable::renew`]: the lease now lasts `ttl_ms` from the
/// `now` passed to `renew`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewed {
    /// The epoch of the renewed lease (unchanged by renewal).
    pub epoch: u64,
    /// The TTL the lease was granted with, in milliseconds.
    pub ttl_ms: u64,
}

/// What [`LeaseTable::lookup`] reveals about a live lease. It deliberately
/// omits the lease id, which is a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    /// Who holds the lease.
    pub holder: String,
    /// The epoch granted with the lease.
    pub epoch: u64,
    /// Milliseconds until the lease expires unless renewed (rounded up, so a
    /// live lease never reports 0).
    pub expires_in_ms: u64,
}

/// Why a lease operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Someone else (or the caller itself, under another lease) holds a live
    /// lease on the partition; retry after `expires_in_ms`.
    #[error(
        "lease on {topic}/{partition} is held by {holder:?} (epoch {current_epoch}) \
         for another {expires_in_ms} ms"
    )]
    Held {
        /// Topic of the partition.
        topic: String,
        /// Index of the partition.
        partition: u32,
        /// Current holder.
        holder: String,
        /// Milliseconds until the current lease expires unless renewed.
        expires_in_ms: u64,
        /// Epoch of the current lease.
        current_epoch: u64,
    },
    /// The caller's lease is gone (expired, released, or superseded), or its
    /// id was never the live lease's. The holder must stop writing and
    /// re-acquire, which yields a new epoch.
    #[error("{}", lost_message(topic, *partition, *current_epoch, live.as_ref()))]
    Lost {
        /// Topic of the partition.
        topic: String,
        /// Index of the partition.
        partition: u32,
        /// Last epoch this table granted for the partition (0 if none), which
        /// is the epoch the writer enforces.
        current_epoch: u64,
        /// The partition's live lease, when there is one (the id given is not
        /// its id: mistyped, or the caller's lease was superseded): who holds
        /// it and for how long, so the caller is not told "lost" about a
        /// lease that looks live to it without being told whose lease it is.
        live: Option<LeaseInfo>,
    },
    /// The requested TTL is outside the configured bounds.
    #[error("lease ttl {ttl_ms} ms is outside the allowed range [{min}, {max}] ms")]
    InvalidTtl {
        /// The TTL that was requested.
        ttl_ms: u64,
        /// Configured minimum.
        min: u64,
        /// Configured maximum.
        max: u64,
    },
    /// The holder name is empty or longer than [`MAX_HOLDER_BYTES`].
    #[error("holder name must be 1 to {max} bytes long, got {len} bytes")]
    InvalidHolder {
        /// Length of the rejected name, in bytes.
        len: usize,
        /// [`MAX_HOLDER_BYTES`].
        max: usize,
    },
    /// The writer already enforces `u64::MAX`; no larger fencing token exists.
    #[error("partition {topic}/{partition} has exhausted its epochs")]
    EpochExhausted {
        /// Topic of the partition.
        topic: String,
        /// Index of the partition.
        partition: u32,
    },
    /// The table already tracks `max` partitions. This usually means the
    /// caller did not check that the partition exists before acquiring.
    #[error("lease table is full ({max} partitions)")]
    TooManySlots {
        /// Configured [`LeaseConfig::max_slots`].
        max: usize,
    },
    /// Making the new epoch durable or installing it in the writer failed; no
    /// lease was granted and nothing changed. The cause is in `source`.
    #[error("could not install epoch {epoch} for {topic}/{partition}; no lease was granted")]
    Install {
        /// Topic of the partition.
        topic: String,
        /// Index of the partition.
        partition: u32,
        /// The epoch that was being installed.
        epoch: u64,
        /// The installer's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Issues leases and epochs, one lease per partition.
///
/// Shared between connection handlers via `Arc`. Each partition has its own
/// slot behind its own mutex, so a slow epoch install (fsync) on one partition
/// only stalls callers of that same partition; the map of slots is only
/// locked briefly to find or create a slot.
#[derive(Debug)]
pub struct LeaseTable {
    config: LeaseConfig,
    slots: Mutex<Slots>,
}

/// All slots, keyed by topic then partition so that lookups by `&str` need no
/// allocation and [`LeaseTable::remove_topic`] is a single map removal.
#[derive(Debug, Default)]
struct Slots {
    by_topic: HashMap<String, HashMap<u32, Arc<Mutex<Slot>>>>,
    count: usize,
}

/// Per-partition state. It outlives individual leases so that `Lost` can
/// report the epoch the partition has moved on to.
#[derive(Debug, Default)]
struct Slot {
    lease: Option<Lease>,
    /// Last epoch this table granted for the partition; 0 if none.
    last_epoch: u64,
}

#[derive(Debug)]
struct Lease {
    id: u128,
    holder: String,
    epoch: u64,
    ttl_ms: u64,
    expires_at: Instant,
}

impl Slot {
    /// The lease if it is still live at `now`. An expired lease is dropped
    /// here, because once expired it is gone for good: even if nobody else
    /// took the partition, its holder must re-acquire and get a new epoch.
    fn live_lease(&mut self, now: Instant) -> Option<&mut Lease> {
        self.drop_if_expired(now);
        self.lease.as_mut()
    }

    /// Drops the lease if it has expired by `now`; true if it did (an expiry to count).
    fn drop_if_expired(&mut self, now: Instant) -> Option<ExpiredLease> {
        if self.lease.as_ref().is_none_or(|l| now < l.expires_at) {
            return None;
        }
        self.lease.take().map(|lease| ExpiredLease {
            epoch: lease.epoch,
            holder: lease.holder,
            expired_for: now.saturating_duration_since(lease.expires_at),
        })
    }
}

/// Locks a mutex even if a previous holder panicked. Slot state is only
/// mutated after the fallible install step, in small infallible updates, so
/// a panic (e.g. inside an installer) never leaves it half-written; refusing
/// all future calls for the partition would turn one bug into an outage.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Milliseconds from `now` until `deadline`, rounded up so that a live lease
/// is never reported as expiring in 0 ms.
fn millis_until(deadline: Instant, now: Instant) -> u64 {
    let d = deadline.saturating_duration_since(now);
    let ms = d.as_millis() + u128::from(!d.subsec_nanos().is_multiple_of(1_000_000));
    u64::try_from(ms).unwrap_or(u64::MAX)
}

impl LeaseTable {
    /// Creates an empty table.
    ///
    /// # Panics
    ///
    /// If the configuration is nonsensical (`min_ttl_ms` of 0, `min_ttl_ms >
    /// max_ttl_ms`, or `max_slots` of 0): that is a programming error, and
    /// failing at startup beats refusing every request later.
    pub fn new(config: LeaseConfig) -> Self {
        if let Err(error) = config.validate() {
            panic!("invalid lease config: {error}");
        }
        Self {
            config,
            slots: Mutex::new(Slots::default()),
        }
    }

    /// The configuration the table was built with.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// Grants `holder` a lease of `ttl_ms` on `topic/partition` if the
    /// partition has no live lease.
    ///
    /// The new epoch is the writer's current epoch plus one (or the table's
    /// last grant plus one, should the installer ever report less, so that
    /// fencing tokens never repeat). It is installed through `installer`
    /// *before* the lease is recorded; if installing fails nothing changes
    /// and the next attempt tries the same epoch. The partition's slot stays
    /// locked across the install, so concurrent acquires of one partition are
    /// serialized while other partitions proceed independently.
    ///
    /// `installer` must be the writer of this very partition. The call blocks
    /// for as long as the install does.
    pub fn acquire<I: EpochInstaller>(
        &self,
        topic: &str,
        partition: u32,
        holder: &str,
        ttl_ms: u64,
        installer: &I,
        now: Instant,
    ) -> Result<Grant, LeaseError> {
        let expires_at = self.validate_ttl(ttl_ms, now)?;
        if holder.is_empty() || holder.len() > MAX_HOLDER_BYTES {
            return Err(LeaseError::InvalidHolder {
                len: holder.len(),
                max: MAX_HOLDER_BYTES,
            });
        }

        let slot = self.slot_or_create(topic, partition)?;
        let mut slot = lock(&slot);
        if let Some(expired) = slot.drop_if_expired(now) {
            installer.lease_expired(&expired);
        }
        // A lease whose epoch the writer has since fenced (a newer epoch was installed without a
        // grant of this table: a new partition leader's base) holds nothing any more.
        let installed = installer.current_epoch();
        if slot
            .live_lease(now)
            .is_some_and(|lease| lease.epoch < installed)
        {
            slot.lease = None;
        }
        if let Some(lease) = slot.live_lease(now) {
            if holder == SHARED_HOLDER && lease.holder == holder {
                lease.expires_at = lease.expires_at.max(expires_at);
                lease.ttl_ms = lease.ttl_ms.max(ttl_ms);
                tracing::debug!(
                    topic,
                    partition,
                    holder,
                    epoch = lease.epoch,
                    "shared lease joined"
                );
                return Ok(Grant {
                    epoch: lease.epoch,
                    lease_id: lease.id,
                    ttl_ms: lease.ttl_ms,
                    holder: holder.to_owned(),
                    joined: true,
                });
            }
            return Err(LeaseError::Held {
                topic: topic.to_owned(),
                partition,
                holder: lease.holder.clone(),
                expires_in_ms: millis_until(lease.expires_at, now),
                current_epoch: lease.epoch,
            });
        }

        let writer_epoch = installer.current_epoch();
        if writer_epoch < slot.last_epoch {
            tracing::warn!(
                topic,
                partition,
                writer_epoch,
                granted_epoch = slot.last_epoch,
                "writer reports an epoch older than one already granted; \
                 continuing from the granted one"
            );
        }
        let epoch = writer_epoch
            .max(slot.last_epoch)
            .checked_add(1)
            .ok_or_else(|| LeaseError::EpochExhausted {
                topic: topic.to_owned(),
                partition,
            })?;

        installer
            .install_epoch(epoch)
            .map_err(|e| LeaseError::Install {
                topic: topic.to_owned(),
                partition,
                epoch,
                source: Box::new(e),
            })?;

        // thread_rng is a CSPRNG seeded from the OS, so ids cannot be
        // predicted from earlier ones.
        let id: u128 = rand::thread_rng().gen();
        slot.last_epoch = epoch;
        slot.lease = Some(Lease {
            id,
            holder: holder.to_owned(),
            epoch,
            ttl_ms,
            expires_at,
        });
        tracing::debug!(topic, partition, holder, epoch, ttl_ms, "lease granted");
        Ok(Grant {
            epoch,
            lease_id: id,
            ttl_ms,
            holder: holder.to_owned(),
            joined: false,
        })
    }

    /// Extends the live lease `lease_id` to `now + ttl_ms`.
    ///
    /// Fails with [`LeaseError::Lost`] if the lease expired (even if nobody
    /// else took the partition), was released, or was superseded; the holder
    /// must then stop writing and re-acquire.
    pub fn renew(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
        now: Instant,
    ) -> Result<Renewed, LeaseError> {
        self.renew_observed(topic, partition, lease_id, now, |_| {})
    }

    /// [`LeaseTable::renew`], calling `on_expiry` if it finds the partition's lease expired
    /// (for metrics).
    pub fn renew_observed(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
        now: Instant,
        on_expiry: impl FnOnce(&ExpiredLease),
    ) -> Result<Renewed, LeaseError> {
        let Some(slot) = self.slot(topic, partition) else {
            return Err(lost(topic, partition, 0));
        };
        let mut slot = lock(&slot);
        if let Some(expired) = slot.drop_if_expired(now) {
            on_expiry(&expired);
        }
        let last_epoch = slot.last_epoch;
        match slot.live_lease(now) {
            Some(lease) if lease.id == lease_id => {
                // The TTL was validated at grant time, so the addition only
                // fails if `now` itself is absurd; treat that as a loss
                // rather than panicking.
                let Some(until) = now.checked_add(Duration::from_millis(lease.ttl_ms)) else {
                    return Err(lost(topic, partition, last_epoch));
                };
                // Calls may arrive with slightly out-of-order `now`s; never
                // shorten a deadline already promised to the holder.
                lease.expires_at = lease.expires_at.max(until);
                Ok(Renewed {
                    epoch: lease.epoch,
                    ttl_ms: lease.ttl_ms,
                })
            }
            Some(lease) => Err(not_the_live_lease(topic, partition, lease, last_epoch, now)),
            None => Err(lost(topic, partition, last_epoch)),
        }
    }

    /// Ends the live lease `lease_id` at once, so the partition can be
    /// acquired immediately instead of after its TTL.
    ///
    /// Fails with [`LeaseError::Lost`] if that lease is no longer live.
    pub fn release(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
        now: Instant,
    ) -> Result<(), LeaseError> {
        self.release_observed(topic, partition, lease_id, now, |_| {})
    }

    /// [`LeaseTable::release`], calling `on_expiry` if it finds the partition's lease expired
    /// (for metrics).
    pub fn release_observed(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
        now: Instant,
        on_expiry: impl FnOnce(&ExpiredLease),
    ) -> Result<(), LeaseError> {
        let Some(slot) = self.slot(topic, partition) else {
            return Err(lost(topic, partition, 0));
        };
        let mut slot = lock(&slot);
        if let Some(expired) = slot.drop_if_expired(now) {
            on_expiry(&expired);
        }
        let last_epoch = slot.last_epoch;
        match slot.live_lease(now) {
            Some(lease) if lease.id == lease_id => {
                tracing::debug!(topic, partition, epoch = lease.epoch, "lease released");
                slot.lease = None;
                Ok(())
            }
            Some(lease) => Err(not_the_live_lease(topic, partition, lease, last_epoch, now)),
            None => Err(lost(topic, partition, last_epoch)),
        }
    }

    /// The live lease on `topic/partition` at `now`, if any. Meant for
    /// metadata responses and tests; it never creates a slot.
    pub fn lookup(&self, topic: &str, partition: u32, now: Instant) -> Option<LeaseInfo> {
        let slot = self.slot(topic, partition)?;
        let mut slot = lock(&slot);
        slot.live_lease(now).map(|lease| LeaseInfo {
            holder: lease.holder.clone(),
            epoch: lease.epoch,
            expires_in_ms: millis_until(lease.expires_at, now),
        })
    }

    /// Forgets every slot of `topic` (e.g. when the topic is deleted) and
    /// returns how many there were. Live leases on it are dropped with them;
    /// an acquire already in flight finishes against its now-detached slot.
    pub fn remove_topic(&self, topic: &str) -> usize {
        let mut slots = lock(&self.slots);
        let removed = slots.by_topic.remove(topic).map_or(0, |t| t.len());
        slots.count -= removed;
        removed
    }

    /// Number of partition slots currently tracked.
    pub fn slot_count(&self) -> usize {
        lock(&self.slots).count
    }

    /// Checks `ttl_ms` against the configured bounds and returns the deadline
    /// it implies.
    fn validate_ttl(&self, ttl_ms: u64, now: Instant) -> Result<Instant, LeaseError> {
        let (min, max) = (self.config.min_ttl_ms, self.config.max_ttl_ms);
        let invalid = LeaseError::InvalidTtl { ttl_ms, min, max };
        if !(min..=max).contains(&ttl_ms) {
            return Err(invalid);
        }
        now.checked_add(Duration::from_millis(ttl_ms))
            .ok_or(invalid)
    }

    /// The existing slot of a partition. Only `acquire` creates slots, so
    /// probing unknown partitions through renew/release/lookup costs nothing.
    fn slot(&self, topic: &str, partition: u32) -> Option<Arc<Mutex<Slot>>> {
        let slots = lock(&self.slots);
        slots.by_topic.get(topic)?.get(&partition).cloned()
    }

    /// The slot of a partition, created if missing (subject to `max_slots`).
    fn slot_or_create(&self, topic: &str, partition: u32) -> Result<Arc<Mutex<Slot>>, LeaseError> {
        let mut guard = lock(&self.slots);
        let slots = &mut *guard;
        if let Some(slot) = slots.by_topic.get(topic).and_then(|t| t.get(&partition)) {
            return Ok(Arc::clone(slot));
        }
        if slots.count >= self.config.max_slots {
            return Err(LeaseError::TooManySlots {
                max: self.config.max_slots,
            });
        }
        let slot = Arc::new(Mutex::new(Slot::default()));
        slots
            .by_topic
            .entry(topic.to_owned())
            .or_default()
            .insert(partition, Arc::clone(&slot));
        slots.count += 1;
        Ok(slot)
    }
}

fn lost(topic: &str, partition: u32, current_epoch: u64) -> LeaseError {
    LeaseError::Lost {
        topic: topic.to_owned(),
        partition,
        current_epoch,
        live: None,
    }
}

/// A renew or release whose id is not the id of the partition's live lease `lease`.
fn not_the_live_lease(
    topic: &str,
    partition: u32,
    lease: &Lease,
    last_epoch: u64,
    now: Instant,
) -> LeaseError {
    LeaseError::Lost {
        topic: topic.to_owned(),
        partition,
        current_epoch: last_epoch,
        live: Some(LeaseInfo {
            holder: lease.holder.clone(),
            epoch: lease.epoch,
            expires_in_ms: millis_until(lease.expires_at, now),
        }),
    }
}

/// The message of [`LeaseError::Lost`]: where the partition is, and, while
/// another lease is live, that the id given is not that lease's and whose it is.
fn lost_message(
    topic: &str,
    partition: u32,
    current_epoch: u64,
    live: Option<&LeaseInfo>,
) -> String {
    match live {
        None => format!("lease lost: partition {topic}/{partition} is now at epoch {current_epoch}"),
        Some(live) => format!(
            "lease lost: the lease id is not the id of the live lease on {topic}/{partition}, which {:?} holds at epoch {} for another {} ms (the id is mistyped, or a newer lease superseded yours): acquire a new lease once it ends",
            live.holder, live.epoch, live.expires_in_ms
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_until_rounds_up() {
        let t = Instant::now();
        assert_eq!(millis_until(t, t), 0);
        assert_eq!(millis_until(t + Duration::from_micros(1), t), 1);
        assert_eq!(millis_until(t + Duration::from_millis(7), t), 7);
        assert_eq!(millis_until(t, t + Duration::from_millis(3)), 0);
    }

    /// An installer whose writer's epoch the test sets.
    struct Writer(std::sync::atomic::AtomicU64);

    impl EpochInstaller for Writer {
        type Error = std::io::Error;
        fn current_epoch(&self) -> u64 {
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
        fn install_epoch(&self, epoch: u64) -> Result<(), Self::Error> {
            self.0.store(epoch, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
    }

    /// A live lease whose epoch the writer has since fenced (a new partition leader installed
    /// its base) no longer blocks a new grant, which lies above the installed epoch.
    #[test]
    fn a_lease_fenced_by_an_installed_epoch_no_longer_holds() {
        let table = LeaseTable::new(LeaseConfig::default());
        let writer = Writer(std::sync::atomic::AtomicU64::new(2 << 32));
        let now = Instant::now();
        let first = table
            .acquire("t", 0, "a", 60_000, &writer, now)
            .expect("first grant");
        assert_eq!(first.epoch, (2 << 32) + 1);
        assert!(matches!(
            table.acquire("t", 0, "b", 60_000, &writer, now),
            Err(LeaseError::Held { .. })
        ));
        writer.install_epoch(3 << 32).unwrap();
        let second = table
            .acquire("t", 0, "b", 60_000, &writer, now)
            .expect("the fenced lease does not hold");
        assert_eq!(second.epoch, (3 << 32) + 1);
    }

    /// The shared holder joins its own live lease (same epoch and id, the later expiry), while
    /// a native holder and the shared one still refuse each other; once the shared lease
    /// lapses, the next grant to it is a new epoch.
    #[test]
    fn the_shared_holder_joins_its_live_lease_and_refuses_others() {
        let table = LeaseTable::new(LeaseConfig::default());
        let writer = Writer(std::sync::atomic::AtomicU64::new(0));
        let now = Instant::now();
        let first = table
            .acquire("t", 0, SHARED_HOLDER, 10_000, &writer, now)
            .expect("first grant");
        assert!(!first.joined);
        let later = now + std::time::Duration::from_secs(5);
        let joined = table
            .acquire("t", 0, SHARED_HOLDER, 10_000, &writer, later)
            .expect("joined");
        assert!(joined.joined);
        assert_eq!(
            (joined.epoch, joined.lease_id),
            (first.epoch, first.lease_id)
        );
        assert_eq!(writer.current_epoch(), first.epoch, "nothing installed");
        assert!(matches!(
            table.acquire("t", 0, "native", 10_000, &writer, later),
            Err(LeaseError::Held { .. })
        ));
        // The join extended the lease to 15 s after `now`.
        let still = now + std::time::Duration::from_secs(12);
        assert!(matches!(
            table.acquire("t", 0, "native", 10_000, &writer, still),
            Err(LeaseError::Held { .. })
        ));
        let lapsed = now + std::time::Duration::from_secs(16);
        let native = table
            .acquire("t", 0, "native", 10_000, &writer, lapsed)
            .expect("granted once the shared lease lapsed");
        assert!(native.epoch > first.epoch);
        assert!(
            matches!(
                table.acquire("t", 0, SHARED_HOLDER, 10_000, &writer, lapsed),
                Err(LeaseError::Held { .. })
            ),
            "a transaction never takes a native holder's partition"
        );
    }

    #[test]
    fn table_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<LeaseTable>();
        check::<LeaseError>();
    }
}
