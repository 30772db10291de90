//! Idempotent appends at the partition: a producer's retries land once, a gap stops the batches
//! behind a failed one, and the state survives a clean restart and a crash.

use crate::support::storage;

use bytes::Bytes;
use fencelog::batch::BatchBuilder;
use fencelog::storage::producer_state::SNAPSHOT_FILE;
use fencelog::storage::{
    FenceError, FlushPolicy, Partition, SequenceError, StorageError, WriteCredential,
};
use storage::{config, copy_directory, fresh, read_all_records, seal_worker, SMALL_SEGMENT_BYTES};

/// A batch of producer `producer_id` (session 0) with `records` records from `sequence` on,
/// under partition epoch `epoch`; each value names its sequence number.
fn sequenced(epoch: u64, producer_id: i64, sequence: i32, records: u32) -> Bytes {
    let mut builder = BatchBuilder::with_producer(epoch, producer_id, 0);
    for index in 0..records {
        let value = format!("p{producer_id} s{}", sequence + index as i32);
        builder.push(1_000, None, Some(value.as_bytes()));
    }
    builder.finish_with_sequence(sequence)
}

fn values(partition: &Partition) -> Vec<String> {
    read_all_records(partition)
        .into_iter()
        .map(|record| String::from_utf8(record.value.unwrap().to_vec()).unwrap())
        .collect()
}

#[test]
fn a_retried_batch_is_answered_with_its_first_offsets_and_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), config(1 << 20, FlushPolicy::Always));
    let first = partition.append(&sequenced(1, 7, 0, 3)).unwrap();
    let second = partition.append(&sequenced(1, 7, 3, 2)).unwrap();
    let retry = partition.append(&sequenced(1, 7, 0, 3)).unwrap();
    assert!(retry.duplicate && !first.duplicate);
    assert_eq!(
        (retry.base_offset, retry.last_offset),
        (first.base_offset, first.last_offset)
    );
    assert_eq!(retry.log_end_offset, second.log_end_offset);
    assert_eq!(
        values(&partition),
        ["p7 s0", "p7 s1", "p7 s2", "p7 s3", "p7 s4"]
    );
}

#[test]
fn after_a_failed_batch_nothing_of_that_producer_lands_until_it_is_resent() {
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), config(1 << 20, FlushPolicy::Never));
    partition.append(&sequenced(1, 7, 0, 2)).unwrap();
    // The batch at sequence 2 never arrived (or was refused): the one after it must not land.
    let gap = partition.append(&sequenced(1, 7, 4, 1));
    assert!(
        matches!(
            gap,
            Err(StorageError::Sequence(SequenceError::OutOfOrder {
                expected: 2,
                got: 4,
                ..
            }))
        ),
        "{gap:?}"
    );
    // Other producers are not held up.
    partition.append(&sequenced(1, 8, 0, 1)).unwrap();
    partition.append(&sequenced(1, 7, 2, 2)).unwrap();
    partition.append(&sequenced(1, 7, 4, 1)).unwrap();
    assert_eq!(
        values(&partition),
        ["p7 s0", "p7 s1", "p8 s0", "p7 s2", "p7 s3", "p7 s4"]
    );
}

#[test]
fn the_fence_is_checked_before_the_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), config(1 << 20, FlushPolicy::Never));
    partition.append(&sequenced(1, 7, 0, 1)).unwrap();
    partition.install_epoch(2).unwrap();
    // Even a retry of a batch that is in the log tells a stale writer it is stale.
    assert!(matches!(
        partition.append(&sequenced(1, 7, 0, 1)),
        Err(StorageError::Fence(FenceError::Fenced {
            epoch: 1,
            current: 2
        }))
    ));
}

/// Fills several small segments with batches of three producers; returns the next sequence of
/// each.
fn fill(partition: &Partition, batches: i32) -> [i32; 3] {
    let mut next = [0; 3];
    for batch in 0..batches {
        let producer = (batch % 3) as usize;
        partition
            .append(&sequenced(1, producer as i64, next[producer], 2))
            .unwrap();
        next[producer] += 2;
    }
    next
}

/// After reopening: the last batch of each producer is a duplicate, the next one appends.
fn assert_state_survived(partition: &Partition, next: [i32; 3]) {
    for (producer, next) in next.into_iter().enumerate() {
        let retry = partition
            .append(&sequenced(1, producer as i64, next - 2, 2))
            .unwrap();
        assert!(retry.duplicate, "producer {producer}'s last batch");
        assert!(matches!(
            partition.append(&sequenced(1, producer as i64, next + 2, 2)),
            Err(StorageError::Sequence(SequenceError::OutOfOrder { .. }))
        ));
        assert!(
            !partition
                .append(&sequenced(1, producer as i64, next, 2))
                .unwrap()
                .duplicate
        );
    }
}

#[test]
fn producer_state_survives_a_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(SMALL_SEGMENT_BYTES, FlushPolicy::Never);
    let next = {
        let partition = fresh(dir.path(), config);
        fill(&partition, 200)
    };
    assert!(dir.path().join(SNAPSHOT_FILE).exists());
    let reopened = Partition::open("t/0", dir.path(), config, &seal_worker()).unwrap();
    assert_state_survived(&reopened, next);
}

#[test]
fn producer_state_survives_a_crash_from_the_roll_snapshot_or_from_the_log_alone() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(SMALL_SEGMENT_BYTES, FlushPolicy::Always);
    let partition = fresh(dir.path(), config);
    let next = fill(&partition, 200);
    // The seal thread writes a roll's snapshot once the full segment is durable.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !dir.path().join(SNAPSHOT_FILE).exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // A crash: the files as they are now, without the snapshot a clean close writes.
    let crashed = tempfile::tempdir().unwrap();
    copy_directory(dir.path(), crashed.path());
    assert!(
        crashed.path().join(SNAPSHOT_FILE).exists(),
        "written at a roll"
    );
    let without_snapshot = tempfile::tempdir().unwrap();
    copy_directory(dir.path(), without_snapshot.path());
    std::fs::remove_file(without_snapshot.path().join(SNAPSHOT_FILE)).unwrap();
    for copy in [&crashed, &without_snapshot] {
        let reopened = Partition::open("t/0", copy.path(), config, &seal_worker()).unwrap();
        assert_state_survived(&reopened, next);
    }
}

#[test]
fn a_snapshot_past_the_log_end_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(SMALL_SEGMENT_BYTES, FlushPolicy::Always);
    let (next, snapshot) = {
        let partition = fresh(dir.path(), config);
        let next = fill(&partition, 30);
        drop(partition);
        let snapshot = std::fs::read(dir.path().join(SNAPSHOT_FILE)).unwrap();
        (next, snapshot)
    };
    // A later snapshot from a log whose tail a crash then lost: it claims batches that are gone.
    let ahead = {
        let other = tempfile::tempdir().unwrap();
        copy_directory(dir.path(), other.path());
        let partition = Partition::open("t/0", other.path(), config, &seal_worker()).unwrap();
        fill_more(&partition, next);
        drop(partition);
        std::fs::read(other.path().join(SNAPSHOT_FILE)).unwrap()
    };
    assert_ne!(snapshot, ahead);
    std::fs::write(dir.path().join(SNAPSHOT_FILE), ahead).unwrap();
    let reopened = Partition::open("t/0", dir.path(), config, &seal_worker()).unwrap();
    assert!(
        !dir.path().join(SNAPSHOT_FILE).exists(),
        "an untrusted snapshot is removed, never trusted later"
    );
    // The log wins: the batches only the bad snapshot knew of are new again.
    assert_state_survived(&reopened, next);
}

fn fill_more(partition: &Partition, mut next: [i32; 3]) {
    for (producer, next) in next.iter_mut().enumerate() {
        partition
            .append(&sequenced(1, producer as i64, *next, 2))
            .unwrap();
        *next += 2;
    }
}

#[test]
fn writers_without_a_lease_append_until_the_first_grant() {
    let dir = tempfile::tempdir().unwrap();
    let partition = Partition::open(
        "t/0",
        dir.path(),
        config(1 << 20, FlushPolicy::Never),
        &seal_worker(),
    )
    .unwrap();
    let open = |sequence| sequenced(0, 7, sequence, 1);
    let pending = partition
        .append_pending_as(WriteCredential::Unleased, &open(0))
        .unwrap();
    assert_eq!(partition.acknowledge(pending).unwrap().base_offset, 0);
    // The batch must say it was written without a lease (epoch 0).
    assert!(matches!(
        partition.append_pending_as(WriteCredential::Unleased, &sequenced(1, 7, 1, 1)),
        Err(StorageError::InvalidBatch(_))
    ));
    partition.install_epoch(1).unwrap();
    assert!(matches!(
        partition.append_pending_as(WriteCredential::Unleased, &open(1)),
        Err(StorageError::Fence(FenceError::Leased { current: 1 }))
    ));
    assert_eq!(values(&partition), ["p7 s0"]);
}
