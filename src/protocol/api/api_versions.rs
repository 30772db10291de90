//! `ApiVersions` (key 0): which APIs and versions the server speaks, and what software it is.
//!
//! Request: empty. Response: `server string16, api_count u16`, then per API
//! `api_key u16, min_version u16, max_version u16`.

use bytes::{BufMut, BytesMut};

use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ApiVersionRange, ProtocolError, Request, Response};

/// What this build reports as `server` in an `ApiVersions` response.
pub const SERVER_SOFTWARE: &str = concat!("fencelog ", env!("CARGO_PKG_VERSION"));

/// Wire size of one `ApiVersions` entry.
const API_VERSION_RANGE_BYTES: usize = 6;

/// Size of the request body: it is empty.
pub(in crate::protocol) fn request_body_len() -> usize {
    0
}

/// Writes the request body: nothing.
pub(in crate::protocol) fn encode_request(_dst: &mut BytesMut) -> Result<(), ProtocolError> {
    Ok(())
}

/// Reads the request body: nothing.
pub(in crate::protocol) fn decode_request(_r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::ApiVersions)
}

/// Size of the response body.
pub(in crate::protocol) fn response_body_len(server: &str, apis: &[ApiVersionRange]) -> usize {
    str16_len(server) + 2 + apis.len() * API_VERSION_RANGE_BYTES
}

/// Writes the response body.
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    server: &str,
    apis: &[ApiVersionRange],
) -> Result<(), ProtocolError> {
    put_str16(dst, "server", server)?;
    let count = u16::try_from(apis.len()).map_err(|_| {
        ProtocolError::Unencodable(format!(
            "ApiVersions response lists {} APIs; at most 65535 fit",
            apis.len()
        ))
    })?;
    dst.put_u16(count);
    for api in apis {
        dst.put_u16(api.api_key);
        dst.put_u16(api.min_version);
        dst.put_u16(api.max_version);
    }
    Ok(())
}

/// Reads the response body; the list's capacity is capped by the bytes that remain.
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    let server = r.string16("server")?;
    let count = usize::from(r.u16("api_count")?);
    let mut apis = Vec::with_capacity(r.capped(count, API_VERSION_RANGE_BYTES));
    for _ in 0..count {
        apis.push(ApiVersionRange {
            api_key: r.u16("api_key")?,
            min_version: r.u16("min_version")?,
            max_version: r.u16("max_version")?,
        });
    }
    Ok(Response::ApiVersions { server, apis })
}
