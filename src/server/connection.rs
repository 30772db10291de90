//! One client connection, whatever its protocol: reads frames, runs up to `max_in_flight`
//! requests concurrently, and writes their responses back in request order.
//!
//! Backpressure instead of queues: when `max_in_flight` requests are pending the connection stops
//! reading, so a client that pipelines without limit is slowed by TCP, not buffered in memory; a
//! client that stops reading its responses blocks only its own connection, and after
//! `write_timeout` it is disconnected.

use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::broadcast;
use tokio_util::codec::FramedRead;
use tracing::{debug, info, warn};

use super::memory_budget::{BudgetError, BudgetedCodec, BudgetedFrame, Reservation};
use super::protocol::{AfterEncode, Protocol};
use super::writer::ResponseWriter;
use super::ServerConfig;
use crate::broker::BrokerService;
use crate::metrics::RequestTimers;

/// A byte stream the connection loop reads and writes at the same time, cut into a read half
/// and a write half. A TCP socket gives its owned halves (no lock, vectored writes kept); a TLS
/// stream is split with `tokio::io::split` (`super::tls`).
pub trait SplitStream: Send + 'static {
    /// The read half.
    type Read: AsyncRead + Unpin + Send + 'static;
    /// The write half.
    type Write: AsyncWrite + Unpin + Send + 'static;

    /// Cuts the stream in two.
    fn into_halves(self) -> (Self::Read, Self::Write);
}

impl SplitStream for TcpStream {
    type Read = OwnedReadHalf;
    type Write = OwnedWriteHalf;

    fn into_halves(self) -> (Self::Read, Self::Write) {
        self.into_split()
    }
}

/// Serves one connection until the client closes it, a fatal protocol error, or shutdown.
pub async fn serve<P: Protocol, S: SplitStream>(
    protocol: Arc<P>,
    socket: S,
    peer: SocketAddr,
    service: Arc<BrokerService>,
    config: Arc<ServerConfig>,
    mut stop: broadcast::Receiver<()>,
) {
    debug!(%peer, protocol = protocol.name(), "connection opened");
    let (read_half, write_half) = socket.into_halves();
    let budget = config.memory_budget.clone();
    let mut frames = FramedRead::new(
        read_half,
        BudgetedCodec::new(config.max_frame_bytes, budget.clone()),
    );
    // The wait for the next frame's share of the memory budget, while there is one.
    let mut budget_wait: Option<BoxFuture<'static, Result<Reservation, BudgetError>>> = None;
    let mut writer = ResponseWriter::new(write_half, config.max_frame_bytes);
    let mut pending: FuturesOrdered<BoxFuture<'static, P::Response>> = FuturesOrdered::new();
    let mut session = protocol.open_session(&service, peer);
    let listener_metrics = service.metrics().listener(protocol.name(), P::api_name);
    let mut timers = RequestTimers::new(listener_metrics, config.max_in_flight);
    let mut closing = false;
    loop {
        if closing && pending.is_empty() {
            break;
        }
        let can_read = !closing && pending.len() < config.max_in_flight && budget_wait.is_none();
        tokio::select! {
            _ = stop.recv(), if !closing => closing = true,
            Some(reserved) = futures::future::OptionFuture::from(budget_wait.as_mut()), if !closing => {
                budget_wait = None;
                match reserved {
                    Ok(reservation) => frames.decoder_mut().grant(reservation),
                    Err(error) => {
                        warn!(%peer, %error, "request memory budget exhausted; refusing and closing");
                        closing = true;
                        if let Some(response) = protocol.resource_exhausted(&error.to_string()) {
                            timers.push_untimed();
                            pending.push_back(Box::pin(futures::future::ready(response)));
                        }
                    }
                }
            }
            frame = tokio::time::timeout(config.idle_timeout, frames.next()), if can_read => {
                match frame {
                    Err(_) if pending.is_empty() => {
                        info!(%peer, "closing idle connection");
                        closing = true;
                    }
                    Err(_) => {}
                    Ok(None) => closing = true,
                    Ok(Some(Ok(BudgetedFrame::NeedBudget(bytes)))) => {
                        let budget = budget.clone();
                        let wait = config.buffer_wait;
                        budget_wait = Some(Box::pin(async move { budget.reserve(bytes, wait).await }));
                    }
                    Ok(Some(Ok(BudgetedFrame::Frame(bytes, reservation)))) => {
                        let timer = timers.start(&bytes);
                        let started = protocol.start(&service, &mut session, bytes);
                        closing |= started.close;
                        if let Some(response) = started.response {
                            timers.push(timer);
                            // The frame's share of the budget is given back with its answer.
                            pending.push_back(Box::pin(response.map(move |response| {
                                drop(reservation);
                                response
                            })));
                        }
                    }
                    Ok(Some(Err(error))) => {
                        // The stream cannot be resynchronized after a framing error: answer if
                        // it is one the client can understand, then close.
                        warn!(%peer, %error, "protocol error; closing connection");
                        closing = true;
                        if let Some(response) = protocol.framing_error(&error) {
                            timers.push_untimed();
                            pending.push_back(Box::pin(futures::future::ready(response)));
                        }
                    }
                }
            }
            Some(response) = pending.next(), if !pending.is_empty() => {
                let mut after = writer.push(&*protocol, response);
                timers.finish();
                // Write every response that is already done in the same burst.
                while after == AfterEncode::Continue {
                    let Some(Some(response)) = pending.next().now_or_never() else {
                        break;
                    };
                    after = writer.push(&*protocol, response);
                    timers.finish();
                }
                if after == AfterEncode::Close {
                    // Nothing after the unencodable response may be written: the client would
                    // take the next response for the missing one.
                    warn!(%peer, "a response could not be encoded; closing connection");
                    pending = FuturesOrdered::new();
                    timers.clear();
                    closing = true;
                }
                match tokio::time::timeout(config.write_timeout, writer.flush()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => {
                        debug!(%peer, %error, "write failed; closing connection");
                        return;
                    }
                    Err(_) => {
                        warn!(%peer, "client is not reading its responses; disconnecting");
                        return;
                    }
                }
            }
        }
    }
    if tokio::time::timeout(config.write_timeout, writer.shutdown())
        .await
        .is_err()
    {
        debug!(%peer, "shutdown of the write side timed out");
    }
    debug!(%peer, "connection closed");
}

/// Why a connection is refused as soon as it is accepted: the message its client reads says
/// which limit to raise (`--max-connections` or the process's open-file limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The server's `max_connections` are open.
    ConnectionLimit(usize),
    /// The process ran out of file descriptors (its open-file limit, `ulimit -n`).
    OutOfDescriptors,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::ConnectionLimit(max) => write!(
                f,
                "the server already has its maximum of {max} connections; retry later"
            ),
            Refusal::OutOfDescriptors => f.write_str(
                "the server is out of file descriptors (its open-file limit, not its connection \
                 limit); retry later",
            ),
        }
    }
}

/// Answers a connection refused at accept (when the protocol has an answer for it) and closes
/// it. Logged at debug per connection: the accept loop reports refusals in summary.
pub async fn refuse<P: Protocol, S: AsyncWrite + Unpin>(
    protocol: Arc<P>,
    mut socket: S,
    peer: SocketAddr,
    refusal: Refusal,
) {
    debug!(%peer, %refusal, "refusing a connection");
    let Some(response) = protocol.too_many_connections(refusal) else {
        return;
    };
    let mut writer = ResponseWriter::new(&mut socket, crate::protocol::DEFAULT_MAX_FRAME_BYTES);
    // A refusal that cannot be encoded writes nothing; the socket closes either way.
    let _ = writer.push(&*protocol, response);
    if tokio::time::timeout(std::time::Duration::from_secs(1), writer.flush())
        .await
        .is_err()
    {
        debug!(%peer, "refusal not written within 1 s");
    }
}
