//! `ReleaseLease` (key 5): give a lease up early.
//!
//! Request: `topic string16, partition u32, lease_id u128` (the same fields as `RenewLease`).
//! Response: empty.

use bytes::BytesMut;

use super::renew_lease::read_lease_reference;
pub(in crate::protocol) use super::renew_lease::{encode_request, request_body_len};
use crate::protocol::wire::{Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Reads the request body.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    let (topic, partition, lease_id) = read_lease_reference(r)?;
    Ok(Request::ReleaseLease {
        topic,
        partition,
        lease_id,
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
