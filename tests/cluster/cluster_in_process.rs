//! Three brokers in one process, coordinated through the in-memory metadata store (etcd's
//! semantics without an etcd process): replication, `acks=all`, the ISR, and failover, seen
//! through the client library exactly as an application sees a cluster.
//!
//! The cluster is `fencelog::testing::TestCluster`, which users' own failover tests start too;
//! the tests with real processes and a real etcd are in `tests/cli/cluster_processes.rs`.

use std::time::{Duration, Instant};

use crate::support::batch;
use fencelog::client::{Client, ClientError};
use fencelog::protocol::{Acks, ErrorCode, Replication, TopicConfig};
use fencelog::testing::{TestCluster, TestClusterNode};

/// How long a test waits for the cluster to converge before it fails.
const CONVERGE: Duration = Duration::from_secs(20);

async fn cluster(size: u32) -> TestCluster {
    if let Ok(filter) = std::env::var("FENCELOG_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
    TestCluster::start(size).await.expect("start the cluster")
}

async fn client_of(nodes: &[TestClusterNode]) -> Client {
    client_of_nodes(&nodes.iter().collect::<Vec<_>>()).await
}

async fn client_of_nodes(nodes: &[&TestClusterNode]) -> Client {
    Client::builder()
        .addrs(nodes.iter().map(|node| node.addr().to_string()))
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

/// Reads every value of `topic`/`partition` from its leader.
async fn read_all(client: &Client, topic: &str, partition: u32) -> Vec<String> {
    let mut values = Vec::new();
    let mut offset = 0;
    loop {
        let fetched = client
            .fetch(topic, partition, offset, 1 << 20, Duration::ZERO)
            .await
            .expect("fetch");
        if fetched.records.is_empty() {
            return values;
        }
        for record in fetched.records {
            offset = record.offset + 1;
            values.push(String::from_utf8_lossy(record.value.as_deref().unwrap_or(b"")).into());
        }
    }
}

/// The leader of `topic`/`partition` and its epoch, once one serves.
async fn leader_of(client: &Client, topic: &str, partition: u32) -> (u32, u32) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        if let Ok(info) = client.cluster_metadata(&[topic]).await {
            let found = info
                .partitions
                .iter()
                .find(|p| p.partition == partition)
                .and_then(|p| p.leader.map(|leader| (leader, p.leader_epoch)));
            if let Some(found) = found {
                if found.1 > 1 {
                    return found;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "no leader for {topic}/{partition}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates `topic` with `partitions` partitions on all three brokers (`min_insync` default).
async fn create_rf3(client: &Client, topic: &str, partitions: u32) {
    let replication = Replication {
        factor: 3,
        min_insync: None,
    };
    client
        .create_replicated_topic(topic, partitions, TopicConfig::default(), replication)
        .await
        .expect("create a replicated topic");
}

/// Crashes `leader` (of partition 0 of `topic`, in `epoch`) and waits until another broker
/// leads in a higher epoch; returns a client of the survivors and the new leader and epoch.
async fn crash_leader(
    nodes: &mut [TestClusterNode],
    topic: &str,
    leader: u32,
    epoch: u32,
) -> (Client, u32, u32) {
    let index = nodes.iter().position(|n| n.id() == leader).expect("leader");
    nodes[index].crash().await;
    let survivors: Vec<&TestClusterNode> = nodes.iter().filter(|n| n.id() != leader).collect();
    let client = client_of_nodes(&survivors).await;
    let deadline = Instant::now() + CONVERGE;
    loop {
        let (found, found_epoch) = leader_of(&client, topic, 0).await;
        if found != leader && found_epoch > epoch {
            return (client, found, found_epoch);
        }
        assert!(Instant::now() < deadline, "no failover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Produces `count` single-record batches with `acks=all`; returns the values acknowledged.
async fn produce_all(
    client: &Client,
    topic: &str,
    epoch: u64,
    prefix: &str,
    count: usize,
) -> Vec<String> {
    let mut acknowledged = Vec::new();
    for i in 0..count {
        let value = format!("{prefix}-{i}");
        client
            .produce_with_acks(topic, 0, batch(epoch, &value), Acks::All)
            .await
            .unwrap_or_else(|error| panic!("produce {value}: {error}"));
        acknowledged.push(value);
    }
    acknowledged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acks_all_writes_reach_every_replica_and_are_read_back_from_the_leader() {
    let mut cluster = cluster(3).await;
    let nodes = cluster.nodes_mut();
    let client = client_of(nodes).await;
    create_rf3(&client, "orders", 2).await;
    let (leader, epoch) = leader_of(&client, "orders", 0).await;
    let info = client
        .cluster_metadata(&["orders"])
        .await
        .expect("metadata");
    assert_eq!(info.brokers.len(), 3);
    let state = &info.partitions[0];
    assert_eq!(state.replicas.len(), 3);
    assert!(
        epoch >= 2,
        "the named leader re-elects itself above the placement's epoch"
    );

    let lease = client
        .acquire_lease("orders", 0, "writer", Duration::from_secs(30))
        .await
        .expect("lease");
    assert!(
        lease.epoch > u64::from(epoch) << 32,
        "a leader's grants lie above its producer epoch base"
    );
    let written = produce_all(&client, "orders", lease.epoch, "a", 30).await;

    // Committed means on every in-sync replica: each broker's log holds all 30.
    wait_until("every replica holds the records", || {
        let ends: Vec<u64> = nodes.iter().map(|n| n.log_end("orders", 0)).collect();
        async move { ends.iter().all(|end| *end == 30) }
    })
    .await;
    assert_eq!(read_all(&client, "orders", 0).await, written);

    // A follower refuses the produce with the leader's name.
    let follower = nodes.iter().find(|n| n.id() != leader).expect("a follower");
    let direct = Client::connect(follower.addr().to_string().as_str())
        .await
        .expect("connect");
    match direct
        .produce_with_acks("orders", 0, batch(lease.epoch, "x"), Acks::All)
        .await
    {
        // A client that knows only one broker cannot go elsewhere: it reports the hint.
        Err(ClientError::NotLeader {
            leader: Some(named),
            ..
        }) => assert_eq!(named, leader),
        Ok(_) => {} // routed to the leader through the hint: fine too
        Err(other) => panic!("expected NOT_LEADER, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn epoch_0_writes_are_unleased_until_the_first_grant_across_a_failover() {
    let mut cluster = cluster(3).await;
    let nodes = cluster.nodes_mut();
    let client = client_of(nodes).await;
    create_rf3(&client, "free", 1).await;
    let (leader, epoch) = leader_of(&client, "free", 0).await;
    let mut written = produce_all(&client, "free", 0, "unleased", 5).await;
    let (client, _, _) = crash_leader(nodes, "free", leader, epoch).await;
    // A new leader's producer epoch base does not fence writers that never had a lease...
    written.extend(produce_all(&client, "free", 0, "still-unleased", 5).await);
    assert_eq!(read_all(&client, "free", 0).await, written);
    // ...the first grant does.
    client
        .acquire_lease("free", 0, "owner", Duration::from_secs(30))
        .await
        .expect("lease");
    let refused = client
        .produce_with_acks("free", 0, batch(0, "late"), Acks::All)
        .await;
    assert!(
        matches!(refused, Err(ClientError::Fenced { .. })),
        "the first grant fences unleased writers, got {refused:?}"
    );
}

/// A batch of an idempotent producer is committed, its answer is (as if) lost, the leader
/// crashes, and the producer resends the same bytes to the new leader: the new leader's producer
/// state (built from what it replicated) recognises the exact resend although the new leader's
/// producer-epoch base fences the batch's lease epoch, and answers with the original offset;
/// the record is in the log once. A new batch of that lease epoch is fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resend_to_a_new_leader_after_failover_gets_its_original_offset() {
    let mut cluster = cluster(3).await;
    let nodes = cluster.nodes_mut();
    let client = client_of(nodes).await;
    create_rf3(&client, "events", 1).await;
    let (leader, epoch) = leader_of(&client, "events", 0).await;
    let lease = client
        .acquire_lease("events", 0, "writer", Duration::from_secs(30))
        .await
        .expect("lease");
    let stamped = |sequence: i32, value: &str| {
        let mut builder = fencelog::batch::BatchBuilder::with_producer(lease.epoch, 4242, 0);
        builder.push(1_000, None, Some(value.as_bytes()));
        builder.finish_with_sequence(sequence)
    };
    let mut written = produce_all(&client, "events", lease.epoch, "before", 3).await;
    let resent = stamped(0, "answer lost");
    let first = client
        .produce_with_acks("events", 0, resent.clone(), Acks::All)
        .await
        .expect("the first send is committed");
    written.push("answer lost".into());

    let (client, _, _) = crash_leader(nodes, "events", leader, epoch).await;
    let again = client
        .produce_with_acks("events", 0, resent, Acks::All)
        .await
        .expect("the resend to the new leader is answered with its offsets");
    assert_eq!(again.base_offset, first.base_offset);
    let late = client
        .produce_with_acks("events", 0, stamped(1, "late"), Acks::All)
        .await;
    assert!(
        matches!(late, Err(ClientError::Fenced { .. })),
        "a new batch of the old lease epoch is fenced, got {late:?}"
    );
    assert_eq!(read_all(&client, "events", 0).await, written);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crashed_leader_is_replaced_and_no_acknowledged_record_is_lost() {
    let mut cluster = cluster(3).await;
    let nodes = cluster.nodes_mut();
    let client = client_of(nodes).await;
    create_rf3(&client, "events", 1).await;
    let (leader, epoch) = leader_of(&client, "events", 0).await;
    let lease = client
        .acquire_lease("events", 0, "writer", Duration::from_secs(30))
        .await
        .expect("lease");
    let mut written = produce_all(&client, "events", lease.epoch, "before", 20).await;

    let (client, new_leader, new_epoch) = crash_leader(nodes, "events", leader, epoch).await;
    assert_ne!(new_leader, leader);
    assert!(new_epoch > epoch);

    // The old lease's epoch is fenced by the new leader's producer epoch base.
    let stale = client
        .produce_with_acks("events", 0, batch(lease.epoch, "stale"), Acks::All)
        .await;
    assert!(
        matches!(stale, Err(ClientError::Fenced { .. })),
        "a producer epoch of the old leader must be fenced, got {stale:?}"
    );
    let lease = client
        .acquire_lease("events", 0, "writer", Duration::from_secs(30))
        .await
        .expect("lease from the new leader");
    assert!(lease.epoch > u64::from(new_epoch) << 32);
    written.extend(produce_all(&client, "events", lease.epoch, "after", 20).await);
    assert_eq!(read_all(&client, "events", 0).await, written);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_followers_leave_the_isr_and_min_insync_refuses_before_writing() {
    let mut cluster = cluster(3).await;
    let nodes = cluster.nodes_mut();
    let client = client_of(nodes).await;
    let replication = Replication {
        factor: 3,
        min_insync: Some(2),
    };
    client
        .create_replicated_topic("audit", 1, TopicConfig::default(), replication)
        .await
        .expect("create");
    let (leader, _) = leader_of(&client, "audit", 0).await;
    let lease = client
        .acquire_lease("audit", 0, "writer", Duration::from_secs(30))
        .await
        .expect("lease");
    produce_all(&client, "audit", lease.epoch, "three", 5).await;

    let followers: Vec<usize> = (0..nodes.len())
        .filter(|i| nodes[*i].id() != leader)
        .collect();
    nodes[followers[0]].crash().await;
    // The ISR shrinks to two after the lag limit; writes go on meanwhile (they wait for it).
    produce_all(&client, "audit", lease.epoch, "two", 5).await;
    let isr_of = |client: Client| async move { isr_len(&client, "audit").await };
    wait_until("the ISR shrinks to two", || {
        isr_of(client.clone()).map_eq(2)
    })
    .await;

    nodes[followers[1]].crash().await;
    wait_until("the ISR shrinks to one", || {
        isr_of(client.clone()).map_eq(1)
    })
    .await;
    let before = nodes
        .iter()
        .find(|n| n.id() == leader)
        .expect("leader")
        .log_end("audit", 0);
    let refused = client
        .produce_with_acks("audit", 0, batch(lease.epoch, "one"), Acks::All)
        .await;
    match refused {
        Err(ClientError::Server {
            code: ErrorCode::NotEnoughReplicas,
            ..
        }) => {}
        other => panic!("expected NOT_ENOUGH_REPLICAS, got {other:?}"),
    }
    let after = nodes
        .iter()
        .find(|n| n.id() == leader)
        .expect("leader")
        .log_end("audit", 0);
    assert_eq!(before, after, "a refused acks=all produce writes nothing");
}

/// How many replicas the ISR of partition 0 of `topic` has, as the cluster's metadata says (0
/// when it cannot be read).
async fn isr_len(client: &Client, topic: &str) -> usize {
    client
        .cluster_metadata(&[topic])
        .await
        .map(|info| info.partitions[0].isr.len())
        .unwrap_or(0)
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

/// The log start of `topic/partition` on every running node of `nodes`.
fn log_starts(nodes: &[TestClusterNode], topic: &str, partition: u32) -> Vec<u64> {
    nodes
        .iter()
        .filter(|node| node.is_running())
        .map(|node| {
            node.service()
                .broker()
                .partition(topic, partition)
                .expect("a replica of the partition")
                .log_start_offset()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleted_records_stay_deleted_after_a_failover() {
    // Proves: DeleteRecords is taken by the partition's leader only (a follower refuses it,
    // NOT_LEADER); the followers adopt the leader's new log start from their next fetch; after
    // the leader crashes and a follower leads, ListOffsets earliest is still 5, a fetch below it
    // is out of range, and the records from 5 on are all there.
    let mut cluster = cluster(3).await;
    let nodes = cluster.nodes_mut();
    let client = client_of(nodes).await;
    create_rf3(&client, "trimmed", 1).await;
    let (leader, epoch) = leader_of(&client, "trimmed", 0).await;
    let lease = client
        .acquire_lease("trimmed", 0, "writer", Duration::from_secs(30))
        .await
        .expect("lease");
    let written = produce_all(&client, "trimmed", lease.epoch, "r", 10).await;
    assert_eq!(client.delete_records("trimmed", 0, 5).await.unwrap(), 5);

    let follower = nodes.iter().find(|n| n.id() != leader).expect("a follower");
    let refused = follower
        .service()
        .reads()
        .delete_records("trimmed", 0, 6)
        .await;
    assert!(
        matches!(
            refused,
            Err(fencelog::broker::BrokerError::Cluster(
                fencelog::broker::cluster::ClusterError::NotLeader { .. }
            ))
        ),
        "a follower must refuse DeleteRecords, got {refused:?}"
    );

    let deadline = Instant::now() + CONVERGE;
    while log_starts(nodes, "trimmed", 0) != [5, 5, 5] {
        assert!(
            Instant::now() < deadline,
            "the followers did not adopt the log start: {:?}",
            log_starts(nodes, "trimmed", 0)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let (client, new_leader, _) = crash_leader(nodes, "trimmed", leader, epoch).await;
    assert_ne!(new_leader, leader);
    assert_eq!(client.list_offsets("trimmed", 0).await.unwrap().earliest, 5);
    let below = client.fetch("trimmed", 0, 0, 1 << 20, Duration::ZERO).await;
    assert!(
        matches!(below, Err(ClientError::OffsetOutOfRange { .. })),
        "a fetch below the log start must be out of range, got {below:?}"
    );
    let mut values = Vec::new();
    let mut offset = 5;
    while offset < 10 {
        let fetched = client
            .fetch("trimmed", 0, offset, 1 << 20, Duration::ZERO)
            .await
            .expect("fetch from the log start");
        for record in fetched.records {
            offset = record.offset + 1;
            values
                .push(String::from_utf8_lossy(record.value.as_deref().unwrap_or(b"")).into_owned());
        }
    }
    assert_eq!(values, written[5..].to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_behind_the_leader_log_start_starts_over_there_and_rejoins_the_isr() {
    // Proves: a follower that was away while the leader deleted every record it would fetch
    // next (its log ends at 5, the leader's log starts at 15) is told so (OFFSET_OUT_OF_RANGE
    // with the leader's log start), starts its log over there instead of failing its fetch
    // forever, catches up and rejoins the ISR; after the other two brokers crash in turn it
    // leads and serves every record from the log start on.
    let mut cluster = cluster(3).await;
    let client = client_of(cluster.nodes()).await;
    create_rf3(&client, "behind", 1).await;
    let (leader, _) = leader_of(&client, "behind", 0).await;
    let lease = client
        .acquire_lease("behind", 0, "writer", Duration::from_secs(30))
        .await
        .expect("lease");
    let mut written = produce_all(&client, "behind", lease.epoch, "early", 5).await;
    let away = cluster
        .nodes()
        .iter()
        .map(|node| node.id())
        .find(|id| *id != leader)
        .expect("a follower");
    wait_until("the follower holds the first records", || {
        let end = cluster
            .nodes()
            .iter()
            .find(|n| n.id() == away)
            .unwrap()
            .log_end("behind", 0);
        async move { end == 5 }
    })
    .await;
    cluster.node(away).crash().await;
    written.extend(produce_all(&client, "behind", lease.epoch, "while-away", 15).await);
    assert_eq!(client.delete_records("behind", 0, 15).await.unwrap(), 15);

    cluster.restart(away).await.expect("restart the follower");
    let isr_of = |client: Client| async move { isr_len(&client, "behind").await };
    wait_until("the follower that was away rejoins the ISR", || {
        isr_of(client.clone()).map_eq(3)
    })
    .await;
    let returned = cluster.node(away);
    let partition = returned
        .service()
        .broker()
        .partition("behind", 0)
        .expect("the follower's replica");
    assert_eq!(partition.log_start_offset(), 15);
    assert_eq!(partition.log_end_offset(), 20);

    // Only the follower that started over is left: it leads, from the leader's log start.
    let others: Vec<u32> = cluster
        .nodes()
        .iter()
        .map(|node| node.id())
        .filter(|id| *id != away)
        .collect();
    for id in others {
        cluster.node(id).crash().await;
    }
    let client = client_of_nodes(&[cluster.node(away)]).await;
    let deadline = Instant::now() + CONVERGE;
    let values = loop {
        match client.fetch("behind", 0, 15, 1 << 20, Duration::ZERO).await {
            Ok(fetched) if !fetched.records.is_empty() => {
                break fetched
                    .records
                    .iter()
                    .map(|r| {
                        String::from_utf8_lossy(r.value.as_deref().unwrap_or(b"")).into_owned()
                    })
                    .collect::<Vec<_>>();
            }
            _ => {
                assert!(Instant::now() < deadline, "the follower never led");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(values, written[15..].to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_read_at_a_follower_is_refused_with_not_leader() {
    // Proves: every read of the read path goes through its one leader rule, the timestamp
    // reads included (a ListOffsets by timestamp sent to a follower once answered from the
    // follower's own copy): a follower holding the records answers each with NOT_LEADER, and the
    // leader answers them.
    let mut cluster = cluster(3).await;
    let nodes = cluster.nodes_mut();
    let client = client_of(nodes).await;
    create_rf3(&client, "timed", 1).await;
    let (leader, _) = leader_of(&client, "timed", 0).await;
    let lease = client
        .acquire_lease("timed", 0, "writer", Duration::from_secs(30))
        .await
        .expect("lease");
    produce_all(&client, "timed", lease.epoch, "r", 3).await;
    let follower = nodes.iter().find(|n| n.id() != leader).expect("a follower");
    let reads = follower.service().reads();
    let not_leader = |what: &str, refused: Result<(), fencelog::broker::BrokerError>| {
        assert!(
            matches!(
                refused,
                Err(fencelog::broker::BrokerError::Cluster(
                    fencelog::broker::cluster::ClusterError::NotLeader { .. }
                ))
            ),
            "a follower must refuse {what} with NOT_LEADER, got {refused:?}"
        );
    };
    not_leader("ListOffsets", reads.list_offsets("timed", 0).map(drop));
    not_leader(
        "an offset by timestamp",
        reads.offset_for_timestamp("timed", 0, 0).map(drop),
    );
    not_leader(
        "a record by timestamp",
        reads.record_for_timestamp("timed", 0, 0).map(drop),
    );
    not_leader(
        "the record of the max timestamp",
        reads.record_of_max_timestamp("timed", 0).map(drop),
    );
    not_leader(
        "the last stable offset",
        reads.last_stable_offset("timed", 0).map(drop),
    );
    not_leader(
        "the producers",
        reads.active_producers("timed", 0).map(drop),
    );
    not_leader(
        "the aborted transactions",
        reads.aborted_transactions("timed", 0, 0, 3).map(drop),
    );
    not_leader(
        "the open transactions",
        reads.open_transactions("timed", 0).map(drop),
    );
    let leader_node = nodes.iter().find(|n| n.id() == leader).expect("the leader");
    let found = leader_node
        .service()
        .reads()
        .offset_for_timestamp("timed", 0, 0)
        .expect("the leader answers");
    assert_eq!(found, Some(0));
}
