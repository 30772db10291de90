//! Adding partitions to a topic of a cluster of three brokers in one process (in-memory
//! metadata store): one broker's grow writes the record's new count and the new partitions'
//! states in one transaction; every broker's driver creates its copies of them from the watch
//! and their leaders and followers start; an `acks=all` write to a new partition reaches every
//! replica and is read back; a grow from a stale count is refused by the store, and a count not
//! above the current one, or above the cluster's limit, before it.

use std::time::{Duration, Instant};

use crate::support::batch;
use fencelog::broker::BrokerError;
use fencelog::cluster::meta::{MetaError, CLUSTER_PARTITIONS_PER_TOPIC_MAX};
use fencelog::protocol::Acks;
use fencelog::testing::TestCluster;

const CONVERGE: Duration = Duration::from_secs(20);

/// Proves: a replication-factor-3 topic grown from 1 to 3 partitions has the new partitions on
/// every broker, each with three replicas and a leader above the topic's first leader epoch; an
/// `acks=all` write to partition 2 is on all three replicas and read back; the record says 3;
/// a stale grow loses its compare-and-swap; the same count and one above the limit are
/// `InvalidPartitions`; `validate_only` writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grown_replicated_topic_takes_acks_all_writes_on_a_new_partition() {
    let cluster = TestCluster::start(3).await.expect("start the cluster");
    let client = cluster.client().await.expect("connect");
    crate::support::create_replicated(&client, "grown", 1)
        .await
        .expect("create");
    assert_eq!(client.create_partitions("grown", 3).await.expect("grow"), 3);

    // Every broker has the new partitions locally, each with an elected leader in the view.
    let deadline = Instant::now() + CONVERGE;
    loop {
        let everywhere = cluster.nodes().iter().all(|node| {
            node.service()
                .broker()
                .topic("grown")
                .is_ok_and(|topic| topic.partitions().len() == 3)
        });
        if everywhere {
            break;
        }
        assert!(Instant::now() < deadline, "not every broker added them");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let info = client.cluster_metadata(&["grown"]).await.expect("metadata");
    assert_eq!(info.partitions.len(), 3);
    for partition in &info.partitions {
        assert_eq!(partition.replicas.len(), 3, "{partition:?}");
        assert!(partition.leader.is_some(), "{partition:?}");
        assert!(partition.leader_epoch > 1, "{partition:?}: took over");
    }

    client
        .produce_with_acks("grown", 2, batch(0, "on a new partition"), Acks::All)
        .await
        .expect("acks=all produce to partition 2");
    let deadline = Instant::now() + CONVERGE;
    while !cluster
        .nodes()
        .iter()
        .all(|node| node.log_end("grown", 2) == 1)
    {
        assert!(Instant::now() < deadline, "not on every replica");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fetched = client
        .fetch("grown", 2, 0, 1 << 20, Duration::ZERO)
        .await
        .expect("fetch");
    assert_eq!(
        fetched.records[0].value.as_deref(),
        Some(&b"on a new partition"[..])
    );

    // The store's record has the count; a grow placed from the old count loses.
    let records = cluster.store().topics().await.unwrap();
    assert_eq!(records[0].partition_count, 3);
    let stale = cluster.store().create_partitions("grown", 1, vec![]).await;
    assert!(
        matches!(
            stale,
            Err(MetaError::PartitionCountChanged { current: 3, .. })
        ),
        "{stale:?}"
    );
    let service = cluster.nodes()[1].service();
    for refused in [3, 2, CLUSTER_PARTITIONS_PER_TOPIC_MAX + 1] {
        let answer = service
            .topics()
            .create_partitions("grown".into(), refused, false)
            .await;
        assert!(
            matches!(answer, Err(BrokerError::InvalidPartitions(_))),
            "{refused}: {answer:?}"
        );
    }
    assert_eq!(
        service
            .topics()
            .create_partitions("grown".into(), 5, true)
            .await
            .expect("validate"),
        5
    );
    assert_eq!(
        cluster.store().topics().await.unwrap()[0].partition_count,
        3
    );
}
