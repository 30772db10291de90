//! Native batches (magic 1 and 3) → Kafka record batches v2: what a Kafka fetch serves for a
//! native producer's batch, and what a native producer that compresses sends (the Kafka batch,
//! its records compressed, behind a magic-2 header: [`compress_native`]).
//!
//! Why in the library's core: the native client compresses by writing Kafka's record format
//! (one compressed format in the log, served to Kafka consumers as it is stored), so the
//! conversion is no longer the Kafka listener's alone.
//!
//! One pass: the Kafka header is written with gaps for its length and CRC, each native record is
//! walked once (its headers twice: once to size the record's length varint, once to copy them)
//! and written with its varints straight into the output, then the gaps are filled. No
//! allocation per record or per batch beyond growing the output buffer.

use bytes::{BufMut, Bytes, BytesMut};

use super::crc32c::crc32c;
use super::kafka_layout::*;
use super::varint::{put_varint, put_varlong, varint_len, varlong_len, Reader};
use super::{
    header_len, wrap_kafka_batch, BatchError, BatchHeader, ProducerStamp, ATTRIBUTE_CONTROL,
    ATTRIBUTE_TRANSACTIONAL, KAFKA_ENVELOPE_BYTES, KAFKA_HEADER_BYTES, MAGIC_KAFKA,
    MAX_RECORDS_PER_BATCH, NULL_HEADER_VALUE,
};
use crate::compression::{Codec, CompressionError};

/// Kafka's "no producer id / epoch / sequence".
const NO_PRODUCER_ID: i64 = -1;
const NO_PRODUCER_EPOCH: i16 = -1;
const NO_SEQUENCE: i32 = -1;

/// A native batch (magic 1 or 3, as [`super::BatchBuilder`] finishes it: base offset 0) as a
/// magic-2 batch whose Kafka records are compressed with `codec`: the same records, epoch,
/// timestamps, producer and transactional bit, and the codec in both headers' attributes.
pub fn compress_native(native: &[u8], codec: Codec) -> Result<Bytes, BatchError> {
    let header = BatchHeader::parse(native).ok_or(BatchError::TooShort { len: native.len() })?;
    let mut kafka = BytesMut::with_capacity(native.len() + KAFKA_HEADER_BYTES);
    native_to_kafka(native, &mut kafka)
        .map_err(|reason| BatchError::MalformedRecord { index: 0, reason })?;
    let compressed = compress_kafka_records(&kafka, codec)?;
    let mut out = BytesMut::with_capacity(KAFKA_ENVELOPE_BYTES + compressed.len());
    let wrapped = wrap_kafka_batch(
        &compressed,
        header.epoch,
        usize::MAX,
        MAX_RECORDS_PER_BATCH,
        &mut out,
    )
    .ok_or(BatchError::Compression(CompressionError::NotBuilt {
        codec,
    }))?;
    debug_assert!(!wrapped.kafka_copied);
    out.extend_from_slice(&compressed);
    Ok(out.freeze())
}

/// An uncompressed Kafka record batch v2 (exactly one, at least its header long) with its
/// records compressed by `codec`: the codec in its attributes, its length and CRC-32C
/// recomputed, every other byte as it was.
pub fn compress_kafka_records(kafka: &[u8], codec: Codec) -> Result<Vec<u8>, CompressionError> {
    let mut compressed = Vec::with_capacity(kafka.len() / 2 + KAFKA_HEADER_BYTES);
    compressed.extend_from_slice(&kafka[..RECORDS_AT]);
    crate::compression::compress(codec, &kafka[RECORDS_AT..], &mut compressed)?;
    let attributes = i16::from_be_bytes([compressed[ATTRIBUTES_AT], compressed[ATTRIBUTES_AT + 1]])
        & !COMPRESSION_MASK
        | i16::from(codec.attribute());
    compressed[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
    // A batch is far below 2 GiB (the largest is `max_batch_bytes`).
    let length = (compressed.len() - LENGTH_FIELD_END) as u32;
    compressed[LENGTH_AT..LENGTH_AT + 4].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c(&compressed[ATTRIBUTES_AT..]);
    compressed[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(compressed)
}

/// Appends the native batch (magic 1 or 3) at the start of `rest` to `out` as an uncompressed
/// Kafka record batch v2 (baseOffset the native base offset, partitionLeaderEpoch -1,
/// CreateTime, producer fields from a magic-3 header, else -1, CRC-32C computed), returning the
/// native batch's length. Checks the structure, not the CRC.
pub fn native_to_kafka(rest: &[u8], out: &mut BytesMut) -> Result<usize, &'static str> {
    let header = BatchHeader::parse(rest).ok_or("shorter than a batch header")?;
    if header.magic == MAGIC_KAFKA {
        return Err("a magic-2 batch too short to hold a Kafka batch");
    }
    let records_at = header_len(header.magic).ok_or("unknown batch magic")?;
    let length = header.batch_length as usize;
    if length < records_at {
        return Err("batch length is shorter than its header");
    }
    let batch = rest
        .get(..length)
        .ok_or("batch length runs past the bytes given")?;
    let count = header.record_count;
    if count == 0 || count > MAX_RECORDS_PER_BATCH {
        return Err("record count outside 1..=MAX_RECORDS_PER_BATCH");
    }
    let base_offset = i64::try_from(header.base_offset)
        .ok()
        .filter(|base| base.checked_add(i64::from(count)).is_some())
        .ok_or("offsets beyond Kafka's largest offset (i64::MAX)")?;
    let (producer_id, producer_epoch, base_sequence) = match ProducerStamp::parse(batch) {
        Some(stamp) => (stamp.producer_id, stamp.producer_epoch, stamp.base_sequence),
        None => (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE),
    };

    let start = out.len();
    out.put_i64(base_offset);
    out.put_i32(0); // batchLength, filled in below
    out.put_i32(NO_LEADER_EPOCH);
    out.put_u8(MAGIC_KAFKA);
    out.put_u32(0); // crc, filled in below
                    // Attributes: no compression, CreateTime; the transactional and control bits are Kafka's
                    // own (a control batch's one record already has Kafka's control key and value layout).
    out.put_i16(i16::from(
        header.attributes & (ATTRIBUTE_TRANSACTIONAL | ATTRIBUTE_CONTROL),
    ));
    out.put_i32(count as i32 - 1);
    out.put_i64(header.first_timestamp);
    out.put_i64(header.max_timestamp);
    out.put_i64(producer_id);
    out.put_i16(producer_epoch);
    out.put_i32(base_sequence);
    out.put_i32(count as i32);

    let mut reader = Reader::new(&batch[records_at..]);
    for index in 0..count {
        let length = reader.be_u32()? as usize;
        let body = reader
            .take(length)
            .map_err(|_| "record length runs past the end of the batch")?;
        write_record(index as i32, body, out)?;
    }
    if reader.remaining() != 0 {
        return Err("bytes left after the last record");
    }

    let batch_length = i32::try_from(out.len() - start - LENGTH_FIELD_END)
        .map_err(|_| "Kafka batch larger than 2 GiB")?;
    out[start + LENGTH_AT..start + LENGTH_AT + 4].copy_from_slice(&batch_length.to_be_bytes());
    let crc = crc32c(&out[start + ATTRIBUTES_AT..]);
    out[start + CRC_AT..start + CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(length)
}

/// Writes one native record's body (the bytes after its length) as a Kafka record.
#[inline]
fn write_record(offset_delta: i32, body: &[u8], out: &mut BytesMut) -> Result<(), &'static str> {
    let mut reader = Reader::new(body);
    let timestamp_delta = i64::from(reader.be_u32()?);
    let key = nullable(&mut reader)?;
    let value = nullable(&mut reader)?;
    let header_count = reader.be_u16()?;
    let headers_at = reader.position();

    // Size the headers (and check they fill the record) before writing the record's length.
    let mut headers_size = 0usize;
    for _ in 0..header_count {
        let (name, value) = native_header(&mut reader)?;
        headers_size += kafka_len(name.len())? + name.len() + field_size(value)?;
    }
    if reader.remaining() != 0 {
        return Err("record length does not match its fields");
    }
    let body_size = 1
        + varlong_len(timestamp_delta)
        + varint_len(offset_delta)
        + field_size(key)?
        + field_size(value)?
        + varint_len(i32::from(header_count))
        + headers_size;
    let body_size = i32::try_from(body_size).map_err(|_| "record larger than 2 GiB")?;

    put_varint(out, body_size);
    out.put_u8(0); // record attributes: unused
    put_varlong(out, timestamp_delta);
    put_varint(out, offset_delta);
    for field in [key, value] {
        match field {
            None => put_varint(out, -1),
            Some(bytes) => {
                put_varint(out, bytes.len() as i32);
                out.put_slice(bytes);
            }
        }
    }
    put_varint(out, i32::from(header_count));
    let mut headers = Reader::new(&body[headers_at..]);
    for _ in 0..header_count {
        let (name, value) = native_header(&mut headers)?;
        put_varint(out, name.len() as i32);
        out.put_slice(name);
        match value {
            None => put_varint(out, -1),
            Some(value) => {
                put_varint(out, value.len() as i32);
                out.put_slice(value);
            }
        }
    }
    Ok(())
}

/// Bytes a nullable Kafka field (length varint, bytes) takes.
fn field_size(field: Option<&[u8]>) -> Result<usize, &'static str> {
    match field {
        None => Ok(1),
        Some(bytes) => Ok(kafka_len(bytes.len())? + bytes.len()),
    }
}

/// A native `i32` length (-1 = null) and its bytes.
fn nullable<'a>(reader: &mut Reader<'a>) -> Result<Option<&'a [u8]>, &'static str> {
    match reader.be_i32()? {
        -1 => Ok(None),
        length if length < -1 => Err("negative key or value length"),
        length => Ok(Some(reader.take(length as usize)?)),
    }
}

/// A native header: `u16` name length, name, `u32` value length ([`NULL_HEADER_VALUE`] = null),
/// value.
fn native_header<'a>(
    reader: &mut Reader<'a>,
) -> Result<(&'a [u8], Option<&'a [u8]>), &'static str> {
    let name_length = reader.be_u16()?;
    let name = reader.take(name_length.into())?;
    let value = match reader.be_u32()? {
        NULL_HEADER_VALUE => None,
        value_length => Some(reader.take(value_length as usize)?),
    };
    Ok((name, value))
}

/// Bytes a Kafka length varint takes for `length`, refusing lengths a varint cannot carry.
fn kafka_len(length: usize) -> Result<usize, &'static str> {
    let length = i32::try_from(length).map_err(|_| "field larger than 2 GiB")?;
    Ok(varint_len(length))
}

#[cfg(all(test, feature = "compression"))]
mod tests {
    use super::super::{decode_batch, stamp_base_offset, validate, BatchBuilder};
    use super::*;

    /// Proves: a producer's batch compressed with every codec is a magic-2 batch with the
    /// codec in its attributes, smaller than the plain one, and reads back with the plain
    /// batch's records, epoch, producer and transactional bit.
    #[test]
    fn compressed_native_batches_read_back_as_the_plain_ones() {
        let build = |codec: Codec| {
            let mut builder = BatchBuilder::with_producer(9, 4, 1)
                .transactional()
                .compression(codec)
                .unwrap();
            for index in 0..200 {
                let value = format!(r#"{{"n":{index},"kind":"click","page":"/home"}}"#);
                builder.push_with_headers(
                    1_000 + index,
                    None,
                    Some(value.as_bytes()),
                    &[("h", b"v")],
                );
            }
            builder.push(999, Some(b"early"), None);
            let mut batch = builder.finish_with_sequence(17).to_vec();
            stamp_base_offset(&mut batch, 50);
            Bytes::from(batch)
        };
        let plain = build(Codec::None);
        let expected = decode_batch(&plain).unwrap();
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let batch = build(codec);
            let header = validate(&batch, usize::MAX).unwrap();
            assert_eq!(header.magic, MAGIC_KAFKA);
            assert_eq!(header.codec_bits(), codec.attribute());
            assert!(header.is_transactional());
            assert_eq!(header.epoch, 9);
            assert!(
                batch.len() < plain.len() / 2,
                "{codec}: {} bytes",
                batch.len()
            );
            assert_eq!(
                ProducerStamp::parse(&batch),
                Some(ProducerStamp {
                    producer_id: 4,
                    producer_epoch: 1,
                    base_sequence: 17
                })
            );
            assert_eq!(decode_batch(&batch).unwrap(), expected, "{codec}");
        }
    }
}
