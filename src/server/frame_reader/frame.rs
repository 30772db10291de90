//! The values a [`FrameReader`](super::FrameReader) is configured with and hands on: its
//! limits, a frame's header, a frame read (whole, or with its batch in a pipe), and how a
//! protocol says which frames are read only in part.
//!
//! Why apart: the connections of both protocols build and read these; the reading machinery
//! that produces them is the parent's.

use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpStream;

use super::super::memory_budget::Reservation;
use crate::protocol::REQUEST_HEADER_BYTES;
use crate::storage::splice::PooledPipe;

/// The limits a [`FrameReader`] applies (from [`super::ServerConfig`]).
#[derive(Debug, Clone, Copy)]
pub struct FrameLimits {
    /// Largest frame (after its length prefix).
    pub max_frame_bytes: usize,
    /// Largest frame before the connection authenticates (servers with `--auth`).
    pub max_unauthenticated_frame_bytes: usize,
    /// Longest a frame may take to arrive once its first byte has.
    pub partial_frame_timeout: Duration,
    /// Longest the reader waits for memory.
    pub buffer_wait: Duration,
    /// Whether refusals are answered (with the header's correlation id): when not (Kafka), a
    /// frame is judged on its length alone, without waiting for its header.
    pub wait_for_header: bool,
}

/// The header fields every request frame starts with, in both protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The API.
    pub api_key: u16,
    /// The API's version.
    pub api_version: u16,
    /// The client's id for the request, echoed in its answer.
    pub correlation_id: u32,
}

impl FrameHeader {
    /// The header at the start of a frame body, if it is long enough to hold one.
    pub fn peek(body: &[u8]) -> Option<FrameHeader> {
        let &[k0, k1, v0, v1, c0, c1, c2, c3] = body.get(..REQUEST_HEADER_BYTES)? else {
            return None;
        };
        Some(FrameHeader {
            api_key: u16::from_be_bytes([k0, k1]),
            api_version: u16::from_be_bytes([v0, v1]),
            correlation_id: u32::from_be_bytes([c0, c1, c2, c3]),
        })
    }
}

/// A request frame (its length prefix removed) and the memory it holds until its answer is
/// ready: in memory whole, or its bytes but a batch's, which are in a pipe.
#[derive(Debug)]
pub struct ReadFrame {
    /// The frame body (with `tail`: its head, the bytes before the piped ones).
    pub bytes: Bytes,
    /// Its share of the connection's and the server's memory (the piped bytes included).
    pub reservation: Reservation,
    /// The bytes of the frame after its head (see the module documentation).
    pub tail: Option<FrameTail>,
}

/// The bytes of a frame after its head: a batch's last bytes in a pipe, then the frame's last
/// fields in memory.
#[derive(Debug)]
pub struct FrameTail {
    /// The pipe holding every byte of the batch after the head.
    pub pipe: PooledPipe,
    /// The frame's bytes after the batch.
    pub trailer: Bytes,
}

/// How a protocol wants a long frame read, judged from its header and first body bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameHead {
    /// Read it whole.
    Whole,
    /// More of it is needed to judge: its first this many body bytes (more than there are).
    Need(usize),
    /// The bytes buffered are its head: the body's bytes up to `piped_end` go into a pipe, the
    /// rest is read.
    Splice {
        /// The body offset where the piped bytes end (the end of the batch).
        piped_end: usize,
    },
}

/// Which frames a connection may read only in part (see the module documentation).
#[derive(Debug, Clone, Copy)]
pub struct SpliceRule {
    /// Shorter frames are read whole (their bytes cost less to copy than a splice's setup).
    pub min_frame_bytes: usize,
    /// Judges a frame from its header, its declared length and the body bytes buffered so far.
    pub judge: fn(&FrameHeader, usize, &[u8]) -> FrameHead,
}

/// A connection's read half, and the TCP socket under it when there is one a splice can read
/// from (plain TCP, not TLS: TLS decrypts in this process).
pub trait SpliceCapable {
    /// The socket a frame's batch may be spliced from.
    fn tcp(&self) -> Option<&TcpStream> {
        None
    }
}

impl SpliceCapable for tokio::net::tcp::OwnedReadHalf {
    fn tcp(&self) -> Option<&TcpStream> {
        Some(self.as_ref())
    }
}

impl<T> SpliceCapable for tokio::io::ReadHalf<T> {}

impl SpliceCapable for tokio::io::DuplexStream {}
