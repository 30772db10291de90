//! Committed offsets on a cluster: kept in the replicated offsets topic
//! (`fencelog::broker::offsets_topic`), answered by the leader of the group's offsets partition,
//! and all still there after that broker crashes.

use std::time::{Duration, Instant};

use crate::support::batch;
use crate::support::eventually;
use fencelog::client::{Client, ClientError};
use fencelog::domain::{offsets_partition, OFFSETS_TOPIC};
use fencelog::protocol::{Acks, ErrorCode, Replication, TopicConfig};
use fencelog::testing::{TestCluster, TestClusterNode};

const CONVERGE: Duration = Duration::from_secs(20);

async fn client_of(nodes: &[&TestClusterNode]) -> Client {
    Client::builder()
        .addrs(nodes.iter().map(|node| node.addr().to_string()))
        .request_timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("connect")
}

/// The leader of `topic`/`partition` once one serves.
async fn leader_of(client: &Client, topic: &str, partition: u32) -> u32 {
    let deadline = Instant::now() + CONVERGE;
    loop {
        if let Ok(info) = client.cluster_metadata(&[topic]).await {
            if let Some(leader) = info
                .partitions
                .iter()
                .find(|p| p.topic == topic && p.partition == partition && p.leader_epoch > 1)
                .and_then(|p| p.leader)
            {
                return leader;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no leader for {topic}/{partition}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn committed_offsets_survive_a_crash_of_the_groups_coordinator() {
    let mut cluster = TestCluster::start(3).await.expect("start the cluster");
    let nodes = cluster.nodes_mut();
    let client = client_of(&nodes.iter().collect::<Vec<_>>()).await;
    let replication = Replication {
        factor: 3,
        min_insync: None,
    };
    client
        .create_replicated_topic("events", 2, TopicConfig::default(), replication)
        .await
        .expect("create");
    leader_of(&client, "events", 0).await;
    for value in ["a", "b", "c"] {
        client
            .produce_with_acks("events", 0, batch(0, value), Acks::All)
            .await
            .expect("produce");
    }

    // The first commit creates the offsets topic and is answered by the group's coordinator.
    client
        .commit_offset("billing", "events", 0, 3, "after c")
        .await
        .expect("commit");
    client
        .commit_offset("billing", "events", 1, 0, "")
        .await
        .expect("commit partition 1");
    let committed = client
        .committed_offset("billing", "events", 0)
        .await
        .expect("read back")
        .expect("committed");
    assert_eq!(
        (committed.offset, committed.metadata.as_str()),
        (3, "after c")
    );

    // The coordinator is the leader of the group's offsets partition.
    let info = client
        .cluster_metadata(&[OFFSETS_TOPIC])
        .await
        .expect("metadata");
    let partitions = info
        .partitions
        .iter()
        .filter(|p| p.topic == OFFSETS_TOPIC)
        .count() as u32;
    assert_eq!(partitions, 8, "the default offsets partitions");
    let offsets_partition = offsets_partition("billing", partitions);
    let coordinator = leader_of(&client, OFFSETS_TOPIC, offsets_partition).await;

    // A client may not write the internal topic.
    let refused = client
        .produce_with_acks(
            OFFSETS_TOPIC,
            offsets_partition,
            batch(0, "forged"),
            Acks::All,
        )
        .await;
    assert!(
        matches!(&refused, Err(error) if error.code() == Some(ErrorCode::InvalidRequest)),
        "a client's write to the offsets topic must be refused, got {refused:?}"
    );

    let index = nodes.iter().position(|n| n.id() == coordinator).unwrap();
    nodes[index].crash().await;
    let survivors: Vec<&TestClusterNode> = nodes.iter().filter(|n| n.id() != coordinator).collect();
    let client = client_of(&survivors).await;

    // The new coordinator (another broker) has every committed position.
    let committed = eventually("no new coordinator", || {
        client.committed_offset("billing", "events", 0)
    })
    .await;
    let committed = committed.expect("the commit survived the coordinator's crash");
    assert_eq!(
        (committed.offset, committed.metadata.as_str()),
        (3, "after c")
    );
    let other = client
        .committed_offset("billing", "events", 1)
        .await
        .expect("read partition 1")
        .expect("committed");
    assert_eq!(other.offset, 0);
    let moved_to = leader_of(&client, OFFSETS_TOPIC, offsets_partition).await;
    assert_ne!(moved_to, coordinator);

    // And takes new commits.
    client
        .commit_offset("billing", "events", 0, 2, "")
        .await
        .expect("commit on the new coordinator");
    let committed = client
        .committed_offset("billing", "events", 0)
        .await
        .expect("read back")
        .expect("committed");
    assert_eq!(committed.offset, 2);
    let missing: Result<_, ClientError> = client.committed_offset("billing", "nothing", 0).await;
    assert!(missing.is_err(), "an unknown topic is refused");
}

/// A position committed for a deleted topic is not the re-created topic's: after the delete and
/// a re-creation under the same name, the group has no position for it until it commits again
/// (Kafka forgets a deleted topic's offsets too).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_topics_committed_offsets_are_not_the_recreated_topics() {
    let mut cluster = TestCluster::start(3).await.expect("start the cluster");
    let nodes = cluster.nodes_mut();
    let client = client_of(&nodes.iter().collect::<Vec<_>>()).await;
    let replication = Replication {
        factor: 3,
        min_insync: None,
    };
    client
        .create_replicated_topic("again", 1, TopicConfig::default(), replication)
        .await
        .expect("create");
    leader_of(&client, "again", 0).await;
    client
        .produce_with_acks("again", 0, batch(0, "a"), Acks::All)
        .await
        .expect("produce");
    client
        .commit_offset("billing", "again", 0, 1, "old")
        .await
        .expect("commit");

    client.delete_topic("again").await.expect("delete");
    eventually("re-create", || {
        client.create_replicated_topic("again", 1, TopicConfig::default(), replication)
    })
    .await;
    leader_of(&client, "again", 0).await;
    let committed = eventually("read back", || {
        client.committed_offset("billing", "again", 0)
    })
    .await;
    assert_eq!(committed, None, "the deleted topic's position is forgotten");

    client
        .commit_offset("billing", "again", 0, 0, "new")
        .await
        .expect("commit to the re-created topic");
    let committed = client
        .committed_offset("billing", "again", 0)
        .await
        .expect("read back")
        .expect("committed");
    assert_eq!((committed.offset, committed.metadata.as_str()), (0, "new"));
}
