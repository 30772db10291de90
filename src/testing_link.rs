//! A byte-level TCP link for fault-injection tests: put it on a link between two processes (a
//! broker and etcd, a follower and its leader) and make that link fail the way networks do.
//!
//! Why another proxy beside [`crate::testing_proxy::Proxy`]: that one reads our protocol's frames
//! to cut a connection after a given request; this one knows no protocol at all (etcd speaks
//! gRPC), and models a *partition* rather than a reset: a held link keeps its connections open
//! but moves no byte, exactly what a pulled cable or a dropping firewall does, so each side only
//! learns of it through its own timeouts. That is the failure that matters for leases and
//! in-sync replica sets: a reset is noticed at once, silence is not.
//!
//! Each direction is controlled on its own ([`Direction`]), so a one-way partition (requests
//! arrive, answers do not) is one call. Modes ([`LinkMode`]): `Open` forwards, `Hold` stops
//! forwarding (bytes stay in the proxy's and the kernel's buffers and flow again when the mode
//! returns to `Open`, like a healed partition; new connections are accepted but not forwarded),
//! `Delay` forwards each chunk after a fixed latency, and [`LinkProxy::reset_all`] closes every
//! connection at once.
//!
//! Bounds: each direction of each connection holds at most [`LINK_BUFFER_BYTES`] in the proxy
//! (reads stop while it is full, so a held link pushes back on the sender as a real one does).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Bytes one direction of one connection reads before it forwards them (its chunk size).
pub const LINK_BUFFER_BYTES: usize = 64 * 1024;

/// Which way bytes travel on a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the side that connected (the client) to the target.
    ToTarget,
    /// From the target back to the side that connected.
    FromTarget,
}

/// What a direction of the link does with bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkMode {
    /// Forwards at once.
    Open,
    /// Forwards nothing until the mode changes (a partition); connections stay open.
    Hold,
    /// Forwards each chunk after this latency.
    Delay(Duration),
}

/// A link to one target on its own `127.0.0.1` port. Dropping it closes every connection.
#[derive(Debug)]
pub struct LinkProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    target: SocketAddr,
    to_target: watch::Sender<LinkMode>,
    from_target: watch::Sender<LinkMode>,
    /// Bumped by `reset_all`; every connection watches it.
    resets: watch::Sender<u64>,
    connections: AtomicUsize,
}

impl LinkProxy {
    /// Starts a link to `target` on a free loopback port; point the connecting side at
    /// [`LinkProxy::addr`].
    pub async fn start(target: SocketAddr) -> io::Result<LinkProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            target,
            to_target: watch::Sender::new(LinkMode::Open),
            from_target: watch::Sender::new(LinkMode::Open),
            resets: watch::Sender::new(0),
            connections: AtomicUsize::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        Ok(LinkProxy {
            addr,
            shared,
            accept,
        })
    }

    /// The address the connecting side dials.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The target the link forwards to.
    pub fn target(&self) -> SocketAddr {
        self.shared.target
    }

    /// Sets one direction's mode; open connections follow at once.
    pub fn set(&self, direction: Direction, mode: LinkMode) {
        self.sender(direction).send_replace(mode);
    }

    /// Sets both directions' mode.
    pub fn set_both(&self, mode: LinkMode) {
        self.set(Direction::ToTarget, mode);
        self.set(Direction::FromTarget, mode);
    }

    /// Partitions the link both ways ([`LinkMode::Hold`]).
    pub fn hold(&self) {
        self.set_both(LinkMode::Hold);
    }

    /// Heals the link both ways ([`LinkMode::Open`]); held bytes flow again.
    pub fn open(&self) {
        self.set_both(LinkMode::Open);
    }

    /// Closes every open connection now (new ones are accepted as the modes say).
    pub fn reset_all(&self) {
        self.shared
            .resets
            .send_modify(|generation| *generation += 1);
    }

    /// How many connections the link has accepted.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Acquire)
    }

    fn sender(&self, direction: Direction) -> &watch::Sender<LinkMode> {
        match direction {
            Direction::ToTarget => &self.shared.to_target,
            Direction::FromTarget => &self.shared.from_target,
        }
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.reset_all();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of descriptors or similar: back off rather than spin; the test sees it stall.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        shared.connections.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(connection(client, Arc::clone(&shared)));
    }
}

/// One proxied connection: dials the target (after the outbound direction lets bytes through,
/// so a held link does not even connect), then pumps both directions until either side closes
/// or the link is reset.
async fn connection(client: TcpStream, shared: Arc<Shared>) {
    let mut resets = shared.resets.subscribe();
    resets.mark_unchanged();
    let mut to_target_mode = shared.to_target.subscribe();
    let work = async {
        wait_until_passing(&mut to_target_mode).await;
        let Ok(target) = TcpStream::connect(shared.target).await else {
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = target.set_nodelay(true);
        let (client_read, client_write) = client.into_split();
        let (target_read, target_write) = target.into_split();
        tokio::select! {
            () = pump(client_read, target_write, to_target_mode) => {}
            () = pump(target_read, client_write, shared.from_target.subscribe()) => {}
        }
    };
    tokio::select! {
        () = work => {}
        _ = resets.changed() => {}
    }
}

/// Waits until `mode` is not [`LinkMode::Hold`].
async fn wait_until_passing(mode: &mut watch::Receiver<LinkMode>) {
    while *mode.borrow_and_update() == LinkMode::Hold {
        if mode.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Forwards one direction under its mode until the reading side closes or a write fails.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut mode: watch::Receiver<LinkMode>,
) {
    let mut buffer = vec![0u8; LINK_BUFFER_BYTES];
    loop {
        // Hold before reading too, so the sender's kernel buffers fill as on a real partition.
        wait_until_passing(&mut mode).await;
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(read) => read,
        };
        // Bytes read before a hold began are held too, not forwarded.
        wait_until_passing(&mut mode).await;
        let delay = match *mode.borrow() {
            LinkMode::Delay(delay) => delay,
            _ => Duration::ZERO,
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = socket.into_split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        addr
    }

    async fn round_trip(stream: &mut TcpStream, byte: u8) -> io::Result<u8> {
        stream.write_all(&[byte]).await?;
        let mut answer = [0u8; 1];
        stream.read_exact(&mut answer).await?;
        Ok(answer[0])
    }

    #[tokio::test]
    async fn held_link_moves_nothing_until_it_heals() {
        let link = LinkProxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(link.addr()).await.unwrap();
        assert_eq!(round_trip(&mut stream, 1).await.unwrap(), 1);

        link.hold();
        let held = tokio::time::timeout(Duration::from_millis(200), round_trip(&mut stream, 2));
        assert!(held.await.is_err(), "a held link answered");

        link.open();
        let mut answer = [0u8; 1];
        stream.read_exact(&mut answer).await.unwrap();
        assert_eq!(answer[0], 2, "the held byte flows once the link heals");
    }

    #[tokio::test]
    async fn one_way_hold_delivers_requests_but_not_answers() {
        let link = LinkProxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(link.addr()).await.unwrap();
        assert_eq!(round_trip(&mut stream, 1).await.unwrap(), 1);

        link.set(Direction::FromTarget, LinkMode::Hold);
        let held = tokio::time::timeout(Duration::from_millis(200), round_trip(&mut stream, 7));
        assert!(held.await.is_err());
        link.set(Direction::FromTarget, LinkMode::Open);
        let mut answer = [0u8; 1];
        stream.read_exact(&mut answer).await.unwrap();
        assert_eq!(answer[0], 7);
    }

    #[tokio::test]
    async fn reset_closes_open_connections_and_new_ones_still_work() {
        let link = LinkProxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(link.addr()).await.unwrap();
        assert_eq!(round_trip(&mut stream, 1).await.unwrap(), 1);
        link.reset_all();
        let mut answer = [0u8; 1];
        let closed = stream.read(&mut answer).await;
        assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");

        let mut again = TcpStream::connect(link.addr()).await.unwrap();
        assert_eq!(round_trip(&mut again, 3).await.unwrap(), 3);
        assert_eq!(link.connections(), 2);
    }

    #[tokio::test]
    async fn delay_still_delivers() {
        let link = LinkProxy::start(echo_server().await).await.unwrap();
        link.set_both(LinkMode::Delay(Duration::from_millis(20)));
        let mut stream = TcpStream::connect(link.addr()).await.unwrap();
        assert_eq!(round_trip(&mut stream, 9).await.unwrap(), 9);
    }
}
