//! `CreatePartitions` (key 18): grow a topic to a partition count (the new total, as Kafka's
//! CreatePartitions counts), durably (in a cluster on every broker); partitions are only ever
//! added.
//!
//! Request: `name string16, partition_count u32, validate_only u8` (`validate_only` 0 or 1:
//! 1 checks and changes nothing; other values are [`WireError::Invalid`]). Response:
//! `partition_count u32`, the topic's count after the request (with `validate_only`, the count
//! it would have). See `docs/protocol.md` section 5.17.

use bytes::{BufMut, BytesMut};

use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(name: &str) -> usize {
    str16_len(name) + 4 + 1
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    name: &str,
    partition_count: u32,
    validate_only: bool,
) -> Result<(), ProtocolError> {
    put_str16(dst, "name", name)?;
    dst.put_u32(partition_count);
    dst.put_u8(u8::from(validate_only));
    Ok(())
}

/// Reads the request body; a `validate_only` other than 0 or 1 is [`WireError::Invalid`].
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    let name = r.string16("name")?;
    let partition_count = r.u32("partition_count")?;
    let validate_only = match r.u8("validate_only")? {
        0 => false,
        1 => true,
        other => {
            return Err(WireError::Invalid(format!(
                "validate_only {other} is neither 0 (grow the topic) nor 1 (only check)"
            )))
        }
    };
    Ok(Request::CreatePartitions {
        name,
        partition_count,
        validate_only,
    })
}

/// Size of the response body: the partition count.
pub(in crate::protocol) fn response_body_len() -> usize {
    4
}

/// Writes the response body.
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    partition_count: u32,
) -> Result<(), ProtocolError> {
    dst.put_u32(partition_count);
    Ok(())
}

/// Reads the response body.
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::CreatePartitions {
        partition_count: r.u32("partition_count")?,
    })
}
