//! Magic 2: a Kafka record batch v2 stored as its producer sent it, behind a native header.
//!
//! Why: a Kafka consumer reads what Kafka producers wrote. Converting every stored batch into a
//! Kafka batch on every fetch cost a copy and a CRC32C of each byte each time it was read (the
//! Kafka fetch path ran at 62% of the native one and 2.2x its CPU per byte). A batch kept as it
//! arrived is served to a Kafka consumer from the log's own bytes, as Kafka itself does, and is
//! checked once, when it is written.
//!
//! The native header in front (the magic-3 layout, [`KAFKA_ENVELOPE_BYTES`] bytes) keeps what
//! the store needs where every reader of the log finds it: the fencing `epoch` (Kafka's
//! `partitionLeaderEpoch` is an `i32` and means something else to Kafka clients), the record
//! count, the timestamps, the producer's identity and the transactional bit. They repeat what
//! the Kafka header says, and [`validate_kafka`] refuses a batch where the two disagree, so a
//! Kafka consumer and a native one always see the same records.
//!
//! Only batches that need nothing rewritten are kept as they arrived: CreateTime, not control,
//! offset deltas 0, 1, 2, …, `maxTimestamp` the largest record timestamp (no record later),
//! record attributes 0, header keys UTF-8. The rest are converted to magic 1 or 3 as before
//! (`server::kafka::batches::to_native`).
//!
//! Compressed batches (gzip, snappy, lz4, zstd) are kept as they arrived too, compressed: the
//! native header's attributes repeat the codec (bits 0-2, as Kafka's), so a reader knows from the
//! header alone that the records must be inflated, and a reader of this project that predates
//! compression refuses the batch cleanly (unknown attribute bits). Their records are walked after
//! a bounded decompression ([`inflate`], at most
//! [`MAX_INFLATED_RECORDS_BYTES`](super::MAX_INFLATED_RECORDS_BYTES)) wherever a batch is
//! validated: once on the way in (the partition's validation, outside its lock), and by every
//! reader that decodes records. Nothing on the way out inflates them: a Kafka fetch serves the
//! stored bytes, and a follower copies them.
//!
//! Checksums: the native `crc` (bytes 12..16) is a CRC32C of the native header's own fields
//! (bytes 16..64) followed by the Kafka batch's CRC field (so it changes with the records, as a
//! magic-1 or magic-3 `crc` does: the producer state tells an exact resend by it); the records
//! are covered by the Kafka batch's own CRC32C (of its bytes from
//! `attributes` to the end), checked on every write and on every read of unverified bytes. The
//! Kafka header fields outside that CRC are checked against fixed values or against the native
//! header. Neither checksum covers the two base offsets, which the broker stamps (equal).

use bytes::{BufMut, BytesMut};

use super::crc32c::crc32c;
use super::varint::Reader;
use super::{
    be_u16, be_u32, be_u64, BatchError, BatchHeader, BatchSlices, NewHeader, ProducerStamp,
    RawRecord, ATTRIBUTE_CODEC_MASK, ATTRIBUTE_TRANSACTIONAL, CRC_AT, CRC_START,
    MAX_INFLATED_RECORDS_BYTES, MAX_RECORDS_PER_BATCH, PRODUCER_HEADER_BYTES,
};
use crate::compression::Codec;

/// The batch format that holds a Kafka record batch v2 as it arrived (the same number as the
/// Kafka magic it holds).
pub const MAGIC_KAFKA: u8 = 2;
/// Bytes of the native header in front of the Kafka batch (the magic-3 layout).
pub const KAFKA_ENVELOPE_BYTES: usize = PRODUCER_HEADER_BYTES;
/// Bytes of a Kafka record batch v2 header, up to and including its records count.
pub const KAFKA_HEADER_BYTES: usize = kafka_layout::RECORDS_AT;
/// The smallest magic-2 batch: both headers and one empty-ish record (checked further by the
/// record walk).
pub const MIN_KAFKA_STORED_BYTES: usize = KAFKA_ENVELOPE_BYTES + KAFKA_HEADER_BYTES;
/// Where, in a magic-2 batch, the Kafka batch's `baseOffset` lies (stamped with the native one).
pub const INNER_BASE_OFFSET_AT: usize = KAFKA_ENVELOPE_BYTES;

/// The Kafka record batch v2 (Kafka's `DefaultRecordBatch`): byte offsets of its header fields
/// and its attribute bits, the one copy of them for every module that reads or writes Kafka
/// batches (this one, and the Kafka listener's conversions in `server::kafka::batches`).
#[cfg_attr(not(feature = "kafka"), allow(dead_code))]
pub(crate) mod kafka_layout {
    pub const BASE_OFFSET_AT: usize = 0;
    pub const LENGTH_AT: usize = 8;
    /// Bytes before `partitionLeaderEpoch`: `batchLength` counts from there.
    pub const LENGTH_FIELD_END: usize = 12;
    pub const LEADER_EPOCH_AT: usize = 12;
    pub const MAGIC_AT: usize = 16;
    pub const CRC_AT: usize = 17;
    /// Start of the CRC32C-covered range.
    pub const ATTRIBUTES_AT: usize = 21;
    pub const LAST_OFFSET_DELTA_AT: usize = 23;
    pub const BASE_TIMESTAMP_AT: usize = 27;
    pub const MAX_TIMESTAMP_AT: usize = 35;
    pub const PRODUCER_ID_AT: usize = 43;
    pub const PRODUCER_EPOCH_AT: usize = 51;
    pub const BASE_SEQUENCE_AT: usize = 53;
    pub const COUNT_AT: usize = 57;
    /// Where the records start: the header's size.
    pub const RECORDS_AT: usize = 61;

    /// Attribute bits.
    pub const COMPRESSION_MASK: i16 = 0x07;
    pub const TIMESTAMP_TYPE_BIT: i16 = 1 << 3;
    pub const TRANSACTIONAL_BIT: i16 = 1 << 4;
    pub const CONTROL_BIT: i16 = 1 << 5;

    /// `partitionLeaderEpoch` of every batch fencelog serves: unknown, so Kafka consumers skip
    /// their leader-epoch checks (fencelog's epochs are fencing tokens, not Kafka leader epochs).
    pub const NO_LEADER_EPOCH: i32 = -1;
}

use kafka_layout as kafka;

/// The Kafka batch inside a magic-2 batch (`None` for any other magic, or bytes too short).
pub fn kafka_batch(stored: &[u8]) -> Option<&[u8]> {
    (stored.len() >= MIN_KAFKA_STORED_BYTES && stored[super::MAGIC_AT] == MAGIC_KAFKA)
        .then(|| &stored[KAFKA_ENVELOPE_BYTES..])
}

/// What [`wrap_kafka_batch`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrappedKafka {
    /// Whether the Kafka batch was copied behind the header (its baseOffset or
    /// partitionLeaderEpoch needed rewriting). If not, only the envelope was written, and the
    /// stored batch is the envelope followed by the Kafka batch exactly as given (see
    /// [`super::BatchSlices::kept_kafka`]).
    pub kafka_copied: bool,
    /// Records in the batch.
    pub record_count: u32,
    /// The producer's identity, when the Kafka batch names one (`producerId >= 0`).
    pub producer: Option<ProducerStamp>,
    /// The Kafka batch is part of its producer's transaction.
    pub transactional: bool,
    /// Kafka's `baseTimestamp`: the native `first_timestamp`.
    pub first_timestamp: i64,
    /// Kafka's `maxTimestamp`.
    pub max_timestamp: i64,
    /// The records' codec: kept compressed as they arrived when not [`Codec::None`].
    pub codec: Codec,
}

/// Appends the magic-2 batch of `kafka` (exactly one Kafka record batch v2, as a producer sent
/// it) written under fencing token `epoch` to `out`, when it can be kept as it is (see the
/// module doc) and its stored size is within `max_batch_bytes` and its record count within
/// `max_records`: its envelope (the native header) only, when the Kafka bytes can be stored
/// exactly as given (see [`WrappedKafka::kafka_copied`]), else the envelope and a copy of the
/// Kafka batch with its baseOffset and partitionLeaderEpoch rewritten. `None` leaves `out`
/// untouched: the caller converts the batch instead, which also explains whatever is wrong
/// with it.
///
/// The Kafka CRC32C is *not* checked here: the partition checks it when it appends the batch,
/// so each byte is read once on its way in. What is checked here is the structure (a record
/// walk that reads each record's lengths and skips its bytes) of an uncompressed batch; a
/// compressed one is inflated and walked by the partition's validation alone, so it is
/// decompressed once.
pub fn wrap_kafka_batch(
    kafka: &[u8],
    epoch: u64,
    max_batch_bytes: usize,
    max_records: u32,
    out: &mut BytesMut,
) -> Option<WrappedKafka> {
    let stored_len = KAFKA_ENVELOPE_BYTES.checked_add(kafka.len())?;
    if kafka.len() < KAFKA_HEADER_BYTES
        || stored_len > max_batch_bytes
        || u32::try_from(stored_len).is_err()
        || kafka[kafka::MAGIC_AT] != MAGIC_KAFKA
        || i64::from(be_i32(kafka, kafka::LENGTH_AT))
            != (kafka.len() - kafka::LENGTH_FIELD_END) as i64
    {
        return None;
    }
    let attributes = be_i16(kafka, kafka::ATTRIBUTES_AT);
    if attributes & !(kafka::TRANSACTIONAL_BIT | kafka::COMPRESSION_MASK) != 0 {
        return None; // LogAppendTime, control or unknown bits
    }
    let transactional = attributes & kafka::TRANSACTIONAL_BIT != 0;
    let codec = Codec::from_attribute((attributes & kafka::COMPRESSION_MASK) as u8)
        .filter(|codec| codec.is_built())?;
    let count = be_i32(kafka, kafka::COUNT_AT);
    if count <= 0 || count as u32 > max_records.min(MAX_RECORDS_PER_BATCH) {
        return None;
    }
    let count = count as u32;
    if be_i32(kafka, kafka::LAST_OFFSET_DELTA_AT) != count as i32 - 1 {
        return None;
    }
    let producer = producer_fields(kafka).ok()?;
    if transactional && producer.is_none() {
        return None;
    }
    let first_timestamp = be_i64(kafka, kafka::BASE_TIMESTAMP_AT);
    let max_timestamp = be_i64(kafka, kafka::MAX_TIMESTAMP_AT);
    if codec == Codec::None {
        let seen_max = walk_records(
            &kafka[kafka::RECORDS_AT..],
            count,
            first_timestamp,
            |_, _| {},
        )
        .ok()?;
        if seen_max != max_timestamp {
            return None;
        }
    }

    // Stored as they arrived when the two fields the store fixes already hold its values
    // (Kafka's producers send baseOffset 0 and partitionLeaderEpoch -1); else copied with them
    // rewritten.
    let kafka_copied = be_u64(kafka, kafka::BASE_OFFSET_AT) != 0
        || be_i32(kafka, kafka::LEADER_EPOCH_AT) != kafka::NO_LEADER_EPOCH;
    let start = out.len();
    out.reserve(if kafka_copied {
        stored_len
    } else {
        KAFKA_ENVELOPE_BYTES
    });
    out.put_bytes(0, KAFKA_ENVELOPE_BYTES); // the native header, written below
    if kafka_copied {
        out.put_u64(0); // Kafka's baseOffset, stamped with the native one
        out.put_slice(&kafka[kafka::LENGTH_AT..kafka::LEADER_EPOCH_AT]);
        out.put_i32(kafka::NO_LEADER_EPOCH);
        out.put_slice(&kafka[kafka::MAGIC_AT..]);
    }
    let envelope = &mut out[start..start + KAFKA_ENVELOPE_BYTES];
    NewHeader {
        epoch,
        record_count: count,
        first_timestamp,
        max_timestamp,
        producer,
        attributes: codec.attribute()
            | if transactional {
                ATTRIBUTE_TRANSACTIONAL
            } else {
                0
            },
    }
    .put_fields(MAGIC_KAFKA, stored_len, envelope);
    // The CRC field is the same in the copy (the rewritten fields are outside the Kafka CRC).
    let crc = header_crc(envelope, kafka);
    envelope[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    Some(WrappedKafka {
        kafka_copied,
        record_count: count,
        producer,
        transactional,
        first_timestamp,
        max_timestamp,
        codec,
    })
}

/// The records of a compressed magic-2 batch (one whose `header` names a codec), inflated onto
/// `out` within [`MAX_INFLATED_RECORDS_BYTES`]; `Ok(false)` and nothing written for any other
/// batch. What a record walk of the batch then reads instead of its own bytes.
pub(super) fn inflate(
    header: &BatchHeader,
    batch: BatchSlices<'_>,
    out: &mut Vec<u8>,
) -> Result<bool, BatchError> {
    if header.magic != MAGIC_KAFKA || header.codec_bits() == 0 {
        return Ok(false);
    }
    let codec = codec_of(header.codec_bits())?;
    let (_, kafka) = envelope_and_kafka(batch)?;
    crate::compression::decompress(
        codec,
        &kafka[kafka::RECORDS_AT..],
        MAX_INFLATED_RECORDS_BYTES,
        out,
    )?;
    Ok(true)
}

/// The codec numbered `bits`, or the error for a number no codec has.
fn codec_of(bits: u8) -> Result<Codec, BatchError> {
    Codec::from_attribute(bits).ok_or(BatchError::UnknownCodec(bits))
}

/// Decodes Kafka record batches v2 as fencelog serves them to a Kafka consumer (several back to
/// back, as a Fetch answer's `records` holds them, compressed or not), checking each batch's
/// length and CRC-32C, and appends their records to `records`; control batches (transaction
/// markers) are checked and yield nothing. For a lean Kafka reader (the bench's), not a general
/// Kafka decoder: LogAppendTime and record attributes are errors.
pub fn decode_kafka_batches_into(
    mut buffer: bytes::Bytes,
    records: &mut Vec<super::Record>,
) -> Result<(), BatchError> {
    while !buffer.is_empty() {
        if buffer.len() < KAFKA_HEADER_BYTES {
            return Err(BatchError::TooShort { len: buffer.len() });
        }
        let declared = be_i32(&buffer, kafka::LENGTH_AT);
        let length = usize::try_from(declared)
            .ok()
            .and_then(|declared| declared.checked_add(kafka::LENGTH_FIELD_END))
            .filter(|length| (KAFKA_HEADER_BYTES..=buffer.len()).contains(length))
            .ok_or(BatchError::LengthMismatch {
                declared: declared as u64,
                actual: buffer.len(),
            })?;
        let batch = buffer.split_to(length);
        if batch[kafka::MAGIC_AT] != MAGIC_KAFKA {
            return Err(BatchError::UnsupportedMagic(batch[kafka::MAGIC_AT]));
        }
        check_kafka_crc(&batch)?;
        let attributes = be_i16(&batch, kafka::ATTRIBUTES_AT);
        let known = kafka::TRANSACTIONAL_BIT | kafka::CONTROL_BIT | kafka::COMPRESSION_MASK;
        if attributes & !known != 0 {
            return Err(BatchError::ReservedBitsSet);
        }
        let codec = codec_of((attributes & kafka::COMPRESSION_MASK) as u8)?;
        if attributes & kafka::CONTROL_BIT != 0 {
            continue;
        }
        let base_offset = be_u64(&batch, kafka::BASE_OFFSET_AT);
        let base_timestamp = be_i64(&batch, kafka::BASE_TIMESTAMP_AT);
        let count = u32::try_from(be_i32(&batch, kafka::COUNT_AT))
            .ok()
            .filter(|count| (1..=MAX_RECORDS_PER_BATCH).contains(count))
            .ok_or(BatchError::BadRecordCount(
                be_i32(&batch, kafka::COUNT_AT) as u32
            ))?;
        if base_offset.checked_add(u64::from(count)).is_none() {
            return Err(BatchError::OffsetOverflow {
                base_offset,
                record_count: count,
            });
        }
        let source = if codec == Codec::None {
            batch.slice(kafka::RECORDS_AT..)
        } else {
            let mut inflated = Vec::new();
            crate::compression::decompress(
                codec,
                &batch[kafka::RECORDS_AT..],
                MAX_INFLATED_RECORDS_BYTES,
                &mut inflated,
            )?;
            bytes::Bytes::from(inflated)
        };
        let before = records.len();
        let walked = walk_records(&source, count, base_timestamp, |index, raw| {
            // A Kafka batch carries no fencing epoch: 0, as for an unleased write.
            records.push(raw.into_record(
                &source,
                base_offset + u64::from(index),
                0,
                base_timestamp,
            ));
        });
        if let Err(error) = walked {
            records.truncate(before);
            return Err(error);
        }
    }
    Ok(())
}

/// The native `crc` of a magic-2 batch (its `envelope`, [`KAFKA_ENVELOPE_BYTES`], and its
/// `kafka` batch, at least [`KAFKA_HEADER_BYTES`]): a CRC-32C of the native header's own fields
/// (bytes 16..64) followed by the Kafka batch's CRC field. Through the Kafka CRC it depends on
/// every record byte, so two batches with the same header but other records have different
/// `crc`s (the producer state tells an exact resend by it), yet it is computed over 52 bytes.
fn header_crc(envelope: &[u8], kafka: &[u8]) -> u32 {
    const FIELDS: usize = KAFKA_ENVELOPE_BYTES - CRC_START;
    let mut covered = [0u8; FIELDS + 4];
    covered[..FIELDS].copy_from_slice(&envelope[CRC_START..KAFKA_ENVELOPE_BYTES]);
    covered[FIELDS..].copy_from_slice(&kafka[kafka::CRC_AT..kafka::CRC_AT + 4]);
    crc32c(&covered)
}

/// The CRC checks of a magic-2 batch (its length already matched against the header): the
/// native header's CRC32C, then the Kafka batch's.
pub(super) fn check_crcs(header: &BatchHeader, batch: BatchSlices<'_>) -> Result<(), BatchError> {
    let (envelope, kafka) = envelope_and_kafka(batch)?;
    let actual = header_crc(envelope, kafka);
    if actual != header.crc {
        return Err(BatchError::CrcMismatch {
            expected: header.crc,
            actual,
        });
    }
    check_kafka_crc(kafka)
}

/// A magic-2 batch's two parts, each at least as long as its header (the fields read from them
/// are there).
fn envelope_and_kafka(batch: BatchSlices<'_>) -> Result<(&[u8], &[u8]), BatchError> {
    let (envelope, kafka) = (batch.head(), batch.kafka());
    if envelope.len() != KAFKA_ENVELOPE_BYTES || kafka.len() < KAFKA_HEADER_BYTES {
        return Err(BatchError::TooShort { len: batch.len() });
    }
    Ok((envelope, kafka))
}

/// A Kafka batch's own CRC-32C (of its bytes from `attributes` on) against its `crc` field.
fn check_kafka_crc(kafka: &[u8]) -> Result<(), BatchError> {
    let expected = be_u32(kafka, kafka::CRC_AT);
    let actual = crc32c(&kafka[kafka::ATTRIBUTES_AT..]);
    if actual != expected {
        return Err(BatchError::CrcMismatch { expected, actual });
    }
    Ok(())
}

/// The structural checks of a magic-2 batch whose CRCs matched: the Kafka header agrees with
/// the native one, the producer fields are in range, and the records fill the batch (or, when
/// compressed, `inflated`: its records as [`inflate`] wrote them), each handed to `on_record`.
pub(super) fn validate_kafka<'a>(
    header: &BatchHeader,
    batch: BatchSlices<'a>,
    inflated: Option<&'a [u8]>,
    mut on_record: impl FnMut(u32, RawRecord<'a>),
) -> Result<(), BatchError> {
    let (envelope, kafka) = envelope_and_kafka(batch)?;
    let mismatch = |field| BatchError::KafkaHeaderMismatch(field);
    if header.attributes & !(ATTRIBUTE_TRANSACTIONAL | ATTRIBUTE_CODEC_MASK) != 0 {
        return Err(BatchError::ReservedBitsSet);
    }
    let codec = codec_of(header.codec_bits())?;
    let records = match (codec, inflated) {
        (Codec::None, _) => &kafka[kafka::RECORDS_AT..],
        (_, Some(inflated)) => inflated,
        (_, None) => {
            debug_assert!(false, "a compressed batch walked without inflating it");
            return Err(BatchError::MalformedRecord {
                index: 0,
                reason: "compressed records were not inflated",
            });
        }
    };
    if be_u16(envelope, 62) != 0 {
        return Err(BatchError::ReservedBitsSet);
    }
    let native_producer = native_producer_fields(envelope)?;
    if header.is_transactional() && native_producer.is_none() {
        return Err(BatchError::BadProducerFields(
            "a transactional batch without a producer id",
        ));
    }
    if be_u64(kafka, kafka::BASE_OFFSET_AT) != header.base_offset {
        return Err(mismatch("baseOffset"));
    }
    if i64::from(be_i32(kafka, kafka::LENGTH_AT)) != (kafka.len() - kafka::LENGTH_FIELD_END) as i64
    {
        return Err(mismatch("batchLength"));
    }
    if be_i32(kafka, kafka::LEADER_EPOCH_AT) != kafka::NO_LEADER_EPOCH {
        return Err(mismatch("partitionLeaderEpoch (stored as -1)"));
    }
    if kafka[kafka::MAGIC_AT] != MAGIC_KAFKA {
        return Err(mismatch("magic"));
    }
    let transactional = if header.is_transactional() {
        kafka::TRANSACTIONAL_BIT
    } else {
        0
    };
    if be_i16(kafka, kafka::ATTRIBUTES_AT) != transactional | i16::from(codec.attribute()) {
        return Err(mismatch("attributes"));
    }
    if header.record_count == 0 || header.record_count > MAX_RECORDS_PER_BATCH {
        return Err(BatchError::BadRecordCount(header.record_count));
    }
    if be_i32(kafka, kafka::COUNT_AT) as u32 != header.record_count {
        return Err(mismatch("recordsCount"));
    }
    if be_i32(kafka, kafka::LAST_OFFSET_DELTA_AT) != header.record_count as i32 - 1 {
        return Err(mismatch("lastOffsetDelta"));
    }
    if be_i64(kafka, kafka::BASE_TIMESTAMP_AT) != header.first_timestamp {
        return Err(mismatch("baseTimestamp"));
    }
    if be_i64(kafka, kafka::MAX_TIMESTAMP_AT) != header.max_timestamp {
        return Err(mismatch("maxTimestamp"));
    }
    if producer_fields(kafka).map_err(BatchError::BadProducerFields)? != native_producer {
        return Err(mismatch("producerId, producerEpoch or baseSequence"));
    }
    let seen_max = walk_records(
        records,
        header.record_count,
        header.first_timestamp,
        &mut on_record,
    )?;
    if seen_max > header.max_timestamp {
        return Err(BatchError::BadTimestamps(
            "a record is later than max_timestamp",
        ));
    }
    Ok(())
}

/// The native header's producer fields of a magic-2 batch: a producer, or all -1 for none.
fn native_producer_fields(bytes: &[u8]) -> Result<Option<ProducerStamp>, BatchError> {
    producer_fields_at(bytes, 48, 56, 58).map_err(BatchError::BadProducerFields)
}

/// The Kafka header's producer fields: a producer (`producerId >= 0`, epoch and sequence not
/// negative) or none (all three -1, as Kafka's producers write them without idempotence).
fn producer_fields(kafka: &[u8]) -> Result<Option<ProducerStamp>, &'static str> {
    producer_fields_at(
        kafka,
        kafka::PRODUCER_ID_AT,
        kafka::PRODUCER_EPOCH_AT,
        kafka::BASE_SEQUENCE_AT,
    )
}

fn producer_fields_at(
    bytes: &[u8],
    id_at: usize,
    epoch_at: usize,
    sequence_at: usize,
) -> Result<Option<ProducerStamp>, &'static str> {
    let producer_id = be_i64(bytes, id_at);
    let producer_epoch = be_u16(bytes, epoch_at) as i16;
    let base_sequence = be_i32(bytes, sequence_at);
    if producer_id >= 0 {
        if producer_epoch < 0 {
            return Err("producer_epoch is negative");
        }
        if base_sequence < 0 {
            return Err("base_sequence is negative");
        }
        Ok(Some(ProducerStamp {
            producer_id,
            producer_epoch,
            base_sequence,
        }))
    } else if (producer_id, producer_epoch, base_sequence) == (-1, -1, -1) {
        Ok(None)
    } else {
        Err("without a producer id, producer epoch and sequence must be -1")
    }
}

/// Walks `count` Kafka records that must fill `records` exactly, handing each to `on_record`
/// with its timestamp as a delta from `base_timestamp` (negative for a record earlier than the
/// first). Returns the largest record timestamp.
fn walk_records<'a>(
    records: &'a [u8],
    count: u32,
    base_timestamp: i64,
    mut on_record: impl FnMut(u32, RawRecord<'a>),
) -> Result<i64, BatchError> {
    let mut reader = Reader::new(records);
    let mut max = i64::MIN;
    for index in 0..count {
        let malformed = |reason| BatchError::MalformedRecord { index, reason };
        let record = kafka_record(&mut reader, index).map_err(malformed)?;
        let timestamp = base_timestamp
            .checked_add(record.timestamp_delta)
            .ok_or(BatchError::BadTimestamps("a record timestamp overflows"))?;
        max = max.max(timestamp);
        on_record(index, record);
    }
    if reader.remaining() != 0 {
        return Err(BatchError::MalformedRecord {
            index: count,
            reason: "bytes left after the last record",
        });
    }
    Ok(max)
}

/// One Kafka record (see the module doc of `server::kafka::batches::records` for its layout).
fn kafka_record<'a>(reader: &mut Reader<'a>, index: u32) -> Result<RawRecord<'a>, &'static str> {
    let length = reader.varint()?;
    let length = usize::try_from(length).map_err(|_| "negative record length")?;
    let mut record = Reader::new(reader.take(length)?);
    if record.u8()? != 0 {
        return Err("record attributes must be 0");
    }
    let timestamp_delta = record.varlong()?;
    if u32::try_from(record.varint()?) != Ok(index) {
        return Err("offset delta differs from the record's index");
    }
    let key = record.nullable_bytes()?;
    let value = record.nullable_bytes()?;
    let header_count = record.varint()?;
    let header_count = usize::try_from(header_count).map_err(|_| "negative header count")?;
    let mut headers = Vec::new();
    for _ in 0..header_count {
        let name = record.nullable_bytes()?.ok_or("a header key is null")?;
        std::str::from_utf8(name).map_err(|_| "header name is not UTF-8")?;
        headers.push((name, record.nullable_bytes()?));
    }
    if record.remaining() != 0 {
        return Err("record length does not match its fields");
    }
    Ok(RawRecord {
        timestamp_delta,
        key,
        value,
        headers,
    })
}

fn be_i16(bytes: &[u8], at: usize) -> i16 {
    be_u16(bytes, at) as i16
}

fn be_i32(bytes: &[u8], at: usize) -> i32 {
    be_u32(bytes, at) as i32
}

fn be_i64(bytes: &[u8], at: usize) -> i64 {
    be_u64(bytes, at) as i64
}

#[cfg(test)]
mod tests {
    use super::super::varint::{put_varint, put_varlong};
    use super::super::{decode_batch, stamp_base_offset, validate, Record};
    use super::*;
    use bytes::Bytes;

    /// A record for [`kafka_batch_of`]: timestamp delta, key, value, headers.
    type TestRecord<'a> = (
        i64,
        Option<&'a [u8]>,
        Option<&'a [u8]>,
        Vec<(&'a str, Option<&'a [u8]>)>,
    );

    fn put_nullable(out: &mut Vec<u8>, field: Option<&[u8]>) {
        match field {
            None => put_varint(out, -1),
            Some(bytes) => {
                put_varint(out, bytes.len() as i32);
                out.extend_from_slice(bytes);
            }
        }
    }

    /// A Kafka record batch v2 as a producer writes it (baseOffset 0, partitionLeaderEpoch
    /// `leader_epoch`, CRC32C computed), with `attributes` and producer fields as given.
    fn kafka_batch_of(
        records: &[TestRecord<'_>],
        base_timestamp: i64,
        attributes: u16,
        producer: (i64, i16, i32),
        leader_epoch: i32,
    ) -> Vec<u8> {
        let mut body = Vec::new();
        for (index, (delta, key, value, headers)) in records.iter().enumerate() {
            let mut record = vec![0u8];
            put_varlong(&mut record, *delta);
            put_varint(&mut record, index as i32);
            put_nullable(&mut record, *key);
            put_nullable(&mut record, *value);
            put_varint(&mut record, headers.len() as i32);
            for (name, value) in headers {
                put_nullable(&mut record, Some(name.as_bytes()));
                put_nullable(&mut record, *value);
            }
            put_varint(&mut body, record.len() as i32);
            body.extend_from_slice(&record);
        }
        let max = records
            .iter()
            .map(|record| base_timestamp + record.0)
            .max()
            .unwrap();
        let mut batch = Vec::new();
        batch.put_i64(0);
        batch.put_i32((49 + body.len()) as i32);
        batch.put_i32(leader_epoch);
        batch.put_u8(2);
        batch.put_u32(0);
        batch.put_u16(attributes);
        batch.put_i32(records.len() as i32 - 1);
        batch.put_i64(base_timestamp);
        batch.put_i64(max);
        batch.put_i64(producer.0);
        batch.put_i16(producer.1);
        batch.put_i32(producer.2);
        batch.put_i32(records.len() as i32);
        batch.extend_from_slice(&body);
        let crc = crc32c(&batch[kafka::ATTRIBUTES_AT..]);
        batch[kafka::CRC_AT..kafka::CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        batch
    }

    fn three_records() -> Vec<TestRecord<'static>> {
        vec![
            (0, Some(b"k0"), Some(b"v0"), vec![]),
            (5, None, Some(b"v1"), vec![("h", Some(b"x")), ("n", None)]),
            (2, Some(b""), None, vec![]),
        ]
    }

    /// The stored batch, in one buffer.
    fn wrap(kafka: &[u8], epoch: u64) -> Option<Bytes> {
        let mut out = BytesMut::new();
        let kept = wrap_kafka_batch(kafka, epoch, usize::MAX, MAX_RECORDS_PER_BATCH, &mut out)?;
        if !kept.kafka_copied {
            out.extend_from_slice(kafka);
        }
        Some(out.freeze())
    }

    /// Proves: a Kafka batch with baseOffset 0 and partitionLeaderEpoch -1 (as producers send
    /// it) is not copied: the envelope alone is written, and it and the producer's bytes, as
    /// two slices, validate as the same batch as the two joined, and are refused alike when
    /// damaged. A batch with another leader epoch is copied with it rewritten.
    #[test]
    fn a_kafka_batch_as_producers_send_it_is_kept_without_a_copy() {
        let kafka = kafka_batch_of(&three_records(), 1_000, 0, (-1, -1, -1), -1);
        let mut out = BytesMut::new();
        let kept =
            wrap_kafka_batch(&kafka, 4, usize::MAX, MAX_RECORDS_PER_BATCH, &mut out).expect("kept");
        assert!(!kept.kafka_copied);
        assert_eq!(out.len(), KAFKA_ENVELOPE_BYTES);
        let two = BatchSlices::kept_kafka(&out, &kafka);
        let joined = two.to_vec();
        assert_eq!(BatchSlices::new(&joined), two);
        assert_eq!(
            crate::batch::validate_slices(two, usize::MAX),
            validate(&joined, usize::MAX)
        );
        assert!(validate(&joined, usize::MAX).is_ok());
        let mut damaged = kafka.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert!(matches!(
            crate::batch::validate_slices(BatchSlices::kept_kafka(&out, &damaged), usize::MAX),
            Err(BatchError::CrcMismatch { .. })
        ));
        // An envelope that is not a magic-2 header does not make two slices a batch.
        let native = crate::batch::BatchBuilder::new(4).finish();
        assert!(crate::batch::validate_slices(
            BatchSlices::kept_kafka(&native, &kafka),
            usize::MAX
        )
        .is_err());

        let other_epoch = kafka_batch_of(&three_records(), 1_000, 0, (-1, -1, -1), 5);
        out.clear();
        let copied = wrap_kafka_batch(&other_epoch, 4, usize::MAX, MAX_RECORDS_PER_BATCH, &mut out)
            .expect("kept");
        assert!(copied.kafka_copied);
        assert_eq!(&out[..], &joined[..]);
    }

    /// Proves: a Kafka batch kept as it arrived is a valid batch whose records, epoch,
    /// timestamps and producer read back as the Kafka batch says, and whose Kafka bytes are the
    /// producer's with the leader epoch set to -1; stamping sets both base offsets.
    #[test]
    fn a_kept_kafka_batch_reads_back_as_sent() {
        let kafka = kafka_batch_of(&three_records(), 1_000, 0x10, (7, 2, 40), 9);
        let mut out = BytesMut::new();
        let kept = wrap_kafka_batch(&kafka, 33, usize::MAX, MAX_RECORDS_PER_BATCH, &mut out)
            .expect("kept");
        assert_eq!(
            kept,
            WrappedKafka {
                kafka_copied: true,
                record_count: 3,
                producer: Some(ProducerStamp {
                    producer_id: 7,
                    producer_epoch: 2,
                    base_sequence: 40
                }),
                transactional: true,
                first_timestamp: 1_000,
                max_timestamp: 1_005,
                codec: Codec::None,
            }
        );
        let mut stored = out.to_vec();
        let header = validate(&stored, usize::MAX).expect("valid");
        assert_eq!(
            (header.magic, header.epoch, header.record_count),
            (MAGIC_KAFKA, 33, 3)
        );
        assert!(header.is_transactional() && !header.is_control());
        stamp_base_offset(&mut stored, 500);
        validate(&stored, usize::MAX).expect("valid once stamped");
        let inner = kafka_batch(&stored).expect("a Kafka batch");
        assert_eq!(&inner[..8], &500u64.to_be_bytes());
        assert_eq!(&inner[12..16], &(-1i32).to_be_bytes());
        assert_eq!(
            &inner[16..],
            &kafka[16..],
            "the producer's bytes from the magic on"
        );
        let records = decode_batch(&Bytes::from(stored)).expect("decodes");
        let offsets: Vec<u64> = records
            .iter()
            .map(|record: &Record| record.offset)
            .collect();
        assert_eq!(offsets, [500, 501, 502]);
        let timestamps: Vec<i64> = records.iter().map(|record| record.timestamp).collect();
        assert_eq!(timestamps, [1_000, 1_005, 1_002]);
        assert_eq!(records[0].key.as_deref(), Some(&b"k0"[..]));
        assert_eq!(records[1].key, None);
        assert_eq!(records[2].value, None);
        assert_eq!(records[1].headers.len(), 2);
        assert_eq!(records[1].headers[1].1, None);
    }

    /// `kafka` with its records section compressed by `codec` (attributes and CRC updated).
    fn compressed(kafka: &[u8], codec: Codec) -> Vec<u8> {
        let mut body = Vec::new();
        crate::compression::compress(codec, &kafka[kafka::RECORDS_AT..], &mut body).unwrap();
        let mut batch = kafka[..kafka::RECORDS_AT].to_vec();
        batch.extend_from_slice(&body);
        let attributes = be_i16(&batch, kafka::ATTRIBUTES_AT) | i16::from(codec.attribute());
        batch[kafka::ATTRIBUTES_AT..kafka::ATTRIBUTES_AT + 2]
            .copy_from_slice(&attributes.to_be_bytes());
        let length = (batch.len() - kafka::LENGTH_FIELD_END) as i32;
        batch[kafka::LENGTH_AT..kafka::LENGTH_AT + 4].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c(&batch[kafka::ATTRIBUTES_AT..]);
        batch[kafka::CRC_AT..kafka::CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        batch
    }

    /// Proves: a compressed Kafka batch of every codec is kept as it arrived, compressed (the
    /// producer's bytes behind the header, whose attributes repeat the codec); it validates,
    /// decodes to the records of the same batch uncompressed, and the lean Kafka reader reads
    /// it too. A body that does not decompress, or a header that names another codec than the
    /// Kafka batch, is refused.
    #[test]
    fn compressed_batches_are_kept_compressed_and_read_back() {
        let plain = kafka_batch_of(&three_records(), 1_000, 0x10, (7, 2, 40), -1);
        let mut expected = wrap(&plain, 5).unwrap().to_vec();
        stamp_base_offset(&mut expected, 20);
        let expected = decode_batch(&Bytes::from(expected)).unwrap();
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let kafka = compressed(&plain, codec);
            let mut out = BytesMut::new();
            let kept = wrap_kafka_batch(&kafka, 5, usize::MAX, MAX_RECORDS_PER_BATCH, &mut out)
                .expect("kept");
            assert_eq!(kept.codec, codec);
            assert!(!kept.kafka_copied);
            out.extend_from_slice(&kafka);
            let mut stored = out.to_vec();
            stamp_base_offset(&mut stored, 20);
            let header = validate(&stored, usize::MAX).expect("valid");
            assert_eq!(header.codec_bits(), codec.attribute());
            assert!(header.is_transactional());
            assert_eq!(
                &stored[KAFKA_ENVELOPE_BYTES + 16..],
                &kafka[16..],
                "{codec}"
            );
            let stored = Bytes::from(stored);
            assert_eq!(decode_batch(&stored).unwrap(), expected, "{codec}");
            let mut lean = Vec::new();
            decode_kafka_batches_into(stored.slice(KAFKA_ENVELOPE_BYTES..), &mut lean).unwrap();
            assert_eq!(lean.len(), 3);
            assert_eq!(lean[1].value, expected[1].value);

            // A damaged body with its CRCs recomputed: refused by the codec.
            let mut damaged = kafka.clone();
            for byte in &mut damaged[kafka::RECORDS_AT..] {
                *byte ^= 0x5a;
            }
            let crc = crc32c(&damaged[kafka::ATTRIBUTES_AT..]);
            damaged[kafka::CRC_AT..kafka::CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
            let mut out = BytesMut::new();
            wrap_kafka_batch(&damaged, 5, usize::MAX, MAX_RECORDS_PER_BATCH, &mut out).unwrap();
            out.extend_from_slice(&damaged);
            assert!(
                matches!(
                    validate(&out, usize::MAX),
                    Err(BatchError::Compression(_) | BatchError::MalformedRecord { .. })
                ),
                "{codec}: {:?}",
                validate(&out, usize::MAX)
            );
        }
        // The native header names zstd, the Kafka batch gzip (the native CRC recomputed).
        let kafka = compressed(&plain, Codec::Gzip);
        let mut stored = wrap(&kafka, 5).unwrap().to_vec();
        stored[17] = (stored[17] & !ATTRIBUTE_CODEC_MASK) | Codec::Zstd.attribute();
        let crc = header_crc(
            &stored[..KAFKA_ENVELOPE_BYTES],
            &stored[KAFKA_ENVELOPE_BYTES..],
        );
        stored[12..16].copy_from_slice(&crc.to_be_bytes());
        assert!(validate(&stored, usize::MAX).is_err());
        // A codec number no codec has.
        stored[17] |= 0x07;
        let crc = header_crc(
            &stored[..KAFKA_ENVELOPE_BYTES],
            &stored[KAFKA_ENVELOPE_BYTES..],
        );
        stored[12..16].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            validate(&stored, usize::MAX),
            Err(BatchError::UnknownCodec(7))
        );
    }

    /// Proves: the native `crc` of a kept batch changes with its records, even when every
    /// header field stays the same (an exact resend is told by it).
    #[test]
    fn the_header_crc_follows_the_records() {
        let one = vec![(0, None, Some(&b"aaaa"[..]), vec![])];
        let other = vec![(0, None, Some(&b"bbbb"[..]), vec![])];
        let none = (-1, -1, -1);
        let first = wrap(&kafka_batch_of(&one, 1_000, 0, none, -1), 3).unwrap();
        let second = wrap(&kafka_batch_of(&other, 1_000, 0, none, -1), 3).unwrap();
        assert_eq!(first[16..64], second[16..64], "the same header fields");
        assert_ne!(first[12..16], second[12..16]);
    }

    /// Proves: the lean Kafka reader reads a kept batch's Kafka bytes (two of them back to
    /// back) as the native decoder reads the stored batch, and refuses a damaged one.
    #[test]
    fn the_lean_kafka_reader_reads_what_is_served() {
        let kafka = kafka_batch_of(&three_records(), 1_000, 0, (-1, -1, -1), -1);
        let mut stored = wrap(&kafka, 2).unwrap().to_vec();
        stamp_base_offset(&mut stored, 10);
        let stored = Bytes::from(stored);
        let native = decode_batch(&stored).unwrap();
        let inner = stored.slice(KAFKA_ENVELOPE_BYTES..);
        let mut twice = BytesMut::from(&inner[..]);
        twice.extend_from_slice(&inner);
        let mut records = Vec::new();
        decode_kafka_batches_into(twice.freeze(), &mut records).unwrap();
        let epochless: Vec<Record> = native
            .iter()
            .cloned()
            .map(|record| Record { epoch: 0, ..record })
            .collect();
        assert_eq!(records[..3], epochless[..]);
        assert_eq!(records[3..], epochless[..]);
        let mut damaged = inner.to_vec();
        *damaged.last_mut().unwrap() ^= 1;
        assert!(matches!(
            decode_kafka_batches_into(Bytes::from(damaged), &mut Vec::new()),
            Err(BatchError::CrcMismatch { .. })
        ));
    }

    /// Proves: batches that need rewriting are not kept (the caller converts them).
    #[test]
    fn batches_that_need_rewriting_are_not_kept() {
        let records = three_records();
        let none = (-1, -1, -1);
        for (attributes, why) in [(1 << 3, "LogAppendTime"), (0x30, "control"), (5, "codec 5")] {
            let kafka = kafka_batch_of(&records, 1_000, attributes, (3, 0, 0), -1);
            assert!(wrap(&kafka, 1).is_none(), "{why}");
        }
        // Out of order records keep their deltas, negative ones too.
        let before_base = vec![(0, None, Some(&b"a"[..]), vec![]), (-1, None, None, vec![])];
        let kept = wrap(&kafka_batch_of(&before_base, 1_000, 0, none, -1), 1).unwrap();
        let timestamps: Vec<i64> = decode_batch(&kept)
            .unwrap()
            .iter()
            .map(|record| record.timestamp)
            .collect();
        assert_eq!(timestamps, [1_000, 999]);
        let transactional_without_producer = kafka_batch_of(&records, 1_000, 0x10, none, -1);
        assert!(wrap(&transactional_without_producer, 1).is_none());
        let mut wrong_max = kafka_batch_of(&records, 1_000, 0, none, -1);
        wrong_max[kafka::MAX_TIMESTAMP_AT + 7] ^= 1;
        assert!(wrap(&wrong_max, 1).is_none());
        let plain = kafka_batch_of(&records, 1_000, 0, none, -1);
        assert!(wrap(&plain, 1).is_some());
        let mut out = BytesMut::new();
        assert!(wrap_kafka_batch(&plain, 1, plain.len() + 63, 1_000, &mut out).is_none());
        assert!(wrap_kafka_batch(&plain, 1, usize::MAX, 2, &mut out).is_none());
        assert!(out.is_empty());
    }

    /// Proves: damage anywhere a checksum covers is refused as a CRC mismatch, and a Kafka
    /// header that disagrees with the native one (checksums recomputed) is refused too.
    #[test]
    fn damage_and_disagreement_are_refused() {
        let kafka = kafka_batch_of(&three_records(), 1_000, 0, (-1, -1, -1), -1);
        let stored = wrap(&kafka, 4).unwrap().to_vec();
        for at in [20, 30, KAFKA_ENVELOPE_BYTES + 30, stored.len() - 1] {
            let mut damaged = stored.clone();
            damaged[at] ^= 0x40;
            assert!(
                matches!(
                    validate(&damaged, usize::MAX),
                    Err(BatchError::CrcMismatch { .. })
                ),
                "byte {at}"
            );
        }
        // The record count says 2 in the native header (its CRC recomputed).
        let mut disagreeing = stored.clone();
        disagreeing[28..32].copy_from_slice(&2u32.to_be_bytes());
        let crc = header_crc(
            &disagreeing[..KAFKA_ENVELOPE_BYTES],
            &disagreeing[KAFKA_ENVELOPE_BYTES..],
        );
        disagreeing[12..16].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            validate(&disagreeing, usize::MAX),
            Err(BatchError::KafkaHeaderMismatch("recordsCount"))
        );
        // A base offset stamped in one place only.
        let mut half_stamped = stored.clone();
        half_stamped[..8].copy_from_slice(&9u64.to_be_bytes());
        assert_eq!(
            validate(&half_stamped, usize::MAX),
            Err(BatchError::KafkaHeaderMismatch("baseOffset"))
        );
    }
}
