//! The record batch: the unit that producers send, the segment stores and consumers read.
//!
//! A batch travels from the producer to the disk and back to the consumer in one format, so the
//! server validates and copies it but never re-encodes it. The layout is in
//! `docs/storage-format.md`; in short (all integers big-endian):
//!
//! | offset | size | field             | covered by CRC |
//! |-------:|-----:|-------------------|----------------|
//! | 0      | 8    | base_offset       | no (stamped by the broker) |
//! | 8      | 4    | batch_length      | no (a wrong length fails the CRC) |
//! | 12     | 4    | crc               | — |
//! | 16     | 1    | magic (= 1)       | yes |
//! | 17     | 1    | attributes (= 0 on magic 1; see below) | yes |
//! | 18     | 2    | reserved (= 0)    | yes |
//! | 20     | 8    | epoch             | yes |
//! | 28     | 4    | record_count      | yes |
//! | 32     | 8    | first_timestamp   | yes |
//! | 40     | 8    | max_timestamp     | yes |
//! | 48     | …    | records (magic 1) | yes |
//!
//! Magic 3 is magic 1 plus the producer's identity, for idempotent appends (see
//! `docs/fencing.md`): the same 48 bytes, then
//!
//! | offset | size | field             | covered by CRC |
//! |-------:|-----:|-------------------|----------------|
//! | 48     | 8    | producer_id (i64, >= 0) | yes |
//! | 56     | 2    | producer_epoch (i16, >= 0) | yes |
//! | 58     | 4    | base_sequence (i32, >= 0) | yes |
//! | 62     | 2    | reserved (= 0)    | yes |
//! | 64     | …    | records           | yes |
//!
//! Magic 2 is a Kafka record batch v2 kept as a Kafka producer sent it, behind the magic-3
//! header (see `stored_kafka`): every function here reads all three formats.
//!
//! On a magic-3 batch the attributes may carry two of Kafka's bits, the rest stay zero:
//! [`ATTRIBUTE_TRANSACTIONAL`] (the batch belongs to its producer's open transaction) and
//! [`ATTRIBUTE_CONTROL`] (with the transactional bit: a transaction marker, exactly one control
//! record, see [`control_batch`]).
//!
//! Each record: `record_length u32` (bytes after this field), `timestamp_delta u32` (ms after
//! `first_timestamp`), `key_length i32` (-1 = no key), key, `value_length i32` (-1 = no value),
//! value, `header_count u16`, then per header `name_length u16`, name (UTF-8),
//! `value_length u32` ([`NULL_HEADER_VALUE`] = a null value, as Kafka has), value.
//!
//! The parts, one job each: the header's fields read and written (`header`), the checks of a
//! whole batch (`validation`) over one walk of its records (`raw_record`), reading batches back
//! into records (`decode`), writing new ones (`builder`), transaction markers (`control`), the
//! reasons a batch is refused (`error`), and magic 2 (`stored_kafka`, `slices`).

mod builder;
mod control;
pub mod crc32c;
mod decode;
mod error;
mod header;
mod kafka_encode;
mod raw_record;
mod slices;
mod stored_kafka;
mod validation;
// Parts of it serve only the Kafka listener (its fetch encoder and its conversions).
#[cfg_attr(not(feature = "kafka"), allow(dead_code))]
pub(crate) mod varint;

pub use builder::BatchBuilder;
pub use control::{control_batch, control_record, ControlMarker, ControlRecord};
pub use decode::{
    batches_below, decode_batch, decode_batch_into, decode_batches, decode_batches_into,
};
pub use error::BatchError;
pub(crate) use header::NewHeader;
pub use header::{
    add_sequence, header_len, inner_base_offset_at, stamp_base_offset, BatchHeader, ProducerStamp,
};
use header::{be_u16, be_u32, be_u64};
pub use kafka_encode::{compress_kafka_records, compress_native, native_to_kafka};
use raw_record::RawRecord;
pub use raw_record::NULL_HEADER_VALUE;
pub use slices::{BatchParts, BatchSlices};
pub use validation::{validate, validate_slices};

pub(crate) use stored_kafka::kafka_layout;
pub use stored_kafka::{
    decode_kafka_batches_into, kafka_batch, wrap_kafka_batch, WrappedKafka, INNER_BASE_OFFSET_AT,
    KAFKA_ENVELOPE_BYTES, KAFKA_HEADER_BYTES, MAGIC_KAFKA,
};

/// Size of the batch header in bytes: of a magic-1 batch, and of the fields every batch starts
/// with (the smallest a batch can be).
pub const HEADER_BYTES: usize = 48;
/// Size of a magic-3 header: the magic-1 fields, then the producer's identity.
pub const PRODUCER_HEADER_BYTES: usize = 64;
/// The batch format without a producer identity.
pub const MAGIC: u8 = 1;
/// The batch format with a producer identity (producer id, producer epoch, base sequence).
///
/// Not 2: a Kafka record batch (v2) has its magic, 2, at the same byte (16), and magic 2 is the
/// format that holds one as it arrived ([`MAGIC_KAFKA`], see `stored_kafka`).
pub const MAGIC_WITH_PRODUCER: u8 = 3;
/// The largest sequence number; the one after it is 0 (sequences wrap, as Kafka's do).
pub const MAX_SEQUENCE: i32 = i32::MAX;
/// Upper bound on records in one batch: keeps per-batch work and offsets per batch bounded.
pub const MAX_RECORDS_PER_BATCH: u32 = 1 << 20;
/// Smallest record: length, timestamp delta, key length, value length (null key and value)
/// and header count.
pub const MIN_RECORD_BYTES: usize = 4 + 4 + 4 + 4 + 2;
/// Start of the CRC-covered range.
pub const CRC_START: usize = 16;

const BASE_OFFSET_AT: usize = 0;
const LENGTH_AT: usize = 8;
const CRC_AT: usize = 12;
const MAGIC_AT: usize = 16;
const ATTRIBUTES_AT: usize = 17;
const RESERVED_AT: usize = 18;
const EPOCH_AT: usize = 20;
const COUNT_AT: usize = 28;
const FIRST_TIMESTAMP_AT: usize = 32;
const MAX_TIMESTAMP_AT: usize = 40;
const PRODUCER_ID_AT: usize = 48;
const PRODUCER_EPOCH_AT: usize = 56;
const BASE_SEQUENCE_AT: usize = 58;
const PRODUCER_RESERVED_AT: usize = 62;

/// Attribute bits of a fencelog batch (byte 17), valid only on [`MAGIC_WITH_PRODUCER`] batches,
/// the same bits as Kafka's record batch attributes: the batch is part of its producer's open
/// transaction, so read_committed readers hold it back until the transaction's marker.
pub const ATTRIBUTE_TRANSACTIONAL: u8 = 0x10;
/// The batch is a transaction marker (a control batch): set only with
/// [`ATTRIBUTE_TRANSACTIONAL`], on a batch of exactly one control record.
pub const ATTRIBUTE_CONTROL: u8 = 0x20;
/// The attribute bits that hold the records' compression codec, Kafka's bits 0-2 (see
/// [`crate::compression::Codec`]): valid only on magic-2 batches, where they repeat the Kafka
/// batch's own; a reader that knows no codec refuses a batch with them set.
pub const ATTRIBUTE_CODEC_MASK: u8 = crate::compression::CODEC_MASK;
/// The attribute bits a batch may carry; any other bit is refused.
const KNOWN_ATTRIBUTES: u8 = ATTRIBUTE_TRANSACTIONAL | ATTRIBUTE_CONTROL;
/// How [`BatchHeader::attributes`] shows a non-zero reserved field (bytes 18..20): a bit no
/// format defines, so validation refuses it with the unknown attribute bits.
const RESERVED_SEEN: u8 = 0x80;
/// The most bytes a compressed batch's records may inflate to, on every reader (the partition's
/// validation, the client, the tools): a decompression bomb stops here with
/// [`BatchError::Compression`]. Eight times the default largest batch: JSON-like values
/// compress four to ten times.
pub const MAX_INFLATED_RECORDS_BYTES: usize = 64 * 1024 * 1024;

pub use crate::domain::Record;

/// Milliseconds since the Unix epoch, for record timestamps.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    /// A batch built in a recycled buffer is byte for byte the one built fresh.
    #[test]
    fn recycled_buffer_builds_the_same_batch() {
        let build = |mut builder: BatchBuilder| {
            builder.push(1000, Some(b"key"), Some(b"value"));
            builder.push_with_headers(1005, None, Some(b"v2"), &[("h", b"x")]);
            builder.finish()
        };
        let fresh = build(BatchBuilder::new(9));
        let mut old = BytesMut::new();
        old.extend_from_slice(&[0xAA; 300]);
        let recycled = build(BatchBuilder::reusing(9, old, 10));
        assert_eq!(fresh, recycled);
        let sized = build(BatchBuilder::with_capacity(
            9,
            BatchBuilder::record_len(Some(b"key"), Some(b"value"), &[]),
        ));
        assert_eq!(fresh, sized);
    }

    /// A built batch validates and decodes back to what was pushed.
    #[test]
    fn built_batch_round_trips() {
        let mut builder = BatchBuilder::new(7);
        builder.push(1000, Some(b"k"), Some(b"v1"));
        builder.push_with_headers(1005, None, Some(b"v2"), &[("h", b"x")]);
        let batch = builder.finish();
        let header = validate(&batch, 1 << 20).unwrap();
        assert_eq!((header.epoch, header.record_count), (7, 2));
        assert_eq!((header.first_timestamp, header.max_timestamp), (1000, 1005));
        let records = decode_batch(&batch).unwrap();
        assert_eq!(records[1].value.as_deref(), Some(&b"v2"[..]));
        assert_eq!(records[1].headers[0].0, "h");
        assert_eq!(records[1].headers[0].1.as_deref(), Some(&b"x"[..]));
        assert_eq!(records[0].key.as_deref(), Some(&b"k"[..]));
    }

    /// A null header value survives the round trip apart from an empty one, and the record's
    /// length counts it as no bytes.
    #[test]
    fn null_and_empty_header_values_stay_apart() {
        let headers: &[(&str, Option<&[u8]>)] =
            &[("null", None), ("empty", Some(b"")), ("x", Some(b"1"))];
        let mut builder = BatchBuilder::new(3);
        builder.push_with_nullable_headers(1000, None, Some(b"v"), headers);
        let batch = builder.finish();
        assert_eq!(
            batch.len(),
            HEADER_BYTES + BatchBuilder::record_len_nullable(None, Some(b"v"), headers)
        );
        validate(&batch, 1 << 20).unwrap();
        let records = decode_batch(&batch).unwrap();
        let decoded: Vec<(&str, Option<&[u8]>)> = records[0]
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_deref()))
            .collect();
        assert_eq!(decoded, headers);
    }

    /// A producer's batch carries its identity and sequence, and decodes like any other.
    #[test]
    fn producer_batch_round_trips() {
        let mut builder = BatchBuilder::with_producer(4, 77, 2);
        builder.push(1000, None, Some(b"a"));
        builder.push(1001, None, Some(b"b"));
        let batch = builder.finish_with_sequence(MAX_SEQUENCE);
        let header = validate(&batch, 1 << 20).unwrap();
        assert_eq!(header.magic, MAGIC_WITH_PRODUCER);
        let stamp = ProducerStamp::parse(&batch).unwrap();
        assert_eq!(
            stamp,
            ProducerStamp {
                producer_id: 77,
                producer_epoch: 2,
                base_sequence: MAX_SEQUENCE
            }
        );
        assert_eq!(stamp.last_sequence(header.record_count), 0, "wraps");
        let records = decode_batch(&batch).unwrap();
        assert_eq!(records[1].value.as_deref(), Some(&b"b"[..]));
        assert_eq!(records[1].epoch, 4);
    }

    /// Rewrites the attribute byte of a built batch and fixes its CRC.
    fn with_attributes(batch: &[u8], attributes: u8) -> Vec<u8> {
        let mut batch = batch.to_vec();
        batch[ATTRIBUTES_AT] = attributes;
        let crc = crc32fast::hash(&batch[CRC_START..]);
        batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        batch
    }

    /// A control batch validates, carries both bits and its producer, and reads back as the
    /// marker it was written with.
    #[test]
    fn control_batch_round_trips() {
        for marker in [ControlMarker::Abort, ControlMarker::Commit] {
            let batch = control_batch(9, 42, 3, marker, 17, 1234);
            let header = validate(&batch, 1 << 20).unwrap();
            assert!(header.is_transactional() && header.is_control());
            assert_eq!((header.epoch, header.record_count), (9, 1));
            assert_eq!(header.first_timestamp, 1234);
            let stamp = ProducerStamp::parse(&batch).unwrap();
            assert_eq!((stamp.producer_id, stamp.producer_epoch), (42, 3));
            assert_eq!(
                control_record(&batch),
                Some(ControlRecord {
                    marker,
                    coordinator_epoch: 17
                })
            );
            let records = decode_batch(&batch).unwrap();
            let key = records[0].key.as_deref().unwrap();
            assert_eq!(key, [0, 0, 0, marker.kafka_type() as u8]);
        }
    }

    /// A transactional data batch validates with its bit; a plain one is not a marker.
    #[test]
    fn transactional_batch_carries_its_bit() {
        let mut builder = BatchBuilder::with_producer(2, 5, 0).transactional();
        builder.push(1, None, Some(b"v"));
        let batch = builder.finish();
        let header = validate(&batch, 1 << 20).unwrap();
        assert!(header.is_transactional() && !header.is_control());
        assert_eq!(control_record(&batch), None);
    }

    /// The bits only on magic 3, control only with transactional and one control record,
    /// unknown bits never.
    #[test]
    fn misplaced_attribute_bits_are_refused() {
        let mut plain = BatchBuilder::new(1);
        plain.push(1, None, Some(b"v"));
        let plain = plain.finish();
        for bits in [ATTRIBUTE_TRANSACTIONAL, ATTRIBUTE_CONTROL, 0x01] {
            assert_eq!(
                validate(&with_attributes(&plain, bits), 1 << 20),
                Err(BatchError::ReservedBitsSet),
                "magic 1 with {bits:#x}"
            );
        }
        let mut data = BatchBuilder::with_producer(1, 5, 0);
        data.push(1, Some(b"k"), Some(b"v"));
        let data = data.finish();
        for bits in [0x01, 0x08, 0x40, 0x80, ATTRIBUTE_TRANSACTIONAL | 0x04] {
            assert_eq!(
                validate(&with_attributes(&data, bits), 1 << 20),
                Err(BatchError::ReservedBitsSet),
                "magic 3 with {bits:#x}"
            );
        }
        for bits in [
            ATTRIBUTE_CONTROL,
            ATTRIBUTE_CONTROL | ATTRIBUTE_TRANSACTIONAL,
        ] {
            assert!(matches!(
                validate(&with_attributes(&data, bits), 1 << 20),
                Err(BatchError::BadControlBatch(_))
            ));
        }
        let marker = control_batch(1, 5, 0, ControlMarker::Commit, 0, 1);
        assert!(matches!(
            validate(&with_attributes(&marker, ATTRIBUTE_CONTROL), 1 << 20),
            Err(BatchError::BadControlBatch(_))
        ));
        let mut two = BatchBuilder::with_producer(1, 5, 0);
        two.attributes = ATTRIBUTE_TRANSACTIONAL | ATTRIBUTE_CONTROL;
        let record = ControlRecord {
            marker: ControlMarker::Abort,
            coordinator_epoch: 0,
        };
        two.push(1, Some(&record.key()), Some(&record.value()));
        two.push(1, Some(&record.key()), Some(&record.value()));
        assert!(matches!(
            validate(&two.finish(), 1 << 20),
            Err(BatchError::BadControlBatch(_))
        ));
        let mut bad_type = BatchBuilder::with_producer(1, 5, 0);
        bad_type.attributes = ATTRIBUTE_TRANSACTIONAL | ATTRIBUTE_CONTROL;
        bad_type.push(1, Some(&[0, 0, 0, 2]), Some(&record.value()));
        assert!(matches!(
            validate(&bad_type.finish(), 1 << 20),
            Err(BatchError::BadControlBatch(_))
        ));
    }

    /// Out-of-range producer fields are refused even with a matching CRC.
    #[test]
    fn negative_producer_fields_are_refused() {
        for at in [PRODUCER_ID_AT, PRODUCER_EPOCH_AT, BASE_SEQUENCE_AT] {
            let mut builder = BatchBuilder::with_producer(1, 5, 0);
            builder.push(1, None, Some(b"v"));
            let mut batch = builder.finish().to_vec();
            batch[at] = 0x80;
            let crc = crc32fast::hash(&batch[CRC_START..]);
            batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
            assert!(
                matches!(
                    validate(&batch, 1 << 20),
                    Err(BatchError::BadProducerFields(_))
                ),
                "field at {at}"
            );
        }
    }

    /// Every single-byte flip in the CRC-covered range or the length is caught.
    #[test]
    fn any_flipped_byte_is_rejected() {
        let mut builder = BatchBuilder::new(3);
        builder.push(5, Some(b"key"), Some(b"value"));
        let batch = builder.finish();
        for position in 8..batch.len() {
            let mut copy = batch.to_vec();
            copy[position] ^= 0x40;
            assert!(
                validate(&copy, 1 << 20).is_err(),
                "flip at {position} passed"
            );
        }
    }

    /// The base offset is outside the CRC so the broker can stamp it.
    #[test]
    fn stamping_base_offset_keeps_crc_valid() {
        let mut builder = BatchBuilder::new(1);
        builder.push(5, None, Some(b"v"));
        let mut batch = builder.finish().to_vec();
        stamp_base_offset(&mut batch, 42);
        assert_eq!(validate(&batch, 1 << 20).unwrap().base_offset, 42);
    }
}
