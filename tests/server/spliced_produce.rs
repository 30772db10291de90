//! The one-copy produce path over real TCP: a native `Produce` of a large batch has its batch
//! moved socket → pipe → segment file, never into the server's memory, with the same answers,
//! order and fence as the copy path; and every way out of it (a stale holder, a corrupt
//! batch, bad `acks`, a stalled client) behaves as the copy path does. (A pipe that fills
//! before its batch is in it: `server::frame_reader`'s unit tests.)

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fencelog::protocol::{
    ApiKey, ErrorCode, FlushPolicy, Request, RequestFrame, Response, ResponseFrame,
};
use fencelog::server::ServerConfig;
use fencelog::testing::TestServer;
use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::support::raw_protocol::{self, assert_code, batch, topic_config, value, RawClient};

const TOPIC: &str = "spliced";

/// Frames the native listener splices: well over its 256 KiB threshold when the path is on.
fn large_batch(epoch: u64, tag: &str) -> (Bytes, Vec<Vec<u8>>) {
    let values: Vec<Vec<u8>> = (0..300)
        .map(|n| value(&format!("{tag}-{n}-"), 1000))
        .collect();
    (batch(epoch, &values), values)
}

fn small_batch(epoch: u64, tag: &str) -> (Bytes, Vec<Vec<u8>>) {
    let values = vec![value(tag, 100)];
    (batch(epoch, &values), values)
}

fn produce_frame(id: u32, batch: Bytes, acks: Option<fencelog::domain::Acks>) -> BytesMut {
    let mut frame = BytesMut::new();
    RequestFrame::new(
        id,
        Request::Produce {
            topic: TOPIC.into(),
            partition: 0,
            batch,
            acks,
        },
    )
    .encode(&mut frame)
    .unwrap();
    frame
}

fn spliced_count(server: &TestServer) -> u64 {
    server
        .service()
        .metrics()
        .listeners()
        .iter()
        .find(|listener| listener.name() == "native")
        .map_or(0, |listener| listener.spliced())
}

async fn server_with_topic(segment_bytes: u64) -> (TestServer, RawClient) {
    // The one-copy path is opt-in (`serve --splice-min-bytes`): on, at its usual threshold.
    let server = TestServer::builder()
        .server_config(ServerConfig {
            splice_min_frame_bytes: fencelog::server::SPLICE_MIN_FRAME_BYTES_WHEN_ON,
            ..ServerConfig::default()
        })
        .start()
        .await
        .unwrap();
    let mut client = RawClient::connect(server.addr()).await;
    client
        .create_topic(TOPIC, 1, topic_config(segment_bytes, FlushPolicy::Never))
        .await
        .unwrap();
    (server, client)
}

/// Acquires partition 0's lease: its epoch and lease id.
async fn acquire(client: &mut RawClient) -> (u64, u128) {
    match client
        .call(Request::AcquireLease {
            topic: TOPIC.into(),
            partition: 0,
            holder: "spliced".into(),
            ttl_ms: 60_000,
        })
        .await
        .unwrap()
    {
        Response::AcquireLease {
            epoch, lease_id, ..
        } => (epoch, lease_id),
        other => panic!("{other:?}"),
    }
}

/// Reads one produce answer off `framed`.
async fn answer(framed: &mut RawClient) -> ResponseFrame {
    let frame = tokio::time::timeout(raw_protocol::CALL_TIMEOUT, framed.framed.next())
        .await
        .expect("answer timed out")
        .expect("connection closed")
        .expect("read answer");
    ResponseFrame::decode(ApiKey::Produce, frame).unwrap()
}

#[tokio::test]
async fn pipelined_large_and_small_batches_land_in_request_order_as_sent() {
    // Proves: spliced batches (versions 0 and 1) and copied ones, sent back to back on one
    // connection without waiting, are appended in request order, rolls included, and read back
    // byte for byte; the large ones took the splice path.
    let (server, mut client) = server_with_topic(1024 * 1024).await;
    let (epoch, _) = acquire(&mut client).await;
    let shapes = [
        large_batch(epoch, "a"),
        small_batch(epoch, "b"),
        large_batch(epoch, "c"),
        large_batch(epoch, "d"),
        small_batch(epoch, "e"),
        large_batch(epoch, "f"),
    ];
    let mut wire = BytesMut::new();
    for (n, (bytes, _)) in shapes.iter().enumerate() {
        let acks = (n == 3).then_some(fencelog::domain::Acks::Leader);
        wire.extend_from_slice(&produce_frame(n as u32 + 1, bytes.clone(), acks));
    }
    client.framed.get_mut().write_all(&wire).await.unwrap();
    let mut expected = Vec::new();
    let mut next = 0;
    for (n, (_, values)) in shapes.iter().enumerate() {
        let response = answer(&mut client).await;
        assert_eq!(response.correlation_id, n as u32 + 1);
        match response.result {
            Ok(Response::Produce { base_offset, .. }) => assert_eq!(base_offset, next),
            other => panic!("produce {n}: {other:?}"),
        }
        next += values.len() as u64;
        expected.extend(values.iter().cloned());
    }
    let stored = client.read_range(TOPIC, 0, 0, next).await.unwrap();
    let stored: Vec<Vec<u8>> = stored.into_iter().map(|(_, value)| value).collect();
    assert!(stored == expected, "the log holds what was sent, in order");
    assert_eq!(spliced_count(&server), 4, "every large batch was spliced");
}

#[tokio::test]
async fn a_stale_holder_is_fenced_before_its_batch_lands_and_the_connection_goes_on() {
    // Proves: the fence runs before the spliced bytes reach the segment (the stale batch is
    // nowhere in the log) and the connection reads the next frame where it should.
    let (server, mut client) = server_with_topic(4 * 1024 * 1024).await;
    let (stale, lease_id) = acquire(&mut client).await;
    client
        .call(Request::ReleaseLease {
            topic: TOPIC.into(),
            partition: 0,
            lease_id,
        })
        .await
        .unwrap();
    let (current, _) = acquire(&mut client).await;
    assert!(current > stale);
    let (stale_batch, _) = large_batch(stale, "stale");
    let error = client.produce(TOPIC, 0, stale_batch).await.unwrap_err();
    assert_code(&error, ErrorCode::Fenced);
    assert!(
        error.message.contains(&current.to_string()),
        "{}",
        error.message
    );
    let (fresh, values) = large_batch(current, "fresh");
    assert_eq!(client.produce(TOPIC, 0, fresh).await.unwrap(), 0);
    let stored = client
        .read_range(TOPIC, 0, 0, values.len() as u64)
        .await
        .unwrap();
    assert!(stored.into_iter().map(|(_, value)| value).eq(values));
    assert_eq!(spliced_count(&server), 2);
}

#[tokio::test]
async fn a_corrupt_spliced_batch_is_refused_and_the_next_batch_lands_at_its_offset() {
    // Proves: the bytes are validated as they landed, before they count: a batch whose records
    // were damaged on the way is refused, nothing of it is served, the connection goes on, and
    // the next batch takes the offset the refused one would have had.
    let (server, mut client) = server_with_topic(4 * 1024 * 1024).await;
    let (epoch, _) = acquire(&mut client).await;
    let (first, first_values) = large_batch(epoch, "first");
    client.produce(TOPIC, 0, first).await.unwrap();
    let (damaged, _) = large_batch(epoch, "damaged");
    let mut damaged = damaged.to_vec();
    let at = damaged.len() - 100;
    damaged[at] ^= 0xff;
    let error = client
        .produce(TOPIC, 0, Bytes::from(damaged))
        .await
        .unwrap_err();
    assert_code(&error, ErrorCode::InvalidBatch);
    let (next, next_values) = large_batch(epoch, "next");
    let base = client.produce(TOPIC, 0, next).await.unwrap();
    assert_eq!(base, first_values.len() as u64);
    let end = base + next_values.len() as u64;
    let stored = client.read_range(TOPIC, 0, 0, end).await.unwrap();
    let expected = first_values.into_iter().chain(next_values);
    assert!(stored.into_iter().map(|(_, value)| value).eq(expected));
    assert_eq!(spliced_count(&server), 3);
}

#[tokio::test]
async fn acks_the_server_does_not_offer_refuse_a_spliced_produce_with_nothing_written() {
    // Proves: the fields after a spliced batch are checked before the batch is appended, as
    // the decoder checks them on a frame read whole: `acks` 0 is INVALID_REQUEST and the log
    // does not move.
    let (server, mut client) = server_with_topic(4 * 1024 * 1024).await;
    let (epoch, _) = acquire(&mut client).await;
    let (bytes, _) = large_batch(epoch, "acks");
    let mut frame = produce_frame(7, bytes, Some(fencelog::domain::Acks::Leader));
    let len = frame.len();
    frame[len - 2..].copy_from_slice(&0i16.to_be_bytes());
    client.framed.get_mut().write_all(&frame).await.unwrap();
    let response = answer(&mut client).await;
    assert_eq!(response.correlation_id, 7);
    match response.result {
        Err(error) => {
            assert_code(&error, ErrorCode::InvalidRequest);
            assert!(error.message.contains("acks 0"), "{}", error.message);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(client.list_offsets(TOPIC, 0).await.1, 0, "nothing written");
    let (bytes, _) = large_batch(epoch, "after");
    assert_eq!(client.produce(TOPIC, 0, bytes).await.unwrap(), 0);
    assert_eq!(spliced_count(&server), 2);
}

#[tokio::test]
async fn a_producer_stalled_mid_batch_holds_up_nobody_else() {
    // Proves: the batch moves into its pipe outside every lock: while one producer has sent half
    // a large batch and stopped, another appends to the same partition at once; the stalled
    // batch lands after it once its last bytes arrive.
    let (server, mut client) = server_with_topic(4 * 1024 * 1024).await;
    let (epoch, _) = acquire(&mut client).await;
    let mut stalled = RawClient::connect(server.addr()).await;
    let (slow, slow_values) = large_batch(epoch, "slow");
    let frame = produce_frame(1, slow, None);
    let half = frame.len() / 2;
    stalled
        .framed
        .get_mut()
        .write_all(&frame[..half])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (quick, quick_values) = large_batch(epoch, "quick");
    let appended = tokio::time::timeout(Duration::from_secs(5), client.produce(TOPIC, 0, quick))
        .await
        .expect("the stalled producer holds up nobody");
    assert_eq!(appended.unwrap(), 0);
    stalled
        .framed
        .get_mut()
        .write_all(&frame[half..])
        .await
        .unwrap();
    match answer(&mut stalled).await.result {
        Ok(Response::Produce { base_offset, .. }) => {
            assert_eq!(base_offset, quick_values.len() as u64)
        }
        other => panic!("{other:?}"),
    }
    let end = (quick_values.len() + slow_values.len()) as u64;
    let stored = client.read_range(TOPIC, 0, 0, end).await.unwrap();
    let expected = quick_values.into_iter().chain(slow_values);
    assert!(stored.into_iter().map(|(_, value)| value).eq(expected));
    assert_eq!(spliced_count(&server), 2);
}
