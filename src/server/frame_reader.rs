//! Reading a client's request frames, paying for each byte of memory before it is read, under
//! limits a stranger cannot turn against other clients.
//!
//! Why not a length-prefix codec: a codec sees a frame's declared length and must either
//! reserve it (then 32 connections that send only a prefix declaring 16 MiB hold 512 MiB they
//! never send) or read without a bound. This reader pays for the bytes it has read
//! ([`super::memory_budget`]), from the connection's own share first, then from the shared
//! budget, and reads no more (at most 64 KiB at a time) until they are paid for. What a
//! prefix-only connection holds is its prefix; what a half-sent frame holds is what was sent.
//!
//! It also reads a frame's header (`api_key`, `api_version`, `correlation_id`: the same 8 bytes
//! in fencelog's protocol and Kafka's) before it judges the frame, so that every refusal of a
//! frame (too large, too large before authentication, no memory, not finished in time) can
//! carry the request's correlation id. A frame whose header never comes is not a request and
//! gets no answer; its connection is closed.
//!
//! The limits, each with a name, a default and an error:
//! * `max_frame_bytes`: a larger declared length is refused without reading the body.
//! * `max_unauthenticated_frame_bytes` (512 KiB, like Kafka's `sasl.server.max.receive.size`):
//!   while a connection to a server with `--auth` has not authenticated, it may only send
//!   frames this small, so a stranger cannot make the server read 16 MiB frames at all.
//! * `partial_frame_timeout` (30 s): a frame whose first byte arrived must be whole within this
//!   long (time spent waiting for memory not counted), so a half-sent frame, or one trickled a
//!   byte at a time, cannot hold its memory for ever. The idle timeout is for between frames.
//! * `buffer_wait` (10 s): the longest the reader waits for memory before refusing.
//!
//! The first frame of a connection whose length is over the limit is also checked for another
//! protocol's opening bytes (an HTTP request, a TLS ClientHello:
//! [`crate::protocol::wrong_port`]), so the client can be told it reached the wrong port.
//!
//! # Frames read only in part (the one-copy produce path)
//!
//! On a plain TCP connection whose protocol gives a [`SpliceRule`], a frame of at least
//! `min_frame_bytes` that the rule recognises (a produce of one large batch) is read into
//! memory only as far as its *head* (its fields and the batch's header). The rest of the batch
//! moves from the socket into a pipe as it arrives (by page reference, no copy: see
//! [`crate::storage::splice`]), paid for from the same budgets as bytes read; the fields after
//! the batch are read into memory again. The frame is handed on once every byte is off the
//! socket, with its pipe in a [`FrameTail`], so the connection reads on as after any frame, and
//! the append moves the bytes pipe → segment file without ever waiting on the client. A
//! connection has at most [`PIPES_PER_CONNECTION`] such frames in flight; a pipe that fills
//! before the batch is in it gives its bytes back and the frame is read whole, as any other.
//!
//! The parts: the reader's loop, its framing and its limits (here), paying for the bytes read
//! (`payment`), reading a frame's batch into a pipe (`piping`), the values it is configured
//! with and hands on (`frame`), and its refusals and errors (`errors`).

mod errors;
mod frame;
mod payment;
mod piping;

use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

use super::memory_budget::{BudgetError, MemoryBudget, Reservation};
use crate::protocol::wrong_port;
use crate::protocol::{FRAME_LENGTH_BYTES, REQUEST_HEADER_BYTES};
use crate::storage::splice::PipePool;

pub use errors::{FrameRefusal, ReadError};
pub use frame::{
    FrameHead, FrameHeader, FrameLimits, FrameTail, ReadFrame, SpliceCapable, SpliceRule,
};
use piping::Piping;

/// Default largest frame a connection may send before it authenticates (servers with
/// `--auth`): 512 KiB, Kafka's `sasl.server.max.receive.size`.
pub const DEFAULT_MAX_UNAUTHENTICATED_FRAME_BYTES: usize = 512 * 1024;
/// Default longest a frame may take to arrive whole once its first byte has.
pub const DEFAULT_PARTIAL_FRAME_TIMEOUT_MS: u64 = 30_000;

/// Bytes read at a time while no frame's length and header are known: enough for the header
/// and for a burst of small pipelined requests.
const HEADER_READ_BYTES: usize = 4 * 1024;
/// Most bytes of a frame's body read at a time. Bytes are paid for once read, and no more is
/// read until they are: a connection is at most this far ahead of its payments.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Most bytes of a batch moved from the socket into its pipe at a time. Larger than a read:
/// the bytes are the socket buffer's own pages, moved by reference (no memory is allocated
/// for them), and every move is a system call; they are still paid for before the next move.
/// Measured (1 MiB batches, one producer): 64 KiB moves made 18 system calls per batch.
const PIPE_CHUNK_BYTES: usize = 1024 * 1024;
/// Most frames of a connection whose batches are in pipes at a time (each pipe holds up to
/// [`crate::storage::splice::SPLICE_PIPE_BYTES`] of page references and two descriptors); the
/// next such frame waits for one of them to be appended.
pub const PIPES_PER_CONNECTION: usize = 4;
/// Most bytes of an HTTP request read and thrown away after the answer, so that closing the
/// socket with them unread does not reset the connection before the client reads the answer.
const DRAIN_BYTES: usize = 64 * 1024;

/// The frame being read: its length is known.
#[derive(Debug, Clone, Copy)]
struct Started {
    declared: usize,
    header: Option<FrameHeader>,
    /// Its header was read and its length judged acceptable.
    accepted: bool,
    /// Whether it may be read only in part.
    reading: Reading,
}

/// How far a frame is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Not judged yet.
    Undecided,
    /// Up to this many body bytes, to judge it.
    Head(usize),
    /// Whole into memory, or (with [`FrameReader::piping`]) through a pipe.
    Whole,
}

/// What [`FrameReader::take_frame`] found in the buffer.
enum Taken {
    Frame(ReadFrame),
    /// The frame's head: pipe its body's bytes up to `piped_end`.
    Head {
        piped_end: usize,
    },
    Nothing,
}

/// Reads request frames from one connection.
#[derive(Debug)]
pub struct FrameReader<R> {
    source: R,
    buffer: BytesMut,
    /// Memory held for the bytes in `buffer` and those about to be read.
    held: Reservation,
    own: MemoryBudget,
    shared: MemoryBudget,
    limits: FrameLimits,
    frame: Option<Started>,
    /// When the first byte of the frame being read arrived.
    first_byte: Option<Instant>,
    /// Time this frame spent waiting for memory (not counted against its timeout).
    waited: Duration,
    /// Since when the reader has been waiting for memory, if it is.
    waiting_since: Option<Instant>,
    frames_read: u64,
    splice: Option<SpliceRule>,
    pipes: PipePool,
    /// The frame being read's batch going into a pipe.
    piping: Option<Piping>,
}

impl<R: AsyncRead + SpliceCapable + Unpin> FrameReader<R> {
    /// Reads from `source`, paying for memory from `own` (this connection's share) first and
    /// `shared` (the server's budget) beyond it.
    pub fn new(source: R, limits: FrameLimits, own: MemoryBudget, shared: MemoryBudget) -> Self {
        Self {
            source,
            buffer: BytesMut::new(),
            held: Reservation::default(),
            own,
            shared,
            limits,
            frame: None,
            first_byte: None,
            waited: Duration::ZERO,
            waiting_since: None,
            frames_read: 0,
            splice: None,
            pipes: PipePool::new(PIPES_PER_CONNECTION),
            piping: None,
        }
    }

    /// Reads the frames `rule` recognises only in part when the source is a TCP socket.
    pub fn splicing(mut self, rule: Option<SpliceRule>) -> Self {
        self.splice = rule;
        self
    }

    /// The next whole frame; `None` when the client closed the connection between frames.
    /// `must_authenticate`: the connection has not authenticated on a server that requires it.
    ///
    /// Cancel-safe: what was read, and the time waited, stay in the reader for the next call.
    pub async fn next(&mut self, must_authenticate: bool) -> Result<Option<ReadFrame>, ReadError> {
        loop {
            self.pay().await?;
            match self.take_frame(must_authenticate)? {
                Taken::Frame(frame) => return Ok(Some(frame)),
                Taken::Head { piped_end } => {
                    self.start_piping(piped_end).await;
                    continue;
                }
                Taken::Nothing => {}
            }
            if self
                .piping
                .as_ref()
                .is_some_and(|piping| piping.pipe.holds() < piping.len)
            {
                self.pipe_some().await?;
                continue;
            }
            let room = self.read_target().saturating_sub(self.buffer.len()).max(1);
            let deadline = self
                .first_byte
                .map(|first| first + self.limits.partial_frame_timeout + self.waited);
            let read = read_some(&mut self.source, &mut self.buffer, room);
            let read = match deadline {
                None => read.await?,
                Some(deadline) => tokio::select! {
                    read = read => read?,
                    () = tokio::time::sleep_until(deadline) => return Err(self.incomplete()),
                },
            };
            if read == 0 {
                if self.buffer.is_empty() {
                    return Ok(None);
                }
                return Err(ReadError::ClosedMidFrame {
                    received: self.buffer.len(),
                });
            }
            self.first_byte.get_or_insert_with(Instant::now);
            self.try_pay();
        }
    }

    /// The deadline of the frame being read, once its first byte arrived.
    fn deadline(&self) -> Option<Instant> {
        self.first_byte
            .map(|first| first + self.limits.partial_frame_timeout + self.waited)
    }

    /// Reads and discards what the client still sends, for up to `limit` (at most
    /// [`DRAIN_BYTES`]), so that an answer written before the close is not lost to a reset.
    pub async fn drain(&mut self, limit: Duration) {
        let until = Instant::now() + limit;
        let mut scratch = [0u8; 4096];
        let mut drained = 0;
        while drained < DRAIN_BYTES {
            match tokio::time::timeout_at(until, self.source.read(&mut scratch)).await {
                Ok(Ok(read)) if read > 0 => drained += read,
                _ => return,
            }
        }
    }

    /// The refusal of a frame that did not arrive in time.
    fn incomplete(&self) -> ReadError {
        self.incomplete_with(self.buffer.len())
    }

    /// The refusal of a frame that did not arrive in time, `received` bytes of it received.
    fn incomplete_with(&self, received: usize) -> ReadError {
        ReadError::Refused {
            header: self.frame.and_then(|frame| frame.header),
            refusal: FrameRefusal::Incomplete {
                received,
                timeout_ms: u64::try_from(self.limits.partial_frame_timeout.as_millis())
                    .unwrap_or(u64::MAX),
            },
        }
    }

    /// The frame at the start of the buffer if it is whole; judges its length once its header
    /// is in.
    fn take_frame(&mut self, must_authenticate: bool) -> Result<Taken, ReadError> {
        let mut frame = match self.frame {
            Some(frame) => frame,
            None => {
                let Some(&[a, b, c, d]) = self.buffer.get(..FRAME_LENGTH_BYTES) else {
                    return Ok(Taken::Nothing);
                };
                let declared =
                    usize::try_from(u32::from_be_bytes([a, b, c, d])).unwrap_or(usize::MAX);
                if declared == 0 {
                    return Err(ReadError::Refused {
                        header: None,
                        refusal: FrameRefusal::Empty,
                    });
                }
                Started {
                    declared,
                    header: None,
                    accepted: false,
                    reading: Reading::Undecided,
                }
            }
        };
        let end = FRAME_LENGTH_BYTES.saturating_add(frame.declared);
        if !frame.accepted {
            let header_bytes = if self.limits.wait_for_header {
                REQUEST_HEADER_BYTES.min(frame.declared)
            } else {
                0
            };
            let header_end = FRAME_LENGTH_BYTES + header_bytes;
            if self.buffer.len() < header_end {
                self.frame = Some(frame);
                return Ok(Taken::Nothing);
            }
            frame.header = FrameHeader::peek(&self.buffer[FRAME_LENGTH_BYTES..header_end]);
            self.frame = Some(frame);
            self.judge(frame, must_authenticate)?;
            frame.accepted = true;
            self.frame = Some(frame);
            // Address space for the whole frame, so it is read without copies; its pages become
            // resident (and are paid for) only as its bytes arrive. Not yet for a frame that may
            // be read only in part: most of it never comes into memory.
            if !self.may_splice(&frame) {
                self.buffer.reserve(end.saturating_sub(self.buffer.len()));
            }
        }
        if let Some(piping) = &self.piping {
            return Ok(self.take_piped(end, piping.len));
        }
        if frame.reading != Reading::Whole {
            frame.reading = match self.judge_head(&frame) {
                FrameHead::Whole => {
                    self.buffer.reserve(end.saturating_sub(self.buffer.len()));
                    Reading::Whole
                }
                FrameHead::Need(bytes) => Reading::Head(bytes),
                FrameHead::Splice { piped_end } => {
                    self.frame = Some(frame);
                    return Ok(Taken::Head { piped_end });
                }
            };
            self.frame = Some(frame);
        }
        if self.buffer.len() < end {
            return Ok(Taken::Nothing);
        }
        let mut bytes = self.buffer.split_to(end).freeze();
        bytes.advance(FRAME_LENGTH_BYTES);
        let reservation = self.held.split_off(end);
        self.frame_taken();
        Ok(Taken::Frame(ReadFrame {
            bytes,
            reservation,
            tail: None,
        }))
    }

    /// Starts over at the next frame, after one was handed on (its bytes split off the buffer).
    fn frame_taken(&mut self) {
        self.frame = None;
        self.waited = Duration::ZERO;
        self.first_byte = (!self.buffer.is_empty()).then(Instant::now);
        self.frames_read += 1;
    }

    /// Refuses a frame whose length is over a limit (or that is another protocol's opening).
    fn judge(&self, frame: Started, must_authenticate: bool) -> Result<(), ReadError> {
        let declared = frame.declared;
        let refused = |refusal| ReadError::Refused {
            header: frame.header,
            refusal,
        };
        if declared > self.limits.max_frame_bytes {
            if self.frames_read == 0 {
                let prefix = [
                    self.buffer[0],
                    self.buffer[1],
                    self.buffer[2],
                    self.buffer[3],
                ];
                if let Some(foreign) = wrong_port::sniff_request(prefix) {
                    return Err(ReadError::Foreign(foreign));
                }
            }
            return Err(refused(FrameRefusal::TooLarge {
                declared,
                max: self.limits.max_frame_bytes,
            }));
        }
        if must_authenticate && declared > self.limits.max_unauthenticated_frame_bytes {
            return Err(refused(FrameRefusal::Unauthenticated {
                declared,
                max: self.limits.max_unauthenticated_frame_bytes,
            }));
        }
        let memory = self.own.total().saturating_add(self.shared.total());
        if FRAME_LENGTH_BYTES.saturating_add(declared) > memory {
            return Err(refused(FrameRefusal::Budget(
                BudgetError::LargerThanBudget {
                    frame_bytes: declared,
                    budget_bytes: self.shared.total(),
                },
            )));
        }
        Ok(())
    }

    /// How many bytes the buffer should hold after the next read.
    fn read_target(&self) -> usize {
        if let (Some(piping), Some(frame)) = (&self.piping, &self.frame) {
            // The frame's last fields, after its piped batch.
            return FRAME_LENGTH_BYTES + frame.declared - piping.len;
        }
        match self.frame {
            Some(Started {
                accepted: true,
                reading: Reading::Head(bytes),
                ..
            }) => FRAME_LENGTH_BYTES + bytes,
            Some(Started {
                declared,
                accepted: true,
                ..
            }) => (FRAME_LENGTH_BYTES + declared).min(self.buffer.len() + READ_CHUNK_BYTES),
            _ => self.buffer.len() + HEADER_READ_BYTES,
        }
    }
}

/// Reads at most `room` bytes into `buffer`.
async fn read_some<R: AsyncRead + Unpin>(
    source: &mut R,
    buffer: &mut BytesMut,
    room: usize,
) -> std::io::Result<usize> {
    buffer.reserve(room);
    let limit = u64::try_from(room).unwrap_or(u64::MAX);
    (&mut *source).take(limit).read_buf(buffer).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> FrameLimits {
        FrameLimits {
            max_frame_bytes: 1 << 20,
            max_unauthenticated_frame_bytes: 1024,
            partial_frame_timeout: Duration::from_secs(30),
            buffer_wait: Duration::from_millis(100),
            wait_for_header: true,
        }
    }

    fn frame(correlation_id: u32, body: usize) -> Vec<u8> {
        let mut bytes = u32::try_from(8 + body).unwrap().to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0, 7, 0, 0]);
        bytes.extend_from_slice(&correlation_id.to_be_bytes());
        bytes.resize(4 + 8 + body, 0xab);
        bytes
    }

    /// A prefix declaring a large frame holds only the bytes that arrived: the shared budget
    /// is untouched, and the frame pays for its body as the body comes.
    #[tokio::test]
    async fn a_declared_length_holds_nothing_until_its_bytes_arrive() {
        let own = MemoryBudget::new(4096);
        let shared = MemoryBudget::new(1 << 20);
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let mut reader = FrameReader::new(server, limits(), own.clone(), shared.clone());
        let whole = frame(5, 200_000);
        tokio::io::AsyncWriteExt::write_all(&mut client, &whole[..12])
            .await
            .unwrap();
        let pending = tokio::time::timeout(Duration::from_millis(100), reader.next(false)).await;
        assert!(pending.is_err(), "half a frame is not a frame");
        assert_eq!(
            shared.available(),
            1 << 20,
            "a prefix holds no shared memory"
        );
        tokio::io::AsyncWriteExt::write_all(&mut client, &whole[12..])
            .await
            .unwrap();
        let read = reader.next(false).await.unwrap().unwrap();
        assert_eq!(read.bytes.len(), 200_008);
        assert_eq!(read.reservation.bytes(), 200_012);
        drop(read);
        drop(reader);
        assert_eq!((own.available(), shared.available()), (4096, 1 << 20));
    }

    /// Refusals carry the frame's correlation id: a frame over the limit, and one over the
    /// limit before authentication; an HTTP request is recognised as HTTP.
    #[tokio::test]
    async fn refusals_carry_the_correlation_id_and_http_is_recognised() {
        for (bytes, must_authenticate, expected) in [
            (frame(41, 2 << 20), false, "TooLarge"),
            (frame(42, 4096), true, "Unauthenticated"),
            (b"GET /metrics HTTP/1.1\r\n\r\n".to_vec(), false, "HTTP"),
        ] {
            let (mut client, server) = tokio::io::duplex(1 << 16);
            let mut reader = FrameReader::new(
                server,
                limits(),
                MemoryBudget::new(4096),
                MemoryBudget::new(1 << 20),
            );
            tokio::io::AsyncWriteExt::write_all(&mut client, &bytes[..bytes.len().min(64)])
                .await
                .unwrap();
            match reader.next(must_authenticate).await {
                Err(ReadError::Refused { header, refusal }) => {
                    assert!(format!("{refusal:?}").starts_with(expected), "{refusal:?}");
                    let id = header.unwrap().correlation_id;
                    assert!(id == 41 || id == 42);
                }
                Err(ReadError::Foreign(foreign)) => assert_eq!(foreign.name(), expected),
                other => panic!("{other:?}"),
            }
        }
    }

    /// A connected loopback pair: the client, and the server's read half.
    async fn tcp_pair() -> (tokio::net::TcpStream, tokio::net::tcp::OwnedReadHalf) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let (read, write) = server.into_split();
        std::mem::forget(write);
        (client, read)
    }

    /// Pipes every body byte after the first 16 but the last 3.
    fn judge_all_but_ends(_: &FrameHeader, declared: usize, body: &[u8]) -> FrameHead {
        if body.len() < 16 {
            FrameHead::Need(16)
        } else {
            FrameHead::Splice {
                piped_end: declared - 3,
            }
        }
    }

    fn splicing_reader(
        source: tokio::net::tcp::OwnedReadHalf,
    ) -> FrameReader<tokio::net::tcp::OwnedReadHalf> {
        FrameReader::new(
            source,
            limits(),
            MemoryBudget::new(4096),
            MemoryBudget::new(1 << 20),
        )
        .splicing(Some(SpliceRule {
            min_frame_bytes: 100_000,
            judge: judge_all_but_ends,
        }))
    }

    fn patterned(correlation_id: u32, body: usize) -> Vec<u8> {
        let mut bytes = frame(correlation_id, body);
        for (at, byte) in bytes.iter_mut().enumerate().skip(12) {
            *byte = (at % 251) as u8;
        }
        bytes
    }

    #[tokio::test]
    async fn a_long_frame_s_batch_goes_into_a_pipe_and_its_ends_into_memory() {
        // Proves: the judged frame comes out as its head in memory, the piped bytes in its
        // pipe and its last fields in memory, all paid for; the next frame is read as usual.
        let (mut client, source) = tcp_pair().await;
        let mut reader = splicing_reader(source);
        let long = patterned(3, 300_000);
        let short = frame(4, 10);
        let writer = tokio::spawn(async move {
            tokio::io::AsyncWriteExt::write_all(&mut client, &long)
                .await
                .unwrap();
            tokio::io::AsyncWriteExt::write_all(&mut client, &short)
                .await
                .unwrap();
            client
        });
        let read = reader.next(false).await.unwrap().unwrap();
        let mut tail = read.tail.expect("the long frame was piped");
        let long = patterned(3, 300_000);
        let body = &long[4..];
        let head_len = read.bytes.len();
        assert!((16..=HEADER_READ_BYTES).contains(&head_len), "{head_len}");
        assert_eq!(&read.bytes[..], &body[..head_len]);
        assert_eq!(&tail.trailer[..], &body[body.len() - 3..]);
        assert_eq!(tail.pipe.holds(), body.len() - 3 - head_len);
        let mut piped = vec![0; tail.pipe.holds()];
        let mut filled = 0;
        while filled < piped.len() {
            filled += tail.pipe.read_into(&mut piped[filled..]).unwrap();
        }
        assert!(piped[..] == body[head_len..body.len() - 3]);
        assert_eq!(read.reservation.bytes(), long.len());
        let next = reader.next(false).await.unwrap().unwrap();
        assert!(next.tail.is_none());
        assert_eq!(FrameHeader::peek(&next.bytes).unwrap().correlation_id, 4);
        drop(writer.await.unwrap());
    }

    #[tokio::test]
    async fn a_pipe_that_fills_gives_its_bytes_back_and_the_frame_is_read_whole() {
        // Proves: a pipe with no room left for a batch (here one page: one slot) is emptied
        // back into the buffer and the frame is read whole, byte for byte.
        let (mut client, source) = tcp_pair().await;
        let mut reader = splicing_reader(source);
        reader.pipes = PipePool::with_pipe_bytes(1, 4096);
        client.set_nodelay(true).unwrap();
        let writer = tokio::spawn(async move {
            for chunk in patterned(5, 300_000).chunks(10_000) {
                tokio::io::AsyncWriteExt::write_all(&mut client, chunk)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            client
        });
        let read = reader.next(false).await.unwrap().unwrap();
        assert!(read.tail.is_none(), "read whole");
        assert!(read.bytes[..] == patterned(5, 300_000)[4..]);
        drop(writer.await.unwrap());
    }

    /// A frame that stops half way is refused after the partial-frame timeout, with its id.
    #[tokio::test(start_paused = true)]
    async fn a_half_sent_frame_times_out_with_its_correlation_id() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut reader = FrameReader::new(
            server,
            limits(),
            MemoryBudget::new(4096),
            MemoryBudget::new(1 << 20),
        );
        tokio::io::AsyncWriteExt::write_all(&mut client, &frame(9, 100)[..20])
            .await
            .unwrap();
        match reader.next(false).await {
            Err(ReadError::Refused {
                header: Some(header),
                refusal: FrameRefusal::Incomplete { received: 20, .. },
            }) => assert_eq!(header.correlation_id, 9),
            other => panic!("{other:?}"),
        }
    }
}
