//! The vocabulary every layer shares: storage, the broker, the native protocol, the Kafka
//! listener that comes next, and the client.
//!
//! These types say *what* a topic, a flush policy, an epoch or an offset is, never how one is
//! written down. Each wire format keeps its own encoding next to its messages (the native one in
//! `crate::protocol`), and the broker keeps its own versioned on-disk structs, so a listener can
//! be added or a wire format changed without touching the types the rest of the code agrees on,
//! and storage does not depend on any protocol.
#![warn(missing_docs)]

mod cluster;
mod config_error;
mod flush_policy;
mod groups;
mod record;
mod topic_config;

pub use config_error::{ConfigError, Quantity};
pub use flush_policy::{FlushPolicy, ParseFlushPolicyError, DEFAULT_FLUSH_INTERVAL_MS};
pub use topic_config::{TopicConfig, TopicConfigChange};

pub use cluster::{
    leader_epoch_of_producer_epoch, producer_epoch_base, Acks, LeaderEpoch, NodeId, Replication,
};
pub use groups::{java_string_hash, offsets_partition, OFFSETS_TOPIC};
pub use record::Record;

/// How many recent batches each producer's retries are recognised among. A producer must not
/// have more batches in flight per partition than this (the client caps its pipelining to it;
/// the partition's producer state remembers this many per producer).
pub const PRODUCER_BATCH_WINDOW: usize = 8;

/// Default segment size, the one definition shared by topic defaults and storage: large enough
/// that rolling is rare, small enough to preallocate quickly (64 MiB).
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;

/// A fencing token: the number of a partition's write lease, stamped into every batch its holder
/// produces and checked by the segment writer in the same critical section as the append.
///
/// Rules: epoch 0 is never granted (grants start at 1; 0 means "none installed yet"); each new
/// lease gets a higher epoch than any before it on that partition, so a partition's epoch never
/// goes backwards. A batch whose epoch is lower than the partition's current one is rejected as
/// fenced, an equal one is accepted, a higher one (or 0) is an unknown epoch.
pub type Epoch = u64;

/// The offset a DeleteRecords names to delete every record below the high watermark (Kafka
/// sends -1; the native `DeleteRecords` sends `u64::MAX`).
pub const DELETE_UP_TO_HIGH_WATERMARK: Offset = u64::MAX;

/// The position of a record in a partition: the first record appended gets offset 0 and each
/// record after it the next one, so offsets only grow. Retention deletes the oldest records but
/// never reuses their offsets.
pub type Offset = u64;
