//! The transaction coordinator's APIs on the wire (issue 31): every advertised version of
//! AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn and DescribeTransactions; a
//! zombie instance fenced at the partition by its successor's abort marker; a native lease
//! holder never fenced by a transaction.

use std::time::Duration;

use bytes::Bytes;
use fencelog::client::Client;
use fencelog::domain::TopicConfig;
use fencelog::testing::TestServer;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    DescribeProducersRequest, DescribeTransactionsRequest, EndTxnRequest, GroupId,
    InitProducerIdRequest, ListTransactionsRequest, OffsetFetchRequest, ProduceRequest, ProducerId,
    TopicName, TransactionalId, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::support::kafka::{kafka_batch_of, kafka_record, KafkaConnection};

const NONE: i16 = 0;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const PRODUCER_FENCED: i16 = 90;
const INVALID_TXN_STATE: i16 = 48;
const UNSTABLE_OFFSET_COMMIT: i16 = 88;

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

fn transactional_id(id: &str) -> TransactionalId {
    TransactionalId(text(id))
}

async fn server_with_topic(topic: &str, partitions: u32) -> (TestServer, Client) {
    let server = TestServer::builder()
        .kafka()
        .start()
        .await
        .expect("start server");
    let client = Client::connect(server.addr()).await.expect("connect");
    client
        .create_topic(topic, partitions, TopicConfig::default())
        .await
        .expect("create topic");
    (server, client)
}

/// InitProducerId v4 for `id`: (producer id, epoch).
async fn init(connection: &mut KafkaConnection, id: &str) -> (i64, i16) {
    let response = connection
        .call::<InitProducerIdRequest>(
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(transactional_id(id)))
                .with_transaction_timeout_ms(60_000),
        )
        .await;
    assert_eq!(response.error_code, NONE, "InitProducerId {id}");
    (response.producer_id.0, response.producer_epoch)
}

/// AddPartitionsToTxn v`version` of `partitions` of `topic`: the per-partition codes.
async fn add_partitions(
    connection: &mut KafkaConnection,
    version: i16,
    id: &str,
    (producer_id, producer_epoch): (i64, i16),
    topic: &str,
    partitions: Vec<i32>,
) -> Vec<i16> {
    let topics = vec![AddPartitionsToTxnTopic::default()
        .with_name(TopicName(text(topic)))
        .with_partitions(partitions)];
    let request = if version <= 3 {
        AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(transactional_id(id))
            .with_v3_and_below_producer_id(ProducerId(producer_id))
            .with_v3_and_below_producer_epoch(producer_epoch)
            .with_v3_and_below_topics(topics)
    } else {
        AddPartitionsToTxnRequest::default().with_transactions(vec![
            AddPartitionsToTxnTransaction::default()
                .with_transactional_id(transactional_id(id))
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(producer_epoch)
                .with_topics(topics),
        ])
    };
    let response: AddPartitionsToTxnResponse = connection.call(version, &request).await;
    let topics = if version <= 3 {
        response.results_by_topic_v3_and_below
    } else {
        response.results_by_transaction[0].topic_results.clone()
    };
    topics[0]
        .results_by_partition
        .iter()
        .map(|result| result.partition_error_code)
        .collect()
}

/// A transactional Produce (v9) of one batch of `values` at `sequence`: the partition's code.
async fn produce(
    connection: &mut KafkaConnection,
    id: &str,
    (producer_id, producer_epoch): (i64, i16),
    topic: &str,
    partition: i32,
    sequence: i32,
    values: &[&str],
) -> i16 {
    let records: Vec<_> = values
        .iter()
        .enumerate()
        .map(|(index, value)| {
            let mut record = kafka_record(index as i64, "k", value, Some((producer_id, sequence)));
            record.producer_epoch = producer_epoch;
            record.transactional = true;
            record
        })
        .collect();
    let batch: Bytes = kafka_batch_of(&records, kafka_protocol::records::Compression::None);
    let request = ProduceRequest::default()
        .with_transactional_id(Some(transactional_id(id)))
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(text(topic)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch))])]);
    let response = connection.call::<ProduceRequest>(9, &request).await;
    response.responses[0].partition_responses[0].error_code
}

async fn end(
    connection: &mut KafkaConnection,
    version: i16,
    id: &str,
    (producer_id, producer_epoch): (i64, i16),
    commit: bool,
) -> i16 {
    let response = connection
        .call::<EndTxnRequest>(
            version,
            &EndTxnRequest::default()
                .with_transactional_id(transactional_id(id))
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(producer_epoch)
                .with_committed(commit),
        )
        .await;
    response.error_code
}

/// A new instance of `id` commits one transaction of `values` on partition 0 of `topic`.
async fn commit_one(connection: &mut KafkaConnection, id: &str, topic: &str, values: &[&str]) {
    let producer = init(connection, id).await;
    assert_eq!(
        add_partitions(connection, 3, id, producer, topic, vec![0]).await,
        vec![NONE]
    );
    assert_eq!(
        produce(connection, id, producer, topic, 0, 0, values).await,
        NONE
    );
    assert_eq!(end(connection, 3, id, producer, true).await, NONE);
}

/// Every advertised version of the transaction APIs runs one committed transaction: partitions
/// added, a record written, a group's offset sent and committed with it; DescribeTransactions
/// and ListTransactions report the outcome, and the group's offset is committed.
#[tokio::test]
async fn a_transaction_commits_in_every_version() {
    let (server, client) = server_with_topic("out", 2).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 0..=4i16 {
        let id = format!("tx-v{version}");
        let producer = init(&mut connection, &id).await;
        let codes =
            add_partitions(&mut connection, version, &id, producer, "out", vec![0, 1]).await;
        assert_eq!(codes, vec![NONE, NONE], "AddPartitionsToTxn v{version}");
        assert_eq!(
            produce(&mut connection, &id, producer, "out", 1, 0, &["a", "b"]).await,
            NONE,
            "v{version}"
        );
        let group = format!("g-v{version}");
        let other = version.min(3);
        let added = connection
            .call::<AddOffsetsToTxnRequest>(
                other,
                &AddOffsetsToTxnRequest::default()
                    .with_transactional_id(transactional_id(&id))
                    .with_producer_id(ProducerId(producer.0))
                    .with_producer_epoch(producer.1)
                    .with_group_id(GroupId(text(&group))),
            )
            .await;
        assert_eq!(added.error_code, NONE, "AddOffsetsToTxn v{other}");
        let committed = connection
            .call::<TxnOffsetCommitRequest>(
                other,
                &TxnOffsetCommitRequest::default()
                    .with_transactional_id(transactional_id(&id))
                    .with_group_id(GroupId(text(&group)))
                    .with_producer_id(ProducerId(producer.0))
                    .with_producer_epoch(producer.1)
                    .with_generation_id(-1)
                    .with_member_id(text(""))
                    .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                        .with_name(TopicName(text("out")))
                        .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(0)])]),
            )
            .await;
        assert_eq!(
            committed.topics[0].partitions[0].error_code, NONE,
            "TxnOffsetCommit v{other}"
        );
        assert_eq!(
            client.committed_offset(&group, "out", 0).await.unwrap(),
            None,
            "held until the commit"
        );
        let fetch = |require_stable: bool| {
            OffsetFetchRequest::default()
                .with_group_id(GroupId(text(&group)))
                .with_require_stable(require_stable)
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(TopicName(text("out")))
                    .with_partition_indexes(vec![0])]))
        };
        let stable = connection.call::<OffsetFetchRequest>(7, &fetch(true)).await;
        assert_eq!(
            stable.topics[0].partitions[0].error_code, UNSTABLE_OFFSET_COMMIT,
            "require_stable while the transaction holds the position"
        );
        let plain = connection
            .call::<OffsetFetchRequest>(7, &fetch(false))
            .await;
        assert_eq!(plain.topics[0].partitions[0].committed_offset, -1);
        assert_eq!(end(&mut connection, other, &id, producer, true).await, NONE);
        let stable = connection.call::<OffsetFetchRequest>(7, &fetch(true)).await;
        assert_eq!(stable.topics[0].partitions[0].committed_offset, 0);
        assert_eq!(
            client
                .committed_offset(&group, "out", 0)
                .await
                .unwrap()
                .map(|committed| committed.offset),
            Some(0),
            "applied with the commit (v{other})"
        );
        // A retried EndTxn of the same outcome succeeds; the other outcome does not.
        assert_eq!(end(&mut connection, other, &id, producer, true).await, NONE);
        assert_eq!(
            end(&mut connection, other, &id, producer, false).await,
            INVALID_TXN_STATE
        );
    }
    let described = connection
        .call::<DescribeTransactionsRequest>(
            0,
            &DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![transactional_id("tx-v0"), transactional_id("nope")]),
        )
        .await;
    let state = &described.transaction_states[0];
    assert_eq!(
        (state.error_code, state.transaction_state.as_str()),
        (NONE, "CompleteCommit")
    );
    assert_eq!(described.transaction_states[1].error_code, 105);
    let listed = connection
        .call::<ListTransactionsRequest>(
            1,
            &ListTransactionsRequest::default()
                .with_state_filters(vec![StrBytes::from_static_str("CompleteCommit")]),
        )
        .await;
    assert_eq!(listed.transaction_states.len(), 5);
    // Both partitions' records are committed: the last stable offset is the high watermark.
    let offsets = client.list_offsets("out", 1).await.unwrap();
    assert_eq!(
        offsets.latest,
        5 * 3,
        "5 transactions of 2 records and a marker"
    );
}

/// A second instance of a transactional id aborts the first one's open transaction; the
/// first's later write is refused at the partition (its producer epoch is older than the abort
/// marker's) and its EndTxn is PRODUCER_FENCED; nothing of it is committed.
#[tokio::test]
async fn a_second_instance_fences_the_first_at_the_partition() {
    let (server, client) = server_with_topic("out", 1).await;
    let mut first = KafkaConnection::connect(server.kafka_addr()).await;
    let mut second = KafkaConnection::connect(server.kafka_addr()).await;
    let zombie = init(&mut first, "app").await;
    assert_eq!(
        add_partitions(&mut first, 3, "app", zombie, "out", vec![0]).await,
        vec![NONE]
    );
    assert_eq!(
        produce(&mut first, "app", zombie, "out", 0, 0, &["z1"]).await,
        NONE
    );
    let successor = init(&mut second, "app").await;
    assert_eq!(successor.0, zombie.0, "the same producer id");
    assert!(successor.1 > zombie.1, "a newer producer epoch");
    let late = produce(&mut first, "app", zombie, "out", 0, 1, &["z2"]).await;
    assert_eq!(late, INVALID_PRODUCER_EPOCH);
    assert_eq!(
        end(&mut first, 3, "app", zombie, true).await,
        PRODUCER_FENCED
    );
    assert_eq!(
        end(&mut first, 1, "app", zombie, true).await,
        INVALID_PRODUCER_EPOCH,
        "before KIP-588"
    );
    // The log: the zombie's record, then the abort marker; nothing open.
    let offsets = client.list_offsets("out", 0).await.unwrap();
    assert_eq!(offsets.latest, 2);
    let service_view = server.service();
    assert!(service_view
        .reads()
        .open_transactions("out", 0)
        .unwrap()
        .is_empty());
    let aborted = service_view
        .reads()
        .aborted_transactions("out", 0, 0, 2)
        .unwrap();
    assert_eq!(aborted.len(), 1);
}

/// A partition a native client leases is never taken by a transaction: AddPartitionsToTxn
/// answers CONCURRENT_TRANSACTIONS until the lease ends, then the transaction gets it; and
/// while transactions hold a partition a native acquire is refused, naming them.
#[tokio::test]
async fn a_native_lease_holder_is_never_fenced_by_a_transaction() {
    let (server, client) = server_with_topic("shared", 2).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let native = client
        .acquire_lease("shared", 0, "native-app", Duration::from_secs(30))
        .await
        .expect("lease");
    let producer = init(&mut connection, "tx").await;
    assert_eq!(
        add_partitions(&mut connection, 3, "tx", producer, "shared", vec![0, 1]).await,
        vec![CONCURRENT_TRANSACTIONS, NONE]
    );
    assert_eq!(
        produce(&mut connection, "tx", producer, "shared", 0, 0, &["x"]).await,
        INVALID_TXN_STATE,
        "a partition not added"
    );
    let held = client
        .acquire_lease("shared", 1, "native-app", Duration::from_secs(30))
        .await
        .expect_err("the transactions hold it");
    assert!(held.to_string().contains("kafka-transactions"), "{held}");
    client
        .release_lease("shared", 0, native.lease_id)
        .await
        .expect("release");
    assert_eq!(
        add_partitions(&mut connection, 3, "tx", producer, "shared", vec![0]).await,
        vec![NONE]
    );
    assert_eq!(
        produce(&mut connection, "tx", producer, "shared", 0, 0, &["x"]).await,
        NONE
    );
    assert_eq!(end(&mut connection, 3, "tx", producer, true).await, NONE);
    // The transaction ended: its leases are released, a native client may take the partition.
    client
        .acquire_lease("shared", 1, "native-app", Duration::from_secs(30))
        .await
        .expect("released with the transaction");
}

/// The native read side of transactions (Fetch version 1, read_committed): committed
/// records only, nothing past an open transaction, aborted records and markers left out;
/// `fencelog consume --isolation read-committed` prints the same and stops at what is
/// committed now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_readers_see_committed_records_only() {
    let (server, client) = server_with_topic("mixed", 1).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    commit_one(&mut connection, "committer", "mixed", &["a1", "a2"]).await;
    let opener = init(&mut connection, "opener").await;
    add_partitions(&mut connection, 3, "opener", opener, "mixed", vec![0]).await;
    produce(&mut connection, "opener", opener, "mixed", 0, 0, &["b1"]).await;
    let values = |records: &[fencelog::batch::Record]| -> Vec<String> {
        records
            .iter()
            .map(|record| String::from_utf8_lossy(record.value.as_deref().unwrap()).into_owned())
            .collect()
    };
    // DescribeProducers shows where the open transaction starts (kafka-transactions
    // find-hanging reads it): after a1, a2 and the commit marker.
    let described = connection
        .call::<DescribeProducersRequest>(
            0,
            &DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
                .with_name(TopicName(text("mixed")))
                .with_partition_indexes(vec![0])]),
        )
        .await;
    let producers = &described.topics[0].partitions[0].active_producers;
    let open: Vec<i64> = producers
        .iter()
        .map(|producer| producer.current_txn_start_offset)
        .collect();
    assert!(open.contains(&3) && open.contains(&-1), "{producers:?}");
    let read = client
        .fetch_committed("mixed", 0, 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        values(&read.records),
        ["a1", "a2"],
        "stops at the open transaction"
    );
    let everything = client
        .fetch("mixed", 0, 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(values(&everything.records), ["a1", "a2", "b1"]);
    // The open transaction aborts; a later one commits.
    assert_eq!(end(&mut connection, 3, "opener", opener, false).await, NONE);
    commit_one(&mut connection, "committer", "mixed", &["c1"]).await;
    let mut consumer =
        fencelog::client::Consumer::new(client.clone(), "mixed", 0, 0).with_read_committed(true);
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.extend(values(&consumer.poll(Duration::ZERO).await.unwrap()));
    }
    assert_eq!(
        seen,
        ["a1", "a2", "c1"],
        "the aborted record and the markers left out"
    );
    let output = tokio::task::spawn_blocking({
        let addr = server.addr().to_string();
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_fencelog"))
                .args([
                    "consume",
                    "mixed",
                    "--isolation",
                    "read-committed",
                    "--addr",
                    &addr,
                ])
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "a1\na2\nc1\n");
}

/// KIP-447: a TxnOffsetCommit v3 that names the consumer's member and generation is checked as
/// OffsetCommit is: a member the group does not know cannot commit positions with the output,
/// and nothing of it is held for the transaction's commit.
#[tokio::test]
async fn txn_offset_commit_checks_the_consumer_group_member() {
    let (server, client) = server_with_topic("out", 1).await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let producer = init(&mut connection, "kip447").await;
    assert_eq!(
        add_partitions(&mut connection, 3, "kip447", producer, "out", vec![0]).await,
        vec![NONE]
    );
    let added = connection
        .call::<AddOffsetsToTxnRequest>(
            3,
            &AddOffsetsToTxnRequest::default()
                .with_transactional_id(transactional_id("kip447"))
                .with_producer_id(ProducerId(producer.0))
                .with_producer_epoch(producer.1)
                .with_group_id(GroupId(text("readers"))),
        )
        .await;
    assert_eq!(added.error_code, NONE);
    let commit = |member: &str, generation: i32| {
        TxnOffsetCommitRequest::default()
            .with_transactional_id(transactional_id("kip447"))
            .with_group_id(GroupId(text("readers")))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_generation_id(generation)
            .with_member_id(text(member))
            .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(text("out")))
                .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(7)])])
    };
    let refused = connection
        .call::<TxnOffsetCommitRequest>(3, &commit("ghost", 4))
        .await;
    assert_eq!(
        refused.topics[0].partitions[0].error_code,
        kafka_protocol::ResponseError::UnknownMemberId.code(),
        "a member the group does not know"
    );
    // v2 carries no member: only the producer epoch fences it.
    let older = connection
        .call::<TxnOffsetCommitRequest>(2, &commit("", -1))
        .await;
    assert_eq!(older.topics[0].partitions[0].error_code, NONE);
    assert_eq!(
        end(&mut connection, 3, "kip447", producer, true).await,
        NONE
    );
    assert_eq!(
        client
            .committed_offset("readers", "out", 0)
            .await
            .unwrap()
            .map(|committed| committed.offset),
        Some(7)
    );
}

/// A native writer's open transaction (its partitions under its own leases) is not a Kafka
/// producer's to join: AddPartitionsToTxn with the native producer's id and epoch is
/// `INVALID_TXN_STATE`, so a Kafka producer never writes under a native writer's lease.
#[tokio::test]
async fn a_kafka_producer_cannot_join_a_native_writers_transaction() {
    let (server, client) = server_with_topic("mixed", 2).await;
    let lease = client
        .acquire_lease("mixed", 0, "native", Duration::from_secs(30))
        .await
        .unwrap();
    let mut native = client
        .init_transaction("shared-id", Duration::from_secs(60))
        .await
        .unwrap();
    native
        .send("mixed", 0, lease.epoch, &[(None, Bytes::from_static(b"n"))])
        .await
        .unwrap();
    let producer = native.producer().clone();
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    assert_eq!(
        add_partitions(
            &mut connection,
            3,
            "shared-id",
            (producer.producer_id, producer.producer_epoch),
            "mixed",
            vec![1]
        )
        .await,
        vec![INVALID_TXN_STATE]
    );
    native.commit().await.unwrap();
}
