//! The idempotent producer through a network that fails: connections cut after the server got
//! the requests but before the client got the answers, a lease that outlives a TCP blip, a
//! batch that fails for good, and `lost()` when a newer writer takes over.

use std::time::Duration;

use bytes::Bytes;
use fencelog::client::{Client, ClientError, Consumer, Producer};
use fencelog::testing::TestServer;
use fencelog::testing_proxy::Proxy;

const TTL: Duration = Duration::from_secs(10);

async fn setup() -> (TestServer, Proxy, Client) {
    let server = TestServer::start().await.unwrap();
    let proxy = Proxy::start(server.addr()).await.unwrap();
    let direct = Client::connect(server.addr()).await.unwrap();
    direct
        .create_topic("events", 1, Default::default())
        .await
        .unwrap();
    (server, proxy, direct)
}

/// Every value of the partition, in offset order.
async fn all_values(client: &Client) -> Vec<String> {
    let end = client.list_offsets("events", 0).await.unwrap().latest;
    let mut consumer = Consumer::new(client.clone(), "events", 0, 0);
    let mut values = Vec::new();
    while consumer.position() < end {
        for record in consumer.poll(Duration::ZERO).await.unwrap() {
            values.push(String::from_utf8(record.value.unwrap().to_vec()).unwrap());
        }
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_lost_with_their_connections_are_resent_and_land_once() {
    let (_server, proxy, direct) = setup().await;
    let client = Client::connect(proxy.addr()).await.unwrap();
    let producer = Producer::builder(client, "events", 0)
        .lease("writer", TTL)
        .batch_records(50)
        .linger(Duration::from_millis(1))
        .build()
        .await
        .unwrap();
    proxy.cut_after_requests(7);
    let sends: Vec<_> = (0..5_000)
        .map(|i| producer.send(None, format!("{i}")))
        .collect();
    let offsets = futures::future::try_join_all(sends).await.unwrap();
    assert_eq!(offsets, (0..5_000).collect::<Vec<u64>>());
    assert!(producer.stats().resends > 0, "the proxy never cut");
    assert!(proxy.connections() > 2);
    let expected: Vec<String> = (0..5_000).map(|i| i.to_string()).collect();
    assert_eq!(all_values(&direct).await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_outlives_a_tcp_blip() {
    let (_server, proxy, direct) = setup().await;
    let client = Client::connect(proxy.addr()).await.unwrap();
    let producer = Producer::builder(client, "events", 0)
        .lease("writer", Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    producer.send(None, "before").await.unwrap();
    proxy.cut_all_and_wait().await;
    proxy.refuse_connections_for(Duration::from_millis(300));
    // Renewals fail for a while, then reconnect; the lease (2 s) never lapses.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(producer.error().is_none(), "{:?}", producer.error());
    assert_eq!(producer.send(None, "after").await.unwrap(), 1);
    assert_eq!(
        direct.list_offsets("events", 0).await.unwrap().epoch,
        producer.epoch()
    );
    assert_eq!(all_values(&direct).await, ["before", "after"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_batch_halts_the_producer_until_it_resumes() {
    let (_server, _proxy, direct) = setup().await;
    let producer = Producer::builder(direct.clone(), "events", 0)
        .lease("writer", TTL)
        .batch_records(10)
        .build()
        .await
        .unwrap();
    let first: Vec<_> = (0..30)
        .map(|i| producer.send(None, format!("a{i}")))
        .collect();
    // Larger than the server's batch limit: refused for good.
    let huge = producer.send(None, Bytes::from(vec![b'x'; 9 * 1024 * 1024]));
    let behind: Vec<_> = (0..30)
        .map(|i| producer.send(None, format!("b{i}")))
        .collect();
    futures::future::try_join_all(first).await.unwrap();
    let failed = huge.await.unwrap_err();
    assert!(
        matches!(failed.error, ClientError::Server { .. }),
        "{failed:?}"
    );
    assert_eq!(
        failed.value().len(),
        9 * 1024 * 1024,
        "the record is given back"
    );
    for send in futures::future::join_all(behind).await {
        let failed = send.unwrap_err();
        assert!(
            matches!(failed.error, ClientError::ProducerHalted { .. }),
            "{failed:?}"
        );
        assert!(failed.value().starts_with(b"b"));
    }
    assert!(matches!(
        producer.send(None, "still halted").await.unwrap_err().error,
        ClientError::ProducerHalted { .. }
    ));
    producer.resume().await.unwrap();
    assert_eq!(producer.send(None, "resumed").await.unwrap(), 30);
    let mut expected: Vec<String> = (0..30).map(|i| format!("a{i}")).collect();
    expected.push("resumed".into());
    assert_eq!(all_values(&direct).await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_resolves_when_a_newer_writer_takes_over() {
    // The lease clock is the server's manual clock: the old writer's lease "expires" while it
    // believes it still leads, as after a long pause.
    let server = TestServer::builder().manual_clock().start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("events", 1, Default::default())
        .await
        .unwrap();
    let producer = Producer::builder(client.clone(), "events", 0)
        .lease("old", TTL)
        .build()
        .await
        .unwrap();
    let lost = producer.lost();
    producer.send(None, "one").await.unwrap();
    server.advance(TTL * 2);
    let newer = client.acquire_lease("events", 0, "new", TTL).await.unwrap();
    assert!(newer.epoch > producer.epoch());
    // The old writer learns it at its next write (or renewal), and `lost()` fires.
    let stale = producer.send(None, "late").await.unwrap_err();
    assert!(stale.error.is_fencing(), "{stale:?}");
    let reason = tokio::time::timeout(Duration::from_secs(10), lost)
        .await
        .expect("lost() resolves");
    assert!(reason.is_fencing(), "{reason:?}");
    assert!(producer.error().is_some());
}

/// The case on a standalone server: a batch reaches the server, the proxy swallows its
/// answer, a newer lease is granted before the producer resends, and the resend (same producer
/// id, producer epoch, sequences, CRC) is answered with its original offset: the send reports
/// the record appended, and it is in the log once. A *new* batch of the old epoch is then
/// refused as fenced, and reported not written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_across_a_newer_lease_of_a_batch_in_the_log_is_reported_appended() {
    let (_server, proxy, direct) = setup().await;
    let old = direct.acquire_lease("events", 0, "a", TTL).await.unwrap();
    let client = Client::connect(proxy.addr()).await.unwrap();
    let producer = Producer::builder(client, "events", 0)
        .epoch(old.epoch)
        .linger(Duration::from_millis(1))
        .delivery_timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    assert_eq!(producer.send(None, "first").await.unwrap(), 0);
    // The next request through the proxy (the produce) reaches the server, its answer does not,
    // and the producer cannot reconnect until the test let it.
    proxy.refuse_connections_for(Duration::from_secs(3));
    proxy.cut_after_requests(1);
    let lost = tokio::spawn(producer.send(None, "answer lost"));
    while direct.list_offsets("events", 0).await.unwrap().latest < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    proxy.stop_cutting_after_requests();
    direct
        .release_lease("events", 0, old.lease_id)
        .await
        .unwrap();
    let newer = direct.acquire_lease("events", 0, "b", TTL).await.unwrap();
    assert!(newer.epoch > old.epoch);
    let offset = tokio::time::timeout(Duration::from_secs(20), lost)
        .await
        .expect("the resend is answered")
        .unwrap()
        .expect("a resend of a batch in the log is reported appended");
    assert_eq!(offset, 1);
    assert!(producer.stats().resends > 0, "the answer was never lost");
    assert_eq!(all_values(&direct).await, ["first", "answer lost"]);
    let late = producer
        .send(None, "new under the old epoch")
        .await
        .unwrap_err();
    assert!(late.error.is_fenced(), "{late:?}");
    assert_eq!(late.outcome(), fencelog::client::Outcome::NotWritten);
    assert_eq!(all_values(&direct).await, ["first", "answer lost"]);
}
