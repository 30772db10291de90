//! `InitProducerId` (key 9): obtain a producer id for idempotent appends.
//!
//! Request: empty body. Response: `producer_id i64, producer_epoch i16`.
//!
//! The id is unique on this broker for ever (ids are handed out from durably reserved blocks,
//! so a restart never hands one out twice); the producer stamps it, with `producer_epoch` and its
//! per-partition sequence numbers, into magic-3 batches, and the partition appends each such
//! batch once however often it is sent.

use bytes::{BufMut, BytesMut};

use crate::protocol::wire::{Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the response body.
const RESPONSE_BODY_BYTES: usize = 8 + 2;

/// Size of the request body.
pub(in crate::protocol) fn request_body_len() -> usize {
    0
}

/// Writes the request body (nothing).
pub(in crate::protocol) fn encode_request(_dst: &mut BytesMut) -> Result<(), ProtocolError> {
    Ok(())
}

/// Reads the request body (nothing).
pub(in crate::protocol) fn decode_request(_r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::InitProducerId)
}

/// Size of the response body.
pub(in crate::protocol) fn response_body_len() -> usize {
    RESPONSE_BODY_BYTES
}

/// Writes the response body.
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    producer_id: i64,
    producer_epoch: i16,
) -> Result<(), ProtocolError> {
    dst.put_i64(producer_id);
    dst.put_i16(producer_epoch);
    Ok(())
}

/// Reads the response body.
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    let (producer_id, producer_epoch) = decode_response_as(r)?;
    Ok(Response::InitProducerId {
        producer_id,
        producer_epoch,
    })
}

/// The response body's fields (`InitTransaction` answers with the same two).
pub(in crate::protocol) fn decode_response_as(r: &mut Reader) -> Result<(i64, i16), WireError> {
    Ok((
        r.u64("producer_id")? as i64,
        r.u16("producer_epoch")? as i16,
    ))
}
