//! Segment files retention deleted are reused by later rolls (src/storage/spare.rs), whole or
//! emptied: the log reads back exactly what was written, no old byte of a reused file is ever
//! served or adopted by recovery (after a clean close or a crash, under `never` and `always`),
//! and a segment a fetch still holds is deleted, never reused. None of these tests measures speed (the gain is in
//! docs/benchmarks.md, measured with `fencelog bench`).

use crate::support::storage;

use std::path::Path;

use fencelog::storage::spare::SegmentFileReuse;
use fencelog::storage::{FlushPolicy, Partition, PartitionConfig};

/// The two ways of reusing files.
const REUSES: [SegmentFileReuse; 2] = [SegmentFileReuse::Whole, SegmentFileReuse::Emptied];

/// Small segments and a retention of a few of them, so a few hundred batches delete and reuse
/// many files.
fn config(flush: FlushPolicy, reuse: SegmentFileReuse) -> PartitionConfig {
    PartitionConfig {
        retention_bytes: Some(4 * storage::SMALL_SEGMENT_BYTES),
        segment_file_reuse: reuse,
        ..storage::config(storage::SMALL_SEGMENT_BYTES, flush)
    }
}

/// Every combination of flush policy and reuse the tests run.
fn cases() -> impl Iterator<Item = (FlushPolicy, SegmentFileReuse)> {
    [FlushPolicy::Never, FlushPolicy::Always]
        .into_iter()
        .flat_map(|flush| REUSES.into_iter().map(move |reuse| (flush, reuse)))
}

/// Appends `batches` batches (tags from `first_tag`), running retention after every few, and
/// returns how many spare files were taken by rolls (seen as the spare count falling).
fn write_with_retention(partition: &Partition, epoch: u64, first_tag: u64, batches: u64) -> usize {
    let mut reused = 0;
    for tag in first_tag..first_tag + batches {
        let before = partition.spare_segments();
        // Record counts and sizes vary, so batch boundaries never line up with the old file's.
        let records = 1 + (tag % 5) as u32;
        partition
            .append(&storage::batch(
                epoch,
                tag,
                records,
                60 + (tag % 7) as usize * 13,
            ))
            .unwrap();
        reused += before.saturating_sub(partition.spare_segments());
        if tag % 4 == 0 {
            partition
                .enforce_retention(fencelog::batch::now_ms())
                .unwrap();
        }
    }
    reused
}

fn spare_files(directory: &Path) -> usize {
    std::fs::read_dir(directory)
        .unwrap()
        .filter(|entry| {
            let name = entry.as_ref().unwrap().file_name();
            let name = name.to_string_lossy();
            name.ends_with(".spare") || name.ends_with(".spare-index")
        })
        .count()
}

/// Where the data of the segment file at `path` (base offset `base`) ends: after the last batch
/// that continues the offsets, and how many bytes after it are not zeros (an old tail).
fn data_end_and_old_tail(path: &Path, base: u64) -> (usize, usize) {
    let bytes = std::fs::read(path).unwrap();
    let (mut position, mut expected) = (0, base);
    while let Some(header) = fencelog::batch::BatchHeader::parse(&bytes[position..]) {
        let end = position + header.batch_length as usize;
        if header.batch_length == 0 || header.base_offset != expected || end > bytes.len() {
            break;
        }
        expected = header.next_offset();
        position = end;
    }
    let old_tail = bytes[position..].iter().filter(|byte| **byte != 0).count();
    (position, old_tail)
}

/// Every segment but the last ends exactly where its data ends: no old tail of a reused file.
fn assert_sealed_files_end_at_their_data(partition: &Partition, directory: &Path) {
    let bases = storage::segment_bases(directory);
    for window in bases.windows(2) {
        let path = directory.join(storage::log_name(window[0]));
        let (_, old_tail) = data_end_and_old_tail(&path, window[0]);
        assert_eq!(old_tail, 0, "{} has bytes after its data", path.display());
    }
    let records = storage::read_all_records(partition);
    storage::assert_dense_and_monotonic(&records, partition.log_start_offset());
}

#[test]
fn deleted_segment_files_are_reused_and_the_log_reads_back_exactly() {
    for (flush, reuse) in cases() {
        let directory = tempfile::tempdir().unwrap();
        let partition = storage::fresh(directory.path(), config(flush, reuse));
        let reused = write_with_retention(&partition, 1, 0, 400);
        assert!(
            reused > 10,
            "{flush:?} {reuse:?}: rolls reused {reused} spare files"
        );
        assert!(
            partition.log_start_offset() > 0,
            "retention deleted segments"
        );
        let records = storage::read_all_records(&partition);
        for record in &records {
            // Every record is one that was written: its value names its batch, as its key does.
            let key = String::from_utf8_lossy(record.key.as_ref().unwrap()).to_string();
            let value = String::from_utf8_lossy(record.value.as_ref().unwrap()).to_string();
            let tag = key.strip_prefix('k').unwrap();
            assert!(
                value.starts_with(&format!("batch {tag} record ")),
                "{key}: {value}"
            );
        }
        assert_eq!(
            records.last().unwrap().offset + 1,
            partition.log_end_offset()
        );
        assert_sealed_files_end_at_their_data(&partition, directory.path());
    }
}

#[test]
fn a_clean_close_leaves_no_old_tail_and_no_spare_files() {
    for reuse in REUSES {
        a_clean_close_leaves_no_old_tail_and_no_spare_files_with(reuse);
    }
}

fn a_clean_close_leaves_no_old_tail_and_no_spare_files_with(reuse: SegmentFileReuse) {
    let directory = tempfile::tempdir().unwrap();
    let flush = FlushPolicy::Never;
    let written = {
        let partition = storage::fresh(directory.path(), config(flush, reuse));
        write_with_retention(&partition, 1, 0, 300);
        partition
            .enforce_retention(fencelog::batch::now_ms())
            .unwrap();
        storage::read_all_records(&partition)
    };
    assert_eq!(spare_files(directory.path()), 0, "a close deletes spares");
    let (partition, report) = Partition::open_with_report(
        "t/0",
        directory.path(),
        config(flush, reuse),
        &storage::seal_worker(),
    )
    .unwrap();
    assert_eq!(
        report.bytes_cut, 0,
        "nothing to cut after a clean close: {report:?}"
    );
    assert!(report.damaged.is_empty(), "{report:?}");
    assert_eq!(storage::read_all_records(&partition), written);
}

/// A crash (the files as they are, copied while the partition is open): the active segment of a
/// wholly reused file still has the old file's bytes after its data (an emptied one never
/// does), and spare files lie around. Recovery keeps exactly the written log, cuts the old tail
/// as a torn one, deletes the spares, and the partition goes on writing (and reusing) from
/// there.
#[test]
fn a_crash_with_reused_files_recovers_exactly_the_written_log() {
    for (flush, reuse) in cases() {
        let directory = tempfile::tempdir().unwrap();
        let partition = storage::fresh(directory.path(), config(flush, reuse));
        let mut crash_seen_with_old_tail = false;
        for round in 0..6u64 {
            write_with_retention(&partition, 1, round * 97, 97);
            let written = storage::read_all_records(&partition);
            let crashed = storage::scratch_dir();
            storage::copy_directory(directory.path(), crashed.path());
            let active = *storage::segment_bases(crashed.path()).last().unwrap();
            let active_path = crashed.path().join(storage::log_name(active));
            crash_seen_with_old_tail |= data_end_and_old_tail(&active_path, active).1 > 0;
            let (recovered, report) = Partition::open_with_report(
                "t/0",
                crashed.path(),
                config(flush, reuse),
                &storage::seal_worker(),
            )
            .unwrap();
            assert!(
                report.damaged.is_empty(),
                "{flush:?} round {round}: {report:?}"
            );
            assert_eq!(
                storage::read_all_records(&recovered),
                written,
                "{flush:?} round {round}: {report:?}"
            );
            assert_eq!(
                spare_files(crashed.path()),
                0,
                "leftover spares are deleted"
            );
            recovered.install_epoch(2).unwrap();
            write_with_retention(&recovered, 2, 10_000, 60);
            assert_sealed_files_end_at_their_data(&recovered, crashed.path());
        }
        assert_eq!(
            crash_seen_with_old_tail,
            reuse == SegmentFileReuse::Whole,
            "{flush:?} {reuse:?}: a crash image had a reused active segment with an old tail \
             (whole files: some; emptied files: none)"
        );
    }
}

/// A fetch that still holds a slice of the oldest segment when retention deletes it: the file is
/// deleted, not reused, and the slice still reads what was written.
#[test]
fn a_segment_a_fetch_still_holds_is_deleted_not_reused() {
    for reuse in REUSES {
        a_segment_a_fetch_still_holds_is_deleted_not_reused_with(reuse);
    }
}

fn a_segment_a_fetch_still_holds_is_deleted_not_reused_with(reuse: SegmentFileReuse) {
    let directory = tempfile::tempdir().unwrap();
    let partition = storage::fresh(directory.path(), config(FlushPolicy::Never, reuse));
    for tag in 0..60 {
        partition.append(&storage::batch(1, tag, 3, 100)).unwrap();
    }
    let held = partition.read(0, 1).unwrap().batches;
    let copy: Vec<u8> = held[0].to_vec();
    let report = partition
        .enforce_retention(fencelog::batch::now_ms())
        .unwrap();
    assert!(report.segments >= 2, "{report:?}");
    // The held segment was deleted; the others became spares (but one the seal thread was
    // syncing at that moment, which it holds too).
    assert!(partition.spare_segments() < report.segments, "{report:?}");
    for tag in 60..200 {
        partition.append(&storage::batch(1, tag, 3, 100)).unwrap();
    }
    assert_eq!(
        held[0].as_ref(),
        copy.as_slice(),
        "a held slice never changes"
    );
    assert!(!directory.path().join(storage::log_name(0)).exists());
}

/// With `SegmentFileReuse::Delete` (the storage default) retention deletes files as it always
/// did.
#[test]
fn without_reuse_retention_deletes_the_files() {
    let directory = tempfile::tempdir().unwrap();
    let config = config(FlushPolicy::Never, SegmentFileReuse::Delete);
    let partition = storage::fresh(directory.path(), config);
    write_with_retention(&partition, 1, 0, 200);
    assert!(
        partition.log_start_offset() > 0,
        "retention deleted segments"
    );
    assert_eq!(partition.spare_segments(), 0);
    assert_eq!(spare_files(directory.path()), 0);
}

/// The broker reuses a topic's segment files whole when a segment per partition fits the
/// process's budget for whole spares (`WHOLE_SPARES_BUDGET_BYTES`), emptied otherwise.
#[test]
fn the_broker_reuses_segment_files_whole_when_the_topic_fits_the_budget() {
    use fencelog::storage::spare::WHOLE_SPARES_BUDGET_BYTES;
    let topic = |segment_bytes| fencelog::domain::TopicConfig {
        segment_bytes,
        ..fencelog::domain::TopicConfig::default()
    };
    let reuse = |partitions, segment_bytes| {
        fencelog::broker::partition_config(&topic(segment_bytes), partitions).segment_file_reuse
    };
    assert_eq!(reuse(1, 64 << 20), SegmentFileReuse::Whole);
    assert_eq!(reuse(100, 5 << 20), SegmentFileReuse::Whole);
    assert_eq!(reuse(1000, 2 << 20), SegmentFileReuse::Emptied);
    let per_partition = WHOLE_SPARES_BUDGET_BYTES / 8;
    assert_eq!(reuse(8, per_partition), SegmentFileReuse::Whole);
    assert_eq!(reuse(9, per_partition), SegmentFileReuse::Emptied);
}
