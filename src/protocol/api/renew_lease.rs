//! `RenewLease` (key 4): extend a lease before it expires.
//!
//! Request: `topic string16, partition u32, lease_id u128` (a *lease reference*; `ReleaseLease`
//! sends the same body, so its codec is here and `release_lease` reuses it).
//! Response: `epoch u64, ttl_ms u64`.

use bytes::{BufMut, BytesMut};

use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the response body.
const RESPONSE_BODY_BYTES: usize = 8 + 8;

/// Size of a lease reference body.
pub(in crate::protocol) fn request_body_len(topic: &str) -> usize {
    str16_len(topic) + 4 + 16
}

/// Writes a lease reference body.
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

/// Reads a lease reference body: `(topic, partition, lease_id)`.
pub(in crate::protocol) fn read_lease_reference(
    r: &mut Reader,
) -> Result<(String, u32, u128), WireError> {
    Ok((
        r.string16("topic")?,
        r.u32("partition")?,
        r.u128("lease_id")?,
    ))
}

/// Reads the request body.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    let (topic, partition, lease_id) = read_lease_reference(r)?;
    Ok(Request::RenewLease {
        topic,
        partition,
        lease_id,
    })
}

/// Size of the response body.
pub(in crate::protocol) fn response_body_len() -> usize {
    RESPONSE_BODY_BYTES
}

/// Writes the response body.
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    epoch: u64,
    ttl_ms: u64,
) -> Result<(), ProtocolError> {
    dst.put_u64(epoch);
    dst.put_u64(ttl_ms);
    Ok(())
}

/// Reads the response body.
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::RenewLease {
        epoch: r.u64("epoch")?,
        ttl_ms: r.u64("ttl_ms")?,
    })
}
