//! Sealed segments opened on first use (issue 14, item 5): a restart reads only the directory
//! listing for the segments below the recovery point (all but the newest of them), and the first
//! read, timestamp lookup, retention pass or background check opens them, with the same checks
//! and the same corruption reports as a restart that opened them. None of these tests measures
//! speed (tools/restart-bench does, for docs/benchmarks.md).

use crate::support::storage;

use std::path::Path;

use fencelog::batch::BatchHeader;
use fencelog::storage::{FlushPolicy, Partition, PartitionConfig, StorageError};

/// Small segments, so a few hundred records make a long log.
fn config() -> PartitionConfig {
    storage::config(storage::SMALL_SEGMENT_BYTES, FlushPolicy::Always)
}

/// Appends `batches` batches of 4 records (values from `storage::value`) and closes the
/// partition: every segment but the last is below the recovery point.
fn write_log(directory: &Path, config: PartitionConfig, batches: u64) {
    let partition = storage::fresh(directory, config);
    for tag in 0..batches {
        partition.append(&storage::batch(1, tag, 4, 100)).unwrap();
    }
}

/// `(position, header)` of every batch in a segment file, up to its zero tail.
fn batches_in(path: &Path) -> Vec<(usize, BatchHeader)> {
    let bytes = std::fs::read(path).unwrap();
    let mut position = 0;
    let mut found = Vec::new();
    while let Some(header) = BatchHeader::parse(&bytes[position..]) {
        if header.batch_length == 0 {
            break;
        }
        found.push((position, header));
        position += header.batch_length as usize;
    }
    found
}

fn reopen(
    directory: &Path,
    config: PartitionConfig,
) -> (Partition, fencelog::storage::RecoveryReport) {
    Partition::open_with_report("t/0", directory, config, &storage::seal_worker()).unwrap()
}

/// After a clean close, only the newest sealed segment and the active one are opened at start;
/// the older ones are only listed. A first read of each serves exactly what was written, from
/// any offset inside it, and the whole log reads back in order.
#[test]
fn older_sealed_segments_are_not_opened_at_start_and_their_first_read_serves_them() {
    let directory = tempfile::tempdir().unwrap();
    write_log(directory.path(), config(), 60);
    let written = {
        let (partition, _) = reopen(directory.path(), config());
        storage::read_all_records(&partition)
    };
    let bases = storage::segment_bases(directory.path());
    assert!(bases.len() > 5, "the log rolled: {bases:?}");
    let (partition, report) = reopen(directory.path(), config());
    assert_eq!(report.segments, bases.len());
    assert_eq!(report.segments_not_opened, bases.len() - 2, "{report:?}");
    assert!(report.damaged.is_empty());
    assert_eq!(partition.high_watermark(), 240);
    assert_eq!(partition.log_start_offset(), 0);
    // First reads in the middle of unopened segments, newest first.
    for window in bases[..bases.len() - 2].windows(2).rev() {
        let offset = window[0] + (window[1] - window[0]) / 2;
        let read = partition.read(offset, 1 << 20).unwrap();
        let records = storage::decode_concatenated(&read.batches);
        assert!(records.iter().any(|record| record.offset == offset));
        for record in &records {
            assert_eq!(record, &written[record.offset as usize]);
        }
    }
    assert_eq!(storage::read_all_records(&partition), written);
    assert!(
        fencelog::storage::open_sealed_segments() <= fencelog::storage::OPEN_SEALED_SEGMENTS_MAX
    );
}

/// A sealed segment damaged while the server was down, in a way only its first use can see
/// (its file cut inside a batch, so its data ends before the next segment begins), is reported
/// then as a restart that scanned it reports it: the offsets from the cut batch to the next
/// segment are refused with `Corrupt`, naming the segment file, the byte position and the
/// unreadable range; everything else is served; nothing is cut or deleted, the file is left as
/// found, and appends continue at the log end.
#[test]
fn damage_found_at_first_use_is_refused_and_reported_like_recovery_does() {
    let directory = tempfile::tempdir().unwrap();
    write_log(directory.path(), config(), 60);
    let bases = storage::segment_bases(directory.path());
    let path = directory.path().join(storage::log_name(bases[1]));
    let batches = batches_in(&path);
    let (position, header) = batches[batches.len() / 2];
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len((position + 20) as u64).unwrap();
    drop(file);
    let damaged_file = std::fs::read(&path).unwrap();

    let (partition, report) = reopen(directory.path(), config());
    assert!(report.segments_not_opened >= 2, "{report:?}");
    assert!(report.damaged.is_empty(), "nothing was opened: {report:?}");
    assert_eq!(partition.high_watermark(), 240, "nothing is cut");
    for offset in [header.base_offset, bases[2] - 1] {
        match partition.read(offset, 1 << 20) {
            Err(StorageError::Corrupt {
                segment,
                position: at,
                offset: read_at,
                reason,
                ..
            }) => {
                assert!(segment.ends_with(&storage::log_name(bases[1])), "{segment}");
                assert_eq!(at, position as u64);
                assert_eq!(read_at, offset);
                let range = format!(
                    "offsets {}..{} are unreadable",
                    header.base_offset, bases[2]
                );
                assert!(reason.contains(&range), "{reason}");
            }
            other => panic!("damaged offset {offset}: {}", storage::describe(&other)),
        }
    }
    let before = partition.read(bases[1], 1 << 20).unwrap();
    let records = storage::decode_concatenated(&before.batches);
    assert_eq!(records.first().unwrap().offset, bases[1]);
    assert!(records
        .iter()
        .all(|record| record.offset < header.base_offset));
    assert!(!partition
        .read(bases[2], 1 << 20)
        .unwrap()
        .batches
        .is_empty());
    assert!(!partition.read(0, 1 << 20).unwrap().batches.is_empty());
    let appended = partition.append(&storage::batch(1, 999, 1, 10)).unwrap();
    assert_eq!(appended.base_offset, 240);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        damaged_file,
        "the file is left as found"
    );
}

/// A flipped bit inside a batch of an unopened segment is found by the first read of it (its
/// CRC), refused from there to the next segment, and reported by the background check too.
#[test]
fn a_flipped_bit_in_an_unopened_segment_is_refused_on_first_read() {
    let directory = tempfile::tempdir().unwrap();
    write_log(directory.path(), config(), 60);
    let bases = storage::segment_bases(directory.path());
    let path = directory.path().join(storage::log_name(bases[0]));
    let (position, header) = batches_in(&path)[1];
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[position + 60] ^= 0x04;
    std::fs::write(&path, &bytes).unwrap();

    let (partition, report) = reopen(directory.path(), config());
    assert!(report.damaged.is_empty());
    assert!(partition.read(0, 1).is_ok(), "the batch before is served");
    assert!(matches!(
        partition.read(header.base_offset, 1 << 20),
        Err(StorageError::Corrupt { .. })
    ));
    assert!(matches!(
        partition.read(bases[1] - 1, 1 << 20),
        Err(StorageError::Corrupt { .. })
    ));
    // Every segment is checked; the damaged one stays unchecked (and refused).
    assert!(partition.verify_unscanned_segments(|| true) >= 1);
    assert_eq!(partition.verify_unscanned_segments(|| true), 1);
}

/// Retention by size counts segments that were never opened by their real size (learned from
/// their index when retention needs it): a reopened log over the limit loses exactly its oldest
/// segments until it fits, as a log that was never closed would.
#[test]
fn retention_by_size_deletes_unopened_segments_by_their_real_size() {
    let directory = tempfile::tempdir().unwrap();
    write_log(directory.path(), config(), 60);
    let bases = storage::segment_bases(directory.path());
    let sizes: Vec<u64> = bases
        .iter()
        .map(|base| {
            let path = directory.path().join(storage::log_name(*base));
            batches_in(&path)
                .iter()
                .map(|(_, header)| u64::from(header.batch_length))
                .sum()
        })
        .collect();
    let total: u64 = sizes.iter().sum();
    // Keep about half the log.
    let limit = total / 2;
    let mut expected_deleted = 0;
    let mut remaining = total;
    while remaining > limit {
        remaining -= sizes[expected_deleted];
        expected_deleted += 1;
    }
    let limited = PartitionConfig {
        retention_bytes: Some(limit),
        ..config()
    };
    let (partition, report) = reopen(directory.path(), limited);
    assert!(report.segments_not_opened > expected_deleted, "{report:?}");
    let deleted = partition
        .enforce_retention(fencelog::batch::now_ms())
        .unwrap();
    assert_eq!(deleted.segments, expected_deleted);
    assert_eq!(deleted.bytes, sizes[..expected_deleted].iter().sum::<u64>());
    assert_eq!(partition.log_start_offset(), bases[expected_deleted]);
    assert_eq!(
        storage::segment_bases(directory.path()),
        bases[expected_deleted..]
    );
    assert_eq!(
        partition
            .enforce_retention(fencelog::batch::now_ms())
            .unwrap()
            .segments,
        0
    );
}

/// Retention by age deletes unopened segments whose records are all older than the limit
/// without waiting for the background check: the oldest segments are checked (and so their
/// newest timestamp learned) when retention needs them, up to the first one that is recent
/// enough, which is kept with everything after it.
#[test]
fn retention_by_age_deletes_unopened_expired_segments() {
    let directory = tempfile::tempdir().unwrap();
    let now = fencelog::batch::now_ms();
    let old = now - 10 * 86_400_000;
    {
        let partition = storage::fresh(directory.path(), config());
        for _ in 0..30 {
            partition
                .append(&storage::batch_at(1, old, 4, 100))
                .unwrap();
        }
        let first_recent = partition
            .append(&storage::batch_at(1, now, 4, 100))
            .unwrap()
            .base_offset;
        for _ in 0..30 {
            partition
                .append(&storage::batch_at(1, now, 4, 100))
                .unwrap();
        }
        assert!(first_recent > 0);
    }
    let bases = storage::segment_bases(directory.path());
    // The segments holding only old records: those before the one holding offset 120.
    let expired = bases.iter().filter(|base| **base <= 120).count() - 1;
    assert!(expired >= 3, "{bases:?}");
    let limited = PartitionConfig {
        retention_ms: Some(86_400_000),
        ..config()
    };
    let (partition, report) = reopen(directory.path(), limited);
    assert!(report.segments_not_opened >= expired, "{report:?}");
    let deleted = partition.enforce_retention(now).unwrap();
    assert_eq!(deleted.segments, expired);
    assert_eq!(partition.log_start_offset(), bases[expired]);
    assert_eq!(partition.enforce_retention(now).unwrap().segments, 0);
    let read = partition.read(bases[expired], 1 << 20).unwrap();
    assert!(!read.batches.is_empty());
}

/// A timestamp lookup opens the unopened segments it needs and answers as before the restart.
#[test]
fn timestamp_lookup_opens_what_it_needs() {
    let directory = tempfile::tempdir().unwrap();
    {
        let partition = storage::fresh(directory.path(), config());
        for step in 0..60 {
            partition
                .append(&storage::batch_at(1, 10_000 + step * 100, 4, 100))
                .unwrap();
        }
    }
    let (partition, report) = reopen(directory.path(), config());
    assert!(report.segments_not_opened > 3, "{report:?}");
    assert_eq!(partition.offset_for_timestamp(0).unwrap(), Some(0));
    assert_eq!(
        partition.offset_for_timestamp(10_000 + 25 * 100).unwrap(),
        Some(100)
    );
    assert_eq!(
        partition.offset_for_timestamp(10_000 + 60 * 100).unwrap(),
        None
    );
}

/// The max-timestamp lookup (Kafka's ListOffsets -3) finds the first record holding the
/// largest timestamp whatever order the producers' timestamps came in, before and after a
/// restart (segments not opened yet): a peak in an early segment, a later tie, and later
/// records with smaller timestamps.
#[test]
fn max_timestamp_lookup_finds_the_first_record_of_the_largest_timestamp() {
    let directory = tempfile::tempdir().unwrap();
    let timestamp_of = |step: u64| match step {
        10 | 45 => 99_000,
        _ => 10_000 + (step as i64) * 100,
    };
    {
        let partition = storage::fresh(directory.path(), config());
        assert_eq!(partition.offset_of_max_timestamp().unwrap(), None);
        for step in 0..60 {
            partition
                .append(&storage::batch_at(1, timestamp_of(step), 4, 100))
                .unwrap();
        }
        assert_eq!(
            partition.offset_of_max_timestamp().unwrap(),
            Some((40, 99_000))
        );
    }
    let (partition, report) = reopen(directory.path(), config());
    assert!(report.segments_not_opened > 3, "{report:?}");
    assert_eq!(
        partition.offset_of_max_timestamp().unwrap(),
        Some((40, 99_000))
    );
}
