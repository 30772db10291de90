//! Reading a frame only in part: its batch moved from the socket into a pipe as it arrives,
//! its head and last fields into memory (see the parent's "Frames read only in part").
//!
//! Why apart: it is the one part of the reader that works on the socket under the stream
//! (splice, readiness, queued bytes), and it falls back to reading whole whenever it cannot.

use bytes::Buf;
use tokio::io::{AsyncRead, Interest};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::{
    FrameHead, FrameReader, FrameTail, ReadError, ReadFrame, Reading, SpliceCapable, Started,
    Taken, PIPE_CHUNK_BYTES,
};
use crate::protocol::FRAME_LENGTH_BYTES;
use crate::storage::splice::PooledPipe;

/// A frame's batch on its way into a pipe.
#[derive(Debug)]
pub(super) struct Piping {
    pub(super) pipe: PooledPipe,
    /// The frame's bytes in the buffer before the piped ones (its length prefix included).
    pub(super) head_len: usize,
    /// The frame's bytes that go through the pipe.
    pub(super) len: usize,
}

impl<R: AsyncRead + SpliceCapable + Unpin> FrameReader<R> {
    /// Takes a pipe for the batch of the frame whose head is buffered (waiting while the
    /// connection's pipes are all out, a wait not counted against the frame's timeout), or
    /// marks the frame to be read whole when no pipe can be made.
    pub(super) async fn start_piping(&mut self, piped_end: usize) {
        let since = Instant::now();
        let taken = self.pipes.take().await;
        self.waited += since.elapsed();
        let Some(mut frame) = self.frame else {
            return;
        };
        match taken {
            Ok(pipe) => {
                let head_len = self.buffer.len();
                self.piping = Some(Piping {
                    pipe,
                    head_len,
                    len: (FRAME_LENGTH_BYTES + piped_end).saturating_sub(head_len),
                });
            }
            Err(error) => {
                tracing::debug!(%error, "no pipe for a frame's batch; reading it whole");
                frame.reading = Reading::Whole;
                self.frame = Some(frame);
            }
        }
    }

    /// Moves the next bytes of the batch being piped from the socket into its pipe (at most
    /// [`PIPE_CHUNK_BYTES`], paid for before the next move), waiting for them within the
    /// frame's timeout; a pipe that is full gives its bytes back to the buffer and the frame is
    /// read whole.
    pub(super) async fn pipe_some(&mut self) -> Result<(), ReadError> {
        let deadline = self.deadline();
        let received = self.buffer.len();
        let (Some(socket), Some(piping)) = (self.source.tcp(), self.piping.as_mut()) else {
            return Ok(());
        };
        let want = (piping.len - piping.pipe.holds()).min(PIPE_CHUNK_BYTES);
        loop {
            match fill_twice(&mut piping.pipe, socket, want) {
                Ok(0) => {
                    return Err(ReadError::ClosedMidFrame {
                        received: received + piping.pipe.holds(),
                    })
                }
                Ok(_) => return Ok(()),
                Err(Fill::PipeFull) => return self.unpipe().map_err(ReadError::Io),
                Err(Fill::Io(error)) => return Err(ReadError::Io(error)),
                Err(Fill::Empty) => {}
            }
            // Wait for the socket's next bytes: clear the readiness left by earlier reads, then
            // look again before waiting (bytes may have come in between). Only here, where the
            // socket was found empty: readiness cleared while bytes wait (the frame's last fields,
            // the next frame) would leave the next read waiting for an event that never comes.
            let _ = socket.try_io(Interest::READABLE, || {
                Err::<(), _>(std::io::Error::from(std::io::ErrorKind::WouldBlock))
            });
            if queued(socket)? > 0 {
                continue;
            }
            let ready = socket.readable();
            match deadline {
                None => ready.await?,
                Some(deadline) => tokio::select! {
                    ready = ready => ready?,
                    () = tokio::time::sleep_until(deadline) => {
                        let received = received + piping.pipe.holds();
                        return Err(self.incomplete_with(received));
                    }
                },
            }
        }
    }

    /// Gives a full pipe's bytes back to the buffer (they follow the head in it) and marks the
    /// frame to be read whole: the bytes are paid for already.
    fn unpipe(&mut self) -> std::io::Result<()> {
        let Some(mut piping) = self.piping.take() else {
            return Ok(());
        };
        let held = piping.pipe.holds();
        let start = self.buffer.len();
        if let Some(frame) = self.frame {
            // The frame is read whole from here: address space for all of it, as for any other.
            let end = FRAME_LENGTH_BYTES.saturating_add(frame.declared);
            self.buffer.reserve(end.saturating_sub(start));
        }
        self.buffer.resize(start + held, 0);
        let mut filled = 0;
        while filled < held {
            let read = piping.pipe.read_into(&mut self.buffer[start + filled..])?;
            if read == 0 {
                break;
            }
            filled += read;
        }
        self.buffer.truncate(start + filled);
        if let Some(frame) = self.frame.as_mut() {
            frame.reading = Reading::Whole;
        }
        tracing::debug!(
            bytes = held,
            "a frame's batch did not fit its pipe; reading it whole"
        );
        Ok(())
    }

    /// The frame whose batch is being piped, once its batch is in the pipe and its last fields
    /// in the buffer.
    pub(super) fn take_piped(&mut self, end: usize, piped: usize) -> Taken {
        let buffered_end = end - piped;
        let in_pipe = self.piping.as_ref().map_or(0, |piping| piping.pipe.holds());
        if in_pipe < piped || self.buffer.len() < buffered_end {
            return Taken::Nothing;
        }
        let Some(piping) = self.piping.take() else {
            return Taken::Nothing;
        };
        let mut bytes = self.buffer.split_to(buffered_end).freeze();
        let trailer = bytes.split_off(piping.head_len);
        bytes.advance(FRAME_LENGTH_BYTES);
        let reservation = self.held.split_off(end);
        self.frame_taken();
        Taken::Frame(ReadFrame {
            bytes,
            reservation,
            tail: Some(FrameTail {
                pipe: piping.pipe,
                trailer,
            }),
        })
    }

    /// Whether a frame is long enough, and its connection able, to be read only in part.
    pub(super) fn may_splice(&self, frame: &Started) -> bool {
        self.splice
            .is_some_and(|rule| frame.declared >= rule.min_frame_bytes)
            && frame.header.is_some()
            && self.source.tcp().is_some()
    }

    /// Whether an accepted frame is read whole or only its head (see the module documentation).
    pub(super) fn judge_head(&self, frame: &Started) -> FrameHead {
        let (Some(rule), Some(header)) = (self.splice, frame.header) else {
            return FrameHead::Whole;
        };
        let end = FRAME_LENGTH_BYTES.saturating_add(frame.declared);
        if !self.may_splice(frame) || self.buffer.len() >= end {
            return FrameHead::Whole;
        }
        let body = &self.buffer[FRAME_LENGTH_BYTES..];
        match (rule.judge)(&header, frame.declared, body) {
            // A head as long as the frame is the frame; a judge asking for bytes it has is
            // answered by reading the frame whole rather than waiting for nothing.
            FrameHead::Need(bytes)
                if bytes <= body.len() || FRAME_LENGTH_BYTES.saturating_add(bytes) >= end =>
            {
                FrameHead::Whole
            }
            judged => judged,
        }
    }
}

/// Why a move of bytes from the socket into a pipe moved nothing.
enum Fill {
    /// The socket has no bytes queued.
    Empty,
    /// The socket has bytes the pipe has no room for.
    PipeFull,
    Io(std::io::Error),
}

/// One move of up to `want` bytes from `socket` into `pipe` ([`PooledPipe::fill_from`]), tried a
/// second time when the first found no room or no bytes but the socket has some queued: a pipe
/// with no room twice while bytes wait is full (one bytes arrived at just the wrong moment would
/// otherwise look full).
fn fill_twice(pipe: &mut PooledPipe, socket: &TcpStream, want: usize) -> Result<usize, Fill> {
    for _ in 0..2 {
        match pipe.fill_from(socket, want) {
            Ok(moved) => return Ok(moved),
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                if queued(socket).map_err(Fill::Io)? == 0 {
                    return Err(Fill::Empty);
                }
            }
            Err(error) => return Err(Fill::Io(error)),
        }
    }
    Err(Fill::PipeFull)
}

/// Bytes queued on the socket, unread.
fn queued(socket: &TcpStream) -> std::io::Result<usize> {
    let bytes = rustix::io::ioctl_fionread(socket)?;
    Ok(usize::try_from(bytes).unwrap_or(usize::MAX))
}
