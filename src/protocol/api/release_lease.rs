//! `ReleaseLease` (key 5): give a lease up early.
//!
//! Request: `topic string16, partition u32, lease_id u128` (the same fields as `RenewLease`).
//! Response: empty.

use bytes::{BufMut, BytesMut};

use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(topic: &str) -> usize {
    str16_len(topic) + 4 + 16
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    topic: &str,
    partition: u32,
    lease_id: u128,
) -> Result<(), ProtocolError> {
    put_str16(dst, "topic", topic)?;
    dst.put_u32(partition);
    dst.put_u128(lease_id);
    Ok(())
}

/// Reads the request body.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::ReleaseLease {
        topic: r.string16("topic")?,
        partition: r.u32("partition")?,
        lease_id: r.u128("lease_id")?,
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
    Ok(Response::ReleaseLease)
}
