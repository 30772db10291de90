//! One multiplexed TCP connection: a writer task that assigns correlation ids and sends request
//! frames, a reader task that routes response frames back to their callers.
//!
//! Why two tasks and not one `select!` loop: the server stops reading a connection that has too
//! many requests in flight and only resumes once its responses have been written. A single task
//! blocked in a socket write would stop reading those responses, and both sides would wait on
//! each other until the server's write timeout cut the connection. With a dedicated reader the
//! client always drains responses, whatever the writer is doing.
//!
//! The read half gets a `FramedRead` with [`FrameCodec`]. The write half gets a
//! [`RequestWriter`]: each frame is checked against the frame limit and encoded on its own
//! before anything is written, so a frame it refuses (too large, a string too long) fails alone
//! and the connection stays usable; the batch of a `Produce` goes to the socket as it is, in
//! one vectored write with the encoded headers around it, rather than being copied into a
//! write buffer first.
//!
//! Over TLS ([`ClientConfig::tls`]) the handshake follows the TCP connect, checked against
//! the host of the address dialled (`super::tls`), and the TLS stream is split with
//! `tokio::io::split`; over plain TCP the socket's owned halves are used as they are.
//!
//! A connection that failed stays failed: [`Connection::is_failed`] tells the client's
//! `Endpoint` (in `reconnect`) to open a new one for the next request. A third task watches the
//! oldest unanswered request and fails the connection when its server stays silent past that
//! request's patience (a frozen server: `super::liveness`).
//!
//! A connection is trusted with a request its server may hold (a produce, a lease grant, a
//! topic creation: unwatched, and most of them not safe to send twice) only once its server
//! has answered something on it: until then [`Connection::enqueue`] first sends an
//! `ApiVersions` and waits for its answer, which the watch bounds by the attempt timeout
//! (`liveness::needs_an_answered_connection`). A frozen server, whose kernel accepts the TCP
//! connection, so never sees such a request: it stays unsent and goes to the next address.
//!
//! Every request in flight holds a semaphore permit from the moment it is queued until its
//! response (or the connection's failure) arrives, so at most `max_in_flight` requests are ever
//! outstanding on the wire, including those whose caller gave up waiting (a timed-out request
//! still occupies the server until it answers, and the server answers in order).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;

use super::{liveness, tls, ClientConfig, ClientError};
use crate::protocol::{
    ApiKey, Chunks, FrameCodec, ProtocolError, Request, RequestFrame, Response, ResponseFrame,
    FRAME_LENGTH_BYTES,
};

type Reply = oneshot::Sender<Result<Response, ClientError>>;

/// A request on its way to the writer task.
struct Outgoing {
    request: Request,
    reply: Reply,
    permit: OwnedSemaphorePermit,
    /// How long the server may take once it is the oldest unanswered (`liveness`).
    patience: Option<Duration>,
}

/// A request that was handed to the socket and awaits its response.
struct Pending {
    correlation_id: u32,
    api_key: ApiKey,
    /// The response is in the version of the request.
    api_version: u16,
    reply: Reply,
    /// Released when the response arrives or the connection fails.
    _permit: OwnedSemaphorePermit,
    /// How long the server may take to answer it once it is the oldest unanswered; `None`:
    /// unwatched.
    patience: Option<Duration>,
}

/// State shared by the handle and both tasks.
#[derive(Default)]
struct State {
    /// In send order; responses normally arrive in the same order.
    pending: VecDeque<Pending>,
    /// Why the connection is unusable, once it is.
    failed: Option<ClientError>,
    /// Since when the front of `pending` has been the oldest unanswered request.
    head_since: Option<Instant>,
    /// When the liveness watch looks at the queue again by itself (the deadline it sleeps
    /// until); `None` while it waits for a change with no deadline, or has not looked yet.
    watch_wakes_at: Option<Instant>,
}

impl State {
    /// Registers a request handed to the socket; true if the liveness watch must be woken
    /// for it (see [`watch_must_wake`](Self::watch_must_wake)).
    fn register(&mut self, pending: Pending) -> bool {
        let first = self.pending.is_empty();
        self.pending.push_back(pending);
        if first {
            self.head_since = Some(Instant::now());
        }
        first && self.watch_must_wake()
    }

    /// When the oldest unanswered request is overdue, with its patience; `None` when nothing
    /// is pending or the oldest is not watched.
    fn oldest_due(&self) -> Option<(Instant, Duration)> {
        let patience = self.pending.front()?.patience?;
        Some((self.head_since? + patience, patience))
    }

    /// Whether the oldest request is due before the watch would look again by itself. Only
    /// then is the watch woken: a request with no patience (a produce) or one due later than
    /// the watch's deadline (the next fetch of a fetch loop) waits for that deadline, where
    /// the watch finds it. Waking the watch on every request put a third task on every round
    /// trip, and with it the runtime's wake-up of a second worker to run it.
    fn watch_must_wake(&self) -> bool {
        match (self.oldest_due(), self.watch_wakes_at) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some((due, _)), Some(wakes_at)) => due < wakes_at,
        }
    }
}

/// State shared by the handle and the connection's tasks.
#[derive(Default)]
pub(super) struct Shared {
    state: Mutex<State>,
    /// Wakes the liveness watch when the oldest unanswered request changes or the connection
    /// fails (`notify_one`: a change while the watch is busy is kept for its next wait).
    changed: Notify,
    /// Whether the server has answered a request on this connection (any answer, an error
    /// response included): proof that a process is behind it, not only a kernel.
    answered: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The critical sections only move values in and out of the queue; a panic in one
        // cannot leave it inconsistent, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the connection failed (the first reason wins) and fails every pending request.
    pub(super) fn fail(&self, reason: ClientError) {
        let pending = {
            let mut state = self.lock();
            if state.failed.is_none() {
                tracing::debug!(%reason, "client connection failed");
                state.failed = Some(reason);
            }
            std::mem::take(&mut state.pending)
        };
        self.changed.notify_one();
        let reason = self.failure().unwrap_or(ClientError::Disconnected);
        for request in pending {
            let _ = request.reply.send(Err(reason.clone()));
        }
    }

    /// Whether the connection failed.
    pub(super) fn is_failed(&self) -> bool {
        self.lock().failed.is_some()
    }

    /// Whether the server has answered anything on this connection.
    fn was_answered(&self) -> bool {
        self.answered.load(Ordering::Acquire)
    }

    /// When the oldest unanswered request is overdue, with its patience; `None` when nothing
    /// is pending or the oldest is not watched.
    pub(super) fn oldest_due(&self) -> Option<(Instant, Duration)> {
        self.lock().oldest_due()
    }

    /// [`oldest_due`](Self::oldest_due), for the watch about to sleep until it: noted as the
    /// time the watch looks again, so that changes which do not need it sooner leave it be.
    pub(super) fn plan_watch(&self) -> Option<(Instant, Duration)> {
        let mut state = self.lock();
        let due = state.oldest_due();
        state.watch_wakes_at = due.map(|(due, _)| due);
        due
    }

    /// Resolves when the oldest unanswered request may have changed, or the connection failed.
    pub(super) async fn head_changed(&self) {
        self.changed.notified().await;
    }

    fn failure(&self) -> Option<ClientError> {
        self.lock().failed.clone()
    }

    /// Removes the pending request `correlation_id`. Responses come in request order, so it is
    /// normally the oldest; anything else is a server bug worth a warning, but the id still
    /// identifies the request unambiguously.
    fn take(&self, correlation_id: u32) -> Option<Pending> {
        let mut state = self.lock();
        if state.pending.front().map(|p| p.correlation_id) == Some(correlation_id) {
            // The next request is the oldest now: its clock starts.
            state.head_since = Some(Instant::now());
            let taken = state.pending.pop_front();
            if state.watch_must_wake() {
                self.changed.notify_one();
            }
            return taken;
        }
        let position = state
            .pending
            .iter()
            .position(|p| p.correlation_id == correlation_id)?;
        tracing::warn!(
            correlation_id,
            "response arrived out of request order (protocol violation by the server)"
        );
        state.pending.remove(position)
    }
}

/// The connection as seen by `Client`: queue a request, await its response.
pub(crate) struct Connection {
    requests: mpsc::Sender<Outgoing>,
    permits: Arc<Semaphore>,
    shared: Arc<Shared>,
    peer: SocketAddr,
    tasks: [AbortHandle; 3],
    /// How long the server may take to answer each request (`liveness`).
    patience: liveness::Patience,
    /// Held by the one caller proving the connection (its first exchange); the others wait for
    /// its outcome rather than each sending a probe.
    proving: tokio::sync::Mutex<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // The last handle is gone, so nobody awaits a response any more.
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Connection {
    /// Connects to the first address of `addrs` that accepts, within the connect timeout each.
    /// `host` is the address as given (`host:port`): over TLS, its host is the name the
    /// server's certificate is checked against.
    pub(crate) async fn open(
        addrs: Vec<SocketAddr>,
        host: &str,
        config: &ClientConfig,
    ) -> Result<Connection, ClientError> {
        let mut last_error = None;
        for addr in addrs {
            match tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(socket)) => match Self::secure(socket, addr, host, config).await {
                    Ok(connection) => return Ok(connection),
                    Err(error) => last_error = Some(error),
                },
                Ok(Err(source)) => {
                    last_error = Some(ClientError::Connect {
                        addr,
                        source: Arc::new(source),
                    })
                }
                Err(_) => {
                    last_error = Some(ClientError::Connect {
                        addr,
                        source: Arc::new(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("no answer within {:?}", config.connect_timeout),
                        )),
                    })
                }
            }
        }
        Err(last_error.unwrap_or_else(|| ClientError::Resolve {
            source: Arc::new(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the address resolved to nothing",
            )),
        }))
    }

    /// Starts the connection on a connected socket, after the TLS handshake when the config
    /// asks for TLS.
    async fn secure(
        socket: TcpStream,
        peer: SocketAddr,
        host: &str,
        config: &ClientConfig,
    ) -> Result<Connection, ClientError> {
        let _ = socket.set_nodelay(true);
        let Some(tls) = &config.tls else {
            let (read_half, write_half) = socket.into_split();
            return Ok(Self::start(read_half, write_half, peer, config));
        };
        let server_name = tls.server_name_for(host)?;
        let stream = tls
            .handshake(socket, peer, server_name, config.connect_timeout)
            .await?;
        let (read_half, write_half) = tokio::io::split(stream);
        Ok(Self::start(read_half, write_half, peer, config))
    }

    fn start<R, W>(
        read_half: R,
        write_half: W,
        peer: SocketAddr,
        config: &ClientConfig,
    ) -> Connection
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let max_in_flight = config.max_in_flight.max(1);
        let codec = FrameCodec::new(config.max_frame_bytes);
        let sink = RequestWriter::new(write_half, config.max_frame_bytes);
        let stream = FramedRead::new(read_half, codec);
        let (requests, queue) = mpsc::channel(max_in_flight);
        let shared = Arc::new(Shared::default());
        let writer = tokio::spawn(write_loop(sink, queue, Arc::clone(&shared), peer));
        let reader = tokio::spawn(read_loop(stream, Arc::clone(&shared), peer));
        let watch = tokio::spawn(liveness::watch(Arc::clone(&shared), peer));
        Connection {
            requests,
            permits: Arc::new(Semaphore::new(max_in_flight)),
            shared,
            peer,
            tasks: [
                writer.abort_handle(),
                reader.abort_handle(),
                watch.abort_handle(),
            ],
            patience: liveness::Patience::new(config),
            proving: tokio::sync::Mutex::new(()),
        }
    }

    /// The server's address.
    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Whether the connection failed (closed, I/O error, connection-level server error): no
    /// request can succeed on it any more.
    pub(crate) fn is_failed(&self) -> bool {
        self.shared.is_failed()
    }

    /// Queues `request` for the writer (waiting for an in-flight slot) and returns where its
    /// response will arrive. Requests are written in the order their `enqueue` calls complete,
    /// so a caller that awaits one `enqueue` before starting the next controls the order of its
    /// requests on the wire. On failure the request was certainly not sent, and comes back.
    ///
    /// A request the server may hold (`liveness::needs_an_answered_connection`) waits until the
    /// server has answered something on this connection, sending an `ApiVersions` first if it
    /// has not: if that goes unanswered (a frozen server) or fails, the
    /// request comes back unsent. Cancel-safe: dropped before it completes, it sent nothing.
    pub(crate) async fn enqueue(&self, request: Request) -> Result<ResponseSlot, NotSent> {
        if liveness::needs_an_answered_connection(request.api_key()) {
            if let Err(error) = self.prove().await {
                let retriable = super::retry::is_transport_failure(&error);
                return Err(NotSent {
                    error,
                    request,
                    retriable,
                });
            }
        }
        self.enqueue_now(request).await
    }

    /// Makes sure the server has answered something on this connection: returns at once if it
    /// has, else sends an `ApiVersions` (one caller at a time) and waits for its answer. Any
    /// answer proves the server, an error response included; no answer within the attempt
    /// timeout fails the connection (the liveness watch), and that failure is returned.
    async fn prove(&self) -> Result<(), ClientError> {
        if self.shared.was_answered() {
            return Ok(());
        }
        let _proving = self.proving.lock().await;
        if self.shared.was_answered() {
            return Ok(());
        }
        let slot = self
            .enqueue_now(Request::ApiVersions)
            .await
            .map_err(|not_sent| not_sent.error)?;
        match self.response(slot).await {
            Ok(_) => Ok(()),
            Err(_) if self.shared.was_answered() => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// [`enqueue`](Self::enqueue) without waiting for the connection's first answer.
    async fn enqueue_now(&self, request: Request) -> Result<ResponseSlot, NotSent> {
        if let Some(error) = self.shared.failure() {
            return Err(NotSent {
                error,
                request,
                retriable: true,
            });
        }
        let Ok(permit) = Arc::clone(&self.permits).acquire_owned().await else {
            let error = self.closed();
            return Err(NotSent {
                error,
                request,
                retriable: true,
            });
        };
        let (reply, response) = oneshot::channel();
        let patience = self.patience.of(&request);
        let outgoing = Outgoing {
            request,
            reply,
            permit,
            patience,
        };
        if let Err(mpsc::error::SendError(outgoing)) = self.requests.send(outgoing).await {
            let error = self.closed();
            return Err(NotSent {
                error,
                request: outgoing.request,
                retriable: true,
            });
        }
        Ok(ResponseSlot(response))
    }

    /// Waits for the response of an enqueued request.
    pub(crate) async fn response(&self, slot: ResponseSlot) -> Result<Response, ClientError> {
        slot.0.await.map_err(|_| self.closed())?
    }

    fn closed(&self) -> ClientError {
        self.shared.failure().unwrap_or(ClientError::Disconnected)
    }
}

/// A request the connection refused before sending it (the connection had failed, or its
/// server did not answer its first exchange): safe to send again on another connection,
/// whatever the API.
pub(crate) struct NotSent {
    /// Why the connection could not take it.
    pub(crate) error: ClientError,
    /// The request, unsent.
    pub(crate) request: Request,
    /// Whether another connection may take it. False when the connection's first exchange
    /// was answered with something a new connection would get again (the port speaks TLS or
    /// another protocol): that error is the caller's answer.
    pub(crate) retriable: bool,
}

/// Where the response of an enqueued request arrives.
pub(crate) struct ResponseSlot(oneshot::Receiver<Result<Response, ClientError>>);

/// Encodes request frames and writes them with vectored writes.
struct RequestWriter<W> {
    socket: W,
    max_frame_bytes: usize,
    /// Where headers and small requests are encoded; split off into `queue` after each frame.
    scratch: BytesMut,
    encoded: Vec<Bytes>,
    queue: Chunks,
}

impl<W: AsyncWrite + Unpin> RequestWriter<W> {
    fn new(socket: W, max_frame_bytes: usize) -> Self {
        Self {
            socket,
            max_frame_bytes,
            scratch: BytesMut::with_capacity(4096),
            encoded: Vec::with_capacity(2),
            queue: Chunks::default(),
        }
    }

    /// Queues `frame`, or refuses it (queueing nothing) if the peer, configured alike, would
    /// refuse a frame that large or a field does not fit its wire type.
    fn push(&mut self, frame: &RequestFrame) -> Result<(), ProtocolError> {
        let declared = frame.encoded_len() - FRAME_LENGTH_BYTES;
        if declared > self.max_frame_bytes {
            return Err(ProtocolError::FrameTooLarge {
                declared,
                max: self.max_frame_bytes,
            });
        }
        frame.encode_vectored(&mut self.scratch, &mut self.encoded)?;
        for part in self.encoded.drain(..) {
            self.queue.push(part);
        }
        Ok(())
    }

    /// Writes everything queued.
    async fn flush(&mut self) -> std::io::Result<()> {
        self.socket.write_all_buf(&mut self.queue).await?;
        self.socket.flush().await
    }

    async fn shutdown(&mut self) -> std::io::Result<()> {
        self.socket.shutdown().await
    }
}

/// Takes queued requests, gives each a correlation id, registers it as pending, and writes it.
/// Frames queued together are written with one vectored write.
async fn write_loop<W: AsyncWrite + Unpin>(
    mut sink: RequestWriter<W>,
    mut queue: mpsc::Receiver<Outgoing>,
    shared: Arc<Shared>,
    peer: SocketAddr,
) {
    let mut ids = CorrelationIds::default();
    while let Some(first) = queue.recv().await {
        let mut next = Some(first);
        while let Some(outgoing) = next.take() {
            let api_key = outgoing.request.api_key();
            let api_version = outgoing.request.api_version();
            let correlation_id = {
                let mut state = shared.lock();
                if let Some(failure) = &state.failed {
                    let _ = outgoing.reply.send(Err(failure.clone()));
                    next = queue.try_recv().ok();
                    continue;
                }
                // Registered before the frame is written, so the response cannot overtake it.
                let correlation_id = ids.next(&state.pending);
                let wake_watch = state.register(Pending {
                    correlation_id,
                    api_key,
                    api_version,
                    reply: outgoing.reply,
                    _permit: outgoing.permit,
                    patience: outgoing.patience,
                });
                if wake_watch {
                    shared.changed.notify_one();
                }
                correlation_id
            };
            let frame = RequestFrame::new(correlation_id, outgoing.request);
            // The writer refused this one frame (too large, a string too long) and queued
            // nothing, so the stream is intact: fail only this request.
            if let Err(error) = sink.push(&frame) {
                if let Some(pending) = shared.take(correlation_id) {
                    let _ = pending.reply.send(Err(ClientError::Protocol(error)));
                }
            }
            next = queue.try_recv().ok();
        }
        if let Err(error) = sink.flush().await {
            shared.fail(tls::transport_error(Arc::new(error), peer));
            return;
        }
    }
    // Every handle was dropped: close our half so the server sees a clean end of stream.
    let _ = sink.shutdown().await;
}

/// Reads response frames and hands each to the request it answers.
async fn read_loop<R: AsyncRead + Unpin>(
    mut stream: FramedRead<R, FrameCodec>,
    shared: Arc<Shared>,
    peer: SocketAddr,
) {
    let reason = loop {
        let frame = match stream.next().await {
            None => break ClientError::Disconnected,
            Some(Err(ProtocolError::Io(error))) => break tls::transport_error(error, peer),
            Some(Err(ProtocolError::FrameTooLarge { declared, .. }))
                if tls::is_tls_record_start(declared) =>
            {
                break ClientError::Tls {
                    addr: peer,
                    reason: "the server speaks TLS on this port: connect with TLS (--tls-ca FILE, or --tls for the system's CAs)".to_owned(),
                };
            }
            Some(Err(error)) => {
                break ClientError::Protocol(crate::protocol::wrong_port::explain(error))
            }
            Some(Ok(frame)) => frame,
        };
        let Some(correlation_id) = ResponseFrame::peek_correlation_id(&frame) else {
            break ClientError::Protocol(ProtocolError::Malformed(format!(
                "response frame of {} bytes is shorter than its header",
                frame.len()
            )));
        };
        if correlation_id == 0 {
            // A connection-level error (TOO_MANY_CONNECTIONS, FRAME_TOO_LARGE, ...): the server
            // closes the connection after it, and it concerns every request in flight. The
            // error body has the same layout for every API, so any key decodes it.
            break match ResponseFrame::decode(ApiKey::ApiVersions, frame) {
                Ok(ResponseFrame {
                    result: Err(error), ..
                }) => ClientError::from_error_response(error),
                Ok(_) => ClientError::Protocol(ProtocolError::Malformed(
                    "success response with correlation id 0".into(),
                )),
                Err(error) => ClientError::Protocol(error),
            };
        }
        let Some(pending) = shared.take(correlation_id) else {
            tracing::warn!(
                correlation_id,
                "response for a correlation id with no request in flight; ignored"
            );
            continue;
        };
        shared.answered.store(true, Ordering::Release);
        let result =
            match ResponseFrame::decode_version(pending.api_key, pending.api_version, frame) {
                Ok(response) => response.result.map_err(ClientError::from_error_response),
                // A malformed body concerns this response only; framing is intact.
                Err(error) => Err(ClientError::Protocol(error)),
            };
        let _ = pending.reply.send(result);
    };
    shared.fail(reason);
}

/// Correlation ids: increasing, never 0, never one still in flight.
#[derive(Default)]
struct CorrelationIds {
    last: u32,
    wrapped: bool,
}

impl CorrelationIds {
    fn next(&mut self, in_flight: &VecDeque<Pending>) -> u32 {
        loop {
            self.last = self.last.wrapping_add(1);
            if self.last == 0 {
                // 0 is reserved for connection-level errors.
                self.wrapped = true;
                continue;
            }
            // Before the first wrap every id is fresh; after it, skip ids still in flight.
            if !self.wrapped || !in_flight.iter().any(|p| p.correlation_id == self.last) {
                return self.last;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(correlation_id: u32, permits: &Arc<Semaphore>) -> Pending {
        Pending {
            correlation_id,
            api_key: ApiKey::ApiVersions,
            api_version: 0,
            reply: oneshot::channel().0,
            _permit: Arc::clone(permits).try_acquire_owned().unwrap(),
            patience: None,
        }
    }

    #[test]
    fn correlation_ids_skip_zero_and_ids_in_flight_after_wrapping() {
        let permits = Arc::new(Semaphore::new(8));
        let mut ids = CorrelationIds::default();
        assert_eq!(ids.next(&VecDeque::new()), 1);
        ids.last = u32::MAX - 1;
        let in_flight: VecDeque<Pending> = [u32::MAX - 1, 1, 2]
            .into_iter()
            .map(|id| pending(id, &permits))
            .collect();
        assert_eq!(ids.next(&in_flight), u32::MAX);
        // Wraps past 0 (reserved) and past 1 and 2 (still in flight).
        assert_eq!(ids.next(&in_flight), 3);
        assert_eq!(ids.next(&in_flight), 4);
    }

    // Proves: a request the server may hold is not written on a connection whose server has
    // never answered: an ApiVersions goes first, and when that stays unanswered past the
    // attempt timeout (a frozen server) the request comes back unsent, to be sent elsewhere;
    // the only frame the server was ever sent is the ApiVersions.
    #[tokio::test(start_paused = true)]
    async fn a_request_the_server_may_hold_waits_for_the_connections_first_answer() {
        use tokio::io::AsyncReadExt;
        let (client_side, mut server_side) = tokio::io::duplex(1 << 16);
        let (read_half, write_half) = tokio::io::split(client_side);
        let config = ClientConfig::default();
        let peer = SocketAddr::from(([127, 0, 0, 1], 1));
        let connection = Connection::start(read_half, write_half, peer, &config);
        let started = Instant::now();
        let lease = Request::AcquireLease {
            topic: "t".into(),
            partition: 0,
            holder: "h".into(),
            ttl_ms: 1000,
        };
        let Err(not_sent) = connection.enqueue(lease).await else {
            panic!("written on a connection whose server never answered");
        };
        assert!(not_sent.retriable, "{}", not_sent.error);
        assert_eq!(not_sent.request.api_key(), ApiKey::AcquireLease);
        assert!(started.elapsed() >= config.attempt_timeout);
        assert!(connection.is_failed());
        drop(connection);
        let mut written = Vec::new();
        server_side.read_to_end(&mut written).await.unwrap();
        let length = u32::from_be_bytes(written[..4].try_into().unwrap()) as usize;
        assert_eq!(written.len(), 4 + length, "one frame only");
        let frame = RequestFrame::decode(Bytes::copy_from_slice(&written[4..])).unwrap();
        assert_eq!(frame.request, Request::ApiVersions);
    }

    fn watched(correlation_id: u32, permits: &Arc<Semaphore>, patience: Duration) -> Pending {
        Pending {
            patience: Some(patience),
            ..pending(correlation_id, permits)
        }
    }

    // Proves: the liveness watch is woken only when the oldest request is due before the watch
    // would look again by itself; a request without patience, or due after the watch's
    // deadline, leaves it asleep (it finds them at that deadline).
    #[tokio::test(start_paused = true)]
    async fn the_watch_is_woken_only_for_an_oldest_request_due_before_its_deadline() {
        use futures::FutureExt;
        let permits = Arc::new(Semaphore::new(8));
        let shared = Shared::default();
        let woken = |shared: &Shared| shared.changed.notified().now_or_never().is_some();
        // A produce (no patience) as the oldest: nothing for the watch, before or after.
        assert!(!shared.lock().register(pending(1, &permits)));
        assert_eq!(shared.plan_watch(), None);
        assert!(shared.take(1).is_some());
        assert!(!woken(&shared));
        // A fetch as the oldest while the watch waits with no deadline: woken.
        assert!(shared
            .lock()
            .register(watched(2, &permits, Duration::from_secs(10))));
        let (deadline, _) = shared.plan_watch().expect("the fetch is watched");
        // Answered, nothing left: the watch finds that at its deadline.
        assert!(shared.take(2).is_some());
        assert!(!woken(&shared));
        // The next fetch is due after the watch's deadline: left asleep.
        tokio::time::advance(Duration::from_millis(5)).await;
        assert!(!shared
            .lock()
            .register(watched(3, &permits, Duration::from_secs(10))));
        assert!(shared.oldest_due().is_some_and(|(due, _)| due > deadline));
        // Behind it, a request of a shorter patience; once it is the oldest it is due before
        // the deadline, so the watch is woken.
        assert!(!shared
            .lock()
            .register(watched(4, &permits, Duration::from_secs(1))));
        assert!(shared.take(3).is_some());
        assert!(woken(&shared));
        assert!(shared.oldest_due().is_some_and(|(due, _)| due < deadline));
    }
}
