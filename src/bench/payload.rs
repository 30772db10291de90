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
use crate::compression::Codec;
use crate::server::kafka::batches::records::{KAFKA_HEADER_BYTES, KAFKA_MAGIC};

/// Bytes a record adds to its value in a batch (no key, no headers): record length,
/// timestamp delta, key length, value length, header count.
pub const RECORD_OVERHEAD_BYTES: usize = crate::batch::MIN_RECORD_BYTES;
/// Bytes of the stamp needed for end-to-end latency.
pub const LATENCY_PREFIX_BYTES: usize = 8;
/// Bytes of the stamp needed to check a failover run.
pub const FAILOVER_PREFIX_BYTES: usize = 24;

/// What the bench's record values hold (`--payload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PayloadKind {
    /// One filler value (bytes 0 to 250, cycling) in every record of a batch: the cheapest to
    /// generate, and meaningless to compress.
    #[default]
    Filler,
    /// JSON-like events (ids, users, event names, paths, timestamps, scores), every record of a
    /// batch different, drawn from a fixed pool: about what a log of application events
    /// compresses to (the run reports the pool's zstd ratio, `payload_zstd_ratio`).
    Json,
}

impl PayloadKind {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            PayloadKind::Filler => "filler",
            PayloadKind::Json => "json",
        }
    }
}

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

/// Most distinct values a JSON payload cycles through: more than a batch's records (1000 by
/// default), so that no record of a batch is a copy of another (a codec would find the copies
/// within its window for free: with 64 values zstd made a 1000-record batch 58 times smaller,
/// not the 4 times of the values themselves).
pub const JSON_POOL_VALUES: usize = 4096;
/// Fewest distinct JSON values, for large records.
const JSON_POOL_MIN_VALUES: usize = 64;
/// Bytes a JSON pool may take, per producer: at 1 KiB records it holds [`JSON_POOL_VALUES`].
const JSON_POOL_BYTES: usize = 16 * 1024 * 1024;

/// Event names, paths and countries the JSON values draw from: the repeated vocabulary that
/// makes application logs compress.
const EVENTS: [&str; 8] = [
    "page_view",
    "add_to_cart",
    "checkout",
    "search",
    "login",
    "logout",
    "click",
    "purchase",
];
const PATHS: [&str; 8] = [
    "/products",
    "/cart",
    "/search",
    "/account",
    "/orders",
    "/help",
    "/deals",
    "/home",
];
const COUNTRIES: [&str; 6] = ["DE", "FR", "US", "JP", "BR", "IN"];

/// Up to [`JSON_POOL_VALUES`] JSON-like events of exactly `record_bytes` bytes each (events
/// repeated to fill, cut at the end; at most [`JSON_POOL_BYTES`] in all), from a fixed seed:
/// the same pool, and so the same compression ratio, in every run.
fn json_values(record_bytes: usize) -> Vec<Vec<u8>> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6a73_6f6e);
    let count =
        (JSON_POOL_BYTES / record_bytes.max(1)).clamp(JSON_POOL_MIN_VALUES, JSON_POOL_VALUES);
    (0..count)
        .map(|_| {
            let mut value = Vec::with_capacity(record_bytes + 256);
            while value.len() < record_bytes {
                let event = format!(
                    "{{\"event_id\":\"{:016x}\",\"user\":\"user-{:05}\",\"event\":\"{}\",\"path\":\"{}/{}\",\"country\":\"{}\",\"ts\":{},\"duration_ms\":{},\"score\":{:.4}}}\n",
                    rng.gen::<u64>(),
                    rng.gen_range(0..20_000),
                    EVENTS[rng.gen_range(0..EVENTS.len())],
                    PATHS[rng.gen_range(0..PATHS.len())],
                    rng.gen_range(0..10_000),
                    COUNTRIES[rng.gen_range(0..COUNTRIES.len())],
                    1_765_000_000_000u64 + rng.gen_range(0..86_400_000),
                    rng.gen_range(1..5_000),
                    rng.gen::<f64>(),
                );
                value.extend_from_slice(event.as_bytes());
            }
            value.truncate(record_bytes);
            value
        })
        .collect()
}

/// How many times smaller zstd (level 3, the Kafka clients' default) makes the values of a
/// `kind` payload of `record_bytes`-byte records: its whole pool, one record after another, as
/// a producer's batch of them would be. `None` for the filler (one repeated value: the ratio
/// would say nothing).
pub fn zstd_ratio(kind: PayloadKind, record_bytes: usize) -> Option<f64> {
    if kind == PayloadKind::Filler || record_bytes == 0 {
        return None;
    }
    let values: Vec<u8> = json_values(record_bytes).concat();
    let compressed = zstd::bulk::compress(&values, 3).ok()?;
    Some(values.len() as f64 / compressed.len().max(1) as f64)
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
    /// The values records take in turn (one for the filler, up to [`JSON_POOL_VALUES`] for JSON),
    /// all of the same length.
    values: Vec<Vec<u8>>,
    /// The value the next record takes.
    next: usize,
    sent: Vec<Bytes>,
    /// Most sent batches kept for recycling: one per request the producer may have in flight,
    /// plus the one being built.
    recycle_max: usize,
    /// How batches are compressed (`--compression`): natively a magic-2 batch, on Kafka's
    /// listener a compressed Kafka batch, as the producers of each send them.
    compression: Codec,
}

impl Payload {
    /// Values of `record_bytes` bytes holding `kind`, for a producer that keeps at most
    /// `in_flight_limit` requests in flight (the bench passes its ceiling,
    /// `config::MAX_IN_FLIGHT`).
    pub fn new(record_bytes: usize, in_flight_limit: usize, kind: PayloadKind) -> Self {
        let values = match kind {
            // A filler that is not all zeros, so nothing downstream can special-case it.
            PayloadKind::Filler => {
                vec![(0..record_bytes).map(|index| (index % 251) as u8).collect()]
            }
            PayloadKind::Json => json_values(record_bytes),
        };
        Self {
            values,
            next: 0,
            sent: Vec::new(),
            recycle_max: in_flight_limit + 1,
            compression: Codec::None,
        }
    }

    /// Batches compressed with `codec` (a codec this build has: the bench's configuration
    /// checks it).
    pub fn compressed(mut self, codec: Codec) -> Self {
        self.compression = codec;
        self
    }

    /// Stamps every value with `stamp` (truncated to the value's size); returns a value's length.
    fn stamp(&mut self, stamp: Stamp) -> usize {
        let prefix = stamp.bytes();
        for value in &mut self.values {
            let stamped = value.len().min(prefix.len());
            value[..stamped].copy_from_slice(&prefix[..stamped]);
        }
        self.values[0].len()
    }

    /// The value of the next record.
    fn next_value(&mut self) -> &[u8] {
        let at = self.next;
        self.next = (self.next + 1) % self.values.len();
        &self.values[at]
    }

    /// Builds a batch of `records` records under `epoch`, every value stamped with `stamp`
    /// (truncated to the value's size).
    pub fn batch(&mut self, epoch: u64, records: u32, stamp: Stamp) -> Bytes {
        self.stamp(stamp);
        let record_bytes = BatchBuilder::record_len(None, Some(&self.values[0]), &[]);
        let mut builder =
            BatchBuilder::reusing(epoch, self.recycled(), records as usize * record_bytes);
        let timestamp = now_ms();
        for _ in 0..records {
            builder.push(timestamp, None, Some(self.next_value()));
        }
        let batch = match builder.compression(self.compression) {
            Ok(builder) => builder.finish(),
            Err(error) => unreachable!("the bench checks its codec is built: {error}"),
        };
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
        let value_bytes = self.stamp(stamp);
        let value_len = i32::try_from(value_bytes).expect("values are at most 4 MiB");
        let mut out = self.recycled();
        out.clear();
        out.reserve(KAFKA_HEADER_BYTES + records as usize * (value_bytes + 16));
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
                1 + 1 + varint_len(offset_delta) + 1 + varint_len(value_len) + value_bytes + 1;
            put_varint(&mut out, length as i32);
            out.put_u8(0);
            out.put_u8(0);
            put_varint(&mut out, offset_delta);
            put_varint(&mut out, -1);
            put_varint(&mut out, value_len);
            out.put_slice(self.next_value());
            out.put_u8(0);
        }
        let batch_length = (out.len() - 12) as u32;
        out[8..12].copy_from_slice(&batch_length.to_be_bytes());
        let crc = crc32c(&out[21..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        if self.compression != Codec::None {
            // As a compressing Kafka producer sends it: the records compressed, header kept.
            let compressed = crate::batch::compress_kafka_records(&out, self.compression)
                .unwrap_or_else(|error| unreachable!("the bench checks its codec: {error}"));
            out.clear();
            out.extend_from_slice(&compressed);
        }
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
        let mut payload = Payload::new(100, 8, PayloadKind::Filler);
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
        let mut payload = Payload::new(100, 8, PayloadKind::Filler);
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

    /// A JSON payload's records differ within a batch, each of the size asked and stamped, and
    /// compress as application events do (several times with zstd), where a filler's ratio is
    /// not reported.
    #[test]
    fn json_values_differ_carry_the_stamp_and_compress() {
        let mut payload = Payload::new(1024, 8, PayloadKind::Json);
        let stamp = Stamp {
            intended_ns: 7,
            sent_ns: 9,
            writer: 3,
            sequence: 11,
        };
        let records = decode_batches(payload.batch(5, 10, stamp)).unwrap();
        let values: Vec<Bytes> = records.into_iter().map(|r| r.value.unwrap()).collect();
        assert_eq!(values.len(), 10);
        for value in &values {
            assert_eq!(value.len(), 1024);
            assert_eq!(Stamp::read(value), Some(stamp));
        }
        assert_ne!(values[0], values[1], "records of a batch differ");
        let ratio = zstd_ratio(PayloadKind::Json, 1024).unwrap();
        assert!((2.0..10.0).contains(&ratio), "zstd ratio {ratio}");
        assert_eq!(zstd_ratio(PayloadKind::Filler, 1024), None);
    }

    #[test]
    fn short_values_hold_a_truncated_stamp() {
        let mut payload = Payload::new(10, 8, PayloadKind::Filler);
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
