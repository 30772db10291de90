//! Deleting a cluster topic and re-creating it under the same name, with three brokers in one
//! process over the in-memory metadata store, while one broker is down: the store keeps the
//! deleted lineage's fence floor, the new topic's leader epochs (and so its producer epochs)
//! start above it, a writer of the old topic is fenced, and the broker that was down removes its
//! leftover copy when it returns, rejoins the ISR and holds only the new topic's records.
//!
//! The same scenario with real processes and etcd is `tests/cli/cluster_topic_delete.rs`.

use std::time::{Duration, Instant};

use crate::support::{batch, storage};
use fencelog::client::{Client, ClientError};
use fencelog::cluster::meta::place_replicas;
use fencelog::cluster::BrokerRegistration;
use fencelog::protocol::{Acks, ErrorCode, Replication, TopicConfig};
use fencelog::testing::TestCluster;

/// How long a test waits for the cluster to converge before it fails.
const CONVERGE: Duration = Duration::from_secs(20);

async fn client_of(addrs: Vec<String>) -> Client {
    Client::builder()
        .addrs(addrs)
        .request_timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("connect")
}

async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + CONVERGE;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The leader of `topic`/0, its leader epoch and ISR size, once one serves above `above`.
async fn leader_above(client: &Client, topic: &str, above: u32) -> (u32, u32) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        if let Ok(info) = client.cluster_metadata(&[topic]).await {
            let found = info
                .partitions
                .iter()
                .find(|p| p.partition == 0)
                .and_then(|p| p.leader.map(|leader| (leader, p.leader_epoch)));
            if let Some(found) = found.filter(|found| found.1 > above) {
                return found;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no leader of {topic} above {above}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn create_rf3(client: &Client, topic: &str) {
    let replication = Replication {
        factor: 3,
        min_insync: Some(2),
    };
    client
        .create_replicated_topic(topic, 1, TopicConfig::default(), replication)
        .await
        .expect("create a replicated topic");
}

async fn produce_all(client: &Client, topic: &str, epoch: u64, prefix: &str) -> Vec<String> {
    let mut acknowledged = Vec::new();
    for i in 0..5 {
        let value = format!("{prefix}-{i}");
        client
            .produce_with_acks(topic, 0, batch(epoch, &value), Acks::All)
            .await
            .unwrap_or_else(|error| panic!("produce {value}: {error}"));
        acknowledged.push(value);
    }
    acknowledged
}

async fn isr_size(client: &Client, topic: &str) -> usize {
    client
        .cluster_metadata(&[topic])
        .await
        .map_or(0, |info| info.partitions[0].isr.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_topic_deleted_and_recreated_while_a_broker_is_down_starts_above_the_old_epochs() {
    let mut cluster = TestCluster::start(3).await.expect("start the cluster");
    let topic = "orders";
    // The broker to stop is a follower in the placement (the same for both topics of the
    // name): while it is down a stand-in registration keeps it placeable, and a named leader
    // that is only a stand-in would never take over.
    let placement = place_replicas(&[1, 2, 3], topic, 1, 3, 2).expect("placement");
    let down = placement[0].replicas[2];
    let client = client_of(cluster.addrs()).await;
    create_rf3(&client, topic).await;
    let (_, old_epoch) = leader_above(&client, topic, 1).await;
    let old_lease = client
        .acquire_lease(topic, 0, "writer", Duration::from_secs(60))
        .await
        .expect("lease");
    produce_all(&client, topic, old_lease.epoch, "old").await;
    wait_until("the follower to stop holds the old records", || {
        let end = cluster
            .nodes()
            .iter()
            .find(|n| n.id() == down)
            .map(|n| n.log_end(topic, 0));
        async move { end == Some(5) }
    })
    .await;

    // Stop it, and hold a registration of its node id as a crashed broker's lingers in etcd
    // until its TTL, so that the re-created topic is placed on it again.
    cluster.node(down).shutdown().await;
    let stand_in = cluster
        .store()
        .register_broker(
            BrokerRegistration {
                node_id: down,
                native_addr: "127.0.0.1:9".into(),
                kafka_addr: None,
                incarnation: 1,
                registered_at_ms: None,
            },
            Duration::from_secs(60),
        )
        .await
        .expect("stand-in registration");
    let survivors = client_of(cluster.addrs()).await;
    survivors.delete_topic(topic).await.expect("delete");
    let floor = cluster
        .store()
        .deleted_topic_floor(topic)
        .await
        .expect("floor");
    assert!(
        floor >= old_epoch,
        "the floor {floor} covers leader epoch {old_epoch}"
    );
    for node in cluster.nodes().iter().filter(|node| node.is_running()) {
        let broker = node.service().broker().clone();
        wait_until("every running broker removed its copy", || {
            let gone = broker.topic(topic).is_err();
            async move { gone }
        })
        .await;
    }
    match survivors.cluster_metadata(&[topic]).await {
        Err(ClientError::Server {
            code: ErrorCode::UnknownTopic,
            ..
        }) => {}
        Ok(info) if info.partitions.is_empty() => {}
        other => panic!("a deleted topic is unknown, got {other:?}"),
    }

    create_rf3(&survivors, topic).await;
    let record = cluster.store().topics().await.expect("topics").remove(0);
    assert!(record.first_leader_epoch() > floor);
    // The placement's first epoch is never served: its leader takes over one above it.
    let (_, new_epoch) = leader_above(&survivors, topic, record.first_leader_epoch()).await;
    assert!(
        new_epoch > old_epoch,
        "{new_epoch} must be above {old_epoch}"
    );
    // A writer still holding the old topic's lease is fenced by the new leader's base.
    let stale = survivors
        .produce_with_acks(topic, 0, batch(old_lease.epoch, "stale"), Acks::All)
        .await;
    assert!(
        matches!(stale, Err(ClientError::Fenced { .. })),
        "an old producer epoch must be fenced on the new topic, got {stale:?}"
    );
    let lease = survivors
        .acquire_lease(topic, 0, "writer", Duration::from_secs(60))
        .await
        .expect("lease on the new topic");
    assert!(lease.epoch > old_lease.epoch);
    let written = produce_all(&survivors, topic, lease.epoch, "new").await;

    // The broker returns on its old data directory.
    stand_in.close().await.expect("revoke the stand-in");
    cluster.restart(down).await.expect("restart");
    let everyone = client_of(cluster.addrs()).await;
    wait_until("the returning broker rejoins the ISR", || {
        isr_size(&everyone, topic).map_eq(3)
    })
    .await;
    let returned = cluster
        .nodes()
        .iter()
        .find(|n| n.id() == down)
        .expect("returned");
    let partition = returned
        .service()
        .broker()
        .partition(topic, 0)
        .expect("its replica of the new topic");
    let values: Vec<String> = storage::read_all_records(&partition)
        .into_iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or(b"")).into_owned())
        .collect();
    assert_eq!(
        values, written,
        "the returning replica holds only the new records"
    );
    assert!(
        partition
            .leader_epoch_history()
            .iter()
            .all(|(epoch, _)| *epoch >= record.first_leader_epoch()),
        "no epoch of the deleted lineage is left on the returning replica"
    );
}

/// `future.map_eq(v)`: whether the future's output equals `v`.
trait MapEq: std::future::Future + Sized {
    fn map_eq(self, expected: Self::Output) -> impl std::future::Future<Output = bool>
    where
        Self::Output: PartialEq,
    {
        async move { self.await == expected }
    }
}

impl<F: std::future::Future> MapEq for F {}
