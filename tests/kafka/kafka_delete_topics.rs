//! DeleteTopics (key 20) on the Kafka listener, in every advertised version (1..=6), spoken to
//! with requests encoded by `kafka-protocol`'s client side: deletion by name (and, in v6, by
//! topic id), each refusal with its Kafka code and (v5+) a message, the versions table row, and
//! kafka-python's and confluent-kafka's admin clients creating, deleting and no longer listing a
//! topic (skipped with a note where the module is not installed).

use crate::support::kafka;

use crate::support::python;
use python::python_module_missing as module_missing;
use std::process::Command;

use fencelog::client::Client;
use fencelog::domain::TopicConfig;
use fencelog::server::kafka::topic_id::topic_id;
use fencelog::server::kafka::versions::supported;
use fencelog::testing::TestServer;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::{ApiKey, DeleteTopicsRequest, MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use kafka::KafkaConnection;

const ADMIN_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/kafka-clients/admin_delete_topics.py"
);

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

async fn create(client: &Client, topic: &str) {
    client
        .create_topic(topic, 2, TopicConfig::default())
        .await
        .expect("create topic");
}

#[test]
fn delete_topics_is_advertised_in_versions_1_to_6() {
    // Proves: the versions table (what ApiVersions advertises) has DeleteTopics 1..=6.
    let row = supported(ApiKey::DeleteTopics).expect("DeleteTopics is advertised");
    assert_eq!((row.min_version, row.max_version), (1, 6));
}

#[tokio::test]
async fn delete_topics_deletes_and_refuses_per_topic_in_every_version() {
    // Proves: in each of v1..=6 a named topic is deleted (gone from the broker and from Kafka
    // Metadata), a missing one is UNKNOWN_TOPIC_OR_PARTITION, a bad name INVALID_TOPIC_EXCEPTION,
    // a name given twice INVALID_REQUEST for both entries, v5+ errors carry a message, and v6
    // deletes by topic id and answers UNKNOWN_TOPIC_ID for an id no topic has.
    let server = TestServer::builder()
        .kafka()
        .start()
        .await
        .expect("start server");
    let native = Client::connect(server.addr()).await.unwrap();
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 1..=6 {
        let deleted = format!("deleted-{version}");
        let twice = format!("twice-{version}");
        let by_id = format!("by-id-{version}");
        for topic in [&deleted, &twice, &by_id] {
            create(&native, topic).await;
        }
        let names = [
            deleted.clone(),
            format!("missing-{version}"),
            "bad/name".to_string(),
            twice.clone(),
            twice.clone(),
        ];
        let mut request = DeleteTopicsRequest::default().with_timeout_ms(30_000);
        request = if version >= 6 {
            let mut topics: Vec<DeleteTopicState> = names
                .iter()
                .map(|topic| DeleteTopicState::default().with_name(Some(name(topic))))
                .collect();
            topics.push(DeleteTopicState::default().with_topic_id(topic_id(&by_id)));
            topics.push(DeleteTopicState::default().with_topic_id(Uuid::from_u128(7)));
            request.with_topics(topics)
        } else {
            request.with_topic_names(names.iter().map(|topic| name(topic)).collect())
        };
        let response = connection.call(version, &request).await;
        let codes: Vec<i16> = response.responses.iter().map(|r| r.error_code).collect();
        let mut expected = vec![0, 3, 17, 42, 42];
        if version >= 6 {
            expected.extend([0, 100]);
        }
        assert_eq!(codes, expected, "v{version}");
        assert_eq!(
            response.responses[0].name.as_ref().map(|n| n.0.as_str()),
            Some(deleted.as_str())
        );
        if version >= 5 {
            for refused in response.responses.iter().filter(|r| r.error_code != 0) {
                assert!(
                    refused.error_message.is_some(),
                    "v{version}: a message says why"
                );
            }
        }
        if version >= 6 {
            assert_eq!(response.responses[0].topic_id, topic_id(&deleted));
            let by_id_result = &response.responses[5];
            assert_eq!(
                by_id_result.name.as_ref().map(|n| n.0.as_str()),
                Some(by_id.as_str())
            );
            assert_eq!(response.responses[6].topic_id, Uuid::from_u128(7));
            assert!(server.broker().topic(&by_id).is_err(), "deleted by id");
        } else {
            assert!(server.broker().topic(&by_id).is_ok(), "not named: kept");
        }
        assert!(server.broker().topic(&deleted).is_err(), "v{version}");
        assert!(
            server.broker().topic(&twice).is_ok(),
            "a refused duplicate is not deleted"
        );

        let metadata = connection
            .call(12, &MetadataRequest::default().with_topics(None::<Vec<_>>))
            .await;
        let listed: Vec<&str> = metadata
            .topics
            .iter()
            .filter_map(|topic| topic.name.as_ref().map(|n| n.0.as_str()))
            .collect();
        assert!(
            !listed.contains(&deleted.as_str()),
            "v{version}: {listed:?}"
        );
    }
}

#[tokio::test]
async fn a_topic_deleted_through_kafka_can_be_created_again_empty() {
    // Proves: a topic deleted by DeleteTopics and created again under the same name is empty and
    // starts above the deleted topic's epochs (its fence floor).
    let server = TestServer::builder()
        .kafka()
        .start()
        .await
        .expect("start server");
    let native = Client::connect(server.addr()).await.unwrap();
    create(&native, "again").await;
    let lease = native
        .acquire_lease("again", 0, "writer", std::time::Duration::from_secs(30))
        .await
        .unwrap();
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let request = DeleteTopicsRequest::default().with_topic_names(vec![name("again")]);
    let response = connection.call(4, &request).await;
    assert_eq!(response.responses[0].error_code, 0);
    create(&native, "again").await;
    let offsets = native.list_offsets("again", 0).await.unwrap();
    assert_eq!(offsets.latest, 0);
    assert!(offsets.epoch > lease.epoch, "{offsets:?}");
}

async fn admin_round_trip(client_name: &'static str, module: &str) {
    if module_missing(module) {
        return;
    }
    let server = TestServer::builder().kafka().start().await.unwrap();
    let bootstrap = server.kafka_addr().to_string();
    let topic = format!("admin-{}", client_name.replace('_', "-"));
    let script_topic = topic.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .args([ADMIN_SCRIPT, &bootstrap, &script_topic, client_name])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{client_name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["created", "listed", "deleted", "not listed"]
    );
    assert!(server.broker().topic(&topic).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_admin_creates_and_deletes_a_topic() {
    // Proves: kafka-python's KafkaAdminClient.create_topics then delete_topics works, and
    // list_topics no longer shows the topic.
    admin_round_trip("kafka-python", "kafka").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_admin_creates_and_deletes_a_topic() {
    // Proves: confluent-kafka's (librdkafka) AdminClient.create_topics then delete_topics
    // works, and list_topics no longer shows the topic.
    admin_round_trip("confluent", "confluent_kafka").await;
}
