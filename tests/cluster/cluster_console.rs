//! The console's cluster view (`GET /api/cluster`, issue 35) on a cluster of three brokers in
//! one process: it names the three brokers, and for a replication-factor-3 topic the same
//! leader, leader epoch, replicas and ISR as the cluster metadata `fencelog cluster status`
//! prints, every broker alive with its registration age; a crashed broker stays listed, not
//! alive.

use std::time::{Duration, Instant};

use fencelog::server::prometheus::{MetricsEndpoint, MetricsEndpointConfig};
use fencelog::testing::TestCluster;
use serde_json::Value;

use crate::support::http::http_get;

const CONVERGE: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cluster_view_shows_what_cluster_status_reports() {
    let mut cluster = TestCluster::start(3).await.expect("start the cluster");
    let client = cluster.client().await.expect("connect");
    crate::support::create_replicated(&client, "replicated", 2)
        .await
        .expect("create");
    // Every partition led, with its three replicas in sync.
    let deadline = Instant::now() + CONVERGE;
    let metadata = loop {
        let metadata = client
            .cluster_metadata(&["replicated"])
            .await
            .expect("metadata");
        if metadata.partitions.len() == 2
            && metadata
                .partitions
                .iter()
                .all(|partition| partition.leader.is_some() && partition.isr.len() == 3)
        {
            break metadata;
        }
        assert!(
            Instant::now() < deadline,
            "the partitions did not settle: {metadata:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let console = MetricsEndpoint::start(
        listener,
        cluster.nodes()[0].service(),
        MetricsEndpointConfig::default(),
    )
    .expect("serve the console");

    let (status, body) = http_get(console.addr(), "/api/cluster?topic=replicated").await;
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).expect("JSON");
    let mut nodes: Vec<u64> = view["brokers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|broker| broker["node_id"].as_u64().unwrap())
        .collect();
    nodes.sort_unstable();
    let mut expected: Vec<u64> = metadata
        .brokers
        .iter()
        .map(|broker| u64::from(broker.node_id))
        .collect();
    expected.sort_unstable();
    assert_eq!(nodes, expected);
    assert_eq!(view["total"], 2);
    for reported in &metadata.partitions {
        let shown = &view["partitions"][reported.partition as usize];
        assert_eq!(shown["partition"], reported.partition);
        assert_eq!(shown["leader"], serde_json::json!(reported.leader));
        assert_eq!(shown["leader_epoch"], reported.leader_epoch);
        assert_eq!(shown["replicas"], serde_json::json!(reported.replicas));
        assert_eq!(shown["isr"], serde_json::json!(reported.isr));
        assert_eq!(shown["under_replicated"], false);
    }
    for broker in view["brokers"].as_array().unwrap() {
        assert_eq!(broker["alive"], true, "{broker}");
        let age = broker["registration_age_ms"].as_u64();
        assert!(
            age.is_some_and(|age| age < 600_000),
            "a registration age of this run: {broker}"
        );
    }

    // A broker that crashed stays listed, as a replica, once its registration lapsed: not alive.
    let crashed = cluster.nodes()[2].id();
    cluster.node(crashed).crash().await;
    let deadline = Instant::now() + CONVERGE;
    loop {
        let (_, body) = http_get(console.addr(), "/api/cluster").await;
        let view: Value = serde_json::from_str(&body).expect("JSON");
        let shown = view["brokers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|broker| broker["node_id"] == crashed)
            .cloned()
            .expect("the crashed broker is still listed");
        if shown["alive"] == false {
            assert_eq!(shown["registration_age_ms"], Value::Null, "{shown}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the crashed broker still shows alive: {shown}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
