//! A Kafka response and its encoding: the size prefix, the response header (v0: correlation id;
//! v1 for flexible versions: plus tagged fields; ApiVersions' is always v0 so a client that
//! does not know our versions yet can read it), then the body in the request's version.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, FetchResponse, ResponseHeader};
use kafka_protocol::protocol::Encodable;

use super::super::protocol::AfterEncode;
use crate::protocol::FRAME_LENGTH_BYTES;
use crate::server::memory_budget::Reservation;

/// A response before encoding.
#[derive(Debug)]
pub struct KafkaResponse {
    /// The request's correlation id.
    pub correlation_id: i32,
    /// The API answered.
    pub api_key: ApiKey,
    /// The body's version (the request's, or 0 for the KIP-511 ApiVersions fallback).
    pub api_version: i16,
    /// The body.
    pub body: ResponseBody,
}

/// The body of a response: any API's response message, or one of the two bodies that are
/// written differently (Fetch's, whose record buffers may go out without a copy, and a raw
/// SASL token). Not an enum of every API, so an API's file is the only place that names its
/// response type.
#[derive(Debug)]
pub enum ResponseBody {
    /// An API's response message, encoded by the codec in the response's version.
    Message(Box<dyn ResponseMessage>),
    /// Fetch (1), with the memory-budget share its record buffers hold until it is encoded,
    /// and the records of partitions that are several buffers.
    Fetch(
        FetchResponse,
        Option<Reservation>,
        super::fetch_encoding::RecordParts,
    ),
    /// A raw SASL token after SaslHandshake v0: written after the size prefix as is, with no
    /// response header (the client reads it as the SASL mechanism's bytes).
    RawSaslToken(Bytes),
}

impl ResponseBody {
    /// The body of `message`, any API's response message.
    pub fn message(message: impl ResponseMessage + 'static) -> Self {
        Self::Message(Box::new(message))
    }

    fn encode(&self, out: &mut BytesMut, version: i16) -> Result<(), String> {
        let encoded = match self {
            Self::Message(body) => return body.encode_message(out, version),
            Self::Fetch(body, _, split) if split.is_empty() => body.encode(out, version),
            Self::Fetch(body, _, split) => split.joined(body).encode(out, version),
            Self::RawSaslToken(token) => {
                out.put_slice(token);
                Ok(())
            }
        };
        encoded.map_err(|error| format!("{error:#}"))
    }
}

/// A response message the codec encodes: the one method of `Encodable` a response needs, in a
/// form a `Box<dyn _>` can hold (the codec's is generic over the buffer).
pub trait ResponseMessage: std::fmt::Debug + Send {
    /// Appends the message in `version` to `out`, or says why it cannot (the codec's
    /// complaint, formatted).
    fn encode_message(&self, out: &mut BytesMut, version: i16) -> Result<(), String>;
}

impl<T: Encodable + std::fmt::Debug + Send> ResponseMessage for T {
    fn encode_message(&self, out: &mut BytesMut, version: i16) -> Result<(), String> {
        self.encode(out, version)
            .map_err(|error| format!("{error:#}"))
    }
}

impl KafkaResponse {
    /// The response header version for this API and version.
    pub fn header_version(&self) -> i16 {
        self.api_key.response_header_version(self.api_version)
    }

    /// Appends the whole frame (size prefix, header, body) to `out`; on failure `out` is left
    /// as it was.
    pub fn encode_frame(&self, out: &mut BytesMut, max_frame_bytes: usize) -> Result<(), String> {
        let start = out.len();
        let result = self.encode_after_prefix(out, start, max_frame_bytes);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn encode_after_prefix(
        &self,
        out: &mut BytesMut,
        start: usize,
        max_frame_bytes: usize,
    ) -> Result<(), String> {
        out.put_u32(0);
        if !matches!(self.body, ResponseBody::RawSaslToken(_)) {
            ResponseHeader::default()
                .with_correlation_id(self.correlation_id)
                .encode(out, self.header_version())
                .map_err(|error| format!("response header: {error:#}"))?;
        }
        self.body
            .encode(out, self.api_version)
            .map_err(|error| format!("response body: {error}"))?;
        let length = out.len() - start - FRAME_LENGTH_BYTES;
        if length > max_frame_bytes {
            return Err(format!(
                "response of {length} bytes exceeds the frame limit of {max_frame_bytes}"
            ));
        }
        let length = u32::try_from(length).map_err(|_| "response over 4 GiB".to_string())?;
        out[start..start + FRAME_LENGTH_BYTES].copy_from_slice(&length.to_be_bytes());
        Ok(())
    }

    /// Encodes into `scratch` and hands the frame to `parts`; a response that cannot be encoded
    /// is dropped and the connection closed (Kafka has no generic error response a client
    /// could match to its request).
    pub fn encode_into(
        self,
        max_frame_bytes: usize,
        scratch: &mut BytesMut,
        parts: &mut Vec<Bytes>,
    ) -> AfterEncode {
        let zero_copy = match &self.body {
            ResponseBody::Fetch(body, _, split) => super::fetch_encoding::encode_fetch_frame(
                self.correlation_id,
                self.api_version,
                body,
                split,
                max_frame_bytes,
                scratch,
                parts,
            ),
            _ => None,
        };
        let encoded = match zero_copy {
            Some(result) => result,
            None => self
                .encode_frame(scratch, max_frame_bytes)
                .map(|()| parts.push(scratch.split().freeze())),
        };
        match encoded {
            Ok(()) => AfterEncode::Continue,
            Err(reason) => {
                tracing::error!(
                    api_key = ?self.api_key,
                    api_version = self.api_version,
                    correlation_id = self.correlation_id,
                    %reason,
                    "Kafka response could not be encoded"
                );
                AfterEncode::Close
            }
        }
    }
}
