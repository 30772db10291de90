//! Validation: everything about a batch the server checks before it writes it, and a reader
//! after it reads it (frame, CRC, header fields, every record).
//!
//! Why apart: the broker never re-encodes a batch, so these checks are all that stands between a
//! producer's bytes and every consumer's parser; kept together they are easy to audit.

use super::raw_record::{Cursor, RawRecord};
use super::{
    be_u16, header_len, stored_kafka, BatchError, BatchHeader, BatchSlices, ControlRecord,
    ProducerStamp, CRC_START, KNOWN_ATTRIBUTES, MAGIC_KAFKA, MAGIC_WITH_PRODUCER,
    MAX_RECORDS_PER_BATCH, PRODUCER_HEADER_BYTES, PRODUCER_RESERVED_AT,
};

/// Checks everything about a batch except its base offset (which the broker stamps) and returns
/// its header. `bytes` must be exactly one batch.
pub fn validate(bytes: &[u8], max_batch_bytes: usize) -> Result<BatchHeader, BatchError> {
    validate_slices(BatchSlices::new(bytes), max_batch_bytes)
}

/// [`validate`] for a batch in one or two slices (a magic-2 batch's envelope and its Kafka
/// batch, apart).
pub fn validate_slices(
    batch: BatchSlices<'_>,
    max_batch_bytes: usize,
) -> Result<BatchHeader, BatchError> {
    let header = check_frame(batch, max_batch_bytes)?;
    if header.magic != MAGIC_KAFKA || header.codec_bits() == 0 {
        // Uncompressed: the walk reads the batch's own bytes.
        validate_content(&header, batch, None, |_, _| {})?;
        return Ok(header);
    }
    INFLATED.with(|cell| {
        let mut inflated = cell.take();
        inflated.clear();
        let result = stored_kafka::inflate(&header, batch, &mut inflated).and_then(|compressed| {
            let inflated = compressed.then_some(inflated.as_slice());
            validate_content(&header, batch, inflated, |_, _| {})
        });
        // Kept for the next batch on this thread, unless a rare large one grew it.
        if inflated.capacity() <= KEPT_INFLATED_CAPACITY {
            cell.set(inflated);
        }
        result
    })?;
    Ok(header)
}

thread_local! {
    /// Where a validation inflates a compressed batch's records: one buffer per thread, so the
    /// produce path does not allocate the inflated size for every batch.
    static INFLATED: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The largest inflation buffer a thread keeps between batches: the default largest batch.
const KEPT_INFLATED_CAPACITY: usize = 8 * 1024 * 1024;

/// The checks of a batch as a whole: a header, a size within `max_batch_bytes`, a length field
/// that matches, a matching CRC.
pub(super) fn check_frame(
    batch: BatchSlices<'_>,
    max_batch_bytes: usize,
) -> Result<BatchHeader, BatchError> {
    let len = batch.len();
    let header = BatchHeader::parse(batch.head()).ok_or(BatchError::TooShort { len })?;
    if len > max_batch_bytes {
        return Err(BatchError::TooLarge {
            len,
            max: max_batch_bytes,
        });
    }
    if u64::from(header.batch_length) != len as u64 {
        return Err(BatchError::LengthMismatch {
            declared: header.batch_length.into(),
            actual: len,
        });
    }
    if header.magic == MAGIC_KAFKA {
        stored_kafka::check_crcs(&header, batch)?;
        return Ok(header);
    }
    if !batch.kafka().is_empty() {
        // Two slices are a magic-2 batch's envelope and Kafka batch, nothing else.
        return Err(BatchError::UnsupportedMagic(header.magic));
    }
    let bytes = batch.head();
    let actual = crc32fast::hash(&bytes[CRC_START..]);
    if actual != header.crc {
        return Err(BatchError::CrcMismatch {
            expected: header.crc,
            actual,
        });
    }
    Ok(header)
}

/// Structural checks of a batch whose CRC already matched: the header fields make sense and the
/// records fill the batch exactly. A CRC only proves the bytes are what the producer sent; this
/// proves a consumer can parse them. Each record is handed to `on_record` as it is checked, so a
/// decoder walks the records once, not once to check and again to decode. A compressed batch's
/// records are read from `inflated` (`stored_kafka::inflate` wrote them), which borrows as long
/// as the batch does.
pub(super) fn validate_content<'a>(
    header: &BatchHeader,
    batch: BatchSlices<'a>,
    inflated: Option<&'a [u8]>,
    mut on_record: impl FnMut(u32, RawRecord<'a>),
) -> Result<(), BatchError> {
    if header.magic == MAGIC_KAFKA {
        return stored_kafka::validate_kafka(header, batch, inflated, on_record);
    }
    let bytes = batch.head();
    let records_start =
        header_len(header.magic).ok_or(BatchError::UnsupportedMagic(header.magic))?;
    let allowed = if header.magic == MAGIC_WITH_PRODUCER {
        KNOWN_ATTRIBUTES
    } else {
        0
    };
    if header.attributes & !allowed != 0 {
        return Err(BatchError::ReservedBitsSet);
    }
    if header.magic == MAGIC_WITH_PRODUCER {
        check_producer_fields(bytes)?;
    }
    if header.is_control() {
        if !header.is_transactional() {
            return Err(BatchError::BadControlBatch(
                "the control bit is set without the transactional bit",
            ));
        }
        if header.record_count != 1 {
            return Err(BatchError::BadControlBatch(
                "a control batch holds exactly one record",
            ));
        }
    }
    if header.record_count == 0 || header.record_count > MAX_RECORDS_PER_BATCH {
        return Err(BatchError::BadRecordCount(header.record_count));
    }
    if header.max_timestamp < header.first_timestamp {
        return Err(BatchError::BadTimestamps("max_timestamp < first_timestamp"));
    }
    let mut cursor = Cursor {
        bytes,
        position: records_start,
    };
    for index in 0..header.record_count {
        let record = cursor
            .record()
            .map_err(|reason| BatchError::MalformedRecord { index, reason })?;
        let timestamp = header
            .first_timestamp
            .checked_add(record.timestamp_delta)
            .ok_or(BatchError::BadTimestamps("a record timestamp overflows"))?;
        if timestamp > header.max_timestamp {
            return Err(BatchError::BadTimestamps(
                "a record is later than max_timestamp",
            ));
        }
        if header.is_control() {
            if !record.headers.is_empty() {
                return Err(BatchError::BadControlBatch("a control record has headers"));
            }
            ControlRecord::parse(record.key, record.value).map_err(BatchError::BadControlBatch)?;
        }
        on_record(index, record);
    }
    if cursor.position != bytes.len() {
        return Err(BatchError::MalformedRecord {
            index: header.record_count,
            reason: "bytes left after the last record",
        });
    }
    Ok(())
}

/// The magic-3 fields: present, in range, reserved bytes zero.
fn check_producer_fields(bytes: &[u8]) -> Result<(), BatchError> {
    if bytes.len() < PRODUCER_HEADER_BYTES {
        return Err(BatchError::BadProducerFields(
            "a magic-3 batch is shorter than its 64-byte header",
        ));
    }
    let stamp = ProducerStamp::parse(bytes).expect("magic 3, long enough");
    if stamp.producer_id < 0 {
        return Err(BatchError::BadProducerFields("producer_id is negative"));
    }
    if stamp.producer_epoch < 0 {
        return Err(BatchError::BadProducerFields("producer_epoch is negative"));
    }
    if stamp.base_sequence < 0 {
        return Err(BatchError::BadProducerFields("base_sequence is negative"));
    }
    if be_u16(bytes, PRODUCER_RESERVED_AT) != 0 {
        return Err(BatchError::ReservedBitsSet);
    }
    Ok(())
}
