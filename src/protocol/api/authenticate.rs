//! `AuthenticateStart` (key 13) and `AuthenticateContinue` (key 14): a SCRAM-SHA-256 exchange
//! (RFC 5802, RFC 7677) carried in two request/response pairs, the native counterpart of Kafka's
//! SaslHandshake + SaslAuthenticate.
//!
//! AuthenticateStart request: `mechanism string16, message bytes32` (the client-first message);
//! response: `message bytes32` (the server-first message).
//! AuthenticateContinue request: `message bytes32` (the client-final message); response:
//! `message bytes32` (the server-final message). The messages are SCRAM's own text, unchanged.

use bytes::{BufMut, Bytes, BytesMut};

use crate::protocol::wire::{put_len32, put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of an AuthenticateStart request body.
pub(in crate::protocol) fn start_request_body_len(mechanism: &str, message: &[u8]) -> usize {
    str16_len(mechanism) + message_body_len(message)
}

/// Size of a body that is one `bytes32` message.
pub(in crate::protocol) fn message_body_len(message: &[u8]) -> usize {
    4 + message.len()
}

/// Writes an AuthenticateStart request body.
pub(in crate::protocol) fn encode_start_request(
    dst: &mut BytesMut,
    mechanism: &str,
    message: &[u8],
) -> Result<(), ProtocolError> {
    put_str16(dst, "mechanism", mechanism)?;
    encode_message(dst, "message", message)
}

/// Writes one `bytes32` message.
pub(in crate::protocol) fn encode_message(
    dst: &mut BytesMut,
    field: &str,
    message: &[u8],
) -> Result<(), ProtocolError> {
    put_len32(dst, field, message.len())?;
    dst.put_slice(message);
    Ok(())
}

/// Reads an AuthenticateStart request body.
pub(in crate::protocol) fn decode_start_request(r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::AuthenticateStart {
        mechanism: r.string16("mechanism")?,
        message: r.bytes32("message")?,
    })
}

/// Reads an AuthenticateContinue request body.
pub(in crate::protocol) fn decode_continue_request(r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::AuthenticateContinue {
        message: r.bytes32("message")?,
    })
}

/// Reads an AuthenticateStart response body.
pub(in crate::protocol) fn decode_start_response(r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::AuthenticateStart {
        message: message(r)?,
    })
}

/// Reads an AuthenticateContinue response body.
pub(in crate::protocol) fn decode_continue_response(r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::AuthenticateContinue {
        message: message(r)?,
    })
}

fn message(r: &mut Reader) -> Result<Bytes, WireError> {
    r.bytes32("message")
}
