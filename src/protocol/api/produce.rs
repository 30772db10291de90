//! `Produce` (key 6): append one record batch to a partition.
//!
//! Request, version 0: `topic string16, partition u32, batch bytes32` (one batch in its stored
//! format, epoch inside its header). Version 1 appends `acks i16` (1: the leader has it, -1:
//! every in-sync replica has it; the values are Kafka's). Response (both versions):
//! `base_offset u64, last_offset u64, log_end_offset u64`.
//!
//! The request is written in parts, its fields ([`encode_request_fields`]), the batch, and the
//! fields after the batch ([`encode_request_trailer`]), so a vectored write can send the batch
//! it already holds without copying it.

use bytes::{BufMut, BytesMut};

use crate::protocol::wire::{put_len32, put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the response body.
const RESPONSE_BODY_BYTES: usize = 8 + 8 + 8;

/// The version that carries `acks`.
pub(in crate::protocol) const ACKS_VERSION: u16 = 1;

pub use crate::domain::Acks;

/// The version a request with (or without) `acks` is encoded in.
pub(in crate::protocol) fn request_version(acks: Option<Acks>) -> u16 {
    if acks.is_some() {
        ACKS_VERSION
    } else {
        0
    }
}

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(
    topic: &str,
    batch: &[u8],
    acks: Option<Acks>,
) -> usize {
    str16_len(topic) + 4 + 4 + batch.len() + acks.map_or(0, |_| 2)
}

/// Writes every request field up to and including the batch's length, not the batch itself.
pub(in crate::protocol) fn encode_request_fields(
    dst: &mut BytesMut,
    topic: &str,
    partition: u32,
    batch_len: usize,
) -> Result<(), ProtocolError> {
    put_str16(dst, "topic", topic)?;
    dst.put_u32(partition);
    put_len32(dst, "batch", batch_len)
}

/// Writes the request fields that follow the batch (version 1: `acks`).
pub(in crate::protocol) fn encode_request_trailer(dst: &mut BytesMut, acks: Option<Acks>) {
    if let Some(acks) = acks {
        dst.put_i16(acks.as_i16());
    }
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    topic: &str,
    partition: u32,
    batch: &[u8],
    acks: Option<Acks>,
) -> Result<(), ProtocolError> {
    encode_request_fields(dst, topic, partition, batch.len())?;
    dst.put_slice(batch);
    encode_request_trailer(dst, acks);
    Ok(())
}

/// Reads the request body of `version`; the batch is a zero-copy slice of the frame.
pub(in crate::protocol) fn decode_request(
    r: &mut Reader,
    version: u16,
) -> Result<Request, WireError> {
    let topic = r.string16("topic")?;
    let partition = r.u32("partition")?;
    let batch = r.bytes32("batch")?;
    let acks = if version >= ACKS_VERSION {
        let raw = r.u16("acks")? as i16;
        Some(Acks::from_i16(raw).ok_or_else(|| {
            WireError::Invalid(format!(
                "acks {raw} is not offered: send -1 (all in-sync replicas) or 1 (the leader)"
            ))
        })?)
    } else {
        None
    };
    Ok(Request::Produce {
        topic,
        partition,
        batch,
        acks,
    })
}

/// Size of the response body.
pub(in crate::protocol) fn response_body_len() -> usize {
    RESPONSE_BODY_BYTES
}

/// Writes the response body.
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    base_offset: u64,
    last_offset: u64,
    log_end_offset: u64,
) -> Result<(), ProtocolError> {
    dst.put_u64(base_offset);
    dst.put_u64(last_offset);
    dst.put_u64(log_end_offset);
    Ok(())
}

/// Reads the response body.
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::Produce {
        base_offset: r.u64("base_offset")?,
        last_offset: r.u64("last_offset")?,
        log_end_offset: r.u64("log_end_offset")?,
    })
}
