//! The records the bench writes: one prebuilt value per producer, stamped once per batch.
//!
//! Every record of a batch carries the same value. Its first bytes (as many as fit) are a stamp
//! that lets readers measure and check what they read, all big-endian:
//!
//! | offset | size | field       | used for |
//! |-------:|-----:|-------------|----------|
//! | 0      | 8    | intended_ns | end-to-end latency in `both` (from the *intended* send time) |
//! | 8      | 8    | sent_ns     | `failover`: was the write sent after its epoch was superseded? |
//! | 16     | 4    | writer      | `failover`: which producer generation wrote it |
//! | 20     | 4    | sequence    | the writer's batch number |
//!
//! Times are nanoseconds since the run's origin (the run's `stats::Clock`), a monotonic clock
//! shared by producers and consumers in this process. The rest of the value is a fixed filler.
//!
//! This module is a leaf of the bench: it uses only the batch format ([`crate::batch`]). The
//! sizes the settings check against ([`RECORD_OVERHEAD_BYTES`], [`FAILOVER_PREFIX_BYTES`]) are
//! defined here and `config` imports them; the one limit a payload needs from the settings,
//! the most requests in flight, is handed to [`Payload::new`] by its producer.

use bytes::{Bytes, BytesMut};

use bytes::BufMut;

use crate::batch::crc32c::crc32c;
use crate::batch::now_ms;
use crate::batch::varint::{put_varint, varint_len};
use crate::batch::BatchBuilder;
use crate::server::kafka::batches::records::{KAFKA_HEADER_BYTES, KAFKA_MAGIC};

/// Bytes a record adds to its value in a batch (no key, no headers): record length,
/// timestamp delta, key length, value length, header count.
pub const RECORD_OVERHEAD_BYTES: usize = crate::batch::MIN_RECORD_BYTES;
/// Bytes of the stamp needed for end-to-end latency.
pub const LATENCY_PREFIX_BYTES: usize = 8;
/// Bytes of the stamp needed to check a failover run.
pub const FAILOVER_PREFIX_BYTES: usize = 24;

/// What a record's stamp says, as far as the value holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// When the batch was meant to be sent, ns since the origin.
    pub intended_ns: u64,
    /// When the batch was handed to the client, ns since the origin.
    pub sent_ns: u64,
    /// The producer generation that wrote it.
    pub writer: u32,
    /// The writer's batch number.
    pub sequence: u32,
}

impl Stamp {
    /// Reads the intended send time, if the value is long enough to hold it.
    pub fn intended_ns(value: &[u8]) -> Option<u64> {
        let bytes: [u8; 8] = value.get(..8)?.try_into().ok()?;
        Some(u64::from_be_bytes(bytes))
    }

    /// Reads a whole stamp, if the value is long enough to hold it.
    pub fn read(value: &[u8]) -> Option<Stamp> {
        let field = |at: usize| {
            value
                .get(at..at + 8)
                .map(|b| b.try_into().expect("8 bytes"))
        };
        let half = |at: usize| {
            value
                .get(at..at + 4)
                .map(|b| b.try_into().expect("4 bytes"))
        };
        Some(Stamp {
            intended_ns: u64::from_be_bytes(field(0)?),
            sent_ns: u64::from_be_bytes(field(8)?),
            writer: u32::from_be_bytes(half(16)?),
            sequence: u32::from_be_bytes(half(20)?),
        })
    }

    fn bytes(&self) -> [u8; FAILOVER_PREFIX_BYTES] {
        let mut out = [0u8; FAILOVER_PREFIX_BYTES];
        out[0..8].copy_from_slice(&self.intended_ns.to_be_bytes());
        out[8..16].copy_from_slice(&self.sent_ns.to_be_bytes());
        out[16..20].copy_from_slice(&self.writer.to_be_bytes());
        out[20..24].copy_from_slice(&self.sequence.to_be_bytes());
        out
    }
}

/// The producer fields of a Kafka batch from an idempotent or transactional producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KafkaBatchProducer {
    /// The producer id.
    pub id: i64,
    /// Its epoch.
    pub epoch: i16,
    /// The sequence number of the batch's first record on its partition.
    pub base_sequence: i32,
    /// Whether the batch belongs to a transaction (attribute bit 0x10).
    pub transactional: bool,
}

/// A producer's value buffer, allocated once and re-stamped for each batch, and the batches it
/// built, whose buffers are reused once the client has sent them and dropped its handles (as a
/// producer's buffer pool does in other log clients). Without it every request would allocate
/// and fault in a fresh megabyte, which the allocator hands back to the kernel when it is freed:
/// about a tenth of the CPU time of a 1 KiB x 1000 produce run on a 2-core machine.
#[derive(Debug)]
pub struct Payload {
    value: Vec<u8>,
    sent: Vec<Bytes>,
    /// Most sent batches kept for recycling: one per request the producer may have in flight,
    /// plus the one being built.
    recycle_max: usize,
}

impl Payload {
    /// A value of `record_bytes` bytes, for a producer that keeps at most `in_flight_limit`
    /// requests in flight (the bench passes its ceiling, `config::MAX_IN_FLIGHT`).
    pub fn new(record_bytes: usize, in_flight_limit: usize) -> Self {
        // A filler that is not all zeros, so nothing downstream can special-case it.
        let value = (0..record_bytes).map(|index| (index % 251) as u8).collect();
        Self {
            value,
            sent: Vec::new(),
            recycle_max: in_flight_limit + 1,
        }
    }

    /// Builds a batch of `records` records under `epoch`, every value stamped with `stamp`
    /// (truncated to the value's size).
    pub fn batch(&mut self, epoch: u64, records: u32, stamp: Stamp) -> Bytes {
        let prefix = stamp.bytes();
        let stamped = self.value.len().min(prefix.len());
        self.value[..stamped].copy_from_slice(&prefix[..stamped]);
        let record_bytes = BatchBuilder::record_len(None, Some(&self.value), &[]);
        let mut builder =
            BatchBuilder::reusing(epoch, self.recycled(), records as usize * record_bytes);
        let timestamp = now_ms();
        for _ in 0..records {
            builder.push(timestamp, None, Some(&self.value));
        }
        let batch = builder.finish();
        if self.sent.len() < self.recycle_max {
            self.sent.push(batch.clone());
        }
        batch
    }

    /// Builds a Kafka record batch v2 (uncompressed, CreateTime, no producer id, base offset 0)
    /// of `records` records, every value stamped with `stamp`, as a Kafka producer would send
    /// it (`--protocol kafka`). It is written directly, in one pass like [`Payload::batch`]
    /// (plus the batch's CRC32C), rather than converted from a native batch, so that the
    /// generator spends no more per batch than the native producer does.
    pub fn kafka_batch(
        &mut self,
        records: u32,
        stamp: Stamp,
        producer: Option<KafkaBatchProducer>,
    ) -> Bytes {
        let prefix = stamp.bytes();
        let stamped = self.value.len().min(prefix.len());
        self.value[..stamped].copy_from_slice(&prefix[..stamped]);
        let value_len = i32::try_from(self.value.len()).expect("values are at most 4 MiB");
        let mut out = self.recycled();
        out.clear();
        out.reserve(KAFKA_HEADER_BYTES + records as usize * (self.value.len() + 16));
        let timestamp = now_ms();
        let last_offset_delta = records.saturating_sub(1) as i32;
        out.put_i64(0); // baseOffset: the broker assigns offsets
        out.put_i32(0); // batchLength, filled in below
        out.put_i32(-1); // partitionLeaderEpoch
        out.put_u8(KAFKA_MAGIC);
        out.put_u32(0); // crc, filled in below
                        // attributes: no compression, CreateTime, and the transactional bit (0x10) for a
                        // transactional producer's batch.
        out.put_i16(match producer {
            Some(producer) if producer.transactional => 0x10,
            _ => 0,
        });
        out.put_i32(last_offset_delta);
        out.put_i64(timestamp); // baseTimestamp
        out.put_i64(timestamp); // maxTimestamp
        match producer {
            Some(producer) => {
                out.put_i64(producer.id);
                out.put_i16(producer.epoch);
                out.put_i32(producer.base_sequence);
            }
            None => {
                out.put_i64(-1); // producerId
                out.put_i16(-1); // producerEpoch
                out.put_i32(-1); // baseSequence
            }
        }
        out.put_i32(records as i32);
        for offset_delta in 0..records as i32 {
            // attributes, timestampDelta 0, offsetDelta, keyLength -1, valueLength, value,
            // headerCount 0.
            let length =
                1 + 1 + varint_len(offset_delta) + 1 + varint_len(value_len) + self.value.len() + 1;
            put_varint(&mut out, length as i32);
            out.put_u8(0);
            out.put_u8(0);
            put_varint(&mut out, offset_delta);
            put_varint(&mut out, -1);
            put_varint(&mut out, value_len);
            out.put_slice(&self.value);
            out.put_u8(0);
        }
        let batch_length = (out.len() - 12) as u32;
        out[8..12].copy_from_slice(&batch_length.to_be_bytes());
        let crc = crc32c(&out[21..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        let batch = out.freeze();
        if self.sent.len() < self.recycle_max {
            self.sent.push(batch.clone());
        }
        batch
    }

    /// The buffer of a sent batch nobody else holds any more, or a new empty one.
    fn recycled(&mut self) -> BytesMut {
        let Some(free) = self.sent.iter().position(Bytes::is_unique) else {
            return BytesMut::new();
        };
        self.sent
            .swap_remove(free)
            .try_into_mut()
            .unwrap_or_else(|_| BytesMut::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::decode_batches;

    #[test]
    fn stamps_round_trip_through_a_batch_and_overhead_is_exact() {
        let mut payload = Payload::new(100, 8);
        let stamp = Stamp {
            intended_ns: 7,
            sent_ns: 9,
            writer: 3,
            sequence: 11,
        };
        let batch = payload.batch(5, 4, stamp);
        assert_eq!(
            batch.len(),
            crate::batch::HEADER_BYTES + 4 * (RECORD_OVERHEAD_BYTES + 100)
        );
        let records = decode_batches(batch).unwrap();
        assert_eq!(records.len(), 4);
        for record in records {
            assert_eq!(record.epoch, 5);
            let value = record.value.unwrap();
            assert_eq!(value.len(), 100);
            assert_eq!(Stamp::read(&value), Some(stamp));
        }
    }

    /// A Kafka batch the bench builds is one the listener accepts (the conversion's checks:
    /// CRC32C, lengths, offset deltas) and carries the same stamped values as a native one.
    #[test]
    fn kafka_batches_convert_to_the_same_records_as_native_ones() {
        use crate::server::kafka::batches::RecordLimits;
        let mut payload = Payload::new(100, 8);
        let stamp = Stamp {
            intended_ns: 7,
            sent_ns: 9,
            writer: 3,
            sequence: 11,
        };
        for records in [1, 4, 200] {
            let batch = payload.kafka_batch(records, stamp, None);
            let converted = crate::server::kafka::batches::to_native_batches(
                &batch,
                5,
                &RecordLimits::default(),
            )
            .unwrap();
            assert_eq!(converted.len(), 1);
            let decoded = decode_batches(converted[0].bytes.to_bytes()).unwrap();
            assert_eq!(decoded.len(), records as usize);
            for record in decoded {
                assert_eq!(record.key, None);
                assert_eq!(Stamp::read(&record.value.unwrap()), Some(stamp));
            }
        }
    }

    #[test]
    fn short_values_hold_a_truncated_stamp() {
        let mut payload = Payload::new(10, 8);
        let batch = payload.batch(
            1,
            1,
            Stamp {
                intended_ns: 42,
                sent_ns: 1,
                writer: 1,
                sequence: 1,
            },
        );
        let value = decode_batches(batch).unwrap()[0].value.clone().unwrap();
        assert_eq!(Stamp::intended_ns(&value), Some(42));
        assert_eq!(Stamp::read(&value), None);
    }
}
