//! A Kafka request frame decoded: the fixed prefix (API key, version, correlation id), the
//! request header (v1, or v2 for flexible versions), and the body, for the APIs and versions
//! listed in [`super::HANDLERS`] only (each row decodes its API's own request type).
//!
//! Layout of a request frame (after the 4-byte size the connection loop has removed):
//!
//! | bytes | field | |
//! |---|---|---|
//! | 0..2 | `api_key` (i16) | |
//! | 2..4 | `api_version` (i16) | |
//! | 4..8 | `correlation_id` (i32) | echoed in the response header |
//! | 8.. | `client_id` (nullable string), tagged fields in header v2 | |
//! | .. | the body, in that API's version | |
//!
//! The prefix is read by hand, with bounds checks, before the codec runs: the codec's own
//! header helper slices without checking and would panic on a short frame, and the version has
//! to be checked against the handler list before the body is handed to the codec at all. An
//! unsupported ApiVersions version is not an error: KIP-511 says to answer it in v0 with
//! `UNSUPPORTED_VERSION` and the table, so the client can retry with a version we have.

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::Decodable;
use thiserror::Error;

use super::api::DecodedRequest;

/// Bytes of the fixed prefix: API key, API version, correlation id.
pub const REQUEST_PREFIX_BYTES: usize = 8;

/// A decoded request of a supported API and version.
#[derive(Debug)]
pub struct KafkaRequest {
    /// The API.
    pub api_key: ApiKey,
    /// The request header (version, correlation id, client id).
    pub header: RequestHeader,
    /// The body, decoded as its API's own request type by its API's handler row.
    pub body: Box<dyn DecodedRequest>,
}

/// What a frame turned out to be.
#[derive(Debug)]
pub enum Decoded {
    /// A request the listener implements.
    Request(KafkaRequest),
    /// An ApiVersions request of a version the listener does not implement (KIP-511): answered
    /// in v0 with `UNSUPPORTED_VERSION` and the table; its body is not decoded.
    UnsupportedApiVersions {
        /// The correlation id to answer.
        correlation_id: i32,
        /// The version asked for.
        api_version: i16,
    },
}

/// A request frame the listener cannot answer. Kafka has no error response that fits every API,
/// so, as Kafka's own broker does, the connection is closed after logging this.
#[derive(Debug, Error)]
pub enum KafkaRequestError {
    /// Fewer bytes than the API key, version and correlation id.
    #[error("request frame of {len} bytes is shorter than the {REQUEST_PREFIX_BYTES}-byte header prefix")]
    Truncated {
        /// The frame's length.
        len: usize,
    },
    /// No Kafka API has this key.
    #[error("unknown Kafka API key {api_key} (correlation id {correlation_id})")]
    UnknownApiKey {
        /// The key sent.
        api_key: i16,
        /// The request's correlation id.
        correlation_id: i32,
    },
    /// A Kafka API this listener does not implement (not in ApiVersions' table).
    #[error("Kafka API {api_key:?} is not implemented by this listener (correlation id {correlation_id})")]
    UnsupportedApi {
        /// The API.
        api_key: ApiKey,
        /// The request's correlation id.
        correlation_id: i32,
    },
    /// A version of an implemented API outside the advertised range.
    #[error(
        "Kafka API {api_key:?} version {api_version} is not implemented (implemented: {min_version}..={max_version}; correlation id {correlation_id})"
    )]
    UnsupportedVersion {
        /// The API.
        api_key: ApiKey,
        /// The version sent.
        api_version: i16,
        /// Oldest implemented.
        min_version: i16,
        /// Newest implemented.
        max_version: i16,
        /// The request's correlation id.
        correlation_id: i32,
    },
    /// The request header (client id, tagged fields) does not decode.
    #[error("malformed request header for {api_key:?} v{api_version} (correlation id {correlation_id}): {reason}")]
    MalformedHeader {
        /// The API.
        api_key: ApiKey,
        /// The version.
        api_version: i16,
        /// The request's correlation id.
        correlation_id: i32,
        /// The codec's complaint.
        reason: String,
    },
    /// The body does not decode as that API's version (truncated, impossible counts, bad UTF-8).
    #[error(
        "malformed {api_key:?} v{api_version} request (correlation id {correlation_id}): {reason}"
    )]
    MalformedBody {
        /// The API.
        api_key: ApiKey,
        /// The version.
        api_version: i16,
        /// The request's correlation id.
        correlation_id: i32,
        /// The codec's complaint.
        reason: String,
    },
}

/// Decodes one request frame (the size prefix already removed and checked).
pub fn decode(mut frame: Bytes) -> Result<Decoded, KafkaRequestError> {
    if frame.len() < REQUEST_PREFIX_BYTES {
        return Err(KafkaRequestError::Truncated { len: frame.len() });
    }
    let mut prefix = &frame[..REQUEST_PREFIX_BYTES];
    let raw_api_key = prefix.get_i16();
    let api_version = prefix.get_i16();
    let correlation_id = prefix.get_i32();
    let api_key = ApiKey::try_from(raw_api_key).map_err(|_| KafkaRequestError::UnknownApiKey {
        api_key: raw_api_key,
        correlation_id,
    })?;
    let Some(handler) = super::handler(api_key) else {
        return Err(KafkaRequestError::UnsupportedApi {
            api_key,
            correlation_id,
        });
    };
    if !handler.implements(api_version) {
        if api_key == ApiKey::ApiVersions {
            return Ok(Decoded::UnsupportedApiVersions {
                correlation_id,
                api_version,
            });
        }
        return Err(KafkaRequestError::UnsupportedVersion {
            api_key,
            api_version,
            min_version: handler.min_version,
            max_version: handler.max_version,
            correlation_id,
        });
    }
    let header_version = api_key.request_header_version(api_version);
    let header = RequestHeader::decode(&mut frame, header_version).map_err(|error| {
        KafkaRequestError::MalformedHeader {
            api_key,
            api_version,
            correlation_id,
            reason: error.to_string(),
        }
    })?;
    let body = handler.decode(&mut frame, api_version).map_err(|reason| {
        KafkaRequestError::MalformedBody {
            api_key,
            api_version,
            correlation_id,
            reason,
        }
    })?;
    Ok(Decoded::Request(KafkaRequest {
        api_key,
        header,
        body,
    }))
}
