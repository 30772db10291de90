//! The Kafka listener's record APIs, each in every version it advertises, spoken with
//! requests encoded by `kafka-protocol`'s client-side encoder: Produce and Fetch (Fetch's long
//! poll included), InitProducerId, producer state and committed offsets across a restart,
//! idempotent retries across the first lease grant, OffsetForLeaderEpoch, ListTransactions and
//! DeleteRecords.

use crate::support::kafka;

use fencelog::client::Client;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::kafka_protocol::{
    assert_still_serving, kafka_batch, kafka_server, name, produce_request, topic_with_records,
};
use kafka::KafkaConnection;

/// Produce in every advertised version appends (offsets in order, an idempotent retry answered
/// with its first offset), and Fetch in every advertised version returns them as Kafka batches.
#[tokio::test]
async fn produce_and_fetch_in_every_version() {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{FetchRequest, InitProducerIdRequest, ProduceRequest};
    use kafka_protocol::records::RecordBatchDecoder;

    let server = kafka_server().await;
    topic_with_records(&server, "orders", 1, &[]).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let mut expected = Vec::new();
    for version in 3..=11 {
        let values: Vec<String> = (0..2).map(|i| format!("v{version}-{i}")).collect();
        let request = produce_request("orders", kafka_batch(&values, None));
        let response = connection.call::<ProduceRequest>(version, &request).await;
        let partition = &response.responses[0].partition_responses[0];
        assert_eq!(partition.error_code, 0, "v{version}");
        assert_eq!(partition.base_offset, expected.len() as i64, "v{version}");
        expected.extend(values);
    }
    // An idempotent producer's batch, sent twice, lands once.
    let init = connection
        .call::<InitProducerIdRequest>(4, &InitProducerIdRequest::default())
        .await;
    assert_eq!(init.error_code, 0);
    let idempotent = kafka_batch(&["once".to_string()], Some((init.producer_id.0, 0)));
    for _ in 0..2 {
        let response = connection
            .call::<ProduceRequest>(9, &produce_request("orders", idempotent.clone()))
            .await;
        assert_eq!(
            response.responses[0].partition_responses[0].base_offset,
            expected.len() as i64
        );
    }
    expected.push("once".into());
    for version in 4..=12 {
        let request = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("orders")))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)])]);
        let response = connection.call::<FetchRequest>(version, &request).await;
        let partition = &response.responses[0].partitions[0];
        assert_eq!(partition.error_code, 0, "v{version}");
        assert_eq!(partition.high_watermark, expected.len() as i64);
        let mut records = partition.records.clone().expect("records");
        let values: Vec<String> = RecordBatchDecoder::decode_all(&mut records)
            .expect("Kafka batches")
            .into_iter()
            .flat_map(|set| set.records)
            .map(|record| String::from_utf8(record.value.unwrap().to_vec()).unwrap())
            .collect();
        assert_eq!(values, expected, "v{version}");
    }
}

/// InitProducerId in every advertised version: a fresh id each time, epoch 0; a transactional
/// id keeps its producer id and gets the next epoch each time (which fences the previous
/// instance); a transaction timeout above the limit is INVALID_TRANSACTION_TIMEOUT.
#[tokio::test]
async fn init_producer_id_in_every_version() {
    use kafka_protocol::messages::{InitProducerIdRequest, TransactionalId};
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let mut ids = Vec::new();
    for version in 0..=4 {
        let response = connection
            .call::<InitProducerIdRequest>(version, &InitProducerIdRequest::default())
            .await;
        assert_eq!(
            (response.error_code, response.producer_epoch),
            (0, 0),
            "v{version}"
        );
        ids.push(response.producer_id.0);
    }
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(unique, ids);
    let transactional = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx"))))
        .with_transaction_timeout_ms(60_000);
    let mut granted = Vec::new();
    for version in 0..=4 {
        let response = connection
            .call::<InitProducerIdRequest>(version, &transactional)
            .await;
        assert_eq!(response.error_code, 0, "v{version}");
        granted.push((response.producer_id.0, response.producer_epoch));
    }
    let first = granted[0].0;
    assert!(!ids.contains(&first), "a producer id of its own");
    assert_eq!(
        granted,
        (0..=4).map(|epoch| (first, epoch)).collect::<Vec<_>>(),
        "one producer id, the epoch bumped by each instance"
    );
    let too_long = transactional.with_transaction_timeout_ms(3_600_000);
    let response = connection.call::<InitProducerIdRequest>(4, &too_long).await;
    assert_eq!(response.error_code, 50, "INVALID_TRANSACTION_TIMEOUT");
}

/// A restarted server keeps a Kafka idempotent producer's state (a retry of its last batch is
/// still answered with the first offset, not appended again) and the committed offsets.
#[tokio::test]
async fn producer_state_and_committed_offsets_survive_a_restart() {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::{
        GroupId, InitProducerIdRequest, OffsetCommitRequest, OffsetFetchRequest, ProduceRequest,
    };

    let server = kafka_server().await;
    topic_with_records(&server, "orders", 1, &[]).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let init = connection
        .call::<InitProducerIdRequest>(4, &InitProducerIdRequest::default())
        .await;
    let batch = kafka_batch(&["a".into(), "b".into()], Some((init.producer_id.0, 0)));
    let first = connection
        .call::<ProduceRequest>(9, &produce_request("orders", batch.clone()))
        .await;
    assert_eq!(first.responses[0].partition_responses[0].base_offset, 0);
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("billing")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("orders")))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(2)])]);
    let committed = connection.call::<OffsetCommitRequest>(8, &commit).await;
    assert_eq!(committed.topics[0].partitions[0].error_code, 0);
    drop(connection);

    let server = server.restart().await.expect("restart");
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let retry = connection
        .call::<ProduceRequest>(9, &produce_request("orders", batch))
        .await;
    let partition = &retry.responses[0].partition_responses[0];
    assert_eq!((partition.error_code, partition.base_offset), (0, 0));
    let fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("billing")))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("orders")))
            .with_partition_indexes(vec![0])]));
    let fetched = connection.call::<OffsetFetchRequest>(7, &fetch).await;
    assert_eq!(fetched.topics[0].partitions[0].committed_offset, 2);
    let client = Client::connect(server.addr()).await.expect("connect");
    assert_eq!(
        client.list_offsets("orders", 0).await.unwrap().latest,
        2,
        "the retry after the restart appended nothing"
    );
}

/// A Kafka idempotent producer's retry of a batch it wrote before the partition's first lease
/// grant (its answer was lost) gets the batch's original offset, not INVALID_PRODUCER_EPOCH,
/// and appends nothing; its *new* batches are refused with INVALID_PRODUCER_EPOCH (not written).
#[tokio::test]
async fn an_idempotent_retry_across_the_first_lease_grant_gets_its_offset() {
    use kafka_protocol::messages::{InitProducerIdRequest, ProduceRequest};

    let server = kafka_server().await;
    topic_with_records(&server, "orders", 1, &[]).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let init = connection
        .call::<InitProducerIdRequest>(4, &InitProducerIdRequest::default())
        .await;
    let batch = kafka_batch(&["a".into(), "b".into()], Some((init.producer_id.0, 0)));
    let first = connection
        .call::<ProduceRequest>(9, &produce_request("orders", batch.clone()))
        .await;
    assert_eq!(first.responses[0].partition_responses[0].base_offset, 0);
    let client = Client::connect(server.addr()).await.expect("connect");
    client
        .acquire_lease("orders", 0, "owner", std::time::Duration::from_secs(30))
        .await
        .expect("lease");
    let retry = connection
        .call::<ProduceRequest>(9, &produce_request("orders", batch))
        .await;
    let partition = &retry.responses[0].partition_responses[0];
    assert_eq!((partition.error_code, partition.base_offset), (0, 0));
    let next = kafka_batch(&["c".into()], Some((init.producer_id.0, 2)));
    let refused = connection
        .call::<ProduceRequest>(9, &produce_request("orders", next))
        .await;
    assert_eq!(
        refused.responses[0].partition_responses[0].error_code, 47,
        "INVALID_PRODUCER_EPOCH"
    );
    assert_eq!(client.list_offsets("orders", 0).await.unwrap().latest, 2);
}

/// A transactional batch from a producer that named no transactional id is refused
/// (`TRANSACTIONAL_ID_AUTHORIZATION_FAILED`, 53) and nothing lands: in the log it would open a
/// transaction no marker closes, and read_committed readers would stop there for good.
#[tokio::test]
async fn a_transactional_batch_without_a_transactional_id_is_refused() {
    use kafka_protocol::messages::{InitProducerIdRequest, ProduceRequest};

    let server = kafka_server().await;
    topic_with_records(&server, "orders", 1, &[]).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let init = connection
        .call::<InitProducerIdRequest>(4, &InitProducerIdRequest::default())
        .await;
    let mut record =
        crate::support::kafka::kafka_record(0, "k", "v", Some((init.producer_id.0, 0)));
    record.transactional = true;
    let batch = crate::support::kafka::kafka_batch_of(
        &[record],
        kafka_protocol::records::Compression::None,
    );
    let response = connection
        .call::<ProduceRequest>(9, &produce_request("orders", batch))
        .await;
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, 53, "{partition:?}");
    let client = Client::connect(server.addr()).await.expect("connect");
    assert_eq!(client.list_offsets("orders", 0).await.unwrap().latest, 0);
    assert_still_serving(&server).await;
}

/// OffsetForLeaderEpoch in every advertised version, standalone: one leader epoch (0) for the
/// whole log, so any epoch asked ends at the log end; an unknown partition or topic is refused
/// per partition.
#[tokio::test]
async fn offset_for_leader_epoch_answers_the_log_end_in_every_version() {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::OffsetForLeaderEpochRequest;
    let server = kafka_server().await;
    topic_with_records(&server, "epochs", 1, &["a", "b", "c"]).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 2..=4 {
        let ask = |partition: i32, epoch: i32| {
            OffsetForLeaderPartition::default()
                .with_partition(partition)
                .with_current_leader_epoch(-1)
                .with_leader_epoch(epoch)
        };
        let request = OffsetForLeaderEpochRequest::default()
            .with_replica_id((-1).into())
            .with_topics(vec![
                OffsetForLeaderTopic::default()
                    .with_topic(name("epochs"))
                    .with_partitions(vec![ask(0, 0), ask(0, 7), ask(4, 0)]),
                OffsetForLeaderTopic::default()
                    .with_topic(name("nope"))
                    .with_partitions(vec![ask(0, 0)]),
            ]);
        let response = connection.call(version, &request).await;
        let answer: Vec<(i16, i32, i64)> = response.topics[0]
            .partitions
            .iter()
            .map(|p| (p.error_code, p.leader_epoch, p.end_offset))
            .collect();
        assert_eq!(
            answer,
            vec![(0, 0, 3), (0, 0, 3), (3, -1, -1)],
            "v{version}"
        );
        assert_eq!(response.topics[1].partitions[0].error_code, 3, "v{version}");
    }
}

/// `fetch.min.bytes`: a fetch asking for more bytes than the partition holds waits for more
/// records (here produced after it was sent, on another connection) rather than answering with
/// the few there are; `min_bytes` 1 answers at once with what is there.
#[tokio::test]
async fn fetch_waits_for_min_bytes() {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{FetchRequest, ProduceRequest};
    use kafka_protocol::records::RecordBatchDecoder;

    let server = kafka_server().await;
    topic_with_records(&server, "waits", 1, &[]).await;
    let mut producer = KafkaConnection::connect(server.kafka_addr()).await;
    let first = producer
        .call::<ProduceRequest>(
            9,
            &produce_request("waits", kafka_batch(&["a".into()], None)),
        )
        .await;
    assert_eq!(first.responses[0].partition_responses[0].error_code, 0);
    let fetch = |min_bytes: i32| {
        FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(20_000)
            .with_min_bytes(min_bytes)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("waits")))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)])])
    };
    let values_of = |response: &kafka_protocol::messages::FetchResponse| -> Vec<String> {
        let mut records = response.responses[0].partitions[0]
            .records
            .clone()
            .unwrap_or_default();
        RecordBatchDecoder::decode_all(&mut records)
            .expect("Kafka batches")
            .into_iter()
            .flat_map(|set| set.records)
            .map(|record| String::from_utf8(record.value.unwrap().to_vec()).unwrap())
            .collect()
    };
    let mut consumer = KafkaConnection::connect(server.kafka_addr()).await;
    let at_once = consumer.call::<FetchRequest>(12, &fetch(1)).await;
    assert_eq!(values_of(&at_once), vec!["a".to_string()]);

    let pending = consumer.send::<FetchRequest>(12, &fetch(2_000)).await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let big: Vec<String> = (0..4)
        .map(|i| format!("{i}-{}", "x".repeat(1_000)))
        .collect();
    let produced = producer
        .call::<ProduceRequest>(9, &produce_request("waits", kafka_batch(&big, None)))
        .await;
    assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);
    let waited = consumer.receive::<FetchRequest>(pending, 12).await;
    let values = values_of(&waited);
    assert_eq!(
        values.len(),
        5,
        "the fetch waited for min_bytes: {values:?}"
    );
}

/// ListTransactions in every advertised version (0..=1): a server no transactional producer has
/// used lists none, whatever the filters; an unknown state filter is echoed back (as Kafka does).
#[tokio::test]
async fn list_transactions_is_empty_in_every_version() {
    use kafka_protocol::messages::{ListTransactionsRequest, ProducerId};
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 0..=1i16 {
        let all = connection
            .call(version, &ListTransactionsRequest::default())
            .await;
        assert_eq!(all.error_code, 0, "v{version}");
        assert!(all.transaction_states.is_empty(), "v{version}");
        assert!(all.unknown_state_filters.is_empty(), "v{version}");
        let mut filtered = ListTransactionsRequest::default()
            .with_state_filters(vec![
                StrBytes::from_static_str("Ongoing"),
                StrBytes::from_static_str("Bogus"),
            ])
            .with_producer_id_filters(vec![ProducerId(7)]);
        if version >= 1 {
            filtered = filtered.with_duration_filter(60_000);
        }
        let response = connection.call(version, &filtered).await;
        assert_eq!(response.error_code, 0, "v{version}");
        assert!(response.transaction_states.is_empty(), "v{version}");
        assert_eq!(
            response.unknown_state_filters,
            vec![StrBytes::from_static_str("Bogus")],
            "v{version}"
        );
    }
    assert_still_serving(&server).await;
}

/// DeleteRecords in every advertised version (0..=2): the low watermark moves to the offset
/// (inside a batch too), ListOffsets earliest then answers it and a fetch below it is
/// OFFSET_OUT_OF_RANGE; it never moves back; -1 is the high watermark; past the high watermark,
/// unknown partitions and unknown topics are refused per partition, the others still run.
#[tokio::test]
async fn delete_records_moves_the_low_watermark_in_every_version() {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{DeleteRecordsRequest, FetchRequest};

    let server = kafka_server().await;
    let values: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 0..=2i16 {
        let topic = format!("trimmed-{version}");
        topic_with_records(&server, &topic, 2, &values).await;
        let ask = |partition: i32, offset: i64| {
            DeleteRecordsPartition::default()
                .with_partition_index(partition)
                .with_offset(offset)
        };
        let delete = |partitions: Vec<DeleteRecordsPartition>| {
            DeleteRecordsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![
                    DeleteRecordsTopic::default()
                        .with_name(name(&topic))
                        .with_partitions(partitions),
                    DeleteRecordsTopic::default()
                        .with_name(name("nope"))
                        .with_partitions(vec![ask(0, 0)]),
                ])
        };
        let request = delete(vec![
            ask(0, 5),
            ask(1, 1),
            ask(1, -1),
            ask(0, -2),
            ask(9, 0),
        ]);
        let response = connection.call(version, &request).await;
        let answers: Vec<(i32, i16, i64)> = response.topics[0]
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.error_code, p.low_watermark))
            .collect();
        let expected = vec![
            (0, 0, 5),  // inside the one batch of ten records
            (1, 1, -1), // the empty partition's high watermark is 0: out of range
            (1, 0, 0),  // -1: up to the high watermark (0)
            (0, 1, -1), // below -1: out of range
            (9, 3, -1), // no such partition
        ];
        assert_eq!(answers, expected, "v{version}");
        assert_eq!(response.topics[1].partitions[0].error_code, 3, "v{version}");

        let earliest = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name(&topic))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(-2)])]);
        let offsets = connection.call(1, &earliest).await;
        assert_eq!(offsets.topics[0].partitions[0].offset, 5, "v{version}");

        let fetch = |offset: i64| {
            FetchRequest::default()
                .with_replica_id(kafka_protocol::messages::BrokerId(-1))
                .with_max_wait_ms(0)
                .with_min_bytes(1)
                .with_max_bytes(1 << 20)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(name(&topic))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20)])])
        };
        let below = connection.call(11, &fetch(0)).await;
        assert_eq!(below.responses[0].partitions[0].error_code, 1, "v{version}");
        let at = connection.call(11, &fetch(5)).await;
        let partition = &at.responses[0].partitions[0];
        assert_eq!(partition.error_code, 0, "v{version}");
        assert_eq!(partition.log_start_offset, 5, "v{version}");
        assert!(partition.records.as_ref().is_some_and(|r| !r.is_empty()));

        let back = connection.call(version, &delete(vec![ask(0, 2)])).await;
        assert_eq!(
            (
                back.topics[0].partitions[0].error_code,
                back.topics[0].partitions[0].low_watermark
            ),
            (0, 5),
            "v{version}: never back"
        );
        let all = connection.call(version, &delete(vec![ask(0, -1)])).await;
        assert_eq!(all.topics[0].partitions[0].low_watermark, 10, "v{version}");
    }
    assert_still_serving(&server).await;
}
