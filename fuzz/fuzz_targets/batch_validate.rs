//! Fuzzes the record batch validator (`batch::validate`, `decode_batch`, `decode_batches`) and the
//! recovery scan that walks a segment's bytes with it.
//!
//! Input layout: byte 0 is a mode, the rest is the batch. Random bytes almost never carry a
//! matching CRC, so the mode can make the input plausible first (length field set to the real
//! length, magic/attributes fixed, CRC recomputed) and the fuzzer then explores the record
//! parser behind the CRC. Checked: no panic; a valid batch's header agrees with its bytes and it
//! decodes to exactly `record_count` records with dense offsets; stamping a base offset keeps it
//! valid; whatever `validate` refuses, `decode_batch` refuses too; the scan never claims more
//! bytes than it was given.
#![no_main]

use bytes::Bytes;
use fencelog::batch::{
    decode_batch, decode_batches, stamp_base_offset, validate, BatchError, BatchHeader, CRC_START,
    HEADER_BYTES, MAX_RECORDS_PER_BATCH,
};
use fencelog::storage::scan_segment_bytes;
use libfuzzer_sys::fuzz_target;

fn make_plausible(bytes: &mut [u8], mode: u8) {
    if bytes.len() < HEADER_BYTES {
        return;
    }
    if mode & 2 != 0 {
        bytes[16] = 1;
        bytes[17] = 0;
        bytes[18] = 0;
        bytes[19] = 0;
    }
    if mode & 4 != 0 {
        let length = bytes.len() as u32;
        bytes[8..12].copy_from_slice(&length.to_be_bytes());
    }
    let crc = crc32fast::hash(&bytes[CRC_START..]);
    bytes[12..16].copy_from_slice(&crc.to_be_bytes());
}

fuzz_target!(|data: &[u8]| {
    let [mode, rest @ ..] = data else {
        return;
    };
    let mut bytes = rest.to_vec();
    if mode & 1 != 0 {
        make_plausible(&mut bytes, *mode);
    }
    let max = if mode & 8 != 0 {
        bytes.len().saturating_sub(usize::from(mode >> 4))
    } else {
        usize::MAX
    };
    let shared = Bytes::from(bytes.clone());
    match validate(&bytes, max) {
        Ok(header) => {
            assert_eq!(header.batch_length as usize, bytes.len());
            assert!(bytes.len() <= max && bytes.len() >= HEADER_BYTES);
            assert!((1..=MAX_RECORDS_PER_BATCH).contains(&header.record_count));
            assert!(header.first_timestamp <= header.max_timestamp);
            assert_eq!(BatchHeader::parse(&bytes), Some(header));
            match decode_batch(&shared) {
                Ok(records) => {
                    assert_eq!(records.len(), header.record_count as usize);
                    for (index, record) in records.iter().enumerate() {
                        assert_eq!(record.offset, header.base_offset + index as u64);
                        assert_eq!(record.epoch, header.epoch);
                        assert!(record.timestamp >= header.first_timestamp);
                        assert!(record.timestamp <= header.max_timestamp);
                    }
                }
                // Only a base offset (outside the CRC) whose records would run past u64::MAX.
                Err(BatchError::OffsetOverflow { .. }) => assert!(header
                    .base_offset
                    .checked_add(u64::from(header.record_count))
                    .is_none()),
                Err(other) => panic!("a valid batch does not decode: {other}"),
            }
            let mut stamped = bytes.clone();
            stamp_base_offset(&mut stamped, 42);
            assert_eq!(
                validate(&stamped, max)
                    .expect("stamping keeps it valid")
                    .base_offset,
                42
            );
        }
        Err(error) => {
            assert!(!error.to_string().is_empty());
            if max == usize::MAX {
                assert!(
                    decode_batch(&shared).is_err(),
                    "decode accepted what validate refused"
                );
            }
        }
    }
    let _ = decode_batches(shared);
    let result = scan_segment_bytes(&bytes, 0, 4096);
    assert!(result.valid_bytes <= bytes.len());
    assert!(result.data_end <= bytes.len());
    // Without an invalid batch the scan covers all the data (a batch may end in zero bytes).
    assert!(result.invalid.is_some() || result.valid_bytes >= result.data_end);
});
