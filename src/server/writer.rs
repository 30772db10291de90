//! Writing responses to a connection with vectored writes, so fetched batches go from the segment
//! map to the socket without being copied into a write buffer first.
//!
//! The protocol encodes each response as chunks (small parts built in one scratch buffer, fetched
//! batches as `Bytes` slices of the mapped segments). Several ready responses are written
//! together with `writev`, so a pipelining client costs one syscall per burst rather than one
//! per response.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::protocol::{AfterEncode, Protocol};
use crate::protocol::Chunks;

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
    /// Writes to `sink`; the protocol replaces responses larger than `max_frame_bytes`.
    pub fn new(sink: W, max_frame_bytes: usize) -> Self {
        Self {
            sink,
            max_frame_bytes,
            scratch: BytesMut::with_capacity(64 * 1024),
            encoded: Vec::new(),
            queue: Chunks::default(),
        }
    }

    /// Encodes a response at the end of the queue; [`AfterEncode::Close`] when it could not be
    /// encoded and the connection must close after what is queued.
    pub fn push<P: Protocol>(&mut self, protocol: &P, response: P::Response) -> AfterEncode {
        let after = protocol.encode(
            response,
            self.max_frame_bytes,
            &mut self.scratch,
            &mut self.encoded,
        );
        for part in self.encoded.drain(..) {
            self.queue.push(part);
        }
        after
    }

    /// Queues bytes that are not a response of the protocol (an HTTP answer to a client that
    /// reached the wrong port).
    pub fn push_raw(&mut self, bytes: Bytes) {
        self.queue.push(bytes);
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

    /// The sink (tests read what was written).
    #[cfg(test)]
    pub fn sink(&self) -> &W {
        &self.sink
    }
}
