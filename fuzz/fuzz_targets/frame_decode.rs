//! Fuzzes `FrameCodec`'s decoder with arbitrary byte streams fed in arbitrary chunks.
//!
//! Input layout: byte 0 picks the frame size limit, byte 1 the chunk size, the rest is the
//! stream. Checked on every call: no panic; each result is typed (`Ok(Some)` with exactly the
//! declared body, `Ok(None)` that consumes nothing, `EmptyFrame` or `FrameTooLarge` for a bad
//! length prefix, never anything else); a refused length reserves nothing; a partial frame
//! reserves no more than its validated length (plus `Vec`'s doubling of what is already
//! buffered). The stream ends, so the decoder cannot loop forever.
#![no_main]

use bytes::BytesMut;
use fencelog::protocol::{FrameCodec, ProtocolError, FRAME_LENGTH_BYTES};
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::Decoder;

fn declared(buffer: &[u8]) -> Option<usize> {
    let prefix: [u8; 4] = buffer.get(..FRAME_LENGTH_BYTES)?.try_into().ok()?;
    Some(u32::from_be_bytes(prefix) as usize)
}

/// One decode call with every invariant checked. `Ok(true)`: a frame came out, call again.
///
/// `consumed`: bytes earlier frames took off the front of the buffer's allocation. `reserve` may
/// double the allocation (Vec's amortized growth, which counts them), so a partial frame leaves
/// at most `max(2 * capacity + consumed, frame)`; for a buffer holding exactly its bytes that is
/// tight: the declared length adds nothing beyond the validated frame.
fn decode_once(codec: &mut FrameCodec, buffer: &mut BytesMut, consumed: usize) -> Result<bool, ()> {
    let length = declared(buffer);
    let (len_before, capacity_before) = (buffer.len(), buffer.capacity());
    let snapshot = buffer.to_vec();
    match codec.decode(buffer) {
        Ok(Some(frame)) => {
            let length = length.expect("a frame needs a prefix");
            assert!(length > 0 && length <= codec.max_frame_bytes);
            assert_eq!(frame.len(), length);
            assert_eq!(
                &frame[..],
                &snapshot[FRAME_LENGTH_BYTES..FRAME_LENGTH_BYTES + length]
            );
            assert_eq!(buffer.len(), len_before - FRAME_LENGTH_BYTES - length);
            Ok(true)
        }
        Ok(None) => {
            assert_eq!(
                &buffer[..],
                &snapshot[..],
                "a partial frame is not consumed"
            );
            if let Some(length) = length {
                assert!(length > 0 && length <= codec.max_frame_bytes);
                let total = FRAME_LENGTH_BYTES + length;
                assert!(len_before < total);
                assert!(
                    buffer.capacity() <= (2 * capacity_before + consumed).max(total),
                    "reserved {} for a frame of {total} bytes (capacity before {capacity_before})",
                    buffer.capacity()
                );
            }
            Ok(false)
        }
        Err(error) => {
            assert_eq!(
                buffer.capacity(),
                capacity_before,
                "a refused frame reserves nothing"
            );
            let length = length.expect("errors come from the prefix");
            match error {
                ProtocolError::EmptyFrame => assert_eq!(length, 0),
                ProtocolError::FrameTooLarge { declared, max } => {
                    assert_eq!((declared, max), (length, codec.max_frame_bytes));
                    assert!(declared > max);
                }
                other => panic!("untyped framing error: {other}"),
            }
            Err(())
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [limit, chunk, stream @ ..] = data else {
        return;
    };
    let max_frame_bytes = match limit % 4 {
        0 => usize::from(*limit),
        1 => 4096,
        2 => 1 << 20,
        _ => fencelog::protocol::DEFAULT_MAX_FRAME_BYTES,
    };
    let chunk = 1 + usize::from(*chunk);
    let mut codec = FrameCodec::new(max_frame_bytes);
    // Streaming: the buffer as `Framed` would keep it, frames split off its front.
    let mut buffer = BytesMut::new();
    let mut consumed = 0;
    'feed: for piece in stream.chunks(chunk) {
        buffer.extend_from_slice(piece);
        loop {
            let before = buffer.len();
            match decode_once(&mut codec, &mut buffer, consumed) {
                Ok(true) => consumed += before - buffer.len(),
                Ok(false) => break,
                Err(()) => break 'feed,
            }
        }
    }
    // Exact capacity: a buffer holding exactly the stream, so the reservation bound is tight.
    let mut exact = BytesMut::from(stream);
    while let Ok(true) = decode_once(&mut codec, &mut exact, 0) {
        exact = BytesMut::from(&exact[..]);
    }
});
