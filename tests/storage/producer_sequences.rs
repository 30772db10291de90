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

/// An exact resend of a batch written under epoch 1, after epoch 2 was granted (its first answer
/// was lost), gets its original offsets and writes nothing; a *new* batch of epoch 1 is refused
/// as fenced, before any other check (a gap, or other records under a remembered batch's
/// sequences, are still "fenced", not a sequence error).
#[test]
fn an_exact_resend_across_a_newer_lease_gets_its_offsets_and_new_batches_are_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), config(1 << 20, FlushPolicy::Never));
    let batch = sequenced(1, 7, 0, 2);
    let first = partition.append(&batch).unwrap();
    partition.install_epoch(2).unwrap();
    let resent = partition.append(&batch).unwrap();
    assert!(resent.duplicate);
    assert_eq!(
        (resent.base_offset, resent.last_offset),
        (first.base_offset, first.last_offset)
    );
    let fenced = |result: Result<_, StorageError>| {
        matches!(
            result,
            Err(StorageError::Fence(FenceError::Fenced {
                epoch: 1,
                current: 2
            }))
        )
    };
    // The next batch, a gap, and other records under the remembered sequences.
    assert!(fenced(partition.append(&sequenced(1, 7, 2, 1))));
    assert!(fenced(partition.append(&sequenced(1, 7, 9, 1))));
    let mut other = BatchBuilder::with_producer(1, 7, 0);
    other.push(1_000, None, Some(b"not what was written"));
    other.push(1_000, None, Some(b"at these sequences"));
    assert!(fenced(partition.append(&other.finish_with_sequence(0))));
    // A producer the partition never saw (it has forgotten none) is fenced too.
    assert!(fenced(partition.append(&sequenced(1, 8, 0, 1))));
    assert_eq!(values(&partition), ["p7 s0", "p7 s1"]);
}

/// A stale-epoch resend whose sequences were appended longer ago than the partition remembers
/// offsets for is answered "duplicate" (appended, offsets forgotten), never "fenced"; and once
/// the partition has forgotten a producer, a stale batch of a producer it does not remember is
/// answered "cannot tell" (the client reports its outcome unknown), never "fenced".
#[test]
fn stale_resends_the_partition_cannot_place_are_never_called_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut small = config(1 << 20, FlushPolicy::Never);
    small.max_producers = 1;
    let partition = fresh(dir.path(), small);
    let old = sequenced(1, 7, 0, 1);
    partition.append(&old).unwrap();
    for sequence in 1..=(fencelog::domain::PRODUCER_BATCH_WINDOW as i32 + 1) {
        partition.append(&sequenced(1, 7, sequence, 1)).unwrap();
    }
    partition.install_epoch(2).unwrap();
    assert!(matches!(
        partition.append(&old),
        Err(StorageError::Sequence(SequenceError::Duplicate {
            got: 0,
            ..
        }))
    ));
    // Producer 8 pushes producer 7 out (at most one producer is remembered).
    partition.append(&sequenced(2, 8, 0, 1)).unwrap();
    partition.install_epoch(3).unwrap();
    assert!(matches!(
        partition.append(&sequenced(1, 7, 3, 1)),
        Err(StorageError::Sequence(SequenceError::ForgottenResend {
            producer_id: 7,
            epoch: 1,
            current: 3,
            ..
        }))
    ));
    // A never-granted epoch is unknown, resend or not.
    assert!(matches!(
        partition.append(&sequenced(4, 8, 0, 1)),
        Err(StorageError::Fence(FenceError::UnknownEpoch { .. }))
    ));
}

/// A Kafka producer (no lease) whose batch landed before the partition's first grant gets the
/// batch's offsets when it resends it afterwards; its new batches are refused as leased.
#[test]
fn an_unleased_writers_resend_after_the_first_grant_gets_its_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let partition = Partition::open(
        "t/0",
        dir.path(),
        config(1 << 20, FlushPolicy::Never),
        &seal_worker(),
    )
    .unwrap();
    let batch = sequenced(0, 7, 0, 1);
    let append = |bytes: &Bytes| {
        partition
            .append_pending_as(WriteCredential::Unleased, bytes)
            .and_then(|pending| partition.acknowledge(pending))
    };
    assert_eq!(append(&batch).unwrap().base_offset, 0);
    partition.install_epoch(1).unwrap();
    let resent = append(&batch).unwrap();
    assert!(resent.duplicate && resent.base_offset == 0);
    assert!(matches!(
        append(&sequenced(0, 7, 1, 1)),
        Err(StorageError::Fence(FenceError::Leased { current: 1 }))
    ));
    assert_eq!(values(&partition), ["p7 s0"]);
}

/// The resend is recognised after a restart too (the producer state is rebuilt from the log and
/// its snapshot).
#[test]
fn an_exact_resend_across_a_newer_lease_is_recognised_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let batch = sequenced(1, 7, 0, 2);
    {
        let partition = fresh(dir.path(), config(1 << 20, FlushPolicy::Always));
        partition.append(&batch).unwrap();
        partition.install_epoch(2).unwrap();
    }
    let partition = Partition::open(
        "t/0",
        dir.path(),
        config(1 << 20, FlushPolicy::Always),
        &seal_worker(),
    )
    .unwrap();
    let resent = partition.append(&batch).unwrap();
    assert!(resent.duplicate && resent.base_offset == 0);
    assert_eq!(values(&partition), ["p7 s0", "p7 s1"]);
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
