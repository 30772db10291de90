//! Framing: cutting a byte stream into length-prefixed frames and back.
//!
//! Every message on a connection is `u32 frame_length` (big-endian, the
//! number of bytes that follow) plus that many bytes of body. [`FrameCodec`]
//! plugs this into `tokio_util::codec::Framed`. Its one job beyond slicing is
//! to protect the process from its peer: the declared length is checked
//! against `max_frame_bytes` *before* any memory is reserved for the frame, so
//! a hostile or confused peer cannot make us allocate gigabytes by sending
//! four bytes. Frame bodies are handed on unparsed; see `frame` for why.

use bytes::{Buf, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::{ProtocolError, RequestFrame, ResponseFrame};

/// Default limit on a frame's declared length: 16 MiB.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// Size of the length prefix that starts every frame.
pub const FRAME_LENGTH_BYTES: usize = 4;

/// The length-prefix codec used by both ends of a connection.
///
/// As a [`Decoder`] it yields each frame's body (without the prefix) as
/// [`Bytes`], split off the read buffer without copying, so request payloads
/// such as a produced batch can be passed to storage zero-copy. As an
/// [`Encoder`] it writes [`ResponseFrame`]s (server side) or
/// [`RequestFrame`]s (client side).
///
/// The same limit applies in both directions: the encoder refuses to send a
/// frame the peer (configured alike) would refuse to receive, turning a
/// connection-killing error on the other side into a local, recoverable one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameCodec {
    /// Largest accepted `frame_length` (the bytes after the prefix).
    pub max_frame_bytes: usize,
}

impl FrameCodec {
    /// A codec with a custom frame size limit.
    pub fn new(max_frame_bytes: usize) -> FrameCodec {
        FrameCodec { max_frame_bytes }
    }

    /// The configured frame size limit.
    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }

    /// Checks an outgoing frame of `total` bytes (prefix included).
    fn check_outgoing(&self, total: usize) -> Result<(), ProtocolError> {
        let declared = total.saturating_sub(FRAME_LENGTH_BYTES);
        if declared > self.max_frame_bytes {
            return Err(ProtocolError::FrameTooLarge {
                declared,
                max: self.max_frame_bytes,
            });
        }
        Ok(())
    }
}

impl Default for FrameCodec {
    /// A codec limited to [`DEFAULT_MAX_FRAME_BYTES`].
    fn default() -> Self {
        FrameCodec::new(DEFAULT_MAX_FRAME_BYTES)
    }
}

impl Decoder for FrameCodec {
    type Item = Bytes;
    type Error = ProtocolError;

    /// Returns the next frame body, `Ok(None)` if the buffer does not hold a
    /// whole frame yet, or an error for a zero or oversized length. After an
    /// error the stream cannot be resynchronised; close the connection.
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, ProtocolError> {
        let Some(&[a, b, c, d]) = src.get(..FRAME_LENGTH_BYTES) else {
            return Ok(None);
        };
        let declared = u32::from_be_bytes([a, b, c, d]);
        // A declared length that does not even fit usize is certainly over
        // the limit; report it saturated rather than wrapping.
        let declared = usize::try_from(declared).unwrap_or(usize::MAX);
        if declared == 0 {
            return Err(ProtocolError::EmptyFrame);
        }
        if declared > self.max_frame_bytes {
            return Err(ProtocolError::FrameTooLarge {
                declared,
                max: self.max_frame_bytes,
            });
        }
        let total = FRAME_LENGTH_BYTES + declared;
        if src.len() < total {
            // Validated above, so this reserves at most max_frame_bytes + 4.
            src.reserve(total - src.len());
            return Ok(None);
        }
        let mut frame = src.split_to(total).freeze();
        frame.advance(FRAME_LENGTH_BYTES);
        Ok(Some(frame))
    }
}

impl Encoder<ResponseFrame> for FrameCodec {
    type Error = ProtocolError;

    fn encode(&mut self, item: ResponseFrame, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        self.check_outgoing(item.encoded_len())?;
        item.encode(dst)
    }
}

impl Encoder<RequestFrame> for FrameCodec {
    type Error = ProtocolError;

    fn encode(&mut self, item: RequestFrame, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        self.check_outgoing(item.encoded_len())?;
        item.encode(dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ErrorCode, ErrorResponse, Request, Response};

    #[test]
    fn oversized_length_is_refused_before_reserving() {
        let mut codec = FrameCodec::default();
        let mut buf = BytesMut::with_capacity(8);
        buf.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0]);
        let cap = buf.capacity();
        let err = codec.decode(&mut buf).unwrap_err();
        assert_eq!(
            err.to_string().split(';').next(),
            Some("frame of 4294967295 bytes exceeds the maximum of 16777216")
        );
        assert_eq!(buf.capacity(), cap);
        assert_eq!(err.error_code(), Some(ErrorCode::FrameTooLarge));
    }

    #[test]
    fn zero_length_is_an_error_and_short_prefix_waits() {
        let mut codec = FrameCodec::default();
        let mut buf = BytesMut::from(&[0u8, 0, 0][..]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        buf.extend_from_slice(&[0]);
        assert!(matches!(
            codec.decode(&mut buf),
            Err(ProtocolError::EmptyFrame)
        ));
    }

    #[test]
    fn partial_frame_reserves_only_what_was_declared() {
        let mut codec = FrameCodec::new(1000);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[0, 0, 0, 100, 1, 2, 3]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        assert!(buf.capacity() >= 104);
        assert_eq!(buf.len(), 7, "a partial frame must not be consumed");
        buf.extend_from_slice(&[0; 97]);
        buf.extend_from_slice(&[9]);
        let frame = codec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(frame.len(), 100);
        assert_eq!(&frame[..3], &[1, 2, 3]);
        assert_eq!(&buf[..], &[9]);
    }

    #[test]
    fn encoder_enforces_the_limit_too() {
        let mut codec = FrameCodec::new(64);
        let mut buf = BytesMut::new();
        let big = ResponseFrame::ok(
            1,
            Response::Fetch {
                high_watermark: 0,
                log_start_offset: 0,
                batches: vec![Bytes::from(vec![0u8; 100])],
                committed: None,
            },
        );
        assert!(matches!(
            codec.encode(big, &mut buf),
            Err(ProtocolError::FrameTooLarge {
                declared: 126,
                max: 64
            })
        ));
        assert!(buf.is_empty());
        let small = RequestFrame::new(2, Request::ApiVersions);
        codec.encode(small, &mut buf).unwrap();
        assert_eq!(&buf[..], &[0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 2]);
        let err = ResponseFrame::error(3, ErrorResponse::new(ErrorCode::Internal, "x"));
        codec.encode(err, &mut buf).unwrap();
        assert_eq!(buf.len(), 12 + 4 + 6 + 3 + 16);
    }
}
