//! `OffsetCommit` (key 10): store a consumer group's position in a partition.
//!
//! Request: `group string16, topic string16, partition u32, offset u64, metadata string16`.
//! Response: empty. The offset is the next record the group will read.

use bytes::{BufMut, BytesMut};

use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(group: &str, topic: &str, metadata: &str) -> usize {
    str16_len(group) + str16_len(topic) + 4 + 8 + str16_len(metadata)
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    group: &str,
    topic: &str,
    partition: u32,
    offset: u64,
    metadata: &str,
) -> Result<(), ProtocolError> {
    put_str16(dst, "group", group)?;
    put_str16(dst, "topic", topic)?;
    dst.put_u32(partition);
    dst.put_u64(offset);
    put_str16(dst, "metadata", metadata)
}

/// Reads the request body.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::OffsetCommit {
        group: r.string16("group")?,
        topic: r.string16("topic")?,
        partition: r.u32("partition")?,
        offset: r.u64("offset")?,
        metadata: r.string16("metadata")?,
    })
}

/// Size of the response body: it is empty.
pub(in crate::protocol) fn response_body_len() -> usize {
    0
}

/// Writes the response body: nothing.
pub(in crate::protocol) fn encode_response(_dst: &mut BytesMut) -> Result<(), ProtocolError> {
    Ok(())
}

/// Reads the response body: nothing.
pub(in crate::protocol) fn decode_response(_r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::OffsetCommit)
}
