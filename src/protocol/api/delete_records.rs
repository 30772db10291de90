//! `DeleteRecords` (key 19): delete a partition's records below an offset (move its log start,
//! Kafka's DeleteRecords), durably on its leader.
//!
//! Request: `topic string16, partition u32, offset u64` (`u64::MAX`: every record below the high
//! watermark). Response: `low_watermark u64`, the partition's log start after the request.
//! Refusals are the header's error code: `OFFSET_OUT_OF_RANGE` past the high watermark,
//! `UNKNOWN_TOPIC` / `UNKNOWN_PARTITION`, `NOT_LEADER` in a cluster. See `docs/protocol.md`
//! section 5.18.

use bytes::{BufMut, BytesMut};

use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(topic: &str) -> usize {
    str16_len(topic) + 4 + 8
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    topic: &str,
    partition: u32,
    offset: u64,
) -> Result<(), ProtocolError> {
    put_str16(dst, "topic", topic)?;
    dst.put_u32(partition);
    dst.put_u64(offset);
    Ok(())
}

/// Reads the request body.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::DeleteRecords {
        topic: r.string16("topic")?,
        partition: r.u32("partition")?,
        offset: r.u64("offset")?,
    })
}

/// Size of the response body.
pub(in crate::protocol) fn response_body_len() -> usize {
    8
}

/// Writes the response body.
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    low_watermark: u64,
) -> Result<(), ProtocolError> {
    dst.put_u64(low_watermark);
    Ok(())
}

/// Reads the response body.
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::DeleteRecords {
        low_watermark: r.u64("low_watermark")?,
    })
}
