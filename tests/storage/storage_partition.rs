//! Behaviour of one partition through its public API: appends and reads, the epoch fence,
//! restarts, refused batches, retention, group commit and index rebuilds.

use crate::support::storage;

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use fencelog::batch::BatchBuilder;
use fencelog::batch::{decode_batch, validate, BatchHeader, HEADER_BYTES};
use fencelog::storage::{
    BatchError, FenceError, FlushPolicy, Partition, PartitionConfig, StorageError,
};
use storage::*;

fn small(flush: FlushPolicy) -> PartitionConfig {
    config(SMALL_SEGMENT_BYTES, flush)
}

#[test]
fn append_then_read_round_trips_records_with_offsets_and_epoch() {
    // Proves: what is appended reads back record for record, with dense offsets assigned by the
    // partition (the builder's base offset 0 is replaced) and the epoch the batch was written in.
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), small(FlushPolicy::Always));
    let first = partition.append(&batch(1, 0, 3, 10)).unwrap();
    assert_eq!(
        (first.base_offset, first.last_offset, first.log_end_offset),
        (0, 2, 3)
    );
    partition.install_epoch(2).unwrap();
    let second = partition.append(&batch(2, 1, 2, 10)).unwrap();
    assert_eq!(
        (
            second.base_offset,
            second.last_offset,
            second.log_end_offset
        ),
        (3, 4, 5)
    );
    assert_eq!(partition.high_watermark(), 5);

    let result = partition.read(0, 1 << 20).unwrap();
    assert_eq!(result.high_watermark, 5);
    assert_eq!(result.log_start_offset, 0);
    let records = decode_concatenated(&result.batches);
    assert_eq!(records.len(), 5);
    let expected = [
        (0, 1, 0, 0),
        (1, 1, 0, 1),
        (2, 1, 0, 2),
        (3, 2, 1, 0),
        (4, 2, 1, 1),
    ];
    for (record, (offset, epoch, tag, index)) in records.iter().zip(expected) {
        assert_eq!(record.offset, offset);
        assert_eq!(record.epoch, epoch);
        assert_eq!(record.timestamp, 1_000 + i64::from(index));
        assert_eq!(record.key.as_deref(), Some(format!("k{tag}").as_bytes()));
        assert_eq!(record.value.as_deref(), Some(&value(tag, index, 10)[..]));
    }
}

#[test]
fn offsets_stay_dense_across_segment_rolls() {
    // Proves: with 4 KiB segments the log rolls many times, every segment file is named by the
    // offset of its first batch, and offsets run densely across the rolls, also after a reopen.
    let dir = tempfile::tempdir().unwrap();
    let config = small(FlushPolicy::Never);
    let mut appended = Vec::new();
    {
        let partition = fresh(dir.path(), config);
        let mut expected_base = 0;
        for tag in 0..120u64 {
            let records = 1 + (tag % 4) as u32;
            let result = partition
                .append(&batch(1, tag, records, 20 + (tag as usize * 37) % 300))
                .unwrap();
            assert_eq!(result.base_offset, expected_base);
            expected_base = result.log_end_offset;
            appended.push(result.base_offset);
        }
        let records = read_all_records(&partition);
        assert_dense_and_monotonic(&records, 0);
        assert_eq!(records.len() as u64, expected_base);
    }
    let bases = segment_bases(dir.path());
    assert!(bases.len() >= 5, "expected many rolls, got {bases:?}");
    for base in &bases {
        assert!(appended.contains(base), "segment {base} starts a batch");
    }
    let partition = Partition::open("t/0", dir.path(), config, &seal_worker()).unwrap();
    let records = read_all_records(&partition);
    assert_dense_and_monotonic(&records, 0);
    assert_eq!(records.len() as u64, partition.high_watermark());
}

#[test]
fn read_from_an_offset_inside_a_batch_returns_that_whole_batch() {
    // Proves: a read at any offset of a multi-record batch returns the whole batch holding it
    // (consumers skip the records before their offset), starting from the index's nearest entry.
    let dir = tempfile::tempdir().unwrap();
    let config = PartitionConfig {
        index_interval_bytes: 256,
        ..small(FlushPolicy::Never)
    };
    let partition = fresh(dir.path(), config);
    let mut batches = Vec::new();
    for tag in 0..30u64 {
        let appended = partition.append(&batch(1, tag, 5, 40)).unwrap();
        batches.push((appended.base_offset, appended.last_offset));
    }
    for (base, last) in batches {
        for offset in base..=last {
            let result = partition.read(offset, 1).unwrap();
            assert_eq!(result.batches.len(), 1);
            let header = BatchHeader::parse(&result.batches[0]).unwrap();
            assert_eq!(header.base_offset, base, "read at {offset}");
            assert_eq!(header.last_offset(), last);
        }
    }
}

#[test]
fn read_budget_returns_whole_batches_and_at_least_one() {
    // Proves: the byte budget is honoured in whole batches (never a partial one), and a budget
    // smaller than the first batch still returns that batch so a consumer always progresses.
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), config(1 << 20, FlushPolicy::Never));
    let sizes: Vec<usize> = (0..6u64)
        .map(|tag| {
            let bytes = batch(1, tag, 2, 50 + tag as usize * 10);
            partition.append(&bytes).unwrap();
            bytes.len()
        })
        .collect();
    for budget in [0, 1, sizes[0] - 1] {
        let result = partition.read(0, budget).unwrap();
        assert_eq!(result.batches.len(), 1, "budget {budget}");
        assert_eq!(result.batches[0].len(), sizes[0]);
    }
    let two = sizes[0] + sizes[1];
    assert_eq!(partition.read(0, two).unwrap().batches.len(), 2);
    assert_eq!(
        partition.read(0, two + sizes[2] - 1).unwrap().batches.len(),
        2
    );
    let all: usize = sizes.iter().sum();
    let result = partition.read(0, all).unwrap();
    assert_eq!(result.batches.len(), 6);
    for (batch, size) in result.batches.iter().zip(&sizes) {
        assert_eq!(batch.len(), *size);
        validate(batch, usize::MAX).unwrap();
    }
    // From the middle of the log: the budget counts from the batch holding the offset.
    let result = partition.read(5, sizes[2] + sizes[3]).unwrap();
    assert_eq!(result.batches.len(), 2);
    assert_eq!(
        BatchHeader::parse(&result.batches[0]).unwrap().base_offset,
        4
    );
}

#[test]
fn read_at_the_high_watermark_is_empty() {
    // Proves: reading exactly at the high watermark is valid and returns no batches (the consumer
    // is caught up), on an empty and on a non-empty log.
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), small(FlushPolicy::Always));
    let result = partition.read(0, 1024).unwrap();
    assert!(result.batches.is_empty());
    assert_eq!(result.high_watermark, 0);
    partition.append(&batch(1, 0, 3, 10)).unwrap();
    let result = partition.read(3, 1024).unwrap();
    assert!(result.batches.is_empty());
    assert_eq!(result.high_watermark, 3);
}

#[test]
fn read_beyond_the_high_watermark_is_offset_out_of_range() {
    // Proves: an offset past the high watermark is an error naming the valid range.
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), small(FlushPolicy::Always));
    partition.append(&batch(1, 0, 3, 10)).unwrap();
    for offset in [4, 100, u64::MAX] {
        match partition.read(offset, 1024) {
            Err(StorageError::OffsetOutOfRange {
                offset: asked,
                earliest: 0,
                latest: 3,
                ..
            }) => assert_eq!(asked, offset),
            other => panic!("read at {offset}: {}", describe(&other)),
        }
    }
}

#[test]
fn lower_epoch_is_fenced_higher_is_unknown_and_equal_is_accepted() {
    // Proves the fence table: lower → Fenced{epoch,current}, higher → UnknownEpoch (never
    // adopted), equal → accepted; a refused append writes nothing.
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), small(FlushPolicy::Always));
    partition.install_epoch(2).unwrap();
    partition.install_epoch(3).unwrap();
    partition.append(&batch(3, 0, 1, 10)).unwrap();
    for stale in [1, 2] {
        match partition.append(&batch(stale, 1, 1, 10)) {
            Err(StorageError::Fence(FenceError::Fenced { epoch, current })) => {
                assert_eq!((epoch, current), (stale, 3));
            }
            other => panic!("epoch {stale}: {}", describe(&other)),
        }
    }
    for unknown in [4, 5, u64::MAX] {
        match partition.append(&batch(unknown, 1, 1, 10)) {
            Err(StorageError::Fence(FenceError::UnknownEpoch { epoch, current })) => {
                assert_eq!((epoch, current), (unknown, 3));
            }
            other => panic!("epoch {unknown}: {}", describe(&other)),
        }
    }
    assert_eq!(
        partition.current_epoch(),
        3,
        "a higher epoch is never adopted"
    );
    assert_eq!(
        partition.high_watermark(),
        1,
        "refused appends wrote nothing"
    );
    let appended = partition.append(&batch(3, 2, 1, 10)).unwrap();
    assert_eq!(appended.base_offset, 1);
    let epochs: Vec<u64> = read_all_records(&partition)
        .iter()
        .map(|r| r.epoch)
        .collect();
    assert_eq!(epochs, [3, 3]);
}

#[test]
fn epoch_zero_is_never_accepted() {
    // Proves: a fresh partition (current epoch 0) accepts no append, not even one under epoch 0:
    // epoch 0 is never granted.
    let dir = tempfile::tempdir().unwrap();
    let partition = Partition::open(
        "t/0",
        dir.path(),
        small(FlushPolicy::Always),
        &seal_worker(),
    )
    .unwrap();
    assert_eq!(partition.current_epoch(), 0);
    match partition.append(&batch(0, 0, 1, 10)) {
        Err(StorageError::Fence(FenceError::UnknownEpoch {
            epoch: 0,
            current: 0,
        })) => {}
        other => panic!("{}", describe(&other)),
    }
    assert_eq!(partition.high_watermark(), 0);
}

#[test]
fn stale_epoch_is_reported_before_batch_validation() {
    // Proves: the epoch is checked before anything else, so a stale holder whose batch is also
    // malformed learns that it is fenced (not retriable) rather than that its batch is bad.
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), small(FlushPolicy::Always));
    partition.install_epoch(2).unwrap();
    let mut corrupt = batch(1, 0, 2, 10).to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    assert!(matches!(
        partition.append(&corrupt),
        Err(StorageError::Fence(FenceError::Fenced {
            epoch: 1,
            current: 2
        }))
    ));
    let too_large = batch(1, 0, 10, 1000);
    assert!(matches!(
        partition.append(&too_large),
        Err(StorageError::Fence(FenceError::Fenced { .. }))
    ));
}

#[test]
fn install_epoch_refuses_an_epoch_not_above_the_current_one() {
    // Proves: install_epoch(e) with e <= current is refused with EpochNotNewer and changes nothing
    // (neither the current epoch nor the recorded history).
    let dir = tempfile::tempdir().unwrap();
    let partition = Partition::open(
        "t/0",
        dir.path(),
        small(FlushPolicy::Always),
        &seal_worker(),
    )
    .unwrap();
    match partition.install_epoch(0) {
        Err(StorageError::Fence(FenceError::EpochNotNewer {
            epoch: 0,
            current: 0,
        })) => {}
        other => panic!("{}", describe(&other)),
    }
    partition.install_epoch(5).unwrap();
    for epoch in [0, 1, 4, 5] {
        match partition.install_epoch(epoch) {
            Err(StorageError::Fence(FenceError::EpochNotNewer { epoch: e, current })) => {
                assert_eq!((e, current), (epoch, 5));
            }
            other => panic!("install {epoch}: {}", describe(&other)),
        }
    }
    assert_eq!(partition.current_epoch(), 5);
    assert_eq!(partition.epoch_history(), [(5, 0)]);
    partition.install_epoch(6).unwrap();
    assert_eq!(partition.current_epoch(), 6);
}

#[test]
fn installed_epoch_survives_reopen_through_the_checkpoint() {
    // Proves: an installed epoch is durable before install_epoch returns: a reopen finds it even
    // when no batch was written under it, with the history of (epoch, start offset) pairs.
    let dir = tempfile::tempdir().unwrap();
    let config = small(FlushPolicy::Always);
    {
        let partition = fresh(dir.path(), config);
        partition.append(&batch(1, 0, 4, 10)).unwrap();
        partition.install_epoch(2).unwrap();
        partition.append(&batch(2, 1, 1, 10)).unwrap();
        partition.install_epoch(7).unwrap();
    }
    let text = std::fs::read_to_string(dir.path().join("epoch-checkpoint")).unwrap();
    assert_eq!(text, "1 0\n2 4\n7 5\n");
    let (partition, report) =
        Partition::open_with_report("t/0", dir.path(), config, &seal_worker()).unwrap();
    assert_eq!(partition.current_epoch(), 7);
    assert_eq!(report.epoch, 7);
    assert_eq!(partition.epoch_history(), [(1, 0), (2, 4), (7, 5)]);
    partition.append(&batch(7, 2, 1, 10)).unwrap();
}

#[test]
fn stale_epoch_is_rejected_after_restart() {
    // Proves: a holder fenced before a restart stays fenced after it: the restarted partition
    // refuses its epoch and keeps the new holder's.
    let dir = tempfile::tempdir().unwrap();
    let config = small(FlushPolicy::Always);
    {
        let partition = fresh(dir.path(), config);
        partition.append(&batch(1, 0, 1, 10)).unwrap();
        partition.install_epoch(2).unwrap();
    }
    let partition = Partition::open("t/0", dir.path(), config, &seal_worker()).unwrap();
    match partition.append(&batch(1, 1, 1, 10)) {
        Err(StorageError::Fence(FenceError::Fenced {
            epoch: 1,
            current: 2,
        })) => {}
        other => panic!("{}", describe(&other)),
    }
    assert_eq!(partition.high_watermark(), 1);
    partition.append(&batch(2, 1, 1, 10)).unwrap();
}

#[test]
fn epoch_after_reopen_is_the_max_of_checkpoint_and_log() {
    // Proves: the epoch after reopen is max(checkpoint, last batch): with the checkpoint it is the
    // latest install (above the log's); without the checkpoint file it is the last batch's epoch;
    // with a checkpoint older than the log it is the log's.
    let dir = tempfile::tempdir().unwrap();
    let config = small(FlushPolicy::Always);
    let old_checkpoint;
    {
        let partition = fresh(dir.path(), config);
        partition.append(&batch(1, 0, 2, 10)).unwrap();
        partition.install_epoch(2).unwrap();
        old_checkpoint = std::fs::read(dir.path().join("epoch-checkpoint")).unwrap();
        partition.install_epoch(3).unwrap();
        partition.append(&batch(3, 1, 2, 10)).unwrap();
        partition.install_epoch(4).unwrap();
    }
    assert_eq!(
        Partition::open("t/0", dir.path(), config, &seal_worker())
            .unwrap()
            .current_epoch(),
        4
    );
    let checkpoint = dir.path().join("epoch-checkpoint");
    std::fs::write(&checkpoint, &old_checkpoint).unwrap();
    let partition = Partition::open("t/0", dir.path(), config, &seal_worker()).unwrap();
    assert_eq!(partition.current_epoch(), 3, "log (3) above checkpoint (2)");
    drop(partition);
    std::fs::remove_file(&checkpoint).unwrap();
    let (partition, report) =
        Partition::open_with_report("t/0", dir.path(), config, &seal_worker()).unwrap();
    assert_eq!(
        partition.current_epoch(),
        3,
        "no checkpoint: the last batch's"
    );
    assert_eq!(report.epoch, 3);
    assert!(matches!(
        partition.append(&batch(2, 2, 1, 10)),
        Err(StorageError::Fence(FenceError::Fenced {
            epoch: 2,
            current: 3
        }))
    ));
    partition.append(&batch(3, 2, 1, 10)).unwrap();
}

#[test]
fn batch_larger_than_a_segment_is_refused_and_nothing_is_written() {
    // Proves: a batch that cannot fit in one segment (or exceeds max_batch_bytes) is refused with
    // BatchTooLarge, and the log, its files and later appends are unaffected.
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), small(FlushPolicy::Always));
    partition.append(&batch(1, 0, 1, 10)).unwrap();
    let files_before = segment_bases(dir.path());
    let huge = batch(1, 1, 5, 1000);
    assert!(huge.len() > SMALL_SEGMENT_BYTES as usize);
    match partition.append(&huge) {
        Err(StorageError::BatchTooLarge { len, max }) => {
            assert_eq!(len, huge.len());
            assert_eq!(max, SMALL_SEGMENT_BYTES as usize);
        }
        other => panic!("{}", describe(&other)),
    }
    assert_eq!(partition.high_watermark(), 1);
    assert_eq!(segment_bases(dir.path()), files_before, "no roll happened");
    // Exactly a segment is still accepted (it gets a segment of its own).
    let mut builder = BatchBuilder::new(1);
    builder.push(1, None, Some(&[]));
    let overhead = builder.encoded_len();
    let mut builder = BatchBuilder::new(1);
    builder.push(
        1,
        None,
        Some(&vec![7; SMALL_SEGMENT_BYTES as usize - overhead]),
    );
    let exact = builder.finish();
    assert_eq!(exact.len(), SMALL_SEGMENT_BYTES as usize);
    assert_eq!(partition.append(&exact).unwrap().base_offset, 1);
    assert_eq!(read_all_records(&partition).len(), 2);

    let dir = tempfile::tempdir().unwrap();
    let limited = PartitionConfig {
        max_batch_bytes: 500,
        ..small(FlushPolicy::Always)
    };
    let partition = fresh(dir.path(), limited);
    let big = batch(1, 0, 2, 300);
    assert!(matches!(
        partition.append(&big),
        Err(StorageError::BatchTooLarge { max: 500, .. })
    ));
    assert_eq!(partition.high_watermark(), 0);
}

#[test]
fn corrupt_batch_is_refused_and_nothing_is_written() {
    // Proves: a batch with any one byte flipped (outside the base offset, which the broker
    // overwrites) is refused before anything is written: InvalidBatch, or a fence error when the
    // flip lands in the epoch field (the epoch is checked first). Also refused: an empty batch,
    // a truncated batch and a batch with trailing bytes.
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), small(FlushPolicy::Never));
    partition.append(&batch(1, 0, 2, 10)).unwrap();
    let good = batch(1, 1, 2, 10);
    for position in 8..good.len() {
        let mut bytes = good.to_vec();
        bytes[position] ^= 0x01;
        let result = partition.append(&bytes);
        let epoch_field = (20..28).contains(&position);
        match result {
            Err(StorageError::InvalidBatch(_)) if !epoch_field => {}
            Err(StorageError::Fence(FenceError::UnknownEpoch { .. })) if epoch_field => {}
            Err(StorageError::Fence(FenceError::Fenced { .. })) if epoch_field => {}
            other => panic!("flip at {position}: {}", describe(&other)),
        }
        assert_eq!(partition.high_watermark(), 2, "flip at {position}");
    }
    assert!(matches!(
        partition.append(&BatchBuilder::new(1).finish()),
        Err(StorageError::InvalidBatch(BatchError::BadRecordCount(0)))
    ));
    assert!(matches!(
        partition.append(&good[..good.len() - 1]),
        Err(StorageError::InvalidBatch(
            BatchError::LengthMismatch { .. }
        ))
    ));
    assert!(matches!(
        partition.append(&good[..HEADER_BYTES - 1]),
        Err(StorageError::InvalidBatch(BatchError::TooShort { .. }))
    ));
    let mut longer = good.to_vec();
    longer.push(0);
    assert!(matches!(
        partition.append(&longer),
        Err(StorageError::InvalidBatch(
            BatchError::LengthMismatch { .. }
        ))
    ));
    assert_eq!(partition.high_watermark(), 2);
    // The base offset is not checked (the partition stamps its own).
    let mut any_base = good.to_vec();
    any_base[..8].copy_from_slice(&999u64.to_be_bytes());
    assert_eq!(partition.append(&any_base).unwrap().base_offset, 2);
    let records = read_all_records(&partition);
    assert_dense_and_monotonic(&records, 0);
    assert_eq!(records.len(), 4);
}

/// Appends `count` batches and returns (base offset, bytes) of each.
fn fill(partition: &Partition, count: u64, make: impl Fn(u64) -> Bytes) -> Vec<(u64, usize)> {
    (0..count)
        .map(|tag| {
            let bytes = make(tag);
            let appended = partition.append(&bytes).unwrap();
            (appended.base_offset, bytes.len())
        })
        .collect()
}

/// Bytes of data in each segment, from the batches written and the segment files present.
fn segment_sizes(bases: &[u64], batches: &[(u64, usize)]) -> Vec<u64> {
    bases
        .iter()
        .enumerate()
        .map(|(i, base)| {
            let next = bases.get(i + 1).copied().unwrap_or(u64::MAX);
            batches
                .iter()
                .filter(|(offset, _)| (*base..next).contains(offset))
                .map(|(_, len)| *len as u64)
                .sum()
        })
        .collect()
}

#[test]
fn retention_by_size_deletes_only_whole_closed_segments() {
    // Proves: size retention deletes oldest segments, whole, while the partition is above the
    // limit, never the active one; log_start_offset moves to the first kept segment, reads below
    // it are out of range, everything from it on is intact, and a reopen agrees.
    let dir = tempfile::tempdir().unwrap();
    let config = PartitionConfig {
        retention_bytes: Some(3 * SMALL_SEGMENT_BYTES),
        ..small(FlushPolicy::Never)
    };
    let partition = fresh(dir.path(), config);
    let batches = fill(&partition, 40, |tag| {
        batch(1, tag, 2, 200 + tag as usize * 3)
    });
    let bases = segment_bases(dir.path());
    let sizes = segment_sizes(&bases, &batches);
    assert!(bases.len() >= 6, "{bases:?}");
    let mut total: u64 = sizes.iter().sum();
    let mut expected_deleted = 0;
    while expected_deleted < bases.len() - 1 && total > 3 * SMALL_SEGMENT_BYTES {
        total -= sizes[expected_deleted];
        expected_deleted += 1;
    }
    assert!(expected_deleted > 0);

    let report = partition.enforce_retention(0).unwrap();
    assert_eq!(report.segments, expected_deleted);
    assert_eq!(report.bytes, sizes[..expected_deleted].iter().sum::<u64>());
    let kept = &bases[expected_deleted..];
    assert_eq!(segment_bases(dir.path()), kept);
    for base in &bases[..expected_deleted] {
        assert!(!dir.path().join(index_name(*base)).exists());
    }
    let log_start = kept[0];
    assert_eq!(partition.log_start_offset(), log_start);
    assert!(matches!(
        partition.read(log_start - 1, 1024),
        Err(StorageError::OffsetOutOfRange { earliest, .. }) if earliest == log_start
    ));
    let records = read_all_records(&partition);
    assert_dense_and_monotonic(&records, log_start);
    assert_eq!(records.len() as u64, partition.high_watermark() - log_start);
    assert_eq!(
        partition.enforce_retention(0).unwrap().segments,
        0,
        "stable"
    );
    drop(partition);
    let partition = Partition::open("t/0", dir.path(), config, &seal_worker()).unwrap();
    assert_eq!(partition.log_start_offset(), log_start);
    assert_eq!(read_all_records(&partition), records);
}

#[test]
fn retention_never_deletes_the_active_segment() {
    // Proves: even a limit of one byte keeps the active segment (and so the log end).
    let dir = tempfile::tempdir().unwrap();
    let config = PartitionConfig {
        retention_bytes: Some(1),
        retention_ms: Some(1),
        ..small(FlushPolicy::Never)
    };
    let partition = fresh(dir.path(), config);
    fill(&partition, 20, |tag| batch(1, tag, 2, 300));
    let last = *segment_bases(dir.path()).last().unwrap();
    partition.enforce_retention(i64::MAX).unwrap();
    assert_eq!(segment_bases(dir.path()), [last]);
    assert_eq!(partition.log_start_offset(), last);
    assert_eq!(
        read_all_records(&partition).len() as u64,
        partition.high_watermark() - last
    );
    partition.append(&batch(1, 99, 1, 10)).unwrap();
}

#[test]
fn retention_by_age_deletes_only_whole_closed_segments() {
    // Proves: age retention deletes the oldest segments whose newest record is older than the
    // limit, stops at the first segment holding a recent record (even if later ones were old),
    // and moves log_start_offset to it.
    let dir = tempfile::tempdir().unwrap();
    let retention_ms = 60_000;
    let now = 10_000_000;
    let config = PartitionConfig {
        retention_ms: Some(retention_ms),
        ..small(FlushPolicy::Never)
    };
    let partition = fresh(dir.path(), config);
    let old = now - retention_ms as i64 - 1;
    let recent = now - retention_ms as i64 + 1;
    // 30 old batches, 1 recent one, 30 old again (timestamps out of order are allowed).
    let batches = fill(&partition, 61, |tag| {
        let timestamp = if tag == 30 { recent } else { old };
        batch_at(1, timestamp, 2, 300)
    });
    let recent_offset = batches[30].0;
    let bases = segment_bases(dir.path());
    let holding_recent = bases.partition_point(|base| *base <= recent_offset) - 1;
    assert!(holding_recent >= 2 && holding_recent < bases.len() - 1);

    let report = partition.enforce_retention(now).unwrap();
    assert_eq!(report.segments, holding_recent);
    assert_eq!(segment_bases(dir.path()), &bases[holding_recent..]);
    assert_eq!(partition.log_start_offset(), bases[holding_recent]);
    // A minute later the recent record is old too: everything but the active segment goes.
    partition.enforce_retention(now + 60_000).unwrap();
    assert_eq!(segment_bases(dir.path()), [*bases.last().unwrap()]);
    assert_eq!(partition.log_start_offset(), *bases.last().unwrap());
    let records = read_all_records(&partition);
    assert_dense_and_monotonic(&records, *bases.last().unwrap());
}

#[test]
fn concurrent_appends_with_flush_always_are_dense_unique_and_group_committed() {
    // Proves: 8 threads appending at once under flush `always` get unique, dense offsets; every
    // acknowledged append is readable with its own content at its offset; and group commit shares
    // syncs (fewer syncs than appends). Small segments make rolls race with appends.
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 40;
    let dir = tempfile::tempdir().unwrap();
    let partition = Arc::new(fresh(dir.path(), small(FlushPolicy::Always)));
    let handles: Vec<_> = (0..THREADS)
        .map(|thread| {
            let partition = Arc::clone(&partition);
            std::thread::spawn(move || {
                (0..PER_THREAD)
                    .map(|i| {
                        let tag = thread * 1000 + i;
                        let records = 1 + (i % 3) as u32;
                        let appended = partition.append(&batch(1, tag, records, 100)).unwrap();
                        assert!(partition.high_watermark() >= appended.log_end_offset);
                        assert_eq!(
                            appended.last_offset + 1 - appended.base_offset,
                            u64::from(records)
                        );
                        (tag, appended)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let results: Vec<_> = handles
        .into_iter()
        .flat_map(|handle| handle.join().unwrap())
        .collect();
    let appends = THREADS * PER_THREAD;
    let mut offsets = HashSet::new();
    let mut total = 0;
    for (_, appended) in &results {
        for offset in appended.base_offset..=appended.last_offset {
            assert!(offsets.insert(offset), "offset {offset} given twice");
        }
        total += appended.last_offset + 1 - appended.base_offset;
    }
    assert_eq!(partition.high_watermark(), total);
    assert_eq!(offsets.len() as u64, total, "offsets are dense: 0..{total}");
    let records = read_all_records(&partition);
    assert_dense_and_monotonic(&records, 0);
    for (tag, appended) in &results {
        for offset in appended.base_offset..=appended.last_offset {
            let record = &records[offset as usize];
            let index = (offset - appended.base_offset) as u32;
            assert_eq!(record.key.as_deref(), Some(format!("k{tag}").as_bytes()));
            assert_eq!(record.value.as_deref(), Some(&value(*tag, index, 100)[..]));
        }
    }
    let syncs = partition.sync_count();
    assert!(syncs >= 1);
    assert!(syncs < appends, "{syncs} syncs for {appends} appends");
}

#[test]
fn missing_or_garbage_index_is_rebuilt_on_reopen() {
    // Proves: the index is only a cache: a missing, truncated or garbage `.index` file is rebuilt
    // from the log on reopen (reported, and identical to the one written live), and reads at
    // every offset still return the batch holding it.
    let dir = tempfile::tempdir().unwrap();
    let config = PartitionConfig {
        index_interval_bytes: 200,
        ..small(FlushPolicy::Always)
    };
    let batches = {
        let partition = fresh(dir.path(), config);
        let batches = fill(&partition, 30, |tag| batch(1, tag, 3, 60));
        partition.sync().unwrap();
        batches
    };
    let bases = segment_bases(dir.path());
    assert!(bases.len() >= 3);
    let originals: Vec<Vec<u8>> = bases
        .iter()
        .map(|base| std::fs::read(dir.path().join(index_name(*base))).unwrap())
        .collect();
    assert!(originals.iter().all(|index| !index.is_empty()));
    let (_, report) =
        Partition::open_with_report("t/0", dir.path(), config, &seal_worker()).unwrap();
    assert_eq!(report.indexes_rebuilt, 0, "intact indexes are kept");

    type Damage = fn(&std::path::Path);
    let damages: [(&str, Damage); 4] = [
        ("missing", |path| std::fs::remove_file(path).unwrap()),
        ("empty", |path| std::fs::write(path, b"").unwrap()),
        ("torn", |path| {
            let bytes = std::fs::read(path).unwrap();
            std::fs::write(path, &bytes[..bytes.len() - 3]).unwrap();
        }),
        ("garbage", |path| {
            let garbage: Vec<u8> = (0..64u32).map(|i| (i * 37 + 11) as u8).collect();
            std::fs::write(path, garbage).unwrap();
        }),
    ];
    for (name, damage) in damages {
        for base in &bases {
            damage(&dir.path().join(index_name(*base)));
        }
        let (partition, report) =
            Partition::open_with_report("t/0", dir.path(), config, &seal_worker()).unwrap();
        // Sealed segments opened on first use rebuild their index then (by the reads below).
        assert_eq!(
            report.indexes_rebuilt + report.segments_not_opened,
            bases.len(),
            "{name}"
        );
        for (base, _) in &batches {
            for offset in *base..*base + 3 {
                let result = partition.read(offset, 1).unwrap();
                let header = BatchHeader::parse(&result.batches[0]).unwrap();
                assert_eq!(header.base_offset, *base, "{name}: read at {offset}");
            }
        }
        for (base, original) in bases.iter().zip(&originals) {
            let rebuilt = std::fs::read(dir.path().join(index_name(*base))).unwrap();
            assert_eq!(&rebuilt, original, "{name}: index of segment {base}");
        }
        assert_eq!(read_all_records(&partition).len(), 90, "{name}");
    }
}

/// The stored bytes of the worked example in docs/storage-format.md: the batch of one record
/// (key "k", value "hello", timestamp 1700000000000 ms, epoch 3) stored at offset 5.
const WORKED_EXAMPLE_HEX: &str = concat!(
    "0000000000000005", // base_offset = 5 (stamped by the partition)
    "00000048",         // batch_length = 72
    "2f1ce580",         // crc of bytes 16..72
    "01",               // magic
    "00",               // attributes
    "0000",             // reserved
    "0000000000000003", // epoch = 3
    "00000001",         // record_count = 1
    "0000018bcfe56800", // first_timestamp = 1700000000000
    "0000018bcfe56800", // max_timestamp
    "00000014",         // record_length = 20
    "00000000",         // timestamp_delta = 0
    "00000001",         // key_length = 1
    "6b",               // key "k"
    "00000005",         // value_length = 5
    "68656c6c6f",       // value "hello"
    "0000",             // header_count = 0
);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn worked_example_in_the_format_doc_is_exact() {
    // Proves: the hex example of docs/storage-format.md is what the engine really stores: a
    // one-record batch built by BatchBuilder, appended at offset 5 under epoch 3 and read back;
    // stamping the base offset left the CRC valid.
    let dir = tempfile::tempdir().unwrap();
    let partition = Partition::open(
        "t/0",
        dir.path(),
        small(FlushPolicy::Always),
        &seal_worker(),
    )
    .unwrap();
    partition.install_epoch(3).unwrap();
    partition.append(&batch(3, 0, 5, 1)).unwrap();
    let mut builder = BatchBuilder::new(3);
    builder.push(1_700_000_000_000, Some(b"k"), Some(b"hello"));
    let built = builder.finish();
    assert_eq!(partition.append(&built).unwrap().base_offset, 5);
    let stored = partition.read(5, 1).unwrap().batches.remove(0);
    println!("built:  {}", hex(&built));
    println!("stored: {}", hex(&stored));
    assert_eq!(&stored[8..], &built[8..], "only the base offset differs");
    assert_eq!(hex(&stored), WORKED_EXAMPLE_HEX);
    let records = decode_batch(&stored).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!((records[0].offset, records[0].epoch), (5, 3));
    assert_eq!(records[0].timestamp, 1_700_000_000_000);
    let header = validate(&stored, usize::MAX).unwrap();
    assert_eq!(header.batch_length as usize, stored.len());
}

#[test]
fn failed_segment_roll_does_not_wedge_later_appends() {
    // Proves: when creating the next segment fails (here its index path is blocked; in production
    // EMFILE, or ENOSPC from preallocation), the append fails with an I/O error and writes nothing,
    // and once the cause is gone the next append rolls and succeeds.
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), small(FlushPolicy::Never));
    // One such batch fills most of a 4 KiB segment: the next append must roll.
    let big = batch(1, 0, 3, 1000);
    assert!(big.len() * 2 > SMALL_SEGMENT_BYTES as usize);
    let blocked = partition.append(&big).unwrap().log_end_offset;
    std::fs::create_dir(dir.path().join(index_name(blocked))).unwrap();
    assert!(matches!(
        partition.append(&big),
        Err(StorageError::Io { .. })
    ));
    assert_eq!(
        partition.high_watermark(),
        blocked,
        "the failed append wrote nothing"
    );
    std::fs::remove_dir(dir.path().join(index_name(blocked))).unwrap();
    let appended = partition
        .append(&big)
        .expect("the obstacle is gone: the roll must succeed now");
    assert_eq!(appended.base_offset, blocked);
    assert_eq!(*segment_bases(dir.path()).last().unwrap(), blocked);
    assert_eq!(
        read_all_records(&partition).len() as u64,
        partition.high_watermark()
    );
}

#[test]
fn accepted_batch_decodes_to_timestamps_within_its_header_range() {
    // Proves: a batch the partition accepts decodes to record timestamps inside
    // [first_timestamp, max_timestamp]: a delta that would overflow i64 past first_timestamp is
    // refused at append (or, at worst, decodes saturated), never wrapped to a negative time.
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), small(FlushPolicy::Never));
    let mut builder = BatchBuilder::new(1);
    builder.push(i64::MAX - 1, None, Some(b"a"));
    builder.push(i64::MAX, None, Some(b"b"));
    let mut bytes = builder.finish().to_vec();
    // The second record starts after the header and the first record (4 + 4 + 4 + 4 + 1 + 2
    // bytes); its timestamp_delta follows its 4-byte length. Raise the delta from 1 to 5 and
    // recompute the CRC, as a buggy or hostile producer could.
    let second_delta = HEADER_BYTES + 19 + 4;
    assert_eq!(bytes[second_delta..second_delta + 4], 1u32.to_be_bytes());
    bytes[second_delta..second_delta + 4].copy_from_slice(&5u32.to_be_bytes());
    let crc = crc32fast::hash(&bytes[16..]);
    bytes[12..16].copy_from_slice(&crc.to_be_bytes());
    if partition.append(&bytes).is_ok() {
        let stored = partition.read(0, 1 << 20).unwrap().batches.remove(0);
        let header = BatchHeader::parse(&stored).unwrap();
        let records = std::panic::catch_unwind(|| decode_batch(&stored))
            .expect("decoding an accepted batch must not panic")
            .unwrap();
        for record in records {
            assert!(
                (header.first_timestamp..=header.max_timestamp).contains(&record.timestamp),
                "timestamp {} outside [{}, {}]",
                record.timestamp,
                header.first_timestamp,
                header.max_timestamp
            );
        }
    }
}

#[test]
fn concurrent_reads_during_appends_see_only_whole_valid_batches() {
    // Proves: readers running while 4 threads append (flush `always`, 4 KiB segments so rolls
    // happen under them) only ever get whole, CRC-valid batches that continue exactly where their
    // previous read ended, never see the high watermark go back, and read the same records that
    // the finished log holds.
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let partition = Arc::new(fresh(dir.path(), small(FlushPolicy::Always)));
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|reader| {
            let (partition, done) = (Arc::clone(&partition), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut watermark = 0;
                let mut budget = 1 + reader * 700;
                loop {
                    let finished = done.load(Ordering::Acquire);
                    let result = partition.read(seen.len() as u64, budget).unwrap();
                    assert!(result.high_watermark >= watermark, "watermark went back");
                    watermark = result.high_watermark;
                    for batch in &result.batches {
                        for record in decode_batch(batch).expect("whole valid batch") {
                            assert_eq!(record.offset, seen.len() as u64, "reads continue");
                            assert!(record.offset < watermark, "beyond the watermark");
                            seen.push(record);
                        }
                    }
                    budget = budget * 7 % 3000 + 1;
                    if finished && seen.len() as u64 == watermark {
                        return seen;
                    }
                }
            })
        })
        .collect();
    let writers: Vec<_> = (0..4u64)
        .map(|thread| {
            let partition = Arc::clone(&partition);
            std::thread::spawn(move || {
                for i in 0..60 {
                    let tag = thread * 1000 + i;
                    partition
                        .append(&batch(1, tag, 1 + (i % 4) as u32, 150))
                        .unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    done.store(true, Ordering::Release);
    let log = read_all_records(&partition);
    for reader in readers {
        let seen = reader.join().unwrap();
        assert_eq!(seen.len(), log.len());
        assert!(seen == log, "readers saw what the log holds");
    }
}

#[test]
fn reopen_with_another_segment_size_keeps_the_log() {
    // Proves: segment_bytes may change between runs: the existing segments keep their data
    // (files are read at their own length), appends continue densely, and new segments get the
    // new size, growing and shrinking.
    let dir = tempfile::tempdir().unwrap();
    let mut expected = 0;
    for (run, segment_bytes) in [4096u64, 16384, 4096].into_iter().enumerate() {
        let partition = Partition::open(
            "t/0",
            dir.path(),
            config(segment_bytes, FlushPolicy::Always),
            &seal_worker(),
        )
        .unwrap();
        if run == 0 {
            partition.install_epoch(1).unwrap();
        }
        assert_eq!(partition.high_watermark(), expected);
        for tag in 0..20 {
            expected = partition
                .append(&batch(1, run as u64 * 100 + tag, 2, 400))
                .unwrap()
                .log_end_offset;
        }
        let newest = *segment_bases(dir.path()).last().unwrap();
        let length = std::fs::metadata(dir.path().join(log_name(newest)))
            .unwrap()
            .len();
        assert!(
            length >= segment_bytes,
            "run {run}: new segment of {length} bytes"
        );
        let records = read_all_records(&partition);
        assert_dense_and_monotonic(&records, 0);
        assert_eq!(records.len() as u64, expected);
    }
}

#[test]
fn live_limits_change_retention_and_the_next_segments_size() {
    // Proves: `set_limits` on an open partition makes the next retention pass delete by the new
    // limit (nothing was due before), the next roll creates segments of the new size, a batch
    // larger than a shrunk segment is refused up front (never a roll that cannot hold it),
    // and an out-of-range size is refused naming segment_bytes, changing nothing.
    use fencelog::storage::Limits;
    let dir = tempfile::tempdir().unwrap();
    let partition = fresh(dir.path(), small(FlushPolicy::Never));
    fill(&partition, 40, |tag| batch(1, tag, 2, 300));
    assert_eq!(
        partition.enforce_retention(0).unwrap().segments,
        0,
        "unlimited"
    );
    let before = segment_bases(dir.path()).len();
    assert!(before >= 4, "{before}");
    let limits = Limits {
        segment_bytes: 4 * SMALL_SEGMENT_BYTES,
        retention_bytes: Some(2 * SMALL_SEGMENT_BYTES),
        retention_ms: None,
    };
    partition.set_limits(limits).unwrap();
    assert_eq!(partition.limits(), limits);
    let report = partition.enforce_retention(0).unwrap();
    assert!(report.segments > 0, "the new limit applies at once");
    let log_start = partition.log_start_offset();
    assert!(log_start > 0);
    // The next segments are 4 times as large: far fewer rolls for the same data.
    let last_before = *segment_bases(dir.path()).last().unwrap();
    fill(&partition, 40, |tag| batch(1, 100 + tag, 2, 300));
    let rolled = segment_bases(dir.path())
        .into_iter()
        .filter(|base| *base > last_before)
        .count();
    assert!(
        rolled >= 1 && rolled * 2 < before,
        "rolled {rolled} segments, {before} before"
    );

    let bad = partition.set_limits(Limits {
        segment_bytes: 12,
        ..limits
    });
    assert!(bad.unwrap_err().to_string().contains("segment_bytes"));
    assert_eq!(partition.limits(), limits, "unchanged");
    partition
        .set_limits(Limits {
            segment_bytes: SMALL_SEGMENT_BYTES,
            ..limits
        })
        .unwrap();
    let too_big = partition.append(&batch(1, 999, 1, 2 * SMALL_SEGMENT_BYTES as usize));
    assert!(
        matches!(too_big, Err(StorageError::BatchTooLarge { .. })),
        "{too_big:?}"
    );
}
