//! Telling a peer that speaks another protocol from a peer whose frame is merely too large, so
//! that both ends can say "this port speaks HTTP / TLS / Kafka; did you mean ...?" instead of
//! "frame of 1213486160 bytes exceeds the maximum".
//!
//! Why the first four bytes are enough: every frame starts with a `u32` length, and what other
//! protocols send first reads as an absurd length. An HTTP request starts with an upper-case
//! method (`GET `: 0x47455420, over a gigabyte), an HTTP answer with `HTTP`, a TLS record with
//! its content type (0x15 alert, 0x16 handshake) and version (0x03 0x0N): some 350 MiB. The
//! checks are only made on a length that is over the receiver's frame limit anyway, so a real
//! frame is never mistaken for another protocol.
//!
//! Kafka's requests share fencelog's framing (a `u32` length, then `api_key`, `api_version`
//! and `correlation_id` at the same offsets), so they are told apart by what follows: Kafka's
//! request header goes on with a `client_id` string (see [`looks_like_kafka_request`]).

use thiserror::Error;

/// Default port of fencelog's native listener, named in hints.
pub const NATIVE_DEFAULT_PORT: u16 = 7171;

/// Kafka's ApiVersions API key, the request Kafka clients open a connection with.
const KAFKA_API_VERSIONS_KEY: u16 = 18;

/// A protocol recognised in the first bytes of a connection where another was expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreign {
    /// An HTTP request (a client speaking HTTP to a fencelog listener).
    HttpRequest,
    /// An HTTP response (a fencelog client reading from an HTTP server, such as the metrics
    /// listener).
    HttpResponse,
    /// A TLS record: a ClientHello to a plain listener, or a server's handshake or alert to a
    /// plain client.
    Tls,
}

impl Foreign {
    /// What the peer speaks, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Foreign::HttpRequest | Foreign::HttpResponse => "HTTP",
            Foreign::Tls => "TLS",
        }
    }
}

/// The HTTP methods a request can start with, as the first four bytes of the stream.
const HTTP_METHODS: [&[u8; 4]; 9] = [
    b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"OPTI", b"PATC", b"CONN", b"TRAC",
];

/// What the first four bytes a listener received say about its client, if they are an HTTP
/// request or a TLS record. Call it only for a length over the frame limit.
pub fn sniff_request(prefix: [u8; 4]) -> Option<Foreign> {
    if HTTP_METHODS.iter().any(|method| **method == prefix) {
        return Some(Foreign::HttpRequest);
    }
    is_tls_record(prefix).then_some(Foreign::Tls)
}

/// What the first four bytes a client received say about its server, if they are an HTTP
/// response or a TLS record. Call it only for a length over the frame limit.
pub fn sniff_response(prefix: [u8; 4]) -> Option<Foreign> {
    if &prefix == b"HTTP" {
        return Some(Foreign::HttpResponse);
    }
    is_tls_record(prefix).then_some(Foreign::Tls)
}

/// A TLS record header: content type alert (0x15) or handshake (0x16), major version 3, minor
/// version 0 to 4 (SSL 3.0 to TLS 1.3's legacy field).
fn is_tls_record(prefix: [u8; 4]) -> bool {
    matches!(prefix, [0x15 | 0x16, 0x03, 0x00..=0x04, _])
}

/// Whether a frame body (after the length) that fencelog's native protocol could not decode
/// reads as the request every Kafka client opens with: ApiVersions (key 18) in a version a
/// client sends (at most 20), then, after the correlation id, a `client_id` that is null (-1)
/// or a string that fits the frame. Only ApiVersions is recognised, so that a native client's
/// malformed first request (a topic string where Kafka has its client id) is never taken for
/// Kafka: it keeps its native error answer.
pub fn looks_like_kafka_request(frame: &[u8]) -> bool {
    let Some(&[key_hi, key_lo, version_hi, version_lo, _, _, _, _, id_hi, id_lo]) = frame.get(..10)
    else {
        return false;
    };
    let version = i16::from_be_bytes([version_hi, version_lo]);
    let client_id = i16::from_be_bytes([id_hi, id_lo]);
    u16::from_be_bytes([key_hi, key_lo]) == KAFKA_API_VERSIONS_KEY
        && (0..=20).contains(&version)
        && (client_id == -1
            || usize::try_from(client_id).is_ok_and(|length| 10 + length <= frame.len()))
}

/// A native client that reached a port speaking another protocol; the message says which, and
/// what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WrongPort {
    /// The server answered in HTTP.
    #[error("this port speaks HTTP (fencelog's metrics listener?), not fencelog's protocol; did you mean the native port, default {NATIVE_DEFAULT_PORT}?")]
    Http,
    /// The server answered with a TLS record.
    #[error(
        "this port speaks TLS: connect with TLS (--tls-ca FILE, or --tls for the system's CAs)"
    )]
    Tls,
}

impl WrongPort {
    /// The error for a response frame whose first four bytes are another protocol's.
    pub fn from_response_prefix(prefix: [u8; 4]) -> Option<WrongPort> {
        match sniff_response(prefix)? {
            Foreign::HttpResponse | Foreign::HttpRequest => Some(WrongPort::Http),
            Foreign::Tls => Some(WrongPort::Tls),
        }
    }

    /// [`Self::from_response_prefix`] for a declared frame length.
    pub fn from_declared_length(declared: usize) -> Option<WrongPort> {
        let declared = u32::try_from(declared).ok()?;
        Self::from_response_prefix(declared.to_be_bytes())
    }
}

/// A client's frame error, with a length that is another protocol's first bytes turned into
/// [`WrongPort`](super::ProtocolError::WrongPort); any other error as it was.
pub fn explain(error: super::ProtocolError) -> super::ProtocolError {
    match error {
        super::ProtocolError::FrameTooLarge { declared, .. } => {
            WrongPort::from_declared_length(declared).map_or(error, super::ProtocolError::WrongPort)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// HTTP requests and responses and TLS records are recognised; lengths a frame can have
    /// (under a gigabyte, not TLS-shaped) are not.
    #[test]
    fn other_protocols_are_recognised_and_real_lengths_are_not() {
        assert_eq!(sniff_request(*b"GET "), Some(Foreign::HttpRequest));
        assert_eq!(sniff_request(*b"POST"), Some(Foreign::HttpRequest));
        assert_eq!(sniff_request([0x16, 3, 1, 2]), Some(Foreign::Tls));
        assert_eq!(sniff_response(*b"HTTP"), Some(Foreign::HttpResponse));
        assert_eq!(sniff_response([0x15, 3, 3, 0]), Some(Foreign::Tls));
        assert_eq!(
            WrongPort::from_declared_length(u32::from_be_bytes(*b"HTTP") as usize),
            Some(WrongPort::Http)
        );
        for length in [1u32, 8, 16 << 20, 0x1600_0000, 0x1604_0000 + 0x0500_0000] {
            assert_eq!(sniff_request(length.to_be_bytes()), None, "{length}");
            assert_eq!(sniff_response(length.to_be_bytes()), None, "{length}");
        }
    }

    /// A Kafka ApiVersions header (client id string or null) reads as Kafka; another Kafka API,
    /// a native ApiVersions (no body) and a native request whose bytes after the header are too
    /// short for a client id string do not.
    #[test]
    fn kafka_request_headers_are_told_from_native_ones() {
        let mut kafka = vec![0, 18, 0, 3, 0, 0, 0, 1, 0, 7];
        kafka.extend_from_slice(b"rdkafka\0");
        assert!(looks_like_kafka_request(&kafka));
        assert!(looks_like_kafka_request(&[
            0, 18, 0, 1, 0, 0, 0, 1, 0xff, 0xff
        ]));
        assert!(!looks_like_kafka_request(&[
            0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff
        ]));
        assert!(!looks_like_kafka_request(&[0, 0, 0, 0, 0, 0, 0, 1]));
        assert!(!looks_like_kafka_request(&[
            0, 2, 0, 1, 0, 0, 0, 1, 0, 40, 1
        ]));
        assert!(!looks_like_kafka_request(&[
            0, 18, 0x40, 0, 0, 0, 0, 1, 0, 0
        ]));
    }
}
