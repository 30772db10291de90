//! Why a batch was refused: the one error type of every check of the batch format.
//!
//! Why apart: the same reasons are reported by validation, decoding and the stored Kafka
//! batches, and a caller matches on them (a stale epoch, a bad CRC) without caring which
//! check found them.

use thiserror::Error;

use super::{HEADER_BYTES, MAGIC, MAGIC_KAFKA, MAGIC_WITH_PRODUCER, MAX_RECORDS_PER_BATCH};

/// Why a batch was refused. Nothing of a refused batch is ever written.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// Fewer bytes than a header.
    #[error("batch of {len} bytes is shorter than the {HEADER_BYTES}-byte header")]
    TooShort {
        /// Bytes received.
        len: usize,
    },
    /// The header's length does not match the bytes received.
    #[error("batch header declares {declared} bytes but {actual} were received")]
    LengthMismatch {
        /// `batch_length` from the header.
        declared: u64,
        /// Bytes actually present.
        actual: usize,
    },
    /// Larger than the configured maximum.
    #[error("batch of {len} bytes exceeds the maximum of {max} bytes")]
    TooLarge {
        /// Batch size.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// The CRC does not match the content.
    #[error("batch CRC mismatch: header says {expected:#010x}, content gives {actual:#010x}")]
    CrcMismatch {
        /// CRC from the header.
        expected: u32,
        /// CRC computed over the content.
        actual: u32,
    },
    /// A format version this build does not know.
    #[error(
        "unsupported batch magic {0} (expected {MAGIC}, {MAGIC_KAFKA} or {MAGIC_WITH_PRODUCER})"
    )]
    UnsupportedMagic(u8),
    /// A magic-2 batch whose Kafka header disagrees with its native header (or holds a value a
    /// stored Kafka batch never has).
    #[error("the Kafka header of a magic-2 batch disagrees with its native header: {0}")]
    KafkaHeaderMismatch(&'static str),
    /// Reserved bits are set.
    #[error("batch attributes/reserved bits must be zero")]
    ReservedBitsSet,
    /// A control batch that is not exactly one well-formed control record, or whose bits are
    /// set without the transactional one.
    #[error("invalid control batch: {0}")]
    BadControlBatch(&'static str),
    /// A batch must carry at least one and at most `MAX_RECORDS_PER_BATCH` records.
    #[error("batch record count {0} is outside 1..={MAX_RECORDS_PER_BATCH}")]
    BadRecordCount(u32),
    /// The records do not parse or do not fill the batch exactly.
    #[error("malformed record {index}: {reason}")]
    MalformedRecord {
        /// Index of the record in the batch.
        index: u32,
        /// What was wrong.
        reason: &'static str,
    },
    /// Timestamps are inconsistent.
    #[error("batch timestamps are inconsistent: {0}")]
    BadTimestamps(&'static str),
    /// The records' offsets would run past `u64::MAX`: the stamped base offset is damaged or
    /// made up (it is outside the CRC).
    #[error(
        "batch base offset {base_offset} with {record_count} records runs past the largest offset"
    )]
    OffsetOverflow {
        /// The base offset in the header.
        base_offset: u64,
        /// Records in the batch.
        record_count: u32,
    },
    /// A magic-3 batch whose producer fields are out of range (negative id, epoch or sequence,
    /// or non-zero reserved bytes), or too short to hold them.
    #[error("invalid producer fields in batch header: {0}")]
    BadProducerFields(&'static str),
    /// A compressed batch's records could not be decompressed (a corrupt body, a bomb past
    /// [`MAX_INFLATED_RECORDS_BYTES`](super::MAX_INFLATED_RECORDS_BYTES), a build without
    /// codecs).
    #[error("compressed records: {0}")]
    Compression(#[from] crate::compression::CompressionError),
    /// The attributes name a compression codec that does not exist (5-7).
    #[error("unknown compression codec {0} in the batch attributes (0-4 exist)")]
    UnknownCodec(u8),
    /// The batch header carries another epoch than the request it came with: the epoch checked
    /// by the fence must be the one stored with the records.
    #[error("batch header epoch {header} differs from the request's epoch {request}")]
    EpochMismatch {
        /// Epoch in the batch header.
        header: u64,
        /// Epoch the request was checked against.
        request: u64,
    },
}
