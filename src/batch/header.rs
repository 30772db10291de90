//! The batch header: reading its fields ([`BatchHeader`], [`ProducerStamp`]), stamping the base
//! offset the broker assigns, and writing a new header ([`NewHeader`]).
//!
//! Why apart: the header's layout (the table in the parent module's doc) is read and written in
//! this one file only, so the reader and the writer cannot drift from each other.

use bytes::BufMut;

use super::{
    kafka_batch, ATTRIBUTES_AT, ATTRIBUTE_CONTROL, ATTRIBUTE_TRANSACTIONAL, BASE_OFFSET_AT,
    BASE_SEQUENCE_AT, COUNT_AT, CRC_AT, CRC_START, EPOCH_AT, FIRST_TIMESTAMP_AT, HEADER_BYTES,
    INNER_BASE_OFFSET_AT, KAFKA_ENVELOPE_BYTES, LENGTH_AT, MAGIC, MAGIC_AT, MAGIC_KAFKA,
    MAGIC_WITH_PRODUCER, MAX_SEQUENCE, MAX_TIMESTAMP_AT, PRODUCER_EPOCH_AT, PRODUCER_HEADER_BYTES,
    PRODUCER_ID_AT, RESERVED_AT, RESERVED_SEEN,
};

pub(super) fn be_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}
pub(super) fn be_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}
pub(super) fn be_u64(bytes: &[u8], at: usize) -> u64 {
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
    /// Attribute bits ([`ATTRIBUTE_TRANSACTIONAL`], [`ATTRIBUTE_CONTROL`], the codec in
    /// [`ATTRIBUTE_CODEC_MASK`](super::ATTRIBUTE_CODEC_MASK)); a non-zero reserved field (bytes
    /// 18..20) shows here as bit [`RESERVED_SEEN`](super::RESERVED_SEEN), so validation refuses
    /// both at once.
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
            attributes: bytes[ATTRIBUTES_AT]
                | if be_u16(bytes, RESERVED_AT) != 0 {
                    RESERVED_SEEN
                } else {
                    0
                },
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

    /// The codec number in the attributes (0: uncompressed); see [`crate::compression::Codec`].
    pub fn codec_bits(&self) -> u8 {
        self.attributes & super::ATTRIBUTE_CODEC_MASK
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
    pub(super) fn put_fields(&self, magic: u8, length: usize, header: &mut [u8]) {
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
