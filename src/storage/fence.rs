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
//! The fence does not know where epochs come from (the lease table today, perhaps an external lock
//! service later): issuance and enforcement are kept apart. It is generic over the log it guards
//! so that loom can model the real code with an in-memory log.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::durable_file::write_durably;
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
    if epoch == 0 || epoch == creation_epoch || epoch > current {
        Err(FenceError::UnknownEpoch { epoch, current })
    } else if epoch < current {
        Err(FenceError::Fenced { epoch, current })
    } else {
        Ok(())
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

/// A log guarded by an epoch: the check and the write share one lock.
#[derive(Debug)]
pub struct Fence<L> {
    state: Mutex<Guarded<L>>,
    /// Mirror of `Guarded::current` for lock-free reads (metadata, lease grants). Written only
    /// under the lock; never used for the check itself.
    current_mirror: AtomicU64,
    /// The epoch the partition was created at (0, or above every epoch of a deleted partition
    /// of the same name): never granted, fixed for the fence's life.
    creation_epoch: u64,
}

#[derive(Debug)]
struct Guarded<L> {
    current: u64,
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
        Self {
            state: Mutex::new(Guarded { current, log }),
            current_mirror: AtomicU64::new(current),
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

    /// Checks `epoch` and, if it is the current one, runs `write` on the log while still holding
    /// the lock. This is the only way to reach the log for writing.
    pub fn append<T, E>(
        &self,
        epoch: u64,
        write: impl FnOnce(&mut L) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<FenceError>,
    {
        self.append_as(WriteCredential::Epoch(epoch), write)
    }

    /// [`append`](Self::append) for any [`WriteCredential`]: the check and the write under one
    /// lock.
    pub fn append_as<T, E>(
        &self,
        credential: WriteCredential,
        write: impl FnOnce(&mut L) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<FenceError>,
    {
        let mut guarded = self.lock();
        check_credential_since(credential, guarded.current, self.creation_epoch)?;
        write(&mut guarded.log)
    }

    /// Makes `epoch` current. Refuses an epoch not above the current one. `persist` runs under the
    /// lock, before the epoch becomes current, and must make it durable (on failure nothing
    /// changes). It gets the log to read the offset where the epoch starts.
    pub fn install_epoch<E>(
        &self,
        epoch: u64,
        persist: impl FnOnce(u64, &mut L) -> Result<(), E>,
    ) -> Result<(), E>
    where
        E: From<FenceError>,
    {
        let mut guarded = self.lock();
        if epoch <= guarded.current {
            return Err(FenceError::EpochNotNewer {
                epoch,
                current: guarded.current,
            }
            .into());
        }
        persist(epoch, &mut guarded.log)?;
        guarded.current = epoch;
        self.current_mirror.store(epoch, Ordering::Release);
        Ok(())
    }

    /// Runs `f` on the log under the lock without an epoch check, for operations that do not
    /// write batches (reading the tail position, sealing segments on close, retention).
    pub fn with_log<T>(&self, f: impl FnOnce(&mut L) -> T) -> T {
        f(&mut self.lock().log)
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

    fn append(fence: &Fence<Vec<u64>>, epoch: u64) -> Result<usize, FenceError> {
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
                            Ok::<_, FenceError>(())
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
                        FenceError::Fenced {
                            epoch: 1,
                            current: 2
                        }
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
                        Ok::<_, FenceError>(log.len() - 1)
                    })
                })
            };
            let mut length_at_install = 0;
            fence
                .install_epoch(1, |_, log: &mut Vec<u64>| {
                    length_at_install = log.len();
                    Ok::<_, FenceError>(())
                })
                .unwrap();
            append(&fence, 1).unwrap();
            let result = unleased.join().unwrap();
            fence.with_log(|log| {
                assert!(log[length_at_install..].iter().all(|epoch| *epoch == 1));
                assert_epochs_never_decrease(log);
                match result {
                    Ok(position) => assert!(position < length_at_install),
                    Err(error) => assert_eq!(error, FenceError::Leased { current: 1 }),
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
                        Ok::<_, FenceError>(log.len() - 1)
                    })
                })
            };
            let mut length_at_install = 0;
            fence
                .install_epoch(7, |_, log: &mut Vec<u64>| {
                    length_at_install = log.len();
                    Ok::<_, FenceError>(())
                })
                .unwrap();
            append(&fence, 7).unwrap();
            let old_result = old_holder.join().unwrap();
            let unleased_result = unleased.join().unwrap();
            assert!(matches!(
                old_result,
                Err(FenceError::Fenced { epoch: 5, current }) if current >= 6
            ));
            fence.with_log(|log| {
                assert!(!log.contains(&5), "an old holder's batch landed: {log:?}");
                assert!(log[length_at_install..].iter().all(|epoch| *epoch == 7));
                match unleased_result {
                    Ok(position) => assert!(position < length_at_install),
                    Err(error) => assert_eq!(error, FenceError::Leased { current: 7 }),
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
                        .install_epoch(2, |_, _: &mut Vec<u64>| Ok::<_, FenceError>(()))
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
                        let result = fence
                            .install_epoch(epoch, |_, _: &mut Vec<u64>| Ok::<_, FenceError>(()));
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
}
