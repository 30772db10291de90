//! `Fetch` (key 7): read record batches from a partition.
//!
//! Request: `topic string16, partition u32, offset u64, max_bytes u32, max_wait_ms u32`; version
//! 1 appends `isolation u8` (0 read_uncommitted, 1 read_committed).
//! Response: `high_watermark u64, log_start_offset u64, batches bytes32` (whole stored batches,
//! back to back); version 1 appends `last_stable_offset u64, next_offset u64`.
//!
//! The response is written in two parts, its fields ([`encode_response_fields`]) and then the
//! batches, so a vectored write can send the stored batches (slices of the segment maps) without
//! copying them.

use bytes::{BufMut, Bytes, BytesMut};

use crate::protocol::wire::{put_len32, put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// What every version-1 fetch answer adds, read_committed or not (a client reads a response
/// by the version it asked in, so the layout cannot depend on the isolation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommittedRead {
    /// The first offset a read_committed reader cannot see yet (the first record of the
    /// oldest open transaction, or the high watermark): a read_committed answer's batches stop
    /// before it.
    pub last_stable_offset: u64,
    /// Where the reader continues: past every batch this answer read (read_committed: including
    /// the aborted transactions' batches and the markers it left out), never below the offset
    /// asked for.
    pub next_offset: u64,
}

/// `isolation` of a read_uncommitted fetch.
pub const READ_UNCOMMITTED: u8 = 0;
/// `isolation` of a read_committed fetch.
pub const READ_COMMITTED: u8 = 1;

/// Bytes version 1 appends to the response.
const COMMITTED_TRAILER_BYTES: usize = 8 + 8;

/// Size of the request body after the topic name.
const REQUEST_FIXED_BYTES: usize = 4 + 8 + 4 + 4;

/// Size of the response body before the batches' bytes.
const RESPONSE_FIXED_BYTES: usize = 8 + 8 + 4;

/// Size of the request body (version 1, read_committed, appends one byte).
pub(in crate::protocol) fn request_body_len(topic: &str, read_committed: Option<bool>) -> usize {
    str16_len(topic) + REQUEST_FIXED_BYTES + usize::from(read_committed.is_some())
}

/// The version a fetch is sent in: 1 when it says its isolation.
pub(in crate::protocol) fn request_version(read_committed: Option<bool>) -> u16 {
    u16::from(read_committed.is_some())
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    topic: &str,
    partition: u32,
    offset: u64,
    max_bytes: u32,
    max_wait_ms: u32,
    read_committed: Option<bool>,
) -> Result<(), ProtocolError> {
    put_str16(dst, "topic", topic)?;
    dst.put_u32(partition);
    dst.put_u64(offset);
    dst.put_u32(max_bytes);
    dst.put_u32(max_wait_ms);
    match read_committed {
        Some(true) => dst.put_u8(READ_COMMITTED),
        Some(false) => dst.put_u8(READ_UNCOMMITTED),
        None => {}
    }
    Ok(())
}

/// Reads the request body of `version`.
pub(in crate::protocol) fn decode_request(
    r: &mut Reader,
    version: u16,
) -> Result<Request, WireError> {
    let topic = r.string16("topic")?;
    let partition = r.u32("partition")?;
    let offset = r.u64("offset")?;
    let max_bytes = r.u32("max_bytes")?;
    let max_wait_ms = r.u32("max_wait_ms")?;
    let read_committed = if version >= 1 {
        Some(match r.u8("isolation")? {
            READ_UNCOMMITTED => false,
            READ_COMMITTED => true,
            other => {
                return Err(WireError::Invalid(format!(
                    "isolation {other} is neither 0 (read_uncommitted) nor 1 (read_committed)"
                )))
            }
        })
    } else {
        None
    };
    Ok(Request::Fetch {
        topic,
        partition,
        offset,
        max_bytes,
        max_wait_ms,
        read_committed,
    })
}

/// Size of the response body.
pub(in crate::protocol) fn response_body_len(
    batches: &[Bytes],
    committed: Option<CommittedRead>,
) -> usize {
    RESPONSE_FIXED_BYTES
        + batches.iter().map(Bytes::len).sum::<usize>()
        + committed.map_or(0, |_| COMMITTED_TRAILER_BYTES)
}

/// Writes version 1's fields after the batches.
pub(in crate::protocol) fn encode_response_trailer(
    dst: &mut BytesMut,
    committed: Option<CommittedRead>,
) {
    if let Some(committed) = committed {
        dst.put_u64(committed.last_stable_offset);
        dst.put_u64(committed.next_offset);
    }
}

/// Writes every response field up to and including the batches' total length, not the batches.
pub(in crate::protocol) fn encode_response_fields(
    dst: &mut BytesMut,
    high_watermark: u64,
    log_start_offset: u64,
    batches: &[Bytes],
) -> Result<(), ProtocolError> {
    dst.put_u64(high_watermark);
    dst.put_u64(log_start_offset);
    put_len32(dst, "batches", batches.iter().map(Bytes::len).sum())
}

/// Writes the response body.
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    high_watermark: u64,
    log_start_offset: u64,
    batches: &[Bytes],
    committed: Option<CommittedRead>,
) -> Result<(), ProtocolError> {
    encode_response_fields(dst, high_watermark, log_start_offset, batches)?;
    for batch in batches {
        dst.put_slice(batch);
    }
    encode_response_trailer(dst, committed);
    Ok(())
}

/// Reads the response body. The batches are not split (that needs the batch format's headers):
/// they come back as one zero-copy chunk, or none when the response holds no data.
pub(in crate::protocol) fn decode_response(
    r: &mut Reader,
    version: u16,
) -> Result<Response, WireError> {
    let high_watermark = r.u64("high_watermark")?;
    let log_start_offset = r.u64("log_start_offset")?;
    let blob = r.bytes32("batches")?;
    let batches = if blob.is_empty() {
        Vec::new()
    } else {
        vec![blob]
    };
    let committed = if version >= 1 {
        Some(CommittedRead {
            last_stable_offset: r.u64("last_stable_offset")?,
            next_offset: r.u64("next_offset")?,
        })
    } else {
        None
    };
    Ok(Response::Fetch {
        high_watermark,
        log_start_offset,
        batches,
        committed,
    })
}
