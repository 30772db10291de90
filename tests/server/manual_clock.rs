//! Stale-leader tests without sleeping: a server whose lease clock only moves when the test
//! advances it (`TestServer::start_with_manual_clock`).

use std::time::Duration;

use fencelog::batch::BatchBuilder;
use fencelog::client::Client;
use fencelog::protocol::TopicConfig;
use fencelog::testing::TestServer;

fn batch(epoch: u64, value: &[u8]) -> bytes::Bytes {
    let mut builder = BatchBuilder::new(epoch);
    builder.push(fencelog::batch::now_ms(), None, Some(value));
    builder.finish()
}

/// A lease does not lapse while the clock stands still, however long the test takes; advanced
/// past its TTL it lapses, the next holder gets epoch 2, and the paused holder's write is fenced.
#[tokio::test]
async fn advancing_the_clock_expires_a_lease_and_fences_its_holder() {
    let server = TestServer::builder().manual_clock().start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("t", 1, TopicConfig::default())
        .await
        .unwrap();
    let ttl = Duration::from_secs(60);
    let a = client.acquire_lease("t", 0, "a", ttl).await.unwrap();
    assert_eq!(a.epoch, 1);

    server.advance(Duration::from_secs(59));
    let held = client.acquire_lease("t", 0, "b", ttl).await.unwrap_err();
    assert!(held.to_string().contains("held by"), "{held}");
    client.produce("t", 0, batch(1, b"a1")).await.unwrap();

    server.advance(Duration::from_secs(2));
    let b = client.acquire_lease("t", 0, "b", ttl).await.unwrap();
    assert_eq!(b.epoch, 2);
    let stale = client.produce("t", 0, batch(1, b"a2")).await.unwrap_err();
    assert!(stale.is_fenced(), "{stale}");
    assert!(client.renew_lease("t", 0, a.lease_id).await.is_err());
    client.produce("t", 0, batch(2, b"b1")).await.unwrap();
}
