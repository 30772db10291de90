//! Kafka record batches (v2) ⇄ fencelog batches: what a Kafka `Produce` carries becomes batches
//! the partition appends, and what a fetch reads becomes batches a Kafka consumer decodes.
//!
//! The Kafka record batch v2 (magic 2; `DefaultRecordBatch.java` in Kafka), all integers
//! big-endian:
//!
//! | offset | size | field                | note |
//! |-------:|-----:|----------------------|------|
//! | 0      | 8    | baseOffset           | 0 from producers |
//! | 8      | 4    | batchLength          | bytes after this field |
//! | 12     | 4    | partitionLeaderEpoch | -1 from producers |
//! | 16     | 1    | magic (= 2)          | the same byte as our magic: 0/1 are legacy message sets |
//! | 17     | 4    | crc                  | CRC32C of bytes `[21, end)` |
//! | 21     | 2    | attributes           | bits 0-2 compression, 3 timestamp type, 4 transactional, 5 control |
//! | 23     | 4    | lastOffsetDelta      | records - 1 |
//! | 27     | 8    | baseTimestamp        | |
//! | 35     | 8    | maxTimestamp         | |
//! | 43     | 8    | producerId           | -1 without idempotence |
//! | 51     | 2    | producerEpoch        | |
//! | 53     | 4    | baseSequence         | |
//! | 57     | 4    | records count        | outside the compressed part |
//! | 61     | …    | records              | compressed as a whole when the codec is not none |
//!
//! Each record: `length` varint (bytes after it), `attributes` i8 (unused), `timestampDelta`
//! varlong (from baseTimestamp), `offsetDelta` varint, `keyLength` varint (-1 = null), key,
//! `valueLength` varint, value, `headerCount` varint, then per header `keyLength` varint, key
//! (UTF-8), `valueLength` varint (-1 = null), value. Varints are zigzag (`super::varint`).
//!
//! Nothing here trusts a count or length read from the wire to size an allocation: buffers are
//! sized by the bytes actually present (and capped by [`RecordLimits`]).

use kafka_protocol::ResponseError;
use thiserror::Error;

use crate::batch::{BatchError, BatchParts, ProducerStamp, MAX_RECORDS_PER_BATCH};
use crate::storage::config::DEFAULT_MAX_BATCH_BYTES;

/// Size of a Kafka record batch v2 header, up to and including the records count.
pub const KAFKA_HEADER_BYTES: usize = crate::batch::KAFKA_HEADER_BYTES;
/// The Kafka record batch format this module reads and writes.
pub const KAFKA_MAGIC: u8 = crate::batch::MAGIC_KAFKA;

/// Byte offsets of the v2 header fields (see the table in the module doc) and its attribute
/// bits: the library's one copy, which the store's magic-2 batches use too.
pub(crate) use crate::batch::kafka_layout as layout;

/// Limits on what one Kafka `records` field may expand into. Every count and length read from
/// the wire is checked against these before it can cost memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLimits {
    /// The most bytes decompression may produce, summed over every batch of one `records`
    /// field: a decompression bomb stops here with [`RecordsError::DecompressedTooLarge`].
    pub max_decompressed_bytes: usize,
    /// The largest native batch a conversion may produce (the partition's `max_batch_bytes`).
    pub max_batch_bytes: usize,
    /// The most records one batch may hold.
    pub max_records_per_batch: u32,
}

impl RecordLimits {
    /// Default [`max_decompressed_bytes`](Self::max_decompressed_bytes): the server's maximum
    /// batch size, since the records have to fit in one native batch anyway.
    pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = DEFAULT_MAX_BATCH_BYTES;
    /// Default [`max_batch_bytes`](Self::max_batch_bytes): the storage default.
    pub const DEFAULT_MAX_BATCH_BYTES: usize = DEFAULT_MAX_BATCH_BYTES;
    /// Default [`max_records_per_batch`](Self::max_records_per_batch): the native format's
    /// bound.
    pub const DEFAULT_MAX_RECORDS_PER_BATCH: u32 = MAX_RECORDS_PER_BATCH;

    /// Limits for a partition whose batches may be `max_batch_bytes` long: decompression is
    /// capped at the same size.
    pub fn for_max_batch_bytes(max_batch_bytes: usize) -> Self {
        Self {
            max_decompressed_bytes: max_batch_bytes,
            max_batch_bytes,
            max_records_per_batch: MAX_RECORDS_PER_BATCH,
        }
    }
}

impl Default for RecordLimits {
    fn default() -> Self {
        Self {
            max_decompressed_bytes: Self::DEFAULT_MAX_DECOMPRESSED_BYTES,
            max_batch_bytes: Self::DEFAULT_MAX_BATCH_BYTES,
            max_records_per_batch: Self::DEFAULT_MAX_RECORDS_PER_BATCH,
        }
    }
}

/// A Kafka batch's compression codec (attributes bits 0-2): the library's one codec type.
pub use crate::compression::Codec as KafkaCompression;

/// One Kafka batch converted into one native batch, ready for the partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertedBatch {
    /// The batch the partition appends: the Kafka batch kept as it arrived behind a native
    /// header (magic 2) when nothing in it needs rewriting (uncompressed, CreateTime, ...: see
    /// `crate::batch::wrap_kafka_batch`), else a native batch, magic 3 with a producer or
    /// magic 1; base offset 0 (the broker stamps it), header epoch = the `epoch` the
    /// conversion was given. A kept batch is its envelope and a slice of the request's
    /// `records` (no copy); a converted one is one buffer.
    pub bytes: BatchParts,
    /// Records in the batch (at least 1).
    pub record_count: u32,
    /// The idempotent producer's identity and sequence, copied from the Kafka header when its
    /// `producerId >= 0`.
    pub producer: Option<ProducerStamp>,
    /// Whether the Kafka batch was transactional (carried into the native batch's attributes;
    /// the produce handler decides whether the request may write one).
    pub transactional: bool,
    /// The native batch's `first_timestamp` (the earliest record's timestamp).
    pub first_timestamp: i64,
    /// The native batch's `max_timestamp`.
    pub max_timestamp: i64,
    /// The Kafka batch's compression codec.
    pub compression: KafkaCompression,
    /// Bytes the Kafka batch took on the wire.
    pub kafka_bytes: usize,
}

/// Why a `records` field (or a stored batch on its way to a Kafka consumer) was refused. Each
/// maps to one Kafka error code ([`kafka_error_code`](Self::kafka_error_code)).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RecordsError {
    /// No batch at all.
    #[error("the records field is empty: a produce must carry at least one record batch")]
    Empty,
    /// A batch's header or declared length runs past the bytes present.
    #[error(
        "record batch at byte {position} is cut short: it needs {needed} bytes, {available} are present"
    )]
    Truncated {
        /// Where the batch starts in the `records` field.
        position: usize,
        /// Bytes the header or `batchLength` asks for.
        needed: u64,
        /// Bytes present from `position` on.
        available: usize,
    },
    /// `batchLength` is smaller than a v2 header.
    #[error(
        "record batch at byte {position} declares batchLength {declared}, less than a v2 header"
    )]
    BadBatchLength {
        /// Where the batch starts.
        position: usize,
        /// The declared `batchLength`.
        declared: i32,
    },
    /// A magic 0 or 1 message set (clients before Kafka 0.11).
    #[error(
        "record batch at byte {position} is a magic-{magic} message set: only record batches v2 (magic 2, Kafka 0.11+ clients) are accepted"
    )]
    LegacyMessageFormat {
        /// Where the batch starts.
        position: usize,
        /// Its magic byte (0 or 1).
        magic: u8,
    },
    /// A magic byte that is no Kafka format.
    #[error("record batch at byte {position} has unknown magic {magic} (expected 2)")]
    UnsupportedMagic {
        /// Where the batch starts.
        position: usize,
        /// Its magic byte.
        magic: u8,
    },
    /// The CRC32C does not match the batch.
    #[error(
        "record batch CRC32C mismatch: header says {expected:#010x}, content gives {actual:#010x}"
    )]
    CrcMismatch {
        /// CRC in the header.
        expected: u32,
        /// CRC of the content.
        actual: u32,
    },
    /// Compression codec 5-7.
    #[error("unknown compression codec {codec} in batch attributes (0-4: none, gzip, snappy, lz4, zstd)")]
    UnknownCompression {
        /// The codec number.
        codec: u8,
    },
    /// Attribute bits other than compression and timestamp type (delete horizon, unknown).
    #[error(
        "batch attributes {attributes:#06x} set bits a producer may not set (only compression and timestamp type are accepted)"
    )]
    UnsupportedAttributes {
        /// The attributes field.
        attributes: i16,
    },
    /// A transactional batch without a producer id.
    #[error("a transactional batch must carry its producer id (producerId >= 0)")]
    Transactional,
    /// A control batch (transaction marker).
    #[error("control batches (transaction markers) may not be produced")]
    ControlBatch,
    /// A records count of zero or below.
    #[error("batch declares {count} records: a batch must hold at least one")]
    BadRecordCount {
        /// The declared count.
        count: i32,
    },
    /// More records than [`RecordLimits::max_records_per_batch`].
    #[error("batch declares {count} records, more than the {max} a batch may hold")]
    TooManyRecords {
        /// The declared count.
        count: i32,
        /// The limit.
        max: u32,
    },
    /// `lastOffsetDelta` is not `count - 1`.
    #[error(
        "batch lastOffsetDelta {last_offset_delta} does not match its {record_count} records (it must be count - 1)"
    )]
    LastOffsetDeltaMismatch {
        /// The header's `lastOffsetDelta`.
        last_offset_delta: i32,
        /// The header's records count.
        record_count: i32,
    },
    /// An idempotent batch (`producerId >= 0`) with a negative epoch or sequence.
    #[error(
        "batch of producerId {producer_id} has producerEpoch {producer_epoch} and baseSequence {base_sequence}: both must be >= 0"
    )]
    BadProducerFields {
        /// The producer id.
        producer_id: i64,
        /// The producer epoch.
        producer_epoch: i16,
        /// The base sequence.
        base_sequence: i32,
    },
    /// The codec could not decompress the records.
    #[error("{codec} decompression failed: {reason}")]
    Decompression {
        /// The batch's codec.
        codec: KafkaCompression,
        /// The codec's complaint.
        reason: String,
    },
    /// This build has no codecs (the `compression` feature is off).
    #[error("{codec} batches need the `compression` feature, which this build lacks")]
    CompressionNotBuilt {
        /// The batch's codec.
        codec: KafkaCompression,
    },
    /// Decompression would produce more than [`RecordLimits::max_decompressed_bytes`] (summed
    /// over the `records` field).
    #[error("decompressed records exceed the limit of {limit} bytes for one produce partition")]
    DecompressedTooLarge {
        /// Bytes still allowed when the batch was decompressed.
        limit: usize,
    },
    /// The native batch would exceed [`RecordLimits::max_batch_bytes`].
    #[error("the converted batch exceeds the maximum batch size of {max} bytes")]
    BatchTooLarge {
        /// The limit.
        max: usize,
    },
    /// A record does not parse, or the records do not fill the batch exactly.
    #[error("malformed record {index}: {reason}")]
    MalformedRecord {
        /// Index of the record in its batch.
        index: u32,
        /// What was wrong.
        reason: &'static str,
    },
    /// A record's `offsetDelta` is not its index.
    #[error("record {index} has offsetDelta {offset_delta}: offset deltas must run 0, 1, 2, …")]
    OffsetDeltaMismatch {
        /// Index of the record.
        index: u32,
        /// Its `offsetDelta`.
        offset_delta: i32,
    },
    /// A header key is not UTF-8 (the native format stores names as UTF-8).
    #[error("record {index} has a header key that is not UTF-8")]
    HeaderKeyNotUtf8 {
        /// Index of the record.
        index: u32,
    },
    /// `baseTimestamp + timestampDelta` overflows an `i64`.
    #[error("record {index}: baseTimestamp + timestampDelta overflows")]
    TimestampOverflow {
        /// Index of the record.
        index: u32,
    },
    /// A stored native batch that cannot be turned into a Kafka batch (damaged or cut).
    #[error("stored batch at byte {position} cannot be served to a Kafka consumer: {reason}")]
    StoredBatch {
        /// Where the batch starts in the buffer given.
        position: usize,
        /// What was wrong.
        reason: &'static str,
    },
    /// A stored batch refused by the native format's checks.
    #[error("stored batch refused: {0}")]
    Native(#[from] BatchError),
}

impl RecordsError {
    /// The Kafka error code a Produce (or Fetch) response carries for this error.
    ///
    /// Size errors are `MESSAGE_TOO_LARGE`, on which the Java producer splits its batch and
    /// retries; damaged bytes are `CORRUPT_MESSAGE`; well-formed batches this server will not
    /// take are `INVALID_RECORD`, `UNSUPPORTED_FOR_MESSAGE_FORMAT` or
    /// `UNSUPPORTED_COMPRESSION_TYPE`.
    pub fn kafka_error_code(&self) -> i16 {
        let error = match self {
            Self::Empty
            | Self::Truncated { .. }
            | Self::BadBatchLength { .. }
            | Self::CrcMismatch { .. }
            | Self::BadRecordCount { .. }
            | Self::LastOffsetDeltaMismatch { .. }
            | Self::Decompression { .. }
            | Self::MalformedRecord { .. }
            | Self::OffsetDeltaMismatch { .. }
            | Self::StoredBatch { .. }
            | Self::Native(_) => ResponseError::CorruptMessage,
            Self::LegacyMessageFormat { .. } | Self::UnsupportedMagic { .. } => {
                ResponseError::UnsupportedForMessageFormat
            }
            Self::UnknownCompression { .. } | Self::CompressionNotBuilt { .. } => {
                ResponseError::UnsupportedCompressionType
            }
            Self::UnsupportedAttributes { .. }
            | Self::Transactional
            | Self::ControlBatch
            | Self::BadProducerFields { .. }
            | Self::HeaderKeyNotUtf8 { .. }
            | Self::TimestampOverflow { .. } => ResponseError::InvalidRecord,
            Self::TooManyRecords { .. }
            | Self::DecompressedTooLarge { .. }
            | Self::BatchTooLarge { .. } => ResponseError::MessageTooLarge,
        };
        error.code()
    }
}

impl From<crate::compression::CompressionError> for RecordsError {
    fn from(error: crate::compression::CompressionError) -> Self {
        use crate::compression::CompressionError;
        match error {
            CompressionError::Failed { codec, reason } => Self::Decompression { codec, reason },
            CompressionError::TooLarge { limit } => Self::DecompressedTooLarge { limit },
            CompressionError::NotBuilt { codec } => Self::CompressionNotBuilt { codec },
        }
    }
}

/// The producer id and epoch in the header of the first Kafka batch of `records` (a Produce
/// partition's records field), or `None` if they are too short to hold a v2 header (the
/// conversion then says what is wrong). What a transactional produce is looked up by before
/// its batches are converted with the lease epoch found.
pub fn first_batch_producer(records: &[u8]) -> Option<(i64, i16)> {
    if records.len() < layout::RECORDS_AT {
        return None;
    }
    Some((
        be_i64(records, layout::PRODUCER_ID_AT),
        be_i16(records, layout::PRODUCER_EPOCH_AT),
    ))
}

/// Reads a big-endian integer at `at`; the caller has checked the bounds.
pub(crate) fn be_i16(bytes: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([bytes[at], bytes[at + 1]])
}
pub(crate) fn be_i32(bytes: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn be_i64(bytes: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}
