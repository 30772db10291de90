//! The checks of the power-loss test after the restart, one per promise of
//! `docs/reliability.md`, section 1 ("Power loss"), and the reads they share.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use fencelog::batch::BatchBuilder;
use fencelog::client::{Client, ClientError, Outcome, TransactionalProducer};
use fencelog::protocol::{ErrorCode, FlushPolicy};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{BrokerId, FetchRequest, GroupId, OffsetFetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::writers::{kafka_init_producer_id, kafka_produce, KafkaProducer, NativeProducer};
use super::{
    Acknowledged, AUDIT, KAFKA_BATCHES, LEDGER, METRICS, METRICS_BATCH, RETENTION_MS, SETTLE, TTL,
};
use crate::support::kafka::KafkaConnection;

/// Every record of `topic`/`partition` (read_uncommitted), offset → value.
pub(super) async fn read_all(
    client: &Client,
    topic: &str,
    partition: u32,
) -> BTreeMap<u64, String> {
    let mut records = BTreeMap::new();
    let mut offset = 0;
    loop {
        let read = client
            .fetch(topic, partition, offset, 1 << 20, Duration::ZERO)
            .await
            .unwrap();
        for record in &read.records {
            let value = record.value.as_deref().unwrap_or_default();
            records.insert(record.offset, String::from_utf8_lossy(value).into_owned());
        }
        if offset >= read.high_watermark {
            return records;
        }
        assert!(
            read.next_offset > offset,
            "{topic}/{partition}: no progress at {offset}"
        );
        offset = read.next_offset;
    }
}

/// The committed values of `topic`/0, once its last stable offset reached its log end (no
/// transaction open), within [`SETTLE`].
pub(super) async fn read_committed_settled(client: &Client, topic: &str) -> Vec<String> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let end = client.list_offsets(topic, 0).await.unwrap().latest;
        let mut values = Vec::new();
        let mut offset = 0;
        loop {
            let read = client
                .fetch_committed(topic, 0, offset, 1 << 20, Duration::ZERO)
                .await
                .unwrap();
            values.extend(read.records.iter().map(|record| {
                String::from_utf8_lossy(record.value.as_deref().unwrap_or_default()).into_owned()
            }));
            if read.next_offset <= offset {
                break;
            }
            offset = read.next_offset;
        }
        if offset >= end {
            return values;
        }
        assert!(
            Instant::now() < deadline,
            "{topic}: read_committed readers stop at offset {offset} of {end} for {SETTLE:?}: a transaction stays open"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub(super) async fn check_topics(client: &Client) {
    let topics = client.list_topics().await.unwrap();
    let find = |name: &str| {
        topics
            .iter()
            .find(|topic| topic.name == name)
            .unwrap_or_else(|| panic!("topic {name} is gone after the power cut"))
    };
    let ledger = find(LEDGER);
    assert_eq!(ledger.partitions, 2);
    assert_eq!(ledger.config.flush, FlushPolicy::Always);
    assert_eq!(
        ledger.config.retention_ms,
        Some(RETENTION_MS),
        "the altered retention"
    );
    assert_eq!(find(METRICS).config.flush, FlushPolicy::Never);
    assert_eq!(find(AUDIT).config.flush, FlushPolicy::Never);
}

/// `flush always`: every acknowledged record, at its offset.
pub(super) async fn check_ledger(client: &Client, acked: &Acknowledged) {
    for partition in 0..2 {
        let records = read_all(client, LEDGER, partition).await;
        for ((_, offset), value) in acked.ledger.range((partition, 0)..(partition + 1, 0)) {
            assert_eq!(
                records.get(offset),
                Some(value),
                "acknowledged record {LEDGER}/{partition}@{offset} after the power cut"
            );
        }
    }
}

/// `flush never`: a prefix of whole batches, at least what was synced; the lost offsets are
/// given out again; a committed offset past the new end is out of range on both listeners.
pub(super) async fn check_metrics(
    client: &Client,
    kafka: SocketAddr,
    acked: &Acknowledged,
    epoch: u64,
) -> u64 {
    let records = read_all(client, METRICS, 0).await;
    let kept = records.len() as u64;
    assert!(
        kept <= acked.metrics.len() as u64,
        "{kept} records, more than were written"
    );
    let values: Vec<&String> = records.values().collect();
    let written: Vec<&String> = acked.metrics[..kept as usize].iter().collect();
    assert_eq!(
        values, written,
        "what is left is a prefix of what was written"
    );
    assert_eq!(
        records.keys().copied().collect::<Vec<_>>(),
        (0..kept).collect::<Vec<_>>()
    );
    assert!(
        kept >= acked.metrics_synced,
        "{kept} records kept, {} were synced",
        acked.metrics_synced
    );
    assert_eq!(kept % METRICS_BATCH as u64, 0, "whole batches only");
    let end = acked.metrics.len() as u64;
    assert!(kept < end, "LazyFS drops what was never synced");
    match client.fetch(METRICS, 0, end, 1 << 20, Duration::ZERO).await {
        Err(ClientError::OffsetOutOfRange {
            offset,
            earliest,
            latest,
        }) => assert_eq!((offset, earliest, latest), (end, 0, kept)),
        other => panic!("a fetch past the new log end: {other:?}"),
    }
    let mut connection = KafkaConnection::connect(kafka).await;
    let fetch = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(METRICS)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(end as i64)
                .with_partition_max_bytes(1 << 20)])]);
    let answer = connection.call::<FetchRequest>(12, &fetch).await;
    let partition = &answer.responses[0].partitions[0];
    assert_eq!(
        partition.error_code, 1,
        "OFFSET_OUT_OF_RANGE on the Kafka listener"
    );
    assert_eq!(partition.high_watermark, kept as i64);
    // The lost offsets are written again: the next batch lands at the new log end.
    let mut builder = BatchBuilder::new(epoch);
    builder.push(1_000, None, Some(b"after the cut"));
    let ack = client.produce(METRICS, 0, builder.finish()).await.unwrap();
    assert_eq!(
        ack.base_offset, kept,
        "offsets from the new log end are given out again"
    );
    kept
}

/// Producer ids: a new one above every id handed out before; exact resends of acknowledged
/// idempotent batches answered with their offsets, natively and through Kafka.
pub(super) async fn check_producers(
    client: &Client,
    kafka: SocketAddr,
    acked: &Acknowledged,
    native: &NativeProducer,
    kafka_producer: &KafkaProducer,
) {
    let highest = acked.producer_ids.iter().copied().max().unwrap();
    let fresh = client.init_producer_id().await.unwrap().producer_id;
    assert!(
        fresh > highest,
        "producer id {fresh} after the cut, {highest} before"
    );
    let mut connection = KafkaConnection::connect(kafka).await;
    let fresh = kafka_init_producer_id(&mut connection).await;
    assert!(
        fresh > highest,
        "Kafka producer id {fresh} after the cut, {highest} before"
    );

    let (bytes, base, last) = native.last.clone().unwrap();
    let end = client.list_offsets(LEDGER, 0).await.unwrap().latest;
    let ack = client.produce(LEDGER, 0, bytes).await.unwrap();
    assert_eq!(
        (ack.base_offset, ack.last_offset),
        (base, last),
        "native resend"
    );
    assert_eq!(client.list_offsets(LEDGER, 0).await.unwrap().latest, end);

    let (bytes, base) = kafka_producer.last.clone().unwrap();
    let end = client.list_offsets(LEDGER, 1).await.unwrap().latest;
    assert_eq!(
        kafka_produce(&mut connection, bytes).await,
        base,
        "Kafka resend"
    );
    assert_eq!(client.list_offsets(LEDGER, 1).await.unwrap().latest, end);
}

/// Epochs: the stale holder is fenced, the holder's epoch still writes (no lease is live after
/// a restart; the epoch is the authority), the next grant is higher, and after it the holder's
/// exact resend is still answered with its offsets while its new batches are fenced.
/// Returns the current epoch of ledger/0.
pub(super) async fn check_leases(
    client: &Client,
    native: &NativeProducer,
    stale: u64,
    holder: u64,
) -> u64 {
    let mut batch = BatchBuilder::new(stale);
    batch.push(1_000, None, Some(b"stale"));
    match client.produce(LEDGER, 0, batch.finish()).await {
        Err(ClientError::Fenced { epoch, current }) => {
            assert_eq!((epoch, current), (stale, holder))
        }
        other => panic!("a stale holder after the power cut: {other:?}"),
    }
    let offsets = client.list_offsets(LEDGER, 0).await.unwrap();
    assert_eq!(offsets.epoch, holder, "the epoch never goes back");
    let mut batch = BatchBuilder::new(holder);
    batch.push(1_000, None, Some(b"holder after the cut"));
    client.produce(LEDGER, 0, batch.finish()).await.unwrap();
    let next = client.acquire_lease(LEDGER, 0, "next", TTL).await.unwrap();
    assert!(
        next.epoch > holder,
        "next grant {} after {holder}",
        next.epoch
    );
    let (bytes, base, last) = native.last.clone().unwrap();
    let ack = client.produce(LEDGER, 0, bytes).await.unwrap();
    assert_eq!(
        (ack.base_offset, ack.last_offset),
        (base, last),
        "resend across the new lease"
    );
    let mut batch = BatchBuilder::new(holder);
    batch.push(1_000, None, Some(b"superseded holder"));
    match client.produce(LEDGER, 0, batch.finish()).await {
        Err(ClientError::Fenced { epoch, current }) => {
            assert_eq!((epoch, current), (holder, next.epoch))
        }
        other => panic!("the superseded holder: {other:?}"),
    }
    for (topic, holder) in [(METRICS, "meter"), (AUDIT, "auditor")] {
        let before = client.list_offsets(topic, 0).await.unwrap().epoch;
        assert!(before > 0, "{topic} keeps its epoch");
        let grant = client.acquire_lease(topic, 0, holder, TTL).await.unwrap();
        assert!(
            grant.epoch > before,
            "{topic}: next grant {} after {before}",
            grant.epoch
        );
    }
    next.epoch
}

/// Committed offsets, native and Kafka, come back (one past the `never` topic's new end too,
/// where `fencelog consume --group` resumes at the end with a warning).
pub(super) async fn check_groups(
    client: &Client,
    (native, kafka): (SocketAddr, SocketAddr),
    ledger_end: u64,
    metrics_end: u64,
) {
    let ledger = client
        .committed_offset("ledger-readers", LEDGER, 0)
        .await
        .unwrap()
        .expect("the ledger readers' offset");
    assert_eq!(
        (ledger.offset, ledger.metadata.as_str()),
        (ledger_end, "ledger")
    );
    let metrics = client
        .committed_offset("meter-readers", METRICS, 0)
        .await
        .unwrap()
        .expect("the metrics readers' offset");
    assert_eq!(
        metrics.offset, metrics_end,
        "kept, although past the new log end"
    );
    // The CLI's consumer of that group resumes at the new log end, and says why.
    let output = Command::new(crate::support::BIN)
        .args(["consume", METRICS, "--group", "meter-readers", "--json"])
        .args(["--addr", &native.to_string()])
        .output()
        .expect("run fencelog consume");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "fencelog consume: {stderr}");
    assert!(stderr.contains("COMMITTED_OFFSET_PAST_END"), "{stderr}");
    let mut connection = KafkaConnection::connect(kafka).await;
    let fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("kafka-readers")))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(LEDGER)))
            .with_partition_indexes(vec![1])]));
    let fetched = connection.call::<OffsetFetchRequest>(7, &fetch).await;
    assert_eq!(
        fetched.topics[0].partitions[0].committed_offset,
        KAFKA_BATCHES as i64
    );
}

/// Transactions: the committed ones stay committed (the `never` topic's too, whose commit
/// marker was written after its batch was synced), the open one is aborted, the fenced
/// instance stays fenced (its batch, under the partition's current lease epoch, is refused by
/// its producer epoch alone) and the next instance's producer epoch is higher still.
pub(super) async fn check_transactions(
    client: &Client,
    zombie: &mut TransactionalProducer,
    epoch: u64,
    successor_epoch: i16,
) {
    let end = client.list_offsets(LEDGER, 0).await.unwrap().latest;
    let refused = zombie
        .send(LEDGER, 0, epoch, &[(None, "zombie-after-the-cut".into())])
        .await;
    let error = refused.expect_err("the fenced instance wrote after the cut");
    assert_eq!(error.outcome(), Outcome::NotWritten, "{error}");
    assert_eq!(
        error.code(),
        Some(ErrorCode::InvalidProducerEpoch),
        "{error}"
    );
    assert_eq!(client.list_offsets(LEDGER, 0).await.unwrap().latest, end);
    let next = client
        .init_transaction("ledger-zombie", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(next.producer().producer_epoch > successor_epoch);

    let ledger = read_committed_settled(client, LEDGER).await;
    assert!(
        ledger.iter().any(|value| value == "committed"),
        "the committed transaction"
    );
    for hidden in ["zombie-aborted", "open-at-the-cut"] {
        assert!(
            !ledger.iter().any(|value| value == hidden),
            "{hidden} is visible"
        );
    }
    let audit = read_committed_settled(client, AUDIT).await;
    assert_eq!(
        audit,
        ["audited"],
        "the audit transaction committed before the cut"
    );
}
