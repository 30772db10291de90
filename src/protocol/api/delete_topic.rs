//! `DeleteTopic` (key 12): delete a topic, its partitions, their data, leases and the committed
//! offsets of every group for it.
//!
//! Request: `name string16`. Response: empty (the outcome is the header's error code:
//! `UNKNOWN_TOPIC` when there is no such topic). See `docs/protocol.md` section 5.12.

use bytes::BytesMut;

use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(name: &str) -> usize {
    str16_len(name)
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    name: &str,
) -> Result<(), ProtocolError> {
    put_str16(dst, "name", name)
}

/// Reads the request body.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::DeleteTopic {
        name: r.string16("name")?,
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
    Ok(Response::DeleteTopic)
}
