//! The batch builder: how a producer (and the tools, and the tests) writes a new batch.
//!
//! Why apart: encoding is the one job of the batch format that only the sending side does; it
//! writes its header through [`NewHeader`] like every other encoder.

use bytes::{BufMut, Bytes, BytesMut};

use super::{
    NewHeader, ProducerStamp, ATTRIBUTE_TRANSACTIONAL, HEADER_BYTES, NULL_HEADER_VALUE,
    PRODUCER_HEADER_BYTES,
};
use crate::compression::{Codec, CompressionError};

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
    pub(super) attributes: u8,
    first_timestamp: Option<i64>,
    max_timestamp: i64,
    count: u32,
    /// Room for the header (filled in by [`NewHeader::write`]), then the records.
    buf: BytesMut,
    /// The codec [`finish`](Self::finish) compresses with: anything but [`Codec::None`] makes
    /// the batch a magic-2 one (see [`compression`](Self::compression)).
    codec: Codec,
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
            codec: Codec::None,
        }
    }

    /// Compresses the batch with `codec` when it is finished: the records are written as a Kafka
    /// record batch v2 compressed with `codec`, behind the native header (magic 2, see
    /// [`compress_native`](super::compress_native)), the one compressed format the log stores and
    /// serves to native and Kafka consumers alike. The same records, epoch, timestamps, producer
    /// and transactional bit as uncompressed. Fails for a codec this build lacks (the
    /// `compression` feature).
    pub fn compression(mut self, codec: Codec) -> Result<Self, CompressionError> {
        if !codec.is_built() {
            return Err(CompressionError::NotBuilt { codec });
        }
        self.codec = codec;
        Ok(self)
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
        let native = out.freeze();
        if self.codec == Codec::None || self.count == 0 {
            return native;
        }
        // Compressing in memory fails only for a codec this build lacks, which `compression`
        // refused: the batch goes uncompressed rather than not at all.
        super::compress_native(&native, self.codec).unwrap_or_else(|error| {
            debug_assert!(false, "compressing a built batch failed: {error}");
            native
        })
    }
}
