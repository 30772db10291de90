//! Native atomic appends (issue 31): a writer appends to several partitions under its own
//! leases and commits them all or none; a partition granted to another writer meanwhile fences
//! the commit (nothing of it is ever visible), and a new instance of the transactional id
//! fences the old one.

use std::time::Duration;

use bytes::Bytes;
use fencelog::client::{Client, ClientError, Lease, Outcome, TransactionalProducer};
use fencelog::domain::TopicConfig;
use fencelog::protocol::ErrorCode;
use fencelog::testing::TestServer;

const TTL: Duration = Duration::from_secs(30);
const TIMEOUT: Duration = Duration::from_secs(60);

async fn server_with_topic(topic: &str, partitions: u32) -> (TestServer, Client) {
    let server = TestServer::builder().start().await.expect("start server");
    let client = Client::connect(server.addr()).await.expect("connect");
    client
        .create_topic(topic, partitions, TopicConfig::default())
        .await
        .expect("create topic");
    (server, client)
}

fn record(value: &str) -> (Option<Bytes>, Bytes) {
    (None, Bytes::from(value.to_owned()))
}

/// The lease of `ledger` partition `partition` as `bank`.
async fn bank_lease(client: &Client, partition: u32) -> Lease {
    client
        .acquire_lease("ledger", partition, "bank", TTL)
        .await
        .unwrap()
}

/// The leases of `ledger` partitions 0 and 1 as `bank`, and a transaction of `transfer` that
/// wrote "debit 10" to partition 0 and "credit 10" to partition 1, open.
async fn open_transfer(client: &Client) -> (Lease, Lease, TransactionalProducer) {
    let debit = bank_lease(client, 0).await;
    let credit = bank_lease(client, 1).await;
    let mut producer = client.init_transaction("transfer", TIMEOUT).await.unwrap();
    producer
        .send("ledger", 0, debit.epoch, &[record("debit 10")])
        .await
        .unwrap();
    producer
        .send("ledger", 1, credit.epoch, &[record("credit 10")])
        .await
        .unwrap();
    (debit, credit, producer)
}

/// The values a read_committed (or, `committed` false, read_uncommitted) reader sees now.
async fn values(client: &Client, topic: &str, partition: u32, committed: bool) -> Vec<String> {
    let read = if committed {
        client
            .fetch_committed(topic, partition, 0, 1 << 20, Duration::ZERO)
            .await
    } else {
        client
            .fetch(topic, partition, 0, 1 << 20, Duration::ZERO)
            .await
    }
    .expect("fetch");
    read.records
        .iter()
        .filter_map(|record| record.value.as_deref())
        .map(|value| String::from_utf8_lossy(value).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_publishes_every_partition_at_once_and_an_abort_none() {
    let (_server, client) = server_with_topic("ledger", 2).await;
    let (debit, credit, mut producer) = open_transfer(&client).await;
    assert!(
        values(&client, "ledger", 0, true).await.is_empty(),
        "open: held back"
    );
    assert_eq!(values(&client, "ledger", 0, false).await, ["debit 10"]);
    producer.commit().await.unwrap();
    assert_eq!(values(&client, "ledger", 0, true).await, ["debit 10"]);
    assert_eq!(values(&client, "ledger", 1, true).await, ["credit 10"]);

    producer
        .send("ledger", 0, debit.epoch, &[record("debit 99")])
        .await
        .unwrap();
    producer
        .send("ledger", 1, credit.epoch, &[record("credit 99")])
        .await
        .unwrap();
    producer.abort().await.unwrap();
    producer
        .send("ledger", 0, debit.epoch, &[record("debit 5")])
        .await
        .unwrap();
    producer.commit().await.unwrap();
    assert_eq!(
        values(&client, "ledger", 0, true).await,
        ["debit 10", "debit 5"]
    );
    assert_eq!(values(&client, "ledger", 1, true).await, ["credit 10"]);
    assert_eq!(
        values(&client, "ledger", 0, false).await,
        ["debit 10", "debit 99", "debit 5"],
        "read_uncommitted sees the aborted record"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_granted_to_another_writer_fences_the_commit_and_nothing_is_published() {
    let (_server, client) = server_with_topic("ledger", 2).await;
    let (_debit, credit, mut producer) = open_transfer(&client).await;
    // The writer's lease on partition 1 ends (it froze past its TTL) and another writer takes
    // the partition.
    client
        .release_lease("ledger", 1, credit.lease_id)
        .await
        .unwrap();
    let newer = client
        .acquire_lease("ledger", 1, "other", TTL)
        .await
        .unwrap();
    let refused = producer.commit().await.unwrap_err();
    assert!(refused.is_fenced(), "{refused:?}");
    assert_eq!(refused.outcome(), Outcome::NotWritten);
    // Nothing of the transaction is visible, on either partition; the new holder writes on.
    assert!(values(&client, "ledger", 0, true).await.is_empty());
    assert!(values(&client, "ledger", 1, true).await.is_empty());
    let batch = fencelog::client::BatchBuilder::new(newer.epoch);
    let mut batch = batch;
    batch.push(0, None, Some(b"credit 7"));
    client.produce("ledger", 1, batch.finish()).await.unwrap();
    assert_eq!(values(&client, "ledger", 1, true).await, ["credit 7"]);
    // A stale epoch cannot open a transaction either.
    let refused = producer
        .send("ledger", 1, credit.epoch, &[record("credit 11")])
        .await
        .unwrap_err();
    assert!(refused.is_fenced(), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_instance_fences_the_old_one_and_aborts_its_transaction() {
    let (_server, client) = server_with_topic("ledger", 2).await;
    let debit = bank_lease(&client, 0).await;
    let mut zombie = client.init_transaction("transfer", TIMEOUT).await.unwrap();
    zombie
        .send("ledger", 0, debit.epoch, &[record("zombie")])
        .await
        .unwrap();
    let mut successor = client.init_transaction("transfer", TIMEOUT).await.unwrap();
    assert_eq!(
        successor.producer().producer_id,
        zombie.producer().producer_id
    );
    assert!(successor.producer().producer_epoch > zombie.producer().producer_epoch);
    let refused = zombie.commit().await.unwrap_err();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::ProducerFenced),
        "{refused:?}"
    );
    let refused = zombie
        .send("ledger", 0, debit.epoch, &[record("zombie again")])
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused.code(),
            Some(
                ErrorCode::ProducerFenced
                    | ErrorCode::InvalidTransactionState
                    | ErrorCode::InvalidProducerEpoch
            )
        ),
        "{refused:?}"
    );
    successor
        .send("ledger", 0, debit.epoch, &[record("successor")])
        .await
        .unwrap();
    successor.commit().await.unwrap();
    assert_eq!(values(&client, "ledger", 0, true).await, ["successor"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_needs_a_current_lease_on_each_partition() {
    let (_server, client) = server_with_topic("ledger", 1).await;
    let old = bank_lease(&client, 0).await;
    client
        .release_lease("ledger", 0, old.lease_id)
        .await
        .unwrap();
    let current = bank_lease(&client, 0).await;
    let mut producer = client.init_transaction("transfer", TIMEOUT).await.unwrap();
    let refused = producer
        .add_partitions(&[("ledger", 0, old.epoch)])
        .await
        .unwrap_err();
    match &refused {
        ClientError::Fenced {
            epoch,
            current: now,
        } => {
            assert_eq!((*epoch, *now), (old.epoch, current.epoch))
        }
        other => panic!("expected fenced, got {other:?}"),
    }
    let refused = producer
        .add_partitions(&[("ledger", 0, 0)])
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::InvalidRequest),
        "{refused:?}"
    );
    assert!(producer.partitions().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinators_holder_name_is_reserved() {
    let (_server, client) = server_with_topic("ledger", 1).await;
    let refused = client
        .acquire_lease("ledger", 0, "kafka-transactions", TTL)
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::InvalidRequest),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("reserved"), "{refused}");
}

/// A marker from a deposed coordinator (a coordinator epoch below that of the producer's last
/// marker on the partition) is refused with `COORDINATOR_FENCED` through the native Produce,
/// and nothing of it is written; the same coordinator epoch again is taken.
#[tokio::test]
async fn a_marker_from_a_deposed_coordinator_is_refused() {
    use fencelog::batch::{control_batch, BatchBuilder, ControlMarker};

    let (_server, client) = server_with_topic("ledger", 1).await;
    let lease = client
        .acquire_lease("ledger", 0, "writer", TTL)
        .await
        .unwrap();
    let transaction = |value: &str| {
        let mut builder = BatchBuilder::with_producer(lease.epoch, 77, 0).transactional();
        builder.push(1, None, Some(value.as_bytes()));
        builder.finish()
    };
    let marker = |coordinator_epoch| {
        control_batch(
            lease.epoch,
            77,
            0,
            ControlMarker::Commit,
            coordinator_epoch,
            1,
        )
    };
    client
        .produce("ledger", 0, transaction("first"))
        .await
        .unwrap();
    client.produce("ledger", 0, marker(5)).await.unwrap();
    let end = client.list_offsets("ledger", 0).await.unwrap().latest;

    let refused = client
        .produce("ledger", 0, marker(4))
        .await
        .expect_err("the deposed coordinator's marker");
    assert_eq!(
        refused.code(),
        Some(ErrorCode::CoordinatorFenced),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("coordinator epoch 4 < 5"),
        "{refused}"
    );
    assert_eq!(
        client.list_offsets("ledger", 0).await.unwrap().latest,
        end,
        "nothing written"
    );
    client.produce("ledger", 0, marker(5)).await.unwrap();
}
