//! `Fetch` (key 7): read record batches from a partition.
//!
//! Request: `topic string16, partition u32, offset u64, max_bytes u32, max_wait_ms u32`.
//! Response: `high_watermark u64, log_start_offset u64, batches bytes32` (whole stored batches,
//! back to back).
//!
//! The response is written in two parts, its fields ([`encode_response_fields`]) and then the
//! batches, so a vectored write can send the stored batches (slices of the segment maps) without
//! copying them.

use bytes::{BufMut, Bytes, BytesMut};

use crate::protocol::wire::{put_len32, put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the request body after the topic name.
const REQUEST_FIXED_BYTES: usize = 4 + 8 + 4 + 4;

/// Size of the response body before the batches' bytes.
const RESPONSE_FIXED_BYTES: usize = 8 + 8 + 4;

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(topic: &str) -> usize {
    str16_len(topic) + REQUEST_FIXED_BYTES
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    topic: &str,
    partition: u32,
    offset: u64,
    max_bytes: u32,
    max_wait_ms: u32,
) -> Result<(), ProtocolError> {
    put_str16(dst, "topic", topic)?;
    dst.put_u32(partition);
    dst.put_u64(offset);
    dst.put_u32(max_bytes);
    dst.put_u32(max_wait_ms);
    Ok(())
}

/// Reads the request body.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::Fetch {
        topic: r.string16("topic")?,
        partition: r.u32("partition")?,
        offset: r.u64("offset")?,
        max_bytes: r.u32("max_bytes")?,
        max_wait_ms: r.u32("max_wait_ms")?,
    })
}

/// Size of the response body.
pub(in crate::protocol) fn response_body_len(batches: &[Bytes]) -> usize {
    RESPONSE_FIXED_BYTES + batches.iter().map(Bytes::len).sum::<usize>()
}

/// Writes every response field up to and including the batches' total length, not the batches.
pub(in crate::protocol) fn encode_response_fields(
    dst: &mut BytesMut,
    high_watermark: u64,
    log_start_offset: u64,
    batches: &[Bytes],
) -> Result<(), ProtocolError> {
    dst.put_u64(high_watermark);
    dst.put_u64(log_start_offset);
    put_len32(dst, "batches", batches.iter().map(Bytes::len).sum())
}

/// Writes the response body.
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    high_watermark: u64,
    log_start_offset: u64,
    batches: &[Bytes],
) -> Result<(), ProtocolError> {
    encode_response_fields(dst, high_watermark, log_start_offset, batches)?;
    for batch in batches {
        dst.put_slice(batch);
    }
    Ok(())
}

/// Reads the response body. The batches are not split (that needs the batch format's headers):
/// they come back as one zero-copy chunk, or none when the response holds no data.
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    let high_watermark = r.u64("high_watermark")?;
    let log_start_offset = r.u64("log_start_offset")?;
    let blob = r.bytes32("batches")?;
    let batches = if blob.is_empty() {
        Vec::new()
    } else {
        vec![blob]
    };
    Ok(Response::Fetch {
        high_watermark,
        log_start_offset,
        batches,
    })
}
