//! Authorization with `--auth` on: ACLs per principal, topic pattern and operation, checked in
//! one place both listeners call. The judged scenario (produce on `orders-*`, no lease on
//! `payments`: refused, nothing changes), grants picked up live, Metadata filtering, and Kafka
//! clients with SASL/SCRAM producing and consuming (skipped with a note where not installed).

use crate::support::kafka;

use crate::support::python;
use python::python_module_missing as module_missing;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::support::batch;
use bytes::Bytes;
use fencelog::auth::acl::{add_acl, parse_operations, TopicPattern};
use fencelog::auth::{files::RELOAD_INTERVAL, users, Security};
use fencelog::client::{Client, ClientError};
use fencelog::domain::TopicConfig;
use fencelog::protocol::ErrorCode;
use fencelog::server::kafka::KafkaConfig;
use fencelog::server::ServerConfig;
use fencelog::testing::TestServer;

const TTL: Duration = Duration::from_secs(30);

fn grant(directory: &std::path::Path, principal: &str, topic: &str, ops: &str) {
    add_acl(
        directory,
        principal,
        &TopicPattern::parse(topic).unwrap(),
        &parse_operations(ops).unwrap(),
    )
    .unwrap();
}

fn security_config(directory: &std::path::Path) -> ServerConfig {
    let security = Security::open(directory, ["admin".to_owned()]).unwrap();
    ServerConfig {
        security: Some(Arc::new(security)),
        ..ServerConfig::default()
    }
}

async fn client_as(server: &TestServer, user: &str) -> Client {
    Client::builder()
        .addr(server.addr().to_string())
        .credentials(user, format!("{user}-pw"))
        .connect()
        .await
        .unwrap()
}

fn assert_not_authorized(error: &ClientError, principal: &str, operation: &str, topic: &str) {
    assert_eq!(error.code(), Some(ErrorCode::NotAuthorized), "{error}");
    let message = error.to_string();
    for part in [principal, operation, topic] {
        assert!(message.contains(part), "{message} should name {part}");
    }
}

/// Users `admin` (super user) and `alice`, with `alice` allowed to produce on `orders-*`.
async fn orders_and_payments() -> (tempfile::TempDir, TestServer, Client, Client) {
    let security = tempfile::tempdir().unwrap();
    users::add_user(security.path(), "admin", "admin-pw").unwrap();
    users::add_user(security.path(), "alice", "alice-pw").unwrap();
    grant(security.path(), "alice", "orders-*", "produce");
    let server = TestServer::builder()
        .server_config(security_config(security.path()))
        .start()
        .await
        .unwrap();
    let admin = client_as(&server, "admin").await;
    for topic in ["orders-eu", "payments"] {
        admin
            .create_topic(topic, 1, TopicConfig::default())
            .await
            .unwrap();
    }
    let alice = client_as(&server, "alice").await;
    (security, server, admin, alice)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_on_orders_cannot_lease_payments_and_nothing_changes() {
    // Proves: the judged scenario. alice may produce on orders-* but not lease payments: her
    // lease request is NOT_AUTHORIZED naming her, the operation and the topic; the payments
    // holder is not fenced (epoch, log end unchanged); a produce to payments is refused too.
    let (_security, _server, admin, alice) = orders_and_payments().await;
    let holder = admin
        .acquire_lease("payments", 0, "payments-service", TTL)
        .await
        .unwrap();
    admin
        .produce("payments", 0, batch(holder.epoch, "p1"))
        .await
        .unwrap();
    let before = admin.list_offsets("payments", 0).await.unwrap();

    let refused = alice
        .acquire_lease("payments", 0, "alice", TTL)
        .await
        .unwrap_err();
    assert_not_authorized(&refused, "alice", "lease", "payments");
    assert!(!refused.is_retriable());
    let refused = alice
        .produce("payments", 0, batch(holder.epoch, "forged"))
        .await
        .unwrap_err();
    assert_not_authorized(&refused, "alice", "produce", "payments");
    // Not even a lease on her own topics: produce was granted, lease was not.
    let refused = alice
        .acquire_lease("orders-eu", 0, "alice", TTL)
        .await
        .unwrap_err();
    assert_not_authorized(&refused, "alice", "lease", "orders-eu");

    assert_eq!(admin.list_offsets("payments", 0).await.unwrap(), before);
    admin
        .produce("payments", 0, batch(holder.epoch, "p2"))
        .await
        .expect("the holder was not fenced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_take_effect_while_the_server_runs() {
    // Proves: `acl add` on a running server's directory is picked up without a restart (within
    // RELOAD_INTERVAL), and the granted principal can then lease and produce.
    let (security, _server, _admin, alice) = orders_and_payments().await;
    let refused = alice
        .acquire_lease("orders-eu", 0, "alice", TTL)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::NotAuthorized));
    grant(security.path(), "alice", "orders-*", "lease,consume");
    tokio::time::sleep(RELOAD_INTERVAL + Duration::from_millis(100)).await;
    let lease = alice
        .acquire_lease("orders-eu", 0, "alice", TTL)
        .await
        .unwrap();
    alice
        .produce("orders-eu", 0, batch(lease.epoch, "o1"))
        .await
        .unwrap();
    assert_eq!(alice.list_offsets("orders-eu", 0).await.unwrap().latest, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_lists_only_the_topics_a_principal_may_use() {
    // Proves: Metadata of all topics hides topics without any grant; naming one is refused;
    // a user with no grant at all sees nothing and may do nothing (deny by default).
    let (security, server, admin, alice) = orders_and_payments().await;
    let names = |topics: Vec<fencelog::protocol::TopicMetadata>| {
        topics
            .into_iter()
            .map(|topic| topic.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(names(alice.list_topics().await.unwrap()), ["orders-eu"]);
    assert_eq!(names(admin.list_topics().await.unwrap()).len(), 2);
    let refused = alice.metadata(&["payments"]).await.unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::NotAuthorized));

    users::add_user(security.path(), "carol", "carol-pw").unwrap();
    let carol = client_as(&server, "carol").await;
    assert!(carol.list_topics().await.unwrap().is_empty());
    let refused = carol.list_offsets("orders-eu", 0).await.unwrap_err();
    assert_not_authorized(&refused, "carol", "consume", "orders-eu");
    let refused = carol
        .create_topic("carols", 1, TopicConfig::default())
        .await
        .unwrap_err();
    assert_not_authorized(&refused, "carol", "create", "carols");
}

const SASL_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/kafka-clients/sasl_produce_consume.py"
);

async fn kafka_sasl(client_name: &'static str, module: &str) {
    if module_missing(module) {
        return;
    }
    let security = tempfile::tempdir().unwrap();
    users::add_user(security.path(), "admin", "admin-pw").unwrap();
    users::add_user(security.path(), "alice", "alice-pw").unwrap();
    grant(security.path(), "alice", "orders-*", "produce,consume");
    let kafka = KafkaConfig::advertising(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = TestServer::builder()
        .server_config(security_config(security.path()))
        .kafka_config(kafka)
        .start()
        .await
        .unwrap();
    let admin = client_as(&server, "admin").await;
    admin
        .create_topic("orders-kafka", 1, TopicConfig::default())
        .await
        .unwrap();
    let bootstrap = server.kafka_addr().to_string();
    let run = |password: &'static str| {
        let bootstrap = bootstrap.clone();
        tokio::task::spawn_blocking(move || {
            Command::new("python3")
                .args([
                    SASL_SCRIPT,
                    &bootstrap,
                    "orders-kafka",
                    client_name,
                    "alice",
                    password,
                    "20",
                ])
                .output()
                .unwrap()
        })
    };
    let output = run("alice-pw").await.unwrap();
    assert!(
        output.status.success(),
        "{client_name}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        admin.list_offsets("orders-kafka", 0).await.unwrap().latest,
        20
    );

    let output = run("wrong-pw").await.unwrap();
    assert!(
        !output.status.success(),
        "{client_name} with a wrong password succeeded"
    );
    assert_eq!(
        admin.list_offsets("orders-kafka", 0).await.unwrap().latest,
        20,
        "nothing written with a wrong password"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_authenticates_with_scram_and_fails_with_a_wrong_password() {
    kafka_sasl("confluent", "confluent_kafka").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_authenticates_with_scram_and_fails_with_a_wrong_password() {
    kafka_sasl("kafka-python", "kafka").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_sasl_versions_run_the_scram_exchange() {
    // Proves: every advertised SASL version works on the wire. SaslHandshake v1 then
    // SaslAuthenticate at each of v0..=2 completes a SCRAM exchange; a request before
    // authentication closes the connection; a wrong proof is SASL_AUTHENTICATION_FAILED and
    // closes it; an unsupported mechanism is UNSUPPORTED_SASL_MECHANISM.
    use fencelog::auth::ClientExchange;
    use kafka::KafkaConnection;
    use kafka_protocol::messages::{
        MetadataRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
    };
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::ResponseError;

    let security = tempfile::tempdir().unwrap();
    users::add_user(security.path(), "alice", "alice-pw").unwrap();
    let kafka = KafkaConfig::advertising(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = TestServer::builder()
        .server_config(security_config(security.path()))
        .kafka_config(kafka)
        .start()
        .await
        .unwrap();
    let handshake = |mechanism: &'static str| {
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism))
    };
    let authenticate =
        |bytes: Vec<u8>| SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes));

    for version in 0..=2 {
        let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
        let answer = connection.call(1, &handshake("SCRAM-SHA-256")).await;
        assert_eq!(answer.error_code, 0);
        let (mut exchange, first) = ClientExchange::start("alice", "alice-pw");
        let answer = connection.call(version, &authenticate(first)).await;
        assert_eq!(answer.error_code, 0, "v{version}");
        let last = exchange.respond(&answer.auth_bytes).unwrap();
        let answer = connection.call(version, &authenticate(last)).await;
        assert_eq!(answer.error_code, 0, "v{version}");
        exchange.verify(&answer.auth_bytes).unwrap();
        // Authenticated: ordinary requests are answered.
        connection.call(1, &MetadataRequest::default()).await;
    }

    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    connection.send(1, &MetadataRequest::default()).await;
    connection.assert_closed().await;

    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let answer = connection.call(1, &handshake("PLAIN")).await;
    assert_eq!(
        answer.error_code,
        ResponseError::UnsupportedSaslMechanism.code()
    );
    let answer = connection.call(1, &handshake("SCRAM-SHA-256")).await;
    assert_eq!(answer.error_code, 0);
    let (mut exchange, first) = ClientExchange::start("alice", "wrong-pw");
    let answer = connection.call(2, &authenticate(first)).await;
    let last = exchange.respond(&answer.auth_bytes).unwrap();
    let answer = connection.call(2, &authenticate(last)).await;
    assert_eq!(
        answer.error_code,
        ResponseError::SaslAuthenticationFailed.code()
    );
    connection.assert_closed().await;
}

/// Writes one raw SASL token frame (after SaslHandshake v0): a 4-byte big-endian length, then
/// the token, no Kafka header.
async fn write_raw_token(connection: &mut kafka::KafkaConnection, token: &[u8]) {
    let mut frame = (token.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(token);
    connection.write(&frame).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_handshake_v0_runs_scram_over_raw_frames_and_closes_on_a_wrong_password() {
    // Proves: SaslHandshake v0 (advertised for librdkafka 2.0) is implemented as Kafka's broker
    // does: the SCRAM messages then travel as raw size-prefixed frames without Kafka headers,
    // answered the same way, after which a Metadata request is answered with the topic; a wrong
    // password, a token that is not SCRAM, and a token over the raw-token limit each close the
    // connection without an answer.
    use fencelog::auth::ClientExchange;
    use fencelog::server::kafka::sasl::MAX_RAW_SASL_TOKEN_BYTES;
    use kafka::KafkaConnection;
    use kafka_protocol::messages::{MetadataRequest, SaslHandshakeRequest};
    use kafka_protocol::protocol::StrBytes;

    let security = tempfile::tempdir().unwrap();
    users::add_user(security.path(), "admin", "admin-pw").unwrap();
    users::add_user(security.path(), "alice", "alice-pw").unwrap();
    grant(security.path(), "alice", "orders-*", "produce,consume");
    let kafka = KafkaConfig::advertising(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = TestServer::builder()
        .server_config(security_config(security.path()))
        .kafka_config(kafka)
        .start()
        .await
        .unwrap();
    client_as(&server, "admin")
        .await
        .create_topic("orders-raw", 1, TopicConfig::default())
        .await
        .unwrap();
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("SCRAM-SHA-256"));

    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let answer = connection.call(0, &handshake).await;
    assert_eq!(answer.error_code, 0);
    assert_eq!(
        answer.mechanisms,
        vec![StrBytes::from_static_str("SCRAM-SHA-256")]
    );
    let (mut exchange, first) = ClientExchange::start("alice", "alice-pw");
    write_raw_token(&mut connection, &first).await;
    let server_first = connection
        .read_frame()
        .await
        .expect("server-first as a raw frame");
    let last = exchange.respond(&server_first).unwrap();
    write_raw_token(&mut connection, &last).await;
    let server_final = connection
        .read_frame()
        .await
        .expect("server-final as a raw frame");
    exchange.verify(&server_final).unwrap();
    // Authenticated: ordinary Kafka requests follow.
    let metadata = connection
        .call(1, &MetadataRequest::default().with_topics(None))
        .await;
    let topics: Vec<&str> = metadata
        .topics
        .iter()
        .filter_map(|topic| topic.name.as_ref().map(|name| name.as_str()))
        .collect();
    assert_eq!(topics, ["orders-raw"]);

    // A wrong password: the server-first comes, the final message closes the connection.
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    assert_eq!(connection.call(0, &handshake).await.error_code, 0);
    let (mut exchange, first) = ClientExchange::start("alice", "wrong-pw");
    write_raw_token(&mut connection, &first).await;
    let server_first = connection
        .read_frame()
        .await
        .expect("server-first as a raw frame");
    let last = exchange.respond(&server_first).unwrap();
    write_raw_token(&mut connection, &last).await;
    connection.assert_closed().await;

    // A token that is not SCRAM (here a Kafka request, as after v1) closes the connection.
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    assert_eq!(connection.call(0, &handshake).await.error_code, 0);
    connection.send(1, &MetadataRequest::default()).await;
    connection.assert_closed().await;

    // A token over the limit closes the connection unread.
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    assert_eq!(connection.call(0, &handshake).await.error_code, 0);
    write_raw_token(&mut connection, &vec![b'n'; MAX_RAW_SASL_TOKEN_BYTES + 1]).await;
    connection.assert_closed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_lists_metadata_from_an_auth_server_over_sasl_scram() {
    // Proves issue 33: kcat 1.7.1 (librdkafka 2.0) logs in to an `--auth` server with
    // SASL_PLAINTEXT / SCRAM-SHA-256 and lists the topic; a wrong password lists nothing.
    if crate::kafka_kcat::kcat_missing() {
        return;
    }
    let security = tempfile::tempdir().unwrap();
    users::add_user(security.path(), "admin", "admin-pw").unwrap();
    users::add_user(security.path(), "alice", "alice-pw").unwrap();
    grant(security.path(), "alice", "orders-*", "produce,consume");
    let kafka = KafkaConfig::advertising(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = TestServer::builder()
        .server_config(security_config(security.path()))
        .kafka_config(kafka)
        .start()
        .await
        .unwrap();
    client_as(&server, "admin")
        .await
        .create_topic("orders-kcat", 2, TopicConfig::default())
        .await
        .unwrap();
    let bootstrap = server.kafka_addr().to_string();
    let list = |password: &'static str| {
        let bootstrap = bootstrap.clone();
        tokio::task::spawn_blocking(move || {
            Command::new("kcat")
                .args([
                    "-L",
                    "-b",
                    &bootstrap,
                    "-m",
                    "10",
                    "-X",
                    "security.protocol=SASL_PLAINTEXT",
                    "-X",
                    "sasl.mechanism=SCRAM-SHA-256",
                    "-X",
                    "sasl.username=alice",
                    "-X",
                    &format!("sasl.password={password}"),
                ])
                .output()
                .unwrap()
        })
    };
    let output = list("alice-pw").await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "kcat -L failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("topic \"orders-kcat\" with 2 partitions:"),
        "{stdout}\n{stderr}"
    );

    let output = list("wrong-pw").await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        !output.status.success() && !stdout.contains("orders-kcat"),
        "kcat with a wrong password listed metadata: {stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_apis_are_authorized_per_resource() {
    // Proves: over SASL, alice (consume on orders-*) may describe orders-eu's configs but not
    // payments' (TOPIC_AUTHORIZATION_FAILED for that resource alone) nor the broker's
    // (CLUSTER_AUTHORIZATION_FAILED), and may not alter orders-eu (admin needed); nothing
    // changes. Through the native listener her AlterTopicConfig is NOT_AUTHORIZED too. Neither
    // listener lets her grow orders-eu (CreatePartitions); admin can.
    use fencelog::auth::ClientExchange;
    use kafka::KafkaConnection;
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::{
        incremental_alter_configs_request, DescribeConfigsRequest, IncrementalAlterConfigsRequest,
        SaslAuthenticateRequest, SaslHandshakeRequest,
    };
    use kafka_protocol::protocol::StrBytes;

    let security = tempfile::tempdir().unwrap();
    users::add_user(security.path(), "admin", "admin-pw").unwrap();
    users::add_user(security.path(), "alice", "alice-pw").unwrap();
    grant(security.path(), "alice", "orders-*", "consume");
    let kafka = KafkaConfig::advertising(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = TestServer::builder()
        .server_config(security_config(security.path()))
        .kafka_config(kafka)
        .start()
        .await
        .unwrap();
    let admin = client_as(&server, "admin").await;
    for topic in ["orders-eu", "payments"] {
        admin
            .create_topic(topic, 1, TopicConfig::default())
            .await
            .unwrap();
    }
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("SCRAM-SHA-256"));
    assert_eq!(connection.call(1, &handshake).await.error_code, 0);
    let (mut exchange, first) = ClientExchange::start("alice", "alice-pw");
    let answer = connection
        .call(
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(first)),
        )
        .await;
    let last = exchange.respond(&answer.auth_bytes).unwrap();
    let answer = connection
        .call(
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(last)),
        )
        .await;
    assert_eq!(answer.error_code, 0);

    let resource = |resource_type: i8, name: &str| {
        DescribeConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(StrBytes::from_string(name.to_owned()))
    };
    let described = connection
        .call(
            4,
            &DescribeConfigsRequest::default().with_resources(vec![
                resource(2, "orders-eu"),
                resource(2, "payments"),
                resource(4, ""),
            ]),
        )
        .await;
    let codes: Vec<i16> = described.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, [0, 29, 31]);
    assert!(!described.results[0].configs.is_empty());

    let alter = IncrementalAlterConfigsRequest::default().with_resources(vec![
        incremental_alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("orders-eu"))
            .with_configs(vec![
                incremental_alter_configs_request::AlterableConfig::default()
                    .with_name(StrBytes::from_static_str("retention.ms"))
                    .with_value(Some(StrBytes::from_static_str("1000"))),
            ]),
    ]);
    let altered = connection.call(1, &alter).await;
    assert_eq!(altered.responses[0].error_code, 29);
    assert_eq!(
        server
            .broker()
            .topic("orders-eu")
            .unwrap()
            .config()
            .retention_ms,
        None,
        "nothing changed"
    );

    let alice = client_as(&server, "alice").await;
    let change = fencelog::protocol::TopicConfigChange {
        retention_ms: Some(Some(1000)),
        ..Default::default()
    };
    let error = alice
        .alter_topic_config("orders-eu", change)
        .await
        .unwrap_err();
    assert_not_authorized(&error, "alice", "admin", "orders-eu");
    admin.alter_topic_config("orders-eu", change).await.unwrap();
    assert_eq!(
        server
            .broker()
            .topic("orders-eu")
            .unwrap()
            .config()
            .retention_ms,
        Some(1000)
    );

    // CreatePartitions needs admin (Kafka's ALTER) on the topic, per topic, on both listeners.
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    let grow = kafka_protocol::messages::CreatePartitionsRequest::default().with_topics(vec![
        CreatePartitionsTopic::default()
            .with_name(kafka_protocol::messages::TopicName(
                StrBytes::from_static_str("orders-eu"),
            ))
            .with_count(2),
    ]);
    let grown = connection.call(3, &grow).await;
    assert_eq!(grown.results[0].error_code, 29);
    let error = alice.create_partitions("orders-eu", 2).await.unwrap_err();
    assert_not_authorized(&error, "alice", "admin", "orders-eu");
    assert_eq!(
        server
            .broker()
            .topic("orders-eu")
            .unwrap()
            .partitions()
            .len(),
        1,
        "nothing grew"
    );
    assert_eq!(admin.create_partitions("orders-eu", 2).await.unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_group_heartbeats_are_authorized_on_their_topics() {
    // Proves: over SASL, alice (consume on orders-*) joins a KIP-848 consumer group reading
    // orders-eu, but a heartbeat subscribing to payments is TOPIC_AUTHORIZATION_FAILED and
    // joins nothing; bob, with no grant, gets GROUP_AUTHORIZATION_FAILED for the heartbeat and
    // for ConsumerGroupDescribe.
    use fencelog::auth::ClientExchange;
    use kafka::KafkaConnection;
    use kafka_protocol::messages::{
        ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, GroupId,
        SaslAuthenticateRequest, SaslHandshakeRequest, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;

    let security = tempfile::tempdir().unwrap();
    users::add_user(security.path(), "admin", "admin-pw").unwrap();
    users::add_user(security.path(), "alice", "alice-pw").unwrap();
    users::add_user(security.path(), "bob", "bob-pw").unwrap();
    grant(security.path(), "alice", "orders-*", "consume");
    let kafka = KafkaConfig::advertising(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = TestServer::builder()
        .server_config(security_config(security.path()))
        .kafka_config(kafka)
        .start()
        .await
        .unwrap();
    let admin = client_as(&server, "admin").await;
    for topic in ["orders-eu", "payments"] {
        admin
            .create_topic(topic, 1, TopicConfig::default())
            .await
            .unwrap();
    }
    let login = |user: &'static str, password: &'static str| {
        let addr = server.kafka_addr();
        async move {
            let mut connection = KafkaConnection::connect(addr).await;
            let handshake = SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_static_str("SCRAM-SHA-256"));
            assert_eq!(connection.call(1, &handshake).await.error_code, 0);
            let (mut exchange, first) = ClientExchange::start(user, password);
            let answer = connection
                .call(
                    2,
                    &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(first)),
                )
                .await;
            let last = exchange.respond(&answer.auth_bytes).unwrap();
            let answer = connection
                .call(
                    2,
                    &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(last)),
                )
                .await;
            assert_eq!(answer.error_code, 0);
            connection
        }
    };
    let join = |member: &str, topic: &str| {
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("acl-848")))
            .with_member_id(StrBytes::from_string(member.to_owned()))
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_string(
                topic.to_owned(),
            ))]))
            .with_topic_partitions(Some(Vec::new()))
    };
    let mut alice = login("alice", "alice-pw").await;
    let joined = alice.call(1, &join("alice-1", "orders-eu")).await;
    assert_eq!(
        (joined.error_code, joined.member_epoch),
        (0, 1),
        "{joined:?}"
    );
    let refused = alice.call(1, &join("alice-2", "payments")).await;
    assert_eq!(refused.error_code, 29, "TOPIC_AUTHORIZATION_FAILED");
    let mut bob = login("bob", "bob-pw").await;
    let refused = bob.call(1, &join("bob-1", "orders-eu")).await;
    assert_eq!(refused.error_code, 30, "GROUP_AUTHORIZATION_FAILED");
    let described = bob
        .call(
            0,
            &ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![GroupId(StrBytes::from_static_str("acl-848"))]),
        )
        .await;
    assert_eq!(described.groups[0].error_code, 30);
    let described = alice
        .call(
            0,
            &ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![GroupId(StrBytes::from_static_str("acl-848"))]),
        )
        .await;
    assert_eq!(described.groups[0].members.len(), 1, "alice-2 never joined");
}
