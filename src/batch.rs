//! The record batch: the unit that producers send, the segment stores and consumers read.
//!
//! A batch travels from the producer to the disk and back to the consumer in one format, so the
//! server validates and copies it but never re-encodes it. The layout is in
//! `docs/storage-format.md`; in short (all integers big-endian):
//!
//! | offset | size | field             | covered by CRC |
//! |-------:|-----:|-------------------|----------------|
//! | 0      | 8    | base_offset       | no (stamped by the broker) |
//! | 8      | 4    | batch_length      | no (a wrong length fails the CRC) |
//! | 12     | 4    | crc               | — |
//! | 16     | 1    | magic (= 1)       | yes |
//! | 17     | 1    | attributes (= 0 on magic 1; see below) | yes |
//! | 18     | 2    | reserved (= 0)    | yes |
//! | 20     | 8    | epoch             | yes |
//! | 28     | 4    | record_count      | yes |
//! | 32     | 8    | first_timestamp   | yes |
//! | 40     | 8    | max_timestamp     | yes |
//! | 48     | …    | records (magic 1) | yes |
//!
//! Magic 3 is magic 1 plus the producer's identity, for idempotent appends (see
//! `docs/fencing.md`): the same 48 bytes, then
//!
//! | offset | size | field             | covered by CRC |
//! |-------:|-----:|-------------------|----------------|
//! | 48     | 8    | producer_id (i64, >= 0) | yes |
//! | 56     | 2    | producer_epoch (i16, >= 0) | yes |
//! | 58     | 4    | base_sequence (i32, >= 0) | yes |
//! | 62     | 2    | reserved (= 0)    | yes |
//! | 64     | …    | records           | yes |
//!
//! Magic 2 is a Kafka record batch v2 kept as a Kafka producer sent it, behind the magic-3
//! header (see `stored_kafka`): every function here reads all three formats.
//!
//! On a magic-3 batch the attributes may carry two of Kafka's bits, the rest stay zero:
//! [`ATTRIBUTE_TRANSACTIONAL`] (the batch belongs to its producer's open transaction) and
//! [`ATTRIBUTE_CONTROL`] (with the transactional bit: a transaction marker, exactly one control
//! record, see [`control_batch`]).
//!
//! Each record: `record_length u32` (bytes after this field), `timestamp_delta u32` (ms after
//! `first_timestamp`), `key_length i32` (-1 = no key), key, `value_length i32` (-1 = no value),
//! value, `header_count u16`, then per header `name_length u16`, name (UTF-8),
//! `value_length u32` ([`NULL_HEADER_VALUE`] = a null value, as Kafka has), value.

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

pub mod crc32c;
mod slices;
mod stored_kafka;
// Parts of it serve only the Kafka listener (its fetch encoder and its conversions).
#[cfg_attr(not(feature = "kafka"), allow(dead_code))]
pub(crate) mod varint;

pub use slices::{BatchParts, BatchSlices};

#[cfg(feature = "kafka")]
pub(crate) use stored_kafka::kafka_layout;
pub use stored_kafka::{
    decode_kafka_batches_into, kafka_batch, wrap_kafka_batch, WrappedKafka, INNER_BASE_OFFSET_AT,
    KAFKA_ENVELOPE_BYTES, KAFKA_HEADER_BYTES, MAGIC_KAFKA,
};

/// Size of the batch header in bytes: of a magic-1 batch, and of the fields every batch starts
/// with (the smallest a batch can be).
pub const HEADER_BYTES: usize = 48;
/// Size of a magic-3 header: the magic-1 fields, then the producer's identity.
pub const PRODUCER_HEADER_BYTES: usize = 64;
/// The batch format without a producer identity.
pub const MAGIC: u8 = 1;
/// The batch format with a producer identity (producer id, producer epoch, base sequence).
///
/// Not 2: a Kafka record batch (v2) has its magic, 2, at the same byte (16), and magic 2 is the
/// format that holds one as it arrived ([`MAGIC_KAFKA`], see `stored_kafka`).
pub const MAGIC_WITH_PRODUCER: u8 = 3;
/// The largest sequence number; the one after it is 0 (sequences wrap, as Kafka's do).
pub const MAX_SEQUENCE: i32 = i32::MAX;
/// Upper bound on records in one batch: keeps per-batch work and offsets per batch bounded.
pub const MAX_RECORDS_PER_BATCH: u32 = 1 << 20;
/// Smallest record: length, timestamp delta, key length, value length (null key and value)
/// and header count.
pub const MIN_RECORD_BYTES: usize = 4 + 4 + 4 + 4 + 2;
/// Start of the CRC-covered range.
pub const CRC_START: usize = 16;

const BASE_OFFSET_AT: usize = 0;
const LENGTH_AT: usize = 8;
const CRC_AT: usize = 12;
const MAGIC_AT: usize = 16;
const ATTRIBUTES_AT: usize = 17;
const RESERVED_AT: usize = 18;
const EPOCH_AT: usize = 20;
const COUNT_AT: usize = 28;
const FIRST_TIMESTAMP_AT: usize = 32;
const MAX_TIMESTAMP_AT: usize = 40;
const PRODUCER_ID_AT: usize = 48;
const PRODUCER_EPOCH_AT: usize = 56;
const BASE_SEQUENCE_AT: usize = 58;
const PRODUCER_RESERVED_AT: usize = 62;

/// Attribute bits of a fencelog batch (byte 17), valid only on [`MAGIC_WITH_PRODUCER`] batches,
/// the same bits as Kafka's record batch attributes: the batch is part of its producer's open
/// transaction, so read_committed readers hold it back until the transaction's marker.
pub const ATTRIBUTE_TRANSACTIONAL: u8 = 0x10;
/// The batch is a transaction marker (a control batch): set only with
/// [`ATTRIBUTE_TRANSACTIONAL`], on a batch of exactly one control record.
pub const ATTRIBUTE_CONTROL: u8 = 0x20;
/// The attribute bits a batch may carry; any other bit is refused.
const KNOWN_ATTRIBUTES: u8 = ATTRIBUTE_TRANSACTIONAL | ATTRIBUTE_CONTROL;
/// Kafka's control record key and value versions (the only ones defined).
const CONTROL_RECORD_VERSION: i16 = 0;
/// Bytes of a control record's key: version i16, type i16.
const CONTROL_KEY_BYTES: usize = 4;
/// Bytes of a control record's value: version i16, coordinator epoch i32.
const CONTROL_VALUE_BYTES: usize = 6;

/// What a control batch says about its producer's open transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlMarker {
    /// The transaction's records are dropped by read_committed readers.
    Abort,
    /// The transaction's records become visible to read_committed readers.
    Commit,
}

impl ControlMarker {
    /// Kafka's control record type (key bytes 2..4): 0 abort, 1 commit.
    pub fn kafka_type(self) -> i16 {
        match self {
            ControlMarker::Abort => 0,
            ControlMarker::Commit => 1,
        }
    }

    /// The marker of a Kafka control record type, `None` for any other type (Kafka's
    /// LEADER_CHANGE and snapshot records have no place in a fencelog log).
    pub fn from_kafka_type(control_type: i16) -> Option<Self> {
        match control_type {
            0 => Some(ControlMarker::Abort),
            1 => Some(ControlMarker::Commit),
            _ => None,
        }
    }
}

/// The content of a control batch's one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlRecord {
    /// Commit or abort.
    pub marker: ControlMarker,
    /// The epoch of the coordinator that wrote the marker (Kafka's, informative here: the
    /// fence is the batch's `epoch`).
    pub coordinator_epoch: i32,
}

impl ControlRecord {
    /// The record's key: version i16 0, type i16.
    pub fn key(&self) -> [u8; CONTROL_KEY_BYTES] {
        let mut key = [0; CONTROL_KEY_BYTES];
        key[..2].copy_from_slice(&CONTROL_RECORD_VERSION.to_be_bytes());
        key[2..].copy_from_slice(&self.marker.kafka_type().to_be_bytes());
        key
    }

    /// The record's value: version i16 0, coordinator epoch i32.
    pub fn value(&self) -> [u8; CONTROL_VALUE_BYTES] {
        let mut value = [0; CONTROL_VALUE_BYTES];
        value[..2].copy_from_slice(&CONTROL_RECORD_VERSION.to_be_bytes());
        value[2..].copy_from_slice(&self.coordinator_epoch.to_be_bytes());
        value
    }

    /// Parses a control record's key and value (Kafka's layout, version 0; a longer value is
    /// accepted as Kafka's readers do, its tail ignored).
    pub fn parse(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Self, &'static str> {
        let key = key.ok_or("a control record has no key")?;
        if key.len() != CONTROL_KEY_BYTES {
            return Err("a control record key is not 4 bytes");
        }
        if i16::from_be_bytes([key[0], key[1]]) != CONTROL_RECORD_VERSION {
            return Err("unknown control record key version");
        }
        let marker = ControlMarker::from_kafka_type(i16::from_be_bytes([key[2], key[3]]))
            .ok_or("control record type is neither abort (0) nor commit (1)")?;
        let value = value.ok_or("a control record has no value")?;
        if value.len() < CONTROL_VALUE_BYTES {
            return Err("a control record value is shorter than 6 bytes");
        }
        let coordinator_epoch = i32::from_be_bytes(value[2..6].try_into().expect("4 bytes"));
        Ok(ControlRecord {
            marker,
            coordinator_epoch,
        })
    }
}

/// A control batch: one control record (Kafka's layout: key = version i16 0 + type i16
/// (0 abort, 1 commit); value = version i16 0 + coordinator_epoch i32), with the transactional
/// and control bits set, written with fencing `epoch` for `producer_id` at `producer_epoch`.
///
/// Its base sequence is 0: the partition's producer state takes a marker without a sequence
/// check (it closes the producer's open transaction), as Kafka does for its markers.
pub fn control_batch(
    epoch: u64,
    producer_id: i64,
    producer_epoch: i16,
    marker: ControlMarker,
    coordinator_epoch: i32,
    timestamp_ms: i64,
) -> Bytes {
    let record = ControlRecord {
        marker,
        coordinator_epoch,
    };
    let mut builder = BatchBuilder::with_producer(epoch, producer_id, producer_epoch);
    builder.attributes = ATTRIBUTE_TRANSACTIONAL | ATTRIBUTE_CONTROL;
    builder.push(timestamp_ms, Some(&record.key()), Some(&record.value()));
    builder.finish()
}

/// The marker a stored control batch carries, or `None` when `bytes` is not a (whole, valid)
/// control batch. For readers that already hold a validated batch.
pub fn control_record(bytes: &[u8]) -> Option<ControlRecord> {
    let batch = BatchSlices::new(bytes);
    let header = check_frame(batch, usize::MAX).ok()?;
    if !header.is_control() {
        return None;
    }
    let mut control = None;
    validate_content(&header, batch, |_, raw| {
        control = ControlRecord::parse(raw.key, raw.value).ok();
    })
    .ok()?;
    control
}

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

fn be_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}
fn be_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}
fn be_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// The parsed header of a batch. Only built from bytes at least `HEADER_BYTES` long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record (stamped by the broker).
    pub base_offset: u64,
    /// Total bytes of the batch, header included.
    pub batch_length: u32,
    /// CRC32 of bytes `[16, batch_length)`.
    pub crc: u32,
    /// Format version.
    pub magic: u8,
    /// Attribute bits ([`ATTRIBUTE_TRANSACTIONAL`], [`ATTRIBUTE_CONTROL`]); a non-zero reserved
    /// field (bytes 18..20) shows here as bit 0x01, so validation refuses both at once.
    pub attributes: u8,
    /// The fencing token the producer wrote this batch under.
    pub epoch: u64,
    /// Number of records.
    pub record_count: u32,
    /// Timestamp of the first record (ms since the Unix epoch).
    pub first_timestamp: i64,
    /// Largest record timestamp.
    pub max_timestamp: i64,
}

impl BatchHeader {
    /// Parses the header, or `None` if `bytes` is shorter than a header. Checks nothing else.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < HEADER_BYTES {
            return None;
        }
        Some(Self {
            base_offset: be_u64(bytes, BASE_OFFSET_AT),
            batch_length: be_u32(bytes, LENGTH_AT),
            crc: be_u32(bytes, CRC_AT),
            magic: bytes[MAGIC_AT],
            attributes: bytes[ATTRIBUTES_AT] | (be_u16(bytes, RESERVED_AT) != 0) as u8,
            epoch: be_u64(bytes, EPOCH_AT),
            record_count: be_u32(bytes, COUNT_AT),
            first_timestamp: be_u64(bytes, FIRST_TIMESTAMP_AT) as i64,
            max_timestamp: be_u64(bytes, MAX_TIMESTAMP_AT) as i64,
        })
    }

    /// The epoch field alone, read before any other validation so that a stale producer always
    /// learns that it is stale. `None` if the bytes cannot hold it.
    pub fn peek_epoch(bytes: &[u8]) -> Option<u64> {
        (bytes.len() >= EPOCH_AT + 8).then(|| be_u64(bytes, EPOCH_AT))
    }

    /// The batch belongs to its producer's transaction (a data batch or a marker).
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTRIBUTE_TRANSACTIONAL != 0
    }

    /// The batch is a transaction marker, not data: never shown to a reader as a record.
    pub fn is_control(&self) -> bool {
        self.attributes & ATTRIBUTE_CONTROL != 0
    }

    /// Offset of the last record in the batch.
    pub fn last_offset(&self) -> u64 {
        self.base_offset + u64::from(self.record_count.max(1)) - 1
    }

    /// The offset after the batch.
    pub fn next_offset(&self) -> u64 {
        self.base_offset + u64::from(self.record_count)
    }
}

/// Who wrote a magic-3 batch, and where it falls in that producer's sequence: what the partition
/// needs to append each producer's batches exactly once (see `crate::storage::producer_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerStamp {
    /// The producer's id, handed out by the broker (`InitProducerId`); never negative.
    pub producer_id: i64,
    /// The producer's session: a higher epoch of the same id starts its sequences again at 0.
    pub producer_epoch: i16,
    /// Sequence number of the batch's first record; the next batch starts `record_count` later.
    pub base_sequence: i32,
}

impl ProducerStamp {
    /// The producer fields of a magic-3 batch, or `None` for a magic-1 batch (or bytes too short
    /// to tell). Checks nothing: [`validate`] refuses out-of-range fields.
    ///
    /// A magic-2 batch (a stored Kafka batch) has the same fields, -1 when its producer has no
    /// id: `None` then.
    pub fn parse(bytes: &[u8]) -> Option<ProducerStamp> {
        if bytes.len() < PRODUCER_HEADER_BYTES {
            return None;
        }
        let producer_id = be_u64(bytes, PRODUCER_ID_AT) as i64;
        match bytes[MAGIC_AT] {
            MAGIC_WITH_PRODUCER => {}
            MAGIC_KAFKA if producer_id >= 0 => {}
            _ => return None,
        }
        Some(ProducerStamp {
            producer_id,
            producer_epoch: be_u16(bytes, PRODUCER_EPOCH_AT) as i16,
            base_sequence: be_u32(bytes, BASE_SEQUENCE_AT) as i32,
        })
    }

    /// Sequence number of the last record of a batch of `record_count` records that starts here.
    pub fn last_sequence(&self, record_count: u32) -> i32 {
        add_sequence(self.base_sequence, record_count.saturating_sub(1))
    }
}

/// `sequence + delta`, wrapping from [`MAX_SEQUENCE`] to 0.
pub fn add_sequence(sequence: i32, delta: u32) -> i32 {
    let modulus = i64::from(MAX_SEQUENCE) + 1;
    ((i64::from(sequence) + i64::from(delta)) % modulus) as i32
}

/// The size of the native header of a batch with this magic (where its records start, or for
/// magic 2 its Kafka batch), or `None` for a magic this build does not know.
pub fn header_len(magic: u8) -> Option<usize> {
    match magic {
        MAGIC => Some(HEADER_BYTES),
        MAGIC_KAFKA => Some(KAFKA_ENVELOPE_BYTES),
        MAGIC_WITH_PRODUCER => Some(PRODUCER_HEADER_BYTES),
        _ => None,
    }
}

/// Writes the broker-assigned base offset into a batch (outside the CRC, so no recomputation);
/// into a magic-2 batch's Kafka batch too.
pub fn stamp_base_offset(batch: &mut [u8], base_offset: u64) {
    batch[BASE_OFFSET_AT..BASE_OFFSET_AT + 8].copy_from_slice(&base_offset.to_be_bytes());
    if let Some(at) = inner_base_offset_at(batch) {
        batch[at..at + 8].copy_from_slice(&base_offset.to_be_bytes());
    }
}

/// Where a second copy of the base offset lies in this batch: a magic-2 batch's Kafka
/// `baseOffset`, which the broker stamps with the native one. `None` for other batches.
pub fn inner_base_offset_at(batch: &[u8]) -> Option<usize> {
    kafka_batch(batch).map(|_| INNER_BASE_OFFSET_AT)
}

/// The header fields the encoder of a new batch chooses. The rest follows from them and from the
/// bytes: base offset 0 (the broker stamps it), the length and the CRC of the whole batch, magic 3
/// when a producer is named and 1 otherwise, zero attributes and reserved bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NewHeader {
    /// The fencing token the batch is written under.
    pub(crate) epoch: u64,
    /// Records in the batch.
    pub(crate) record_count: u32,
    /// The timestamp the records' deltas count from (ms since the Unix epoch).
    pub(crate) first_timestamp: i64,
    /// The largest record timestamp, as stored.
    pub(crate) max_timestamp: i64,
    /// The producer's identity and sequence, for a magic-3 batch.
    pub(crate) producer: Option<ProducerStamp>,
    /// Attribute bits (only with a producer: [`ATTRIBUTE_TRANSACTIONAL`], [`ATTRIBUTE_CONTROL`]).
    pub(crate) attributes: u8,
}

impl NewHeader {
    /// Writes the header into the front of `batch`, the whole batch with its records already in
    /// place after room for the header (`HEADER_BYTES`, or `PRODUCER_HEADER_BYTES` with a
    /// producer), then the CRC over the rest. Every encoder of native batches (the builder, the
    /// Kafka conversion) writes its header here, so the layout is written in one place only and
    /// cannot drift from [`BatchHeader::parse`] and [`ProducerStamp::parse`].
    pub(crate) fn write(&self, batch: &mut [u8]) {
        let magic = if self.producer.is_some() {
            MAGIC_WITH_PRODUCER
        } else {
            MAGIC
        };
        self.put_fields(magic, batch.len(), batch);
        let crc = crc32fast::hash(&batch[CRC_START..]);
        batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    }

    /// Writes the header's fields as `magic` into `header` (the front of a batch of `length`
    /// bytes), its `crc` left 0 for the caller, which knows what that magic's CRC covers. A
    /// magic-2 batch (a stored Kafka batch) has the producer fields even without a producer:
    /// -1, as Kafka's producers write them.
    fn put_fields(&self, magic: u8, length: usize, header: &mut [u8]) {
        let length = u32::try_from(length).expect("batch larger than 4 GiB");
        let mut header = header;
        header.put_u64(0);
        header.put_u32(length);
        header.put_u32(0);
        header.put_u8(magic);
        header.put_u8(self.attributes);
        header.put_u16(0);
        header.put_u64(self.epoch);
        header.put_u32(self.record_count);
        header.put_i64(self.first_timestamp);
        header.put_i64(self.max_timestamp);
        let (producer_id, producer_epoch, base_sequence) = match (self.producer, magic) {
            (Some(stamp), _) => (stamp.producer_id, stamp.producer_epoch, stamp.base_sequence),
            (None, MAGIC_KAFKA) => (-1, -1, -1),
            (None, _) => return,
        };
        header.put_i64(producer_id);
        header.put_i16(producer_epoch);
        header.put_i32(base_sequence);
        header.put_u16(0);
    }
}

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
    validate_content(&header, batch, |_, _| {})?;
    Ok(header)
}

/// The checks of a batch as a whole: a header, a size within `max_batch_bytes`, a length field
/// that matches, a matching CRC.
fn check_frame(batch: BatchSlices<'_>, max_batch_bytes: usize) -> Result<BatchHeader, BatchError> {
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
/// decoder walks the records once, not once to check and again to decode.
fn validate_content<'a>(
    header: &BatchHeader,
    batch: BatchSlices<'a>,
    mut on_record: impl FnMut(u32, RawRecord<'a>),
) -> Result<(), BatchError> {
    if header.magic == MAGIC_KAFKA {
        return stored_kafka::validate_kafka(header, batch, on_record);
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
            .checked_add(record.timestamp_delta.into())
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

/// A header's `value_length` that stands for a null value (no value at all, which Kafka headers
/// may have), apart from an empty one. No real value is that long: a batch is far smaller.
pub const NULL_HEADER_VALUE: u32 = u32::MAX;

/// Borrowed view of one record while walking a batch.
struct RawRecord<'a> {
    timestamp_delta: u32,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

impl RawRecord<'_> {
    /// The record at `offset` of a batch written under `epoch` whose timestamps count from
    /// `first_timestamp`; its key, value and header values are slices of `batch` (which holds
    /// the bytes this view borrows), not copies.
    fn into_record(self, batch: &Bytes, offset: u64, epoch: u64, first_timestamp: i64) -> Record {
        let to_bytes = |slice: &[u8]| batch.slice_ref(slice);
        Record {
            offset,
            epoch,
            timestamp: first_timestamp.saturating_add(i64::from(self.timestamp_delta)),
            key: self.key.map(to_bytes),
            value: self.value.map(to_bytes),
            headers: self
                .headers
                .into_iter()
                .map(|(name, value)| {
                    (
                        String::from_utf8_lossy(name).into_owned(),
                        value.map(to_bytes),
                    )
                })
                .collect(),
        }
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, len: usize, end: usize) -> Result<&'a [u8], &'static str> {
        let stop = self.position.checked_add(len).ok_or("length overflow")?;
        if stop > end {
            return Err("field runs past the end of the record");
        }
        let slice = &self.bytes[self.position..stop];
        self.position = stop;
        Ok(slice)
    }

    fn optional(&mut self, end: usize) -> Result<Option<&'a [u8]>, &'static str> {
        let length = i32::from_be_bytes(self.take(4, end)?.try_into().expect("4 bytes"));
        match length {
            -1 => Ok(None),
            n if n < -1 => Err("negative length"),
            n => Ok(Some(self.take(n as usize, end)?)),
        }
    }

    fn record(&mut self) -> Result<RawRecord<'a>, &'static str> {
        let length =
            u32::from_be_bytes(self.take(4, self.bytes.len())?.try_into().expect("4 bytes"));
        let end = self
            .position
            .checked_add(length as usize)
            .filter(|end| *end <= self.bytes.len())
            .ok_or("record length runs past the end of the batch")?;
        let timestamp_delta = u32::from_be_bytes(self.take(4, end)?.try_into().expect("4 bytes"));
        let key = self.optional(end)?;
        let value = self.optional(end)?;
        let header_count = u16::from_be_bytes(self.take(2, end)?.try_into().expect("2 bytes"));
        let mut headers = Vec::new();
        for _ in 0..header_count {
            let name_length =
                u16::from_be_bytes(self.take(2, end)?.try_into().expect("2 bytes")) as usize;
            let name = self.take(name_length, end)?;
            std::str::from_utf8(name).map_err(|_| "header name is not UTF-8")?;
            let value_length = u32::from_be_bytes(self.take(4, end)?.try_into().expect("4 bytes"));
            let header_value = match value_length {
                NULL_HEADER_VALUE => None,
                length => Some(self.take(length as usize, end)?),
            };
            headers.push((name, header_value));
        }
        if self.position != end {
            return Err("record length does not match its fields");
        }
        Ok(RawRecord {
            timestamp_delta,
            key,
            value,
            headers,
        })
    }
}

pub use crate::domain::Record;

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
    let before = records.len();
    // `record_count` is not checked yet: reserve no more than the bytes can hold and than a
    // batch may have.
    let plausible = (header.record_count as usize)
        .min(MAX_RECORDS_PER_BATCH as usize)
        .min(batch.len().saturating_sub(HEADER_BYTES) / MIN_RECORD_BYTES);
    records.reserve(plausible);
    let walked = validate_content(&header, slices, |index, raw| {
        records.push(raw.into_record(
            batch,
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

/// Builds a batch for producers. The first record's timestamp becomes `first_timestamp`; later
/// records are stored as non-negative `u32` deltas from it.
///
/// Records are written straight after room left for the header, so [`finish`](Self::finish)
/// fills the header in place and hands the same buffer on: building a batch copies each value
/// once. [`with_capacity`](Self::with_capacity) sizes that buffer up front when the caller knows
/// how big the batch will be, so it is never reallocated (and re-copied) while it grows.
#[derive(Debug)]
pub struct BatchBuilder {
    epoch: u64,
    /// `(producer_id, producer_epoch)` for a magic-3 batch; `None` for magic 1.
    producer: Option<(i64, i16)>,
    /// Attribute bits written into the header (only on a magic-3 batch).
    attributes: u8,
    first_timestamp: Option<i64>,
    max_timestamp: i64,
    count: u32,
    /// Room for the header (filled in by [`NewHeader::write`]), then the records.
    buf: BytesMut,
}

impl BatchBuilder {
    /// An empty batch written under `epoch`.
    pub fn new(epoch: u64) -> Self {
        Self::with_capacity(epoch, 0)
    }

    /// An empty batch written under `epoch`, with room for `record_bytes` bytes of records
    /// (each [`record_len`](Self::record_len) long) before its buffer has to grow.
    pub fn with_capacity(epoch: u64, record_bytes: usize) -> Self {
        Self::reusing(epoch, BytesMut::new(), record_bytes)
    }

    /// An empty batch written under `epoch` into `buf`, a buffer recycled from an earlier batch
    /// (its contents are discarded; its allocation is kept and grown to `record_bytes` bytes of
    /// records if smaller). A producer that recycles its sent batches (see
    /// [`bytes::Bytes::try_into_mut`]) builds every batch in memory that is already mapped and
    /// cached instead of faulting in a fresh megabyte per request.
    pub fn reusing(epoch: u64, buf: BytesMut, record_bytes: usize) -> Self {
        Self::reusing_with_producer(epoch, None, buf, record_bytes)
    }

    /// An empty magic-3 batch of producer `producer_id` in its session `producer_epoch`, written
    /// under `epoch`: the partition appends it once however often it is sent, given the sequence
    /// passed to [`finish_with_sequence`](Self::finish_with_sequence).
    pub fn with_producer(epoch: u64, producer_id: i64, producer_epoch: i16) -> Self {
        Self::reusing_with_producer(
            epoch,
            Some((producer_id, producer_epoch)),
            BytesMut::new(),
            0,
        )
    }

    /// [`reusing`](Self::reusing), for a magic-3 batch when `producer` is
    /// `Some((producer_id, producer_epoch))`.
    pub fn reusing_with_producer(
        epoch: u64,
        producer: Option<(i64, i16)>,
        mut buf: BytesMut,
        record_bytes: usize,
    ) -> Self {
        let header_len = if producer.is_some() {
            PRODUCER_HEADER_BYTES
        } else {
            HEADER_BYTES
        };
        buf.clear();
        buf.reserve(header_len + record_bytes);
        buf.put_bytes(0, header_len);
        Self {
            epoch,
            producer,
            attributes: 0,
            first_timestamp: None,
            max_timestamp: i64::MIN,
            count: 0,
            buf,
        }
    }

    /// Marks the batch transactional: part of its producer's open transaction, held back from
    /// read_committed readers until the transaction's marker ([`control_batch`]).
    ///
    /// # Panics
    /// On a batch without a producer (magic 1 has no attribute bits).
    pub fn transactional(mut self) -> Self {
        assert!(
            self.producer.is_some(),
            "only a producer's (magic-3) batch can be transactional"
        );
        self.attributes |= ATTRIBUTE_TRANSACTIONAL;
        self
    }

    /// Bytes a record with this key, value and headers takes in a batch.
    pub fn record_len(
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, &[u8])],
    ) -> usize {
        4 + Self::record_body_len(key, value, headers.iter().map(|(n, v)| (*n, Some(*v))))
    }

    /// [`record_len`](Self::record_len) for headers whose values may be null.
    pub fn record_len_nullable(
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) -> usize {
        4 + Self::record_body_len(key, value, headers.iter().copied())
    }

    /// A record's `length` field: its bytes after that field.
    fn record_body_len<'h>(
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl Iterator<Item = (&'h str, Option<&'h [u8]>)>,
    ) -> usize {
        let field = |value: Option<&[u8]>| value.map_or(0, |v| v.len()) + 4;
        let headers_len: usize = headers
            .map(|(name, value)| 2 + name.len() + 4 + value.map_or(0, <[u8]>::len))
            .sum();
        4 + field(key) + field(value) + 2 + headers_len
    }

    /// Records so far.
    pub fn len(&self) -> u32 {
        self.count
    }

    /// True when no record was added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes the finished batch will take.
    pub fn encoded_len(&self) -> usize {
        self.buf.len()
    }

    /// Adds a record with no headers.
    pub fn push(&mut self, timestamp: i64, key: Option<&[u8]>, value: Option<&[u8]>) {
        self.push_with_headers(timestamp, key, value, &[]);
    }

    /// Adds a record. A timestamp earlier than the batch's first is raised to it (the format
    /// stores non-negative deltas); so is one more than `u32::MAX` ms later (about 49 days).
    pub fn push_with_headers(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, &[u8])],
    ) {
        self.push_record(timestamp, key, value, headers.len(), || {
            headers.iter().map(|(name, value)| (*name, Some(*value)))
        });
    }

    /// [`push_with_headers`](Self::push_with_headers) for headers whose values may be null (a
    /// Kafka header may have no value; stored as [`NULL_HEADER_VALUE`]).
    pub fn push_with_nullable_headers(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) {
        self.push_record(timestamp, key, value, headers.len(), || {
            headers.iter().copied()
        });
    }

    fn push_record<'h, I: Iterator<Item = (&'h str, Option<&'h [u8]>)>>(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        header_count: usize,
        headers: impl Fn() -> I,
    ) {
        let first = *self.first_timestamp.get_or_insert(timestamp);
        let delta = timestamp
            .saturating_sub(first)
            .clamp(0, i64::from(u32::MAX));
        self.max_timestamp = self.max_timestamp.max(first + delta);
        let length = Self::record_body_len(key, value, headers());
        let records = &mut self.buf;
        records.reserve(4 + length);
        records.put_u32(u32::try_from(length).expect("record larger than 4 GiB"));
        records.put_u32(delta as u32);
        for part in [key, value] {
            match part {
                None => records.put_i32(-1),
                Some(bytes) => {
                    records.put_i32(i32::try_from(bytes.len()).expect("field larger than 2 GiB"));
                    records.put_slice(bytes);
                }
            }
        }
        records.put_u16(u16::try_from(header_count).expect("more than 65535 headers"));
        for (name, value) in headers() {
            records.put_u16(u16::try_from(name.len()).expect("header name over 64 KiB"));
            records.put_slice(name.as_bytes());
            match value {
                None => records.put_u32(NULL_HEADER_VALUE),
                Some(value) => {
                    let length = u32::try_from(value.len())
                        .ok()
                        .filter(|length| *length != NULL_HEADER_VALUE)
                        .expect("header value over 4 GiB");
                    records.put_u32(length);
                    records.put_slice(value);
                }
            }
        }
        self.count += 1;
    }

    /// Finishes the batch: header filled, CRC computed, base offset 0 (the broker stamps it).
    /// A producer's batch gets base sequence 0.
    pub fn finish(self) -> Bytes {
        self.finish_with_sequence(0)
    }

    /// [`finish`](Self::finish), with the producer's sequence number of the first record (only
    /// written into a magic-3 batch).
    pub fn finish_with_sequence(self, base_sequence: i32) -> Bytes {
        let mut out = self.buf;
        let first = self.first_timestamp.unwrap_or(0);
        let max = if self.count == 0 {
            first
        } else {
            self.max_timestamp
        };
        NewHeader {
            epoch: self.epoch,
            record_count: self.count,
            first_timestamp: first,
            max_timestamp: max,
            producer: self
                .producer
                .map(|(producer_id, producer_epoch)| ProducerStamp {
                    producer_id,
                    producer_epoch,
                    base_sequence,
                }),
            attributes: self.attributes,
        }
        .write(&mut out);
        out.freeze()
    }
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

/// Milliseconds since the Unix epoch, for record timestamps.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch built in a recycled buffer is byte for byte the one built fresh.
    #[test]
    fn recycled_buffer_builds_the_same_batch() {
        let build = |mut builder: BatchBuilder| {
            builder.push(1000, Some(b"key"), Some(b"value"));
            builder.push_with_headers(1005, None, Some(b"v2"), &[("h", b"x")]);
            builder.finish()
        };
        let fresh = build(BatchBuilder::new(9));
        let mut old = BytesMut::new();
        old.extend_from_slice(&[0xAA; 300]);
        let recycled = build(BatchBuilder::reusing(9, old, 10));
        assert_eq!(fresh, recycled);
        let sized = build(BatchBuilder::with_capacity(
            9,
            BatchBuilder::record_len(Some(b"key"), Some(b"value"), &[]),
        ));
        assert_eq!(fresh, sized);
    }

    /// A built batch validates and decodes back to what was pushed.
    #[test]
    fn built_batch_round_trips() {
        let mut builder = BatchBuilder::new(7);
        builder.push(1000, Some(b"k"), Some(b"v1"));
        builder.push_with_headers(1005, None, Some(b"v2"), &[("h", b"x")]);
        let batch = builder.finish();
        let header = validate(&batch, 1 << 20).unwrap();
        assert_eq!((header.epoch, header.record_count), (7, 2));
        assert_eq!((header.first_timestamp, header.max_timestamp), (1000, 1005));
        let records = decode_batch(&batch).unwrap();
        assert_eq!(records[1].value.as_deref(), Some(&b"v2"[..]));
        assert_eq!(records[1].headers[0].0, "h");
        assert_eq!(records[1].headers[0].1.as_deref(), Some(&b"x"[..]));
        assert_eq!(records[0].key.as_deref(), Some(&b"k"[..]));
    }

    /// A null header value survives the round trip apart from an empty one, and the record's
    /// length counts it as no bytes.
    #[test]
    fn null_and_empty_header_values_stay_apart() {
        let headers: &[(&str, Option<&[u8]>)] =
            &[("null", None), ("empty", Some(b"")), ("x", Some(b"1"))];
        let mut builder = BatchBuilder::new(3);
        builder.push_with_nullable_headers(1000, None, Some(b"v"), headers);
        let batch = builder.finish();
        assert_eq!(
            batch.len(),
            HEADER_BYTES + BatchBuilder::record_len_nullable(None, Some(b"v"), headers)
        );
        validate(&batch, 1 << 20).unwrap();
        let records = decode_batch(&batch).unwrap();
        let decoded: Vec<(&str, Option<&[u8]>)> = records[0]
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_deref()))
            .collect();
        assert_eq!(decoded, headers);
    }

    /// A producer's batch carries its identity and sequence, and decodes like any other.
    #[test]
    fn producer_batch_round_trips() {
        let mut builder = BatchBuilder::with_producer(4, 77, 2);
        builder.push(1000, None, Some(b"a"));
        builder.push(1001, None, Some(b"b"));
        let batch = builder.finish_with_sequence(MAX_SEQUENCE);
        let header = validate(&batch, 1 << 20).unwrap();
        assert_eq!(header.magic, MAGIC_WITH_PRODUCER);
        let stamp = ProducerStamp::parse(&batch).unwrap();
        assert_eq!(
            stamp,
            ProducerStamp {
                producer_id: 77,
                producer_epoch: 2,
                base_sequence: MAX_SEQUENCE
            }
        );
        assert_eq!(stamp.last_sequence(header.record_count), 0, "wraps");
        let records = decode_batch(&batch).unwrap();
        assert_eq!(records[1].value.as_deref(), Some(&b"b"[..]));
        assert_eq!(records[1].epoch, 4);
    }

    /// Rewrites the attribute byte of a built batch and fixes its CRC.
    fn with_attributes(batch: &[u8], attributes: u8) -> Vec<u8> {
        let mut batch = batch.to_vec();
        batch[ATTRIBUTES_AT] = attributes;
        let crc = crc32fast::hash(&batch[CRC_START..]);
        batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        batch
    }

    /// A control batch validates, carries both bits and its producer, and reads back as the
    /// marker it was written with.
    #[test]
    fn control_batch_round_trips() {
        for marker in [ControlMarker::Abort, ControlMarker::Commit] {
            let batch = control_batch(9, 42, 3, marker, 17, 1234);
            let header = validate(&batch, 1 << 20).unwrap();
            assert!(header.is_transactional() && header.is_control());
            assert_eq!((header.epoch, header.record_count), (9, 1));
            assert_eq!(header.first_timestamp, 1234);
            let stamp = ProducerStamp::parse(&batch).unwrap();
            assert_eq!((stamp.producer_id, stamp.producer_epoch), (42, 3));
            assert_eq!(
                control_record(&batch),
                Some(ControlRecord {
                    marker,
                    coordinator_epoch: 17
                })
            );
            let records = decode_batch(&batch).unwrap();
            let key = records[0].key.as_deref().unwrap();
            assert_eq!(key, [0, 0, 0, marker.kafka_type() as u8]);
        }
    }

    /// A transactional data batch validates with its bit; a plain one is not a marker.
    #[test]
    fn transactional_batch_carries_its_bit() {
        let mut builder = BatchBuilder::with_producer(2, 5, 0).transactional();
        builder.push(1, None, Some(b"v"));
        let batch = builder.finish();
        let header = validate(&batch, 1 << 20).unwrap();
        assert!(header.is_transactional() && !header.is_control());
        assert_eq!(control_record(&batch), None);
    }

    /// The bits only on magic 3, control only with transactional and one control record,
    /// unknown bits never.
    #[test]
    fn misplaced_attribute_bits_are_refused() {
        let mut plain = BatchBuilder::new(1);
        plain.push(1, None, Some(b"v"));
        let plain = plain.finish();
        for bits in [ATTRIBUTE_TRANSACTIONAL, ATTRIBUTE_CONTROL, 0x01] {
            assert_eq!(
                validate(&with_attributes(&plain, bits), 1 << 20),
                Err(BatchError::ReservedBitsSet),
                "magic 1 with {bits:#x}"
            );
        }
        let mut data = BatchBuilder::with_producer(1, 5, 0);
        data.push(1, Some(b"k"), Some(b"v"));
        let data = data.finish();
        for bits in [0x01, 0x08, 0x40, 0x80, ATTRIBUTE_TRANSACTIONAL | 0x04] {
            assert_eq!(
                validate(&with_attributes(&data, bits), 1 << 20),
                Err(BatchError::ReservedBitsSet),
                "magic 3 with {bits:#x}"
            );
        }
        for bits in [
            ATTRIBUTE_CONTROL,
            ATTRIBUTE_CONTROL | ATTRIBUTE_TRANSACTIONAL,
        ] {
            assert!(matches!(
                validate(&with_attributes(&data, bits), 1 << 20),
                Err(BatchError::BadControlBatch(_))
            ));
        }
        let marker = control_batch(1, 5, 0, ControlMarker::Commit, 0, 1);
        assert!(matches!(
            validate(&with_attributes(&marker, ATTRIBUTE_CONTROL), 1 << 20),
            Err(BatchError::BadControlBatch(_))
        ));
        let mut two = BatchBuilder::with_producer(1, 5, 0);
        two.attributes = ATTRIBUTE_TRANSACTIONAL | ATTRIBUTE_CONTROL;
        let record = ControlRecord {
            marker: ControlMarker::Abort,
            coordinator_epoch: 0,
        };
        two.push(1, Some(&record.key()), Some(&record.value()));
        two.push(1, Some(&record.key()), Some(&record.value()));
        assert!(matches!(
            validate(&two.finish(), 1 << 20),
            Err(BatchError::BadControlBatch(_))
        ));
        let mut bad_type = BatchBuilder::with_producer(1, 5, 0);
        bad_type.attributes = ATTRIBUTE_TRANSACTIONAL | ATTRIBUTE_CONTROL;
        bad_type.push(1, Some(&[0, 0, 0, 2]), Some(&record.value()));
        assert!(matches!(
            validate(&bad_type.finish(), 1 << 20),
            Err(BatchError::BadControlBatch(_))
        ));
    }

    /// Out-of-range producer fields are refused even with a matching CRC.
    #[test]
    fn negative_producer_fields_are_refused() {
        for at in [PRODUCER_ID_AT, PRODUCER_EPOCH_AT, BASE_SEQUENCE_AT] {
            let mut builder = BatchBuilder::with_producer(1, 5, 0);
            builder.push(1, None, Some(b"v"));
            let mut batch = builder.finish().to_vec();
            batch[at] = 0x80;
            let crc = crc32fast::hash(&batch[CRC_START..]);
            batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
            assert!(
                matches!(
                    validate(&batch, 1 << 20),
                    Err(BatchError::BadProducerFields(_))
                ),
                "field at {at}"
            );
        }
    }

    /// Every single-byte flip in the CRC-covered range or the length is caught.
    #[test]
    fn any_flipped_byte_is_rejected() {
        let mut builder = BatchBuilder::new(3);
        builder.push(5, Some(b"key"), Some(b"value"));
        let batch = builder.finish();
        for position in 8..batch.len() {
            let mut copy = batch.to_vec();
            copy[position] ^= 0x40;
            assert!(
                validate(&copy, 1 << 20).is_err(),
                "flip at {position} passed"
            );
        }
    }

    /// The base offset is outside the CRC so the broker can stamp it.
    #[test]
    fn stamping_base_offset_keeps_crc_valid() {
        let mut builder = BatchBuilder::new(1);
        builder.push(5, None, Some(b"v"));
        let mut batch = builder.finish().to_vec();
        stamp_base_offset(&mut batch, 42);
        assert_eq!(validate(&batch, 1 << 20).unwrap().base_offset, 42);
    }
}
