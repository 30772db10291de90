//! The standalone lease authority: the in-memory [`LeaseTable`], with each grant's epoch
//! installed durably in the partition's writer, and expiry read from an injectable [`Clock`].
//!
//! The table's operations are synchronous and a grant blocks on an fsync (the epoch checkpoint),
//! so [`LeaseAuthority::acquire`] runs it on tokio's blocking pool.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;

use super::authority::{AuthorityError, LeaseAuthority, LeaseTarget};
use super::{EpochInstaller, ExpiredLease, Grant, LeaseConfig, LeaseError, LeaseTable, Renewed};
use crate::clock::Clock;
use crate::storage::{Partition, StorageError};

/// The local lease table as a [`LeaseAuthority`].
#[derive(Debug, Clone)]
pub struct LocalLeaseAuthority {
    table: Arc<LeaseTable>,
    clock: Arc<dyn Clock>,
}

/// Installs epochs in a partition on behalf of the lease table, and keeps the storage error of
/// a failed install so it reaches the caller typed (the table itself only knows a boxed cause).
struct PartitionInstaller<'a> {
    log: &'a Partition,
    failure: Cell<Option<StorageError>>,
}

/// A failed install, as the table sees it; the typed error stays with the installer.
#[derive(Debug, thiserror::Error)]
#[error("installing the epoch failed")]
struct InstallFailed;

impl EpochInstaller for PartitionInstaller<'_> {
    type Error = InstallFailed;
    fn current_epoch(&self) -> u64 {
        self.log.current_epoch()
    }
    fn install_epoch(&self, epoch: u64) -> Result<(), InstallFailed> {
        self.log.install_epoch(epoch).map_err(|error| {
            self.failure.set(Some(error));
            InstallFailed
        })
    }
    fn lease_expired(&self, expired: &ExpiredLease) {
        self.log
            .metrics()
            .lease_expired_at(expired.epoch, &expired.holder, expired.expired_for);
    }
}

impl LocalLeaseAuthority {
    /// An empty table with these TTL bounds, expiring leases by `clock`.
    pub fn new(config: LeaseConfig, clock: Arc<dyn Clock>) -> Self {
        Self {
            table: Arc::new(LeaseTable::new(config)),
            clock,
        }
    }

    /// The grant itself, blocking on the epoch install: what [`LeaseAuthority::acquire`] runs on
    /// the blocking pool, and what the loom model below calls directly.
    pub fn acquire_blocking(
        &self,
        target: &LeaseTarget,
        holder: &str,
        ttl_ms: u64,
        now: Instant,
    ) -> Result<Grant, AuthorityError> {
        let installer = PartitionInstaller {
            log: &target.log,
            failure: Cell::new(None),
        };
        self.table
            .acquire(
                &target.topic,
                target.partition,
                holder,
                ttl_ms,
                &installer,
                now,
            )
            .map_err(|error| match (error, installer.failure.take()) {
                (LeaseError::Install { epoch, .. }, Some(source)) => AuthorityError::Install {
                    topic: target.topic.clone(),
                    partition: target.partition,
                    epoch,
                    source: Box::new(source),
                },
                (other, _) => AuthorityError::Refused(other),
            })
    }
}

/// A `LEASE_LOST` answer says where the partition is now. The table only knows the epochs it
/// granted since the server started (none after a restart), so the partition's installed epoch,
/// which is durable, is the floor of what is reported.
fn with_partition_epoch(error: LeaseError, log: &Partition) -> AuthorityError {
    match error {
        LeaseError::Lost {
            topic,
            partition,
            current_epoch,
            live,
        } => AuthorityError::Refused(LeaseError::Lost {
            topic,
            partition,
            current_epoch: current_epoch.max(log.current_epoch()),
            live,
        }),
        other => AuthorityError::Refused(other),
    }
}

fn ready<T: Send + 'static>(value: T) -> BoxFuture<'static, T> {
    Box::pin(futures::future::ready(value))
}

impl LeaseAuthority for LocalLeaseAuthority {
    fn lookup(&self, topic: &str, partition: u32) -> Option<super::LeaseInfo> {
        self.table.lookup(topic, partition, self.clock.now())
    }

    fn forget_topic(&self, topic: &str) {
        let forgotten = self.table.remove_topic(topic);
        tracing::debug!(topic, forgotten, "forgot the deleted topic's lease slots");
    }

    fn acquire(
        &self,
        target: LeaseTarget,
        holder: String,
        ttl_ms: u64,
    ) -> BoxFuture<'static, Result<Grant, AuthorityError>> {
        let authority = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let now = authority.clock.now();
                authority.acquire_blocking(&target, &holder, ttl_ms, now)
            })
            .await
            .unwrap_or_else(|join_error| Err(AuthorityError::Unavailable(join_error.to_string())))
        })
    }

    fn renew(
        &self,
        target: LeaseTarget,
        lease_id: u128,
    ) -> BoxFuture<'static, Result<Renewed, AuthorityError>> {
        let now = self.clock.now();
        let renewed = self
            .table
            .renew_observed(&target.topic, target.partition, lease_id, now, |expired| {
                target.log.metrics().lease_expired_at(
                    expired.epoch,
                    &expired.holder,
                    expired.expired_for,
                )
            })
            .map_err(|error| with_partition_epoch(error, &target.log));
        let installed = target.log.current_epoch();
        ready(match renewed {
            // Fenced by an epoch installed since (a new partition leader's base): the lease is
            // gone, and its holder must hear so now rather than at its next write.
            Ok(renewed) if renewed.epoch < installed => {
                let _ = self
                    .table
                    .release(&target.topic, target.partition, lease_id, now);
                Err(AuthorityError::Refused(LeaseError::Lost {
                    topic: target.topic.clone(),
                    partition: target.partition,
                    current_epoch: installed,
                    live: None,
                }))
            }
            other => other,
        })
    }

    fn release(
        &self,
        target: LeaseTarget,
        lease_id: u128,
    ) -> BoxFuture<'static, Result<(), AuthorityError>> {
        let now = self.clock.now();
        ready(
            self.table
                .release_observed(&target.topic, target.partition, lease_id, now, |expired| {
                    target.log.metrics().lease_expired_at(
                        expired.epoch,
                        &expired.holder,
                        expired.expired_for,
                    )
                })
                .map_err(|error| with_partition_epoch(error, &target.log)),
        )
    }
}

/// loom model at the service boundary: a lease grant racing the old holder's produce, through the
/// same authority and partition code the service calls (only the fence's lock and atomic are
/// modeled; file I/O runs for real in a temporary directory per iteration). Run with
/// `RUSTFLAGS="--cfg fencelog_loom" cargo test --release --lib loom_`.
#[cfg(all(test, fencelog_loom))]
mod loom_models {
    use super::*;
    use crate::batch::BatchBuilder;
    use crate::broker::Broker;
    use crate::clock::ManualClock;
    use crate::domain::{FlushPolicy, TopicConfig};
    use crate::storage::FenceError;

    /// A broker with one single-partition topic per name in `topics` (flush never, small
    /// segments; one partition each because a topic's partitions open on threads of their own,
    /// which loom does not model), a lease authority on a manual clock, and each topic's
    /// partition 0 as a lease target; the directory and broker must outlive the targets.
    fn partitions(
        topics: &[&str],
    ) -> (
        tempfile::TempDir,
        Broker,
        LocalLeaseAuthority,
        Vec<LeaseTarget>,
    ) {
        let directory = tempfile::tempdir().unwrap();
        let broker = Broker::open(directory.path()).unwrap();
        let config = TopicConfig {
            segment_bytes: 4096,
            flush: FlushPolicy::Never,
            retention_bytes: None,
            retention_ms: None,
        };
        let authority =
            LocalLeaseAuthority::new(LeaseConfig::default(), Arc::new(ManualClock::new()));
        let targets = topics
            .iter()
            .map(|topic| {
                broker.create_topic(topic, 1, config).unwrap();
                LeaseTarget {
                    topic: (*topic).into(),
                    partition: 0,
                    log: broker.partition(topic, 0).unwrap(),
                }
            })
            .collect();
        (directory, broker, authority, targets)
    }

    /// [`partitions`] of the one topic `t`.
    fn one_partition() -> (tempfile::TempDir, Broker, LocalLeaseAuthority, LeaseTarget) {
        let (directory, broker, authority, mut targets) = partitions(&["t"]);
        (directory, broker, authority, targets.remove(0))
    }

    fn batch(epoch: u64, value: &str) -> bytes::Bytes {
        let mut builder = BatchBuilder::new(epoch);
        builder.push(1, None, Some(value.as_bytes()));
        builder.finish()
    }

    /// A native atomic commit (the writer holds epoch 1 on both partitions) racing a grant of
    /// partition 1 to another writer, through the real `Partition::append_atomically` and
    /// `install_epoch`: either the whole step precedes the grant (both batches written, the
    /// one on partition 1 below where epoch 2 starts, and the decision made) or nothing of it
    /// is written, it was refused as fenced on partition 1 and never decided. Never one
    /// partition without the other.
    #[test]
    fn loom_atomic_commit_races_a_grant() {
        use crate::storage::{AtomicAppend, AtomicAppendError, Partition, WriteCredential};
        loom::model(|| {
            let (_directory, _broker, authority, mut targets) = partitions(&["a", "b"]);
            let (first, second) = (targets.remove(0), targets.remove(0));
            let now = Instant::now();
            for target in [&first, &second] {
                let lease = authority.acquire_blocking(target, "w", 100, now).unwrap();
                assert_eq!(lease.epoch, 1);
            }
            let committer = {
                let (zero, one) = (Arc::clone(&first.log), Arc::clone(&second.log));
                loom::thread::spawn(move || {
                    let (marker0, marker1) = (batch(1, "m0"), batch(1, "m1"));
                    let appends = [
                        AtomicAppend {
                            partition: &zero,
                            credential: WriteCredential::Epoch(1),
                            batch: &marker0,
                        },
                        AtomicAppend {
                            partition: &one,
                            credential: WriteCredential::Epoch(1),
                            batch: &marker1,
                        },
                    ];
                    let mut decided = false;
                    let result = Partition::append_atomically(&appends, || {
                        decided = true;
                        Ok::<(), ()>(())
                    });
                    let result = result
                        .map(|pending| pending.len())
                        .map_err(|error| match error {
                            AtomicAppendError::Refused { partition, source } => {
                                (partition, source.to_string())
                            }
                            other => panic!("unexpected {other:?}"),
                        });
                    (result, decided)
                })
            };
            second.log.install_epoch(2).unwrap();
            let (result, decided) = committer.join().unwrap();
            let epoch_2_starts = second
                .log
                .epoch_history()
                .into_iter()
                .find(|(epoch, _)| *epoch == 2)
                .map(|(_, start)| start)
                .unwrap();
            match result {
                Ok(2) => {
                    assert!(decided);
                    assert_eq!(first.log.log_end_offset(), 1);
                    assert_eq!(epoch_2_starts, 1, "the commit precedes the grant");
                }
                Err((partition, message)) => {
                    assert!(!decided, "refused steps are never decided");
                    assert_eq!(partition, "b/0");
                    assert_eq!(
                        message,
                        FenceError::Fenced {
                            epoch: 1,
                            current: 2
                        }
                        .to_string()
                    );
                    assert_eq!(first.log.log_end_offset(), 0, "nothing on partition 0");
                    assert_eq!(second.log.log_end_offset(), 0, "nothing on partition 1");
                    assert_eq!(epoch_2_starts, 0);
                }
                Ok(other) => panic!("{other} pending appends"),
            }
        });
    }

    /// Holder A (epoch 1) appends while holder B is granted the lease: after the grant returns,
    /// A's append cannot land. Either A's batch is before the offset where epoch 2 starts, or A
    /// was fenced with epoch 1 < current 2.
    #[test]
    fn loom_grant_races_old_holder_append() {
        loom::model(|| {
            let (_directory, _broker, authority, target) = one_partition();
            let now = Instant::now();
            let first = authority.acquire_blocking(&target, "a", 100, now).unwrap();
            assert_eq!(first.epoch, 1);
            let old_holder = {
                let partition = Arc::clone(&target.log);
                loom::thread::spawn(move || {
                    partition
                        .append(&batch(1, "a"))
                        .map(|appended| appended.base_offset)
                })
            };
            // A's lease has expired by B's clock: B is granted epoch 2.
            let later = now + std::time::Duration::from_millis(200);
            let grant = authority
                .acquire_blocking(&target, "b", 100, later)
                .unwrap();
            assert_eq!(grant.epoch, 2);
            let partition = &target.log;
            let epoch_two_starts = partition.epoch_history().last().unwrap().1;
            let old_result = old_holder.join().unwrap();
            match old_result {
                Ok(offset) => assert!(
                    offset < epoch_two_starts,
                    "stale batch at {offset} after epoch 2 began at {epoch_two_starts}"
                ),
                Err(StorageError::Fence(error)) => {
                    assert_eq!(
                        error,
                        FenceError::Fenced {
                            epoch: 1,
                            current: 2
                        }
                    )
                }
                Err(other) => panic!("unexpected error {other}"),
            }
            partition.append(&batch(2, "b")).unwrap();
            let read = partition.read(0, 1 << 20).unwrap();
            let records = crate::batch::decode_batches(read.batches.concat().into()).unwrap();
            assert!(records
                .windows(2)
                .all(|pair| pair[0].epoch <= pair[1].epoch));
        });
    }

    /// The zombie race of Kafka transactions (`crate::broker::transactions::coordinator`): the
    /// previous instance of a transactional id (producer 7, producer epoch 0) appends to its
    /// open transaction while the coordinator, after a new instance's `InitProducerId`, writes
    /// the abort marker with the bumped producer epoch 1 under the transactions' lease (epoch
    /// 1). Either the zombie's batch landed before the marker (inside the aborted transaction,
    /// hidden from read_committed) or the partition's producer state refused it as of an older
    /// producer epoch, checked in the writer's critical section; and no transaction stays open.
    #[test]
    fn loom_zombie_append_races_abort_marker() {
        use crate::batch::{control_batch, ControlMarker};
        use crate::storage::SequenceError;
        loom::model(|| {
            let (_directory, _broker, authority, target) = one_partition();
            let lease = authority
                .acquire_blocking(&target, "kafka-transactions", 100, Instant::now())
                .unwrap();
            let transactional = |sequence: i32, value: &str| {
                let mut builder = BatchBuilder::with_producer(lease.epoch, 7, 0).transactional();
                builder.push(1, None, Some(value.as_bytes()));
                builder.finish_with_sequence(sequence)
            };
            let partition = Arc::clone(&target.log);
            partition.append(&transactional(0, "first")).unwrap();
            let zombie = {
                let partition = Arc::clone(&partition);
                let batch = transactional(1, "late");
                loom::thread::spawn(move || partition.append(&batch).map(|a| a.base_offset))
            };
            let marker = partition
                .append(&control_batch(
                    lease.epoch,
                    7,
                    1,
                    ControlMarker::Abort,
                    0,
                    1,
                ))
                .unwrap()
                .base_offset;
            match zombie.join().unwrap() {
                Ok(offset) => assert!(
                    offset < marker,
                    "zombie batch at {offset} after the marker at {marker}"
                ),
                Err(StorageError::Sequence(SequenceError::StaleProducerEpoch {
                    producer_id: 7,
                    got: 0,
                    current: 1,
                })) => {}
                Err(other) => panic!("unexpected error {other}"),
            }
            assert!(partition.open_transactions().is_empty());
            let aborted = partition.aborted_transactions(0, marker + 1);
            assert_eq!(aborted.len(), 1);
            assert_eq!((aborted[0].producer_id, aborted[0].first_offset), (7, 0));
            assert_eq!(partition.last_stable_offset(), partition.high_watermark());
        });
    }

    /// A replicated leader's verification of a transaction's first batch (KIP-890, see
    /// `crate::storage::verification`) through the real partition: the leader records its
    /// question (guard `g`) *before* asking the coordinator, the coordinator answers "ongoing"
    /// and then ends the transaction, its commit marker racing the leader's append with `g`,
    /// while a later request of the same producer records a question of its own (it would be
    /// told the transaction is over, so it never appends). The batch lands before the marker
    /// (inside the transaction it closes) or is refused as unverified; never after it, where
    /// it would open a transaction no marker closes, whatever the later question did.
    #[test]
    fn loom_a_verified_batch_never_lands_after_its_transactions_marker() {
        use crate::batch::{control_batch, ControlMarker};
        use crate::storage::{SequenceError, WriteCredential};
        loom::model(|| {
            let (_directory, _broker, _authority, target) = one_partition();
            let partition = Arc::clone(&target.log);
            partition.become_leader(1).unwrap();
            let guard = partition
                .begin_verification(7, 0)
                .expect("nothing open yet");
            let marker = {
                let partition = Arc::clone(&partition);
                loom::thread::spawn(move || {
                    let marker = control_batch(0, 7, 0, ControlMarker::Commit, 1, 1);
                    partition
                        .append_pending_as(WriteCredential::Unleased, &marker)
                        .map(|pending| pending.offsets().base_offset)
                })
            };
            let later_question = {
                let partition = Arc::clone(&partition);
                loom::thread::spawn(move || partition.begin_verification(7, 0))
            };
            let mut first = BatchBuilder::with_producer(0, 7, 0).transactional();
            first.push(1, None, Some(b"first"));
            let appended = partition.append_pending_verified(
                WriteCredential::Unleased,
                crate::batch::BatchSlices::new(&first.finish_with_sequence(0)),
                Some(guard),
            );
            let marker = marker.join().unwrap().unwrap();
            later_question.join().unwrap();
            match appended {
                Ok(pending) => assert!(
                    pending.offsets().base_offset < marker,
                    "the batch at {} after its marker at {marker}",
                    pending.offsets().base_offset
                ),
                Err(StorageError::Sequence(SequenceError::UnverifiedTransaction {
                    producer_id: 7,
                    producer_epoch: 0,
                })) => {}
                Err(other) => panic!("unexpected error {other}"),
            }
            assert!(partition.open_transactions().is_empty());
        });
    }
}
