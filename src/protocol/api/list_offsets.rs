//! `ListOffsets` (key 8): read a partition's offset range and current epoch, and (version 1)
//! the first offset at or after a timestamp.
//!
//! Version 0 request: `topic string16, partition u32`; response: `earliest u64, latest u64,
//! epoch u64`. Version 1 appends `timestamp i64` to the request and `offset_for_timestamp i64`
//! (-1 when no record is that recent) to the response. The version follows from the request:
//! one that asks for a timestamp is version 1, one that does not is version 0, so a client that
//! never asks keeps talking to servers that only know version 0.

use bytes::{BufMut, BytesMut};

use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// The version that carries a timestamp.
pub(in crate::protocol) const TIMESTAMP_VERSION: u16 = 1;

/// `offset_for_timestamp` when no record is at or after the timestamp.
pub const NO_OFFSET_FOR_TIMESTAMP: i64 = -1;

/// The version a request with (or without) a timestamp is encoded in.
pub(in crate::protocol) fn request_version(timestamp: Option<i64>) -> u16 {
    if timestamp.is_some() {
        TIMESTAMP_VERSION
    } else {
        0
    }
}

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(topic: &str, timestamp: Option<i64>) -> usize {
    str16_len(topic) + 4 + timestamp.map_or(0, |_| 8)
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    topic: &str,
    partition: u32,
    timestamp: Option<i64>,
) -> Result<(), ProtocolError> {
    put_str16(dst, "topic", topic)?;
    dst.put_u32(partition);
    if let Some(timestamp) = timestamp {
        dst.put_i64(timestamp);
    }
    Ok(())
}

/// Reads the request body of `version`.
pub(in crate::protocol) fn decode_request(
    r: &mut Reader,
    version: u16,
) -> Result<Request, WireError> {
    let topic = r.string16("topic")?;
    let partition = r.u32("partition")?;
    let timestamp = if version >= TIMESTAMP_VERSION {
        Some(r.i64("timestamp")?)
    } else {
        None
    };
    Ok(Request::ListOffsets {
        topic,
        partition,
        timestamp,
    })
}

/// Size of the response body.
pub(in crate::protocol) fn response_body_len(offset_for_timestamp: Option<i64>) -> usize {
    8 + 8 + 8 + offset_for_timestamp.map_or(0, |_| 8)
}

/// Writes the response body.
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    earliest: u64,
    latest: u64,
    epoch: u64,
    offset_for_timestamp: Option<i64>,
) -> Result<(), ProtocolError> {
    dst.put_u64(earliest);
    dst.put_u64(latest);
    dst.put_u64(epoch);
    if let Some(offset) = offset_for_timestamp {
        dst.put_i64(offset);
    }
    Ok(())
}

/// Reads the response body of `version`.
pub(in crate::protocol) fn decode_response(
    r: &mut Reader,
    version: u16,
) -> Result<Response, WireError> {
    let earliest = r.u64("earliest")?;
    let latest = r.u64("latest")?;
    let epoch = r.u64("epoch")?;
    let offset_for_timestamp = if version >= TIMESTAMP_VERSION {
        Some(r.i64("offset_for_timestamp")?)
    } else {
        None
    };
    Ok(Response::ListOffsets {
        earliest,
        latest,
        epoch,
        offset_for_timestamp,
    })
}
