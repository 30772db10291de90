//! `CreateTopic` (key 1): create a topic with a number of partitions and a configuration.
//!
//! Request: `name string16, partitions u32`, then the topic configuration (see
//! `protocol::topic_config`). Response: empty.

use bytes::{BufMut, BytesMut};

use crate::domain::TopicConfig;
use crate::protocol::topic_config::{put_topic_config, read_topic_config, TOPIC_CONFIG_BYTES};
use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(name: &str) -> usize {
    str16_len(name) + 4 + TOPIC_CONFIG_BYTES
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    name: &str,
    partitions: u32,
    config: &TopicConfig,
) -> Result<(), ProtocolError> {
    put_str16(dst, "name", name)?;
    dst.put_u32(partitions);
    put_topic_config(dst, config);
    Ok(())
}

/// Reads the request body.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::CreateTopic {
        name: r.string16("name")?,
        partitions: r.u32("partitions")?,
        config: read_topic_config(r)?,
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
    Ok(Response::CreateTopic)
}
