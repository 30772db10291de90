//! A Kafka Produce partition's `records` field → native batches, one per Kafka batch.
//!
//! Each Kafka batch is checked as a whole (length, magic, CRC32C, attributes, count against
//! `lastOffsetDelta`, producer fields) before its records are touched; then its records
//! (decompressed within [`RecordLimits`] when compressed) are walked once, each written straight
//! into the native batch. Nothing is sized by a count from the wire.

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use super::records::layout::*;
use super::records::{
    be_i16, be_i32, be_i64, ConvertedBatch, KafkaCompression, RecordLimits, RecordsError,
    KAFKA_HEADER_BYTES, KAFKA_MAGIC,
};
use super::varint::Reader;
use crate::batch::crc32c::crc32c;
use crate::batch::{
    BatchParts, NewHeader, ProducerStamp, ATTRIBUTE_TRANSACTIONAL, HEADER_BYTES, NULL_HEADER_VALUE,
    PRODUCER_HEADER_BYTES,
};
use crate::compression::decompress;

/// Native bytes a record takes beyond its key, value and header bytes (length, timestamp delta,
/// key and value lengths, header count), minus the least a Kafka record spends on the same: used
/// only to size the output buffer.
const NATIVE_GROWTH_PER_RECORD: usize = 18 - 7;

/// Converts a Produce partition's `records` field (one or more Kafka record batches v2, any
/// compression) into native batches, one per Kafka batch, each written under the fencing token
/// `epoch` (the header's `epoch` field).
///
/// - A Kafka batch with `producerId >= 0` becomes a magic-3 batch with its `producerId`,
///   `producerEpoch` and `baseSequence`; any other becomes magic 1.
/// - Keys, values and headers are copied as they are; a null header value is stored as the
///   native [`NULL_HEADER_VALUE`] length, so it reads back null, not empty. A header key must be
///   UTF-8 and at most 65535 bytes, and a record at most 65535 headers.
/// - Timestamps: each record's is Kafka's `baseTimestamp + timestampDelta` (whatever the
///   batch's timestamp type: producers write CreateTime; the header's `maxTimestamp` is
///   recomputed, not trusted). The native format stores non-negative `u32` millisecond deltas
///   from `first_timestamp`, which need not be the first record's: it is set to the batch's
///   **earliest** timestamp, so records out of order keep their timestamps exactly. A record more
///   than `u32::MAX` ms (about 49.7 days) after the earliest one is **clamped** to earliest +
///   `u32::MAX` ms.
/// - Refused with a typed error: legacy magic 0/1 message sets, a CRC32C mismatch, a declared
///   length past the bytes present, control batches (markers are the coordinator's), a
///   transactional batch without a producer id, unknown attribute bits
///   or codecs, a count of zero or above the limit, `lastOffsetDelta != count - 1`, record
///   `offsetDelta`s other than 0, 1, 2, …, malformed records or trailing bytes, decompressed
///   bytes above [`RecordLimits::max_decompressed_bytes`] (summed over the field), a native
///   batch above [`RecordLimits::max_batch_bytes`].
///
/// The native batches have base offset 0 (the broker stamps it) and pass
/// [`crate::batch::validate`].
pub fn to_native_batches(
    records: &Bytes,
    epoch: u64,
    limits: &RecordLimits,
) -> Result<Vec<ConvertedBatch>, RecordsError> {
    if records.is_empty() {
        return Err(RecordsError::Empty);
    }
    let mut converter = Converter {
        epoch,
        limits,
        decompressed_budget: limits.max_decompressed_bytes,
        decompressed: Vec::new(),
        out: BytesMut::new(),
    };
    let mut converted = Vec::new();
    let mut position = 0;
    while position < records.len() {
        let length = kafka_batch_len(&records[position..], position)?;
        let kafka = &records[position..position + length];
        converted.push(
            match converter.keep_as_is(records, position..position + length) {
                Some(kept) => kept,
                None => converter.batch(kafka)?,
            },
        );
        position += length;
    }
    Ok(converted)
}

/// The length of the Kafka batch at the start of `rest` (which starts at `position` in the
/// records field), after checking its magic and that the bytes it declares are present.
fn kafka_batch_len(rest: &[u8], position: usize) -> Result<usize, RecordsError> {
    let truncated = |needed: u64| RecordsError::Truncated {
        position,
        needed,
        available: rest.len(),
    };
    // Every message format, legacy ones included, has its magic at byte 16.
    let magic = *rest
        .get(MAGIC_AT)
        .ok_or(truncated(KAFKA_HEADER_BYTES as u64))?;
    match magic {
        KAFKA_MAGIC => {}
        0 | 1 => return Err(RecordsError::LegacyMessageFormat { position, magic }),
        _ => return Err(RecordsError::UnsupportedMagic { position, magic }),
    }
    if rest.len() < KAFKA_HEADER_BYTES {
        return Err(truncated(KAFKA_HEADER_BYTES as u64));
    }
    let declared = be_i32(rest, LENGTH_AT);
    if declared < (KAFKA_HEADER_BYTES - LENGTH_FIELD_END) as i32 {
        return Err(RecordsError::BadBatchLength { position, declared });
    }
    let length = LENGTH_FIELD_END as u64 + declared as u64;
    if length > rest.len() as u64 {
        return Err(truncated(length));
    }
    Ok(length as usize)
}

/// State shared by the batches of one records field: the limits, the decompression budget left,
/// and buffers reused from batch to batch.
struct Converter<'a> {
    epoch: u64,
    limits: &'a RecordLimits,
    decompressed_budget: usize,
    decompressed: Vec<u8>,
    /// Each native batch is written here, then split off (so batches share few allocations).
    out: BytesMut,
}

/// What the header of a Kafka batch says, once checked.
struct KafkaHeader {
    compression: KafkaCompression,
    record_count: u32,
    base_timestamp: i64,
    producer: Option<ProducerStamp>,
    /// The batch is part of its producer's transaction.
    transactional: bool,
}

impl Converter<'_> {
    /// One whole Kafka batch kept as it arrived, behind a native header (magic 2, see
    /// `crate::batch::wrap_kafka_batch`), when nothing in it needs rewriting; `None` when it
    /// must be converted. Its CRC32C is checked by the partition when it appends the batch.
    fn keep_as_is(&mut self, records: &Bytes, range: Range<usize>) -> Option<ConvertedBatch> {
        let kafka = &records[range.clone()];
        self.out.clear();
        let kept = crate::batch::wrap_kafka_batch(
            kafka,
            self.epoch,
            self.limits.max_batch_bytes,
            self.limits.max_records_per_batch,
            &mut self.out,
        )?;
        let written = self.out.split().freeze();
        Some(ConvertedBatch {
            bytes: if kept.kafka_copied {
                written.into()
            } else {
                BatchParts::kept_kafka(written, records.slice(range))
            },
            record_count: kept.record_count,
            producer: kept.producer,
            transactional: kept.transactional,
            first_timestamp: kept.first_timestamp,
            max_timestamp: kept.max_timestamp,
            compression: kept.codec,
            kafka_bytes: kafka.len(),
        })
    }

    /// Converts one whole Kafka batch (exactly its bytes).
    fn batch(&mut self, kafka: &[u8]) -> Result<ConvertedBatch, RecordsError> {
        let header = check_header(kafka, self.limits)?;
        let records: &[u8] = if header.compression == KafkaCompression::None {
            &kafka[RECORDS_AT..]
        } else {
            self.decompressed.clear();
            decompress(
                header.compression,
                &kafka[RECORDS_AT..],
                self.decompressed_budget,
                &mut self.decompressed,
            )?;
            self.decompressed_budget -= self.decompressed.len();
            &self.decompressed
        };
        let header_len = if header.producer.is_some() {
            PRODUCER_HEADER_BYTES
        } else {
            HEADER_BYTES
        };
        let plausible_records = (header.record_count as usize).min(records.len() / 7 + 1);
        let estimate = header_len + records.len() + plausible_records * NATIVE_GROWTH_PER_RECORD;
        self.out.clear();
        self.out
            .reserve(estimate.min(self.limits.max_batch_bytes.saturating_add(1)));
        self.out.put_bytes(0, header_len);
        let mut write = RecordWriter {
            out: &mut self.out,
            max_batch_bytes: self.limits.max_batch_bytes,
            record_count: header.record_count,
            base_timestamp: header.base_timestamp,
        };
        let mut times = write.records(records, header.base_timestamp)?;
        if times.earliest < times.first {
            // A record earlier than baseTimestamp: write the records again from the earliest
            // one, so that every delta is non-negative (rare: the Java client and librdkafka
            // set baseTimestamp to the first record's, and timestamps usually rise).
            write.out.truncate(header_len);
            times = write.records(records, times.earliest)?;
        }
        self.finish_header(&header, &times);
        let bytes = self.out.split().freeze();
        debug_assert!(
            crate::batch::validate(&bytes, usize::MAX).is_ok(),
            "a converted batch must be a valid native batch"
        );
        Ok(ConvertedBatch {
            bytes: bytes.into(),
            record_count: header.record_count,
            producer: header.producer,
            transactional: header.transactional,
            first_timestamp: times.first,
            max_timestamp: times.max_stored,
            compression: header.compression,
            kafka_bytes: kafka.len(),
        })
    }

    /// Fills the native header in front of the records in `self.out`, CRC last.
    fn finish_header(&mut self, header: &KafkaHeader, times: &Timestamps) {
        NewHeader {
            epoch: self.epoch,
            record_count: header.record_count,
            first_timestamp: times.first,
            max_timestamp: times.max_stored,
            producer: header.producer,
            attributes: if header.transactional {
                ATTRIBUTE_TRANSACTIONAL
            } else {
                0
            },
        }
        .write(&mut self.out);
    }
}

/// The checks of a Kafka batch's header (its length and magic were checked by
/// [`kafka_batch_len`]): CRC32C first, then attributes, count and producer fields.
fn check_header(kafka: &[u8], limits: &RecordLimits) -> Result<KafkaHeader, RecordsError> {
    let expected = be_i32(kafka, CRC_AT) as u32;
    let actual = crc32c(&kafka[ATTRIBUTES_AT..]);
    if expected != actual {
        return Err(RecordsError::CrcMismatch { expected, actual });
    }
    let attributes = be_i16(kafka, ATTRIBUTES_AT);
    if attributes & CONTROL_BIT != 0 {
        return Err(RecordsError::ControlBatch);
    }
    if attributes & !(COMPRESSION_MASK | TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT) != 0 {
        return Err(RecordsError::UnsupportedAttributes { attributes });
    }
    let codec = (attributes & COMPRESSION_MASK) as u8;
    let compression = KafkaCompression::from_attribute(codec)
        .ok_or(RecordsError::UnknownCompression { codec })?;
    let count = be_i32(kafka, COUNT_AT);
    if count <= 0 {
        return Err(RecordsError::BadRecordCount { count });
    }
    if count as u32 > limits.max_records_per_batch {
        return Err(RecordsError::TooManyRecords {
            count,
            max: limits.max_records_per_batch,
        });
    }
    let last_offset_delta = be_i32(kafka, LAST_OFFSET_DELTA_AT);
    if last_offset_delta != count - 1 {
        return Err(RecordsError::LastOffsetDeltaMismatch {
            last_offset_delta,
            record_count: count,
        });
    }
    let producer_id = be_i64(kafka, PRODUCER_ID_AT);
    let producer = if producer_id >= 0 {
        let producer_epoch = be_i16(kafka, PRODUCER_EPOCH_AT);
        let base_sequence = be_i32(kafka, BASE_SEQUENCE_AT);
        if producer_epoch < 0 || base_sequence < 0 {
            return Err(RecordsError::BadProducerFields {
                producer_id,
                producer_epoch,
                base_sequence,
            });
        }
        Some(ProducerStamp {
            producer_id,
            producer_epoch,
            base_sequence,
        })
    } else {
        None
    };
    // The transactional bit is carried into the native batch, which needs a producer for it.
    let transactional = attributes & TRANSACTIONAL_BIT != 0;
    if transactional && producer.is_none() {
        return Err(RecordsError::Transactional);
    }
    Ok(KafkaHeader {
        transactional,
        compression,
        record_count: count as u32,
        base_timestamp: be_i64(kafka, BASE_TIMESTAMP_AT),
        producer,
    })
}

/// Timestamps seen while writing a batch's records.
struct Timestamps {
    /// The `first_timestamp` the deltas were written from.
    first: i64,
    /// The earliest record timestamp.
    earliest: i64,
    /// The largest timestamp as stored (after clamping): the native `max_timestamp`.
    max_stored: i64,
}

/// Writes Kafka records as native records after the header placeholder in `out`.
struct RecordWriter<'a> {
    out: &'a mut BytesMut,
    max_batch_bytes: usize,
    record_count: u32,
    base_timestamp: i64,
}

impl RecordWriter<'_> {
    /// Parses `record_count` Kafka records from `records` (which they must fill exactly) and
    /// appends them as native records with timestamp deltas from `first`.
    fn records(&mut self, records: &[u8], first: i64) -> Result<Timestamps, RecordsError> {
        let mut reader = Reader::new(records);
        let mut times = Timestamps {
            first,
            earliest: i64::MAX,
            max_stored: i64::MIN,
        };
        for index in 0..self.record_count {
            let malformed = |reason| RecordsError::MalformedRecord { index, reason };
            let length = reader.varint().map_err(malformed)?;
            let length =
                usize::try_from(length).map_err(|_| malformed("negative record length"))?;
            let body = reader
                .take(length)
                .map_err(|_| malformed("record length runs past the end of the batch"))?;
            let timestamp = self.record(index, body, first)?;
            times.earliest = times.earliest.min(timestamp.actual);
            times.max_stored = times.max_stored.max(timestamp.stored);
            if self.out.len() > self.max_batch_bytes {
                return Err(RecordsError::BatchTooLarge {
                    max: self.max_batch_bytes,
                });
            }
        }
        if reader.remaining() != 0 {
            return Err(RecordsError::MalformedRecord {
                index: self.record_count,
                reason: "bytes left after the last record",
            });
        }
        Ok(times)
    }

    /// Converts one record's body (the bytes after its length).
    fn record(&mut self, index: u32, body: &[u8], first: i64) -> Result<RecordTime, RecordsError> {
        let malformed = |reason| RecordsError::MalformedRecord { index, reason };
        let mut reader = Reader::new(body);
        let _unused_attributes = reader.u8().map_err(malformed)?;
        let timestamp_delta = reader.varlong().map_err(malformed)?;
        let offset_delta = reader.varint().map_err(malformed)?;
        if offset_delta as i64 != i64::from(index) {
            return Err(RecordsError::OffsetDeltaMismatch {
                index,
                offset_delta,
            });
        }
        let key = reader.nullable_bytes().map_err(malformed)?;
        let value = reader.nullable_bytes().map_err(malformed)?;
        let header_count = reader.varint().map_err(malformed)?;
        let header_count = u16::try_from(header_count)
            .map_err(|_| malformed("header count is negative or above 65535"))?;
        let actual = self
            .base_timestamp
            .checked_add(timestamp_delta)
            .ok_or(RecordsError::TimestampOverflow { index })?;
        let delta = i128::from(actual) - i128::from(first);
        let stored_delta = delta.clamp(0, i128::from(u32::MAX)) as u32;

        let out = &mut *self.out;
        let record_start = out.len();
        out.put_u32(0); // the length, filled in below
        out.put_u32(stored_delta);
        for field in [key, value] {
            match field {
                None => out.put_i32(-1),
                Some(bytes) => {
                    out.put_i32(bytes.len() as i32);
                    out.put_slice(bytes);
                }
            }
        }
        out.put_u16(header_count);
        for _ in 0..header_count {
            let name_length = reader.varint().map_err(malformed)?;
            let name_length = u16::try_from(name_length)
                .map_err(|_| malformed("header key length is negative or above 65535"))?;
            let name = reader.take(name_length.into()).map_err(malformed)?;
            if std::str::from_utf8(name).is_err() {
                return Err(RecordsError::HeaderKeyNotUtf8 { index });
            }
            let header_value = reader.nullable_bytes().map_err(malformed)?;
            out.put_u16(name_length);
            out.put_slice(name);
            match header_value {
                // A Kafka length is an i32, so a real value never reaches NULL_HEADER_VALUE.
                None => out.put_u32(NULL_HEADER_VALUE),
                Some(value) => {
                    out.put_u32(value.len() as u32);
                    out.put_slice(value);
                }
            }
        }
        if reader.remaining() != 0 {
            return Err(malformed("record length does not match its fields"));
        }
        let record_length = out.len() - record_start - 4;
        let record_length =
            u32::try_from(record_length).map_err(|_| RecordsError::BatchTooLarge {
                max: self.max_batch_bytes,
            })?;
        out[record_start..record_start + 4].copy_from_slice(&record_length.to_be_bytes());
        Ok(RecordTime {
            actual,
            stored: first + i64::from(stored_delta),
        })
    }
}

/// A record's timestamp as sent and as stored (different only when clamped).
struct RecordTime {
    actual: i64,
    stored: i64,
}
