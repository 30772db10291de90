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
//!
//! The parts: the lock and everything done under it (here), the pure epoch comparisons it
//! applies (`rules`), the replication state it guards (`replica`), the checkpoint file its
//! installs persist to (`checkpoint`), and the loom models of this very code (`loom_models`).
mod checkpoint;
mod replica;
mod rules;

use crate::domain::{leader_epoch_of_producer_epoch, producer_epoch_base, LeaderEpoch};
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering};

pub use checkpoint::{
    EpochCheckpoint, CHECKPOINT_FILE, CHECKPOINT_HISTORY_MAX, CREATION_EPOCH_KEYWORD,
};
pub use replica::{LeaseEvidence, ReplicaError, ReplicaState, Role, RoleChange};
pub use rules::{
    check_credential, check_credential_since, check_epoch, check_epoch_since, check_leader_epoch,
    epoch_standing, EpochStanding, FenceError, WriteCredential,
};

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

#[cfg(all(test, not(fencelog_loom)))]
mod tests {
    use super::*;
    use std::fs;
    use std::io;

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

/// loom models of the real [`Fence`] (see the file).
#[cfg(all(test, fencelog_loom))]
mod loom_models;
