//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs on the Kafka listener, in every
//! advertised version, spoken raw with `kafka-protocol`'s client-side encoder; and CreateTopics
//! v5+ returning a topic's configs.

use crate::support::kafka;

use fencelog::domain::TopicConfig;
use fencelog::server::kafka::versions::supported;
use fencelog::testing::TestServer;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::{
    alter_configs_request, incremental_alter_configs_request, AlterConfigsRequest, ApiKey,
    CreateTopicsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use kafka::KafkaConnection;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;

async fn kafka_server() -> TestServer {
    TestServer::builder()
        .kafka()
        .start()
        .await
        .expect("start server")
}

async fn create(server: &TestServer, topic: &str) {
    fencelog::client::Client::connect(server.addr())
        .await
        .expect("connect")
        .create_topic(topic, 1, TopicConfig::default())
        .await
        .expect("create topic");
}

fn resource(resource_type: i8, name: &str) -> DescribeConfigsResource {
    DescribeConfigsResource::default()
        .with_resource_type(resource_type)
        .with_resource_name(StrBytes::from_string(name.to_string()))
}

fn value<'a>(result: &'a DescribeConfigsResult, key: &str) -> Option<&'a str> {
    result
        .configs
        .iter()
        .find(|entry| entry.name.as_str() == key)
        .and_then(|entry| entry.value.as_ref().map(|value| value.as_str()))
}

async fn describe(
    connection: &mut KafkaConnection,
    version: i16,
    topic: &str,
) -> DescribeConfigsResult {
    let request = DescribeConfigsRequest::default().with_resources(vec![resource(TOPIC, topic)]);
    let mut response = connection.call(version, &request).await;
    response.results.remove(0)
}

/// The advertised ranges are the ones these tests send.
#[test]
fn the_config_apis_advertise_what_is_tested() {
    let range = |key| supported(key).map(|api| (api.min_version, api.max_version));
    assert_eq!(range(ApiKey::DescribeConfigs), Some((1, 4)));
    assert_eq!(range(ApiKey::AlterConfigs), Some((0, 2)));
    assert_eq!(range(ApiKey::IncrementalAlterConfigs), Some((0, 1)));
}

/// Every version describes a topic's settings under Kafka's names (with sources, read-only
/// flags, types and documentation where the version has them), the broker's read-only set,
/// only the keys asked for, and refuses an unknown topic, another broker and other resource
/// types, each resource on its own.
#[tokio::test]
async fn describe_configs_in_every_version() {
    let server = kafka_server().await;
    create(&server, "described").await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 1..=4 {
        let request = DescribeConfigsRequest::default()
            .with_include_documentation(version >= 3)
            .with_resources(vec![
                resource(TOPIC, "described"),
                resource(BROKER, &server_node_id(&server)),
                resource(BROKER, ""),
                resource(TOPIC, "described").with_configuration_keys(Some(vec![
                    StrBytes::from_static_str("retention.ms"),
                    StrBytes::from_static_str("no.such.key"),
                ])),
                resource(TOPIC, "missing"),
                resource(BROKER, "99"),
                resource(32, "group"),
            ]);
        let response = connection.call(version, &request).await;
        let codes: Vec<i16> = response.results.iter().map(|r| r.error_code).collect();
        assert_eq!(codes, [0, 0, 0, 0, 3, 42, 42], "v{version}");
        let topic = &response.results[0];
        for key in [
            "retention.ms",
            "retention.bytes",
            "segment.bytes",
            "cleanup.policy",
            "min.insync.replicas",
            "message.timestamp.type",
            "max.message.bytes",
            "fencelog.flush",
        ] {
            assert!(value(topic, key).is_some(), "v{version}: {key}");
        }
        assert_eq!(value(topic, "retention.ms"), Some("-1"));
        assert_eq!(value(topic, "cleanup.policy"), Some("delete"));
        assert_eq!(value(topic, "segment.bytes"), Some("67108864"));
        assert_eq!(value(topic, "fencelog.flush"), Some("always"));
        let retention = topic
            .configs
            .iter()
            .find(|c| c.name.as_str() == "retention.ms")
            .unwrap();
        assert!(!retention.read_only && !retention.is_sensitive);
        assert_eq!(retention.config_source, 5, "DEFAULT_CONFIG");
        let flush = topic
            .configs
            .iter()
            .find(|c| c.name.as_str() == "fencelog.flush")
            .unwrap();
        assert!(flush.read_only);
        if version >= 3 {
            assert_eq!(retention.config_type, 5, "v{version}: LONG");
            assert!(retention.documentation.is_some());
        }
        let broker = &response.results[1];
        assert!(!broker.configs.is_empty());
        assert!(broker.configs.iter().all(|c| c.read_only));
        assert_eq!(
            value(broker, "broker.id"),
            Some(server_node_id(&server).as_str())
        );
        assert_eq!(response.results[2].configs.len(), broker.configs.len());
        let filtered: Vec<&str> = response.results[3]
            .configs
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(filtered, ["retention.ms"], "v{version}");
        for refused in &response.results[4..] {
            assert!(
                refused.error_message.is_some(),
                "v{version}: a message says why"
            );
        }
    }
}

fn server_node_id(server: &TestServer) -> String {
    server.service().node_id().to_string()
}

fn alterable(name: &str, value: Option<&str>) -> alter_configs_request::AlterableConfig {
    alter_configs_request::AlterableConfig::default()
        .with_name(StrBytes::from_string(name.to_string()))
        .with_value(value.map(|value| StrBytes::from_string(value.to_string())))
}

fn incremental(
    name: &str,
    operation: i8,
    value: Option<&str>,
) -> incremental_alter_configs_request::AlterableConfig {
    incremental_alter_configs_request::AlterableConfig::default()
        .with_name(StrBytes::from_string(name.to_string()))
        .with_config_operation(operation)
        .with_value(value.map(|value| StrBytes::from_string(value.to_string())))
}

/// IncrementalAlterConfigs in every version: SET and DELETE of the live keys change the topic
/// (DescribeConfigs shows it, the open partitions and `topic.json` have it), validate_only
/// changes nothing, and keys that cannot change, unknown keys and bad values are refused by
/// name, each resource on its own.
#[tokio::test]
async fn incremental_alter_configs_in_every_version() {
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 0..=1 {
        let topic = format!("incremental-{version}");
        create(&server, &topic).await;
        let alter = |configs, validate_only| {
            IncrementalAlterConfigsRequest::default()
                .with_validate_only(validate_only)
                .with_resources(vec![
                    incremental_alter_configs_request::AlterConfigsResource::default()
                        .with_resource_type(TOPIC)
                        .with_resource_name(StrBytes::from_string(topic.clone()))
                        .with_configs(configs),
                ])
        };
        let response = connection
            .call(
                version,
                &alter(vec![incremental("retention.ms", 0, Some("3600000"))], true),
            )
            .await;
        assert_eq!(response.responses[0].error_code, 0, "v{version}");
        assert_eq!(
            value(&describe(&mut connection, 1, &topic).await, "retention.ms"),
            Some("-1"),
            "validate_only changed nothing"
        );

        let response = connection
            .call(
                version,
                &alter(
                    vec![
                        incremental("retention.ms", 0, Some("3600000")),
                        incremental("segment.bytes", 0, Some("1048576")),
                        incremental("retention.bytes", 0, Some("1000000")),
                        incremental("cleanup.policy", 0, Some("delete")),
                    ],
                    false,
                ),
            )
            .await;
        assert_eq!(
            response.responses[0].error_code, 0,
            "v{version}: {:?}",
            response.responses[0].error_message
        );
        let described = describe(&mut connection, 1, &topic).await;
        assert_eq!(value(&described, "retention.ms"), Some("3600000"));
        assert_eq!(value(&described, "segment.bytes"), Some("1048576"));
        let source = described
            .configs
            .iter()
            .find(|c| c.name.as_str() == "retention.ms")
            .unwrap()
            .config_source;
        assert_eq!(source, 1, "TOPIC_CONFIG");
        let local = server.broker().topic(&topic).unwrap();
        assert_eq!(local.config().retention_ms, Some(3_600_000));
        let partition = server.broker().partition(&topic, 0).unwrap();
        assert_eq!(
            partition.limits().retention_ms,
            Some(3_600_000),
            "applied to the open partition"
        );
        assert_eq!(partition.limits().segment_bytes, 1_048_576);
        let file = std::fs::read_to_string(
            server
                .data_dir()
                .join("topics")
                .join(&topic)
                .join("topic.json"),
        )
        .unwrap();
        assert!(file.contains("3600000"), "durable in topic.json: {file}");

        // DELETE goes back to the default.
        let response = connection
            .call(
                version,
                &alter(vec![incremental("retention.bytes", 1, None)], false),
            )
            .await;
        assert_eq!(response.responses[0].error_code, 0);
        assert_eq!(
            value(
                &describe(&mut connection, 1, &topic).await,
                "retention.bytes"
            ),
            Some("-1")
        );

        for (config, code, key) in [
            (
                incremental("cleanup.policy", 0, Some("compact")),
                44,
                "cleanup.policy",
            ),
            (
                incremental("message.timestamp.type", 0, Some("LogAppendTime")),
                44,
                "message.timestamp.type",
            ),
            (
                incremental("fencelog.flush", 0, Some("never")),
                44,
                "fencelog.flush",
            ),
            (
                incremental("min.insync.replicas", 0, Some("2")),
                44,
                "min.insync.replicas",
            ),
            (
                incremental("compression.type", 0, Some("zstd")),
                40,
                "compression.type",
            ),
            (
                incremental("retention.ms", 0, Some("0")),
                40,
                "retention.ms",
            ),
            (
                incremental("segment.bytes", 0, Some("12")),
                40,
                "segment_bytes",
            ),
            (
                incremental("retention.ms", 2, Some("5")),
                40,
                "retention.ms",
            ),
        ] {
            let response = connection.call(version, &alter(vec![config], false)).await;
            let answer = &response.responses[0];
            assert_eq!(
                answer.error_code, code,
                "v{version} {key}: {:?}",
                answer.error_message
            );
            let message = answer
                .error_message
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default();
            assert!(message.contains(key), "v{version}: {message:?} names {key}");
        }
        assert_eq!(
            value(&describe(&mut connection, 1, &topic).await, "retention.ms"),
            Some("3600000"),
            "refusals changed nothing"
        );

        // Per resource: an unknown topic and a broker resource beside a good one.
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(TOPIC)
                .with_resource_name(StrBytes::from_static_str("missing"))
                .with_configs(vec![incremental("retention.ms", 0, Some("1000"))]),
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(BROKER)
                .with_resource_name(StrBytes::from_string(server_node_id(&server)))
                .with_configs(vec![incremental("num.partitions", 0, Some("3"))]),
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(TOPIC)
                .with_resource_name(StrBytes::from_string(topic.clone()))
                .with_configs(vec![incremental("retention.ms", 0, Some("7200000"))]),
        ]);
        let response = connection.call(version, &request).await;
        let codes: Vec<i16> = response.responses.iter().map(|r| r.error_code).collect();
        assert_eq!(codes, [3, 44, 0], "v{version}");
        assert_eq!(
            value(&describe(&mut connection, 1, &topic).await, "retention.ms"),
            Some("7200000")
        );
    }
}

/// AlterConfigs in every version replaces the topic's live set (a live key not named goes back
/// to its default), honours validate_only and refuses keys that cannot change.
#[tokio::test]
async fn alter_configs_in_every_version() {
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 0..=2 {
        let topic = format!("altered-{version}");
        create(&server, &topic).await;
        let alter = |configs, validate_only| {
            AlterConfigsRequest::default()
                .with_validate_only(validate_only)
                .with_resources(vec![alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(TOPIC)
                    .with_resource_name(StrBytes::from_string(topic.clone()))
                    .with_configs(configs)])
        };
        let response = connection
            .call(
                version,
                &alter(
                    vec![
                        alterable("retention.bytes", Some("5000000")),
                        alterable("retention.ms", Some("60000")),
                    ],
                    false,
                ),
            )
            .await;
        assert_eq!(
            response.responses[0].error_code, 0,
            "v{version}: {:?}",
            response.responses[0].error_message
        );
        let described = describe(&mut connection, 1, &topic).await;
        assert_eq!(value(&described, "retention.bytes"), Some("5000000"));
        assert_eq!(value(&described, "retention.ms"), Some("60000"));

        let response = connection
            .call(
                version,
                &alter(vec![alterable("retention.ms", Some("120000"))], true),
            )
            .await;
        assert_eq!(response.responses[0].error_code, 0);
        assert_eq!(
            value(&describe(&mut connection, 1, &topic).await, "retention.ms"),
            Some("60000"),
            "validate_only"
        );

        let response = connection
            .call(
                version,
                &alter(
                    vec![
                        alterable("retention.ms", Some("120000")),
                        alterable("cleanup.policy", Some("delete")),
                    ],
                    false,
                ),
            )
            .await;
        assert_eq!(response.responses[0].error_code, 0);
        let described = describe(&mut connection, 1, &topic).await;
        assert_eq!(value(&described, "retention.ms"), Some("120000"));
        assert_eq!(
            value(&described, "retention.bytes"),
            Some("-1"),
            "not named: back to the default"
        );

        let response = connection
            .call(
                version,
                &alter(vec![alterable("cleanup.policy", Some("compact"))], false),
            )
            .await;
        assert_eq!(response.responses[0].error_code, 44, "POLICY_VIOLATION");
        assert!(response.responses[0]
            .error_message
            .as_ref()
            .unwrap()
            .contains("cleanup.policy"));
    }
}

/// CreateTopics v5+ answers a created topic's configs, as DescribeConfigs reports them.
#[tokio::test]
async fn create_topics_v5_and_later_return_the_configs() {
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 5..=7 {
        let request = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(format!(
                "with-configs-{version}"
            ))))
            .with_num_partitions(1)
            .with_replication_factor(1)
            .with_configs(vec![
                kafka_protocol::messages::create_topics_request::CreatableTopicConfig::default()
                    .with_name(StrBytes::from_static_str("retention.ms"))
                    .with_value(Some(StrBytes::from_static_str("60000"))),
            ])]);
        let response = connection.call(version, &request).await;
        let topic = &response.topics[0];
        assert_eq!(topic.error_code, 0);
        let configs = topic.configs.as_ref().expect("configs");
        let retention = configs
            .iter()
            .find(|c| c.name.as_str() == "retention.ms")
            .expect("retention.ms");
        assert_eq!(retention.value.as_ref().map(|v| v.as_str()), Some("60000"));
        assert_eq!(retention.config_source, 1);
        assert!(configs.iter().any(|c| c.name.as_str() == "segment.bytes"));
    }
}

const ADMIN_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/kafka-clients/admin_configs.py"
);

/// confluent-kafka (librdkafka), its ordinary AdminClient: DescribeConfigs of a topic returns
/// `retention.ms`, `cleanup.policy`, `segment.bytes` and `retention.bytes`, of the broker a
/// non-empty set; IncrementalAlterConfigs changes `retention.ms` and DescribeConfigs shows it.
/// Skipped, with a note, where python3 or confluent_kafka is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_describes_and_alters_topic_configs() {
    if crate::support::python::python_module_missing("confluent_kafka") {
        return;
    }
    let server = kafka_server().await;
    create(&server, "configured").await;
    let bootstrap = server.kafka_addr().to_string();
    let broker_id = server_node_id(&server);
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args([
                ADMIN_SCRIPT,
                &bootstrap,
                "configured",
                &broker_id,
                "3600000",
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "confluent-kafka failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        "topic retention.ms=-1 cleanup.policy=delete segment.bytes=67108864 retention.bytes=-1"
    );
    assert!(
        lines[1].starts_with("broker ") && !lines[1].starts_with("broker 0 "),
        "{}",
        lines[1]
    );
    assert_eq!(lines[2..], ["altered", "topic retention.ms=3600000"]);
    assert_eq!(
        server
            .broker()
            .topic("configured")
            .unwrap()
            .config()
            .retention_ms,
        Some(3_600_000)
    );
}
