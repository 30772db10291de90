//! Stored batches → Kafka record batches v2 (uncompressed), for every Kafka fetch.
//!
//! A Kafka batch stored as it arrived (magic 2) is served as it is stored. A native batch is
//! converted in one pass: the Kafka header is written with gaps for its length and CRC, each
//! native record is walked once (its headers twice: once to size the record's length varint,
//! once to copy them) and written with its varints straight into the output, then the gaps are
//! filled. No allocation per record or per batch beyond growing the output buffer.

use bytes::{BufMut, Bytes, BytesMut};

use super::records::layout::*;
use super::records::{RecordsError, KAFKA_HEADER_BYTES, KAFKA_MAGIC};
use super::varint::{put_varint, put_varlong, varint_len, varlong_len, Reader};
use crate::batch::crc32c::crc32c;
use crate::batch::{
    header_len, BatchHeader, ProducerStamp, ATTRIBUTE_CONTROL, ATTRIBUTE_TRANSACTIONAL,
    KAFKA_ENVELOPE_BYTES, MAGIC_KAFKA, MAX_RECORDS_PER_BATCH, NULL_HEADER_VALUE,
};

/// Kafka's "no producer id / epoch / sequence".
const NO_PRODUCER_ID: i64 = -1;
const NO_PRODUCER_EPOCH: i16 = -1;
const NO_SEQUENCE: i32 = -1;

/// Appends stored batches (whole batches, several possibly concatenated in one `Bytes`, as a
/// fetch returns them) to `out` as Kafka record batches v2: [`to_kafka_parts`] in one buffer.
pub fn to_kafka_batches(native: &[Bytes], out: &mut BytesMut) -> Result<(), RecordsError> {
    let mut parts = Vec::new();
    to_kafka_parts(native, &mut parts)?;
    for part in parts {
        out.extend_from_slice(&part);
    }
    Ok(())
}

/// Stored batches (whole batches, several possibly concatenated in one `Bytes`, as a fetch
/// returns them) as the Kafka record batches v2 a Kafka consumer reads, appended to `parts` in
/// order:
///
/// - a magic-2 batch (a Kafka batch kept as its producer sent it, `crate::batch::kafka_batch`)
///   is served from the stored bytes: its part is a slice of them, nothing copied;
/// - a magic-1 or magic-3 batch (written by a native producer, or a Kafka batch that had to be
///   converted) is converted into a buffer shared by consecutive converted batches:
///   baseOffset = the native base offset, partitionLeaderEpoch -1, CreateTime timestamps (the
///   native `first_timestamp` and deltas), producerId/producerEpoch/baseSequence from a magic-3
///   header (else -1), CRC32C computed.
///
/// The stored batches' CRCs are not checked again here: the partition checks each batch it
/// serves. Their structure is, since a damaged batch must fail, not panic: on an error `parts`
/// is left as it was and nothing of the fetch should be served.
pub fn to_kafka_parts(native: &[Bytes], parts: &mut Vec<Bytes>) -> Result<(), RecordsError> {
    let kept = parts.len();
    let mut converted = BytesMut::new();
    for chunk in native {
        let mut position = 0;
        while position < chunk.len() {
            let rest = &chunk[position..];
            let served = match crate::batch::kafka_batch(rest) {
                Some(_) => stored_kafka_len(rest).inspect(|length| {
                    if !converted.is_empty() {
                        parts.push(converted.split().freeze());
                    }
                    parts.push(chunk.slice(position + KAFKA_ENVELOPE_BYTES..position + length));
                }),
                None => {
                    if converted.is_empty() {
                        converted.reserve(chunk.len() - position + KAFKA_HEADER_BYTES);
                    }
                    convert_batch(rest, &mut converted)
                }
            };
            match served {
                Ok(length) => position += length,
                Err(reason) => {
                    parts.truncate(kept);
                    return Err(RecordsError::StoredBatch { position, reason });
                }
            }
        }
    }
    if !converted.is_empty() {
        parts.push(converted.freeze());
    }
    Ok(())
}

/// The length of the magic-2 batch at the start of `rest`, checked to lie within it.
fn stored_kafka_len(rest: &[u8]) -> Result<usize, &'static str> {
    let header = BatchHeader::parse(rest).ok_or("shorter than a batch header")?;
    let length = header.batch_length as usize;
    if length < KAFKA_ENVELOPE_BYTES + KAFKA_HEADER_BYTES || length > rest.len() {
        return Err("a stored Kafka batch's length runs past the bytes given");
    }
    Ok(length)
}

/// Converts the native batch at the start of `rest`, returning its length.
fn convert_batch(rest: &[u8], out: &mut BytesMut) -> Result<usize, &'static str> {
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
    out.put_u8(KAFKA_MAGIC);
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
