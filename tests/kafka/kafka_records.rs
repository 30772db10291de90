//! The Kafka record batch conversion (`fencelog::server::kafka::batches`): round trips through the
//! kafka-protocol crate's encoder and decoder with every compression, the timestamp and header
//! rules, and hostile inputs (lying counts and lengths, cut batches, decompression bombs, bad
//! CRCs) that must fail fast with an error and without an allocation sized by the wire.
//!
//! A counting global allocator records the largest single allocation made on each thread, so a
//! test can prove that a lying count never became an allocation.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use fencelog::batch::{
    decode_batches, stamp_base_offset, validate, BatchBuilder, BatchError, ControlMarker,
    ProducerStamp, Record as NativeRecord, KAFKA_ENVELOPE_BYTES, MAX_INFLATED_RECORDS_BYTES,
};
use fencelog::compression::CompressionError;
use fencelog::server::kafka::batches::{
    to_kafka_batches, to_native_batches, KafkaCompression, RecordLimits, RecordsError,
};
use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record as KafkaRecord, RecordBatchDecoder, RecordBatchEncoder,
    RecordEncodeOptions, TimestampType,
};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// The allocation probe.

thread_local! {
    static LARGEST_ALLOCATION: Cell<usize> = const { Cell::new(0) };
}

struct ProbeAllocator;

// SAFETY: every call is forwarded unchanged to the system allocator; the probe only records the
// requested size in a thread-local `Cell` (const-initialised, so touching it never allocates).
unsafe impl GlobalAlloc for ProbeAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded with the caller's layout, which meets `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: `pointer` was allocated by `System` with this layout (every allocation is).
        unsafe { System.dealloc(pointer, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: `pointer` and `layout` come from `System`; the caller meets `realloc`'s rules.
        unsafe { System.realloc(pointer, layout, new_size) }
    }
}

fn note(size: usize) {
    // `try_with`: the thread-local may already be gone while a thread exits.
    let _ignored_during_thread_exit =
        LARGEST_ALLOCATION.try_with(|largest| largest.set(largest.get().max(size)));
}

#[global_allocator]
static ALLOCATOR: ProbeAllocator = ProbeAllocator;

/// Runs `work` and returns its result with the largest single allocation it made on this thread.
fn largest_allocation<T>(work: impl FnOnce() -> T) -> (T, usize) {
    LARGEST_ALLOCATION.with(|largest| largest.set(0));
    let result = work();
    (result, LARGEST_ALLOCATION.with(Cell::get))
}

// ---------------------------------------------------------------------------------------------
// Building Kafka batches.

const ALL_COMPRESSIONS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// What a test writes into a record, and expects back.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sample {
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

fn sample(timestamp: i64, key: Option<&[u8]>, value: Option<&[u8]>) -> Sample {
    Sample {
        timestamp,
        key: key.map(<[u8]>::to_vec),
        value: value.map(<[u8]>::to_vec),
        headers: Vec::new(),
    }
}

/// Producer identity for the crate's encoder: `(producer_id, producer_epoch, base_sequence)`.
type Producer = Option<(i64, i16, i32)>;

/// One Kafka batch of `samples` from the crate's encoder.
fn kafka_batch(samples: &[Sample], compression: Compression, producer: Producer) -> Bytes {
    let (producer_id, producer_epoch, base_sequence) = producer.unwrap_or((-1, -1, -1));
    let records: Vec<KafkaRecord> = samples
        .iter()
        .enumerate()
        .map(|(index, sample)| KafkaRecord {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: index as i64,
            // The crate's encoder starts a new batch where `offset - sequence` changes; without
            // a producer this gives baseSequence -1 and keeps the records in one batch.
            sequence: if producer.is_some() {
                base_sequence + index as i32
            } else {
                index as i32 - 1
            },
            timestamp: sample.timestamp,
            key: sample.key.clone().map(Bytes::from),
            value: sample.value.clone().map(Bytes::from),
            headers: sample
                .headers
                .iter()
                .map(|(name, value)| {
                    (
                        StrBytes::from_string(name.clone()),
                        value.clone().map(Bytes::from),
                    )
                })
                .collect::<IndexMap<_, _>>(),
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
    .expect("the crate encodes");
    out.freeze()
}

/// Records as the crate's decoder reads them from Kafka batches: `(offset, sample)`.
fn decode_kafka(batches: &Bytes) -> Vec<(i64, Sample, KafkaRecord)> {
    let mut buffer = batches.clone();
    let sets = RecordBatchDecoder::decode_all(&mut buffer).expect("the crate decodes");
    sets.into_iter()
        .flat_map(|set| set.records)
        .map(|record| {
            let sample = Sample {
                timestamp: record.timestamp,
                key: record.key.as_ref().map(|bytes| bytes.to_vec()),
                value: record.value.as_ref().map(|bytes| bytes.to_vec()),
                headers: record
                    .headers
                    .iter()
                    .map(|(name, value)| {
                        (name.to_string(), value.as_ref().map(|bytes| bytes.to_vec()))
                    })
                    .collect(),
            };
            (record.offset, sample, record)
        })
        .collect()
}

/// A native record as a `Sample`.
fn native_sample(record: &NativeRecord) -> Sample {
    Sample {
        timestamp: record.timestamp,
        key: record.key.as_ref().map(|bytes| bytes.to_vec()),
        value: record.value.as_ref().map(|bytes| bytes.to_vec()),
        headers: record
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), value.as_ref().map(|bytes| bytes.to_vec())))
            .collect(),
    }
}

/// Concatenates converted native batches, stamping base offsets from `base_offset` on.
fn stamped(
    batches: &[fencelog::server::kafka::batches::ConvertedBatch],
    mut base_offset: u64,
) -> Bytes {
    let mut out = BytesMut::new();
    for batch in batches {
        let mut bytes = batch.bytes.to_bytes().to_vec();
        stamp_base_offset(&mut bytes, base_offset);
        base_offset += u64::from(batch.record_count);
        out.extend_from_slice(&bytes);
    }
    out.freeze()
}

/// Zigzag varint, for batches built by hand.
fn put_varint(out: &mut Vec<u8>, value: i64) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    while raw >= 0x80 {
        out.push(raw as u8 | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

/// One record's bytes in the Kafka format, built by hand so a test can write what the crate's
/// encoder never would (negative deltas, wrong offset deltas, lying lengths).
struct RawRecord<'a> {
    timestamp_delta: i64,
    offset_delta: i64,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    /// `(key, value)`; the key is raw bytes so it can be invalid UTF-8.
    headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

fn raw_record(timestamp_delta: i64, offset_delta: i64, value: &[u8]) -> RawRecord<'_> {
    RawRecord {
        timestamp_delta,
        offset_delta,
        key: None,
        value: Some(value),
        headers: Vec::new(),
    }
}

fn encode_raw_record(record: &RawRecord<'_>) -> Vec<u8> {
    let mut body = vec![0u8];
    put_varint(&mut body, record.timestamp_delta);
    put_varint(&mut body, record.offset_delta);
    for field in [record.key, record.value] {
        match field {
            None => put_varint(&mut body, -1),
            Some(bytes) => {
                put_varint(&mut body, bytes.len() as i64);
                body.extend_from_slice(bytes);
            }
        }
    }
    put_varint(&mut body, record.headers.len() as i64);
    for (name, value) in &record.headers {
        put_varint(&mut body, name.len() as i64);
        body.extend_from_slice(name);
        match value {
            None => put_varint(&mut body, -1),
            Some(bytes) => {
                put_varint(&mut body, bytes.len() as i64);
                body.extend_from_slice(bytes);
            }
        }
    }
    let mut out = Vec::new();
    put_varint(&mut out, body.len() as i64);
    out.extend_from_slice(&body);
    out
}

/// The header fields of a hand-built batch.
#[derive(Clone)]
struct RawHeader {
    attributes: i16,
    last_offset_delta: i32,
    base_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    count: i32,
}

impl RawHeader {
    fn plain(count: i32) -> Self {
        Self {
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 1_000,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            count,
        }
    }
}

/// A whole Kafka batch around a records section (already compressed when the attributes say
/// so), with a correct length and CRC32C.
fn raw_batch(header: &RawHeader, records_section: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.put_i64(0);
    out.put_i32(0);
    out.put_i32(-1);
    out.put_u8(2);
    out.put_u32(0);
    out.put_i16(header.attributes);
    out.put_i32(header.last_offset_delta);
    out.put_i64(header.base_timestamp);
    out.put_i64(header.base_timestamp);
    out.put_i64(header.producer_id);
    out.put_i16(header.producer_epoch);
    out.put_i32(header.base_sequence);
    out.put_i32(header.count);
    out.extend_from_slice(records_section);
    fix_length_and_crc(&mut out);
    out
}

fn fix_length_and_crc(batch: &mut [u8]) {
    let length = (batch.len() - 12) as i32;
    batch[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

fn raw_records(records: &[RawRecord<'_>]) -> Vec<u8> {
    records.iter().flat_map(encode_raw_record).collect()
}

/// Compresses `plain` the way Kafka clients do (xerial snappy, LZ4 frames, gzip, zstd).
fn compress(compression: Compression, plain: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    let fill = |buffer: &mut BytesMut| {
        buffer.extend_from_slice(plain);
        Ok(())
    };
    match compression {
        Compression::None => out.extend_from_slice(plain),
        Compression::Gzip => Gzip::compress(&mut out, fill).unwrap(),
        Compression::Snappy => Snappy::compress(&mut out, fill).unwrap(),
        Compression::Lz4 => Lz4::compress(&mut out, fill).unwrap(),
        Compression::Zstd => Zstd::compress(&mut out, fill).unwrap(),
    }
    out.to_vec()
}

fn convert(
    records: &[u8],
) -> Result<Vec<fencelog::server::kafka::batches::ConvertedBatch>, RecordsError> {
    to_native_batches(
        &Bytes::copy_from_slice(records),
        7,
        &RecordLimits::default(),
    )
}

// ---------------------------------------------------------------------------------------------
// Round trips.

/// Kafka batches from the crate's encoder, with every compression, become valid native batches
/// with the same records; served back as Kafka batches, the crate's decoder reads the same
/// records at the stamped offsets, with the producer's identity.
#[test]
fn kafka_batches_of_every_compression_round_trip() {
    let samples = vec![
        sample(1_700_000_000_000, Some(b"k1"), Some(b"v1")),
        sample(1_700_000_000_005, None, Some(b"")),
        Sample {
            headers: vec![
                ("trace".into(), Some(b"abc".to_vec())),
                ("empty".into(), None),
            ],
            ..sample(1_700_000_000_003, Some(b""), None)
        },
    ];
    for compression in ALL_COMPRESSIONS {
        for producer in [None, Some((42, 3, 100))] {
            let kafka = kafka_batch(&samples, compression, producer);
            let converted = convert(&kafka).unwrap();
            assert_eq!(converted.len(), 1);
            let batch = &converted[0];
            assert_eq!(batch.record_count, 3);
            assert_eq!(batch.kafka_bytes, kafka.len());
            assert!(!batch.transactional);
            assert_eq!(
                batch.compression,
                KafkaCompression::from_attribute(compression as u8).unwrap()
            );
            assert_eq!(
                batch.producer,
                producer.map(
                    |(producer_id, producer_epoch, base_sequence)| ProducerStamp {
                        producer_id,
                        producer_epoch,
                        base_sequence
                    }
                )
            );
            let header = validate(&batch.bytes.to_bytes(), usize::MAX).unwrap();
            assert_eq!(
                header.epoch, 7,
                "the native header carries the listener's epoch"
            );
            // Kept as it arrived (magic 2), compressed or not: the producer's bytes from the
            // magic on, behind the native header, whose attributes repeat the codec.
            assert_eq!(header.magic, 2);
            assert_eq!(header.codec_bits(), compression as u8);
            let stored = batch.bytes.to_bytes();
            assert_eq!(&stored[KAFKA_ENVELOPE_BYTES + 16..], &kafka[16..]);
            assert_eq!(
                ProducerStamp::parse(&batch.bytes.to_bytes()),
                batch.producer
            );

            let native = stamped(&converted, 500);
            let stored: Vec<Sample> = decode_batches(native.clone())
                .unwrap()
                .iter()
                .map(native_sample)
                .collect();
            let expected: Vec<Sample> = samples.to_vec();
            assert_eq!(stored, expected, "{compression:?}");

            let mut served = BytesMut::new();
            to_kafka_batches(&[native], &mut served).unwrap();
            let decoded = decode_kafka(&served.freeze());
            let offsets: Vec<i64> = decoded.iter().map(|(offset, _, _)| *offset).collect();
            assert_eq!(offsets, [500, 501, 502]);
            let read: Vec<Sample> = decoded
                .iter()
                .map(|(_, sample, _)| sample.clone())
                .collect();
            assert_eq!(read, expected, "{compression:?}");
            let first = &decoded[0].2;
            match producer {
                Some((id, epoch, sequence)) => {
                    assert_eq!((first.producer_id, first.producer_epoch), (id, epoch));
                    assert_eq!(first.sequence, sequence);
                    assert_eq!(decoded[2].2.sequence, sequence + 2);
                }
                None => assert_eq!((first.producer_id, first.producer_epoch), (-1, -1)),
            }
        }
    }
}

/// Native batches (magic 1 and 3, several in one buffer and in several buffers) served as Kafka
/// batches and converted back give the same records, epochs aside.
#[test]
fn native_batches_round_trip_through_kafka() {
    let mut first = BatchBuilder::new(4);
    first.push(10_000, Some(b"a"), Some(b"one"));
    first.push_with_headers(10_002, None, None, &[("h", b"x"), ("h", b"y")]);
    let mut second = BatchBuilder::with_producer(4, 9, 1);
    second.push(10_001, Some(b"b"), Some(&[0u8; 2000]));
    let mut third = BatchBuilder::new(5);
    third.push(9_000, None, Some(b"three"));
    let mut buffer = BytesMut::new();
    for (builder, base_offset, sequence) in [(first, 0, 0), (second, 2, 55)] {
        let mut bytes = builder.finish_with_sequence(sequence).to_vec();
        stamp_base_offset(&mut bytes, base_offset);
        buffer.extend_from_slice(&bytes);
    }
    let mut third = third.finish().to_vec();
    stamp_base_offset(&mut third, 3);
    let native = [buffer.freeze(), Bytes::from(third)];

    let mut served = BytesMut::new();
    served.extend_from_slice(b"earlier bytes stay");
    to_kafka_batches(&native, &mut served).unwrap();
    assert!(served.starts_with(b"earlier bytes stay"));
    let served = served.split_off(18).freeze();

    let converted = convert(&served).unwrap();
    assert_eq!(converted.len(), 3);
    assert_eq!(
        converted[1].producer,
        Some(ProducerStamp {
            producer_id: 9,
            producer_epoch: 1,
            base_sequence: 55
        })
    );
    let again = decode_batches(stamped(&converted, 0)).unwrap();
    let original: Vec<NativeRecord> = native
        .iter()
        .flat_map(|bytes| decode_batches(bytes.clone()).unwrap())
        .collect();
    assert_eq!(again.len(), original.len());
    for (again, original) in again.iter().zip(&original) {
        assert_eq!(again.offset, original.offset);
        assert_eq!(again.epoch, 7, "converted under the epoch given");
        assert_eq!(
            (&again.timestamp, &again.key, &again.value, &again.headers),
            (
                &original.timestamp,
                &original.key,
                &original.value,
                &original.headers
            )
        );
    }
}

/// A record earlier than baseTimestamp keeps its timestamp: the native batch starts at the
/// earliest record; a record more than `u32::MAX` ms after the earliest is clamped.
#[test]
fn out_of_order_timestamps_are_kept_and_far_ones_clamped() {
    let records = raw_records(&[
        raw_record(0, 0, b"a"),
        raw_record(-500, 1, b"b"),
        raw_record(10, 2, b"c"),
    ]);
    let converted = convert(&raw_batch(&RawHeader::plain(3), &records)).unwrap();
    assert_eq!(
        (converted[0].first_timestamp, converted[0].max_timestamp),
        (500, 1_010)
    );
    let timestamps: Vec<i64> = decode_batches(converted[0].bytes.to_bytes())
        .unwrap()
        .iter()
        .map(|record| record.timestamp)
        .collect();
    assert_eq!(timestamps, [1_000, 500, 1_010]);

    let far = i64::from(u32::MAX) + 1_000;
    let records = raw_records(&[raw_record(0, 0, b"a"), raw_record(far, 1, b"b")]);
    let converted = convert(&raw_batch(&RawHeader::plain(2), &records)).unwrap();
    let timestamps: Vec<i64> = decode_batches(converted[0].bytes.to_bytes())
        .unwrap()
        .iter()
        .map(|record| record.timestamp)
        .collect();
    assert_eq!(timestamps, [1_000, 1_000 + i64::from(u32::MAX)]);
}

/// A null header value is stored null and an empty one empty, both ways (native decode and back
/// to Kafka); a header key that is not UTF-8 is refused.
#[test]
fn null_header_values_stay_null_and_non_utf8_keys_are_refused() {
    let record = RawRecord {
        headers: vec![(&b"k"[..], None), (&b"e"[..], Some(&b""[..]))],
        ..raw_record(0, 0, b"v")
    };
    let converted = convert(&raw_batch(&RawHeader::plain(1), &raw_records(&[record]))).unwrap();
    let stored = decode_batches(converted[0].bytes.to_bytes()).unwrap();
    assert_eq!(
        stored[0].headers,
        [
            ("k".to_string(), None),
            ("e".to_string(), Some(Bytes::new()))
        ]
    );
    let mut served = BytesMut::new();
    to_kafka_batches(&[stamped(&converted, 0)], &mut served).unwrap();
    let kafka = decode_kafka(&served.freeze());
    assert_eq!(
        kafka[0].1.headers,
        [("k".to_string(), None), ("e".to_string(), Some(Vec::new()))]
    );

    let record = RawRecord {
        headers: vec![(&[0xffu8, 0xfe][..], Some(&b"v"[..]))],
        ..raw_record(0, 0, b"v")
    };
    let error = convert(&raw_batch(&RawHeader::plain(1), &raw_records(&[record]))).unwrap_err();
    assert_eq!(error, RecordsError::HeaderKeyNotUtf8 { index: 0 });
    assert_eq!(error.kafka_error_code(), 87);
}

/// Several Kafka batches in one records field become as many native batches, in order.
#[test]
fn several_kafka_batches_become_several_native_batches() {
    let mut field = kafka_batch(&[sample(1, None, Some(b"a"))], Compression::None, None).to_vec();
    field.extend_from_slice(&kafka_batch(
        &[sample(2, None, Some(b"b")), sample(3, None, Some(b"c"))],
        Compression::Lz4,
        None,
    ));
    let converted = convert(&field).unwrap();
    let counts: Vec<u32> = converted.iter().map(|batch| batch.record_count).collect();
    assert_eq!(counts, [1, 2]);
}

/// A transactional Kafka batch keeps its bit through the native log and back; a stored marker
/// (control batch) is served as a Kafka control batch whose one record Kafka's decoder reads
/// as a commit or abort marker.
#[test]
fn transactional_bits_and_markers_round_trip_through_kafka() {
    let records = raw_records(&[raw_record(0, 0, b"v")]);
    let header = RawHeader {
        attributes: 1 << 4,
        producer_id: 9,
        producer_epoch: 2,
        base_sequence: 0,
        ..RawHeader::plain(1)
    };
    let converted = convert(&raw_batch(&header, &records)).unwrap();
    assert!(converted[0].transactional);
    let native = validate(&converted[0].bytes.to_bytes(), 1 << 20).unwrap();
    assert!(native.is_transactional() && !native.is_control());
    let marker = fencelog::batch::control_batch(7, 9, 2, ControlMarker::Abort, 5, 1_000);
    let mut out = BytesMut::new();
    to_kafka_batches(
        &[stamped(&converted, 10), stamped_bytes(&marker, 11)],
        &mut out,
    )
    .unwrap();
    let mut buffer = out.freeze();
    let sets = RecordBatchDecoder::decode_all(&mut buffer).expect("the crate decodes");
    let records: Vec<&KafkaRecord> = sets.iter().flat_map(|set| &set.records).collect();
    assert_eq!(records.len(), 2);
    assert!(records[0].transactional && !records[0].control);
    assert_eq!(records[0].producer_id, 9);
    assert!(records[1].transactional && records[1].control);
    assert_eq!((records[1].offset, records[1].producer_epoch), (11, 2));
    // Kafka's control record: key version 0, type 0 (abort); value version 0, coordinator
    // epoch 5.
    assert_eq!(records[1].key.as_deref(), Some(&[0u8, 0, 0, 0][..]));
    assert_eq!(records[1].value.as_deref(), Some(&[0u8, 0, 0, 0, 0, 5][..]));
}

fn stamped_bytes(batch: &Bytes, base_offset: u64) -> Bytes {
    let mut bytes = batch.to_vec();
    stamp_base_offset(&mut bytes, base_offset);
    Bytes::from(bytes)
}

// ---------------------------------------------------------------------------------------------
// Refusals.

/// Control batches (from a client), transactional batches without a producer id, legacy
/// message sets, unknown magics, codecs and
/// attribute bits are each refused with their own error.
#[test]
fn unsupported_batches_are_refused_with_typed_errors() {
    let records = raw_records(&[raw_record(0, 0, b"v")]);
    let with_attributes = |attributes: i16| {
        let header = RawHeader {
            attributes,
            ..RawHeader::plain(1)
        };
        convert(&raw_batch(&header, &records)).unwrap_err()
    };
    assert_eq!(with_attributes(1 << 4), RecordsError::Transactional);
    assert_eq!(
        with_attributes((1 << 5) | (1 << 4)),
        RecordsError::ControlBatch
    );
    assert_eq!(
        with_attributes(1 << 6),
        RecordsError::UnsupportedAttributes { attributes: 1 << 6 }
    );
    assert_eq!(
        with_attributes(5),
        RecordsError::UnknownCompression { codec: 5 }
    );
    assert_eq!(with_attributes(5).kafka_error_code(), 76);

    let valid = raw_batch(&RawHeader::plain(1), &records);
    for magic in [0u8, 1] {
        let mut legacy = valid.clone();
        legacy[16] = magic;
        let error = convert(&legacy).unwrap_err();
        assert_eq!(
            error,
            RecordsError::LegacyMessageFormat { position: 0, magic }
        );
        assert_eq!(error.kafka_error_code(), 43);
    }
    let mut unknown = valid.clone();
    unknown[16] = 3;
    assert_eq!(
        convert(&unknown).unwrap_err(),
        RecordsError::UnsupportedMagic {
            position: 0,
            magic: 3
        }
    );
    assert_eq!(convert(&[]).unwrap_err(), RecordsError::Empty);
}

/// A flipped bit anywhere in the CRC-covered range is a CRC mismatch: found by the conversion
/// (a batch the flip made one that needs rewriting), or, for a batch kept as it arrived (whose
/// CRC the partition checks when it appends it, so each byte is read once), by the batch
/// validation every append runs.
#[test]
fn any_flipped_bit_after_the_crc_is_a_crc_mismatch() {
    for compression in [Compression::None, Compression::Gzip] {
        let kafka = kafka_batch(
            &[sample(5, Some(b"key"), Some(b"value"))],
            compression,
            None,
        );
        for position in 21..kafka.len() {
            let mut copy = kafka.to_vec();
            copy[position] ^= 0x04;
            match convert(&copy) {
                Err(error) => {
                    assert!(
                        matches!(error, RecordsError::CrcMismatch { .. }),
                        "flip at {position}: {error}"
                    );
                    assert_eq!(error.kafka_error_code(), 2);
                }
                Ok(kept) => {
                    assert!(
                        matches!(
                            validate(&kept[0].bytes.to_bytes(), usize::MAX),
                            Err(BatchError::CrcMismatch { .. })
                        ),
                        "flip at {position}"
                    );
                }
            }
        }
    }
}

/// Counts and deltas that do not match the records are refused, even under a correct CRC.
#[test]
fn inconsistent_counts_and_offset_deltas_are_refused() {
    let two = raw_records(&[raw_record(0, 0, b"a"), raw_record(0, 1, b"b")]);
    let header = RawHeader {
        last_offset_delta: 5,
        ..RawHeader::plain(2)
    };
    assert!(matches!(
        convert(&raw_batch(&header, &two)).unwrap_err(),
        RecordsError::LastOffsetDeltaMismatch { .. }
    ));
    assert_eq!(
        convert(&raw_batch(&RawHeader::plain(0), &[])).unwrap_err(),
        RecordsError::BadRecordCount { count: 0 }
    );
    let skipping = raw_records(&[raw_record(0, 0, b"a"), raw_record(0, 2, b"b")]);
    assert_eq!(
        convert(&raw_batch(&RawHeader::plain(2), &skipping)).unwrap_err(),
        RecordsError::OffsetDeltaMismatch {
            index: 1,
            offset_delta: 2
        }
    );
    // One record more or less than the count.
    assert!(matches!(
        convert(&raw_batch(&RawHeader::plain(3), &two)).unwrap_err(),
        RecordsError::MalformedRecord { index: 2, .. }
    ));
    assert!(matches!(
        convert(&raw_batch(&RawHeader::plain(1), &two)).unwrap_err(),
        RecordsError::MalformedRecord { index: 1, .. }
    ));
    let header = RawHeader {
        producer_id: 5,
        producer_epoch: 0,
        base_sequence: -3,
        ..RawHeader::plain(2)
    };
    assert!(matches!(
        convert(&raw_batch(&header, &two)).unwrap_err(),
        RecordsError::BadProducerFields { .. }
    ));
}

/// Huge declared counts and lengths fail at once, without an allocation of their size.
#[test]
fn lying_counts_and_lengths_fail_fast_without_allocating() {
    let one = raw_records(&[raw_record(0, 0, b"v")]);
    let started = Instant::now();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            raw_batch(&RawHeader::plain(i32::MAX), &one),
            "count i32::MAX",
        ),
        (
            raw_batch(&RawHeader::plain(1 << 20), &one),
            "count at the limit",
        ),
        (
            {
                let mut batch = raw_batch(&RawHeader::plain(1), &one);
                batch[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
                batch
            },
            "batchLength i32::MAX",
        ),
        (
            {
                let mut batch = raw_batch(&RawHeader::plain(1), &one);
                batch[8..12].copy_from_slice(&(-5i32).to_be_bytes());
                batch
            },
            "negative batchLength",
        ),
        (
            {
                let mut records = Vec::new();
                put_varint(&mut records, i64::from(i32::MAX));
                records.extend_from_slice(&[0; 20]);
                raw_batch(&RawHeader::plain(1), &records)
            },
            "record length i32::MAX",
        ),
        (
            {
                let mut body = vec![0u8, 0, 0];
                put_varint(&mut body, i64::from(i32::MAX)); // key length
                let mut records = Vec::new();
                put_varint(&mut records, body.len() as i64);
                records.extend_from_slice(&body);
                raw_batch(&RawHeader::plain(1), &records)
            },
            "key length i32::MAX",
        ),
        (
            {
                let mut body = vec![0u8, 0, 0, 1, 1];
                put_varint(&mut body, i64::from(i32::MAX)); // header count
                let mut records = Vec::new();
                put_varint(&mut records, body.len() as i64);
                records.extend_from_slice(&body);
                raw_batch(&RawHeader::plain(1), &records)
            },
            "header count i32::MAX",
        ),
    ];
    for (input, case) in cases {
        let (result, largest) = largest_allocation(|| convert(&input));
        assert!(result.is_err(), "{case} was accepted");
        assert!(
            largest < 64 * 1024,
            "{case}: allocated {largest} bytes for a {}-byte input",
            input.len()
        );
    }
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// Every prefix of a field of two batches is refused, never a panic, except the one that ends
/// exactly after the first batch.
#[test]
fn every_truncation_is_refused() {
    let mut field = kafka_batch(
        &[sample(1, Some(b"k"), Some(b"v")), sample(2, None, None)],
        Compression::None,
        Some((1, 0, 0)),
    )
    .to_vec();
    let first_len = field.len();
    let second = kafka_batch(&[sample(3, None, Some(b"x"))], Compression::Zstd, None);
    field.extend_from_slice(&second);
    for cut in (1..field.len()).filter(|cut| *cut != first_len) {
        assert!(
            convert(&field[..cut]).is_err(),
            "a cut at {cut} was accepted"
        );
    }
    assert_eq!(
        convert(&field[..first_len]).unwrap().len(),
        1,
        "the first batch alone"
    );
    assert_eq!(convert(&field).unwrap().len(), 2);
}

/// Every codec but none.
const COMPRESSED: [Compression; 4] = [
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// Kafka's LogAppendTime bit: a batch that carries it is converted, not kept.
const LOG_APPEND_TIME: i16 = 1 << 3;

/// `kafka` with the LogAppendTime bit set (its CRC fixed): a batch the listener converts.
fn converted_kind(kafka: &[u8]) -> Vec<u8> {
    let mut batch = kafka.to_vec();
    let attributes = i16::from_be_bytes([batch[21], batch[22]]) | LOG_APPEND_TIME;
    batch[21..23].copy_from_slice(&attributes.to_be_bytes());
    fix_length_and_crc(&mut batch);
    batch
}

/// A decompression bomb of every codec stops at the limit with an error, and memory stays
/// within a small multiple of the limit, not the bomb's size: in a conversion (a LogAppendTime
/// batch) at the listener's limit, and in a batch kept compressed at the validation every
/// append runs.
#[test]
fn decompression_bombs_stop_at_the_limit() {
    let limits = RecordLimits {
        max_decompressed_bytes: 1 << 20,
        ..RecordLimits::default()
    };
    // 4 MiB of zeros: compresses to a few KiB with every codec.
    let zeros = vec![0u8; 4 << 20];
    for compression in COMPRESSED {
        let header = RawHeader {
            attributes: compression as i16 | LOG_APPEND_TIME,
            ..RawHeader::plain(1)
        };
        let bomb = raw_batch(&header, &compress(compression, &zeros));
        let started = Instant::now();
        let (result, largest) =
            largest_allocation(|| to_native_batches(&Bytes::copy_from_slice(&bomb), 1, &limits));
        assert_eq!(
            result.unwrap_err(),
            RecordsError::DecompressedTooLarge { limit: 1 << 20 },
            "{compression:?}"
        );
        assert!(
            largest <= 4 << 20,
            "{compression:?}: a {}-byte bomb allocated {largest} bytes",
            bomb.len()
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{compression:?}"
        );
    }

    // Kept compressed: the listener takes the batch as it is, and the validation inflates it
    // within the library's bound.
    let zeros = vec![0u8; MAX_INFLATED_RECORDS_BYTES + (1 << 20)];
    for compression in COMPRESSED {
        let header = RawHeader {
            attributes: compression as i16,
            ..RawHeader::plain(1)
        };
        let bomb = raw_batch(&header, &compress(compression, &zeros));
        let kept = convert(&bomb).expect("kept as sent");
        let stored = kept[0].bytes.to_bytes();
        let (result, largest) = largest_allocation(|| validate(&stored, usize::MAX));
        assert_eq!(
            result.unwrap_err(),
            BatchError::Compression(CompressionError::TooLarge {
                limit: MAX_INFLATED_RECORDS_BYTES
            }),
            "{compression:?}"
        );
        assert!(
            largest <= 2 * MAX_INFLATED_RECORDS_BYTES + (1 << 20),
            "{compression:?}: a {}-byte bomb allocated {largest} bytes",
            bomb.len()
        );
    }
}

/// A raw snappy block that declares 4 GiB is refused before anything is allocated for it.
#[test]
fn snappy_declared_length_is_checked_before_allocating() {
    let mut block = Vec::new();
    // Snappy's preamble: the uncompressed length as an unsigned varint (here 2^32 - 1).
    let mut length = u64::from(u32::MAX);
    while length >= 0x80 {
        block.push(length as u8 | 0x80);
        length >>= 7;
    }
    block.push(length as u8);
    block.extend_from_slice(&[0; 16]);
    let converted = RawHeader {
        attributes: Compression::Snappy as i16 | LOG_APPEND_TIME,
        ..RawHeader::plain(1)
    };
    let (result, largest) = largest_allocation(|| convert(&raw_batch(&converted, &block)));
    assert!(matches!(
        result.unwrap_err(),
        RecordsError::DecompressedTooLarge { .. } | RecordsError::Decompression { .. }
    ));
    assert!(largest < 64 * 1024, "allocated {largest}");
    let kept = RawHeader {
        attributes: Compression::Snappy as i16,
        ..RawHeader::plain(1)
    };
    let stored = convert(&raw_batch(&kept, &block)).unwrap()[0]
        .bytes
        .to_bytes();
    let (result, largest) = largest_allocation(|| validate(&stored, usize::MAX));
    assert!(matches!(
        result.unwrap_err(),
        BatchError::Compression(
            CompressionError::TooLarge { .. } | CompressionError::Failed { .. }
        )
    ));
    assert!(largest < 64 * 1024, "allocated {largest}");
}

/// The decompression limit is shared by the batches of one field: many small bombs cannot add
/// up past it.
#[test]
fn decompression_budget_is_shared_by_a_fields_batches() {
    let limits = RecordLimits {
        max_decompressed_bytes: 3000,
        ..RecordLimits::default()
    };
    let batch = converted_kind(&kafka_batch(
        &[sample(1, None, Some(&[7u8; 1000]))],
        Compression::Gzip,
        None,
    ));
    let two: Vec<u8> = [batch.as_slice(), batch.as_slice()].concat();
    assert_eq!(
        to_native_batches(&Bytes::copy_from_slice(&two), 1, &limits)
            .unwrap()
            .len(),
        2
    );
    let four: Vec<u8> = [batch.as_slice(); 4].concat();
    assert!(matches!(
        to_native_batches(&Bytes::copy_from_slice(&four), 1, &limits).unwrap_err(),
        RecordsError::DecompressedTooLarge { .. }
    ));
}

/// A batch that would convert into more than `max_batch_bytes` is refused as too large.
#[test]
fn converted_batches_respect_the_maximum_batch_size() {
    let limits = RecordLimits {
        max_batch_bytes: 4096,
        ..RecordLimits::default()
    };
    let samples: Vec<Sample> = (0..10)
        .map(|index| sample(index, None, Some(&[1u8; 1000])))
        .collect();
    let kafka = converted_kind(&kafka_batch(&samples, Compression::Lz4, None));
    let error =
        to_native_batches(&Bytes::copy_from_slice(&kafka), 1, &limits).map(|batches| batches.len());
    let error = error.unwrap_err();
    assert_eq!(error, RecordsError::BatchTooLarge { max: 4096 });
    assert_eq!(
        error.kafka_error_code(),
        10,
        "MESSAGE_TOO_LARGE lets the producer split"
    );
}

/// Damaged stored batches are refused on the fetch side, never a panic, and `out` is left as
/// it was.
#[test]
fn damaged_stored_batches_are_refused_when_served() {
    let mut builder = BatchBuilder::new(1);
    builder.push(5, Some(b"key"), Some(b"value"));
    builder.push_with_headers(6, None, Some(b"v"), &[("h", b"x")]);
    let batch = builder.finish();
    for cut in 1..batch.len() {
        let mut out = BytesMut::from(&b"kept"[..]);
        let result = to_kafka_batches(&[batch.slice(..cut)], &mut out);
        assert!(result.is_err(), "a cut at {cut} was served");
        assert_eq!(&out[..], b"kept");
    }
    for position in 28..batch.len() {
        let mut copy = batch.to_vec();
        copy[position] ^= 0xff;
        let mut out = BytesMut::new();
        // A flipped byte either still parses (the CRC is the storage's job) or is refused.
        let _either_is_fine = to_kafka_batches(&[Bytes::from(copy)], &mut out);
    }
    let mut beyond = batch.to_vec();
    stamp_base_offset(&mut beyond, u64::MAX - 1);
    assert!(to_kafka_batches(&[Bytes::from(beyond)], &mut BytesMut::new()).is_err());
}

// ---------------------------------------------------------------------------------------------
// Properties.

fn any_sample() -> impl Strategy<Value = Sample> {
    let bytes = || proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64));
    (
        -1_000_000i64..1_000_000,
        bytes(),
        bytes(),
        proptest::collection::btree_map("[a-z]{0,8}", bytes(), 0..4),
    )
        .prop_map(|(offset_ms, key, value, headers)| Sample {
            timestamp: 1_700_000_000_000 + offset_ms,
            key,
            value,
            headers: headers.into_iter().collect(),
        })
}

fn any_compression() -> impl Strategy<Value = Compression> {
    proptest::sample::select(ALL_COMPRESSIONS.to_vec())
}

proptest! {
    #![proptest_config(crate::support::proptest_config(64))]

    /// Arbitrary records through Kafka (any compression) → native → Kafka read back the same,
    /// null header values as empty ones.
    #[test]
    fn arbitrary_records_round_trip(
        samples in proptest::collection::vec(any_sample(), 1..40),
        compression in any_compression(),
        producer in proptest::option::of((0i64..i64::MAX, 0i16..i16::MAX, 0i32..1_000_000)),
        base_offset in 0u64..(1 << 40),
    ) {
        let kafka = kafka_batch(&samples, compression, producer);
        let converted = convert(&kafka).unwrap();
        prop_assert_eq!(converted.len(), 1);
        let expected: Vec<Sample> = samples.to_vec();
        let native = stamped(&converted, base_offset);
        let stored: Vec<Sample> =
            decode_batches(native.clone()).unwrap().iter().map(native_sample).collect();
        prop_assert_eq!(&stored, &expected);
        let mut served = BytesMut::new();
        to_kafka_batches(&[native], &mut served).unwrap();
        let decoded = decode_kafka(&served.freeze());
        let read: Vec<Sample> = decoded.iter().map(|(_, sample, _)| sample.clone()).collect();
        prop_assert_eq!(&read, &expected);
        prop_assert_eq!(decoded[0].0, base_offset as i64);
    }

    /// Any byte flipped or cut in a valid field gives an error or valid batches, never a panic.
    #[test]
    fn damaged_fields_never_panic(
        samples in proptest::collection::vec(any_sample(), 1..8),
        compression in any_compression(),
        flip in any::<prop::sample::Index>(),
        mask in 1u8..,
        cut in any::<prop::sample::Index>(),
    ) {
        let mut kafka = kafka_batch(&samples, compression, None).to_vec();
        let at = flip.index(kafka.len());
        kafka[at] ^= mask;
        if let Ok(batches) = convert(&kafka) {
            for batch in batches {
                // A batch kept as it arrived has its CRC checked by the partition's validation.
                match validate(&batch.bytes.to_bytes(), usize::MAX) {
                    Ok(_) => {}
                    Err(BatchError::CrcMismatch { .. }) => prop_assert_eq!(batch.bytes.to_bytes()[16], 2),
                    Err(error) => prop_assert!(false, "{}", error),
                }
            }
        }
        // The same damage with a fixed CRC reaches the record parser: the conversion's, or for
        // a batch kept as it arrived (compressed ones included) the validation's, which
        // decompresses it, and the reader's.
        if kafka.len() > 21 {
            fix_length_and_crc(&mut kafka);
            if let Ok(batches) = convert(&kafka) {
                for batch in batches {
                    let stored = batch.bytes.to_bytes();
                    let _either = validate(&stored, usize::MAX);
                    let _either = decode_batches(stored);
                }
            }
        }
        let end = cut.index(kafka.len());
        let _either = convert(&kafka[..end]);
    }

    /// Arbitrary bytes are refused or converted, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _either = convert(&bytes);
        let _either = to_kafka_batches(&[Bytes::from(bytes)], &mut BytesMut::new());
    }
}
