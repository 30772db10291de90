//! Stored batches → Kafka record batches v2, for every Kafka fetch.
//!
//! A Kafka batch stored as it arrived (magic 2, compressed or not) is served as it is stored. A
//! native batch is converted, uncompressed, by `crate::batch::native_to_kafka`.

use bytes::{Bytes, BytesMut};

use super::records::{RecordsError, KAFKA_HEADER_BYTES};
use crate::batch::{BatchHeader, KAFKA_ENVELOPE_BYTES};

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
                    crate::batch::native_to_kafka(rest, &mut converted)
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
