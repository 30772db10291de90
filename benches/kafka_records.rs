//! Kafka record batch conversion throughput (`fencelog::server::kafka::batches`), both ways, for one batch of
//! 1000 records of 1 KiB: a Produce's Kafka batch (uncompressed and lz4) into a native batch,
//! and a stored native batch into a Kafka batch for a fetch. These figures decide whether the
//! Kafka listener converts batches or stores Kafka batches as they are (`docs/kafka.md`).
//!
//! Run with `cargo bench --bench kafka_records`. Throughput is the native batch's bytes, so
//! both directions are comparable (and comparable with `benches/storage.rs`).

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fencelog::batch::{stamp_base_offset, BatchBuilder};
use fencelog::server::kafka::batches::{to_kafka_batches, to_native_batches, RecordLimits};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// Records per batch.
const RECORDS: usize = 1000;
/// Size of each record's value.
const VALUE_BYTES: usize = 1024;

/// A value that compresses somewhat, as real payloads do (not all one byte).
fn value(index: usize) -> Vec<u8> {
    (0..VALUE_BYTES)
        .map(|position| ((position * 31 + index * 7) % 251) as u8 / 4)
        .collect()
}

fn kafka_batch(compression: Compression) -> Bytes {
    let records: Vec<Record> = (0..RECORDS)
        .map(|index| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: 12,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: index as i64,
            sequence: index as i32,
            timestamp: 1_700_000_000_000 + index as i64,
            key: Some(Bytes::from(format!("key-{index}"))),
            value: Some(Bytes::from(value(index))),
            headers: IndexMap::new(),
        })
        .collect();
    let mut out = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut out,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("encodes");
    out.freeze()
}

fn native_batch() -> Bytes {
    let mut builder = BatchBuilder::with_producer(1, 12, 0);
    for index in 0..RECORDS {
        builder.push(
            1_700_000_000_000 + index as i64,
            Some(format!("key-{index}").as_bytes()),
            Some(&value(index)),
        );
    }
    let mut batch = builder.finish().to_vec();
    stamp_base_offset(&mut batch, 1_000_000);
    Bytes::from(batch)
}

fn conversion(criterion: &mut Criterion) {
    let native = native_batch();
    let limits = RecordLimits::default();
    let mut group = criterion.benchmark_group("kafka_records");
    group.throughput(Throughput::Bytes(native.len() as u64));
    for (name, compression) in [("none", Compression::None), ("lz4", Compression::Lz4)] {
        let kafka = kafka_batch(compression);
        group.bench_with_input(
            BenchmarkId::new("to_native", name),
            &kafka,
            |bench, kafka| {
                bench.iter(|| to_native_batches(black_box(kafka), 1, &limits).expect("converts"))
            },
        );
    }
    let batches = [native];
    let mut out = BytesMut::new();
    group.bench_function(BenchmarkId::new("to_kafka", "none"), |bench| {
        bench.iter(|| {
            out.clear();
            to_kafka_batches(black_box(&batches), &mut out).expect("converts");
            black_box(out.len())
        })
    });
    // The fetch side into a fresh buffer each time, as a listener without buffer reuse would.
    group.bench_function(BenchmarkId::new("to_kafka_fresh_buffer", "none"), |bench| {
        bench.iter(|| {
            let mut out = BytesMut::new();
            to_kafka_batches(black_box(&batches), &mut out).expect("converts");
            out.freeze()
        })
    });
    group.finish();
}

criterion_group!(benches, conversion);
criterion_main!(benches);
