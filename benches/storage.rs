//! Storage benchmarks: append throughput per flush policy and batch size, the fence check alone,
//! batch build and validation, fetches from a segment, what the producer sequence check costs
//! an append, and reopening a partition with and without its producer-state snapshot.
//!
//! Run with `cargo bench --bench storage`. Each benchmark measures for 3 s (20 samples) so the
//! whole run takes a few minutes. Partition directories live in the system temp directory: flush
//! `always` numbers depend on what that directory's disk does with an msync.

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use fencelog::batch::BatchBuilder;
use fencelog::batch::{decode_batches, validate};
use fencelog::storage::fence::{check_epoch, Fence};
use fencelog::storage::{FlushPolicy, Partition, PartitionConfig, SealWorker, StorageError};

/// Size of each record's value.
const RECORD_BYTES: usize = 1024;
/// Segment size of the append benchmarks.
const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;

/// A batch of `records` records of 1 KiB under `epoch`.
fn batch_of(records: usize, epoch: u64) -> Bytes {
    let value = vec![0xab; RECORD_BYTES];
    let mut builder = BatchBuilder::new(epoch);
    for index in 0..records {
        builder.push(1_700_000_000_000 + index as i64, Some(b"key"), Some(&value));
    }
    builder.finish()
}

/// Append throughput: one prebuilt batch appended over and over to a partition with epoch 1.
/// Retention (4 segments) keeps the disk use bounded; it runs every 64 MiB of appends.
fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("append");
    for (policy_name, flush) in [
        ("never", FlushPolicy::Never),
        ("always", FlushPolicy::Always),
    ] {
        for records in [1usize, 100, 1000] {
            let batch = batch_of(records, 1);
            let dir = tempfile::tempdir().expect("temp dir");
            let config = PartitionConfig {
                segment_bytes: SEGMENT_BYTES,
                flush,
                retention_bytes: Some(4 * SEGMENT_BYTES),
                ..PartitionConfig::default()
            };
            let partition =
                Partition::open("bench/0", dir.path(), config, &SealWorker::start().unwrap())
                    .expect("open");
            partition.install_epoch(1).expect("install epoch");
            let retention_every = (SEGMENT_BYTES as usize / batch.len()).max(1);
            let mut appends = 0usize;
            group.throughput(Throughput::Bytes(batch.len() as u64));
            group.bench_function(
                BenchmarkId::new(policy_name, format!("{records}x1KiB")),
                |b| {
                    b.iter(|| {
                        let appended = partition.append(black_box(&batch)).expect("append");
                        appends += 1;
                        if appends.is_multiple_of(retention_every) {
                            partition.enforce_retention(0).expect("retention");
                        }
                        appended
                    })
                },
            );
        }
    }
    group.finish();
}

/// Group commit at work: 8 threads appending 1-record batches of 1 KiB under flush `always`
/// share syncs. Each measured iteration is one append; the appends of an iteration batch are
/// split across the threads.
fn append_concurrent(c: &mut Criterion) {
    const THREADS: u64 = 8;
    let mut group = c.benchmark_group("append_concurrent");
    let batch = batch_of(1, 1);
    let dir = tempfile::tempdir().expect("temp dir");
    let config = PartitionConfig {
        segment_bytes: SEGMENT_BYTES,
        flush: FlushPolicy::Always,
        retention_bytes: Some(4 * SEGMENT_BYTES),
        ..PartitionConfig::default()
    };
    let partition = Partition::open("bench/0", dir.path(), config, &SealWorker::start().unwrap())
        .expect("open");
    partition.install_epoch(1).expect("install epoch");
    group.throughput(Throughput::Bytes(batch.len() as u64));
    group.bench_function("always/8threads_1x1KiB", |b| {
        b.iter_custom(|iterations| {
            let per_thread = iterations.div_ceil(THREADS);
            let start = std::time::Instant::now();
            std::thread::scope(|scope| {
                for _ in 0..THREADS {
                    scope.spawn(|| {
                        for _ in 0..per_thread {
                            partition.append(&batch).expect("append");
                        }
                    });
                }
            });
            let elapsed = start.elapsed();
            partition.enforce_retention(0).expect("retention");
            // Scale to the iterations asked for (the threads may have done a few more).
            elapsed.mul_f64(iterations as f64 / (per_thread * THREADS) as f64)
        })
    });
    let syncs = partition.sync_count();
    let appends = partition.high_watermark();
    println!("append_concurrent: {appends} appends shared {syncs} syncs");
    group.finish();
}

/// The fence check alone, and the fence's lock + check around a write that does nothing.
fn fence(c: &mut Criterion) {
    let mut group = c.benchmark_group("fence");
    group.bench_function("check_epoch", |b| {
        b.iter(|| check_epoch(black_box(7), black_box(7)))
    });
    let guarded = Fence::new(7, ());
    group.bench_function("append_noop_write", |b| {
        b.iter(|| guarded.append(black_box(7), |_log| Ok::<_, StorageError>(())))
    });
    group.bench_function("append_stale_epoch", |b| {
        b.iter(|| guarded.append(black_box(6), |_log| Ok::<_, StorageError>(())))
    });
    group.finish();
}

/// Building a batch of 1 KiB records, and validating one (CRC and structure).
fn batch(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch");
    let value = vec![0xab; RECORD_BYTES];
    for records in [1usize, 100, 1000] {
        let built = batch_of(records, 1);
        group.throughput(Throughput::Bytes(built.len() as u64));
        group.bench_function(BenchmarkId::new("build", format!("{records}x1KiB")), |b| {
            b.iter(|| {
                let mut builder = BatchBuilder::new(1);
                for index in 0..records {
                    builder.push(index as i64, Some(b"key"), Some(black_box(&value)));
                }
                builder.finish()
            })
        });
        group.bench_function(
            BenchmarkId::new("validate", format!("{records}x1KiB")),
            |b| b.iter(|| validate(black_box(&built), usize::MAX).expect("valid")),
        );
    }
    group.finish();
}

/// Fetches from a segment holding 32 MiB of 100-record batches (flush `never`, everything
/// visible): 1 MiB fetches (zero-copy slices), the same decoded into records as a consumer would,
/// and a fetch of a single batch.
fn read(c: &mut Criterion) {
    let mut group = c.benchmark_group("read");
    let dir = tempfile::tempdir().expect("temp dir");
    let config = PartitionConfig {
        segment_bytes: SEGMENT_BYTES,
        flush: FlushPolicy::Never,
        ..PartitionConfig::default()
    };
    let partition = Partition::open("bench/0", dir.path(), config, &SealWorker::start().unwrap())
        .expect("open");
    partition.install_epoch(1).expect("install epoch");
    let batch = batch_of(100, 1);
    let batches = (32 * 1024 * 1024) / batch.len();
    for _ in 0..batches {
        partition.append(&batch).expect("append");
    }
    let budget = 1024 * 1024;
    let per_fetch = (budget / batch.len()) * batch.len();
    // Offsets at batch starts in the first half, so every fetch returns the same bytes.
    let starts: Vec<u64> = (0..batches as u64 / 2).map(|i| i * 100).collect();

    // Zero-copy fetches: the time per fetch is the figure (no bytes are touched).
    let mut next = 0;
    group.bench_function("fetch_1MiB", |b| {
        b.iter(|| {
            next = (next + 7) % starts.len();
            let result = partition.read(starts[next], budget).expect("read");
            debug_assert_eq!(
                result.batches.iter().map(Bytes::len).sum::<usize>(),
                per_fetch
            );
            result
        })
    });
    group.throughput(Throughput::Bytes(per_fetch as u64));
    group.bench_function("fetch_1MiB_and_decode", |b| {
        b.iter(|| {
            next = (next + 7) % starts.len();
            let result = partition.read(starts[next], budget).expect("read");
            let mut buffer = Vec::with_capacity(per_fetch);
            for batch in &result.batches {
                buffer.extend_from_slice(batch);
            }
            decode_batches(Bytes::from(buffer)).expect("decode")
        })
    });
    group.throughput(Throughput::Elements(1));
    group.bench_function("fetch_one_batch", |b| {
        b.iter(|| {
            next = (next + 7) % starts.len();
            // An offset inside the batch: the index lookup and header walk are part of the cost.
            partition.read(starts[next] + 50, 1).expect("read")
        })
    });
    group.finish();
}

/// A 1-record batch of 1 KiB: magic 1, or magic 3 of producer 7 at `sequence`.
fn one_record(epoch: u64, sequence: Option<i32>) -> Bytes {
    let value = [0xab; RECORD_BYTES];
    let mut builder = match sequence {
        Some(_) => BatchBuilder::with_producer(epoch, 7, 0),
        None => BatchBuilder::new(epoch),
    };
    builder.push(1_700_000_000_000, Some(b"key"), Some(&value));
    builder.finish_with_sequence(sequence.unwrap_or(0))
}

fn open_partition(dir: &std::path::Path, worker: &SealWorker) -> Partition {
    let config = PartitionConfig {
        segment_bytes: SEGMENT_BYTES,
        flush: FlushPolicy::Never,
        retention_bytes: Some(4 * SEGMENT_BYTES),
        ..PartitionConfig::default()
    };
    Partition::open("bench/0", dir, config, worker).expect("open")
}

/// The producer sequence check's cost: 1-record batches of 1 KiB under flush `never`, plain
/// (magic 1) vs idempotent (magic 3, a new sequence each), each built outside the measurement.
fn append_idempotent(c: &mut Criterion) {
    let mut group = c.benchmark_group("append_producer");
    let worker = SealWorker::start().unwrap();
    for idempotent in [false, true] {
        let dir = tempfile::tempdir().expect("temp dir");
        let partition = open_partition(dir.path(), &worker);
        partition.install_epoch(1).expect("install epoch");
        let mut sequence = 0i32;
        let mut appends = 0usize;
        group.throughput(Throughput::Bytes(one_record(1, None).len() as u64));
        let name = if idempotent { "idempotent" } else { "plain" };
        group.bench_function(BenchmarkId::new(name, "1x1KiB"), |b| {
            b.iter_batched(
                || {
                    sequence += 1;
                    one_record(1, idempotent.then_some(sequence - 1))
                },
                |batch| {
                    appends += 1;
                    if appends.is_multiple_of(50_000) {
                        partition.enforce_retention(0).expect("retention");
                    }
                    partition.append(&batch).expect("append")
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

/// Reopening a partition whose active segment holds 32 MiB of idempotent 1-record batches
/// (about 30 000): with the snapshot a clean close writes, and without it (after a crash
/// before any roll: the producer state is rebuilt by replaying the whole segment).
fn reopen(c: &mut Criterion) {
    let mut group = c.benchmark_group("reopen_32MiB");
    let worker = SealWorker::start().unwrap();
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let partition = open_partition(dir.path(), &worker);
        partition.install_epoch(1).expect("install epoch");
        let mut written = 0usize;
        let mut sequence = 0;
        while written < 32 * 1024 * 1024 {
            let batch = one_record(1, Some(sequence));
            written += batch.len();
            sequence += 1;
            partition.append(&batch).expect("append");
        }
    }
    let snapshot = dir
        .path()
        .join(fencelog::storage::producer_state::SNAPSHOT_FILE);
    group.sample_size(10);
    group.bench_function("with_snapshot", |b| {
        b.iter(|| drop(open_partition(dir.path(), &worker)))
    });
    group.bench_function("replaying_the_log", |b| {
        b.iter_batched(
            || std::fs::remove_file(&snapshot).expect("remove snapshot"),
            |()| drop(open_partition(dir.path(), &worker)),
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = append, append_concurrent, fence, batch, read, append_idempotent, reopen
}
criterion_main!(benches);
