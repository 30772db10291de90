//! The epoch fence: the check that keeps a stale lease holder out of the log, and the durable
//! checkpoint that keeps an epoch from ever going backwards.
//!
//! [`Fence`] owns the partition's writable log state behind one lock. Every append goes through
//! [`Fence::append`], which compares the batch's epoch with the current one and runs the write
//! *inside the same critical section*. [`Fence::install_epoch`] takes the same lock, persists the
//! new epoch through a caller-supplied step (the checkpoint file, fsynced) and only then makes it
//! current. So once `install_epoch(e)` has returned, no append with an epoch below `e` can start
//! or be in progress: the lock orders them all.
//!
//! A partition re-created under the name of a deleted one starts at a *creation epoch*: an
//! epoch above every epoch the old partition ever installed, installed by the creation itself
//! and never granted to anyone (a brand-new partition's creation epoch is 0, which is never
//! granted either). Holders of the old partition's epochs are fenced (they are below it),
//! writers without a lease are accepted until the first grant, and the first grant is above it:
//! the fence floor never goes down, across deletes too (see `docs/fencing.md`).
//!
//! In a cluster the same lock also guards the partition's replication state ([`ReplicaState`]):
//! its role (standalone, leader, follower) and its leader-epoch floor. A follower's replicated
//! append is checked against the leader epoch ([`Fence::append_replicated`]: lower fenced,
//! equal fine, higher unknown) in the same critical section as its write, and
//! [`Fence::become_leader`] / [`Fence::become_follower`] take the lock too, so a role change
//! orders against every append of the old role exactly as an epoch install does. A new leader
//! installs the producer epoch base of its leader epoch (`cluster::producer_epoch_base`), which
//! fences every producer epoch granted by an earlier leader and, like a creation epoch, is never
//! granted itself.
//!
//! The fence does not know where epochs come from (the lease table today, perhaps an external lock
//! service later): issuance and enforcement are kept apart. It is generic over the log it guards
//! so that loom can model the real code with an in-memory log.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::durable_file::write_durably;
use crate::domain::{leader_epoch_of_producer_epoch, producer_epoch_base, LeaderEpoch};
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering};

/// Why the fence refused an append or an install.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum FenceError {
    /// The writer's epoch is older than the partition's: its lease was lost. Not retriable.
    #[error("fenced: epoch {epoch} < current {current}")]
    Fenced {
        /// Epoch the append carried.
        epoch: u64,
        /// The partition's current epoch.
        current: u64,
    },
    /// The epoch was never granted (higher than current, or 0 before any grant). Never adopted.
    #[error("unknown epoch: epoch {epoch} was never granted (current {current})")]
    UnknownEpoch {
        /// Epoch the append carried.
        epoch: u64,
        /// The partition's current epoch.
        current: u64,
    },
    /// A writer without a lease (see [`WriteCredential::Unleased`]) on a partition that has
    /// granted one: it is fenced off, as a stale holder is.
    #[error(
        "fenced: the partition is leased (epoch {current}); writers without a lease are refused"
    )]
    Leased {
        /// The partition's current epoch.
        current: u64,
    },
    /// `install_epoch` with an epoch not above the current one.
    #[error("epoch {epoch} is not newer than current {current}")]
    EpochNotNewer {
        /// Epoch asked for.
        epoch: u64,
        /// The partition's current epoch.
        current: u64,
    },
}

/// The fence check itself: lower is fenced, higher is unknown, equal is the current holder.
/// Epoch 0 is never granted (grants start at 1): it is unknown, whatever the current epoch, so
/// a writer that never acquired a lease is told so rather than told it lost one.
pub fn check_epoch(epoch: u64, current: u64) -> Result<(), FenceError> {
    check_epoch_since(epoch, current, 0)
}

/// [`check_epoch`] on a partition created at `creation_epoch` (see the module docs): that
/// epoch was never granted, so it is unknown like 0 is, and every epoch below it belongs to a
/// deleted incarnation of the partition and is fenced.
pub fn check_epoch_since(epoch: u64, current: u64, creation_epoch: u64) -> Result<(), FenceError> {
    debug_assert!(creation_epoch <= current, "the creation epoch is installed");
    if epoch == 0 || epoch == creation_epoch {
        return Err(FenceError::UnknownEpoch { epoch, current });
    }
    match epoch_standing(epoch, current) {
        EpochStanding::Stale => Err(FenceError::Fenced { epoch, current }),
        EpochStanding::Current => Ok(()),
        EpochStanding::Ahead => Err(FenceError::UnknownEpoch { epoch, current }),
    }
}

/// What a write presents to the fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteCredential {
    /// A fencing token from a lease grant: accepted while it is the current epoch.
    Epoch(u64),
    /// No lease at all: a writer that has no notion of one (a Kafka producer through the Kafka
    /// listener). Accepted only while the partition has never granted a lease (its current
    /// epoch is still its creation epoch: 0, or the floor of a re-created partition); its
    /// batches carry epoch 0. The first grant fences every such writer, exactly as it fences a
    /// stale holder, so a leased partition has one writer whatever the listener.
    Unleased,
}

impl WriteCredential {
    /// The epoch the write's batches carry.
    pub fn epoch(self) -> u64 {
        match self {
            WriteCredential::Epoch(epoch) => epoch,
            WriteCredential::Unleased => 0,
        }
    }
}

/// The fence check of any credential on a partition created at epoch 0 (see
/// [`check_credential_since`]).
pub fn check_credential(credential: WriteCredential, current: u64) -> Result<(), FenceError> {
    check_credential_since(credential, current, 0)
}

/// The fence check of any credential on a partition created at `creation_epoch`: a lease's
/// epoch as [`check_epoch_since`] says; no lease only while no grant happened since creation.
pub fn check_credential_since(
    credential: WriteCredential,
    current: u64,
    creation_epoch: u64,
) -> Result<(), FenceError> {
    match credential {
        WriteCredential::Epoch(epoch) => check_epoch_since(epoch, current, creation_epoch),
        WriteCredential::Unleased if current == creation_epoch => Ok(()),
        WriteCredential::Unleased => Err(FenceError::Leased { current }),
    }
}

/// Where an epoch stands against the installed one: the one comparison both fences make (the
/// producer-epoch check adds its never-granted epochs on top; the leader-epoch check is exactly
/// this).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochStanding {
    /// Below the installed epoch: its holder was superseded (fenced).
    Stale,
    /// The installed epoch itself.
    Current,
    /// Above the installed epoch: never installed here (unknown), never adopted.
    Ahead,
}

/// Compares `epoch` with the installed `current`.
pub fn epoch_standing<T: Ord>(epoch: T, current: T) -> EpochStanding {
    match epoch.cmp(&current) {
        std::cmp::Ordering::Less => EpochStanding::Stale,
        std::cmp::Ordering::Equal => EpochStanding::Current,
        std::cmp::Ordering::Greater => EpochStanding::Ahead,
    }
}

/// The leader-epoch check of a replicated append: lower fenced, equal fine, higher unknown.
pub fn check_leader_epoch(epoch: LeaderEpoch, current: LeaderEpoch) -> Result<(), ReplicaError> {
    match epoch_standing(epoch, current) {
        EpochStanding::Stale => Err(ReplicaError::FencedLeaderEpoch { epoch, current }),
        EpochStanding::Current => Ok(()),
        EpochStanding::Ahead => Err(ReplicaError::UnknownLeaderEpoch { epoch, current }),
    }
}

/// A partition's place in replication, kept in the fence beside the producer epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Not replicated (no `leader-epochs` file): producers write as they always did.
    Standalone,
    /// Leads the partition in the installed leader epoch: producer appends are accepted.
    Leader,
    /// Follows the leader of the installed leader epoch: only replicated appends are accepted.
    Follower,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Standalone => "standalone",
            Role::Leader => "a leader",
            Role::Follower => "a follower",
        })
    }
}

/// Why the fence refused a replication step (a replicated append, a role change) or a
/// producer append on a follower. Nothing was written.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaError {
    /// A producer append (or a lease grant) on a follower. Storage turns it into
    /// `StorageError::NotLeader`.
    #[error("this replica follows the leader of leader epoch {leader_epoch}; send writes to the partition's leader (fetch the cluster metadata to find it)")]
    NotLeader {
        /// The leader epoch this replica follows.
        leader_epoch: LeaderEpoch,
    },
    /// A replicated append on a replica that is not a follower.
    #[error("only a follower takes replicated batches; this replica is {role} (leader epoch {leader_epoch})")]
    NotFollower {
        /// What the replica is.
        role: Role,
        /// Its installed leader epoch.
        leader_epoch: LeaderEpoch,
    },
    /// The batches came from a leader of an older epoch than the installed one.
    #[error("fenced leader epoch: epoch {epoch} < current {current}; the sender was deposed")]
    FencedLeaderEpoch {
        /// Leader epoch the append carried.
        epoch: LeaderEpoch,
        /// Leader epoch installed here.
        current: LeaderEpoch,
    },
    /// The batches came from a leader epoch not installed here yet (learn it from the metadata
    /// store first). Never adopted.
    #[error("unknown leader epoch: epoch {epoch} > current {current}; install it (become_follower) before appending its batches")]
    UnknownLeaderEpoch {
        /// Leader epoch the append carried.
        epoch: LeaderEpoch,
        /// Leader epoch installed here.
        current: LeaderEpoch,
    },
    /// `become_leader`/`become_follower` with a leader epoch below the installed one.
    #[error("leader epoch {epoch} is older than the installed {current}; the caller's view of the partition is stale")]
    LeaderEpochNotNewer {
        /// Leader epoch asked for.
        epoch: LeaderEpoch,
        /// Leader epoch installed here.
        current: LeaderEpoch,
    },
}

/// The replication state the fence guards, under the same lock as the producer epoch and the
/// log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaState {
    /// Standalone, leader or follower.
    pub role: Role,
    /// The highest leader epoch installed (the leader-epoch floor; 0 when standalone).
    pub leader_epoch: LeaderEpoch,
    /// Whether a lease was granted since the partition's creation: writers without a lease are
    /// refused from then on, whoever leads.
    pub leased: bool,
}

impl ReplicaState {
    /// A standalone partition at producer epoch `current`, created at `creation_epoch`: leased
    /// once anything above the creation epoch was installed (only grants install there).
    pub fn standalone(current: u64, creation_epoch: u64) -> Self {
        Self {
            role: Role::Standalone,
            leader_epoch: 0,
            leased: current > creation_epoch,
        }
    }
}

/// What a role change asks its persist step to make durable before it takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoleChange {
    /// The role taken.
    pub role: Role,
    /// The leader epoch installed (the new floor; at least the old one).
    pub leader_epoch: LeaderEpoch,
    /// The producer epoch base to install (`producer_epoch_base(leader_epoch)`), when it is
    /// above the current producer epoch (a leader taking over); `None` otherwise.
    pub producer_epoch: Option<u64>,
    /// Whether a lease was ever granted (to record beside the floor).
    pub leased: bool,
}

/// Lets a replicated append record that the leader granted a lease (its batches carry a granted
/// epoch): the partition stays leased from then on. Only ever moves from false to true.
#[derive(Debug)]
pub struct LeaseEvidence<'a> {
    leased: &'a mut bool,
}

impl LeaseEvidence<'_> {
    /// Whether a grant is known already.
    pub fn is_leased(&self) -> bool {
        *self.leased
    }

    /// Records that a grant happened (after the caller made that durable).
    pub fn record_grant(&mut self) {
        *self.leased = true;
    }
}

/// The never-granted producer epoch at `current`: the creation epoch, or the base installed by
/// the leader epoch `current` belongs to (a leader's base is installed, never granted).
fn ungranted_epoch(current: u64, creation_epoch: u64) -> u64 {
    creation_epoch.max(producer_epoch_base(leader_epoch_of_producer_epoch(current)))
}

/// A log guarded by an epoch: the check and the write share one lock.
#[derive(Debug)]
pub struct Fence<L> {
    state: Mutex<Guarded<L>>,
    /// Mirror of `Guarded::current` for lock-free reads (metadata, lease grants). Written only
    /// under the lock; never used for the check itself.
    current_mirror: AtomicU64,
    /// Mirror of `Guarded::replica.leader_epoch`, for lock-free reads; never used for a check.
    leader_epoch_mirror: AtomicU64,
    /// The epoch the partition was created at (0, or above every epoch of a deleted partition
    /// of the same name): never granted, fixed for the fence's life.
    creation_epoch: u64,
}

#[derive(Debug)]
struct Guarded<L> {
    current: u64,
    replica: ReplicaState,
    log: L,
}

impl<L> Fence<L> {
    /// Guards `log` starting at epoch `current`, on a partition created at epoch 0.
    pub fn new(current: u64, log: L) -> Self {
        Self::with_creation_epoch(current, 0, log)
    }

    /// Guards `log` starting at epoch `current`, on a partition created at `creation_epoch`
    /// (see the module docs). The current epoch is at least the creation epoch.
    pub fn with_creation_epoch(current: u64, creation_epoch: u64, log: L) -> Self {
        let current = current.max(creation_epoch);
        let replica = ReplicaState::standalone(current, creation_epoch);
        Self::with_replica_state(current, creation_epoch, replica, log)
    }

    /// Guards `log` of a partition that has a replication state (see [`ReplicaState`]).
    pub fn with_replica_state(
        current: u64,
        creation_epoch: u64,
        replica: ReplicaState,
        log: L,
    ) -> Self {
        let current = current.max(creation_epoch);
        Self {
            state: Mutex::new(Guarded {
                current,
                replica,
                log,
            }),
            current_mirror: AtomicU64::new(current),
            leader_epoch_mirror: AtomicU64::new(u64::from(replica.leader_epoch)),
            creation_epoch,
        }
    }

    /// The epoch the partition was created at (0 unless it re-created a deleted one).
    pub fn creation_epoch(&self) -> u64 {
        self.creation_epoch
    }

    fn lock(&self) -> MutexGuard<'_, Guarded<L>> {
        // A panic while appending leaves the log state in an unknown shape; continuing to write
        // after that could corrupt it, so poisoning stays fatal.
        self.state.lock().expect("partition writer lock poisoned")
    }

    /// The current epoch (a snapshot: it may change right after).
    pub fn current_epoch(&self) -> u64 {
        self.current_mirror.load(Ordering::Acquire)
    }

    /// The installed leader epoch (a snapshot: it may change right after).
    pub fn leader_epoch(&self) -> LeaderEpoch {
        LeaderEpoch::try_from(self.leader_epoch_mirror.load(Ordering::Acquire))
            .expect("the mirror holds a leader epoch")
    }

    /// The replication state (taken under the lock; it may change right after).
    pub fn replica_state(&self) -> ReplicaState {
        self.lock().replica
    }

    /// Checks `epoch` and, if it is the current one, runs `write` on the log while still holding
    /// the lock. This is the only way to reach the log for writing.
    pub fn append<T, E>(
        &self,
        epoch: u64,
        write: impl FnOnce(&mut L) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<FenceError> + From<ReplicaError>,
    {
        self.append_as(WriteCredential::Epoch(epoch), write)
    }

    /// [`append`](Self::append) for any [`WriteCredential`]: the check and the write under one
    /// lock. A follower refuses every producer append ([`ReplicaError::NotLeader`]); on a leader
    /// the producer epoch its takeover installed is never granted (unknown, like a creation
    /// epoch), and writers without a lease pass only while no lease was ever granted.
    pub fn append_as<T, E>(
        &self,
        credential: WriteCredential,
        write: impl FnOnce(&mut L) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<FenceError> + From<ReplicaError>,
    {
        let mut guarded = self.lock();
        check_producer::<L, E>(credential, &guarded, self.creation_epoch)?;
        write(&mut guarded.log)
    }

    /// [`append_as`](Self::append_as) for a batch that may be the resend of one already in the
    /// log (its first answer was lost, and a newer lease came meanwhile). Under the one lock,
    /// when the credential is *superseded* (a lower epoch than the current one:
    /// [`FenceError::Fenced`]; no lease on a leased partition: [`FenceError::Leased`]),
    /// `resend` answers instead of the refusal: it sees the log read-only, since answering a
    /// resend writes nothing, and the refusal, and returns the original answer of an exact
    /// resend of a batch the log holds, or the refusal (or an error saying the standing
    /// cannot be told) for anything else. So a batch written while its epoch was current gets
    /// its offsets whatever the epoch is now, and no *new* batch of a superseded epoch is ever
    /// written: `write` runs only for a current credential, exactly as in `append_as`. Every
    /// other refusal stands (a follower; an epoch never granted, which cannot have written
    /// anything).
    pub fn append_or_answer_resend<T, E>(
        &self,
        credential: WriteCredential,
        resend: impl FnOnce(&L, FenceError) -> Result<T, E>,
        write: impl FnOnce(&mut L) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<FenceError> + From<ReplicaError>,
    {
        let mut guarded = self.lock();
        match producer_standing(credential, &guarded, self.creation_epoch) {
            Ok(()) => write(&mut guarded.log),
            Err(Refusal::Fence(
                refusal @ (FenceError::Fenced { .. } | FenceError::Leased { .. }),
            )) => resend(&guarded.log, refusal),
            Err(Refusal::Fence(refusal)) => Err(refusal.into()),
            Err(Refusal::Replica(refusal)) => Err(refusal.into()),
        }
    }

    /// Makes `epoch` current: a lease grant. Refuses an epoch not above the current one, and any
    /// grant on a follower. `persist` runs under the lock, before the epoch becomes current, and
    /// must make it durable (on failure nothing changes). It gets the log to read the offset
    /// where the epoch starts, and whether this is the first grant since creation (which a
    /// replicated partition records beside its leader-epoch floor).
    pub fn install_epoch<E>(
        &self,
        epoch: u64,
        persist: impl FnOnce(u64, &mut L) -> Result<(), E>,
    ) -> Result<(), E>
    where
        E: From<FenceError> + From<ReplicaError>,
    {
        self.install_grant(epoch, |epoch, _first_grant, log| persist(epoch, log))
    }

    /// [`install_epoch`](Self::install_epoch), telling `persist` whether this is the first grant
    /// since the partition's creation.
    pub fn install_grant<E>(
        &self,
        epoch: u64,
        persist: impl FnOnce(u64, bool, &mut L) -> Result<(), E>,
    ) -> Result<(), E>
    where
        E: From<FenceError> + From<ReplicaError>,
    {
        let mut guarded = self.lock();
        if guarded.replica.role == Role::Follower {
            return Err(ReplicaError::NotLeader {
                leader_epoch: guarded.replica.leader_epoch,
            }
            .into());
        }
        if epoch <= guarded.current {
            return Err(FenceError::EpochNotNewer {
                epoch,
                current: guarded.current,
            }
            .into());
        }
        let first_grant = !guarded.replica.leased;
        persist(epoch, first_grant, &mut guarded.log)?;
        guarded.current = epoch;
        guarded.replica.leased = true;
        self.current_mirror.store(epoch, Ordering::Release);
        Ok(())
    }

    /// Takes over as leader in `leader_epoch` (refused below the installed leader epoch). Under
    /// the lock, so no append of the old role is in progress when it returns: `persist` makes
    /// the [`RoleChange`] durable (history entry, floor, producer epoch base), then the role,
    /// the floor and the producer epoch base (when it is above the current producer epoch) take
    /// effect. The base fences every producer epoch granted before, and is itself never
    /// granted.
    pub fn become_leader<E>(
        &self,
        leader_epoch: LeaderEpoch,
        persist: impl FnOnce(RoleChange, &mut L) -> Result<(), E>,
    ) -> Result<(), E>
    where
        E: From<ReplicaError>,
    {
        self.change_role(Role::Leader, leader_epoch, persist)
    }

    /// Follows the leader of `leader_epoch` (refused below the installed leader epoch): after
    /// `persist` made the floor durable, replicated appends of older leaders are fenced and
    /// producer appends refused. Under the lock, like [`become_leader`](Self::become_leader).
    pub fn become_follower<E>(
        &self,
        leader_epoch: LeaderEpoch,
        persist: impl FnOnce(RoleChange, &mut L) -> Result<(), E>,
    ) -> Result<(), E>
    where
        E: From<ReplicaError>,
    {
        self.change_role(Role::Follower, leader_epoch, persist)
    }

    fn change_role<E>(
        &self,
        role: Role,
        leader_epoch: LeaderEpoch,
        persist: impl FnOnce(RoleChange, &mut L) -> Result<(), E>,
    ) -> Result<(), E>
    where
        E: From<ReplicaError>,
    {
        let mut guarded = self.lock();
        let installed = guarded.replica.leader_epoch;
        if epoch_standing(leader_epoch, installed) == EpochStanding::Stale {
            return Err(ReplicaError::LeaderEpochNotNewer {
                epoch: leader_epoch,
                current: installed,
            }
            .into());
        }
        let base = producer_epoch_base(leader_epoch);
        let change = RoleChange {
            role,
            leader_epoch,
            producer_epoch: (role == Role::Leader && base > guarded.current).then_some(base),
            leased: guarded.replica.leased,
        };
        persist(change, &mut guarded.log)?;
        guarded.replica.role = role;
        guarded.replica.leader_epoch = leader_epoch;
        self.leader_epoch_mirror
            .store(u64::from(leader_epoch), Ordering::Release);
        if let Some(base) = change.producer_epoch {
            guarded.current = base;
            self.current_mirror.store(base, Ordering::Release);
        }
        Ok(())
    }

    /// Checks a replicated append's `leader_epoch` (lower fenced, equal fine, higher unknown; a
    /// replica that is not a follower refuses) and, if it passes, runs `write` on the log while
    /// still holding the lock: the same lock that orders producer appends and installs, so once
    /// `become_follower(e + 1)` or `become_leader` returned, no append of epoch `e` is in
    /// progress or can start. `write` may record that the batches show a lease was granted.
    pub fn append_replicated<T, E>(
        &self,
        leader_epoch: LeaderEpoch,
        write: impl FnOnce(&mut L, &mut LeaseEvidence<'_>) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<ReplicaError>,
    {
        let mut guarded = self.lock();
        let Guarded { replica, log, .. } = &mut *guarded;
        require_follower(replica)?;
        check_leader_epoch(leader_epoch, replica.leader_epoch)?;
        let mut evidence = LeaseEvidence {
            leased: &mut replica.leased,
        };
        write(log, &mut evidence)
    }

    /// Runs `f` on the log under the lock, only on a follower (truncation: a leader never cuts
    /// its own log). `f` gets the installed leader epoch.
    pub fn with_follower_log<T, E>(
        &self,
        f: impl FnOnce(&mut L, LeaderEpoch) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<ReplicaError>,
    {
        let mut guarded = self.lock();
        let Guarded { replica, log, .. } = &mut *guarded;
        require_follower(replica)?;
        f(log, replica.leader_epoch)
    }

    /// Takes the lock and keeps it: the first step of an append that spans partitions (see
    /// `Partition::append_atomically`), which holds every partition's fence at once, checks
    /// every credential and only then writes, so no grant on any of them falls between the
    /// checks and the writes. Callers take several fences in one global order (by partition
    /// name) so that two such appends never wait on each other in a cycle.
    pub fn hold(&self) -> HeldFence<'_, L> {
        HeldFence {
            guarded: self.lock(),
            creation_epoch: self.creation_epoch,
        }
    }

    /// Runs `f` on the log under the lock without an epoch check, for operations that do not
    /// write batches (reading the tail position, sealing segments on close, retention).
    pub fn with_log<T>(&self, f: impl FnOnce(&mut L) -> T) -> T {
        f(&mut self.lock().log)
    }

    /// [`with_log`](Self::with_log), also showing the replication state.
    pub fn with_log_and_state<T>(&self, f: impl FnOnce(&mut L, &ReplicaState) -> T) -> T {
        let mut guarded = self.lock();
        let Guarded { replica, log, .. } = &mut *guarded;
        f(log, replica)
    }
}

/// A fence whose lock is held ([`Fence::hold`]): its credential checks and its log, under that
/// one lock until it is dropped.
pub struct HeldFence<'a, L> {
    guarded: MutexGuard<'a, Guarded<L>>,
    creation_epoch: u64,
}

impl<L> HeldFence<'_, L> {
    /// The same check as [`Fence::append_as`]'s, under the held lock.
    pub fn check<E>(&self, credential: WriteCredential) -> Result<(), E>
    where
        E: From<FenceError> + From<ReplicaError>,
    {
        check_producer::<L, E>(credential, &self.guarded, self.creation_epoch)
    }

    /// The log, for a write after [`check`](Self::check) passed under this same hold.
    pub fn log(&mut self) -> &mut L {
        &mut self.guarded.log
    }

    /// The log, to read under the held lock.
    pub fn log_ref(&self) -> &L {
        &self.guarded.log
    }
}

/// The producer check under the lock: a follower refuses; otherwise the credential is checked
/// against the current producer epoch, whose never-granted epoch is the creation epoch or the
/// base a leader installed, and a writer without a lease passes only while none was granted.
fn check_producer<L, E: From<FenceError> + From<ReplicaError>>(
    credential: WriteCredential,
    guarded: &Guarded<L>,
    creation_epoch: u64,
) -> Result<(), E> {
    producer_standing(credential, guarded, creation_epoch).map_err(|refusal| match refusal {
        Refusal::Fence(error) => E::from(error),
        Refusal::Replica(error) => E::from(error),
    })
}

/// Either refusal of [`check_producer`], kept apart so that a caller can tell them.
enum Refusal {
    Fence(FenceError),
    Replica(ReplicaError),
}

/// [`check_producer`] before its refusal is converted.
fn producer_standing<L>(
    credential: WriteCredential,
    guarded: &Guarded<L>,
    creation_epoch: u64,
) -> Result<(), Refusal> {
    if guarded.replica.role == Role::Follower {
        return Err(Refusal::Replica(ReplicaError::NotLeader {
            leader_epoch: guarded.replica.leader_epoch,
        }));
    }
    let current = guarded.current;
    match credential {
        WriteCredential::Epoch(epoch) => {
            check_epoch_since(epoch, current, ungranted_epoch(current, creation_epoch))
        }
        WriteCredential::Unleased if !guarded.replica.leased => Ok(()),
        WriteCredential::Unleased => Err(FenceError::Leased { current }),
    }
    .map_err(Refusal::Fence)
}

/// Only a follower takes replicated batches or truncates its log.
fn require_follower(replica: &ReplicaState) -> Result<(), ReplicaError> {
    if replica.role == Role::Follower {
        Ok(())
    } else {
        Err(ReplicaError::NotFollower {
            role: replica.role,
            leader_epoch: replica.leader_epoch,
        })
    }
}

/// Name of the epoch checkpoint file in a partition directory.
pub const CHECKPOINT_FILE: &str = "epoch-checkpoint";
/// How many `epoch start_offset` lines the checkpoint keeps; older history is dropped.
pub const CHECKPOINT_HISTORY_MAX: usize = 64;

/// First word of the checkpoint line that records a re-created partition's creation epoch.
pub const CREATION_EPOCH_KEYWORD: &str = "created";

/// The durable record of installed epochs: lines of `epoch start_offset`, newest last, after an
/// optional first line `created EPOCH` on a partition re-created under a deleted one's name (its
/// creation epoch, see the module docs; absent means 0).
#[derive(Debug)]
pub struct EpochCheckpoint {
    directory: PathBuf,
    creation_epoch: u64,
    history: Vec<(u64, u64)>,
}

impl EpochCheckpoint {
    /// Loads the checkpoint of the partition in `directory` (empty if there is none).
    pub fn load(directory: &Path) -> io::Result<Self> {
        let path = directory.join(CHECKPOINT_FILE);
        let mut history = Vec::new();
        let mut creation_epoch = 0;
        match fs::read_to_string(&path) {
            Ok(text) => {
                for (number, line) in text.lines().enumerate() {
                    let invalid = || {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "{}: line {} is not `epoch start_offset` (nor a first line `{CREATION_EPOCH_KEYWORD} epoch`)",
                                path.display(),
                                number + 1
                            ),
                        )
                    };
                    if let Some(rest) = line.strip_prefix(CREATION_EPOCH_KEYWORD) {
                        if number != 0 {
                            return Err(invalid());
                        }
                        creation_epoch = rest.trim().parse::<u64>().map_err(|_| invalid())?;
                        continue;
                    }
                    let mut fields = line.split_whitespace().map(str::parse::<u64>);
                    match (fields.next(), fields.next(), fields.next()) {
                        (Some(Ok(epoch)), Some(Ok(start)), None) => history.push((epoch, start)),
                        _ => return Err(invalid()),
                    }
                }
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        Ok(Self {
            directory: directory.to_path_buf(),
            creation_epoch,
            history,
        })
    }

    /// The highest epoch recorded, the creation epoch included (0 if none).
    pub fn latest_epoch(&self) -> u64 {
        self.history
            .iter()
            .map(|(epoch, _)| *epoch)
            .max()
            .unwrap_or(0)
            .max(self.creation_epoch)
    }

    /// The epoch the partition was created at (0 unless it re-created a deleted one).
    pub fn creation_epoch(&self) -> u64 {
        self.creation_epoch
    }

    /// The recorded `(epoch, start_offset)` pairs, oldest first.
    pub fn history(&self) -> &[(u64, u64)] {
        &self.history
    }

    /// Appends `epoch start_offset` and makes the file durable: write a temp file, fsync it,
    /// rename it over the old one, fsync the directory. Only after this returns may the epoch be
    /// announced to anyone.
    pub fn record(&mut self, epoch: u64, start_offset: u64) -> io::Result<()> {
        let mut history = self.history.clone();
        history.push((epoch, start_offset));
        let excess = history.len().saturating_sub(CHECKPOINT_HISTORY_MAX);
        history.drain(..excess);
        self.write(self.creation_epoch, &history)?;
        self.history = history;
        Ok(())
    }

    /// Records the partition's creation epoch, durably, before the partition is opened (a
    /// partition re-created under the name of a deleted one; see the module docs). Refuses to
    /// lower one already recorded.
    pub fn record_creation(&mut self, creation_epoch: u64) -> io::Result<()> {
        if creation_epoch < self.creation_epoch {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "creation epoch {creation_epoch} is below the recorded {}",
                    self.creation_epoch
                ),
            ));
        }
        self.write(creation_epoch, &self.history)?;
        self.creation_epoch = creation_epoch;
        Ok(())
    }

    fn write(&self, creation_epoch: u64, history: &[(u64, u64)]) -> io::Result<()> {
        let mut text = String::new();
        if creation_epoch > 0 {
            text.push_str(&format!("{CREATION_EPOCH_KEYWORD} {creation_epoch}\n"));
        }
        for (epoch, start) in history {
            text.push_str(&format!("{epoch} {start}\n"));
        }
        write_durably(&self.directory, CHECKPOINT_FILE, text.as_bytes())
    }
}

#[cfg(all(test, not(fencelog_loom)))]
mod tests {
    use super::*;

    /// A writer without a lease writes only where no lease was ever granted.
    #[test]
    fn unleased_writes_only_before_the_first_grant() {
        assert_eq!(check_credential(WriteCredential::Unleased, 0), Ok(()));
        assert_eq!(
            check_credential(WriteCredential::Unleased, 1),
            Err(FenceError::Leased { current: 1 })
        );
        assert_eq!(check_credential(WriteCredential::Epoch(2), 2), Ok(()));
        assert!(check_credential(WriteCredential::Epoch(0), 0).is_err());
    }

    /// The table of the design: lower fenced, equal accepted, higher unknown, 0 never granted.
    #[test]
    fn check_epoch_follows_the_table() {
        assert_eq!(
            check_epoch(3, 4),
            Err(FenceError::Fenced {
                epoch: 3,
                current: 4
            })
        );
        assert_eq!(check_epoch(4, 4), Ok(()));
        assert_eq!(
            check_epoch(5, 4),
            Err(FenceError::UnknownEpoch {
                epoch: 5,
                current: 4
            })
        );
        assert_eq!(
            check_epoch(0, 0),
            Err(FenceError::UnknownEpoch {
                epoch: 0,
                current: 0
            })
        );
        assert_eq!(
            FenceError::Fenced {
                epoch: 33,
                current: 34
            }
            .to_string(),
            "fenced: epoch 33 < current 34"
        );
    }

    /// A failed persist leaves the epoch where it was.
    #[test]
    fn failed_persist_does_not_install() {
        let fence = Fence::new(1, ());
        let result: Result<(), io::Error> =
            fence.install_epoch(2, |_, _| Err(io::Error::other("disk")));
        assert!(result.is_err());
        assert_eq!(fence.current_epoch(), 1);
    }

    impl From<FenceError> for io::Error {
        fn from(error: FenceError) -> Self {
            io::Error::other(error)
        }
    }

    impl From<ReplicaError> for io::Error {
        fn from(error: ReplicaError) -> Self {
            io::Error::other(error)
        }
    }

    /// A partition re-created at creation epoch 6 (its deleted predecessor reached 5): every
    /// old epoch is fenced with both epochs named, 6 itself was never granted, writers without
    /// a lease pass until the first grant (7), which then fences them.
    #[test]
    fn a_recreated_partition_fences_every_old_epoch() {
        assert_eq!(
            check_credential_since(WriteCredential::Epoch(5), 6, 6),
            Err(FenceError::Fenced {
                epoch: 5,
                current: 6
            })
        );
        assert_eq!(
            check_credential_since(WriteCredential::Epoch(1), 6, 6),
            Err(FenceError::Fenced {
                epoch: 1,
                current: 6
            })
        );
        assert_eq!(
            check_credential_since(WriteCredential::Epoch(6), 6, 6),
            Err(FenceError::UnknownEpoch {
                epoch: 6,
                current: 6
            })
        );
        assert_eq!(
            check_credential_since(WriteCredential::Unleased, 6, 6),
            Ok(())
        );
        assert_eq!(
            check_credential_since(WriteCredential::Epoch(7), 7, 6),
            Ok(())
        );
        assert_eq!(
            check_credential_since(WriteCredential::Unleased, 7, 6),
            Err(FenceError::Leased { current: 7 })
        );
        let fence = Fence::with_creation_epoch(0, 6, ());
        assert_eq!(
            fence.current_epoch(),
            6,
            "current starts at the creation epoch"
        );
    }

    /// The creation epoch survives a reload beside the history, counts as the latest epoch, and
    /// is never lowered.
    #[test]
    fn creation_epoch_round_trips_and_is_never_lowered() {
        let dir = tempfile::tempdir().unwrap();
        let mut checkpoint = EpochCheckpoint::load(dir.path()).unwrap();
        checkpoint.record_creation(6).unwrap();
        assert_eq!(checkpoint.latest_epoch(), 6);
        checkpoint.record(7, 0).unwrap();
        let reloaded = EpochCheckpoint::load(dir.path()).unwrap();
        assert_eq!(reloaded.creation_epoch(), 6);
        assert_eq!(reloaded.latest_epoch(), 7);
        assert_eq!(reloaded.history(), &[(7, 0)]);
        let mut reloaded = reloaded;
        assert!(reloaded.record_creation(5).is_err());
        assert_eq!(
            fs::read_to_string(dir.path().join(CHECKPOINT_FILE)).unwrap(),
            "created 6\n7 0\n"
        );
    }

    /// The checkpoint survives a reload and keeps a bounded history.
    #[test]
    fn checkpoint_round_trips_and_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let mut checkpoint = EpochCheckpoint::load(dir.path()).unwrap();
        for epoch in 1..=100 {
            checkpoint.record(epoch, epoch * 10).unwrap();
        }
        let reloaded = EpochCheckpoint::load(dir.path()).unwrap();
        assert_eq!(reloaded.latest_epoch(), 100);
        assert_eq!(reloaded.history().len(), CHECKPOINT_HISTORY_MAX);
    }
}

/// loom models of the real [`Fence`]: run with
/// `RUSTFLAGS="--cfg fencelog_loom" cargo test --release --lib loom_`.
///
/// The log behind the fence is an in-memory list of the epochs appended, in offset order (offset =
/// index), so the models check the fence's own locking, not file I/O.
#[cfg(all(test, fencelog_loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// Either refusal the fence gives, for the models' results.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Refused {
        Fence(FenceError),
        Replica(ReplicaError),
    }

    impl From<FenceError> for Refused {
        fn from(error: FenceError) -> Self {
            Refused::Fence(error)
        }
    }

    impl From<ReplicaError> for Refused {
        fn from(error: ReplicaError) -> Self {
            Refused::Replica(error)
        }
    }

    fn append(fence: &Fence<Vec<u64>>, epoch: u64) -> Result<usize, Refused> {
        fence.append(epoch, |log| {
            log.push(epoch);
            Ok(log.len() - 1)
        })
    }

    fn assert_epochs_never_decrease(log: &[u64]) {
        assert!(
            log.windows(2).all(|pair| pair[0] <= pair[1]),
            "epochs decrease: {log:?}"
        );
    }

    /// An install of epoch 2 races an append of the old holder (epoch 1) and is followed by the
    /// new holder's append: once install returns, no epoch-1 batch can land after the point
    /// where the install happened, and the old holder's append either landed before it or was
    /// fenced with the right numbers.
    #[test]
    fn loom_install_fences_the_old_holder() {
        loom::model(|| {
            let fence = Arc::new(Fence::new(1, Vec::new()));
            let old_holder = {
                let fence = Arc::clone(&fence);
                thread::spawn(move || append(&fence, 1))
            };
            let new_holder = {
                let fence = Arc::clone(&fence);
                thread::spawn(move || {
                    let mut length_at_install = 0;
                    fence
                        .install_epoch(2, |_, log: &mut Vec<u64>| {
                            length_at_install = log.len();
                            Ok::<_, Refused>(())
                        })
                        .unwrap();
                    append(&fence, 2).unwrap();
                    length_at_install
                })
            };
            let old_result = old_holder.join().unwrap();
            let length_at_install = new_holder.join().unwrap();
            fence.with_log(|log| {
                assert!(
                    log[length_at_install..].iter().all(|epoch| *epoch >= 2),
                    "an epoch-1 batch landed after epoch 2 was installed: {log:?}"
                );
                assert_epochs_never_decrease(log);
                match old_result {
                    Ok(position) => assert!(position < length_at_install),
                    Err(error) => assert_eq!(
                        error,
                        Refused::Fence(FenceError::Fenced {
                            epoch: 1,
                            current: 2
                        })
                    ),
                }
            });
            assert_eq!(fence.current_epoch(), 2);
        });
    }

    /// A writer without a lease (a Kafka producer) races the first grant: once epoch 1 is
    /// installed, no unleased (epoch-0) batch lands after that point, and the unleased writer
    /// is told the partition is leased.
    #[test]
    fn loom_first_grant_fences_unleased_writers() {
        loom::model(|| {
            let fence = Arc::new(Fence::new(0, Vec::new()));
            let unleased = {
                let fence = Arc::clone(&fence);
                thread::spawn(move || {
                    fence.append_as(WriteCredential::Unleased, |log: &mut Vec<u64>| {
                        log.push(0);
                        Ok::<_, Refused>(log.len() - 1)
                    })
                })
            };
            let mut length_at_install = 0;
            fence
                .install_epoch(1, |_, log: &mut Vec<u64>| {
                    length_at_install = log.len();
                    Ok::<_, Refused>(())
                })
                .unwrap();
            append(&fence, 1).unwrap();
            let result = unleased.join().unwrap();
            fence.with_log(|log| {
                assert!(log[length_at_install..].iter().all(|epoch| *epoch == 1));
                assert_epochs_never_decrease(log);
                match result {
                    Ok(position) => assert!(position < length_at_install),
                    Err(error) => {
                        assert_eq!(error, Refused::Fence(FenceError::Leased { current: 1 }))
                    }
                }
            });
        });
    }

    /// A partition re-created at creation epoch 6 (its deleted predecessor's holder had 5):
    /// the old holder, a writer without a lease and the first grant (7) race. The old holder is
    /// always fenced with both epochs named; the unleased batch lands only before the grant.
    #[test]
    fn loom_recreated_partition_fences_old_holders_and_first_grant_fences_unleased() {
        loom::model(|| {
            let fence = Arc::new(Fence::with_creation_epoch(6, 6, Vec::new()));
            let old_holder = {
                let fence = Arc::clone(&fence);
                thread::spawn(move || append(&fence, 5))
            };
            let unleased = {
                let fence = Arc::clone(&fence);
                thread::spawn(move || {
                    fence.append_as(WriteCredential::Unleased, |log: &mut Vec<u64>| {
                        log.push(0);
                        Ok::<_, Refused>(log.len() - 1)
                    })
                })
            };
            let mut length_at_install = 0;
            fence
                .install_epoch(7, |_, log: &mut Vec<u64>| {
                    length_at_install = log.len();
                    Ok::<_, Refused>(())
                })
                .unwrap();
            append(&fence, 7).unwrap();
            let old_result = old_holder.join().unwrap();
            let unleased_result = unleased.join().unwrap();
            assert!(matches!(
                old_result,
                Err(Refused::Fence(FenceError::Fenced { epoch: 5, current })) if current >= 6
            ));
            fence.with_log(|log| {
                assert!(!log.contains(&5), "an old holder's batch landed: {log:?}");
                assert!(log[length_at_install..].iter().all(|epoch| *epoch == 7));
                match unleased_result {
                    Ok(position) => assert!(position < length_at_install),
                    Err(error) => {
                        assert_eq!(error, Refused::Fence(FenceError::Leased { current: 7 }))
                    }
                }
            });
        });
    }

    /// Two appenders with the current epoch race each other and an install: every accepted
    /// append gets its own position (offsets dense and unique) and epochs never decrease.
    #[test]
    fn loom_concurrent_appends_get_dense_unique_offsets() {
        loom::model(|| {
            let fence = Arc::new(Fence::new(1, Vec::new()));
            let appenders: Vec<_> = (0..2)
                .map(|_| {
                    let fence = Arc::clone(&fence);
                    thread::spawn(move || append(&fence, 1))
                })
                .collect();
            let installer = {
                let fence = Arc::clone(&fence);
                thread::spawn(move || {
                    fence
                        .install_epoch(2, |_, _: &mut Vec<u64>| Ok::<_, Refused>(()))
                        .unwrap()
                })
            };
            let mut positions: Vec<usize> = appenders
                .into_iter()
                .filter_map(|handle| handle.join().unwrap().ok())
                .collect();
            installer.join().unwrap();
            positions.sort_unstable();
            fence.with_log(|log| {
                assert_eq!(positions, (0..log.len()).collect::<Vec<_>>());
                assert_epochs_never_decrease(log);
            });
        });
    }

    /// A replicated append from the leader of epoch 1 races `become_follower(2)` on a follower
    /// (the leader was deposed while its fetch response was in flight), through the real fence
    /// code: once the install returns, no append of leader epoch 1 can land after the point
    /// where it happened, and the racing append either landed before it or was fenced with both
    /// epochs named. A later append from the new leader (epoch 2) is accepted.
    #[test]
    fn loom_become_follower_fences_the_deposed_leaders_appends() {
        loom::model(|| {
            let replica = ReplicaState {
                role: Role::Follower,
                leader_epoch: 1,
                leased: false,
            };
            let fence = Arc::new(Fence::with_replica_state(0, 0, replica, Vec::new()));
            let deposed = {
                let fence = Arc::clone(&fence);
                thread::spawn(move || {
                    fence.append_replicated(1, |log: &mut Vec<u64>, _| {
                        log.push(1);
                        Ok::<_, Refused>(log.len() - 1)
                    })
                })
            };
            let mut length_at_install = 0;
            fence
                .become_follower(2, |change, log: &mut Vec<u64>| {
                    assert_eq!(change.producer_epoch, None);
                    length_at_install = log.len();
                    Ok::<_, Refused>(())
                })
                .unwrap();
            fence
                .append_replicated(2, |log: &mut Vec<u64>, _| {
                    log.push(2);
                    Ok::<_, Refused>(())
                })
                .unwrap();
            let result = deposed.join().unwrap();
            fence.with_log(|log| {
                assert!(
                    log[length_at_install..].iter().all(|epoch| *epoch == 2),
                    "a leader-epoch-1 batch landed after epoch 2 was installed: {log:?}"
                );
                match result {
                    Ok(position) => assert!(position < length_at_install),
                    Err(error) => assert_eq!(
                        error,
                        Refused::Replica(ReplicaError::FencedLeaderEpoch {
                            epoch: 1,
                            current: 2
                        })
                    ),
                }
            });
            assert_eq!(fence.leader_epoch(), 2);
        });
    }

    /// A follower of leader epoch 1 takes over (`become_leader(2)`) while a replicated append of
    /// epoch 1 and a producer append race it: once the takeover returns, no replicated append
    /// can land (a leader takes none), the producer epoch base `2 << 32` is installed, and a
    /// producer append lands only after it, never under an older producer epoch.
    #[test]
    fn loom_become_leader_stops_replicated_appends_and_installs_the_base() {
        loom::model(|| {
            let replica = ReplicaState {
                role: Role::Follower,
                leader_epoch: 1,
                leased: false,
            };
            let fence = Arc::new(Fence::with_replica_state(7, 0, replica, Vec::new()));
            let replicated = {
                let fence = Arc::clone(&fence);
                thread::spawn(move || {
                    fence.append_replicated(1, |log: &mut Vec<u64>, _| {
                        log.push(1);
                        Ok::<_, Refused>(log.len() - 1)
                    })
                })
            };
            let producer = {
                let fence = Arc::clone(&fence);
                thread::spawn(move || {
                    fence.append_as(WriteCredential::Unleased, |log: &mut Vec<u64>| {
                        log.push(0);
                        Ok::<_, Refused>(log.len() - 1)
                    })
                })
            };
            let mut length_at_install = 0;
            fence
                .become_leader(2, |change, log: &mut Vec<u64>| {
                    assert_eq!(change.producer_epoch, Some(producer_epoch_base(2)));
                    length_at_install = log.len();
                    Ok::<_, Refused>(())
                })
                .unwrap();
            assert_eq!(fence.current_epoch(), producer_epoch_base(2));
            let replicated = replicated.join().unwrap();
            let produced = producer.join().unwrap();
            fence.with_log(|log| match replicated {
                Ok(position) => {
                    assert!(position < length_at_install);
                    assert!(!log[length_at_install..].contains(&1));
                }
                Err(error) => assert!(matches!(
                    error,
                    Refused::Replica(ReplicaError::NotFollower { .. })
                )),
            });
            match produced {
                Ok(position) => assert!(position >= length_at_install),
                Err(error) => assert_eq!(
                    error,
                    Refused::Replica(ReplicaError::NotLeader { leader_epoch: 1 })
                ),
            }
        });
    }

    /// The offsets topic's case (`crate::broker::offsets_topic`): a group coordinator (the
    /// leader of an offsets partition, in leader epoch 1) appends a commit without a lease
    /// while it is deposed (`become_follower(2)`). Once the deposition returns no commit of the
    /// old coordinator lands after it: the racing commit either landed before (and is the new
    /// leader's to keep or truncate by leader epoch, never acknowledged by the old one past the
    /// deposition) or was refused as not the leader. The new leader's replicated records are
    /// then accepted.
    #[test]
    fn loom_a_deposed_coordinators_commit_never_lands_after_its_deposition() {
        loom::model(|| {
            let replica = ReplicaState {
                role: Role::Leader,
                leader_epoch: 1,
                leased: false,
            };
            let fence = Arc::new(Fence::with_replica_state(
                producer_epoch_base(1),
                0,
                replica,
                Vec::new(),
            ));
            let coordinator = {
                let fence = Arc::clone(&fence);
                thread::spawn(move || {
                    fence.append_as(WriteCredential::Unleased, |log: &mut Vec<u64>| {
                        log.push(1);
                        Ok::<_, Refused>(log.len() - 1)
                    })
                })
            };
            let mut length_at_install = 0;
            fence
                .become_follower(2, |_, log: &mut Vec<u64>| {
                    length_at_install = log.len();
                    Ok::<_, Refused>(())
                })
                .unwrap();
            fence
                .append_replicated(2, |log: &mut Vec<u64>, _| {
                    log.push(2);
                    Ok::<_, Refused>(())
                })
                .unwrap();
            let commit = coordinator.join().unwrap();
            fence.with_log(|log| {
                assert!(
                    log[length_at_install..].iter().all(|epoch| *epoch == 2),
                    "the deposed coordinator's commit landed after its deposition: {log:?}"
                );
                match commit {
                    Ok(position) => assert!(position < length_at_install),
                    Err(error) => assert!(
                        matches!(error, Refused::Replica(ReplicaError::NotLeader { .. })),
                        "{error:?}"
                    ),
                }
            });
            assert_eq!(fence.leader_epoch(), 2);
        });
    }

    /// A cluster topic deleted and re-created (`docs/replication.md`, "Topic delete on a
    /// cluster"): the deleted lineage's partitions reached leader epoch 5, so etcd's tombstone
    /// floor is 5 and the new lineage's leader takes over at leader epoch 7. On the re-created
    /// local partition (created at the broker's local fence floor: 0 on a broker that never held
    /// the old topic, or above the old holder's producer epoch on one that did), the old
    /// lineage's lease holder (producer epoch `5 << 32 | 1`) and its deposed leader (a replicated
    /// append of leader epoch 5) race the new leader's takeover. Neither ever lands, before or
    /// after the takeover, whatever the interleaving; the new leader's write does.
    #[test]
    fn loom_a_recreated_topics_partition_never_takes_the_deleted_lineages_writes() {
        let old_holder_epoch = producer_epoch_base(5) | 1;
        for creation_epoch in [0, old_holder_epoch + 1] {
            loom::model(move || {
                let fence = Arc::new(Fence::with_creation_epoch(
                    creation_epoch,
                    creation_epoch,
                    Vec::new(),
                ));
                let old_holder = {
                    let fence = Arc::clone(&fence);
                    thread::spawn(move || append(&fence, old_holder_epoch))
                };
                let old_leader = {
                    let fence = Arc::clone(&fence);
                    thread::spawn(move || {
                        fence.append_replicated(5, |log: &mut Vec<u64>, _| {
                            log.push(5);
                            Ok::<_, Refused>(log.len() - 1)
                        })
                    })
                };
                fence
                    .become_leader(7, |change, _: &mut Vec<u64>| {
                        assert_eq!(change.producer_epoch, Some(producer_epoch_base(7)));
                        Ok::<_, Refused>(())
                    })
                    .unwrap();
                fence
                    .append_as(WriteCredential::Unleased, |log: &mut Vec<u64>| {
                        log.push(7);
                        Ok::<_, Refused>(log.len() - 1)
                    })
                    .unwrap();
                let holder = old_holder.join().unwrap();
                let leader = old_leader.join().unwrap();
                assert!(
                    matches!(
                        holder,
                        Err(Refused::Fence(
                            FenceError::Fenced { .. } | FenceError::UnknownEpoch { .. }
                        ))
                    ),
                    "the deleted lineage's holder: {holder:?}"
                );
                assert!(
                    matches!(
                        leader,
                        Err(Refused::Replica(
                            ReplicaError::NotFollower { .. }
                                | ReplicaError::FencedLeaderEpoch { .. }
                        ))
                    ),
                    "the deleted lineage's leader: {leader:?}"
                );
                fence.with_log(|log| assert_eq!(log, &[7], "only the new lineage's write"));
                assert_eq!(fence.leader_epoch(), 7);
            });
        }
    }

    /// Two installs race: each epoch is installed at most once and the current epoch ends at the
    /// highest one installed; it never goes backwards.
    #[test]
    fn loom_racing_installs_never_go_backwards() {
        loom::model(|| {
            let fence = Arc::new(Fence::new(1, Vec::new()));
            let installs: Vec<_> = [2, 3]
                .into_iter()
                .map(|epoch| {
                    let fence = Arc::clone(&fence);
                    thread::spawn(move || {
                        let result =
                            fence.install_epoch(epoch, |_, _: &mut Vec<u64>| Ok::<_, Refused>(()));
                        let seen = fence.current_epoch();
                        assert!(seen >= epoch || result.is_err());
                        result.is_ok()
                    })
                })
                .collect();
            let installed: Vec<bool> = installs.into_iter().map(|h| h.join().unwrap()).collect();
            assert!(
                installed[1],
                "epoch 3 is above every other epoch and must install"
            );
            assert_eq!(fence.current_epoch(), 3);
        });
    }

    /// The log of the resend model: `(epoch, batch id)` per offset.
    type Batches = Vec<(u64, u32)>;

    /// A producer's send of batch `id` under `epoch`, the way the partition answers it: a batch
    /// the log holds (same id, same epoch: an exact resend) gets its offset and writes nothing,
    /// whether the epoch is current or superseded; a new batch is appended only under the
    /// current epoch.
    fn send(fence: &Fence<Batches>, epoch: u64, id: u32) -> Result<usize, Refused> {
        let find = |log: &Batches| log.iter().position(|batch| *batch == (epoch, id));
        fence.append_or_answer_resend(
            WriteCredential::Epoch(epoch),
            |log, refusal| find(log).ok_or(Refused::Fence(refusal)),
            |log| {
                Ok(find(log).unwrap_or_else(|| {
                    log.push((epoch, id));
                    log.len() - 1
                }))
            },
        )
    }

    /// An exact resend of an epoch-1 batch (its first answer was lost) races the install of
    /// epoch 2, the new holder's append, and a *new* batch of the old holder: the resend never
    /// writes and always gets its original offset, whether it runs before or after the
    /// install; the old holder's new batch either landed before the install or was fenced,
    /// and nothing of epoch 1 lands after the install.
    #[test]
    fn loom_an_exact_resend_across_a_new_epoch_gets_its_offset_and_writes_nothing() {
        loom::model(|| {
            let fence = Arc::new(Fence::new(1, Vec::new()));
            assert_eq!(send(&fence, 1, 10), Ok(0));
            let resend = {
                let fence = Arc::clone(&fence);
                thread::spawn(move || send(&fence, 1, 10))
            };
            let old_holder = {
                let fence = Arc::clone(&fence);
                thread::spawn(move || send(&fence, 1, 11))
            };
            let new_holder = {
                let fence = Arc::clone(&fence);
                thread::spawn(move || {
                    let mut length_at_install = 0;
                    fence
                        .install_epoch(2, |_, log: &mut Batches| {
                            length_at_install = log.len();
                            Ok::<_, Refused>(())
                        })
                        .unwrap();
                    send(&fence, 2, 20).unwrap();
                    length_at_install
                })
            };
            let resent = resend.join().unwrap();
            let old_result = old_holder.join().unwrap();
            let length_at_install = new_holder.join().unwrap();
            assert_eq!(resent, Ok(0), "the resend gets its original offset");
            fence.with_log(|log| {
                assert_eq!(
                    log.iter().filter(|batch| batch.1 == 10).count(),
                    1,
                    "the resent batch is in the log once: {log:?}"
                );
                assert!(
                    log[length_at_install..].iter().all(|batch| batch.0 >= 2),
                    "an epoch-1 batch landed after epoch 2 was installed: {log:?}"
                );
                assert!(log.windows(2).all(|pair| pair[0].0 <= pair[1].0));
                match old_result {
                    Ok(position) => {
                        assert!(position < length_at_install);
                        assert_eq!(log[position], (1, 11));
                    }
                    Err(error) => {
                        assert_eq!(
                            error,
                            Refused::Fence(FenceError::Fenced {
                                epoch: 1,
                                current: 2
                            })
                        );
                        assert!(!log.contains(&(1, 11)), "refused yet written: {log:?}");
                    }
                }
            });
        });
    }
}
