//! `ListOffsets` (key 8): read a partition's offset range and current epoch.
//!
//! Request: `topic string16, partition u32`. Response: `earliest u64, latest u64, epoch u64`.

use bytes::{BufMut, BytesMut};

use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the response body.
const RESPONSE_BODY_BYTES: usize = 8 + 8 + 8;

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(topic: &str) -> usize {
    str16_len(topic) + 4
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    topic: &str,
    partition: u32,
) -> Result<(), ProtocolError> {
    put_str16(dst, "topic", topic)?;
    dst.put_u32(partition);
    Ok(())
}

/// Reads the request body.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::ListOffsets {
        topic: r.string16("topic")?,
        partition: r.u32("partition")?,
    })
}

/// Size of the response body.
pub(in crate::protocol) fn response_body_len() -> usize {
    RESPONSE_BODY_BYTES
}

/// Writes the response body.
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    earliest: u64,
    latest: u64,
    epoch: u64,
) -> Result<(), ProtocolError> {
    dst.put_u64(earliest);
    dst.put_u64(latest);
    dst.put_u64(epoch);
    Ok(())
}

/// Reads the response body.
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::ListOffsets {
        earliest: r.u64("earliest")?,
        latest: r.u64("latest")?,
        epoch: r.u64("epoch")?,
    })
}
