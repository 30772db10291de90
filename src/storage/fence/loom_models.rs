//! loom models of the real [`Fence`]: run with
//! `RUSTFLAGS="--cfg fencelog_loom" cargo test --release --lib loom_`.
//!
//! The log behind the fence is an in-memory list of the epochs appended, in offset order (offset =
//! index), so the models check the fence's own locking, not file I/O.
//!
//! Why a file of its own: the models are long and only built under `--cfg fencelog_loom`; they
//! drive the real [`Fence`] (this module's parent), never a copy of it.

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
                        ReplicaError::NotFollower { .. } | ReplicaError::FencedLeaderEpoch { .. }
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
