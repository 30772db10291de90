//! Moving a batch's bytes from a socket into a segment file without passing them through this
//! process: `splice` socket → pipe → file, the one-copy produce path (`docs/benchmarks.md`,
//! "The one-copy produce path: measured, and the design it needs"). The receive copy into user
//! memory goes: the socket's pages move into the pipe by reference, and the only copy left is
//! the kernel's into the page cache.
//!
//! The two halves run at different times. The connection moves a batch's bytes socket → pipe
//! as they arrive ([`SplicePipe::fill_from`]), outside every lock: a client that stalls
//! mid-batch holds nothing but its own pipe. The append moves them pipe → file
//! ([`SplicePipe::drain_into`]) under the partition's writer lock, and that half never waits:
//! the bytes are already in the pipe (missing ones are an error, not a wait).
//!
//! A pipe's capacity is counted in slots (one per page fragment of the socket's buffers), not
//! bytes, so how much of a batch it holds depends on how the batch arrived. A pipe that fills
//! before the batch is in it gives its bytes back ([`SplicePipe::read_into`]) and the frame is
//! read into memory as any other.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::pipe::{
    fcntl_getpipe_size, fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What puts the rest of a batch into its segment file, at the offset it is given, for
/// [`crate::storage::Partition::append_spliced_pending`]: in the produce path,
/// [`SplicePipe::drain_into`] of the pipe holding the batch's bytes.
pub type BatchFill<'a> = dyn FnMut(&File, u64) -> io::Result<()> + 'a;

/// The pipe capacity a [`SplicePipe`] asks for: the kernel's default `pipe-max-size`. Where the
/// kernel grants less, the pipe keeps what it has (64 KiB by default) and holds less of a batch.
pub const SPLICE_PIPE_BYTES: usize = 1024 * 1024;

/// A pipe that carries bytes from a socket to a file.
#[derive(Debug)]
pub struct SplicePipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
    /// Bytes in the pipe.
    holds: usize,
}

impl SplicePipe {
    /// A new pipe of up to [`SPLICE_PIPE_BYTES`].
    pub fn new() -> io::Result<Self> {
        Self::with_capacity(SPLICE_PIPE_BYTES)
    }

    /// A new pipe of up to `bytes` (the kernel rounds it up to whole pages; a smaller pipe
    /// moves a batch in more rounds).
    pub fn with_capacity(bytes: usize) -> io::Result<Self> {
        let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        let capacity = match fcntl_setpipe_size(&write, bytes) {
            Ok(granted) => granted,
            Err(_) => fcntl_getpipe_size(&write)?,
        };
        Ok(Self {
            read,
            write,
            capacity,
            holds: 0,
        })
    }

    /// The pipe's capacity in bytes of whole pages (it may hold more of a socket's bytes, or
    /// fewer: see the module documentation).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes in the pipe.
    pub fn holds(&self) -> usize {
        self.holds
    }

    /// Moves up to `max` bytes queued on `socket` into the pipe, without waiting: the bytes
    /// moved, 0 at the end of the stream, [`io::ErrorKind::WouldBlock`] when the socket has
    /// none queued *or the pipe is full* (the caller tells the two apart). The socket must be in
    /// non-blocking mode, as every socket of the async runtime is.
    pub fn fill_from(&mut self, socket: impl AsFd, max: usize) -> io::Result<usize> {
        let moved = retry(|| {
            splice(
                &socket,
                None,
                &self.write,
                None,
                max,
                SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
            )
        })?;
        self.holds += moved;
        Ok(moved)
    }

    /// Moves exactly `len` bytes from the pipe into `file` at `offset`, without waiting: a pipe
    /// holding fewer is [`io::ErrorKind::WouldBlock`] (with some of them gone into the file).
    pub fn drain_into(&mut self, file: &File, mut offset: u64, len: usize) -> io::Result<()> {
        let mut left = len;
        while left > 0 {
            let put = retry(|| {
                splice(
                    &self.read,
                    None,
                    file,
                    Some(&mut offset),
                    left,
                    SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
                )
            })?;
            if put == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "splice into the segment file moved nothing",
                ));
            }
            self.holds = self.holds.saturating_sub(put);
            left -= put;
        }
        Ok(())
    }

    /// Reads bytes out of the pipe into `buffer` (the way back to the copy path): the bytes
    /// read, 0 when the pipe is empty.
    pub fn read_into(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        if self.holds == 0 || buffer.is_empty() {
            return Ok(0);
        }
        let read = retry(|| rustix::io::read(&self.read, &mut *buffer))?;
        self.holds = self.holds.saturating_sub(read);
        Ok(read)
    }

    /// Moves exactly `len` bytes from `socket` into `file` at `offset` through the pipe, which
    /// must be empty; every byte must already be queued on the socket (fewer is
    /// [`io::ErrorKind::WouldBlock`], or [`io::ErrorKind::UnexpectedEof`] once the peer closed).
    pub fn transfer(
        &mut self,
        socket: impl AsFd,
        file: &File,
        mut offset: u64,
        len: usize,
    ) -> io::Result<()> {
        let mut left = len;
        while left > 0 {
            let taken = self.fill_from(&socket, left.min(self.capacity))?;
            if taken == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the peer closed with {left} bytes of the batch still to come"),
                ));
            }
            self.drain_into(file, offset, taken)?;
            offset += taken as u64;
            left -= taken;
        }
        Ok(())
    }
}

/// A connection's pipes: at most `pipes` out at a time (each with a frame's bytes on their way
/// to a segment), made when first needed and reused when they come back empty.
#[derive(Debug, Clone)]
pub struct PipePool {
    shared: Arc<PoolShared>,
}

#[derive(Debug)]
struct PoolShared {
    free: Mutex<Vec<SplicePipe>>,
    permits: Arc<Semaphore>,
    pipe_bytes: usize,
}

impl PipePool {
    /// A pool lending at most `pipes` pipes of [`SPLICE_PIPE_BYTES`] at a time.
    pub fn new(pipes: usize) -> Self {
        Self::with_pipe_bytes(pipes, SPLICE_PIPE_BYTES)
    }

    /// A pool lending at most `pipes` pipes of up to `pipe_bytes` each at a time.
    pub fn with_pipe_bytes(pipes: usize, pipe_bytes: usize) -> Self {
        Self {
            shared: Arc::new(PoolShared {
                free: Mutex::new(Vec::new()),
                permits: Arc::new(Semaphore::new(pipes.max(1))),
                pipe_bytes,
            }),
        }
    }

    /// A pipe, once one of the pool's is free. Cancel-safe.
    pub async fn take(&self) -> io::Result<PooledPipe> {
        let permit = Arc::clone(&self.shared.permits)
            .acquire_owned()
            .await
            .map_err(|_| io::Error::other("the pipe pool is closed"))?;
        let reused = self
            .shared
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let pipe = match reused {
            Some(pipe) => pipe,
            None => SplicePipe::with_capacity(self.shared.pipe_bytes)?,
        };
        Ok(PooledPipe {
            pipe: Some(pipe),
            shared: Arc::clone(&self.shared),
            _permit: permit,
        })
    }
}

/// A pipe lent by a [`PipePool`]: back to it when dropped empty, closed when dropped holding
/// bytes (nothing could tell them from the next frame's).
#[derive(Debug)]
pub struct PooledPipe {
    pipe: Option<SplicePipe>,
    shared: Arc<PoolShared>,
    _permit: OwnedSemaphorePermit,
}

impl std::ops::Deref for PooledPipe {
    type Target = SplicePipe;

    fn deref(&self) -> &SplicePipe {
        self.pipe
            .as_ref()
            .expect("a pooled pipe has its pipe until dropped")
    }
}

impl std::ops::DerefMut for PooledPipe {
    fn deref_mut(&mut self) -> &mut SplicePipe {
        self.pipe
            .as_mut()
            .expect("a pooled pipe has its pipe until dropped")
    }
}

impl Drop for PooledPipe {
    fn drop(&mut self) {
        if let Some(pipe) = self.pipe.take().filter(|pipe| pipe.holds == 0) {
            self.shared
                .free
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(pipe);
        }
    }
}

/// Runs a system call again while it is interrupted by a signal.
fn retry(mut call: impl FnMut() -> rustix::io::Result<usize>) -> io::Result<usize> {
    loop {
        match call() {
            Err(rustix::io::Errno::INTR) => continue,
            other => return other.map_err(io::Error::from),
        }
    }
}

#[cfg(all(test, not(fencelog_loom)))]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::fs::FileExt;

    use super::*;

    /// A connected pair of loopback TCP sockets.
    fn sockets() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    /// Waits until `socket` holds at least `len` unread bytes.
    fn queued(socket: &TcpStream, len: usize) {
        let mut buffer = vec![0; len];
        for _ in 0..1000 {
            if socket.peek(&mut buffer).unwrap_or(0) >= len {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        panic!("{len} bytes never arrived");
    }

    #[test]
    fn bytes_queued_on_a_socket_land_in_the_file_at_the_offset() {
        // Proves: a transfer larger than the pipe moves exactly the bytes asked, in order, to
        // the offset asked, and leaves what follows them on the socket.
        // A small pipe and a payload a default receive buffer holds whole (the server waits for
        // every byte before it splices, as the produce path will).
        let (mut client, mut server) = sockets();
        let mut pipe = SplicePipe::with_capacity(8 * 1024).unwrap();
        let payload: Vec<u8> = (0..3 * pipe.capacity() + 123)
            .map(|i| (i % 251) as u8)
            .collect();
        let sender = {
            let payload = payload.clone();
            std::thread::spawn(move || {
                client.write_all(&payload).unwrap();
                client.write_all(b"next").unwrap();
                client
            })
        };
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("segment"))
            .unwrap();
        let _client = sender.join().unwrap();
        queued(&server, payload.len() + 4);
        server.set_nonblocking(true).unwrap();
        pipe.transfer(&server, &file, 7, payload.len()).unwrap();
        server.set_nonblocking(false).unwrap();
        let mut landed = vec![0; payload.len()];
        file.read_exact_at(&mut landed, 7).unwrap();
        assert_eq!(landed, payload);
        let mut next = [0; 4];
        server.read_exact(&mut next).unwrap();
        assert_eq!(&next, b"next");
    }

    #[test]
    fn a_socket_holding_fewer_bytes_is_an_error_not_a_wait() {
        // Proves: the transfer never waits on a client: bytes that are not there are an error.
        let (mut client, server) = sockets();
        server.set_nonblocking(true).unwrap();
        client.write_all(&[1; 100]).unwrap();
        queued(&server, 100);
        let mut pipe = SplicePipe::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("segment")).unwrap();
        let error = pipe.transfer(&server, &file, 0, 200).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::WouldBlock, "{error}");
        drop(client);
    }
}
