//! `AlterTopicConfig` (key 17): change a topic's live settings (segment size, retention),
//! durably (in a cluster on every broker), without a restart.
//!
//! Request: `name string16, fields u8, segment_bytes u64, retention_bytes u64, retention_ms u64`.
//! `fields` says which of the three are changed (bit 0 segment_bytes, bit 1 retention_bytes,
//! bit 2 retention_ms; the others must be 0); a field not changed is sent as 0 and ignored. A
//! retention of 0 means unlimited, as in `CreateTopic`. Response: the topic's config after the
//! change, as `Metadata` writes it. See `docs/protocol.md` section 5.17.

use bytes::{BufMut, BytesMut};

use crate::domain::{TopicConfig, TopicConfigChange};
use crate::protocol::topic_config::{put_topic_config, read_topic_config, TOPIC_CONFIG_BYTES};
use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

const SEGMENT_BYTES: u8 = 1;
const RETENTION_BYTES: u8 = 2;
const RETENTION_MS: u8 = 4;

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(name: &str) -> usize {
    str16_len(name) + 1 + 8 * 3
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    name: &str,
    change: &TopicConfigChange,
) -> Result<(), ProtocolError> {
    put_str16(dst, "name", name)?;
    let mut fields = 0;
    if change.segment_bytes.is_some() {
        fields |= SEGMENT_BYTES;
    }
    if change.retention_bytes.is_some() {
        fields |= RETENTION_BYTES;
    }
    if change.retention_ms.is_some() {
        fields |= RETENTION_MS;
    }
    dst.put_u8(fields);
    dst.put_u64(change.segment_bytes.unwrap_or(0));
    dst.put_u64(change.retention_bytes.flatten().unwrap_or(0));
    dst.put_u64(change.retention_ms.flatten().unwrap_or(0));
    Ok(())
}

/// Reads the request body; unknown `fields` bits are [`WireError::Invalid`].
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    let name = r.string16("name")?;
    let fields = r.u8("fields")?;
    if fields & !(SEGMENT_BYTES | RETENTION_BYTES | RETENTION_MS) != 0 {
        return Err(WireError::Invalid(format!(
            "fields {fields:#04x} has bits this version does not define (1 segment_bytes, 2 retention_bytes, 4 retention_ms)"
        )));
    }
    let segment_bytes = r.u64("segment_bytes")?;
    let retention_bytes = r.u64("retention_bytes")?;
    let retention_ms = r.u64("retention_ms")?;
    let unlimited_if_zero = |value: u64| (value != 0).then_some(value);
    Ok(Request::AlterTopicConfig {
        name,
        change: TopicConfigChange {
            segment_bytes: (fields & SEGMENT_BYTES != 0).then_some(segment_bytes),
            retention_bytes: (fields & RETENTION_BYTES != 0)
                .then(|| unlimited_if_zero(retention_bytes)),
            retention_ms: (fields & RETENTION_MS != 0).then(|| unlimited_if_zero(retention_ms)),
        },
    })
}

/// Size of the response body: one topic config.
pub(in crate::protocol) fn response_body_len() -> usize {
    TOPIC_CONFIG_BYTES
}

/// Writes the response body.
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    config: &TopicConfig,
) -> Result<(), ProtocolError> {
    put_topic_config(dst, config);
    Ok(())
}

/// Reads the response body.
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::AlterTopicConfig {
        config: read_topic_config(r)?,
    })
}
