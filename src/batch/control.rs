//! Transaction markers: the control batch that commits or aborts a producer's open transaction,
//! and its one control record in Kafka's layout.
//!
//! Why apart: a marker is a batch like any other to the store, but it carries no data and is
//! never shown to a reader as a record, so what makes one (and how to read one back) is kept
//! here, next to nothing else.

use bytes::Bytes;

use super::validation::{check_frame, validate_content};
use super::{BatchBuilder, BatchSlices, ATTRIBUTE_CONTROL, ATTRIBUTE_TRANSACTIONAL};

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
    validate_content(&header, batch, None, |_, raw| {
        control = ControlRecord::parse(raw.key, raw.value).ok();
    })
    .ok()?;
    control
}
