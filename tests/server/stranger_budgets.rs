//! Budgets a stranger cannot hold: memory for a request frame is paid as its bytes arrive (a
//! prefix declaring 16 MiB holds nothing), every connection has a share of its own so small
//! requests never wait for memory others hold, a connection that has not authenticated may only
//! send small frames, a half-sent frame times out, and every refusal carries the request's
//! correlation id.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use fencelog::auth::Security;
use fencelog::protocol::{ApiKey, ErrorCode, Request, RequestFrame, ResponseFrame};
use fencelog::server::memory_budget::MemoryBudget;
use fencelog::server::ServerConfig;
use fencelog::testing::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Generous bound on anything that must simply happen, not a performance claim.
const GUARD: Duration = Duration::from_secs(5);

/// A length prefix declaring a 16 MiB frame, and nothing after it.
const PREFIX_16_MIB: [u8; 4] = [0x01, 0x00, 0x00, 0x00];

/// Reads one length-prefixed frame (its body), within [`GUARD`].
async fn read_frame(socket: &mut TcpStream) -> Bytes {
    tokio::time::timeout(GUARD, async {
        let length = socket.read_u32().await.expect("a frame's length") as usize;
        let mut body = vec![0; length];
        socket.read_exact(&mut body).await.expect("a frame's body");
        Bytes::from(body)
    })
    .await
    .expect("an answer within the guard timeout")
}

/// A native request frame, encoded.
fn native(correlation_id: u32, request: Request) -> BytesMut {
    let mut bytes = BytesMut::new();
    RequestFrame::new(correlation_id, request)
        .encode(&mut bytes)
        .unwrap();
    bytes
}

/// The native answer to ApiVersions with `correlation_id`, on a fresh connection.
async fn native_api_versions(addr: std::net::SocketAddr, correlation_id: u32) -> ResponseFrame {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(&native(correlation_id, Request::ApiVersions))
        .await
        .unwrap();
    ResponseFrame::decode(ApiKey::ApiVersions, read_frame(&mut socket).await).unwrap()
}

/// The correlation id of the Kafka answer to ApiVersions v0 with `correlation_id`, on a fresh
/// connection.
async fn kafka_api_versions(addr: std::net::SocketAddr, correlation_id: i32) -> i32 {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let mut request = BytesMut::new();
    request.put_i16(18);
    request.put_i16(0);
    request.put_i32(correlation_id);
    request.put_i16(4);
    request.put_slice(b"test");
    socket.write_u32(request.len() as u32).await.unwrap();
    socket.write_all(&request).await.unwrap();
    let answer = read_frame(&mut socket).await;
    i32::from_be_bytes(answer[..4].try_into().unwrap())
}

/// A native request frame header declaring `length` bytes of frame body, with `correlation_id`
/// (a Metadata request, whose body never comes).
fn header_declaring(length: u32, correlation_id: u32) -> BytesMut {
    let mut bytes = BytesMut::new();
    bytes.put_u32(length);
    bytes.put_u16(ApiKey::Metadata.as_u16());
    bytes.put_u16(0);
    bytes.put_u32(correlation_id);
    bytes
}

/// Proves (issue 32, judged from outside): 64 connections on each listener that send only a
/// 4-byte prefix declaring 16 MiB hold no memory of the shared budget, and a healthy ApiVersions
/// on each listener is answered meanwhile, with its own correlation id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_only_connections_hold_nothing_and_api_versions_is_answered_with_its_id() {
    let budget = MemoryBudget::new(512 << 20);
    let server = TestServer::builder()
        .server_config(ServerConfig {
            memory_budget: budget.clone(),
            ..ServerConfig::default()
        })
        .kafka()
        .start()
        .await
        .unwrap();
    let mut strangers = Vec::new();
    for addr in [server.addr(), server.kafka_addr()] {
        for _ in 0..64 {
            let mut socket = TcpStream::connect(addr).await.unwrap();
            socket.write_all(&PREFIX_16_MIB).await.unwrap();
            strangers.push(socket);
        }
    }
    // Let the server read every prefix.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        budget.available(),
        budget.total(),
        "a declared length holds none of the shared budget"
    );
    let answer = native_api_versions(server.addr(), 4242).await;
    assert_eq!(answer.correlation_id, 4242);
    assert!(answer.result.is_ok(), "{:?}", answer.result);
    assert_eq!(kafka_api_versions(server.kafka_addr(), 4243).await, 4243);
    drop(strangers);
}

/// Proves: when a stranger's half-sent frame really holds the shared budget, a large frame
/// that cannot get memory within `buffer_wait` is refused RESOURCE_EXHAUSTED with its own
/// correlation id (not 0), while a small request on another connection is answered at once from
/// that connection's own share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_budget_refuses_with_the_requests_id_and_small_requests_still_pass() {
    let budget = MemoryBudget::new(256 * 1024);
    let server = TestServer::builder()
        .server_config(ServerConfig {
            memory_budget: budget.clone(),
            connection_buffer_bytes: 16 * 1024,
            buffer_wait: Duration::from_millis(300),
            ..ServerConfig::default()
        })
        .start()
        .await
        .unwrap();
    // A stranger sends 250 KiB of a 260 KiB frame (one the two pools could hold) and stalls:
    // its bytes hold the shared budget but for 22 KiB.
    let mut stranger = TcpStream::connect(server.addr()).await.unwrap();
    let mut bytes = header_declaring(260 * 1024, 1);
    bytes.resize(250 * 1024, 0);
    stranger.write_all(&bytes).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        budget.available() < 64 * 1024,
        "the stranger's bytes hold the shared budget ({} bytes free)",
        budget.available()
    );
    // A 128 KiB frame needs the shared budget: refused with its correlation id.
    let mut large = TcpStream::connect(server.addr()).await.unwrap();
    let mut bytes = header_declaring(128 * 1024, 77);
    bytes.resize(4 + 128 * 1024, 0);
    let _ = tokio::time::timeout(Duration::from_millis(200), large.write_all(&bytes)).await;
    let refused = ResponseFrame::decode(ApiKey::Metadata, read_frame(&mut large).await).unwrap();
    assert_eq!(refused.correlation_id, 77);
    assert_eq!(
        refused.result.unwrap_err().code,
        ErrorCode::ResourceExhausted
    );
    // A small request is answered from its connection's own share.
    let answer = native_api_versions(server.addr(), 78).await;
    assert_eq!(answer.correlation_id, 78);
    assert!(answer.result.is_ok());
    drop(stranger);
}

/// Proves: on a server with `--auth`, a connection that has not authenticated may not send a
/// frame over `max_unauthenticated_frame_bytes` (it is refused AUTHENTICATION_REQUIRED with its
/// correlation id before its body is read, and closed), while its small requests are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_has_not_authenticated_may_only_send_small_frames() {
    let security_dir = tempfile::tempdir().unwrap();
    let security = Security::open(security_dir.path(), ["admin".to_owned()]).unwrap();
    let server = TestServer::builder()
        .server_config(ServerConfig {
            security: Some(Arc::new(security)),
            ..ServerConfig::default()
        })
        .start()
        .await
        .unwrap();
    let answer = native_api_versions(server.addr(), 5).await;
    assert!(answer.result.is_ok(), "ApiVersions needs no authentication");
    let mut stranger = TcpStream::connect(server.addr()).await.unwrap();
    // The header of a 1 MiB frame (over the 512 KiB default); the body never needs to come.
    stranger
        .write_all(&header_declaring(1 << 20, 31))
        .await
        .unwrap();
    let refused = ResponseFrame::decode(ApiKey::Metadata, read_frame(&mut stranger).await).unwrap();
    assert_eq!(refused.correlation_id, 31);
    let error = refused.result.unwrap_err();
    assert_eq!(error.code, ErrorCode::AuthenticationRequired);
    assert!(error.message.contains("authenticate"), "{}", error.message);
    let mut rest = Vec::new();
    tokio::time::timeout(GUARD, stranger.read_to_end(&mut rest))
        .await
        .expect("the connection is closed")
        .ok();
    assert!(rest.is_empty());
}

/// Proves: a frame whose first bytes came but whose rest does not is refused after
/// `partial_frame_timeout` (INVALID_REQUEST, with its correlation id) and its connection closed,
/// although the idle timeout is far away; a prefix whose header never comes gets no answer, only
/// the close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_frame_times_out_with_its_correlation_id() {
    let server = TestServer::builder()
        .server_config(ServerConfig {
            partial_frame_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_secs(300),
            ..ServerConfig::default()
        })
        .start()
        .await
        .unwrap();
    let mut half = TcpStream::connect(server.addr()).await.unwrap();
    let mut bytes = header_declaring(1000, 55);
    bytes.resize(100, 0);
    half.write_all(&bytes).await.unwrap();
    let refused = ResponseFrame::decode(ApiKey::Metadata, read_frame(&mut half).await).unwrap();
    assert_eq!(refused.correlation_id, 55);
    let error = refused.result.unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidRequest);
    assert!(error.message.contains("not complete"), "{}", error.message);

    let mut prefix_only = TcpStream::connect(server.addr()).await.unwrap();
    prefix_only.write_all(&PREFIX_16_MIB).await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(GUARD, prefix_only.read_to_end(&mut rest))
        .await
        .expect("the connection is closed")
        .ok();
    assert!(rest.is_empty(), "no request, no answer: {rest:?}");
}
