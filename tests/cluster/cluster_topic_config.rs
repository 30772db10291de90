//! A topic config change in a cluster of three brokers in one process (in-memory metadata
//! store): one broker's `alter_topic_config` compare-and-swaps the topic record, and every
//! broker's driver applies it to its local copy and open partitions; a change computed from a
//! stale config is refused by the store, and a non-live change is refused before it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelog::cluster::meta::MetaError;
use fencelog::protocol::{Replication, TopicConfig};
use fencelog::testing::TestCluster;

const CONVERGE: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alter_reaches_every_broker() {
    let cluster = TestCluster::start(3).await.expect("start cluster");
    let client = cluster.client().await.expect("connect");
    client
        .create_replicated_topic(
            "configured",
            1,
            TopicConfig::default(),
            Replication {
                factor: 3,
                min_insync: Some(2),
            },
        )
        .await
        .expect("create");
    let service = Arc::clone(cluster.nodes()[0].service());
    let config = service
        .topics()
        .alter_topic_config(
            "configured".into(),
            Arc::new(|config: &TopicConfig| {
                Ok(TopicConfig {
                    retention_ms: Some(3_600_000),
                    segment_bytes: 1 << 20,
                    ..*config
                })
            }),
            false,
        )
        .await
        .expect("alter");
    assert_eq!(config.retention_ms, Some(3_600_000));
    let deadline = Instant::now() + CONVERGE;
    loop {
        let applied = cluster.nodes().iter().all(|node| {
            node.service()
                .broker()
                .topic("configured")
                .is_ok_and(|topic| {
                    topic.config().retention_ms == Some(3_600_000)
                        && topic
                            .open_partitions()
                            .all(|partition| partition.limits().segment_bytes == 1 << 20)
                })
        });
        if applied {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every broker applied the change"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The record in the store has it, and a change from the stale config loses its CAS.
    let records = cluster.store().topics().await.unwrap();
    assert_eq!(records[0].config.retention_ms, Some(3_600_000));
    let stale = cluster
        .store()
        .alter_topic_config("configured", TopicConfig::default(), TopicConfig::default())
        .await;
    assert!(
        matches!(stale, Err(MetaError::TopicConfigChanged { .. })),
        "{stale:?}"
    );
    // validate_only changes nothing anywhere.
    let other = Arc::clone(cluster.nodes()[1].service());
    other
        .topics()
        .alter_topic_config(
            "configured".into(),
            Arc::new(|config: &TopicConfig| {
                Ok(TopicConfig {
                    retention_ms: None,
                    ..*config
                })
            }),
            true,
        )
        .await
        .expect("validate");
    assert_eq!(
        cluster.store().topics().await.unwrap()[0]
            .config
            .retention_ms,
        Some(3_600_000)
    );
}
