//! Moving a batch's bytes from a socket into a segment file without passing them through this
//! process: `splice` socket → pipe → file, the one-copy produce path (`docs/benchmarks.md`,
//! "The one-copy produce path: measured, and the design it needs"). The receive copy into user
//! memory goes; what is left is the kernel moving the socket's pages into the pipe and copying
//! them into the page cache.
//!
//! Nothing here waits: the caller makes sure every byte is already queued on the socket before
//! it takes the partition's writer lock (a client that stalls mid-batch must never hold the
//! lock). A socket that turns out to hold fewer bytes is an error with some of them gone from
//! it: the connection cannot find the next frame any more and must be closed, and the pipe,
//! which may hold bytes, goes with it.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::pipe::{
    fcntl_getpipe_size, fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags,
};

/// The pipe capacity a [`SplicePipe`] asks for: the kernel's default `pipe-max-size`, so that
/// one round trip through the pipe moves up to 1 MiB. Where the kernel grants less, the pipe
/// keeps what it has (64 KiB by default) and a batch takes more rounds.
pub const SPLICE_PIPE_BYTES: usize = 1024 * 1024;

/// A pipe that carries bytes from a socket to a file, empty between transfers: one per
/// connection that splices.
#[derive(Debug)]
pub struct SplicePipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
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
        })
    }

    /// The pipe's capacity: the most bytes one round moves.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Moves exactly `len` bytes from `socket` into `file` at `offset`. The socket must be in
    /// non-blocking mode (as every socket of the async runtime is: `SPLICE_F_NONBLOCK` makes
    /// only the pipe's side non-blocking), and every byte must already be queued on it: a
    /// socket with fewer is [`io::ErrorKind::WouldBlock`] (or [`io::ErrorKind::UnexpectedEof`]
    /// once the peer closed), some bytes gone from it; see the module documentation for what the
    /// caller does then.
    pub fn transfer(
        &self,
        socket: impl AsFd,
        file: &File,
        mut offset: u64,
        len: usize,
    ) -> io::Result<()> {
        let mut left = len;
        while left > 0 {
            let asked = left.min(self.capacity);
            let taken = retry(|| {
                splice(
                    &socket,
                    None,
                    &self.write,
                    None,
                    asked,
                    SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
                )
            })?;
            if taken == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the peer closed with {left} bytes of the batch still to come"),
                ));
            }
            let mut pending = taken;
            while pending > 0 {
                let put = retry(|| {
                    splice(
                        &self.read,
                        None,
                        file,
                        Some(&mut offset),
                        pending,
                        SpliceFlags::MOVE,
                    )
                })?;
                if put == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "splice into the segment file moved nothing",
                    ));
                }
                pending -= put;
            }
            left -= taken;
        }
        Ok(())
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
        let pipe = SplicePipe::with_capacity(8 * 1024).unwrap();
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
        let pipe = SplicePipe::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("segment")).unwrap();
        let error = pipe.transfer(&server, &file, 0, 200).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::WouldBlock, "{error}");
        drop(client);
    }
}
