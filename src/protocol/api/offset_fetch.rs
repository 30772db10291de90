//! `OffsetFetch` (key 11): read the position a consumer group committed in a partition.
//!
//! Request: `group string16, topic string16, partition u32`. Response: `offset i64, metadata
//! string16`, where an `offset` of -1 means the group has committed nothing there (and
//! `metadata` is then empty). Any other negative offset is malformed.

use bytes::{BufMut, BytesMut};

use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// The wire `offset` meaning "nothing committed".
pub const NO_COMMITTED_OFFSET: i64 = -1;

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(group: &str, topic: &str) -> usize {
    str16_len(group) + str16_len(topic) + 4
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    group: &str,
    topic: &str,
    partition: u32,
) -> Result<(), ProtocolError> {
    put_str16(dst, "group", group)?;
    put_str16(dst, "topic", topic)?;
    dst.put_u32(partition);
    Ok(())
}

/// Reads the request body.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::OffsetFetch {
        group: r.string16("group")?,
        topic: r.string16("topic")?,
        partition: r.u32("partition")?,
    })
}

/// Size of the response body.
pub(in crate::protocol) fn response_body_len(metadata: &str) -> usize {
    8 + str16_len(metadata)
}

/// Writes the response body; fails, writing nothing, for an offset above `i64::MAX` (no log
/// reaches it).
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    offset: Option<u64>,
    metadata: &str,
) -> Result<(), ProtocolError> {
    let offset = match offset {
        None => NO_COMMITTED_OFFSET,
        Some(offset) => i64::try_from(offset).map_err(|_| {
            ProtocolError::Unencodable(format!(
                "committed offset {offset} does not fit the i64 offset field"
            ))
        })?,
    };
    dst.put_i64(offset);
    put_str16(dst, "metadata", metadata)
}

/// Reads the response body.
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    let raw = r.u64("offset")? as i64;
    let offset = match raw {
        NO_COMMITTED_OFFSET => None,
        negative if negative < 0 => {
            return Err(WireError::Invalid(format!(
                "committed offset {negative} is negative (only -1, nothing committed, is)"
            )))
        }
        offset => Some(offset as u64),
    };
    Ok(Response::OffsetFetch {
        offset,
        metadata: r.string16("metadata")?,
    })
}
