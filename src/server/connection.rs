//! One client connection, whatever its protocol: reads frames, runs up to `max_in_flight`
//! requests concurrently, and writes their responses back in request order.
//!
//! Backpressure instead of queues: when `max_in_flight` requests are pending the connection stops
//! reading, so a client that pipelines without limit is slowed by TCP, not buffered in memory; a
//! client that stops reading its responses blocks only its own connection, and after
//! `write_timeout` it is disconnected.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::broadcast;
use tracing::{debug, info, warn};

use super::frame_reader::{FrameLimits, FrameReader, ReadError, ReadFrame, SpliceCapable};
use super::memory_budget::MemoryBudget;
pub use super::protocol::Refusal;
use super::protocol::{AfterEncode, Protocol};
use super::writer::ResponseWriter;
use super::ServerConfig;
use crate::broker::BrokerService;
use crate::metrics::RequestTimers;
use crate::protocol::wrong_port::Foreign;

/// A byte stream the connection loop reads and writes at the same time, cut into a read half
/// and a write half. A TCP socket gives its owned halves (no lock, vectored writes kept); a TLS
/// stream is split with `tokio::io::split` (`super::tls`).
pub trait SplitStream: Send + 'static {
    /// The read half.
    type Read: AsyncRead + SpliceCapable + Unpin + Send + 'static;
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
    let limits = FrameLimits {
        max_frame_bytes: config.max_frame_bytes,
        max_unauthenticated_frame_bytes: config.max_unauthenticated_frame_bytes,
        partial_frame_timeout: config.partial_frame_timeout,
        buffer_wait: config.buffer_wait,
        wait_for_header: protocol.answers_refused_frames(),
    };
    let mut frames = FrameReader::new(
        read_half,
        limits,
        MemoryBudget::new(config.connection_buffer_bytes),
        config.memory_budget.clone(),
    )
    .splicing(protocol.splice_rule());
    let mut writer = ResponseWriter::new(write_half, config.max_frame_bytes);
    let mut pending: FuturesOrdered<BoxFuture<'static, P::Response>> = FuturesOrdered::new();
    let mut session = protocol.open_session(&service, peer);
    let listener_metrics = service.metrics().listener(protocol.name(), P::api_name);
    let mut timers = RequestTimers::new(Arc::clone(&listener_metrics), config.max_in_flight);
    let mut closing = false;
    // An HTTP client was answered in HTTP: what it still sends is read and dropped before the
    // close, so that the answer is not lost to a reset.
    let mut drain_before_close = false;
    loop {
        if closing && pending.is_empty() {
            break;
        }
        let can_read = !closing && pending.len() < config.max_in_flight;
        let must_authenticate = protocol.must_authenticate(&session);
        tokio::select! {
            _ = stop.recv(), if !closing => closing = true,
            frame = tokio::time::timeout(config.idle_timeout, frames.next(must_authenticate)), if can_read => {
                match frame {
                    Err(_) if pending.is_empty() => {
                        info!(%peer, "closing idle connection");
                        closing = true;
                    }
                    Err(_) => {}
                    Ok(Ok(None)) => closing = true,
                    Ok(Ok(Some(ReadFrame { bytes, reservation, tail }))) => {
                        let timer = timers.start(&bytes);
                        let started = match tail {
                            None => protocol.start(&service, &mut session, bytes),
                            Some(tail) => {
                                listener_metrics.frame_spliced();
                                protocol.start_spliced(&service, &mut session, bytes, tail)
                            }
                        };
                        closing |= started.close;
                        if let Some(response) = started.response {
                            timers.push(timer);
                            // The frame's share of memory is given back with its answer.
                            pending.push_back(Box::pin(response.map(move |response| {
                                drop(reservation);
                                response
                            })));
                        }
                    }
                    Ok(Err(error)) => {
                        // The stream cannot be resynchronized after a refused frame: answer if
                        // the client can understand it, then close.
                        closing = true;
                        match error {
                            ReadError::Foreign(foreign) => {
                                drain_before_close |= answer_foreign(&*protocol, &mut writer, peer, foreign);
                            }
                            ReadError::Refused { header, refusal } => {
                                info!(
                                    %peer,
                                    listener = protocol.name(),
                                    correlation_id = header.map(|header| header.correlation_id),
                                    "request frame refused; closing connection: {refusal}"
                                );
                                if let Some(response) = protocol.refuse_frame(header, &refusal) {
                                    timers.push_untimed();
                                    pending.push_back(Box::pin(futures::future::ready(response)));
                                }
                            }
                            error if error.is_departure() => {
                                debug!(%peer, %error, "client went away; closing connection");
                            }
                            error => info!(%peer, %error, "closing connection"),
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
                        // Logged at info: a flood of clients that never read must not become
                        // a flood of warnings.
                        info!(%peer, timeout_ms = config.write_timeout.as_millis() as u64, "client is not reading its responses; disconnecting");
                        return;
                    }
                }
            }
        }
    }
    // Whatever is still queued (an answer to another protocol's client) goes out before the
    // write side is shut.
    if !matches!(
        tokio::time::timeout(config.write_timeout, writer.flush()).await,
        Ok(Ok(()))
    ) {
        debug!(%peer, "last write failed or timed out");
    }
    if tokio::time::timeout(config.write_timeout, writer.shutdown())
        .await
        .is_err()
    {
        debug!(%peer, "shutdown of the write side timed out");
    }
    if drain_before_close {
        frames.drain(DRAIN_TIMEOUT).await;
    }
    debug!(%peer, "connection closed");
}

/// Longest the connection reads and drops what an HTTP client still sends after its answer.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(500);

/// Logs a client of another protocol at info, naming what was seen and what to do, and queues
/// an answer it can read where there is one (an HTTP `400` with a plain-text body). Returns
/// whether an answer was queued.
fn answer_foreign<P: Protocol, W: AsyncWrite + Unpin>(
    protocol: &P,
    writer: &mut ResponseWriter<W>,
    peer: SocketAddr,
    foreign: Foreign,
) -> bool {
    let listener = protocol.name();
    match foreign {
        Foreign::HttpRequest | Foreign::HttpResponse => {
            info!(
                %peer,
                listener,
                "an HTTP client reached the {listener} listener, which speaks {}; answered HTTP 400 (Prometheus metrics are served by `serve --metrics-listen ADDR` at http://ADDR/metrics)",
                protocol.speaks()
            );
            let body = format!(
                "This port speaks {}, not HTTP (a fencelog {listener} listener).\n\
                 Prometheus metrics are served at http://ADDR/metrics by a server started with \
                 `fencelog serve --metrics-listen ADDR`.\n",
                protocol.speaks()
            );
            writer.push_raw(Bytes::from(format!(
                "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )));
            true
        }
        Foreign::Tls => {
            info!(
                %peer,
                listener,
                "a TLS client reached the plain-TCP {listener} listener; closing connection (connect without TLS, or start the server with --tls-cert and --tls-key)"
            );
            false
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
