//! `AcquireLease` (key 3): take the write lease of a partition, obtaining a new epoch.
//!
//! Request: `topic string16, partition u32, holder string16, ttl_ms u64`.
//! Response: `epoch u64, lease_id u128, ttl_ms u64`.

use bytes::{BufMut, BytesMut};

use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the response body.
const RESPONSE_BODY_BYTES: usize = 8 + 16 + 8;

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(topic: &str, holder: &str) -> usize {
    str16_len(topic) + 4 + str16_len(holder) + 8
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    topic: &str,
    partition: u32,
    holder: &str,
    ttl_ms: u64,
) -> Result<(), ProtocolError> {
    put_str16(dst, "topic", topic)?;
    dst.put_u32(partition);
    put_str16(dst, "holder", holder)?;
    dst.put_u64(ttl_ms);
    Ok(())
}

/// Reads the request body.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::AcquireLease {
        topic: r.string16("topic")?,
        partition: r.u32("partition")?,
        holder: r.string16("holder")?,
        ttl_ms: r.u64("ttl_ms")?,
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
    lease_id: u128,
    ttl_ms: u64,
) -> Result<(), ProtocolError> {
    dst.put_u64(epoch);
    dst.put_u128(lease_id);
    dst.put_u64(ttl_ms);
    Ok(())
}

/// Reads the response body.
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::AcquireLease {
        epoch: r.u64("epoch")?,
        lease_id: r.u128("lease_id")?,
        ttl_ms: r.u64("ttl_ms")?,
    })
}
