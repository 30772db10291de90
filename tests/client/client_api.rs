//! The async client against an in-process server: every API round trip, pipelining from many
//! tasks, typed errors (fencing above all), connection-level errors, the producer's batching,
//! lease keeping and death by fencing, and the consumer's long poll.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fencelog::client::{
    BatchBuilder, Client, ClientConfig, ClientError, Consumer, Producer, ProducerConfig,
};
use fencelog::protocol::{ApiKey, ErrorCode, FlushPolicy, ProtocolError, TopicConfig};
use fencelog::server::ServerConfig;
use fencelog::testing::TestServer;

const TTL: Duration = Duration::from_secs(30);

async fn setup(topic: &str, partitions: u32) -> (TestServer, Client) {
    let server = TestServer::start().await.expect("start test server");
    let client = Client::connect(server.addr()).await.expect("connect");
    client
        .create_topic(topic, partitions, TopicConfig::default())
        .await
        .expect("create topic");
    (server, client)
}

fn batch(epoch: u64, values: &[&str]) -> Bytes {
    let mut builder = BatchBuilder::new(epoch);
    for (i, value) in values.iter().enumerate() {
        let key = format!("k{i}");
        builder.push(
            1_000 + i as i64,
            Some(key.as_bytes()),
            Some(value.as_bytes()),
        );
    }
    builder.finish()
}

/// Checks `offsets` is exactly `from..from + len` in order, reporting only the first mismatch.
fn assert_in_order(offsets: &[u64], from: u64, len: usize) {
    assert_eq!(offsets.len(), len, "wrong number of offsets");
    if let Some((index, offset)) = offsets
        .iter()
        .enumerate()
        .find(|(i, o)| **o != from + *i as u64)
    {
        panic!(
            "offset #{index} is {offset}, expected {}",
            from + index as u64
        );
    }
}

fn values(records: &[fencelog::client::Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_versions_lists_every_api() {
    let server = TestServer::start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    let info = client.api_versions().await.unwrap();
    assert!(info.server.starts_with("fencelog "), "{}", info.server);
    let keys: Vec<u16> = info.apis.iter().map(|a| a.api_key).collect();
    let expected: Vec<u16> = ApiKey::ALL.iter().map(|k| k.as_u16()).collect();
    assert_eq!(keys, expected);
    assert_eq!(client.peer_addr(), server.addr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn topics_round_trip() {
    let (_server, client) = setup("orders", 3).await;
    let config = TopicConfig {
        segment_bytes: 1 << 20,
        flush: FlushPolicy::Interval { interval_ms: 250 },
        retention_bytes: Some(1 << 30),
        retention_ms: Some(7 * 24 * 3600 * 1000),
    };
    client.create_topic("logs", 1, config).await.unwrap();

    let all = client.list_topics().await.unwrap();
    let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["logs", "orders"]);
    assert_eq!(all[0].config, config);
    assert_eq!(all[1].partitions, 3);
    assert_eq!(all[1].config, TopicConfig::default());

    let named = client.metadata(&["orders", "logs"]).await.unwrap();
    assert_eq!(named[0].name, "orders");
    assert_eq!(named[1].name, "logs");

    match client.metadata(&["nope"]).await {
        Err(ClientError::Server { code, message }) => {
            assert_eq!(code, ErrorCode::UnknownTopic);
            assert!(message.contains("nope"), "{message}");
        }
        other => panic!("expected UNKNOWN_TOPIC, got {other:?}"),
    }
    match client
        .create_topic("orders", 1, TopicConfig::default())
        .await
    {
        Err(error) => assert_eq!(error.code(), Some(ErrorCode::TopicExists)),
        Ok(()) => panic!("created a topic twice"),
    }
    match client
        .create_topic("bad/name", 1, TopicConfig::default())
        .await
    {
        Err(error) => assert_eq!(error.code(), Some(ErrorCode::InvalidConfig)),
        Ok(()) => panic!("accepted an invalid name"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_round_trip_and_typed_lease_errors() {
    let (_server, client) = setup("orders", 2).await;
    let lease = client
        .acquire_lease("orders", 0, "writer-1", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(lease.epoch, 1);
    assert_eq!(lease.ttl_ms, 10_000);
    assert_eq!(lease.lease_id_hex().len(), 32);
    assert!(
        !format!("{lease:?}").contains(&lease.lease_id_hex()),
        "Debug must redact the id"
    );

    match client.acquire_lease("orders", 0, "writer-2", TTL).await {
        Err(ClientError::LeaseHeld {
            message,
            holder,
            expires_in,
            current_epoch,
        }) => {
            assert!(message.contains("writer-1"), "{message}");
            assert_eq!(holder, "writer-1");
            assert!(
                expires_in > Duration::ZERO && expires_in <= TTL,
                "{expires_in:?}"
            );
            assert_eq!(current_epoch, 1);
        }
        other => panic!("expected LeaseHeld, got {other:?}"),
    }
    // Partitions are leased independently.
    assert_eq!(
        client
            .acquire_lease("orders", 1, "w", TTL)
            .await
            .unwrap()
            .epoch,
        1
    );

    let renewed = client
        .renew_lease("orders", 0, lease.lease_id)
        .await
        .unwrap();
    assert_eq!((renewed.epoch, renewed.ttl_ms), (1, 10_000));
    match client.renew_lease("orders", 0, lease.lease_id ^ 1).await {
        Err(ClientError::LeaseLost { current_epoch, .. }) => assert_eq!(current_epoch, 1),
        other => panic!("expected LeaseLost for a wrong id, got {other:?}"),
    }

    client
        .release_lease("orders", 0, lease.lease_id)
        .await
        .unwrap();
    match client.release_lease("orders", 0, lease.lease_id).await {
        Err(error) => assert!(matches!(error, ClientError::LeaseLost { .. }), "{error:?}"),
        Ok(()) => panic!("released twice"),
    }
    let next = client
        .acquire_lease("orders", 0, "writer-2", TTL)
        .await
        .unwrap();
    assert_eq!(next.epoch, 2);
    assert_ne!(next.lease_id, lease.lease_id);
    match client.renew_lease("orders", 0, lease.lease_id).await {
        Err(error) => {
            assert!(error.is_fencing());
            // writer-2's lease is live: the message names it rather than only the epoch.
            let message = error.to_string();
            assert!(
                message.starts_with(
                    "lease lost: the lease id does not match the live lease, which \"writer-2\" holds at epoch 2 for another "
                ),
                "{message}"
            );
        }
        Ok(_) => panic!("renewed a superseded lease"),
    }
    match client.acquire_lease("nope", 0, "w", TTL).await {
        Err(error) => assert_eq!(error.code(), Some(ErrorCode::UnknownTopic)),
        Ok(_) => panic!("leased an unknown topic"),
    }
    match client.acquire_lease("orders", 7, "w", TTL).await {
        Err(error) => assert_eq!(error.code(), Some(ErrorCode::UnknownPartition)),
        Ok(_) => panic!("leased an unknown partition"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn produce_fetch_and_list_offsets_round_trip() {
    let (_server, client) = setup("orders", 1).await;
    let empty = client.list_offsets("orders", 0).await.unwrap();
    assert_eq!((empty.earliest, empty.latest, empty.epoch), (0, 0, 0));

    let lease = client.acquire_lease("orders", 0, "w", TTL).await.unwrap();
    let ack = client
        .produce("orders", 0, batch(lease.epoch, &["a", "b", "c"]))
        .await
        .unwrap();
    assert_eq!(
        (ack.base_offset, ack.last_offset, ack.log_end_offset),
        (0, 2, 3)
    );
    let ack = client
        .produce("orders", 0, batch(lease.epoch, &["d"]))
        .await
        .unwrap();
    assert_eq!(
        (ack.base_offset, ack.last_offset, ack.log_end_offset),
        (3, 3, 4)
    );

    let offsets = client.list_offsets("orders", 0).await.unwrap();
    assert_eq!((offsets.earliest, offsets.latest, offsets.epoch), (0, 4, 1));

    let all = client
        .fetch("orders", 0, 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!((all.high_watermark, all.log_start_offset), (4, 0));
    assert_eq!(values(&all.records), ["a", "b", "c", "d"]);
    let offsets: Vec<u64> = all.records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0, 1, 2, 3]);
    assert_eq!(all.records[1].key.as_deref(), Some(&b"k1"[..]));
    assert_eq!(all.records[1].epoch, 1);
    assert_eq!(all.records[1].timestamp, 1_001);

    // The first batch starts at 0; records below the requested offset are dropped.
    let middle = client
        .fetch("orders", 0, 1, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(values(&middle.records), ["b", "c", "d"]);
    assert_eq!(middle.records[0].offset, 1);

    // At the end: nothing, after waiting up to max_wait.
    let started = Instant::now();
    let none = client
        .fetch("orders", 0, 4, 1 << 20, Duration::from_millis(200))
        .await
        .unwrap();
    assert!(none.records.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(150));

    match client.fetch("orders", 0, 99, 1 << 20, Duration::ZERO).await {
        Err(error) => assert_eq!(error.code(), Some(ErrorCode::OffsetOutOfRange)),
        Ok(result) => panic!("fetched past the end: {result:?}"),
    }
    match client
        .produce("orders", 0, Bytes::from_static(b"garbage"))
        .await
    {
        Err(error) => assert!(
            matches!(
                error.code(),
                Some(ErrorCode::InvalidBatch | ErrorCode::UnknownEpoch)
            ),
            "{error:?}"
        ),
        Ok(ack) => panic!("appended garbage: {ack:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_epoch_is_fenced_with_both_epochs() {
    let (_server, client) = setup("orders", 1).await;
    let first = client.acquire_lease("orders", 0, "old", TTL).await.unwrap();
    client
        .produce("orders", 0, batch(first.epoch, &["ok"]))
        .await
        .unwrap();
    client
        .release_lease("orders", 0, first.lease_id)
        .await
        .unwrap();
    let second = client.acquire_lease("orders", 0, "new", TTL).await.unwrap();
    assert_eq!((first.epoch, second.epoch), (1, 2));

    let error = client
        .produce("orders", 0, batch(first.epoch, &["zombie"]))
        .await
        .unwrap_err();
    match error {
        ClientError::Fenced { epoch, current } => assert_eq!((epoch, current), (1, 2)),
        ref other => panic!("expected Fenced, got {other:?}"),
    }
    assert!(error.is_fenced() && error.is_fencing() && !error.is_retriable());
    assert_eq!(error.code(), Some(ErrorCode::Fenced));
    assert_eq!(error.to_string(), "fenced: epoch 1 < current 2");

    // Too new: never granted.
    match client
        .produce("orders", 0, batch(5, &["future"]))
        .await
        .unwrap_err()
    {
        ClientError::UnknownEpoch { epoch, current } => assert_eq!((epoch, current), (5, 2)),
        other => panic!("expected UnknownEpoch, got {other:?}"),
    }
    // The zombie's write is not in the log.
    let log = client
        .fetch("orders", 0, 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(values(&log.records), ["ok"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_pipeline_on_one_connection() {
    let (_server, client) = setup("orders", 4).await;
    let mut epochs = Vec::new();
    for partition in 0..4 {
        epochs.push(
            client
                .acquire_lease("orders", partition, "w", TTL)
                .await
                .unwrap()
                .epoch,
        );
    }
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..64u32 {
        let client = client.clone();
        let partition = task % 4;
        let epoch = epochs[partition as usize];
        tasks.spawn(async move {
            let mut offsets = Vec::new();
            for i in 0..25 {
                let value = format!("{task}-{i}");
                let ack = client
                    .produce("orders", partition, batch(epoch, &[&value]))
                    .await
                    .unwrap();
                offsets.push((partition, ack.base_offset));
                // Interleave other APIs on the same connection.
                let lo = client.list_offsets("orders", partition).await.unwrap();
                assert!(lo.latest > ack.base_offset);
                client.metadata(&["orders"]).await.unwrap();
            }
            offsets
        });
    }
    let mut seen = BTreeSet::new();
    while let Some(result) = tasks.join_next().await {
        for entry in result.unwrap() {
            assert!(seen.insert(entry), "offset {entry:?} assigned twice");
        }
    }
    for partition in 0..4 {
        let dense: BTreeSet<(u32, u64)> = (0..400).map(|o| (partition, o)).collect();
        let got: BTreeSet<(u32, u64)> = seen
            .iter()
            .copied()
            .filter(|(p, _)| *p == partition)
            .collect();
        assert_eq!(got, dense, "partition {partition} offsets are not dense");
        let offsets = client.list_offsets("orders", partition).await.unwrap();
        assert_eq!(offsets.latest, 400);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bounded_in_flight_still_serves_more_callers() {
    let server = TestServer::start().await.unwrap();
    let config = ClientConfig {
        max_in_flight: 2,
        ..ClientConfig::default()
    };
    let client = Client::connect_with(server.addr(), config).await.unwrap();
    let calls = (0..200).map(|_| client.api_versions());
    let results = futures::future::join_all(calls).await;
    assert!(results.iter().all(Result::is_ok));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn producer_batches_and_acks_dense_offsets_in_order() {
    let (_server, client) = setup("events", 1).await;
    let config = ProducerConfig {
        batch_records: 100,
        ..ProducerConfig::default()
    };
    let producer = Producer::acquire(client.clone(), "events", 0, "w", TTL, config)
        .await
        .unwrap();
    assert_eq!(producer.epoch(), 1);
    assert_eq!((producer.topic(), producer.partition()), ("events", 0));
    let sends: Vec<_> = (0..2_000)
        .map(|i| producer.send(Some(Bytes::from(format!("k{i}"))), format!("v{i}")))
        .collect();
    let offsets = futures::future::try_join_all(sends).await.unwrap();
    assert_in_order(&offsets, 0, 2_000);

    // Records are in the log in send order, and they were batched: the log holds fewer batches
    // than records (each fetch answer starts at a batch boundary).
    let mut consumer = Consumer::new(client.clone(), "events", 0, 0);
    let mut all = Vec::new();
    while consumer.position() < 2_000 {
        all.extend(consumer.poll(Duration::ZERO).await.unwrap());
    }
    let expected: Vec<String> = (0..2_000).map(|i| format!("v{i}")).collect();
    assert!(values(&all) == expected, "the log is not in send order");
    assert_eq!(all[7].key.as_deref(), Some(&b"k7"[..]));
    let first = client
        .fetch("events", 0, 0, 1, Duration::ZERO)
        .await
        .unwrap();
    assert!(
        first.records.len() > 1,
        "a 1-byte fetch returns the first batch whole: it has {} records",
        first.records.len()
    );

    // A lone send is not stuck behind the batch size: linger sends it.
    let started = Instant::now();
    assert_eq!(producer.send(None, "lonely").await.unwrap(), 2_000);
    assert!(started.elapsed() < Duration::from_secs(2));
    producer.flush().await.unwrap();
    producer.close().await.unwrap();
    // close released the lease: the partition can be acquired at once.
    assert_eq!(
        client
            .acquire_lease("events", 0, "next", TTL)
            .await
            .unwrap()
            .epoch,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pipelined_batches_land_in_send_order() {
    let (_server, client) = setup("events", 1).await;
    let config = ProducerConfig {
        batch_records: 7,
        max_in_flight: 8,
        linger: Duration::from_millis(1),
        ..ProducerConfig::default()
    };
    let producer = Producer::acquire(client.clone(), "events", 0, "w", TTL, config)
        .await
        .unwrap();
    let sends: Vec<_> = (0..5_000)
        .map(|i| producer.send(None, format!("{i}")))
        .collect();
    let offsets = futures::future::try_join_all(sends).await.unwrap();
    assert_in_order(&offsets, 0, 5_000);
    let mut consumer = Consumer::new(client, "events", 0, 0);
    let mut all = Vec::new();
    while consumer.position() < 5_000 {
        all.extend(consumer.poll(Duration::ZERO).await.unwrap());
    }
    let expected: Vec<String> = (0..5_000).map(|i| i.to_string()).collect();
    assert!(values(&all) == expected, "the log is not in send order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn producer_respects_batch_bytes() {
    let (_server, client) = setup("events", 1).await;
    let config = ProducerConfig {
        batch_bytes: 4096,
        linger: Duration::from_millis(50),
        ..ProducerConfig::default()
    };
    let producer = Producer::acquire(client.clone(), "events", 0, "w", TTL, config)
        .await
        .unwrap();
    let value = "x".repeat(1000);
    let sends: Vec<_> = (0..20)
        .map(|_| producer.send(None, value.clone()))
        .collect();
    let offsets = futures::future::try_join_all(sends).await.unwrap();
    assert_in_order(&offsets, 0, 20);
    // Each batch holds at most 4 such records (4 * ~1018 + 48 <= 4096).
    let first = client
        .fetch("events", 0, 0, 1, Duration::ZERO)
        .await
        .unwrap();
    assert!(
        (1..=4).contains(&first.records.len()),
        "{}",
        first.records.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn producer_backpressure_waits_for_room() {
    let (_server, client) = setup("events", 1).await;
    let config = ProducerConfig {
        max_pending_records: 10,
        batch_records: 4,
        ..ProducerConfig::default()
    };
    let producer = Producer::acquire(client.clone(), "events", 0, "w", TTL, config)
        .await
        .unwrap();
    // Only 10 are queued by the calls; the other 290 wait for room, then all are appended.
    let sends: Vec<_> = (0..300)
        .map(|i| producer.send(None, format!("{i}")))
        .collect();
    let mut offsets = futures::future::try_join_all(sends).await.unwrap();
    offsets.sort_unstable();
    assert_in_order(&offsets, 0, 300);
    producer.close().await.unwrap();
}

// A 750 ms TTL (renewed every 250 ms) rather than a shorter one: on a loaded 2-core CI machine a
// renewal can be a few hundred milliseconds late, which is a slow machine, not a broken renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn producer_renews_its_lease_across_several_ttls() {
    let (_server, client) = setup("events", 1).await;
    let ttl = Duration::from_millis(750);
    let producer = Producer::acquire(
        client.clone(),
        "events",
        0,
        "keeper",
        ttl,
        ProducerConfig::default(),
    )
    .await
    .unwrap();
    let lease = *producer.lease().unwrap();
    assert_eq!(lease.ttl_ms, 750);
    let started = Instant::now();
    let mut sent = 0;
    while started.elapsed() < Duration::from_millis(3_000) {
        tokio::time::sleep(Duration::from_millis(150)).await;
        producer.send(None, "tick").await.unwrap();
        sent += 1;
    }
    // Four TTLs later the lease is still live (held, not expired) and the epoch unchanged.
    match client.acquire_lease("events", 0, "usurper", TTL).await {
        Err(ClientError::LeaseHeld { current_epoch, .. }) => assert_eq!(current_epoch, 1),
        other => panic!("lease was not kept alive: {other:?}"),
    }
    let renewed = client
        .renew_lease("events", 0, lease.lease_id)
        .await
        .unwrap();
    assert_eq!(renewed.epoch, 1);
    assert!(producer.error().is_none());
    assert_eq!(client.list_offsets("events", 0).await.unwrap().latest, sent);
    producer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn producer_stops_with_fenced_after_another_holder_acquires() {
    let (_server, client) = setup("events", 1).await;
    let producer = Producer::acquire(
        client.clone(),
        "events",
        0,
        "old",
        TTL,
        ProducerConfig::default(),
    )
    .await
    .unwrap();
    assert_eq!(producer.send(None, "before").await.unwrap(), 0);

    // Simulate the old holder's lease running out while it was paused: release it with its id
    // (as expiry would) and let a new holder acquire a newer epoch.
    let lease = *producer.lease().unwrap();
    client
        .release_lease("events", 0, lease.lease_id)
        .await
        .unwrap();
    let newer = client.acquire_lease("events", 0, "new", TTL).await.unwrap();
    assert_eq!(newer.epoch, 2);

    // Several sends in flight: all fail with Fenced carrying both epochs.
    let sends: Vec<_> = (0..10)
        .map(|i| producer.send(None, format!("late {i}")))
        .collect();
    for result in futures::future::join_all(sends).await {
        match result.map_err(|failed| failed.error) {
            Err(ClientError::Fenced { epoch, current }) => assert_eq!((epoch, current), (1, 2)),
            other => panic!("expected Fenced, got {other:?}"),
        }
    }
    // The producer is dead: later sends fail at once with the same error, as does flush.
    match producer.send(None, "after").await {
        Err(error) => assert_eq!(error.to_string(), "fenced: epoch 1 < current 2"),
        Ok(offset) => panic!("a fenced producer wrote at {offset}"),
    }
    assert!(producer.error().is_some_and(|e| e.is_fenced()));
    assert!(producer.flush().await.unwrap_err().is_fenced());
    assert!(producer.close().await.unwrap_err().is_fenced());
    // Only the record from before the takeover is in the log.
    let log = client
        .fetch("events", 0, 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(values(&log.records), ["before"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn producer_stops_when_renewal_finds_the_lease_lost() {
    let (_server, client) = setup("events", 1).await;
    let producer = Producer::acquire(
        client.clone(),
        "events",
        0,
        "w",
        Duration::from_millis(300),
        ProducerConfig::default(),
    )
    .await
    .unwrap();
    producer.send(None, "one").await.unwrap();
    // The lease vanishes without a new holder: only the renewal can notice.
    let lease = *producer.lease().unwrap();
    client
        .release_lease("events", 0, lease.lease_id)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while producer.error().is_none() {
        assert!(Instant::now() < deadline, "renewal never reported the loss");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    match producer
        .send(None, "two")
        .await
        .map_err(|failed| failed.error)
    {
        Err(ClientError::LeaseLost { current_epoch, .. }) => assert_eq!(current_epoch, 1),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert_eq!(client.list_offsets("events", 0).await.unwrap().latest, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn producer_with_external_epoch_and_invalid_config() {
    let (_server, client) = setup("events", 1).await;
    let lease = client.acquire_lease("events", 0, "cli", TTL).await.unwrap();
    let producer = Producer::with_epoch(
        client.clone(),
        "events",
        0,
        lease.epoch,
        ProducerConfig::default(),
    )
    .await
    .unwrap();
    assert!(producer.lease().is_none());
    assert_eq!(producer.send(None, "x").await.unwrap(), 0);
    producer.close().await.unwrap();
    // close() did not release a lease it does not own.
    assert!(client
        .renew_lease("events", 0, lease.lease_id)
        .await
        .is_ok());

    let bad = ProducerConfig {
        batch_records: 0,
        ..ProducerConfig::default()
    };
    assert!(matches!(
        Producer::with_epoch(client, "events", 0, 1, bad).await,
        Err(ClientError::InvalidArgument(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_long_poll_returns_when_data_arrives() {
    let (server, client) = setup("events", 1).await;
    let lease = client.acquire_lease("events", 0, "w", TTL).await.unwrap();
    client
        .produce("events", 0, batch(lease.epoch, &["a", "b"]))
        .await
        .unwrap();

    let reader = Client::connect(server.addr()).await.unwrap();
    let mut consumer = Consumer::new(reader, "events", 0, 1);
    assert_eq!(values(&consumer.poll(Duration::ZERO).await.unwrap()), ["b"]);
    assert_eq!(consumer.position(), 2);
    assert_eq!(consumer.high_watermark(), Some(2));

    let poller = tokio::spawn(async move {
        let started = Instant::now();
        let records = consumer.poll(Duration::from_secs(10)).await.unwrap();
        (records, started.elapsed(), consumer)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    client
        .produce("events", 0, batch(lease.epoch, &["c"]))
        .await
        .unwrap();
    let (records, waited, consumer) = poller.await.unwrap();
    assert_eq!(values(&records), ["c"]);
    assert!(
        waited >= Duration::from_millis(250),
        "returned before data: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(5),
        "long poll did not wake: {waited:?}"
    );
    assert_eq!(consumer.position(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_and_producer_can_share_a_connection() {
    // Responses come in request order, so a long poll holds back what is queued behind it —
    // but the produce behind it is still executed, which ends the poll.
    let (_server, client) = setup("events", 1).await;
    let lease = client.acquire_lease("events", 0, "w", TTL).await.unwrap();
    let mut consumer = Consumer::new(client.clone(), "events", 0, 0);
    let poll = tokio::spawn(async move { consumer.poll(Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    client
        .produce("events", 0, batch(lease.epoch, &["shared"]))
        .await
        .unwrap();
    assert_eq!(values(&poll.await.unwrap().unwrap()), ["shared"]);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn request_timeout_is_reported_and_the_connection_survives() {
    let (_server, _) = setup("events", 1).await;
    let config = ClientConfig {
        request_timeout: Duration::from_millis(200),
        ..ClientConfig::default()
    };
    let client = Client::connect_with(_server.addr(), config).await.unwrap();
    // A long poll answered in order delays the request behind it past its timeout.
    let poller = client.clone();
    let poll = tokio::spawn(async move {
        poller
            .fetch("events", 0, 0, 1 << 20, Duration::from_millis(1_000))
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    match client.list_offsets("events", 0).await {
        Err(ClientError::Timeout { after }) => assert_eq!(after, Duration::from_millis(200)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    // The fetch itself is allowed max_wait + slack, and the connection keeps working.
    assert!(poll.await.unwrap().unwrap().records.is_empty());
    assert_eq!(client.list_offsets("events", 0).await.unwrap().latest, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn too_many_connections_fails_the_client_with_the_server_error() {
    let config = ServerConfig {
        max_connections: 1,
        ..ServerConfig::default()
    };
    let server = TestServer::builder()
        .server_config(config)
        .start()
        .await
        .unwrap();
    let first = Client::connect(server.addr()).await.unwrap();
    first.api_versions().await.unwrap();
    // ApiVersions is retried (on new connections, refused alike) until the request timeout
    // runs out; a read that runs out of time then reports the last refusal, not the timeout.
    let second = Client::builder()
        .addr(server.addr().to_string())
        .request_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    // The refusal is sent unprompted with correlation id 0; give it time to arrive.
    tokio::time::sleep(Duration::from_millis(200)).await;
    match second.api_versions().await {
        Err(ClientError::Server { code, message }) => {
            assert_eq!(code, ErrorCode::TooManyConnections);
            assert!(message.contains("maximum"), "{message}");
        }
        // A later refused connection may be reset before its refusal is read.
        Err(ClientError::Io(_) | ClientError::Disconnected) => {}
        other => panic!("expected TOO_MANY_CONNECTIONS, got {other:?}"),
    }
    first.api_versions().await.unwrap();
    // Once the first client is gone there is room: the second reconnects by itself.
    drop(first);
    tokio::time::sleep(Duration::from_millis(100)).await;
    second.api_versions().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn frame_too_large_fails_pending_requests_with_the_server_error() {
    let config = ServerConfig {
        max_frame_bytes: 64 * 1024,
        ..ServerConfig::default()
    };
    let server = TestServer::builder()
        .server_config(config)
        .start()
        .await
        .unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("events", 1, TopicConfig::default())
        .await
        .unwrap();
    let lease = client.acquire_lease("events", 0, "w", TTL).await.unwrap();
    let big = "x".repeat(100 * 1024);
    match client
        .produce("events", 0, batch(lease.epoch, &[&big]))
        .await
    {
        Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::FrameTooLarge),
        other => panic!("expected FRAME_TOO_LARGE, got {other:?}"),
    }
    // The server closed the connection; the next call opens a new one.
    client.api_versions().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oversized_request_is_refused_locally_without_breaking_the_connection() {
    let (server, _) = setup("events", 1).await;
    let config = ClientConfig {
        max_frame_bytes: 4096,
        ..ClientConfig::default()
    };
    let client = Client::connect_with(server.addr(), config).await.unwrap();
    let lease = client.acquire_lease("events", 0, "w", TTL).await.unwrap();
    let big = "x".repeat(8192);
    match client
        .produce("events", 0, batch(lease.epoch, &[&big]))
        .await
    {
        Err(ClientError::Protocol(ProtocolError::FrameTooLarge { max, .. })) => {
            assert_eq!(max, 4096)
        }
        other => panic!("expected a local FrameTooLarge, got {other:?}"),
    }
    assert_eq!(
        client
            .produce("events", 0, batch(lease.epoch, &["small"]))
            .await
            .unwrap()
            .base_offset,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_shutdown_disconnects_the_client() {
    let (server, _) = setup("events", 1).await;
    let client = Client::builder()
        .addr(server.addr().to_string())
        .reconnect_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    server.shutdown().await;
    // The connection is gone and nothing listens any more: reconnecting fails.
    match client.api_versions().await {
        Err(ClientError::Disconnected | ClientError::Io(_) | ClientError::Connect { .. }) => {}
        other => panic!("expected a disconnection, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connect_errors_are_typed() {
    // Bind then drop a listener: nothing listens on that port any more.
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    match Client::connect(addr).await {
        Err(ClientError::Connect { addr: tried, .. }) => assert_eq!(tried, addr),
        other => panic!("expected Connect, got {other:?}"),
    }
    assert!(matches!(
        Client::connect("not an address").await,
        Err(ClientError::Resolve { .. })
    ));
}

#[test]
fn lease_ids_parse_and_format() {
    use fencelog::client::{format_lease_id, parse_lease_id};
    let id = 0x0123456789abcdeffedcba9876543210u128;
    let text = format_lease_id(id);
    assert_eq!(text, "0123456789abcdeffedcba9876543210");
    assert_eq!(parse_lease_id(&text).unwrap(), id);
    assert_eq!(parse_lease_id("0xFF").unwrap(), 255);
    assert_eq!(format_lease_id(255).len(), 32);
    for bad in ["", "xyz", "0x", &"f".repeat(33)] {
        assert!(parse_lease_id(bad).is_err(), "{bad:?}");
    }
}
