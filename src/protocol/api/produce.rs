//! `Produce` (key 6): append one record batch to a partition.
//!
//! Request: `topic string16, partition u32, batch bytes32` (one batch in its stored format,
//! epoch inside its header). Response: `base_offset u64, last_offset u64, log_end_offset u64`.
//!
//! The request is written in two parts, its fields ([`encode_request_fields`]) and then the
//! batch, so a vectored write can send the batch it already holds without copying it.

use bytes::{BufMut, BytesMut};

use crate::protocol::wire::{put_len32, put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the response body.
const RESPONSE_BODY_BYTES: usize = 8 + 8 + 8;

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(topic: &str, batch: &[u8]) -> usize {
    str16_len(topic) + 4 + 4 + batch.len()
}

/// Writes every request field up to and including the batch's length, not the batch itself.
pub(in crate::protocol) fn encode_request_fields(
    dst: &mut BytesMut,
    topic: &str,
    partition: u32,
    batch_len: usize,
) -> Result<(), ProtocolError> {
    put_str16(dst, "topic", topic)?;
    dst.put_u32(partition);
    put_len32(dst, "batch", batch_len)
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    topic: &str,
    partition: u32,
    batch: &[u8],
) -> Result<(), ProtocolError> {
    encode_request_fields(dst, topic, partition, batch.len())?;
    dst.put_slice(batch);
    Ok(())
}

/// Reads the request body; the batch is a zero-copy slice of the frame.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::Produce {
        topic: r.string16("topic")?,
        partition: r.u32("partition")?,
        batch: r.bytes32("batch")?,
    })
}

/// Size of the response body.
pub(in crate::protocol) fn response_body_len() -> usize {
    RESPONSE_BODY_BYTES
}

/// Writes the response body.
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    base_offset: u64,
    last_offset: u64,
    log_end_offset: u64,
) -> Result<(), ProtocolError> {
    dst.put_u64(base_offset);
    dst.put_u64(last_offset);
    dst.put_u64(log_end_offset);
    Ok(())
}

/// Reads the response body.
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::Produce {
        base_offset: r.u64("base_offset")?,
        last_offset: r.u64("last_offset")?,
        log_end_offset: r.u64("log_end_offset")?,
    })
}
