//! The server over real TCP, spoken to with raw protocol frames: every API, leases and the
//! fence, persistence across restarts, and hostile input that must not disturb anyone else.

use std::time::Duration;

use crate::support::batch_of;
use bytes::{BufMut, Bytes, BytesMut};
use fencelog::batch::decode_batches;
use fencelog::protocol::{
    ApiKey, ErrorCode, FlushPolicy, FrameCodec, Request, RequestFrame, Response, ResponseFrame,
    TopicConfig,
};
use fencelog::server::ServerConfig;
use fencelog::testing::TestServer;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

/// A minimal client: one request at a time, raw frames.
struct RawClient {
    framed: Framed<TcpStream, FrameCodec>,
    next_id: u32,
}

impl RawClient {
    async fn connect(server: &TestServer) -> Self {
        let socket = TcpStream::connect(server.addr()).await.unwrap();
        Self {
            framed: Framed::new(socket, FrameCodec::default()),
            next_id: 1,
        }
    }

    async fn call(
        &mut self,
        request: Request,
    ) -> Result<Response, fencelog::protocol::ErrorResponse> {
        let api = request.api_key();
        let id = self.next_id;
        self.next_id += 1;
        self.framed
            .send(RequestFrame::new(id, request))
            .await
            .unwrap();
        let frame = self.framed.next().await.unwrap().unwrap();
        let response = ResponseFrame::decode(api, frame).unwrap();
        assert_eq!(response.correlation_id, id);
        response.result
    }
}

fn topic_config(flush: FlushPolicy) -> TopicConfig {
    TopicConfig {
        segment_bytes: 64 * 1024,
        flush,
        retention_bytes: None,
        retention_ms: None,
    }
}

async fn create(client: &mut RawClient, name: &str, flush: FlushPolicy) {
    client
        .call(Request::CreateTopic {
            name: name.into(),
            partitions: 2,
            config: topic_config(flush),
            replication: None,
        })
        .await
        .unwrap();
}

async fn acquire(client: &mut RawClient, topic: &str, holder: &str) -> (u64, u128) {
    match client
        .call(Request::AcquireLease {
            topic: topic.into(),
            partition: 0,
            holder: holder.into(),
            ttl_ms: 10_000,
        })
        .await
        .unwrap()
    {
        Response::AcquireLease {
            epoch, lease_id, ..
        } => (epoch, lease_id),
        other => panic!("unexpected {other:?}"),
    }
}

async fn produce(
    client: &mut RawClient,
    topic: &str,
    batch: Bytes,
) -> Result<Response, fencelog::protocol::ErrorResponse> {
    client
        .call(Request::Produce {
            topic: topic.into(),
            partition: 0,
            batch,
            acks: None,
        })
        .await
}

async fn fetch_values(client: &mut RawClient, topic: &str, offset: u64) -> Vec<(u64, u64, String)> {
    match client
        .call(Request::Fetch {
            topic: topic.into(),
            partition: 0,
            offset,
            max_bytes: 1 << 20,
            max_wait_ms: 0,
            read_committed: None,
        })
        .await
        .unwrap()
    {
        Response::Fetch { batches, .. } => {
            let joined: Vec<u8> = batches.iter().flat_map(|b| b.iter().copied()).collect();
            decode_batches(Bytes::from(joined))
                .unwrap()
                .into_iter()
                .map(|r| {
                    (
                        r.offset,
                        r.epoch,
                        String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
                    )
                })
                .collect()
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// The stale holder's write is rejected once a new lease was granted, with both epochs, and
/// only the pre-grant and new-holder records are in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_holder_is_fenced_after_a_new_grant() {
    let server = TestServer::start().await.unwrap();
    let mut client = RawClient::connect(&server).await;
    create(&mut client, "orders", FlushPolicy::Always).await;
    let (epoch_a, lease_a) = acquire(&mut client, "orders", "a").await;
    assert_eq!(epoch_a, 1);
    produce(&mut client, "orders", batch_of(epoch_a, &["a1"]))
        .await
        .unwrap();
    client
        .call(Request::ReleaseLease {
            topic: "orders".into(),
            partition: 0,
            lease_id: lease_a,
        })
        .await
        .unwrap();
    let (epoch_b, _) = acquire(&mut client, "orders", "b").await;
    assert_eq!(epoch_b, 2);
    let error = produce(&mut client, "orders", batch_of(epoch_a, &["a2"]))
        .await
        .unwrap_err();
    assert_eq!(
        (error.code, error.epoch, error.current_epoch),
        (ErrorCode::Fenced, 1, 2)
    );
    assert_eq!(error.message, "fenced: epoch 1 < current 2");
    produce(&mut client, "orders", batch_of(epoch_b, &["b1"]))
        .await
        .unwrap();
    let values = fetch_values(&mut client, "orders", 0).await;
    assert_eq!(values, vec![(0, 1, "a1".into()), (1, 2, "b1".into())]);
}

/// A second acquire while the lease is live is refused; renew with the old id after a new grant
/// answers LEASE_LOST with the current epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_lease_is_exclusive_and_renew_after_loss_is_lease_lost() {
    let server = TestServer::start().await.unwrap();
    let mut client = RawClient::connect(&server).await;
    create(&mut client, "t", FlushPolicy::Never).await;
    let (_, lease_a) = acquire(&mut client, "t", "a").await;
    let held = client
        .call(Request::AcquireLease {
            topic: "t".into(),
            partition: 0,
            holder: "b".into(),
            ttl_ms: 10_000,
        })
        .await
        .unwrap_err();
    assert_eq!(held.code, ErrorCode::LeaseHeld);
    client
        .call(Request::ReleaseLease {
            topic: "t".into(),
            partition: 0,
            lease_id: lease_a,
        })
        .await
        .unwrap();
    let (epoch_b, _) = acquire(&mut client, "t", "b").await;
    let lost = client
        .call(Request::RenewLease {
            topic: "t".into(),
            partition: 0,
            lease_id: lease_a,
        })
        .await
        .unwrap_err();
    assert_eq!(
        (lost.code, lost.current_epoch),
        (ErrorCode::LeaseLost, epoch_b)
    );
}

/// Topics, data and epochs survive a restart; the stale epoch is still refused after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_data_and_epochs_survive_a_restart() {
    let server = TestServer::start().await.unwrap();
    let mut client = RawClient::connect(&server).await;
    create(&mut client, "kept", FlushPolicy::Always).await;
    let (epoch, _) = acquire(&mut client, "kept", "a").await;
    produce(&mut client, "kept", batch_of(epoch, &["x", "y"]))
        .await
        .unwrap();
    drop(client);
    let server = server.restart().await.unwrap();
    let mut client = RawClient::connect(&server).await;
    match client
        .call(Request::Metadata {
            topics: vec![],
            cluster: false,
        })
        .await
        .unwrap()
    {
        Response::Metadata { topics, .. } => {
            assert_eq!(topics.len(), 1);
            assert_eq!((topics[0].name.as_str(), topics[0].partitions), ("kept", 2));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(fetch_values(&mut client, "kept", 0).await.len(), 2);
    // The lease table is in memory and starts empty, but the epoch is durable: the next grant is 2.
    let (next, _) = acquire(&mut client, "kept", "b").await;
    assert_eq!(next, 2);
    let error = produce(&mut client, "kept", batch_of(epoch, &["stale"]))
        .await
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::Fenced);
    match client
        .call(Request::ListOffsets {
            topic: "kept".into(),
            partition: 0,
            timestamp: None,
        })
        .await
        .unwrap()
    {
        Response::ListOffsets {
            earliest,
            latest,
            epoch,
            ..
        } => assert_eq!((earliest, latest, epoch), (0, 2, 2)),
        other => panic!("unexpected {other:?}"),
    }
}

/// A fetch at the end of the log waits for new data and returns as soon as it is appended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_long_polls_until_data_arrives() {
    let server = TestServer::start().await.unwrap();
    let mut client = RawClient::connect(&server).await;
    create(&mut client, "poll", FlushPolicy::Always).await;
    let (epoch, _) = acquire(&mut client, "poll", "a").await;
    let mut waiter = RawClient::connect(&server).await;
    let waiting = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let response = waiter
            .call(Request::Fetch {
                topic: "poll".into(),
                partition: 0,
                offset: 0,
                max_bytes: 1 << 20,
                max_wait_ms: 10_000,
                read_committed: None,
            })
            .await
            .unwrap();
        (response, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    produce(&mut client, "poll", batch_of(epoch, &["late"]))
        .await
        .unwrap();
    let (response, waited) = waiting.await.unwrap();
    assert!(matches!(
        response,
        Response::Fetch {
            high_watermark: 1,
            ..
        }
    ));
    assert!(
        waited < Duration::from_secs(10),
        "the poll did not wake up on new data"
    );
}

/// Errors have codes and messages: unknown topic, unknown partition, bad batch, epoch 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_codes_and_messages() {
    let server = TestServer::start().await.unwrap();
    let mut client = RawClient::connect(&server).await;
    let unknown = produce(&mut client, "nope", batch_of(1, &["x"]))
        .await
        .unwrap_err();
    assert_eq!(unknown.code, ErrorCode::UnknownTopic);
    create(&mut client, "e", FlushPolicy::Never).await;
    let exists = client
        .call(Request::CreateTopic {
            name: "e".into(),
            partitions: 1,
            config: topic_config(FlushPolicy::Never),
            replication: None,
        })
        .await
        .unwrap_err();
    assert_eq!(exists.code, ErrorCode::TopicExists);
    let never_granted = produce(&mut client, "e", batch_of(0, &["x"]))
        .await
        .unwrap_err();
    assert_eq!(never_granted.code, ErrorCode::UnknownEpoch);
    let (epoch, _) = acquire(&mut client, "e", "a").await;
    let mut corrupt = batch_of(epoch, &["x"]).to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    let invalid = produce(&mut client, "e", Bytes::from(corrupt))
        .await
        .unwrap_err();
    assert_eq!(invalid.code, ErrorCode::InvalidBatch);
    let partition = client
        .call(Request::ListOffsets {
            topic: "e".into(),
            partition: 9,
            timestamp: None,
        })
        .await
        .unwrap_err();
    assert_eq!(partition.code, ErrorCode::UnknownPartition);
    let bad_name = client
        .call(Request::CreateTopic {
            name: "../x".into(),
            partitions: 1,
            config: topic_config(FlushPolicy::Never),
            replication: None,
        })
        .await
        .unwrap_err();
    assert_eq!(bad_name.code, ErrorCode::InvalidConfig);
}

/// Garbage, a 4 GiB length, an unknown API, a truncated body, a half frame that stalls: each
/// fails alone, and a well-behaved client on another connection is served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_fails_alone() {
    let server = TestServer::start().await.unwrap();
    let mut good = RawClient::connect(&server).await;
    create(&mut good, "safe", FlushPolicy::Never).await;

    // An oversized declared length: FRAME_TOO_LARGE with the request's correlation id (the
    // header after the length is read first), then closed.
    let mut huge = TcpStream::connect(server.addr()).await.unwrap();
    huge.write_all(&[0xFF, 0xFF, 0xFF, 0xFF, 0, 2, 0, 0, 0, 0, 0, 9, 1, 2, 3])
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), huge.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let response =
        ResponseFrame::decode(ApiKey::ApiVersions, Bytes::copy_from_slice(&answer[4..])).unwrap();
    assert_eq!(response.correlation_id, 9);
    assert_eq!(response.result.unwrap_err().code, ErrorCode::FrameTooLarge);

    // Garbage that happens to frame: a 4-byte body is shorter than a header → closed.
    let mut garbage = TcpStream::connect(server.addr()).await.unwrap();
    garbage
        .write_all(&[0, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef])
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), garbage.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert!(!answer.is_empty());

    // Unknown API and a truncated body: answered with the request's correlation id, connection stays.
    let mut odd = TcpStream::connect(server.addr()).await.unwrap();
    let mut frame = BytesMut::new();
    frame.put_u32(8);
    frame.put_u16(999);
    frame.put_u16(0);
    frame.put_u32(77);
    frame.put_u32(10); // ListOffsets with a body that lies about its string length
    frame.put_u16(8);
    frame.put_u16(0);
    frame.put_u32(78);
    frame.put_u16(50);
    odd.write_all(&frame).await.unwrap();
    let mut framed = Framed::new(odd, FrameCodec::default());
    let first =
        ResponseFrame::decode(ApiKey::ApiVersions, framed.next().await.unwrap().unwrap()).unwrap();
    assert_eq!(
        (first.correlation_id, first.result.unwrap_err().code),
        (77, ErrorCode::UnknownApi)
    );
    let second =
        ResponseFrame::decode(ApiKey::ListOffsets, framed.next().await.unwrap().unwrap()).unwrap();
    assert_eq!(
        (second.correlation_id, second.result.unwrap_err().code),
        (78, ErrorCode::InvalidRequest)
    );

    // A half frame that stalls holds only its own connection.
    let mut stalled = TcpStream::connect(server.addr()).await.unwrap();
    stalled.write_all(&[0, 0, 1, 0, 0, 0]).await.unwrap();

    // The good client is served throughout.
    let (epoch, _) = acquire(&mut good, "safe", "a").await;
    produce(&mut good, "safe", batch_of(epoch, &["ok"]))
        .await
        .unwrap();
    assert_eq!(fetch_values(&mut good, "safe", 0).await.len(), 1);
    drop(stalled);
}

/// Connections beyond the limit are answered TOO_MANY_CONNECTIONS and closed; existing ones
/// keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_flood_beyond_the_limit_is_refused_cleanly() {
    let config = ServerConfig {
        max_connections: 4,
        ..ServerConfig::default()
    };
    let server = TestServer::builder()
        .server_config(config)
        .start()
        .await
        .unwrap();
    let mut first = RawClient::connect(&server).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(RawClient::connect(&server).await);
    }
    // Make sure all four are accepted before the fifth arrives.
    for client in held.iter_mut() {
        client.call(Request::ApiVersions).await.unwrap();
    }
    let mut extra = TcpStream::connect(server.addr()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), extra.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let refused =
        ResponseFrame::decode(ApiKey::ApiVersions, Bytes::copy_from_slice(&answer[4..])).unwrap();
    assert_eq!(
        refused.result.unwrap_err().code,
        ErrorCode::TooManyConnections
    );
    assert!(first.call(Request::ApiVersions).await.is_ok());
}

/// Pipelined requests on one connection are all answered, in order, with their ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    let server = TestServer::start().await.unwrap();
    let mut client = RawClient::connect(&server).await;
    create(&mut client, "pipe", FlushPolicy::Always).await;
    let (epoch, _) = acquire(&mut client, "pipe", "a").await;
    for id in 100..200 {
        client
            .framed
            .feed(RequestFrame::new(
                id,
                Request::Produce {
                    topic: "pipe".into(),
                    partition: 0,
                    batch: batch_of(epoch, &["p"]),
                    acks: None,
                },
            ))
            .await
            .unwrap();
    }
    SinkExt::<RequestFrame>::flush(&mut client.framed)
        .await
        .unwrap();
    for (expected_id, expected_offset) in (100..200).zip(0..) {
        let response = ResponseFrame::decode(
            ApiKey::Produce,
            client.framed.next().await.unwrap().unwrap(),
        )
        .unwrap();
        assert_eq!(response.correlation_id, expected_id);
        match response.result.unwrap() {
            Response::Produce { base_offset, .. } => assert_eq!(base_offset, expected_offset),
            other => panic!("unexpected {other:?}"),
        }
    }
}
