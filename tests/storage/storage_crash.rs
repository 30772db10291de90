//! Crash and corruption recovery: a small closed log is damaged on disk (torn at a byte position,
//! or one byte flipped) and reopened. Whatever the damage, the recovered log must be a prefix of
//! what was written, hold no corrupt batch, have dense offsets and an epoch no lower than before,
//! and keep taking appends that survive another reopen.

use crate::support::storage;

use std::fs::OpenOptions;
use std::path::Path;

use bytes::Bytes;
use fencelog::batch::Record;
use fencelog::batch::{decode_batch, BatchHeader, HEADER_BYTES};
use fencelog::storage::{FlushPolicy, Partition, PartitionConfig, StorageError};
use rand::{rngs::StdRng, Rng, SeedableRng};
use storage::*;
use tempfile::TempDir;

/// One batch as written: where it lies on disk and what it decodes to.
struct StoredBatch {
    segment: usize,
    position: usize,
    len: usize,
    epoch: u64,
    /// Records in the log before this batch.
    records_before: usize,
}

/// One segment file of the original log.
struct SegmentFile {
    base_offset: u64,
    /// Bytes of batches from position 0.
    data_len: usize,
    file_len: usize,
    /// Index range of its batches in `Original::batches`.
    batches: std::ops::Range<usize>,
}

/// The undamaged log, closed, and what it holds.
struct Original {
    dir: TempDir,
    config: PartitionConfig,
    batches: Vec<StoredBatch>,
    segments: Vec<SegmentFile>,
    records: Vec<Record>,
    epoch: u64,
}

const BATCHES: u64 = 36;

/// Builds 3 segments of 4096 bytes from 36 batches of 1–4 records and varied sizes, under epochs
/// 1, 2, 4 and 5 (3 is installed and never written; only the last batch has 5), and closes the
/// partition.
fn original() -> Original {
    let dir = scratch_dir();
    let config = config(SMALL_SEGMENT_BYTES, FlushPolicy::Never);
    let (stored, epoch) = {
        let partition = fresh(dir.path(), config);
        for tag in 0..BATCHES {
            match tag {
                8 => partition.install_epoch(2).unwrap(),
                20 => {
                    partition.install_epoch(3).unwrap();
                    partition.install_epoch(4).unwrap();
                }
                35 => partition.install_epoch(5).unwrap(),
                _ => {}
            }
            let records = 1 + (tag % 4) as u32;
            let value_len = 20 + (tag as usize * 53) % 90;
            let epoch = partition.current_epoch();
            partition
                .append(&batch(epoch, tag, records, value_len))
                .unwrap();
        }
        partition.sync().unwrap();
        let stored: Vec<Bytes> = read_all_batches(&partition)
            .iter()
            .map(|batch| Bytes::copy_from_slice(batch))
            .collect();
        (stored, partition.current_epoch())
    };
    let bases = segment_bases(dir.path());
    assert_eq!(
        bases.len(),
        3,
        "the fixture should span 3 segments: {bases:?}"
    );
    let mut segments: Vec<SegmentFile> = bases
        .iter()
        .map(|base| SegmentFile {
            base_offset: *base,
            data_len: 0,
            file_len: std::fs::metadata(dir.path().join(log_name(*base)))
                .unwrap()
                .len() as usize,
            batches: 0..0,
        })
        .collect();
    let mut batches = Vec::new();
    let mut records = Vec::new();
    for (index, bytes) in stored.iter().enumerate() {
        let header = BatchHeader::parse(bytes).unwrap();
        let segment = bases.partition_point(|base| *base <= header.base_offset) - 1;
        let file = &mut segments[segment];
        if file.batches.is_empty() {
            file.batches = index..index;
        }
        file.batches.end = index + 1;
        let on_disk = std::fs::read(dir.path().join(log_name(file.base_offset))).unwrap();
        assert_eq!(
            &on_disk[file.data_len..file.data_len + bytes.len()],
            &bytes[..],
            "batches lie back to back from position 0"
        );
        batches.push(StoredBatch {
            segment,
            position: file.data_len,
            len: bytes.len(),
            epoch: header.epoch,
            records_before: records.len(),
        });
        file.data_len += bytes.len();
        records.extend(decode_batch(bytes).unwrap());
    }
    for file in &segments {
        let on_disk = std::fs::read(dir.path().join(log_name(file.base_offset))).unwrap();
        assert!(
            on_disk[file.data_len..].iter().all(|b| *b == 0),
            "zero tail"
        );
    }
    let epochs: Vec<u64> = batches.iter().map(|b| b.epoch).collect();
    assert!([1, 2, 4, 5].iter().all(|epoch| epochs.contains(epoch)));
    assert!(
        batches.iter().any(|b| b.segment == 1 && b.epoch == 2)
            && batches.iter().any(|b| b.segment == 0 && b.epoch == 2),
        "an epoch spans a segment roll"
    );
    Original {
        dir,
        config,
        batches,
        segments,
        records,
        epoch,
    }
}

/// What must survive a given damage.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Exactly the first `n` batches.
    Batches(usize),
    /// At least the first `n` batches (and a prefix in any case).
    AtLeast(usize),
}

impl Original {
    /// A fresh copy of the closed log in a new directory under `parent`.
    fn copy(&self, parent: &Path, name: &str) -> std::path::PathBuf {
        let target = parent.join(name);
        copy_directory(self.dir.path(), &target);
        target
    }

    fn segment_path(&self, dir: &Path, segment: usize) -> std::path::PathBuf {
        dir.join(log_name(self.segments[segment].base_offset))
    }

    /// Batches that survive damage at `position` of `segment` when the damage destroys the batch
    /// there: all before it. `None` when the position is past the segment's data.
    fn batches_before(&self, segment: usize, position: usize) -> Option<usize> {
        let file = &self.segments[segment];
        if position >= file.data_len {
            return None;
        }
        Some(
            self.batches[file.batches.clone()]
                .iter()
                .take_while(|batch| batch.position + batch.len <= position)
                .count()
                + file.batches.start,
        )
    }

    /// Reopens the damaged copy and checks everything the recovery promises.
    fn check(&self, dir: &Path, expect: Expect, what: &str) {
        let (partition, report) =
            Partition::open_with_report("t/0", dir, self.config, &seal_worker())
                .unwrap_or_else(|error| panic!("{what}: reopen failed: {error}"));
        // read_all_records decodes (CRC-checks) every batch and checks reads continue densely.
        let records = read_all_records(&partition);
        assert_dense_and_monotonic(&records, 0);
        assert_eq!(partition.log_start_offset(), 0, "{what}");
        assert_eq!(partition.high_watermark(), records.len() as u64, "{what}");
        assert!(
            records[..] == self.records[..records.len()],
            "{what}: the recovered log is not a prefix of what was written"
        );
        let surviving = self
            .batches
            .iter()
            .take_while(|batch| batch.records_before < records.len())
            .count();
        let boundary = self
            .batches
            .get(surviving)
            .map_or(self.records.len(), |b| b.records_before);
        assert_eq!(boundary, records.len(), "{what}: cut inside a batch");
        match expect {
            Expect::Batches(n) => assert_eq!(surviving, n, "{what}: batches kept ({report:?})"),
            Expect::AtLeast(n) => assert!(surviving >= n, "{what}: {surviving} < {n} kept"),
        }
        let epoch = partition.current_epoch();
        assert!(epoch >= self.epoch, "{what}: epoch went back to {epoch}");
        assert_eq!(report.epoch, epoch);

        let appended = partition
            .append(&batch(epoch, 9_999, 2, 30))
            .unwrap_or_else(|error| panic!("{what}: append after recovery failed: {error}"));
        assert_eq!(appended.base_offset, records.len() as u64, "{what}");
        drop(partition);
        let (partition, report) =
            Partition::open_with_report("t/0", dir, self.config, &seal_worker()).unwrap();
        assert_eq!(report.bytes_cut, 0, "{what}: second reopen cut again");
        assert_eq!(report.segments_deleted, 0, "{what}");
        let again = read_all_records(&partition);
        assert_eq!(
            again.len(),
            records.len() + 2,
            "{what}: the new batch survives"
        );
        assert!(again[..records.len()] == records[..], "{what}");
        assert_eq!(
            again[records.len()].value.as_deref(),
            Some(&value(9_999, 0, 30)[..])
        );
        assert_eq!(partition.current_epoch(), epoch, "{what}");
    }

    /// Reopens a copy whose sealed `segment` was damaged from batch `first_damaged` on (`None`:
    /// no batch damaged) and checks the corruption rule: nothing is cut or deleted, the offsets
    /// from the damaged batch to the next segment are refused with `Corrupt`, every other record
    /// reads back exactly as written, the epoch is kept, and appends continue at the log end.
    fn check_sealed(&self, dir: &Path, segment: usize, first_damaged: Option<usize>, what: &str) {
        let (partition, report) =
            Partition::open_with_report("t/0", dir, self.config, &seal_worker())
                .unwrap_or_else(|error| panic!("{what}: reopen failed: {error}"));
        let total = self.records.len() as u64;
        assert_eq!(partition.high_watermark(), total, "{what}: nothing is cut");
        assert_eq!(report.bytes_cut, 0, "{what}");
        assert_eq!(report.segments_deleted, 0, "{what}");
        let next_segment_start =
            self.batches[self.segments[segment + 1].batches.start].records_before as u64;
        let damaged =
            first_damaged.map(|n| self.batches[n].records_before as u64..next_segment_start);
        match &damaged {
            Some(range) => {
                if report.damaged.is_empty() {
                    // The segment was below the recovery point and opened without a scan: its
                    // batches are checked in the background (here, at once) or when first read.
                    assert!(report.segments_opened_lazily > 0, "{what}: {report:?}");
                    partition.verify_unscanned_segments(|| true);
                } else {
                    assert_eq!(report.damaged.len(), 1, "{what}: {report:?}");
                    assert_eq!(
                        (report.damaged[0].start_offset, report.damaged[0].end_offset),
                        (range.start, range.end),
                        "{what}"
                    );
                }
                for offset in [range.start, range.end - 1] {
                    assert!(
                        matches!(
                            partition.read(offset, 1 << 20),
                            Err(StorageError::Corrupt { .. })
                        ),
                        "{what}: damaged offset {offset} was served"
                    );
                }
            }
            None => assert!(report.damaged.is_empty(), "{what}: {report:?}"),
        }
        let readable = |offset: u64| {
            damaged
                .as_ref()
                .is_none_or(|range| !range.contains(&offset))
        };
        let mut offset = 0;
        while offset < total {
            if !readable(offset) {
                offset = damaged.as_ref().unwrap().end;
                continue;
            }
            let read = partition
                .read(offset, 1 << 20)
                .unwrap_or_else(|error| panic!("{what}: read {offset}: {error}"));
            for record in decode_concatenated(&read.batches) {
                if record.offset < offset || !readable(record.offset) {
                    continue;
                }
                assert_eq!(record, self.records[record.offset as usize], "{what}");
                offset = record.offset + 1;
            }
        }
        let epoch = partition.current_epoch();
        assert!(epoch >= self.epoch, "{what}: epoch went back to {epoch}");
        let appended = partition
            .append(&batch(epoch, 9_999, 2, 30))
            .unwrap_or_else(|error| panic!("{what}: append after recovery failed: {error}"));
        assert_eq!(appended.base_offset, total, "{what}");
        drop(partition);
        let (partition, again) =
            Partition::open_with_report("t/0", dir, self.config, &seal_worker()).unwrap();
        let ranges = |report: &fencelog::storage::RecoveryReport| {
            report
                .damaged
                .iter()
                .map(|d| (d.start_offset, d.end_offset))
                .collect::<Vec<_>>()
        };
        // The same offsets stay refused, or fewer: a file cut inside trailing zero bytes of a
        // batch is whole again once recovery re-extends the file with zeros.
        let (before, after) = (ranges(&report), ranges(&again));
        assert!(
            after
                .iter()
                .all(|(start, end)| before.iter().any(|(s, e)| s <= start && end <= e)),
            "{what}: refused {before:?} on the first reopen, {after:?} on the second"
        );
        assert_eq!(
            partition.high_watermark(),
            total + 2,
            "{what}: the new batch survives"
        );
    }

    /// Truncates the copy's `segment` file at `position` and checks recovery.
    fn truncate_and_check(&self, parent: &Path, segment: usize, position: usize) {
        let what = format!("truncate segment {segment} at {position}");
        let dir = self.copy(parent, "case");
        OpenOptions::new()
            .write(true)
            .open(self.segment_path(&dir, segment))
            .unwrap()
            .set_len(position as u64)
            .unwrap();
        if segment + 1 < self.segments.len() {
            self.check_sealed(&dir, segment, self.batches_before(segment, position), &what);
        } else {
            let expect = match self.batches_before(segment, position) {
                Some(n) => Expect::Batches(n),
                None => Expect::Batches(self.batches.len()),
            };
            self.check(&dir, expect, &what);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// XORs `mask` into byte `position` of the copy's `segment` file and checks recovery.
    fn flip_and_check(&self, parent: &Path, segment: usize, position: usize, mask: u8) {
        assert_ne!(mask, 0);
        let what = format!("flip {mask:#04x} at segment {segment} byte {position}");
        let dir = self.copy(parent, "case");
        let path = self.segment_path(&dir, segment);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[position] ^= mask;
        std::fs::write(&path, bytes).unwrap();
        if segment + 1 < self.segments.len() {
            // A sealed segment: the damaged batch and the rest of its segment are refused on
            // read; nothing is cut; garbage in its zero tail damages nothing.
            self.check_sealed(&dir, segment, self.batches_before(segment, position), &what);
        } else {
            let expect = match self.batches_before(segment, position) {
                // Inside a batch: CRC, length or base offset check catches it; the batch and
                // everything after it are cut.
                Some(n) => Expect::Batches(n),
                // In the zero tail: no batch is damaged.
                None => Expect::AtLeast(self.segments[segment].batches.end),
            };
            self.check(&dir, expect, &what);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn torn_last_segment_recovers_to_a_prefix_at_every_byte() {
    // Proves: truncating the last segment at EVERY byte position of its data (and in its zero
    // tail) recovers exactly the batches that lie wholly before the cut, with dense offsets, no
    // corrupt batch and the epoch kept; appends continue and survive another reopen.
    let original = original();
    let parent = scratch_dir();
    let last = original.segments.len() - 1;
    let file = &original.segments[last];
    for position in 0..=file.data_len {
        original.truncate_and_check(parent.path(), last, position);
    }
    for position in [file.data_len + 1, file.data_len + 100, file.file_len] {
        original.truncate_and_check(parent.path(), last, position);
    }
}

#[test]
fn torn_earlier_segment_refuses_only_the_missing_offsets() {
    // Proves: a sealed segment cut short (a sample of positions, every batch boundary and the
    // bytes around it) is corruption, not a crash (segments are synced whole before the next
    // exists): the batches before the cut and every later segment are still served, the missing
    // offsets are refused with Corrupt, nothing is deleted, and the epoch is kept.
    let original = original();
    let parent = scratch_dir();
    for segment in 0..original.segments.len() - 1 {
        let file = &original.segments[segment];
        let mut positions: Vec<usize> = (0..=file.data_len).step_by(97).collect();
        for batch in &original.batches[file.batches.clone()] {
            let end = batch.position + batch.len;
            positions.extend([
                batch.position + 1,
                batch.position + HEADER_BYTES,
                end - 1,
                end,
            ]);
        }
        positions.extend([0, file.data_len, file.file_len]);
        for position in positions {
            original.truncate_and_check(parent.path(), segment, position);
        }
    }
}

#[test]
fn flipped_byte_in_chosen_batches_is_caught_at_that_batch() {
    // Proves: one flipped bit at EVERY byte of three chosen batches (the first of the middle
    // segment, the first one of epoch 4, the last one of the log) is caught exactly at the
    // damaged batch: the CRC, the length check and the base-offset check leave no byte unguarded.
    // In the last segment the log is cut there; in a sealed one those offsets are refused.
    let original = original();
    let parent = scratch_dir();
    let middle_first = original.segments[1].batches.start;
    let epoch_4_first = original.batches.iter().position(|b| b.epoch == 4).unwrap();
    let last = original.batches.len() - 1;
    for index in [middle_first, epoch_4_first, last] {
        let batch = &original.batches[index];
        for position in batch.position..batch.position + batch.len {
            let mask = 1 << (position % 8);
            original.flip_and_check(parent.path(), batch.segment, position, mask);
        }
    }
}

#[test]
fn flipped_byte_at_random_positions_never_serves_a_corrupt_batch() {
    // Proves: a random byte flipped anywhere in any segment file (data or zero tail; seeded, 300
    // cases) never yields a corrupt batch: in the last segment the log is cut to a prefix exactly
    // up to the damaged batch; in a sealed segment the damaged offsets are refused and the rest is
    // served; the epoch is kept and appends work afterwards.
    let original = original();
    let parent = scratch_dir();
    let mut rng = StdRng::seed_from_u64(0x5eed_f1e5);
    for _ in 0..300 {
        let segment = rng.gen_range(0..original.segments.len());
        let file = &original.segments[segment];
        // Half the flips in data, half anywhere in the file.
        let limit = if rng.gen_bool(0.5) {
            file.data_len
        } else {
            file.file_len
        };
        let position = rng.gen_range(0..limit);
        let mask = rng.gen_range(1..=255u8);
        original.flip_and_check(parent.path(), segment, position, mask);
    }
}

#[test]
fn flipped_bit_never_raises_the_recovered_epoch() {
    // Proves: the epoch field is inside the CRC: with the checkpoint gone (so the log alone gives
    // the epoch), flipping any bit of the last batch's epoch field (or one bit of any other byte)
    // never yields an epoch above the one really written; a damaged last batch is cut and the
    // epoch falls back to the previous batch's.
    let original = original();
    let parent = scratch_dir();
    let last = original.batches.last().unwrap();
    let previous_epoch = original.batches[original.batches.len() - 2].epoch;
    for position in last.position..last.position + last.len {
        // Every bit of the epoch field; one bit (varying) of every other byte.
        let in_epoch_field = (last.position + 20..last.position + 28).contains(&position);
        let bits = if in_epoch_field {
            0..8
        } else {
            position % 8..position % 8 + 1
        };
        for bit in bits {
            let dir = original.copy(parent.path(), "case");
            std::fs::remove_file(dir.join("epoch-checkpoint")).unwrap();
            let path = original.segment_path(&dir, last.segment);
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[position] ^= 1 << bit;
            std::fs::write(&path, bytes).unwrap();
            let partition = Partition::open("t/0", &dir, original.config, &seal_worker()).unwrap();
            assert_eq!(
                partition.current_epoch(),
                previous_epoch,
                "bit {bit} of byte {position}"
            );
            assert_eq!(
                partition.high_watermark(),
                last.records_before as u64,
                "bit {bit} of byte {position}"
            );
            drop(partition);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

#[test]
#[ignore = "long: every byte of every segment (run with --ignored)"]
fn every_truncation_and_every_flip_of_every_segment_recovers_to_a_prefix() {
    // Proves the properties above exhaustively: truncation at every byte and a flipped byte at
    // every position of every segment file, data and tail.
    let original = original();
    let parent = scratch_dir();
    for segment in 0..original.segments.len() {
        let file = &original.segments[segment];
        for position in 0..=file.file_len {
            original.truncate_and_check(parent.path(), segment, position);
        }
        for position in 0..file.file_len {
            original.flip_and_check(parent.path(), segment, position, 0xa5);
        }
    }
}

#[test]
fn epoch_of_a_deleted_segment_is_not_adopted() {
    // Proves: when recovery deletes a segment because it starts with an epoch lower than the log
    // before it, that segment's epochs do not count: the installed epoch is the max of the
    // checkpoint and the log that remains, and the holder of the real epoch can still write.
    let dir = tempfile::tempdir().unwrap();
    let config = config(SMALL_SEGMENT_BYTES, FlushPolicy::Always);
    {
        let partition = fresh(dir.path(), config);
        partition.install_epoch(2).unwrap();
        partition.install_epoch(3).unwrap();
        partition.append(&batch(3, 0, 1, 10)).unwrap();
    }
    // A stray segment continuing the log at offset 1 whose first batch has epoch 2 (< 3) and
    // whose second has epoch 5 (never granted): valid batches, valid CRCs, out-of-order epochs.
    let mut stray = Vec::new();
    for (offset, epoch) in [(1u64, 2u64), (2, 5)] {
        let mut bytes = batch(epoch, offset, 1, 10).to_vec();
        fencelog::batch::stamp_base_offset(&mut bytes, offset);
        stray.extend_from_slice(&bytes);
    }
    stray.resize(SMALL_SEGMENT_BYTES as usize, 0);
    std::fs::write(dir.path().join(log_name(1)), stray).unwrap();

    let (partition, report) =
        Partition::open_with_report("t/0", dir.path(), config, &seal_worker()).unwrap();
    assert_eq!(report.segments_deleted, 1, "the stray segment is deleted");
    assert_eq!(segment_bases(dir.path()), [0]);
    assert_eq!(partition.high_watermark(), 1);
    assert_eq!(
        partition.current_epoch(),
        3,
        "epoch 5 exists only in the deleted segment"
    );
    partition.append(&batch(3, 1, 1, 10)).unwrap();
}

#[test]
fn a_rolls_lost_directory_entry_cuts_the_log_at_the_gap() {
    // Proves: under flush `never` a roll does not sync the partition directory (the seal does,
    // before the recovery point passes the segment), so an OS crash may lose a new segment's
    // entry while a later one's survives. Recovery then finds a gap after a segment the recovery
    // point does not cover and keeps only the log before it: a prefix, dense, with its epoch,
    // taking appends at its end.
    let dir = scratch_dir();
    let mut config = config(SMALL_SEGMENT_BYTES, FlushPolicy::Never);
    // No seal before the "crash": the recovery point stays at 0.
    config.seal_delay = std::time::Duration::from_secs(3600);
    let partition = fresh(dir.path(), config);
    partition.install_epoch(4).unwrap();
    let mut tag = 0;
    while segment_bases(dir.path()).len() < 4 {
        partition.append(&batch(4, tag, 3, 200)).unwrap();
        tag += 1;
    }
    let written = read_all_records(&partition);
    // The crash image: the files as the page cache has them, the third segment's entry lost.
    let image = scratch_dir();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), image.path().join(entry.file_name())).unwrap();
    }
    drop(partition);
    let bases = segment_bases(image.path());
    std::fs::remove_file(image.path().join(log_name(bases[2]))).unwrap();

    let (partition, report) =
        Partition::open_with_report("t/0", image.path(), config, &seal_worker()).unwrap();
    assert_eq!(report.segments_deleted, 1, "the segment after the gap goes");
    assert_eq!(segment_bases(image.path()), bases[..2]);
    let records = read_all_records(&partition);
    assert_dense_and_monotonic(&records, 0);
    assert_eq!(
        records.len() as u64,
        bases[2],
        "everything before the gap is kept"
    );
    assert!(records[..] == written[..records.len()]);
    assert_eq!(partition.current_epoch(), 4);
    let appended = partition.append(&batch(4, 9_999, 1, 10)).unwrap();
    assert_eq!(appended.base_offset, bases[2]);
}
