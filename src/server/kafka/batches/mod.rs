//! Kafka's record batches, for the Kafka wire-protocol listener: the conversion between Kafka
//! record batches v2 and fencelog's native batches (`crate::batch`), independent of either
//! wire protocol's framing. It lives with the listener (one Kafka folder, one `kafka` cargo
//! feature) and imports nothing of it.
//!
//! - [`to_native_batches`]: a Produce partition's `records` field (any compression) → native
//!   batches the partition appends, one per Kafka batch, under the listener's fencing epoch.
//! - [`to_kafka_batches`]: stored native batches, as a fetch reads them → uncompressed Kafka
//!   batches a Kafka consumer decodes.
//!
//! Hostile input costs at most [`RecordLimits`]: lengths are checked against the bytes present,
//! decompression stops at a byte limit, record counts are capped, and no buffer is sized by a
//! count read from the wire. Errors are [`RecordsError`], each with one Kafka error code.

pub mod records;
mod to_kafka;
mod to_native;
pub(crate) use crate::batch::varint;

pub use records::{ConvertedBatch, KafkaCompression, RecordLimits, RecordsError};
pub use to_kafka::{to_kafka_batches, to_kafka_parts};
pub use to_native::to_native_batches;
