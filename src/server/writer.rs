//! Writing responses to a connection with vectored writes, so fetched batches go from the segment
//! map to the socket without being copied into a write buffer first.
//!
//! Small responses are encoded into one scratch buffer; a `Fetch` response contributes its header
//! and then its batches as `Bytes` slices of the mapped segments. Several ready responses are
//! written together with `writev`, so a pipelining client costs one syscall per burst rather than
//! one per response.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::protocol::{Chunks, ErrorCode, ErrorResponse, ProtocolError, ResponseFrame};

/// Queues encoded responses and writes them out together.
#[derive(Debug)]
pub struct ResponseWriter<W> {
    sink: W,
    max_frame_bytes: usize,
    scratch: BytesMut,
    encoded: Vec<Bytes>,
    queue: Chunks,
}

impl<W: AsyncWrite + Unpin> ResponseWriter<W> {
    /// Writes to `sink`; responses larger than `max_frame_bytes` are replaced by an error.
    pub fn new(sink: W, max_frame_bytes: usize) -> Self {
        Self {
            sink,
            max_frame_bytes,
            scratch: BytesMut::with_capacity(64 * 1024),
            encoded: Vec::new(),
            queue: Chunks::default(),
        }
    }

    /// Encodes a response at the end of the queue. One that cannot be encoded (it would exceed
    /// the peer's frame limit, say) is answered with an `INTERNAL` error instead, so the client
    /// still gets a response for its correlation id.
    pub fn push(&mut self, response: ResponseFrame) {
        let correlation_id = response.correlation_id;
        let result = if response.encoded_len() - crate::protocol::FRAME_LENGTH_BYTES
            > self.max_frame_bytes
        {
            Err(ProtocolError::FrameTooLarge {
                declared: response.encoded_len(),
                max: self.max_frame_bytes,
            })
        } else {
            response.encode_vectored(&mut self.scratch, &mut self.encoded)
        };
        if let Err(error) = result {
            tracing::error!(%error, correlation_id, "response could not be encoded");
            let fallback = ResponseFrame::error(
                correlation_id,
                ErrorResponse::new(
                    ErrorCode::Internal,
                    format!("response could not be encoded: {error}"),
                ),
            );
            fallback
                .encode_vectored(&mut self.scratch, &mut self.encoded)
                .expect("a short error response always encodes");
        }
        for part in self.encoded.drain(..) {
            self.queue.push(part);
        }
    }

    /// Writes everything queued.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        self.sink.write_all_buf(&mut self.queue).await?;
        self.sink.flush().await
    }

    /// Shuts down the write side.
    pub async fn shutdown(&mut self) -> std::io::Result<()> {
        self.sink.shutdown().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Response;

    /// The vectored bytes are exactly what the plain encoder writes, for a fetch and others.
    #[tokio::test]
    async fn vectored_output_matches_the_plain_encoding() {
        let responses = vec![
            ResponseFrame::ok(
                7,
                Response::Fetch {
                    high_watermark: 10,
                    log_start_offset: 2,
                    batches: vec![Bytes::from_static(b"abc"), Bytes::from_static(b"defgh")],
                },
            ),
            ResponseFrame::ok(8, Response::ReleaseLease),
        ];
        let mut expected = BytesMut::new();
        for response in &responses {
            response.encode(&mut expected).unwrap();
        }
        let mut writer = ResponseWriter::new(Vec::new(), 1 << 20);
        for response in responses {
            writer.push(response);
        }
        writer.flush().await.unwrap();
        assert_eq!(writer.sink, expected.to_vec());
    }
}
