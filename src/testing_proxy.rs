//! A TCP proxy for tests that need the network to fail on cue: put it between a client and a
//! [`TestServer`](crate::testing::TestServer) and cut connections now, cut each connection after
//! it forwarded a number of request frames (so the server received them but the client never
//! sees their responses: outcome unknown), or refuse new connections for a while.
//!
//! Why a proxy rather than stopping the server: a restart changes the server's state and takes
//! time, while the failures a client must survive are in the network between the two, and the
//! interesting one (a request that reached the server whose answer was lost) can only be made
//! reliably by something that reads the protocol's frames.
//!
//! ```
//! use fencelog::client::Client;
//! use fencelog::testing::TestServer;
//! use fencelog::testing_proxy::Proxy;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = TestServer::start().await?;
//! let proxy = Proxy::start(server.addr()).await?;
//! let client = Client::connect(proxy.addr()).await?;
//! client.api_versions().await?;
//! proxy.cut_all_and_wait().await;
//! // The dead connection is replaced, and ApiVersions (safe to repeat) is retried.
//! client.api_versions().await?;
//! assert_eq!(proxy.connections(), 2);
//! # Ok(()) }
//! ```
//!
//! Limits: request frames are parsed by their 4-byte length prefix and refused (the connection
//! cut) above [`MAX_PROXIED_FRAME_BYTES`]; responses are forwarded as raw bytes.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Largest request frame body the proxy forwards (the protocol's default frame limit).
pub const MAX_PROXIED_FRAME_BYTES: usize = crate::protocol::DEFAULT_MAX_FRAME_BYTES;

/// How long a connection cut after its requests keeps draining the server's answers (so the
/// server is not reset while it still reads the last request).
pub const CUT_DRAIN_GRACE: Duration = Duration::from_secs(1);

/// A proxy listening on its own `127.0.0.1` port and forwarding every connection to a target.
/// Dropping it stops accepting and cuts every connection.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    target: SocketAddr,
    /// Bumped by `cut_all`; every connection watches it.
    cut_all: watch::Sender<u64>,
    /// `Some(n)`: cut each connection after it forwards `n` request frames (counted from the
    /// later of its opening and the last change of this value).
    cut_after: watch::Sender<Option<usize>>,
    /// New connections are refused (the port is closed) until then.
    refuse_until: Mutex<Option<Instant>>,
    refusing: Notify,
    connections: AtomicUsize,
    /// Connections whose forwarding has not ended yet.
    open: AtomicUsize,
    requests: AtomicUsize,
}

impl Proxy {
    /// Starts a proxy to `target` on a free local port; connect clients to [`Proxy::addr`].
    pub async fn start(target: SocketAddr) -> io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            target,
            cut_all: watch::Sender::new(0),
            cut_after: watch::Sender::new(None),
            refuse_until: Mutex::new(None),
            refusing: Notify::new(),
            connections: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            requests: AtomicUsize::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, addr, Arc::clone(&shared)));
        Ok(Proxy {
            addr,
            shared,
            accept,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts every open connection now (both sides closed; requests in flight get no answer).
    pub fn cut_all(&self) {
        self.shared
            .cut_all
            .send_modify(|generation| *generation += 1);
    }

    /// [`cut_all`](Self::cut_all), then waits (up to 5 s) until every cut connection's sockets
    /// are closed, so that nothing a test sends afterwards can still go through one of them. A
    /// connection the proxy has not accepted yet (still in the listen backlog) is not cut: make
    /// a request through a connection first to be sure it is open.
    pub async fn cut_all_and_wait(&self) {
        self.cut_all();
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.shared.open.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// From now on, cuts each connection (open or new) once it has forwarded `requests` more
    /// request frames to the server: the last one reaches the server, but neither its response
    /// nor any response still due reaches the client.
    pub fn cut_after_requests(&self, requests: usize) {
        self.shared.cut_after.send_replace(Some(requests.max(1)));
    }

    /// Stops [`cut_after_requests`](Self::cut_after_requests).
    pub fn stop_cutting_after_requests(&self) {
        self.shared.cut_after.send_replace(None);
    }

    /// Closes the listening port for `duration`: connection attempts are refused, as by a
    /// server that is down. Open connections are not touched (see [`cut_all`](Self::cut_all)).
    pub fn refuse_connections_for(&self, duration: Duration) {
        *self
            .shared
            .refuse_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now() + duration);
        self.shared.refusing.notify_one();
    }

    /// How many connections the proxy has accepted.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Acquire)
    }

    /// How many request frames it has forwarded to the server.
    pub fn requests_forwarded(&self) -> usize {
        self.shared.requests.load(Ordering::Acquire)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut_all();
    }
}

impl Shared {
    fn refusal_ends(&self) -> Option<Instant> {
        let mut until = self
            .refuse_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match *until {
            Some(end) if end > Instant::now() => Some(end),
            _ => {
                *until = None;
                None
            }
        }
    }
}

/// Accepts connections, closing the port while refusing.
async fn accept_loop(mut listener: TcpListener, addr: SocketAddr, shared: Arc<Shared>) {
    loop {
        if let Some(end) = shared.refusal_ends() {
            drop(listener);
            tokio::time::sleep_until(end).await;
            listener = match rebind(addr).await {
                Ok(listener) => listener,
                Err(error) => {
                    tracing::error!(%addr, %error, "proxy cannot listen again");
                    return;
                }
            };
            continue;
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shared.refusing.notified() => continue,
        };
        match accepted {
            Ok((client, _)) => {
                shared.connections.fetch_add(1, Ordering::AcqRel);
                // Counted and subscribed here, not in the task: a cut signalled before the task
                // first runs still applies to it, and `cut_all_and_wait` waits for it.
                shared.open.fetch_add(1, Ordering::AcqRel);
                let cut_all = shared.cut_all.subscribe();
                tokio::spawn(proxy_connection(client, Arc::clone(&shared), cut_all));
            }
            Err(error) => tracing::warn!(%error, "proxy accept failed"),
        }
    }
}

/// Binds `addr` again after a refusal; the port may linger briefly.
async fn rebind(addr: SocketAddr) -> io::Result<TcpListener> {
    let mut attempts = 0;
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(error) if attempts >= 50 => return Err(error),
            Err(_) => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Forwards one connection both ways until either side closes or it is cut.
async fn proxy_connection(client: TcpStream, shared: Arc<Shared>, cut_all: watch::Receiver<u64>) {
    forward_connection(client, &shared, cut_all).await;
    shared.open.fetch_sub(1, Ordering::AcqRel);
}

async fn forward_connection(
    client: TcpStream,
    shared: &Arc<Shared>,
    mut cut_all: watch::Receiver<u64>,
) {
    let server = match TcpStream::connect(shared.target).await {
        Ok(server) => server,
        Err(error) => {
            tracing::warn!(%error, "proxy cannot reach its target");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let client_cut = Arc::new(ClientCut::default());
    let mut upstream = tokio::spawn(upstream(
        client_read,
        server_write,
        Arc::clone(shared),
        Arc::clone(&client_cut),
    ));
    let mut downstream = tokio::spawn(downstream(server_read, client_write, client_cut));
    // A `JoinHandle` that has completed must not be polled again (tokio panics), so each half
    // is awaited after the abort only if the `select!` (or the drain) has not already seen it end.
    let (upstream_ended, downstream_ended) = tokio::select! {
        _ = cut_all.changed() => (false, false),
        _ = &mut upstream => {
            // The client closed, or the connection was cut after its requests: let the server
            // finish reading them before its socket goes.
            let drained = tokio::time::timeout(CUT_DRAIN_GRACE, &mut downstream).await;
            (true, drained.is_ok())
        }
        _ = &mut downstream => (false, true),
    };
    // Both halves' sockets are closed once their tasks are gone.
    for (task, ended) in [(upstream, upstream_ended), (downstream, downstream_ended)] {
        if !ended {
            task.abort();
            // A cancelled task's `JoinError` is the expected outcome of the abort.
            let _cancelled = task.await;
        }
    }
}

/// Tells the downstream half to stop forwarding and close the client's socket.
#[derive(Default)]
struct ClientCut {
    cut: AtomicBool,
    notify: Notify,
}

/// Client → server, frame by frame, counting them against `cut_after`.
async fn upstream(
    mut client: OwnedReadHalf,
    mut server: OwnedWriteHalf,
    shared: Arc<Shared>,
    client_cut: Arc<ClientCut>,
) -> io::Result<()> {
    let mut policy = shared.cut_after.subscribe();
    policy.mark_unchanged();
    let mut forwarded = 0usize;
    loop {
        let mut prefix = [0u8; 4];
        client.read_exact(&mut prefix).await?;
        let length = u32::from_be_bytes(prefix) as usize;
        if length > MAX_PROXIED_FRAME_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("request frame of {length} bytes is beyond the proxy's limit"),
            ));
        }
        let mut body = vec![0u8; length];
        client.read_exact(&mut body).await?;
        if policy.has_changed().unwrap_or(false) {
            policy.mark_unchanged();
            forwarded = 0;
        }
        forwarded += 1;
        let last = policy.borrow().is_some_and(|limit| forwarded >= limit);
        if last {
            // Before the frame goes: no answer the server gives from now on reaches the client.
            client_cut.cut.store(true, Ordering::Release);
            client_cut.notify.notify_one();
        }
        server.write_all(&prefix).await?;
        server.write_all(&body).await?;
        server.flush().await?;
        shared.requests.fetch_add(1, Ordering::AcqRel);
        if last {
            return Ok(());
        }
    }
}

/// Server → client, as raw bytes, until the client is cut (then the server's bytes are read and
/// dropped, so it can finish).
async fn downstream(
    mut server: OwnedReadHalf,
    client: OwnedWriteHalf,
    client_cut: Arc<ClientCut>,
) -> io::Result<()> {
    let mut client = Some(client);
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = tokio::select! {
            read = server.read(&mut buffer) => read?,
            () = client_cut.notify.notified(), if client.is_some() => {
                client = None;
                continue;
            }
        };
        if read == 0 {
            return Ok(());
        }
        if client_cut.cut.load(Ordering::Acquire) {
            client = None;
        }
        if let Some(client) = client.as_mut() {
            client.write_all(&buffer[..read]).await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves: a connection cut after its requests, whose server then closes within the drain
    /// grace, ends cleanly (the proxy's forwarding task does not panic by awaiting a finished
    /// half again) and is no longer counted as open.
    #[tokio::test]
    async fn connection_cut_after_its_requests_ends_and_is_no_longer_open() {
        // A target that reads until the proxy closes its side, then closes its own.
        let target = TcpListener::bind("127.0.0.1:0").await.expect("bind target");
        let target_addr = target.local_addr().expect("target address");
        let target_task = tokio::spawn(async move {
            let (mut socket, _) = target.accept().await.expect("accept");
            let mut received = Vec::new();
            socket.read_to_end(&mut received).await.expect("read");
            received
        });
        let proxy = Proxy::start(target_addr).await.expect("start proxy");
        proxy.cut_after_requests(1);
        let mut client = TcpStream::connect(proxy.addr()).await.expect("connect");
        client
            .write_all(&[0, 0, 0, 2, 7, 7])
            .await
            .expect("write a frame");
        let received = tokio::time::timeout(Duration::from_secs(5), target_task)
            .await
            .expect("the target sees the proxy close")
            .expect("target task");
        assert_eq!(received, [0, 0, 0, 2, 7, 7], "the frame was forwarded");
        let deadline = Instant::now() + Duration::from_secs(5);
        while proxy.shared.open.load(Ordering::Acquire) > 0 {
            assert!(
                Instant::now() < deadline,
                "the cut connection is still counted as open"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(proxy.requests_forwarded(), 1);
    }
}
