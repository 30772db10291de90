//! Helpers shared by the tests that check the worked hex examples of `docs/protocol.md` in both
//! directions: the encoder writes exactly the bytes the document shows, the document shows
//! exactly the bytes the encoder writes, and the decoder reads them back.

use bytes::{Bytes, BytesMut};
use fencelog::protocol::{FrameCodec, RequestFrame, ResponseFrame};
use tokio_util::codec::Decoder;

/// The protocol document, as the tests read it.
pub const PROTOCOL_DOC: &str = include_str!("../../docs/protocol.md");

/// Encodes a request frame, checking that `encoded_len` is exact.
pub fn encode_request(frame: &RequestFrame) -> BytesMut {
    let mut buf = BytesMut::new();
    frame.encode(&mut buf).expect("encodable request");
    assert_eq!(buf.len(), frame.encoded_len(), "encoded_len is exact");
    buf
}

/// Encodes a response frame, checking that `encoded_len` is exact.
pub fn encode_response(frame: &ResponseFrame) -> BytesMut {
    let mut buf = BytesMut::new();
    frame.encode(&mut buf).expect("encodable response");
    assert_eq!(buf.len(), frame.encoded_len(), "encoded_len is exact");
    buf
}

/// Runs `buf` through the frame decoder, expecting exactly one frame.
pub fn single_frame(mut buf: BytesMut) -> Bytes {
    let frame = FrameCodec::default()
        .decode(&mut buf)
        .expect("valid frame")
        .expect("complete frame");
    assert!(buf.is_empty(), "exactly one frame was consumed");
    frame
}

/// Lower-case hex, 16 space-separated bytes per line: the layout of the document's examples.
pub fn hex_dump(bytes: &[u8]) -> String {
    bytes
        .chunks(16)
        .map(|line| {
            line.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The bytes of a hex dump.
pub fn from_hex(dump: &str) -> Vec<u8> {
    dump.split_whitespace()
        .map(|h| u8::from_str_radix(h, 16).expect("hex byte"))
        .collect()
}

/// Asserts that `bytes` equals `expected_hex` and that the document shows exactly this block,
/// then returns the frame body (without its length prefix) for decoding checks.
pub fn check_doc_example(name: &str, bytes: impl AsRef<[u8]>, expected_hex: &str) -> Bytes {
    let bytes = bytes.as_ref();
    let dump = hex_dump(bytes);
    assert_eq!(dump, expected_hex, "{name}: encoder output changed");
    assert!(
        PROTOCOL_DOC.contains(&format!("```text\n{dump}\n```")),
        "{name}: docs/protocol.md must show exactly this hex block:\n{dump}"
    );
    assert_eq!(from_hex(expected_hex), bytes);
    single_frame(BytesMut::from(bytes))
}
