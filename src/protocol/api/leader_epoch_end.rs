//! `LeaderEpochEnd` (key 16): where a leader epoch ended in the leader's log (Kafka's
//! OffsetsForLeaderEpoch), which is how a new or returning follower finds where to truncate
//! (truncation by leader epoch, never to a high watermark: KIP-101, KIP-279).
//!
//! Request: `partition_count u32`, then per partition `topic string16, partition u32,
//! current_leader_epoch u32, epoch u32`. Response: `partition_count u32`, then per partition
//! `topic string16, partition u32, error_code u16, epoch u32, end_offset u64`; `epoch` =
//! `0xffffffff` ([`NO_LEADER_EPOCH`](crate::protocol::NO_LEADER_EPOCH)) and `end_offset` =
//! `0xffffffffffffffff` when the leader's history is empty. An epoch older than the whole
//! history is answered with itself, ended at the history's first offset (Kafka's answer).

use bytes::{BufMut, BytesMut};

use crate::domain::LeaderEpoch;
use crate::protocol::node::{put_entry_count, read_entry_count, read_error_code, NO_LEADER_EPOCH};
use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ErrorCode, ProtocolError, Request, Response};

/// `end_offset` on the wire when the leader's history is empty.
const NO_END_OFFSET: u64 = u64::MAX;

/// Smallest encoding of one request entry (empty topic name).
const REQUEST_ENTRY_MIN_BYTES: usize = 2 + 4 + 4 + 4;

/// Smallest encoding of one response entry (empty topic name).
const RESPONSE_ENTRY_MIN_BYTES: usize = 2 + 4 + 2 + 4 + 8;

/// One question: where did `epoch` end?
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderEpochQuery {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// The leader epoch the asker believes current: a leader of another epoch refuses
    /// (`FENCED_LEADER_EPOCH` when the asker is behind, `UNKNOWN_LEADER_EPOCH` when ahead).
    pub current_leader_epoch: LeaderEpoch,
    /// The epoch asked about: the asker's latest history epoch.
    pub epoch: LeaderEpoch,
}

/// Where an epoch ended in the leader's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEnd {
    /// The largest epoch `<=` the one asked in the leader's history (the one asked when every
    /// entry is above it).
    pub epoch: LeaderEpoch,
    /// Where it ended: the start of the next epoch, or the leader's log end for its latest.
    pub end_offset: u64,
}

/// The answer for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderEpochEndPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// `NONE`, or why the question was not answered (`NOT_LEADER`, `FENCED_LEADER_EPOCH`,
    /// `UNKNOWN_LEADER_EPOCH`, `UNKNOWN_TOPIC`, ...).
    pub error: ErrorCode,
    /// The answer; `None` when the leader's history is empty (the asker keeps its log up to its
    /// high watermark), and on error.
    pub end: Option<EpochEnd>,
}

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(partitions: &[LeaderEpochQuery]) -> usize {
    4 + partitions
        .iter()
        .map(|p| str16_len(&p.topic) + REQUEST_ENTRY_MIN_BYTES - 2)
        .sum::<usize>()
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    partitions: &[LeaderEpochQuery],
) -> Result<(), ProtocolError> {
    put_entry_count(dst, "LeaderEpochEnd partitions", partitions.len())?;
    for query in partitions {
        put_str16(dst, "topic", &query.topic)?;
        dst.put_u32(query.partition);
        dst.put_u32(query.current_leader_epoch);
        dst.put_u32(query.epoch);
    }
    Ok(())
}

/// Reads the request body; the list's capacity is capped by the bytes that remain.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    let count = read_entry_count(r, "partition_count")?;
    let mut partitions = Vec::with_capacity(r.capped(count, REQUEST_ENTRY_MIN_BYTES));
    for _ in 0..count {
        partitions.push(LeaderEpochQuery {
            topic: r.string16("topic")?,
            partition: r.u32("partition")?,
            current_leader_epoch: r.u32("current_leader_epoch")?,
            epoch: r.u32("epoch")?,
        });
    }
    Ok(Request::LeaderEpochEnd { partitions })
}

/// Size of the response body.
pub(in crate::protocol) fn response_body_len(partitions: &[LeaderEpochEndPartition]) -> usize {
    4 + partitions
        .iter()
        .map(|p| str16_len(&p.topic) + RESPONSE_ENTRY_MIN_BYTES - 2)
        .sum::<usize>()
}

/// Writes the response body.
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    partitions: &[LeaderEpochEndPartition],
) -> Result<(), ProtocolError> {
    put_entry_count(dst, "LeaderEpochEnd partitions", partitions.len())?;
    for answer in partitions {
        if answer.end.is_some_and(|end| end.epoch == NO_LEADER_EPOCH) {
            return Err(ProtocolError::Unencodable(format!(
                "leader epoch {NO_LEADER_EPOCH} is reserved for \"no epoch\""
            )));
        }
        put_str16(dst, "topic", &answer.topic)?;
        dst.put_u32(answer.partition);
        dst.put_u16(answer.error.as_u16());
        dst.put_u32(answer.end.map_or(NO_LEADER_EPOCH, |end| end.epoch));
        dst.put_u64(answer.end.map_or(NO_END_OFFSET, |end| end.end_offset));
    }
    Ok(())
}

/// Reads the response body.
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    let count = read_entry_count(r, "partition_count")?;
    let mut partitions = Vec::with_capacity(r.capped(count, RESPONSE_ENTRY_MIN_BYTES));
    for _ in 0..count {
        let topic = r.string16("topic")?;
        let partition = r.u32("partition")?;
        let error = read_error_code(r, "error_code")?;
        let epoch = r.u32("epoch")?;
        let end_offset = r.u64("end_offset")?;
        let end = (epoch != NO_LEADER_EPOCH).then_some(EpochEnd { epoch, end_offset });
        partitions.push(LeaderEpochEndPartition {
            topic,
            partition,
            error,
            end,
        });
    }
    Ok(Response::LeaderEpochEnd { partitions })
}
