//! Deleting records (moving the log start, Kafka's DeleteRecords) on one partition: the log
//! start is durable, never moves back nor past the high watermark, reads below it are refused,
//! the segments wholly below it go, and a crash between recording it and deleting them is
//! repaired on open.

use crate::support::storage;

use fencelog::batch::BatchHeader;
use fencelog::storage::{FlushPolicy, Limits, Partition, StorageError};
use storage::*;

/// A partition of small segments holding 60 batches of 5 records (offsets 0..300), several
/// segments long.
fn filled(directory: &std::path::Path) -> Partition {
    let partition = fresh(directory, config(SMALL_SEGMENT_BYTES, FlushPolicy::Always));
    for tag in 0..60 {
        partition.append(&batch(1, tag, 5, 40)).unwrap();
    }
    assert!(
        segment_bases(directory).len() > 3,
        "the log spans several segments"
    );
    partition
}

fn reopen(directory: &std::path::Path) -> Partition {
    Partition::open(
        "t/0",
        directory,
        config(SMALL_SEGMENT_BYTES, FlushPolicy::Always),
        &seal_worker(),
    )
    .expect("reopen")
}

/// Asserts that reads start exactly at `log_start`: below it out of range (naming it as the
/// earliest offset), at it the whole batch holding it.
fn assert_reads_start_at(partition: &Partition, log_start: u64) {
    match partition.read(log_start - 1, 1 << 20) {
        Err(StorageError::OffsetOutOfRange { earliest, .. }) => assert_eq!(earliest, log_start),
        other => panic!(
            "a read below the log start answered {:?}",
            other.map(|r| r.batches.len())
        ),
    }
    let read = partition.read(log_start, 1 << 20).unwrap();
    assert_eq!(read.log_start_offset, log_start);
    let first = BatchHeader::parse(&read.batches[0]).unwrap();
    assert!(
        first.base_offset <= log_start && log_start < first.next_offset(),
        "the first batch served holds the log start"
    );
}

#[test]
fn deleted_records_stay_deleted_after_a_reopen() {
    // Proves: records deleted below an offset inside a segment are refused on read, the
    // segments wholly below it are gone from the directory, the one it cuts stays, and all of
    // that holds after the partition is closed and opened again.
    let dir = tempfile::tempdir().unwrap();
    let partition = filled(dir.path());
    let bases_before = segment_bases(dir.path());
    let offset = bases_before[2] + 3;
    assert_eq!(partition.delete_records_before(offset).unwrap(), offset);
    assert_eq!(partition.log_start_offset(), offset);
    assert_reads_start_at(&partition, offset);
    assert_eq!(segment_bases(dir.path()), bases_before[2..].to_vec());
    drop(partition);

    let reopened = reopen(dir.path());
    assert_eq!(reopened.log_start_offset(), offset);
    assert_reads_start_at(&reopened, offset);
    assert_eq!(reopened.high_watermark(), 300);
}

#[test]
fn the_log_start_never_moves_back_nor_past_the_high_watermark() {
    // Proves: a lower offset than the log start changes nothing and answers the current log
    // start; an offset past the high watermark is refused as out of range and changes nothing;
    // the high watermark itself is allowed (everything is deleted, appends go on after it);
    // retention may move the log start further but never back.
    let dir = tempfile::tempdir().unwrap();
    let partition = filled(dir.path());
    assert_eq!(partition.delete_records_before(120).unwrap(), 120);
    assert_eq!(partition.delete_records_before(30).unwrap(), 120);
    assert_eq!(partition.log_start_offset(), 120);
    match partition.delete_records_before(301) {
        Err(StorageError::OffsetOutOfRange { latest, .. }) => assert_eq!(latest, 300),
        other => panic!("deleting past the high watermark answered {other:?}"),
    }
    assert_eq!(partition.log_start_offset(), 120);

    // Retention by size after the log start moved inside a segment: it keeps it or moves it on.
    partition
        .set_limits(Limits {
            retention_bytes: Some(SMALL_SEGMENT_BYTES * 2),
            ..partition.limits()
        })
        .unwrap();
    partition
        .enforce_retention(fencelog::batch::now_ms())
        .unwrap();
    let after_retention = partition.log_start_offset();
    assert!(
        after_retention >= 120,
        "retention moved the log start back to {after_retention}"
    );
    assert!(segment_bases(dir.path())[0] <= after_retention);

    assert_eq!(partition.delete_records_before(300).unwrap(), 300);
    let at_end = partition.read(300, 1 << 20).unwrap();
    assert!(at_end.batches.is_empty());
    assert_eq!(at_end.log_start_offset, 300);
    let appended = partition.append(&batch(1, 99, 2, 10)).unwrap();
    assert_eq!(appended.base_offset, 300);
    assert_eq!(partition.read(300, 1 << 20).unwrap().batches.len(), 1);
}

#[test]
fn a_crash_between_recording_the_log_start_and_deleting_segments_is_repaired_on_open() {
    // Proves: when the log start file was written but the segments below it were not deleted
    // yet (a crash in between), the open serves from the recorded log start, refuses reads
    // below it, and deletes the segments wholly below it.
    let dir = tempfile::tempdir().unwrap();
    drop(filled(dir.path()));
    let bases_before = segment_bases(dir.path());
    let offset = bases_before[1] + 1;
    fencelog::storage::log_start::save(dir.path(), offset).unwrap();

    let reopened = reopen(dir.path());
    assert_eq!(reopened.log_start_offset(), offset);
    assert_reads_start_at(&reopened, offset);
    assert_eq!(segment_bases(dir.path()), bases_before[1..].to_vec());
}

#[test]
fn a_recorded_log_start_past_a_shorter_log_starts_at_its_end() {
    // Proves: a log start recorded past the log end (a crash lost the tail under a lax flush
    // policy) does not hide what is appended after the restart: the log start is the log end.
    let dir = tempfile::tempdir().unwrap();
    drop(filled(dir.path()));
    fencelog::storage::log_start::save(dir.path(), 1_000).unwrap();
    let reopened = reopen(dir.path());
    assert_eq!(reopened.log_start_offset(), 300);
    reopened.append(&batch(1, 7, 1, 10)).unwrap();
    assert_eq!(reopened.read(300, 1 << 20).unwrap().batches.len(), 1);
}

#[test]
fn a_follower_adopts_the_leaders_log_start_only_up_to_its_own_high_watermark() {
    // Proves: `follow_log_start` (a follower seeing its leader's log start in a fetch answer)
    // moves the log start up to the leader's, durably (it survives a reopen), never past this
    // replica's own high watermark, and never back when the leader's is lower.
    let dir = tempfile::tempdir().unwrap();
    let partition = filled(dir.path());
    assert_eq!(partition.follow_log_start(42).unwrap(), 42);
    assert_eq!(partition.follow_log_start(7).unwrap(), 42);
    assert_eq!(partition.follow_log_start(1_000).unwrap(), 300);
    drop(partition);
    assert_eq!(reopen(dir.path()).log_start_offset(), 300);
}
