//! `InitTransaction` (key 20): start (or take over) a transactional id for native atomic
//! appends.
//!
//! Request: `transactional_id string16, timeout_ms u32`. Response: `producer_id i64,
//! producer_epoch i16`.
//!
//! The id's producer id is stable across instances; the producer epoch is bumped by each call,
//! which fences the id's previous instance (its open transaction is aborted first).

use bytes::{BufMut, BytesMut};

pub(in crate::protocol) use super::init_producer_id::{
    decode_response_as as decode_response_fields, encode_response, response_body_len,
};
use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(transactional_id: &str) -> usize {
    str16_len(transactional_id) + 4
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    transactional_id: &str,
    timeout_ms: u32,
) -> Result<(), ProtocolError> {
    put_str16(dst, "transactional_id", transactional_id)?;
    dst.put_u32(timeout_ms);
    Ok(())
}

/// Reads the request body.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::InitTransaction {
        transactional_id: r.string16("transactional_id")?,
        timeout_ms: r.u32("timeout_ms")?,
    })
}

/// Reads the response body (the same fields as `InitProducerId`'s).
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    let (producer_id, producer_epoch) = decode_response_fields(r)?;
    Ok(Response::InitTransaction {
        producer_id,
        producer_epoch,
    })
}
