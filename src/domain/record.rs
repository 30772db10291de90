//! A record as a consumer sees it, once its batch is decoded (`crate::batch` holds the record
//! batch format that carries it). Here, below the batch format, because the client, the broker
//! and both listeners hand records around without caring how a batch lays them out.

use bytes::Bytes;

/// A record as a consumer sees it. Byte fields are zero-copy slices of the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The record's offset in the partition.
    pub offset: u64,
    /// The epoch of the batch it was written in.
    pub epoch: u64,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// Optional key.
    pub key: Option<Bytes>,
    /// Optional value.
    pub value: Option<Bytes>,
    /// Headers, in order: (name, value). A value is `None` when the header has no value at all
    /// (Kafka headers may be null), apart from an empty one.
    pub headers: Vec<(String, Option<Bytes>)>,
}
