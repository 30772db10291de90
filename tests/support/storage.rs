//! Helpers shared by the storage integration tests: configs, deterministic batches, whole-log reads.

use std::path::Path;

use bytes::Bytes;
use fencelog::batch::{decode_batch, decode_batches, BatchHeader};
use fencelog::batch::{BatchBuilder, Record};
use fencelog::storage::{FlushPolicy, Partition, PartitionConfig, SealWorker, StorageError};

/// The smallest segment the engine allows: small logs roll often.
pub const SMALL_SEGMENT_BYTES: u64 = 4096;

/// A config with the given segment size and flush policy, defaults otherwise.
pub fn config(segment_bytes: u64, flush: FlushPolicy) -> PartitionConfig {
    PartitionConfig {
        segment_bytes,
        flush,
        ..PartitionConfig::default()
    }
}

/// The value of record `index` of the batch identified by `tag`: recognisable, and of a size that
/// varies with both so that batch boundaries fall at varied positions.
pub fn value(tag: u64, index: u32, len: usize) -> Vec<u8> {
    let text = format!("batch {tag} record {index} ");
    text.bytes().cycle().take(len.max(text.len())).collect()
}

/// A batch of `records` records under `epoch`, values from [`value`], key `k<tag>`.
pub fn batch(epoch: u64, tag: u64, records: u32, value_len: usize) -> Bytes {
    let mut builder = BatchBuilder::new(epoch);
    for index in 0..records {
        let key = format!("k{tag}");
        builder.push(
            1_000 + i64::from(index),
            Some(key.as_bytes()),
            Some(&value(tag, index, value_len)),
        );
    }
    builder.finish()
}

/// A batch whose records all carry `timestamp_ms`.
pub fn batch_at(epoch: u64, timestamp_ms: i64, records: u32, value_len: usize) -> Bytes {
    let mut builder = BatchBuilder::new(epoch);
    for index in 0..records {
        builder.push(timestamp_ms, None, Some(&value(0, index, value_len)));
    }
    builder.finish()
}

/// A seal thread of its own for a partition a test opens (it ends when the partition is dropped).
pub fn seal_worker() -> SealWorker {
    SealWorker::start().expect("start a seal thread")
}

/// Opens `directory` as partition `t/0` and installs epoch 1.
pub fn fresh(directory: &Path, config: PartitionConfig) -> Partition {
    let partition =
        Partition::open("t/0", directory, config, &seal_worker()).expect("open partition");
    partition.install_epoch(1).expect("install epoch 1");
    partition
}

/// Every stored batch from the log start to the high watermark, in order, as returned by reads
/// (checks that reads make progress and continue where the previous one ended).
pub fn read_all_batches(partition: &Partition) -> Vec<Bytes> {
    let high_watermark = partition.high_watermark();
    let mut offset = partition.log_start_offset();
    let mut batches = Vec::new();
    while offset < high_watermark {
        let result = partition
            .read(offset, 64 * 1024)
            .expect("read inside the log");
        assert!(
            !result.batches.is_empty(),
            "read at {offset} returned nothing"
        );
        for batch in result.batches {
            let header = BatchHeader::parse(&batch).expect("whole batch");
            assert_eq!(header.base_offset, offset, "reads continue without a gap");
            offset = header.next_offset();
            batches.push(batch);
        }
    }
    assert_eq!(
        offset, high_watermark,
        "the last batch ends at the watermark"
    );
    batches
}

/// Every record of the log, decoded (each batch CRC-checked again on the reading side).
pub fn read_all_records(partition: &Partition) -> Vec<Record> {
    read_all_batches(partition)
        .iter()
        .flat_map(|batch| decode_batch(batch).expect("stored batches decode"))
        .collect()
}

/// Decodes a read result's batches as one fetch buffer would be.
pub fn decode_concatenated(batches: &[Bytes]) -> Vec<Record> {
    let mut buffer = Vec::new();
    for batch in batches {
        buffer.extend_from_slice(batch);
    }
    decode_batches(Bytes::from(buffer)).expect("fetched batches decode")
}

/// Asserts offsets run densely from `start` and epochs never decrease with offset.
pub fn assert_dense_and_monotonic(records: &[Record], start: u64) {
    for (index, record) in records.iter().enumerate() {
        assert_eq!(record.offset, start + index as u64, "offsets are dense");
    }
    for pair in records.windows(2) {
        assert!(
            pair[0].epoch <= pair[1].epoch,
            "epoch decreased from {} to {} at offset {}",
            pair[0].epoch,
            pair[1].epoch,
            pair[1].offset
        );
    }
}

/// The `.log` base offsets in a partition directory, sorted.
pub fn segment_bases(directory: &Path) -> Vec<u64> {
    let mut bases: Vec<u64> = std::fs::read_dir(directory)
        .expect("list directory")
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let digits = name.strip_suffix(".log")?;
            (digits.len() == 20).then(|| digits.parse().ok()).flatten()
        })
        .collect();
    bases.sort_unstable();
    bases
}

/// `00000000000000000042.log`.
pub fn log_name(base_offset: u64) -> String {
    format!("{base_offset:020}.log")
}

/// `00000000000000000042.index`.
pub fn index_name(base_offset: u64) -> String {
    format!("{base_offset:020}.index")
}

/// Copies every regular file of `from` into `to` (a partition directory has no subdirectories).
pub fn copy_directory(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy");
    for entry in std::fs::read_dir(from).expect("list directory") {
        let entry = entry.expect("directory entry");
        if entry.file_type().expect("file type").is_file() {
            // A file may go between the listing and its copy when the partition is open (the
            // seal thread renames producer-state snapshots into place): a crash image lacks it.
            match std::fs::copy(entry.path(), to.join(entry.file_name())) {
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                copied => {
                    copied.expect("copy file");
                }
            }
        }
    }
}

/// A temporary directory for the many short-lived copies of the crash tests: on tmpfs
/// (`/dev/shm`) when there is one, so that the fsyncs recovery does (thousands of them) cost
/// nothing; the recovery logic under test does not depend on the file system.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::Builder::new().prefix("fencelog-").tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().expect("create temporary directory")
}

/// A short description of an error for assertion messages.
pub fn describe(result: &Result<impl std::fmt::Debug, StorageError>) -> String {
    format!("{result:?}")
}
