//! The consumer as a stream and its builder's start positions, the timestamp lookup behind
//! `StartAt::Timestamp` (exact across segments and with timestamps out of offset order), the
//! typed out-of-range error, and a consumer that continues from its position after its
//! connection is cut.

use std::time::Duration;

use futures::StreamExt;

use fencelog::client::{BatchBuilder, Client, ClientError, Consumer, Lease, StartAt};
use fencelog::protocol::TopicConfig;
use fencelog::testing::TestServer;
use fencelog::testing_proxy::Proxy;

const TTL: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(5);

async fn setup(config: TopicConfig) -> (TestServer, Client, Lease) {
    let server = TestServer::start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client.create_topic("events", 1, config).await.unwrap();
    let lease = client
        .acquire_lease("events", 0, "writer", TTL)
        .await
        .unwrap();
    (server, client, lease)
}

/// Appends one batch whose records have these `(timestamp, value)` pairs.
async fn produce(client: &Client, lease: &Lease, records: &[(i64, &str)]) {
    let mut batch = BatchBuilder::new(lease.epoch);
    for (timestamp, value) in records {
        batch.push(*timestamp, None, Some(value.as_bytes()));
    }
    client.produce("events", 0, batch.finish()).await.unwrap();
}

async fn next_value(consumer: &mut Consumer) -> (u64, String) {
    let record = tokio::time::timeout(WAIT, consumer.next())
        .await
        .expect("a record in time")
        .expect("the stream never ends")
        .expect("no error");
    let value = String::from_utf8(record.value.unwrap().to_vec()).unwrap();
    (record.offset, value)
}

/// The stream yields every record once, in offset order, across batches and polls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_yields_records_one_by_one_in_order() {
    let (server, client, lease) = setup(TopicConfig::default()).await;
    produce(&client, &lease, &[(1, "a"), (1, "b")]).await;
    produce(&client, &lease, &[(1, "c")]).await;
    let reader = Client::connect(server.addr()).await.unwrap();
    let mut consumer = Consumer::builder(reader, "events", 0)
        .max_wait(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    for (offset, value) in [(0, "a"), (1, "b"), (2, "c")] {
        assert_eq!(next_value(&mut consumer).await, (offset, value.to_owned()));
    }
    // Caught up: the stream long-polls until a new record arrives.
    let later = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        produce(&client, &lease, &[(1, "d")]).await;
    });
    assert_eq!(next_value(&mut consumer).await, (3, "d".to_owned()));
    later.await.unwrap();
    assert_eq!(consumer.position(), 4);
}

/// Each start position of the builder starts where it says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builder_start_positions() {
    let (server, client, lease) = setup(TopicConfig::default()).await;
    for (index, value) in ["a", "b", "c", "d"].iter().enumerate() {
        produce(&client, &lease, &[(1000 * index as i64, value)]).await;
    }
    let reader = Client::connect(server.addr()).await.unwrap();
    let build = |start| {
        Consumer::builder(reader.clone(), "events", 0)
            .start(start)
            .build()
    };
    assert_eq!(build(StartAt::Earliest).await.unwrap().position(), 0);
    assert_eq!(build(StartAt::Latest).await.unwrap().position(), 4);
    assert_eq!(build(StartAt::Offset(2)).await.unwrap().position(), 2);
    assert_eq!(build(StartAt::Timestamp(1500)).await.unwrap().position(), 2);
    // No record that recent: start at the end.
    assert_eq!(
        build(StartAt::Timestamp(9_999)).await.unwrap().position(),
        4
    );
    let mut consumer = build(StartAt::Timestamp(2000)).await.unwrap();
    assert_eq!(next_value(&mut consumer).await, (2, "c".to_owned()));
}

/// The lookup finds the smallest offset whose timestamp reaches T, across several segments,
/// inside multi-record batches, and when timestamps do not follow offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_for_timestamp_is_exact_across_segments() {
    let config = TopicConfig {
        segment_bytes: 4096,
        ..TopicConfig::default()
    };
    let (_server, client, lease) = setup(config).await;
    let padding = "x".repeat(1000);
    // Offsets 0..20, timestamps 0, 1000, ..., 19000: about four batches per segment.
    for index in 0..20 {
        produce(&client, &lease, &[(1000 * index, &padding)]).await;
    }
    produce(&client, &lease, &[(500, "early")]).await; // offset 20
    produce(&client, &lease, &[(30_000, "late")]).await; // offset 21
    produce(
        &client,
        &lease,
        &[(40_000, "x"), (40_010, "y"), (40_020, "z")],
    )
    .await; // 22..25
    let lookup = |timestamp| client.offset_for_timestamp("events", 0, timestamp);
    assert_eq!(lookup(i64::MIN).await.unwrap(), Some(0));
    assert_eq!(lookup(0).await.unwrap(), Some(0));
    assert_eq!(lookup(400).await.unwrap(), Some(1));
    assert_eq!(lookup(7000).await.unwrap(), Some(7));
    assert_eq!(lookup(7001).await.unwrap(), Some(8));
    assert_eq!(lookup(19_000).await.unwrap(), Some(19));
    assert_eq!(lookup(19_001).await.unwrap(), Some(21));
    assert_eq!(lookup(40_005).await.unwrap(), Some(23));
    assert_eq!(lookup(40_020).await.unwrap(), Some(24));
    assert_eq!(lookup(40_021).await.unwrap(), None);
}

/// On an empty partition no offset has a timestamp.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_for_timestamp_on_an_empty_partition_is_none() {
    let (_server, client, _lease) = setup(TopicConfig::default()).await;
    assert_eq!(
        client.offset_for_timestamp("events", 0, 0).await.unwrap(),
        None
    );
}

/// A poll beyond the log fails with the typed error carrying the range, and `seek` recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_is_typed_with_the_range() {
    let (server, client, lease) = setup(TopicConfig::default()).await;
    produce(&client, &lease, &[(1, "a"), (1, "b")]).await;
    let reader = Client::connect(server.addr()).await.unwrap();
    let mut consumer = Consumer::new(reader, "events", 0, 100);
    match consumer.poll(Duration::ZERO).await {
        Err(ClientError::OffsetOutOfRange {
            offset,
            earliest,
            latest,
        }) => assert_eq!((offset, earliest, latest), (100, 0, 2)),
        other => panic!("expected OffsetOutOfRange, got {other:?}"),
    }
    // The stream yields the same error, then keeps working after a seek.
    assert!(matches!(
        consumer.next().await,
        Some(Err(ClientError::OffsetOutOfRange { .. }))
    ));
    consumer.seek(1);
    assert_eq!(next_value(&mut consumer).await, (1, "b".to_owned()));
}

/// Records the stream buffered are what the next `poll` returns: one position for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_returns_what_the_stream_buffered() {
    let (server, client, lease) = setup(TopicConfig::default()).await;
    produce(&client, &lease, &[(1, "a"), (1, "b"), (1, "c")]).await;
    let reader = Client::connect(server.addr()).await.unwrap();
    let mut consumer = Consumer::new(reader, "events", 0, 0);
    assert_eq!(next_value(&mut consumer).await, (0, "a".to_owned()));
    let rest = consumer.poll(Duration::ZERO).await.unwrap();
    let offsets: Vec<u64> = rest.iter().map(|record| record.offset).collect();
    assert_eq!(offsets, [1, 2]);
    assert_eq!(consumer.position(), 3);
}

/// When the consumer's connection is cut mid-stream it reconnects and continues from its
/// position: no record is lost or repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_continues_from_its_position_after_a_cut() {
    let (server, client, lease) = setup(TopicConfig::default()).await;
    for value in ["a", "b", "c"] {
        produce(&client, &lease, &[(1, value)]).await;
    }
    let proxy = Proxy::start(server.addr()).await.unwrap();
    let reader = Client::connect(proxy.addr()).await.unwrap();
    let mut consumer = Consumer::builder(reader, "events", 0)
        .max_bytes(1) // one batch per poll
        .max_wait(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let mut seen = vec![next_value(&mut consumer).await];
    proxy.cut_all_and_wait().await;
    for value in ["d", "e"] {
        produce(&client, &lease, &[(1, value)]).await;
    }
    for _ in 0..4 {
        seen.push(next_value(&mut consumer).await);
    }
    let values: Vec<&str> = seen.iter().map(|(_, value)| value.as_str()).collect();
    assert_eq!(values, ["a", "b", "c", "d", "e"]);
    assert!(proxy.connections() >= 2);
}
