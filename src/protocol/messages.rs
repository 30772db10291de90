//! Typed requests and responses, and their byte-exact body encoding.
//!
//! A frame body (everything after the `u32` length prefix) is a header
//! followed by the API-specific body; this file turns such bodies into the
//! [`RequestFrame`] / [`ResponseFrame`] types and back. It is deliberately
//! independent of the framing layer so that a malformed body is reported as a
//! [`RequestDecodeError`] carrying the correlation id (the server answers it
//! and keeps the connection) rather than as a stream error. Decoding never
//! panics and never allocates more than the frame holds: every length read
//! from the wire is checked against the bytes that remain before it is used,
//! and list capacities are capped by what the remaining bytes could encode.
//!
//! It also defines [`TopicConfig`] and [`FlushPolicy`], which travel in
//! `CreateTopic` and `Metadata` and which the storage layer re-uses so that
//! there is one definition of a topic's configuration.

use std::fmt;
use std::str::FromStr;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

use super::codec::FRAME_LENGTH_BYTES;
use super::{ErrorCode, ProtocolError};

/// Size of a request header: `api_key u16, api_version u16, correlation_id u32`.
pub const REQUEST_HEADER_BYTES: usize = 8;

/// Size of a response header: `correlation_id u32, error_code u16`.
pub const RESPONSE_HEADER_BYTES: usize = 6;

/// What this build reports as `server` in an `ApiVersions` response.
pub const SERVER_SOFTWARE: &str = concat!("fencelog ", env!("CARGO_PKG_VERSION"));

/// Flush interval used when a policy string says just `"interval"`.
pub const DEFAULT_FLUSH_INTERVAL_MS: u64 = 100;

/// Wire size of an encoded [`TopicConfig`]: four `u64`s and one `u8`.
const TOPIC_CONFIG_BYTES: usize = 8 + 1 + 8 + 8 + 8;

/// Smallest possible encoding of one `Metadata` response entry (empty name).
const TOPIC_METADATA_MIN_BYTES: usize = 2 + 4 + TOPIC_CONFIG_BYTES;

/// Wire size of one `ApiVersions` entry.
const API_VERSION_RANGE_BYTES: usize = 6;

// ---------------------------------------------------------------------------
// Topic configuration
// ---------------------------------------------------------------------------

/// When the storage layer fsyncs appended data.
///
/// This is the durability/throughput trade-off of a topic, so it is part of the
/// topic's configuration and travels on the wire (`flush_policy u8`,
/// `flush_interval_ms u64`). The textual form (see [`FromStr`] and
/// [`fmt::Display`]) is what command-line flags and config files use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushPolicy {
    /// Never fsync explicitly; leave it to the operating system.
    Never,
    /// Fsync at most every `interval_ms` milliseconds.
    Interval {
        /// Milliseconds between fsyncs; a server rejects 0 as invalid config.
        interval_ms: u64,
    },
    /// Fsync before acknowledging every produce request.
    Always,
}

impl Default for FlushPolicy {
    /// `Always`: durability is the safe default; speed is opt-in.
    fn default() -> Self {
        FlushPolicy::Always
    }
}

impl FlushPolicy {
    fn wire_tag(self) -> u8 {
        match self {
            FlushPolicy::Never => 0,
            FlushPolicy::Interval { .. } => 1,
            FlushPolicy::Always => 2,
        }
    }

    fn wire_interval_ms(self) -> u64 {
        match self {
            FlushPolicy::Interval { interval_ms } => interval_ms,
            FlushPolicy::Never | FlushPolicy::Always => 0,
        }
    }
}

impl fmt::Display for FlushPolicy {
    /// Writes the form [`FromStr`] accepts: `never`, `always`, `interval:250ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlushPolicy::Never => f.write_str("never"),
            FlushPolicy::Interval { interval_ms } => write!(f, "interval:{interval_ms}ms"),
            FlushPolicy::Always => f.write_str("always"),
        }
    }
}

/// Why a flush policy string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid flush policy {input:?}: {reason} \
     (expected \"never\", \"always\", \"interval\" or \"interval:<N>ms\" / \"interval:<N>s\")"
)]
pub struct ParseFlushPolicyError {
    input: String,
    reason: &'static str,
}

impl FromStr for FlushPolicy {
    type Err = ParseFlushPolicyError;

    /// Accepts `never`, `always`, `interval` (meaning
    /// [`DEFAULT_FLUSH_INTERVAL_MS`]) and `interval:<N>` with an optional `ms`
    /// or `s` unit (no unit means milliseconds); case-insensitive. A zero
    /// interval is refused because it would silently mean "always".
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| ParseFlushPolicyError {
            input: s.to_owned(),
            reason,
        };
        let lower = s.trim().to_ascii_lowercase();
        match lower.as_str() {
            "never" => return Ok(FlushPolicy::Never),
            "always" => return Ok(FlushPolicy::Always),
            "interval" => {
                return Ok(FlushPolicy::Interval {
                    interval_ms: DEFAULT_FLUSH_INTERVAL_MS,
                })
            }
            _ => {}
        }
        let spec = lower
            .strip_prefix("interval:")
            .ok_or_else(|| err("unknown policy"))?
            .trim();
        let (digits, scale) = if let Some(d) = spec.strip_suffix("ms") {
            (d, 1)
        } else if let Some(d) = spec.strip_suffix('s') {
            (d, 1000)
        } else {
            (spec, 1)
        };
        let digits = digits.trim();
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err("the interval must be a whole number of ms or s"));
        }
        let n: u64 = digits
            .parse()
            .map_err(|_| err("the interval is too large"))?;
        let interval_ms = n
            .checked_mul(scale)
            .ok_or_else(|| err("the interval is too large"))?;
        if interval_ms == 0 {
            return Err(err("the interval must be at least 1 ms"));
        }
        Ok(FlushPolicy::Interval { interval_ms })
    }
}

/// A topic's configuration, as sent in `CreateTopic` and returned by
/// `Metadata`, and as persisted by storage.
///
/// On the wire the retention limits use 0 for "unlimited", so `Some(0)` cannot
/// be represented: it is encoded as 0 and decodes as `None`. A server should
/// reject `Some(0)` from its own configuration sources as invalid config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TopicConfig {
    /// Size at which the active segment is rolled to a new file.
    pub segment_bytes: u64,
    /// When appends are fsynced.
    pub flush: FlushPolicy,
    /// Delete old segments once a partition exceeds this many bytes.
    pub retention_bytes: Option<u64>,
    /// Delete segments whose newest record is older than this many ms.
    pub retention_ms: Option<u64>,
}

impl TopicConfig {
    /// Default segment size: 64 MiB.
    pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;

    fn encode(&self, dst: &mut BytesMut) {
        dst.put_u64(self.segment_bytes);
        dst.put_u8(self.flush.wire_tag());
        dst.put_u64(self.flush.wire_interval_ms());
        dst.put_u64(self.retention_bytes.unwrap_or(0));
        dst.put_u64(self.retention_ms.unwrap_or(0));
    }

    fn decode(r: &mut Reader) -> Result<Self, WireError> {
        let segment_bytes = r.u64("segment_bytes")?;
        let tag = r.u8("flush_policy")?;
        // Read the interval unconditionally: it is always on the wire, and is
        // ignored for policies that have no interval.
        let interval_ms = r.u64("flush_interval_ms")?;
        let flush = match tag {
            0 => FlushPolicy::Never,
            1 => FlushPolicy::Interval { interval_ms },
            2 => FlushPolicy::Always,
            other => {
                return Err(WireError::Invalid(format!(
                    "unknown flush_policy {other} (expected 0 = never, 1 = interval, 2 = always)"
                )))
            }
        };
        let nonzero = |v: u64| (v != 0).then_some(v);
        let retention_bytes = nonzero(r.u64("retention_bytes")?);
        let retention_ms = nonzero(r.u64("retention_ms")?);
        Ok(TopicConfig {
            segment_bytes,
            flush,
            retention_bytes,
            retention_ms,
        })
    }
}

impl Default for TopicConfig {
    /// 64 MiB segments, fsync on every produce, keep everything forever.
    fn default() -> Self {
        TopicConfig {
            segment_bytes: Self::DEFAULT_SEGMENT_BYTES,
            flush: FlushPolicy::Always,
            retention_bytes: None,
            retention_ms: None,
        }
    }
}

// ---------------------------------------------------------------------------
// API keys
// ---------------------------------------------------------------------------

/// Which operation a request asks for; the first field of every request
/// header. The discriminants are the wire values.
#[repr(u16)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ApiKey {
    /// Discover the server software and the API versions it supports.
    ApiVersions = 0,
    /// Create a topic with a number of partitions and a configuration.
    CreateTopic = 1,
    /// Describe some or all topics.
    Metadata = 2,
    /// Take the write lease of a partition, obtaining a new epoch.
    AcquireLease = 3,
    /// Extend a lease before it expires.
    RenewLease = 4,
    /// Give a lease up early.
    ReleaseLease = 5,
    /// Append one record batch to a partition.
    Produce = 6,
    /// Read record batches from a partition.
    Fetch = 7,
    /// Read a partition's offset range and current epoch.
    ListOffsets = 8,
}

impl ApiKey {
    /// Every API, in wire order.
    pub const ALL: [ApiKey; 9] = [
        ApiKey::ApiVersions,
        ApiKey::CreateTopic,
        ApiKey::Metadata,
        ApiKey::AcquireLease,
        ApiKey::RenewLease,
        ApiKey::ReleaseLease,
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::ListOffsets,
    ];

    /// Maps a wire value to an API; `None` for keys this build does not know.
    pub fn from_u16(value: u16) -> Option<ApiKey> {
        Self::ALL.get(usize::from(value)).copied()
    }

    /// The on-wire value.
    pub fn as_u16(self) -> u16 {
        self as u16
    }

    /// The API's name as used in docs and logs.
    pub fn name(self) -> &'static str {
        match self {
            ApiKey::ApiVersions => "ApiVersions",
            ApiKey::CreateTopic => "CreateTopic",
            ApiKey::Metadata => "Metadata",
            ApiKey::AcquireLease => "AcquireLease",
            ApiKey::RenewLease => "RenewLease",
            ApiKey::ReleaseLease => "ReleaseLease",
            ApiKey::Produce => "Produce",
            ApiKey::Fetch => "Fetch",
            ApiKey::ListOffsets => "ListOffsets",
        }
    }

    /// Oldest version of this API the build understands.
    pub fn min_version(self) -> u16 {
        0
    }

    /// Newest version of this API the build understands.
    pub fn max_version(self) -> u16 {
        0
    }

    /// Whether `version` is within `min_version..=max_version`.
    pub fn supports_version(self, version: u16) -> bool {
        (self.min_version()..=self.max_version()).contains(&version)
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One entry of an `ApiVersions` response.
///
/// `api_key` is the raw `u16` rather than an [`ApiKey`] so that a client can
/// read the list from a newer server that supports APIs it has never heard of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ApiVersionRange {
    /// The API's wire key.
    pub api_key: u16,
    /// Oldest supported version.
    pub min_version: u16,
    /// Newest supported version.
    pub max_version: u16,
}

impl ApiVersionRange {
    /// The ranges this build supports, one per [`ApiKey`], in key order.
    pub fn supported() -> Vec<ApiVersionRange> {
        ApiKey::ALL
            .iter()
            .map(|k| ApiVersionRange {
                api_key: k.as_u16(),
                min_version: k.min_version(),
                max_version: k.max_version(),
            })
            .collect()
    }
}

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

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/// A request body, one variant per API (see `docs/protocol.md` for the
/// semantics of each field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Ask which API versions the server supports. Empty body.
    ApiVersions,
    /// Create a topic.
    CreateTopic {
        /// Topic name.
        name: String,
        /// Number of partitions.
        partitions: u32,
        /// Topic configuration.
        config: TopicConfig,
    },
    /// Describe topics.
    Metadata {
        /// Topics to describe; empty means all topics.
        topics: Vec<String>,
    },
    /// Acquire the write lease of a partition.
    AcquireLease {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// Free-form identity of the would-be writer, for logs and errors.
        holder: String,
        /// Requested lease duration in milliseconds.
        ttl_ms: u64,
    },
    /// Renew a lease.
    RenewLease {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// The id returned by `AcquireLease`.
        lease_id: u128,
    },
    /// Release a lease.
    ReleaseLease {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// The id returned by `AcquireLease`.
        lease_id: u128,
    },
    /// Append one record batch.
    Produce {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// One record batch in its stored format (epoch inside its header).
        /// When decoded, this is a zero-copy slice of the received frame.
        batch: Bytes,
    },
    /// Read batches.
    Fetch {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
        /// First offset wanted.
        offset: u64,
        /// Soft cap on the bytes of batches returned.
        max_bytes: u32,
        /// How long the server may wait for data if none is available yet.
        max_wait_ms: u32,
    },
    /// Read a partition's offsets and epoch.
    ListOffsets {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: u32,
    },
}

impl Request {
    /// The API this request belongs to.
    pub fn api_key(&self) -> ApiKey {
        match self {
            Request::ApiVersions => ApiKey::ApiVersions,
            Request::CreateTopic { .. } => ApiKey::CreateTopic,
            Request::Metadata { .. } => ApiKey::Metadata,
            Request::AcquireLease { .. } => ApiKey::AcquireLease,
            Request::RenewLease { .. } => ApiKey::RenewLease,
            Request::ReleaseLease { .. } => ApiKey::ReleaseLease,
            Request::Produce { .. } => ApiKey::Produce,
            Request::Fetch { .. } => ApiKey::Fetch,
            Request::ListOffsets { .. } => ApiKey::ListOffsets,
        }
    }

    fn body_len(&self) -> usize {
        match self {
            Request::ApiVersions => 0,
            Request::CreateTopic { name, .. } => str16_len(name) + 4 + TOPIC_CONFIG_BYTES,
            Request::Metadata { topics } => 2 + topics.iter().map(|t| str16_len(t)).sum::<usize>(),
            Request::AcquireLease { topic, holder, .. } => {
                str16_len(topic) + 4 + str16_len(holder) + 8
            }
            Request::RenewLease { topic, .. } | Request::ReleaseLease { topic, .. } => {
                str16_len(topic) + 4 + 16
            }
            Request::Produce { topic, batch, .. } => str16_len(topic) + 4 + 4 + batch.len(),
            Request::Fetch { topic, .. } => str16_len(topic) + 4 + 8 + 4 + 4,
            Request::ListOffsets { topic, .. } => str16_len(topic) + 4,
        }
    }

    fn encode_body(&self, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        match self {
            Request::ApiVersions => {}
            Request::CreateTopic {
                name,
                partitions,
                config,
            } => {
                put_str16(dst, "name", name)?;
                dst.put_u32(*partitions);
                config.encode(dst);
            }
            Request::Metadata { topics } => {
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
            }
            Request::AcquireLease {
                topic,
                partition,
                holder,
                ttl_ms,
            } => {
                put_str16(dst, "topic", topic)?;
                dst.put_u32(*partition);
                put_str16(dst, "holder", holder)?;
                dst.put_u64(*ttl_ms);
            }
            Request::RenewLease {
                topic,
                partition,
                lease_id,
            }
            | Request::ReleaseLease {
                topic,
                partition,
                lease_id,
            } => {
                put_str16(dst, "topic", topic)?;
                dst.put_u32(*partition);
                dst.put_u128(*lease_id);
            }
            Request::Produce {
                topic,
                partition,
                batch,
            } => {
                put_str16(dst, "topic", topic)?;
                dst.put_u32(*partition);
                put_len32(dst, "batch", batch.len())?;
                dst.put_slice(batch);
            }
            Request::Fetch {
                topic,
                partition,
                offset,
                max_bytes,
                max_wait_ms,
            } => {
                put_str16(dst, "topic", topic)?;
                dst.put_u32(*partition);
                dst.put_u64(*offset);
                dst.put_u32(*max_bytes);
                dst.put_u32(*max_wait_ms);
            }
            Request::ListOffsets { topic, partition } => {
                put_str16(dst, "topic", topic)?;
                dst.put_u32(*partition);
            }
        }
        Ok(())
    }

    fn decode_body(api_key: ApiKey, r: &mut Reader) -> Result<Request, WireError> {
        Ok(match api_key {
            ApiKey::ApiVersions => Request::ApiVersions,
            ApiKey::CreateTopic => Request::CreateTopic {
                name: r.string16("name")?,
                partitions: r.u32("partitions")?,
                config: TopicConfig::decode(r)?,
            },
            ApiKey::Metadata => {
                let count = usize::from(r.u16("topic_count")?);
                let mut topics = Vec::with_capacity(r.capped(count, 2));
                for _ in 0..count {
                    topics.push(r.string16("topic name")?);
                }
                Request::Metadata { topics }
            }
            ApiKey::AcquireLease => Request::AcquireLease {
                topic: r.string16("topic")?,
                partition: r.u32("partition")?,
                holder: r.string16("holder")?,
                ttl_ms: r.u64("ttl_ms")?,
            },
            ApiKey::RenewLease => Request::RenewLease {
                topic: r.string16("topic")?,
                partition: r.u32("partition")?,
                lease_id: r.u128("lease_id")?,
            },
            ApiKey::ReleaseLease => Request::ReleaseLease {
                topic: r.string16("topic")?,
                partition: r.u32("partition")?,
                lease_id: r.u128("lease_id")?,
            },
            ApiKey::Produce => Request::Produce {
                topic: r.string16("topic")?,
                partition: r.u32("partition")?,
                batch: r.bytes32("batch")?,
            },
            ApiKey::Fetch => Request::Fetch {
                topic: r.string16("topic")?,
                partition: r.u32("partition")?,
                offset: r.u64("offset")?,
                max_bytes: r.u32("max_bytes")?,
                max_wait_ms: r.u32("max_wait_ms")?,
            },
            ApiKey::ListOffsets => Request::ListOffsets {
                topic: r.string16("topic")?,
                partition: r.u32("partition")?,
            },
        })
    }
}

/// A complete request: header fields plus body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestFrame {
    /// Chosen by the client and echoed in the response, so pipelined
    /// responses can be matched to their requests.
    pub correlation_id: u32,
    /// Version of the API the body is encoded in (always 0 today).
    pub api_version: u16,
    /// The request itself; its variant determines the header's `api_key`.
    pub request: Request,
}

impl RequestFrame {
    /// A version-0 request, which is the only version that exists.
    pub fn new(correlation_id: u32, request: Request) -> RequestFrame {
        RequestFrame {
            correlation_id,
            api_version: 0,
            request,
        }
    }

    /// Total bytes [`encode`](Self::encode) writes, length prefix included;
    /// lets callers check a size limit before encoding.
    pub fn encoded_len(&self) -> usize {
        FRAME_LENGTH_BYTES + REQUEST_HEADER_BYTES + self.request.body_len()
    }

    /// Appends the whole frame (length prefix, header, body) to `dst`.
    ///
    /// Fails with [`ProtocolError::Unencodable`] if a value does not fit its
    /// wire field; `dst` is then left exactly as it was.
    pub fn encode(&self, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        let total = self.encoded_len();
        let declared = frame_length_field(total)?;
        let start = dst.len();
        dst.reserve(total);
        dst.put_u32(declared);
        dst.put_u16(self.request.api_key().as_u16());
        dst.put_u16(self.api_version);
        dst.put_u32(self.correlation_id);
        if let Err(e) = self.request.encode_body(dst) {
            dst.truncate(start);
            return Err(e);
        }
        debug_assert_eq!(dst.len() - start, total);
        Ok(())
    }

    /// Encodes the frame for a vectored write: the encoded header and fields go into `dst` and
    /// are split off into `out` as `Bytes`, while the batch of a `Produce` is pushed to `out` as
    /// it is, never copied on its way to the socket. The bytes, concatenated, are exactly what
    /// [`RequestFrame::encode`] writes; on failure nothing is pushed and `dst` is unchanged.
    pub fn encode_vectored(
        &self,
        dst: &mut BytesMut,
        out: &mut Vec<Bytes>,
    ) -> Result<(), ProtocolError> {
        let Request::Produce {
            topic,
            partition,
            batch,
        } = &self.request
        else {
            self.encode(dst)?;
            out.push(dst.split().freeze());
            return Ok(());
        };
        let declared = frame_length_field(self.encoded_len())?;
        let start = dst.len();
        dst.put_u32(declared);
        dst.put_u16(self.request.api_key().as_u16());
        dst.put_u16(self.api_version);
        dst.put_u32(self.correlation_id);
        let fields = put_str16(dst, "topic", topic).and_then(|()| {
            dst.put_u32(*partition);
            put_len32(dst, "batch", batch.len())
        });
        if let Err(error) = fields {
            dst.truncate(start);
            return Err(error);
        }
        out.push(dst.split().freeze());
        out.push(batch.clone());
        Ok(())
    }

    /// Parses one frame body (without its length prefix).
    ///
    /// On failure the error carries whatever header fields could be read, so
    /// the server can answer with the right correlation id and error code
    /// (see [`RequestDecodeError::to_response`]).
    pub fn decode(frame: Bytes) -> Result<RequestFrame, RequestDecodeError> {
        if frame.len() < REQUEST_HEADER_BYTES {
            let api_key = match frame.get(..2) {
                Some(&[hi, lo]) => Some(u16::from_be_bytes([hi, lo])),
                _ => None,
            };
            return Err(RequestDecodeError {
                correlation_id: None,
                api_key,
                kind: RequestDecodeErrorKind::Truncated,
                detail: format!(
                    "request header needs {REQUEST_HEADER_BYTES} bytes but the frame holds {}",
                    frame.len()
                ),
            });
        }
        let mut r = Reader::new(frame);
        // Cannot fail: the length was checked just above. The default keeps
        // this path panic-free without an `expect`.
        let header = r
            .array::<REQUEST_HEADER_BYTES>("request header")
            .unwrap_or_default();
        let raw_api = u16::from_be_bytes([header[0], header[1]]);
        let api_version = u16::from_be_bytes([header[2], header[3]]);
        let correlation_id = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
        let fail = |kind, detail| RequestDecodeError {
            correlation_id: Some(correlation_id),
            api_key: Some(raw_api),
            kind,
            detail,
        };

        let Some(api_key) = ApiKey::from_u16(raw_api) else {
            return Err(fail(
                RequestDecodeErrorKind::UnknownApi(raw_api),
                format!("unknown api key {raw_api}; send ApiVersions to list the supported APIs"),
            ));
        };
        if !api_key.supports_version(api_version) {
            return Err(fail(
                RequestDecodeErrorKind::UnsupportedVersion {
                    api_key,
                    version: api_version,
                },
                format!(
                    "{api_key} version {api_version} is not supported (supported: {}..={})",
                    api_key.min_version(),
                    api_key.max_version()
                ),
            ));
        }
        let parsed = Request::decode_body(api_key, &mut r);
        let request = parsed
            .and_then(|request| r.finish().map(|()| request))
            .map_err(|e| fail(e.kind(), format!("malformed {api_key} request: {e}")))?;
        Ok(RequestFrame {
            correlation_id,
            api_version,
            request,
        })
    }
}

/// Why a request frame could not be parsed, with as much of its header as
/// was readable so the server can still answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestDecodeError {
    /// The request's correlation id; `Some` when the 8-byte header was
    /// complete. When `None` the server cannot address its answer and should
    /// reply with correlation id 0 and close the connection.
    pub correlation_id: Option<u32>,
    /// The raw api key, when at least its two bytes were present.
    pub api_key: Option<u16>,
    /// What went wrong, coarsely, for choosing the error code.
    pub kind: RequestDecodeErrorKind,
    /// A human-readable explanation, suitable as the error message sent back.
    pub detail: String,
}

/// Classification of a [`RequestDecodeError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestDecodeErrorKind {
    /// The frame ended before a field (or the header) was complete.
    Truncated,
    /// The header's api key is not known.
    UnknownApi(u16),
    /// The API is known but not in this version.
    UnsupportedVersion {
        /// The API.
        api_key: ApiKey,
        /// The requested version.
        version: u16,
    },
    /// The body was complete but bytes were left over after it.
    TrailingBytes,
    /// A string field was not valid UTF-8.
    InvalidUtf8,
    /// A field held a value outside its domain.
    Invalid(String),
}

impl RequestDecodeError {
    /// The error code to answer with: `UNKNOWN_API`, `UNSUPPORTED_VERSION`,
    /// or `INVALID_REQUEST` for everything else.
    pub fn error_code(&self) -> ErrorCode {
        match self.kind {
            RequestDecodeErrorKind::UnknownApi(_) => ErrorCode::UnknownApi,
            RequestDecodeErrorKind::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
            RequestDecodeErrorKind::Truncated
            | RequestDecodeErrorKind::TrailingBytes
            | RequestDecodeErrorKind::InvalidUtf8
            | RequestDecodeErrorKind::Invalid(_) => ErrorCode::InvalidRequest,
        }
    }

    /// Whether the connection should be closed after answering: only when the
    /// header was unreadable, because then the client cannot match the answer
    /// to a request. Every other malformed request leaves the framing intact.
    pub fn must_close_connection(&self) -> bool {
        self.correlation_id.is_none()
    }

    /// The response the server should send: the error code above, this
    /// error's detail as message, and the correlation id (0 if unknown).
    pub fn to_response(&self) -> ResponseFrame {
        ResponseFrame::error(
            self.correlation_id.unwrap_or(0),
            ErrorResponse::new(self.error_code(), self.detail.clone()),
        )
    }
}

impl fmt::Display for RequestDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cannot decode request")?;
        if let Some(id) = self.correlation_id {
            write!(f, " (correlation id {id})")?;
        }
        write!(f, ": {}", self.detail)
    }
}

impl std::error::Error for RequestDecodeError {}

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

/// A successful response body, one variant per API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// Server software and supported API versions.
    ApiVersions {
        /// Server software and version, e.g. [`SERVER_SOFTWARE`].
        server: String,
        /// One entry per supported API.
        apis: Vec<ApiVersionRange>,
    },
    /// The topic was created. Empty body.
    CreateTopic,
    /// Topic descriptions.
    Metadata {
        /// The requested topics (or all of them).
        topics: Vec<TopicMetadata>,
    },
    /// A lease was granted.
    AcquireLease {
        /// The new epoch (fencing token) to stamp into produced batches.
        epoch: u64,
        /// Secret identifying this lease for renew and release.
        lease_id: u128,
        /// Granted lease duration in milliseconds.
        ttl_ms: u64,
    },
    /// A lease was renewed.
    RenewLease {
        /// The lease's epoch (unchanged by renewal).
        epoch: u64,
        /// Milliseconds until the renewed lease expires.
        ttl_ms: u64,
    },
    /// The lease was released. Empty body.
    ReleaseLease,
    /// A batch was appended.
    Produce {
        /// Offset of the batch's first record.
        base_offset: u64,
        /// Offset of the batch's last record.
        last_offset: u64,
        /// The partition's next offset after the append.
        log_end_offset: u64,
    },
    /// Batches read from a partition.
    Fetch {
        /// Offset up to which data is durable and visible to readers.
        high_watermark: u64,
        /// Oldest offset still stored.
        log_start_offset: u64,
        /// Whole stored batches, concatenated on the wire as one `bytes32`.
        /// The encoder writes the parts back to back; the decoder does not
        /// split them (that needs the storage format's batch headers): it
        /// yields a single zero-copy chunk, or an empty `Vec` for no data.
        batches: Vec<Bytes>,
    },
    /// A partition's offsets and epoch.
    ListOffsets {
        /// Oldest offset still stored.
        earliest: u64,
        /// Next offset to be written (log end offset).
        latest: u64,
        /// The partition's current epoch.
        epoch: u64,
    },
}

impl Response {
    /// The `ApiVersions` answer of this build.
    pub fn supported_api_versions() -> Response {
        Response::ApiVersions {
            server: SERVER_SOFTWARE.to_owned(),
            apis: ApiVersionRange::supported(),
        }
    }

    /// The API this response answers.
    pub fn api_key(&self) -> ApiKey {
        match self {
            Response::ApiVersions { .. } => ApiKey::ApiVersions,
            Response::CreateTopic => ApiKey::CreateTopic,
            Response::Metadata { .. } => ApiKey::Metadata,
            Response::AcquireLease { .. } => ApiKey::AcquireLease,
            Response::RenewLease { .. } => ApiKey::RenewLease,
            Response::ReleaseLease => ApiKey::ReleaseLease,
            Response::Produce { .. } => ApiKey::Produce,
            Response::Fetch { .. } => ApiKey::Fetch,
            Response::ListOffsets { .. } => ApiKey::ListOffsets,
        }
    }

    fn body_len(&self) -> usize {
        match self {
            Response::ApiVersions { server, apis } => {
                str16_len(server) + 2 + apis.len() * API_VERSION_RANGE_BYTES
            }
            Response::CreateTopic | Response::ReleaseLease => 0,
            Response::Metadata { topics } => {
                4 + topics
                    .iter()
                    .map(|t| str16_len(&t.name) + 4 + TOPIC_CONFIG_BYTES)
                    .sum::<usize>()
            }
            Response::AcquireLease { .. } => 8 + 16 + 8,
            Response::RenewLease { .. } => 8 + 8,
            Response::Produce { .. } | Response::ListOffsets { .. } => 8 + 8 + 8,
            Response::Fetch { batches, .. } => {
                8 + 8 + 4 + batches.iter().map(Bytes::len).sum::<usize>()
            }
        }
    }

    fn encode_body(&self, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        match self {
            Response::ApiVersions { server, apis } => {
                put_str16(dst, "server", server)?;
                let count = u16::try_from(apis.len()).map_err(|_| {
                    ProtocolError::Unencodable(format!(
                        "ApiVersions response lists {} APIs; at most 65535 fit",
                        apis.len()
                    ))
                })?;
                dst.put_u16(count);
                for api in apis {
                    dst.put_u16(api.api_key);
                    dst.put_u16(api.min_version);
                    dst.put_u16(api.max_version);
                }
            }
            Response::CreateTopic | Response::ReleaseLease => {}
            Response::Metadata { topics } => {
                put_len32(dst, "topic count", topics.len())?;
                for topic in topics {
                    put_str16(dst, "topic name", &topic.name)?;
                    dst.put_u32(topic.partitions);
                    topic.config.encode(dst);
                }
            }
            Response::AcquireLease {
                epoch,
                lease_id,
                ttl_ms,
            } => {
                dst.put_u64(*epoch);
                dst.put_u128(*lease_id);
                dst.put_u64(*ttl_ms);
            }
            Response::RenewLease { epoch, ttl_ms } => {
                dst.put_u64(*epoch);
                dst.put_u64(*ttl_ms);
            }
            Response::Produce {
                base_offset,
                last_offset,
                log_end_offset,
            } => {
                dst.put_u64(*base_offset);
                dst.put_u64(*last_offset);
                dst.put_u64(*log_end_offset);
            }
            Response::Fetch {
                high_watermark,
                log_start_offset,
                batches,
            } => {
                dst.put_u64(*high_watermark);
                dst.put_u64(*log_start_offset);
                put_len32(dst, "batches", batches.iter().map(Bytes::len).sum())?;
                for batch in batches {
                    dst.put_slice(batch);
                }
            }
            Response::ListOffsets {
                earliest,
                latest,
                epoch,
            } => {
                dst.put_u64(*earliest);
                dst.put_u64(*latest);
                dst.put_u64(*epoch);
            }
        }
        Ok(())
    }

    fn decode_body(api_key: ApiKey, r: &mut Reader) -> Result<Response, WireError> {
        Ok(match api_key {
            ApiKey::ApiVersions => {
                let server = r.string16("server")?;
                let count = usize::from(r.u16("api_count")?);
                let mut apis = Vec::with_capacity(r.capped(count, API_VERSION_RANGE_BYTES));
                for _ in 0..count {
                    apis.push(ApiVersionRange {
                        api_key: r.u16("api_key")?,
                        min_version: r.u16("min_version")?,
                        max_version: r.u16("max_version")?,
                    });
                }
                Response::ApiVersions { server, apis }
            }
            ApiKey::CreateTopic => Response::CreateTopic,
            ApiKey::Metadata => {
                let count = r.len32("topic_count")?;
                let mut topics = Vec::with_capacity(r.capped(count, TOPIC_METADATA_MIN_BYTES));
                for _ in 0..count {
                    topics.push(TopicMetadata {
                        name: r.string16("topic name")?,
                        partitions: r.u32("partitions")?,
                        config: TopicConfig::decode(r)?,
                    });
                }
                Response::Metadata { topics }
            }
            ApiKey::AcquireLease => Response::AcquireLease {
                epoch: r.u64("epoch")?,
                lease_id: r.u128("lease_id")?,
                ttl_ms: r.u64("ttl_ms")?,
            },
            ApiKey::RenewLease => Response::RenewLease {
                epoch: r.u64("epoch")?,
                ttl_ms: r.u64("ttl_ms")?,
            },
            ApiKey::ReleaseLease => Response::ReleaseLease,
            ApiKey::Produce => Response::Produce {
                base_offset: r.u64("base_offset")?,
                last_offset: r.u64("last_offset")?,
                log_end_offset: r.u64("log_end_offset")?,
            },
            ApiKey::Fetch => {
                let high_watermark = r.u64("high_watermark")?;
                let log_start_offset = r.u64("log_start_offset")?;
                let blob = r.bytes32("batches")?;
                let batches = if blob.is_empty() {
                    Vec::new()
                } else {
                    vec![blob]
                };
                Response::Fetch {
                    high_watermark,
                    log_start_offset,
                    batches,
                }
            }
            ApiKey::ListOffsets => Response::ListOffsets {
                earliest: r.u64("earliest")?,
                latest: r.u64("latest")?,
                epoch: r.u64("epoch")?,
            },
        })
    }
}

/// The body of a failed response.
///
/// It also implements [`std::error::Error`] so a client can hand it to its
/// caller as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorResponse {
    /// Why the request failed; never [`ErrorCode::None`].
    pub code: ErrorCode,
    /// Human-readable explanation. Encoding cuts it (at a character
    /// boundary) to the 65535 bytes a `string16` can hold rather than fail to
    /// report an error.
    pub message: String,
    /// For `FENCED`, `UNKNOWN_EPOCH` and `LEASE_LOST`: the epoch that was
    /// rejected; otherwise 0.
    pub epoch: u64,
    /// For `FENCED`, `UNKNOWN_EPOCH` and `LEASE_LOST`: the partition's
    /// current epoch; otherwise 0.
    pub current_epoch: u64,
}

impl ErrorResponse {
    /// An error without epoch information.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorResponse {
        ErrorResponse {
            code,
            message: message.into(),
            epoch: 0,
            current_epoch: 0,
        }
    }

    /// An epoch-related error (`FENCED`, `UNKNOWN_EPOCH`, `LEASE_LOST`)
    /// reporting the rejected and the current epoch, so the client can tell
    /// how far behind (or ahead) it is.
    pub fn with_epochs(
        code: ErrorCode,
        message: impl Into<String>,
        epoch: u64,
        current_epoch: u64,
    ) -> ErrorResponse {
        ErrorResponse {
            code,
            message: message.into(),
            epoch,
            current_epoch,
        }
    }

    fn wire_message(&self) -> &str {
        truncate_to_char_boundary(&self.message, usize::from(u16::MAX))
    }

    fn body_len(&self) -> usize {
        str16_len(self.wire_message()) + 8 + 8
    }
}

impl fmt::Display for ErrorResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        if self.code.carries_epochs() {
            write!(
                f,
                " (epoch {}, current epoch {})",
                self.epoch, self.current_epoch
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for ErrorResponse {}

/// A complete response: the echoed correlation id and either the API's body
/// or an error body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseFrame {
    /// The correlation id of the request this answers (0 when the request's
    /// header could not be read).
    pub correlation_id: u32,
    /// The outcome.
    pub result: Result<Response, ErrorResponse>,
}

impl ResponseFrame {
    /// A successful response.
    pub fn ok(correlation_id: u32, response: Response) -> ResponseFrame {
        ResponseFrame {
            correlation_id,
            result: Ok(response),
        }
    }

    /// A failed response.
    pub fn error(correlation_id: u32, error: ErrorResponse) -> ResponseFrame {
        ResponseFrame {
            correlation_id,
            result: Err(error),
        }
    }

    /// Total bytes [`encode`](Self::encode) writes, length prefix included;
    /// lets the server check a size limit (for example of a `Fetch` answer)
    /// before encoding.
    pub fn encoded_len(&self) -> usize {
        let body = match &self.result {
            Ok(response) => response.body_len(),
            Err(error) => error.body_len(),
        };
        FRAME_LENGTH_BYTES + RESPONSE_HEADER_BYTES + body
    }

    /// Appends the whole frame (length prefix, header, body) to `dst`.
    ///
    /// Fails with [`ProtocolError::Unencodable`] if a value does not fit its
    /// wire field or if an error response has code `NONE` (which the peer
    /// would misread as success); `dst` is then left exactly as it was.
    pub fn encode(&self, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        if matches!(&self.result, Err(e) if e.code == ErrorCode::None) {
            return Err(ProtocolError::Unencodable(
                "an error response cannot carry error code NONE".to_owned(),
            ));
        }
        let total = self.encoded_len();
        let declared = frame_length_field(total)?;
        let start = dst.len();
        dst.reserve(total);
        dst.put_u32(declared);
        dst.put_u32(self.correlation_id);
        let written = match &self.result {
            Ok(response) => {
                dst.put_u16(ErrorCode::None.as_u16());
                response.encode_body(dst)
            }
            Err(error) => {
                dst.put_u16(error.code.as_u16());
                put_str16(dst, "message", error.wire_message()).map(|()| {
                    dst.put_u64(error.epoch);
                    dst.put_u64(error.current_epoch);
                })
            }
        };
        if let Err(e) = written {
            dst.truncate(start);
            return Err(e);
        }
        debug_assert_eq!(dst.len() - start, total);
        Ok(())
    }

    /// Encodes the frame for a vectored write: what the encoder produces goes into `dst` and is
    /// split off into `out` as `Bytes`, while the stored batches of a `Fetch` response are pushed
    /// to `out` as they are — slices of the segment maps, never copied on the way to the socket.
    /// The bytes, concatenated, are exactly what [`ResponseFrame::encode`] writes.
    pub fn encode_vectored(
        &self,
        dst: &mut BytesMut,
        out: &mut Vec<Bytes>,
    ) -> Result<(), ProtocolError> {
        let Ok(Response::Fetch {
            high_watermark,
            log_start_offset,
            batches,
        }) = &self.result
        else {
            self.encode(dst)?;
            out.push(dst.split().freeze());
            return Ok(());
        };
        let declared = frame_length_field(self.encoded_len())?;
        let start = dst.len();
        dst.put_u32(declared);
        dst.put_u32(self.correlation_id);
        dst.put_u16(ErrorCode::None.as_u16());
        dst.put_u64(*high_watermark);
        dst.put_u64(*log_start_offset);
        if let Err(error) = put_len32(dst, "batches", batches.iter().map(Bytes::len).sum()) {
            dst.truncate(start);
            return Err(error);
        }
        out.push(dst.split().freeze());
        out.extend(batches.iter().cloned());
        Ok(())
    }

    /// Reads the correlation id of a response frame body without parsing the
    /// rest, so a client can look up which API the answer is for before
    /// calling [`decode`](Self::decode).
    pub fn peek_correlation_id(frame: &[u8]) -> Option<u32> {
        match frame.get(..4) {
            Some(&[a, b, c, d]) => Some(u32::from_be_bytes([a, b, c, d])),
            _ => None,
        }
    }

    /// Parses one response frame body (without its length prefix); the caller
    /// says which API it is for because responses do not repeat the api key.
    pub fn decode(api_key: ApiKey, frame: Bytes) -> Result<ResponseFrame, ProtocolError> {
        let correlation_id = Self::peek_correlation_id(&frame);
        let malformed = |e: WireError| {
            let id =
                correlation_id.map_or_else(String::new, |id| format!(" (correlation id {id})"));
            ProtocolError::Malformed(format!("{api_key} response{id}: {e}"))
        };
        let mut r = Reader::new(frame);
        let correlation_id = r.u32("correlation_id").map_err(malformed)?;
        let code = r.u16("error_code").map_err(malformed)?;
        if code == ErrorCode::None.as_u16() {
            let response = Response::decode_body(api_key, &mut r).map_err(malformed)?;
            r.finish().map_err(malformed)?;
            return Ok(ResponseFrame::ok(correlation_id, response));
        }
        let message = r.string16("message").map_err(malformed)?;
        let epoch = r.u64("epoch").map_err(malformed)?;
        let current_epoch = r.u64("current_epoch").map_err(malformed)?;
        r.finish().map_err(malformed)?;
        let Some(code) = ErrorCode::from_u16(code) else {
            return Err(ProtocolError::UnknownErrorCode { code, message });
        };
        Ok(ResponseFrame::error(
            correlation_id,
            ErrorResponse::with_epochs(code, message, epoch, current_epoch),
        ))
    }
}

// ---------------------------------------------------------------------------
// Wire primitives
// ---------------------------------------------------------------------------

/// A field-level decoding failure, converted by the callers into the error
/// type of their side (request or response).
#[derive(Debug)]
enum WireError {
    Truncated {
        field: &'static str,
        needed: usize,
        remaining: usize,
    },
    InvalidUtf8 {
        field: &'static str,
    },
    Invalid(String),
    Trailing {
        count: usize,
    },
}

impl WireError {
    fn kind(&self) -> RequestDecodeErrorKind {
        match self {
            WireError::Truncated { .. } => RequestDecodeErrorKind::Truncated,
            WireError::InvalidUtf8 { .. } => RequestDecodeErrorKind::InvalidUtf8,
            WireError::Invalid(m) => RequestDecodeErrorKind::Invalid(m.clone()),
            WireError::Trailing { .. } => RequestDecodeErrorKind::TrailingBytes,
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated {
                field,
                needed,
                remaining,
            } => write!(
                f,
                "field `{field}` needs {needed} bytes but only {remaining} remain"
            ),
            WireError::InvalidUtf8 { field } => write!(f, "field `{field}` is not valid UTF-8"),
            WireError::Invalid(message) => f.write_str(message),
            WireError::Trailing { count } => {
                write!(f, "{count} unexpected bytes after the end of the message")
            }
        }
    }
}

/// Bounds-checked big-endian reader over a frame body. Every accessor checks
/// the remaining length first, so no input can make it panic; slices are
/// zero-copy views of the frame.
struct Reader {
    buf: Bytes,
}

impl Reader {
    fn new(buf: Bytes) -> Reader {
        Reader { buf }
    }

    fn need(&self, field: &'static str, needed: usize) -> Result<(), WireError> {
        if self.buf.len() < needed {
            return Err(WireError::Truncated {
                field,
                needed,
                remaining: self.buf.len(),
            });
        }
        Ok(())
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], WireError> {
        self.need(field, N)?;
        let mut out = [0u8; N];
        self.buf.copy_to_slice(&mut out);
        Ok(out)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        Ok(u8::from_be_bytes(self.array(field)?))
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.array(field)?))
    }

    fn u128(&mut self, field: &'static str) -> Result<u128, WireError> {
        Ok(u128::from_be_bytes(self.array(field)?))
    }

    /// A `u32` length or count, as `usize`.
    fn len32(&mut self, field: &'static str) -> Result<usize, WireError> {
        let value = self.u32(field)?;
        usize::try_from(value)
            .map_err(|_| WireError::Invalid(format!("field `{field}` ({value}) is too large")))
    }

    fn slice(&mut self, field: &'static str, len: usize) -> Result<Bytes, WireError> {
        self.need(field, len)?;
        Ok(self.buf.split_to(len))
    }

    fn string16(&mut self, field: &'static str) -> Result<String, WireError> {
        let len = usize::from(self.u16(field)?);
        let raw = self.slice(field, len)?;
        std::str::from_utf8(&raw)
            .map(str::to_owned)
            .map_err(|_| WireError::InvalidUtf8 { field })
    }

    fn bytes32(&mut self, field: &'static str) -> Result<Bytes, WireError> {
        let len = self.len32(field)?;
        self.slice(field, len)
    }

    /// Capacity to pre-allocate for `count` entries of at least `min_entry`
    /// bytes each: never more than the remaining bytes could hold, so a lying
    /// count cannot trigger a large allocation.
    fn capped(&self, count: usize, min_entry: usize) -> usize {
        count.min(self.buf.len() / min_entry.max(1))
    }

    fn finish(self) -> Result<(), WireError> {
        match self.buf.len() {
            0 => Ok(()),
            count => Err(WireError::Trailing { count }),
        }
    }
}

fn str16_len(s: &str) -> usize {
    2 + s.len()
}

fn put_str16(dst: &mut BytesMut, field: &str, s: &str) -> Result<(), ProtocolError> {
    let len = u16::try_from(s.len()).map_err(|_| {
        ProtocolError::Unencodable(format!(
            "{field} is {} bytes long; a string16 holds at most 65535",
            s.len()
        ))
    })?;
    dst.put_u16(len);
    dst.put_slice(s.as_bytes());
    Ok(())
}

fn put_len32(dst: &mut BytesMut, field: &str, len: usize) -> Result<(), ProtocolError> {
    let len = u32::try_from(len).map_err(|_| {
        ProtocolError::Unencodable(format!(
            "{field} has length {len}; a u32 length holds at most {}",
            u32::MAX
        ))
    })?;
    dst.put_u32(len);
    Ok(())
}

/// The `frame_length` field for a frame of `total` bytes (prefix included).
fn frame_length_field(total: usize) -> Result<u32, ProtocolError> {
    u32::try_from(total - FRAME_LENGTH_BYTES).map_err(|_| {
        ProtocolError::Unencodable(format!(
            "frame body of {} bytes does not fit the u32 frame length",
            total - FRAME_LENGTH_BYTES
        ))
    })
}

fn truncate_to_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_policy_parses_and_displays() {
        assert_eq!("never".parse(), Ok(FlushPolicy::Never));
        assert_eq!(" Always ".parse(), Ok(FlushPolicy::Always));
        assert_eq!(
            "interval".parse(),
            Ok(FlushPolicy::Interval {
                interval_ms: DEFAULT_FLUSH_INTERVAL_MS
            })
        );
        assert_eq!(
            "interval:250ms".parse(),
            Ok(FlushPolicy::Interval { interval_ms: 250 })
        );
        assert_eq!(
            "interval:2s".parse(),
            Ok(FlushPolicy::Interval { interval_ms: 2000 })
        );
        assert_eq!(
            "interval:75".parse(),
            Ok(FlushPolicy::Interval { interval_ms: 75 })
        );
        for bad in [
            "",
            "sometimes",
            "interval:",
            "interval:0ms",
            "interval:-5",
            "interval:5m",
            "interval:99999999999999999999",
            "interval:18446744073709551615s",
        ] {
            assert!(bad.parse::<FlushPolicy>().is_err(), "{bad:?} parsed");
        }
        for policy in [
            FlushPolicy::Never,
            FlushPolicy::Always,
            FlushPolicy::Interval { interval_ms: 250 },
        ] {
            assert_eq!(policy.to_string().parse(), Ok(policy));
        }
        let err = "sometimes".parse::<FlushPolicy>().unwrap_err().to_string();
        assert!(
            err.contains("sometimes") && err.contains("interval:<N>ms"),
            "{err}"
        );
    }

    #[test]
    fn topic_config_default_and_wire_size() {
        let config = TopicConfig::default();
        assert_eq!(config.segment_bytes, 64 * 1024 * 1024);
        assert_eq!(config.flush, FlushPolicy::Always);
        let mut buf = BytesMut::new();
        config.encode(&mut buf);
        assert_eq!(buf.len(), TOPIC_CONFIG_BYTES);
        let mut r = Reader::new(buf.freeze());
        assert_eq!(TopicConfig::decode(&mut r).ok(), Some(config));
    }

    #[test]
    fn unknown_flush_policy_is_rejected() {
        let mut buf = BytesMut::new();
        TopicConfig::default().encode(&mut buf);
        buf[8] = 3;
        let err = TopicConfig::decode(&mut Reader::new(buf.freeze())).unwrap_err();
        assert!(matches!(err, WireError::Invalid(_)), "{err:?}");
    }

    #[test]
    fn reader_checks_lengths_before_slicing() {
        // string16 claiming 0xffff bytes with only 3 present.
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xff, b'a', b'b', b'c']));
        assert!(matches!(
            r.string16("topic"),
            Err(WireError::Truncated {
                needed: 0xffff,
                remaining: 3,
                ..
            })
        ));
        let mut r = Reader::new(Bytes::from_static(&[0, 2, 0xc3, 0x28]));
        assert!(matches!(
            r.string16("topic"),
            Err(WireError::InvalidUtf8 { .. })
        ));
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 1]));
        assert!(matches!(
            r.bytes32("batch"),
            Err(WireError::Truncated { .. })
        ));
        assert_eq!(r.capped(usize::MAX, 0), 1);
    }

    #[test]
    fn lying_counts_do_not_preallocate() {
        // Metadata request announcing 65535 topics with no bytes behind it.
        let frame = Bytes::from_static(&[0, 2, 0, 0, 0, 0, 0, 1, 0xff, 0xff]);
        let err = RequestFrame::decode(frame).unwrap_err();
        assert_eq!(err.correlation_id, Some(1));
        assert_eq!(err.kind, RequestDecodeErrorKind::Truncated);
    }

    #[test]
    fn long_error_messages_are_cut_not_refused() {
        let message = "é".repeat(40_000); // 80_000 bytes
        let frame = ResponseFrame::error(3, ErrorResponse::new(ErrorCode::Internal, message));
        let mut buf = BytesMut::new();
        frame.encode(&mut buf).unwrap();
        assert_eq!(buf.len(), frame.encoded_len());
        let body = buf.freeze().slice(FRAME_LENGTH_BYTES..);
        let decoded = ResponseFrame::decode(ApiKey::Fetch, body).unwrap();
        let err = decoded.result.unwrap_err();
        assert_eq!(err.message.len(), 65_534);
        assert!(err.message.chars().all(|c| c == 'é'));
    }

    #[test]
    fn unencodable_values_leave_buffer_untouched() {
        let mut buf = BytesMut::from(&b"keep"[..]);
        let long = "x".repeat(70_000);
        let frame = RequestFrame::new(
            1,
            Request::ListOffsets {
                topic: long,
                partition: 0,
            },
        );
        assert!(matches!(
            frame.encode(&mut buf),
            Err(ProtocolError::Unencodable(_))
        ));
        let none = ResponseFrame::error(1, ErrorResponse::new(ErrorCode::None, "x"));
        assert!(matches!(
            none.encode(&mut buf),
            Err(ProtocolError::Unencodable(_))
        ));
        assert_eq!(&buf[..], b"keep");
    }

    #[test]
    fn unknown_error_codes_keep_the_message() {
        let body = [
            &[0u8, 0, 0, 9, 0x01, 0x00][..],
            &[0, 2, b'h', b'i'],
            &[0; 16],
        ]
        .concat();
        match ResponseFrame::decode(ApiKey::Produce, Bytes::from(body)) {
            Err(ProtocolError::UnknownErrorCode { code: 256, message }) => {
                assert_eq!(message, "hi")
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
