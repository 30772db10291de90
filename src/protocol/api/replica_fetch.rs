//! `ReplicaFetch` (key 15): a follower pulls the batches of the partitions it replicates from
//! their leader (Kafka's follower fetch; `docs/replication.md`).
//!
//! Request: `follower u32, follower_incarnation u64, leader_epoch u32, max_wait_ms u32,
//! min_bytes u32, max_bytes u32, partition_count u32`, then per partition `topic string16,
//! partition u32, fetch_offset u64` and, in version 1, `log_end_offset u64`. Response (both
//! versions): `partition_count u32`, then per partition `topic string16, partition u32,
//! error_code u16, high_watermark u64, log_start_offset u64, records_epoch u32, batches bytes32`.
//!
//! The request carries the leader epoch the follower follows, so a deposed leader learns it was
//! deposed (a newer epoch) and a follower behind on metadata is told (`FENCED_LEADER_EPOCH`).
//! The follower's log end is how the leader computes the high watermark: in version 0 it is the
//! `fetch_offset`; version 1 names it apart (`log_end_offset`), so a follower can ask for the
//! records after those it is still appending (a pipelined fetch), and a version 1 request with
//! `max_bytes` 0 is a progress report that is answered at once without batches. A response's
//! batches of one partition were all written under `records_epoch`.
//!
//! As for `Fetch`, the response is written in parts: every partition's fields
//! ([`encode_response_fields`]) and then its batches, so a vectored write sends the stored
//! batches (slices of the leader's segment maps) without copying them; the decoder hands each
//! partition's batches back as one slice of the received frame.

use bytes::{BufMut, Bytes, BytesMut};

use crate::domain::{LeaderEpoch, NodeId};
use crate::protocol::node::{put_entry_count, read_entry_count, read_error_code};
use crate::protocol::wire::{put_len32, put_str16, str16_len, Reader, WireError};
use crate::protocol::{ErrorCode, ProtocolError, Request, Response};

/// Size of the request body before the partitions.
const REQUEST_FIXED_BYTES: usize = 4 + 8 + 4 + 4 + 4 + 4 + 4;

/// Smallest encoding of one request entry (empty topic name, version 0).
const REQUEST_ENTRY_MIN_BYTES: usize = 2 + 4 + 8;

/// The version that carries each partition's `log_end_offset` (and reads `max_bytes` 0 as a
/// progress report).
pub const LOG_END_VERSION: u16 = 1;

/// Smallest encoding of one response entry (empty topic name, no batches).
const RESPONSE_ENTRY_MIN_BYTES: usize = 2 + 4 + 2 + 8 + 8 + 4 + 4;

/// One partition a follower asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaFetchPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// The first offset the follower wants. Without `log_end_offset` (version 0) also its log
    /// end: proof that it holds (and, under flush `always`, has synced) everything below.
    pub fetch_offset: u64,
    /// The follower's log end when it differs from `fetch_offset` or the request is a progress
    /// report (`Some` makes the request version 1): everything below it is held (and, under
    /// flush `always`, synced); it is at most `fetch_offset`.
    pub log_end_offset: Option<u64>,
}

impl ReplicaFetchPartition {
    /// The follower's log end as the entry states it.
    pub fn log_end_offset(&self) -> u64 {
        self.log_end_offset.unwrap_or(self.fetch_offset)
    }
}

/// What a follower sends (see the module documentation for the bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaFetch {
    /// The follower's node id.
    pub follower: NodeId,
    /// The follower's incarnation (random per process start, from its broker registration): a
    /// restarted follower re-enters an ISR only by catching up again.
    pub follower_incarnation: u64,
    /// The leader epoch the follower follows; the leader answers only its own.
    pub leader_epoch: LeaderEpoch,
    /// Longest the leader may wait for `min_bytes` of new data (long poll).
    pub max_wait_ms: u32,
    /// Answer as soon as this many bytes of batches are available (0: at once).
    pub min_bytes: u32,
    /// Soft cap on the bytes of batches in the response, all partitions together. In version 1,
    /// 0 asks for no batches at all: a progress report.
    pub max_bytes: u32,
    /// The partitions, each with the follower's log end.
    pub partitions: Vec<ReplicaFetchPartition>,
}

/// The leader's answer for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaFetchedPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// `NONE`, or why this partition was not served (`NOT_LEADER`, `FENCED_LEADER_EPOCH`,
    /// `UNKNOWN_LEADER_EPOCH`, `OFFSET_OUT_OF_RANGE`, `UNKNOWN_TOPIC`, ...); the other
    /// fields are then 0 and `batches` is empty.
    pub error: ErrorCode,
    /// The leader's high watermark.
    pub high_watermark: u64,
    /// The leader's log start offset.
    pub log_start_offset: u64,
    /// The leader epoch under which every batch of `batches` was written (the leader stops at
    /// the next epoch boundary).
    pub records_epoch: LeaderEpoch,
    /// Whole stored batches, as the leader stored them, concatenated on the wire as one
    /// `bytes32` (empty: nothing new). The encoder writes the parts back to back; the decoder
    /// does not split them (that needs the storage format's batch headers): it yields a single
    /// zero-copy slice of the frame, or an empty `Vec` for no data.
    pub batches: Vec<Bytes>,
}

impl ReplicaFetchedPartition {
    /// Total bytes of `batches`.
    pub fn batches_len(&self) -> usize {
        self.batches.iter().map(Bytes::len).sum()
    }
}

impl ReplicaFetch {
    /// Whether this is a progress report: a version 1 request for no batches.
    pub fn is_report_only(&self) -> bool {
        self.max_bytes == 0 && request_version(self) >= LOG_END_VERSION
    }
}

/// The version `fetch` is encoded in: 1 when any partition names its log end apart.
pub(in crate::protocol) fn request_version(fetch: &ReplicaFetch) -> u16 {
    if fetch.partitions.iter().any(|p| p.log_end_offset.is_some()) {
        LOG_END_VERSION
    } else {
        0
    }
}

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(fetch: &ReplicaFetch) -> usize {
    let log_end = if request_version(fetch) >= LOG_END_VERSION {
        8
    } else {
        0
    };
    REQUEST_FIXED_BYTES
        + fetch
            .partitions
            .iter()
            .map(|p| str16_len(&p.topic) + 4 + 8 + log_end)
            .sum::<usize>()
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    fetch: &ReplicaFetch,
) -> Result<(), ProtocolError> {
    dst.put_u32(fetch.follower);
    dst.put_u64(fetch.follower_incarnation);
    dst.put_u32(fetch.leader_epoch);
    dst.put_u32(fetch.max_wait_ms);
    dst.put_u32(fetch.min_bytes);
    dst.put_u32(fetch.max_bytes);
    let version = request_version(fetch);
    put_entry_count(dst, "ReplicaFetch partitions", fetch.partitions.len())?;
    for partition in &fetch.partitions {
        put_str16(dst, "topic", &partition.topic)?;
        dst.put_u32(partition.partition);
        dst.put_u64(partition.fetch_offset);
        if version >= LOG_END_VERSION {
            dst.put_u64(partition.log_end_offset());
        }
    }
    Ok(())
}

/// Reads the request body of `version`; the list's capacity is capped by the bytes that remain.
pub(in crate::protocol) fn decode_request(
    r: &mut Reader,
    version: u16,
) -> Result<Request, WireError> {
    let follower = r.u32("follower")?;
    let follower_incarnation = r.u64("follower_incarnation")?;
    let leader_epoch = r.u32("leader_epoch")?;
    let max_wait_ms = r.u32("max_wait_ms")?;
    let min_bytes = r.u32("min_bytes")?;
    let max_bytes = r.u32("max_bytes")?;
    let count = read_entry_count(r, "partition_count")?;
    let mut partitions = Vec::with_capacity(r.capped(count, REQUEST_ENTRY_MIN_BYTES));
    for _ in 0..count {
        let topic = r.string16("topic")?;
        let partition = r.u32("partition")?;
        let fetch_offset = r.u64("fetch_offset")?;
        let log_end_offset = if version >= LOG_END_VERSION {
            Some(r.u64("log_end_offset")?)
        } else {
            None
        };
        partitions.push(ReplicaFetchPartition {
            topic,
            partition,
            fetch_offset,
            log_end_offset,
        });
    }
    Ok(Request::ReplicaFetch(ReplicaFetch {
        follower,
        follower_incarnation,
        leader_epoch,
        max_wait_ms,
        min_bytes,
        max_bytes,
        partitions,
    }))
}

/// Size of the response body.
pub(in crate::protocol) fn response_body_len(partitions: &[ReplicaFetchedPartition]) -> usize {
    4 + partitions
        .iter()
        .map(|p| str16_len(&p.topic) + RESPONSE_ENTRY_MIN_BYTES - 2 + p.batches_len())
        .sum::<usize>()
}

/// Writes every response field but the batches' bytes: the partition count, then each
/// partition's fields up to and including its batches' total length. Pushes to `cuts`, per
/// partition, the length `dst` has where that partition's batches go, so the caller can split
/// `dst` there and put the batches in between; on failure `dst` may hold part of the fields.
pub(in crate::protocol) fn encode_response_fields(
    dst: &mut BytesMut,
    partitions: &[ReplicaFetchedPartition],
    cuts: &mut Vec<usize>,
) -> Result<(), ProtocolError> {
    put_entry_count(dst, "ReplicaFetch partitions", partitions.len())?;
    for partition in partitions {
        put_partition_fields(dst, partition)?;
        cuts.push(dst.len());
    }
    Ok(())
}

/// One partition's fields, up to and including its batches' total length.
fn put_partition_fields(
    dst: &mut BytesMut,
    partition: &ReplicaFetchedPartition,
) -> Result<(), ProtocolError> {
    put_str16(dst, "topic", &partition.topic)?;
    dst.put_u32(partition.partition);
    dst.put_u16(partition.error.as_u16());
    dst.put_u64(partition.high_watermark);
    dst.put_u64(partition.log_start_offset);
    dst.put_u32(partition.records_epoch);
    put_len32(dst, "batches", partition.batches_len())
}

/// Writes the response body (the batches copied in: the plain encoder; the server writes
/// responses with [`encode_response_fields`] and vectored writes instead).
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    partitions: &[ReplicaFetchedPartition],
) -> Result<(), ProtocolError> {
    put_entry_count(dst, "ReplicaFetch partitions", partitions.len())?;
    for partition in partitions {
        put_partition_fields(dst, partition)?;
        for batch in &partition.batches {
            dst.put_slice(batch);
        }
    }
    Ok(())
}

/// Reads the response body; each partition's batches are a zero-copy slice of the frame.
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    let count = read_entry_count(r, "partition_count")?;
    let mut partitions = Vec::with_capacity(r.capped(count, RESPONSE_ENTRY_MIN_BYTES));
    for _ in 0..count {
        let topic = r.string16("topic")?;
        let partition = r.u32("partition")?;
        let error = read_error_code(r, "error_code")?;
        let high_watermark = r.u64("high_watermark")?;
        let log_start_offset = r.u64("log_start_offset")?;
        let records_epoch = r.u32("records_epoch")?;
        let blob = r.bytes32("batches")?;
        let batches = if blob.is_empty() {
            Vec::new()
        } else {
            vec![blob]
        };
        partitions.push(ReplicaFetchedPartition {
            topic,
            partition,
            error,
            high_watermark,
            log_start_offset,
            records_epoch,
            batches,
        });
    }
    Ok(Response::ReplicaFetch { partitions })
}
