//! One client connection: reads frames, runs up to `max_in_flight` requests concurrently, and
//! writes their responses back in request order.
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
use tokio::net::TcpStream;
use tokio::sync::broadcast;
use tokio_util::codec::FramedRead;
use tracing::{debug, info, warn};

use super::appender::Appender;
use super::writer::ResponseWriter;
use super::{handler, ServerConfig};
use crate::broker::Broker;
use crate::protocol::{
    ErrorCode, ErrorResponse, FrameCodec, ProtocolError, RequestFrame, ResponseFrame,
};

type PendingResponse = BoxFuture<'static, ResponseFrame>;

fn ready(response: ResponseFrame) -> PendingResponse {
    Box::pin(futures::future::ready(response))
}

/// Serves one connection until the client closes it, a fatal protocol error, or shutdown.
pub async fn serve(
    socket: TcpStream,
    peer: SocketAddr,
    broker: Arc<Broker>,
    config: Arc<ServerConfig>,
    mut stop: broadcast::Receiver<()>,
) {
    debug!(%peer, "connection opened");
    let (read_half, write_half) = socket.into_split();
    let mut frames = FramedRead::new(read_half, FrameCodec::new(config.max_frame_bytes));
    let mut writer = ResponseWriter::new(write_half, config.max_frame_bytes);
    let mut pending: FuturesOrdered<PendingResponse> = FuturesOrdered::new();
    let appender = Appender::default();
    let mut closing = false;
    loop {
        if closing && pending.is_empty() {
            break;
        }
        let can_read = !closing && pending.len() < config.max_in_flight;
        tokio::select! {
            _ = stop.recv(), if !closing => closing = true,
            frame = tokio::time::timeout(config.idle_timeout, frames.next()), if can_read => {
                match frame {
                    Err(_) if pending.is_empty() => {
                        info!(%peer, "closing idle connection");
                        closing = true;
                    }
                    Err(_) => {}
                    Ok(None) => closing = true,
                    Ok(Some(Ok(bytes))) => match RequestFrame::decode(bytes) {
                        Ok(request) => pending.push_back(handler::start(&broker, &config, &appender, request)),
                        Err(error) => {
                            debug!(%peer, %error, "malformed request");
                            closing |= error.must_close_connection();
                            pending.push_back(ready(error.to_response()));
                        }
                    },
                    Ok(Some(Err(error))) => {
                        // The stream cannot be resynchronized after a framing error: answer if
                        // it is one the client can understand, then close.
                        warn!(%peer, %error, "protocol error; closing connection");
                        closing = true;
                        if let Some(code) = framing_error_code(&error) {
                            pending.push_back(ready(ResponseFrame::error(0, ErrorResponse::new(code, error.to_string()))));
                        }
                    }
                }
            }
            Some(response) = pending.next(), if !pending.is_empty() => {
                writer.push(response);
                // Write every response that is already done in the same burst.
                while let Some(Some(response)) = pending.next().now_or_never() {
                    writer.push(response);
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
    let _ = tokio::time::timeout(config.write_timeout, writer.shutdown()).await;
    debug!(%peer, "connection closed");
}

fn framing_error_code(error: &ProtocolError) -> Option<ErrorCode> {
    match error {
        ProtocolError::FrameTooLarge { .. } => Some(ErrorCode::FrameTooLarge),
        ProtocolError::EmptyFrame | ProtocolError::Malformed(_) => Some(ErrorCode::InvalidRequest),
        _ => None,
    }
}

/// Answers a connection beyond the limit with `TOO_MANY_CONNECTIONS` and closes it.
pub async fn refuse(mut socket: TcpStream, peer: SocketAddr, max_connections: usize) {
    warn!(%peer, max_connections, "connection limit reached; refusing");
    let response = ResponseFrame::error(
        0,
        ErrorResponse::new(
            ErrorCode::TooManyConnections,
            format!(
                "the server already has its maximum of {max_connections} connections; retry later"
            ),
        ),
    );
    let mut writer = ResponseWriter::new(&mut socket, crate::protocol::DEFAULT_MAX_FRAME_BYTES);
    writer.push(response);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), writer.flush()).await;
}
