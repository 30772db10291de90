//! Protocol benchmarks: the frame codec's encode and decode of produce requests and fetch
//! responses, the two messages that carry data, for 1, 100 and 1000 records of 1 KiB.
//!
//! Run with `cargo bench --bench codec`. The storage side (batch build and validate, segment
//! append, the fence, fetch from a segment) is in `benches/storage.rs`. Throughput is the
//! frame's bytes, length prefix included.

use std::hint::black_box;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use fencelog::batch::decode_batches;
use fencelog::batch::BatchBuilder;
use fencelog::protocol::{ApiKey, FrameCodec, Request, RequestFrame, Response, ResponseFrame};
use tokio_util::codec::Decoder;

/// Size of each record's value.
const RECORD_BYTES: usize = 1024;

/// A batch of `records` records of 1 KiB.
fn batch_of(records: usize) -> Bytes {
    let value = vec![0xab; RECORD_BYTES];
    let mut builder = BatchBuilder::new(1);
    for index in 0..records {
        builder.push(1_700_000_000_000 + index as i64, Some(b"key"), Some(&value));
    }
    builder.finish()
}

fn produce_frame(records: usize) -> RequestFrame {
    RequestFrame::new(
        7,
        Request::Produce {
            topic: "bench-topic".into(),
            partition: 3,
            batch: batch_of(records),
            acks: None,
        },
    )
}

fn fetch_frame(records: usize) -> ResponseFrame {
    ResponseFrame::ok(
        7,
        Response::Fetch {
            high_watermark: 1_000_000,
            log_start_offset: 0,
            batches: vec![batch_of(records)],
            committed: None,
        },
    )
}

fn encoded(encode: impl Fn(&mut BytesMut)) -> Bytes {
    let mut buffer = BytesMut::new();
    encode(&mut buffer);
    buffer.freeze()
}

/// A read buffer holding one frame, as the socket would leave it (made outside the timing).
fn read_buffer(frame: &Bytes) -> BytesMut {
    BytesMut::from(&frame[..])
}

/// Benchmarks `encode` (into a reused buffer) and `decode` (the codec splitting the frame off a
/// read buffer, then `parse` of its body) of one frame of `bytes`, under `name` in `group`.
fn encode_and_decode<T>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    bytes: &Bytes,
    encode: impl Fn(&mut BytesMut),
    parse: impl Fn(Bytes) -> T,
) {
    let mut buffer = BytesMut::with_capacity(bytes.len());
    group.bench_function(BenchmarkId::new("encode", name), |b| {
        b.iter(|| {
            buffer.clear();
            encode(&mut buffer);
            buffer.len()
        })
    });
    let mut codec = FrameCodec::default();
    group.bench_function(BenchmarkId::new("decode", name), |b| {
        b.iter_batched(
            || read_buffer(bytes),
            |mut buffer| parse(codec.decode(&mut buffer).expect("frame").expect("whole")),
            BatchSize::SmallInput,
        )
    });
}

/// Produce requests: the plain encoding (the batch copied into the write buffer; the client
/// itself sends the batch with a vectored write, without that copy) and decoding on the server
/// (split off the read buffer, header parsed, batch kept zero-copy).
fn produce_request(c: &mut Criterion) {
    let mut group = c.benchmark_group("produce_request");
    for records in [1usize, 100, 1000] {
        let frame = produce_frame(records);
        let bytes = encoded(|buffer| frame.encode(buffer).expect("encode"));
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        encode_and_decode(
            &mut group,
            &format!("{records}x1KiB"),
            &bytes,
            |buffer| black_box(&frame).encode(buffer).expect("encode"),
            |body| RequestFrame::decode(body).expect("request"),
        );
    }
    group.finish();
}

/// Fetch responses: the plain encoding (the server writes stored batches with vectored writes
/// instead), decoding on the client, and decoding plus splitting the batches into records with
/// their CRC checked, which is what `Client::fetch` does.
fn fetch_response(c: &mut Criterion) {
    let mut group = c.benchmark_group("fetch_response");
    for records in [1usize, 100, 1000] {
        let frame = fetch_frame(records);
        let bytes = encoded(|buffer| frame.encode(buffer).expect("encode"));
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        let name = format!("{records}x1KiB");
        encode_and_decode(
            &mut group,
            &name,
            &bytes,
            |buffer| black_box(&frame).encode(buffer).expect("encode"),
            |body| ResponseFrame::decode(ApiKey::Fetch, body).expect("response"),
        );
        let mut codec = FrameCodec::default();
        group.bench_function(BenchmarkId::new("decode_records", &name), |b| {
            b.iter_batched(
                || read_buffer(&bytes),
                |mut buffer| {
                    let body = codec.decode(&mut buffer).expect("frame").expect("whole");
                    let response = ResponseFrame::decode(ApiKey::Fetch, body).expect("response");
                    let Ok(Response::Fetch { batches, .. }) = response.result else {
                        panic!("not a fetch response");
                    };
                    let mut records = 0;
                    for batch in batches {
                        records += decode_batches(batch).expect("valid batches").len();
                    }
                    records
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = produce_request, fetch_response
}
criterion_main!(benches);
