//! A minimal HTTP/1.1 GET for the console's JSON views and the metrics endpoint, over plain TCP
//! or any stream (the TLS tests').

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// `GET path` at `addr` with `Connection: close`: the status code and the body.
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let socket = TcpStream::connect(addr)
        .await
        .expect("connect to the console");
    http_get_over(socket, &addr.to_string(), path)
        .await
        .expect("an HTTP answer")
}

/// `GET path` over `stream` (already connected, TLS or not) with `Connection: close`: the
/// status code and the body, or what went wrong (the server closed without an answer).
pub async fn http_get_over<S>(
    mut stream: S,
    host: &str,
    path: &str,
) -> Result<(u16, String), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|error| format!("send the request: {error}"))?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .map_err(|_| "no answer within 10 s".to_string())?
        .map_err(|error| format!("read the answer: {error}"))?;
    let answer = String::from_utf8(answer).map_err(|_| "the answer is not UTF-8".to_string())?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP head in {answer:?}"))?;
    let status = head.split(' ').nth(1).and_then(|code| code.parse().ok());
    let status = status.ok_or_else(|| format!("no status code in {head:?}"))?;
    Ok((status, body.to_string()))
}
