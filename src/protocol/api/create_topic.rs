//! `CreateTopic` (key 1): create a topic with a number of partitions and a configuration;
//! version 1 also says how many brokers hold each partition.
//!
//! Request, version 0: `name string16, partitions u32`, then the topic configuration (see
//! `protocol::topic_config`). Version 1 appends `replication_factor u16, min_insync u16` (0: the
//! default, `min(2, replication_factor)`). Response: empty.

use bytes::{BufMut, BytesMut};

use crate::domain::TopicConfig;
use crate::protocol::topic_config::{put_topic_config, read_topic_config, TOPIC_CONFIG_BYTES};
use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// The version that carries the replication settings.
pub(in crate::protocol) const REPLICATION_VERSION: u16 = 1;

pub use crate::domain::Replication;

/// The version of a request with (or without) replication settings.
pub(in crate::protocol) fn request_version(replication: Option<Replication>) -> u16 {
    if replication.is_some() {
        REPLICATION_VERSION
    } else {
        0
    }
}

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(name: &str, replication: Option<Replication>) -> usize {
    str16_len(name) + 4 + TOPIC_CONFIG_BYTES + replication.map_or(0, |_| 2 + 2)
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    name: &str,
    partitions: u32,
    config: &TopicConfig,
    replication: Option<Replication>,
) -> Result<(), ProtocolError> {
    put_str16(dst, "name", name)?;
    dst.put_u32(partitions);
    put_topic_config(dst, config);
    if let Some(replication) = replication {
        dst.put_u16(replication.factor);
        dst.put_u16(replication.min_insync.unwrap_or(0));
    }
    Ok(())
}

/// Reads the request body of `version`.
pub(in crate::protocol) fn decode_request(
    r: &mut Reader,
    version: u16,
) -> Result<Request, WireError> {
    let name = r.string16("name")?;
    let partitions = r.u32("partitions")?;
    let config = read_topic_config(r)?;
    let replication = if version >= REPLICATION_VERSION {
        let factor = r.u16("replication_factor")?;
        let min_insync = r.u16("min_insync")?;
        Some(Replication {
            factor,
            min_insync: (min_insync != 0).then_some(min_insync),
        })
    } else {
        None
    };
    Ok(Request::CreateTopic {
        name,
        partitions,
        config,
        replication,
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
