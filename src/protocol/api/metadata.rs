//! `Metadata` (key 2): describe some or all topics.
//!
//! Request: `topic_count u16`, then that many `string16` names (none means every topic).
//! Response: `topic_count u32`, then per topic `name string16, partitions u32` and its
//! configuration (see `protocol::topic_config`).

use bytes::{BufMut, BytesMut};

use crate::domain::TopicConfig;
use crate::protocol::topic_config::{put_topic_config, read_topic_config, TOPIC_CONFIG_BYTES};
use crate::protocol::wire::{put_len32, put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Smallest possible encoding of one response entry (empty name).
const TOPIC_METADATA_MIN_BYTES: usize = 2 + 4 + TOPIC_CONFIG_BYTES;

/// Smallest possible encoding of one requested topic name (empty name).
const TOPIC_NAME_MIN_BYTES: usize = 2;

/// One topic in a `Metadata` response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    /// Topic name.
    pub name: String,
    /// Number of partitions, numbered `0..partitions`.
    pub partitions: u32,
    /// The topic's configuration.
    pub config: TopicConfig,
}

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(topics: &[String]) -> usize {
    2 + topics.iter().map(|t| str16_len(t)).sum::<usize>()
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    topics: &[String],
) -> Result<(), ProtocolError> {
    let count = u16::try_from(topics.len()).map_err(|_| {
        ProtocolError::Unencodable(format!(
            "Metadata request names {} topics; at most 65535 fit",
            topics.len()
        ))
    })?;
    dst.put_u16(count);
    for topic in topics {
        put_str16(dst, "topic name", topic)?;
    }
    Ok(())
}

/// Reads the request body; the list's capacity is capped by the bytes that remain.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    let count = usize::from(r.u16("topic_count")?);
    let mut topics = Vec::with_capacity(r.capped(count, TOPIC_NAME_MIN_BYTES));
    for _ in 0..count {
        topics.push(r.string16("topic name")?);
    }
    Ok(Request::Metadata { topics })
}

/// Size of the response body.
pub(in crate::protocol) fn response_body_len(topics: &[TopicMetadata]) -> usize {
    4 + topics
        .iter()
        .map(|t| str16_len(&t.name) + 4 + TOPIC_CONFIG_BYTES)
        .sum::<usize>()
}

/// Writes the response body.
pub(in crate::protocol) fn encode_response(
    dst: &mut BytesMut,
    topics: &[TopicMetadata],
) -> Result<(), ProtocolError> {
    put_len32(dst, "topic count", topics.len())?;
    for topic in topics {
        put_str16(dst, "topic name", &topic.name)?;
        dst.put_u32(topic.partitions);
        put_topic_config(dst, &topic.config);
    }
    Ok(())
}

/// Reads the response body; the list's capacity is capped by the bytes that remain.
pub(in crate::protocol) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    let count = r.len32("topic_count")?;
    let mut topics = Vec::with_capacity(r.capped(count, TOPIC_METADATA_MIN_BYTES));
    for _ in 0..count {
        topics.push(TopicMetadata {
            name: r.string16("topic name")?,
            partitions: r.u32("partitions")?,
            config: read_topic_config(r)?,
        });
    }
    Ok(Response::Metadata { topics })
}
