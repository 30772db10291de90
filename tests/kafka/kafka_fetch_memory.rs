//! Kafka fetch answers are heap buffers (the stored batches converted to Kafka's format), so they
//! count against the server's memory budget: a fetch reads no more than the budget lets it, and
//! gives back what it does not use.

use crate::support::kafka;

use std::net::SocketAddr;
use std::time::Duration;

use fencelog::batch::BatchBuilder;
use fencelog::client::Client;
use fencelog::domain::TopicConfig;
use fencelog::server::memory_budget::MemoryBudget;
use fencelog::server::{KafkaConfig, ServerConfig};
use fencelog::testing::TestServer;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use kafka::KafkaConnection;

const BUDGET_BYTES: usize = 256 * 1024;
const VALUE_BYTES: usize = 1024;

fn fetch(max_bytes: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("big")))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(max_bytes)])])
}

/// A consumer asking for 64 MiB on a server whose whole budget is 256 KiB gets at most about
/// a quarter of the budget's worth of records (not an allocation of what it asked for), and once the answer
/// is written the whole budget is free again.
#[tokio::test]
async fn a_kafka_fetch_reads_within_the_memory_budget_and_gives_it_back() {
    let config = ServerConfig {
        memory_budget: MemoryBudget::new(BUDGET_BYTES),
        buffer_wait: Duration::from_millis(500),
        ..ServerConfig::default()
    };
    let budget = config.memory_budget.clone();
    let kafka = KafkaConfig::advertising(SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = TestServer::builder()
        .server_config(config)
        .kafka_config(kafka)
        .start()
        .await
        .unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("big", 1, TopicConfig::default())
        .await
        .unwrap();
    let lease = client
        .acquire_lease("big", 0, "writer", Duration::from_secs(30))
        .await
        .unwrap();
    let value = vec![b'x'; VALUE_BYTES];
    // 1 MiB in batches of 32 KiB: four times the budget.
    for _ in 0..32 {
        let mut builder = BatchBuilder::new(lease.epoch);
        for _ in 0..32 {
            builder.push(1_000, None, Some(&value));
        }
        client.produce("big", 0, builder.finish()).await.unwrap();
    }

    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let response = connection
        .call::<FetchRequest>(12, &fetch(64 * 1024 * 1024))
        .await;
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    let records = partition.records.as_ref().expect("records").len();
    assert!(records > 0, "the consumer progresses");
    // A quarter of the budget, plus at most one batch (the first batch is always returned whole).
    assert!(
        records <= BUDGET_BYTES / 4 + 40 * 1024,
        "{records} bytes read with a budget of {BUDGET_BYTES}"
    );
    // Request frames and answers gave everything back.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while budget.available() != BUDGET_BYTES && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(budget.available(), BUDGET_BYTES);
}
