//! Decoding: stored batches back into [`Record`]s, each batch checked again on the reading
//! side, and the cut of a read at the last stable offset.
//!
//! Why apart: readers (the client, the tools, the tests) only ever decode; the checks they run
//! are the validation's own, called from here.

use bytes::Bytes;

use super::validation::{check_frame, validate_content};
use super::{
    stored_kafka, validate, BatchError, BatchHeader, BatchSlices, Record, HEADER_BYTES,
    MAX_RECORDS_PER_BATCH, MIN_RECORD_BYTES,
};

/// Splits a buffer of concatenated stored batches (a fetch result) into records, checking each
/// batch's length and CRC again on the reading side. Stops with an error at the first bad batch.
/// Control batches (transaction markers) are checked but yield no records: a marker is never
/// shown to a reader as a record.
pub fn decode_batches(buffer: Bytes) -> Result<Vec<Record>, BatchError> {
    let mut records = Vec::new();
    decode_batches_into(buffer, &mut records)?;
    Ok(records)
}

/// [`decode_batches`], appending the records to `records`.
pub fn decode_batches_into(mut buffer: Bytes, records: &mut Vec<Record>) -> Result<(), BatchError> {
    while !buffer.is_empty() {
        let header =
            BatchHeader::parse(&buffer).ok_or(BatchError::TooShort { len: buffer.len() })?;
        let length = header.batch_length as usize;
        if length > buffer.len() || length < HEADER_BYTES {
            return Err(BatchError::LengthMismatch {
                declared: length as u64,
                actual: buffer.len(),
            });
        }
        let batch = buffer.split_to(length);
        if header.is_control() {
            validate(&batch, usize::MAX)?;
            continue;
        }
        decode_batch_into(&batch, records)?;
    }
    Ok(())
}

/// Decodes one whole stored batch into its records after validating it, and checking that its
/// records' offsets exist (the base offset is stamped by the broker, outside the CRC).
pub fn decode_batch(batch: &Bytes) -> Result<Vec<Record>, BatchError> {
    let mut records = Vec::new();
    decode_batch_into(batch, &mut records)?;
    Ok(records)
}

/// [`decode_batch`], appending the records to `records` (which is left as it was on error).
pub fn decode_batch_into(batch: &Bytes, records: &mut Vec<Record>) -> Result<(), BatchError> {
    let slices = BatchSlices::new(batch);
    let header = check_frame(slices, usize::MAX)?;
    if header
        .base_offset
        .checked_add(u64::from(header.record_count))
        .is_none()
    {
        return Err(BatchError::OffsetOverflow {
            base_offset: header.base_offset,
            record_count: header.record_count,
        });
    }
    // A compressed batch's records are read from their inflated bytes, which the records
    // decoded from them share (as an uncompressed batch's share the batch).
    let mut inflated = Vec::new();
    let inflated =
        stored_kafka::inflate(&header, slices, &mut inflated)?.then(|| Bytes::from(inflated));
    let source = inflated.as_ref().unwrap_or(batch);
    let before = records.len();
    // `record_count` is not checked yet: reserve no more than the bytes can hold and than a
    // batch may have.
    let plausible = (header.record_count as usize)
        .min(MAX_RECORDS_PER_BATCH as usize)
        .min(source.len() / MIN_RECORD_BYTES + 1);
    records.reserve(plausible);
    let walked = validate_content(&header, slices, inflated.as_deref(), |index, raw| {
        records.push(raw.into_record(
            source,
            header.base_offset + u64::from(index),
            header.epoch,
            header.first_timestamp,
        ));
    });
    if let Err(error) = walked {
        records.truncate(before);
        return Err(error);
    }
    Ok(())
}

/// The whole batches of `chunks` (stored batches as a read returns them, several possibly
/// back to back in one chunk) that start below `end`: a read_committed read cut at the last
/// stable offset. Zero-copy; stops at the first batch at or past `end` (or a header that does
/// not parse, which the reader's own checks then report).
pub fn batches_below(chunks: Vec<Bytes>, end: u64) -> Vec<Bytes> {
    let mut kept = Vec::with_capacity(chunks.len());
    for chunk in chunks {
        let mut position = 0;
        while let Some(header) = BatchHeader::parse(&chunk[position..]) {
            let length = header.batch_length as usize;
            if header.base_offset >= end || length < HEADER_BYTES || position + length > chunk.len()
            {
                break;
            }
            position += length;
        }
        if position == chunk.len() {
            kept.push(chunk);
            continue;
        }
        if position > 0 {
            kept.push(chunk.slice(..position));
        }
        return kept;
    }
    kept
}
