//! Kafka's ACL APIs (DescribeAcls, CreateAcls, DeleteAcls) on a server with `--auth`, spoken
//! raw over SASL/SCRAM: Kafka bindings become fencelog grants and back through the one mapping
//! (`src/server/kafka/acl_mapping.rs`), durably and live; what fencelog cannot hold is refused
//! per binding; only a super user changes ACLs. And the same through real clients
//! (`tools/kafka-clients/admin_misc.py`: confluent-kafka's AdminClient, kafka-python's
//! describe_log_dirs and describe_producers).

use crate::support::kafka::KafkaConnection;
use crate::support::python::python_module_missing;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;

use bytes::Bytes;
use fencelog::auth::acl::{add_acl, list_acls, parse_operations, TopicPattern};
use fencelog::auth::{users, ClientExchange, Operation, Security};
use fencelog::server::kafka::KafkaConfig;
use fencelog::server::ServerConfig;
use fencelog::testing::TestServer;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::Value;

/// Kafka's codes used here (`src/server/kafka/acl_mapping.rs` names them all).
const ANY: i8 = 1;
const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const ALL: i8 = 2;
const READ: i8 = 3;
const WRITE: i8 = 4;
const DENY: i8 = 2;
const ALLOW: i8 = 3;

/// A server with `--auth` whose users are `admin` (super user) and `alice` (consume on
/// `orders-*`), with a Kafka listener; and its `Security`, to check decisions directly.
async fn auth_server() -> (tempfile::TempDir, TestServer, Arc<Security>) {
    let directory = tempfile::tempdir().unwrap();
    users::add_user(directory.path(), "admin", "admin-pw").unwrap();
    users::add_user(directory.path(), "alice", "alice-pw").unwrap();
    add_acl(
        directory.path(),
        "alice",
        &TopicPattern::parse("orders-*").unwrap(),
        &parse_operations("consume").unwrap(),
    )
    .unwrap();
    let security = Arc::new(Security::open(directory.path(), ["admin".to_owned()]).unwrap());
    let kafka = KafkaConfig::advertising(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = TestServer::builder()
        .server_config(ServerConfig {
            security: Some(Arc::clone(&security)),
            ..ServerConfig::default()
        })
        .kafka_config(kafka)
        .start()
        .await
        .unwrap();
    (directory, server, security)
}

/// A Kafka connection authenticated as `user` (password `USER-pw`).
async fn kafka_as(server: &TestServer, user: &str) -> KafkaConnection {
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("SCRAM-SHA-256"));
    assert_eq!(connection.call(1, &handshake).await.error_code, 0);
    let (mut exchange, first) = ClientExchange::start(user, &format!("{user}-pw"));
    let authenticate =
        |bytes: Vec<u8>| SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes));
    let answer = connection.call(2, &authenticate(first)).await;
    let last = exchange.respond(&answer.auth_bytes).unwrap();
    let answer = connection.call(2, &authenticate(last)).await;
    assert_eq!(answer.error_code, 0, "authenticate {user}");
    connection
}

fn creation(principal: &str, name: &str, pattern: i8, operation: i8) -> AclCreation {
    AclCreation::default()
        .with_resource_type(TOPIC)
        .with_resource_name(StrBytes::from_string(name.to_owned()))
        .with_resource_pattern_type(pattern)
        .with_principal(StrBytes::from_string(format!("User:{principal}")))
        .with_host(StrBytes::from_static_str("*"))
        .with_operation(operation)
        .with_permission_type(ALLOW)
}

/// Matches every binding (the codec's defaults are not "any": empty names, LITERAL).
fn describe_all() -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(ANY)
        .with_pattern_type_filter(ANY)
        .with_operation(ANY)
        .with_permission_type(ANY)
}

fn delete_filter(principal: &str, operation: i8) -> DeleteAclsFilter {
    DeleteAclsFilter::default()
        .with_resource_name_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(ANY)
        .with_pattern_type_filter(ANY)
        .with_principal_filter(Some(StrBytes::from_string(format!("User:{principal}"))))
        .with_operation(operation)
        .with_permission_type(ANY)
}

/// Every binding a DescribeAcls answer lists: (name, pattern type, principal, operation).
async fn described(
    connection: &mut KafkaConnection,
    version: i16,
    request: &DescribeAclsRequest,
) -> BTreeSet<(String, i8, String, i8)> {
    let response = connection.call(version, request).await;
    assert_eq!(response.error_code, 0, "{:?}", response.error_message);
    let mut bindings = BTreeSet::new();
    for resource in &response.resources {
        assert_eq!(resource.resource_type, TOPIC);
        for acl in &resource.acls {
            assert_eq!((acl.host.as_str(), acl.permission_type), ("*", ALLOW));
            bindings.insert((
                resource.resource_name.to_string(),
                resource.pattern_type,
                acl.principal.to_string(),
                acl.operation,
            ));
        }
    }
    bindings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_apis_map_kafka_bindings_onto_fencelog_grants_in_every_version() {
    // Proves: in every advertised version (1..=3), a super user's CreateAcls writes fencelog
    // grants (READ on a literal topic is consume, WRITE on a prefix is produce on `prefix*`,
    // ALL on the literal `*` is every operation) to the ACL file, live (the next decision
    // allows it, with no reload wait); DENY and a GROUP binding are refused INVALID_REQUEST per
    // binding, the others still written; DescribeAcls lists the grants as the same bindings
    // (filtered by principal too); DeleteAcls of one operation leaves the grant's others, and of
    // everything empties the file.
    let (directory, server, security) = auth_server().await;
    let mut admin = kafka_as(&server, "admin").await;
    for version in 1..=3i16 {
        let deny = creation("alice", "payments", LITERAL, READ).with_permission_type(DENY);
        let group = creation("alice", "readers", LITERAL, READ).with_resource_type(GROUP);
        let request = CreateAclsRequest::default().with_creations(vec![
            creation("alice", &format!("live-{version}"), LITERAL, READ),
            creation("alice", "logs-", PREFIXED, WRITE),
            creation("bob", "*", LITERAL, ALL),
            deny,
            group,
        ]);
        let response = admin.call(version, &request).await;
        let codes: Vec<i16> = response.results.iter().map(|r| r.error_code).collect();
        assert_eq!(codes, vec![0, 0, 0, 42, 42], "v{version}: {response:?}");
        let deny_message = response.results[3].error_message.as_ref().unwrap();
        assert!(deny_message.contains("no DENY"), "{deny_message}");
        // Live: the very next decision sees the grant.
        security
            .authorize("alice", Operation::Consume, &format!("live-{version}"))
            .unwrap();
        assert!(security
            .authorize("alice", Operation::Produce, "payments")
            .is_err());
        let stored = list_acls(directory.path()).unwrap();
        let alice_logs = stored
            .iter()
            .find(|entry| entry.principal == "alice" && entry.topic.as_str() == "logs-*")
            .expect("the prefixed grant is stored as logs-*");
        assert_eq!(alice_logs.operations, parse_operations("produce").unwrap());

        let all = described(&mut admin, version, &describe_all()).await;
        let expected: BTreeSet<(String, i8, String, i8)> = [
            (
                "orders-".to_owned(),
                PREFIXED,
                "User:alice".to_owned(),
                READ,
            ),
            (
                format!("live-{version}"),
                LITERAL,
                "User:alice".to_owned(),
                READ,
            ),
            ("logs-".to_owned(), PREFIXED, "User:alice".to_owned(), WRITE),
            ("*".to_owned(), LITERAL, "User:bob".to_owned(), ALL),
        ]
        .into_iter()
        .collect();
        assert_eq!(all, expected, "v{version}");
        let bob_only =
            describe_all().with_principal_filter(Some(StrBytes::from_static_str("User:bob")));
        assert_eq!(described(&mut admin, version, &bob_only).await.len(), 1);

        let response = admin
            .call(
                version,
                &DeleteAclsRequest::default().with_filters(vec![delete_filter("alice", WRITE)]),
            )
            .await;
        let result = &response.filter_results[0];
        assert_eq!(result.error_code, 0);
        assert_eq!(result.matching_acls.len(), 1, "v{version}");
        assert_eq!(result.matching_acls[0].resource_name.as_str(), "logs-");
        assert!(security
            .authorize("alice", Operation::Produce, "logs-1")
            .is_err());
        security
            .authorize("alice", Operation::Consume, "orders-eu")
            .unwrap();

        let response = admin
            .call(
                version,
                &DeleteAclsRequest::default()
                    .with_filters(vec![delete_filter("alice", ANY), delete_filter("bob", ANY)]),
            )
            .await;
        let matched: Vec<usize> = response
            .filter_results
            .iter()
            .map(|result| result.matching_acls.len())
            .collect();
        assert_eq!(matched, vec![2, 1], "v{version}");
        assert!(list_acls(directory.path()).unwrap().is_empty());
        assert!(described(&mut admin, version, &describe_all())
            .await
            .is_empty());
        // Back to the start for the next version.
        add_acl(
            directory.path(),
            "alice",
            &TopicPattern::parse("orders-*").unwrap(),
            &parse_operations("consume").unwrap(),
        )
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_super_user_changes_acls_and_admin_describes_them() {
    // Proves: alice (consume on orders-*, no admin, not a super user) is refused
    // CLUSTER_AUTHORIZATION_FAILED (31) by DescribeAcls, and for every binding and filter of
    // CreateAcls and DeleteAcls, with a message naming her; nothing changes. With `admin` on
    // some topic she may describe, still not change.
    let (directory, server, _security) = auth_server().await;
    let before = list_acls(directory.path()).unwrap();
    let mut alice = kafka_as(&server, "alice").await;
    let response = alice.call(3, &describe_all()).await;
    assert_eq!(response.error_code, 31);
    assert!(response.error_message.unwrap().contains("alice"));
    let response = alice
        .call(
            3,
            &CreateAclsRequest::default()
                .with_creations(vec![creation("alice", "payments", LITERAL, WRITE)]),
        )
        .await;
    assert_eq!(response.results[0].error_code, 31);
    let message = response.results[0].error_message.as_ref().unwrap();
    assert!(message.contains("super user"), "{message}");
    let response = alice
        .call(
            3,
            &DeleteAclsRequest::default().with_filters(vec![delete_filter("alice", ANY)]),
        )
        .await;
    assert_eq!(response.filter_results[0].error_code, 31);
    assert_eq!(list_acls(directory.path()).unwrap(), before);

    add_acl(
        directory.path(),
        "alice",
        &TopicPattern::parse("orders-eu").unwrap(),
        &parse_operations("admin").unwrap(),
    )
    .unwrap();
    tokio::time::sleep(fencelog::auth::files::RELOAD_INTERVAL * 2).await;
    let seen = described(&mut alice, 3, &describe_all()).await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    let response = alice
        .call(
            3,
            &CreateAclsRequest::default()
                .with_creations(vec![creation("alice", "payments", LITERAL, WRITE)]),
        )
        .await;
    assert_eq!(response.results[0].error_code, 31);
}

const ADMIN_MISC: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/kafka-clients/admin_misc.py"
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_admin_clients_manage_acls_and_describe_log_dirs_and_producers() {
    // Proves: real clients' admin calls work unchanged (tools/kafka-clients/admin_misc.py):
    // confluent-kafka's AdminClient creates, describes and deletes ACLs on an `--auth` server
    // as the super user over SASL/SCRAM (the grants land in acls.json and go again), and gets
    // SECURITY_DISABLED from a server without `--auth` (so does kafka-python's describe_acls);
    // kafka-python's describe_log_dirs names the data directory and the topic's partitions,
    // and describe_producers the idempotent producer that wrote the topic.
    if python_module_missing("confluent_kafka") || python_module_missing("kafka") {
        return;
    }
    let (directory, auth, _security) = auth_server().await;
    let plain = TestServer::builder()
        .kafka_config(KafkaConfig::advertising(std::net::SocketAddr::from((
            [127, 0, 0, 1],
            0,
        ))))
        .start()
        .await
        .unwrap();
    let args = vec![
        ADMIN_MISC.to_owned(),
        plain.kafka_addr().to_string(),
        auth.kafka_addr().to_string(),
        "admin".to_owned(),
        "admin-pw".to_owned(),
    ];
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .args(&args)
            .output()
            .expect("run python3")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "admin_misc.py failed:\n{stdout}\n{stderr}"
    );
    let seen: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|error| panic!("no JSON ({error}):\n{stdout}\n{stderr}"));
    assert_eq!(seen["confluent"]["created"], 2, "{seen}");
    assert_eq!(seen["confluent"]["described"], 2, "{seen}");
    assert_eq!(seen["confluent"]["deleted"], 2, "{seen}");
    assert_eq!(seen["confluent"]["disabled"], "SECURITY_DISABLED", "{seen}");
    assert_eq!(
        seen["kafka_python"]["log_dir"],
        std::path::absolute(plain.data_dir())
            .unwrap()
            .display()
            .to_string(),
        "{seen}"
    );
    assert_eq!(seen["kafka_python"]["partitions"], 2, "{seen}");
    assert_eq!(seen["kafka_python"]["producers"], 1, "{seen}");
    assert_eq!(
        seen["kafka_python"]["disabled"], "SECURITY_DISABLED",
        "{seen}"
    );
    // Only alice's starting grant is left.
    assert_eq!(list_acls(directory.path()).unwrap().len(), 1);
}

/// The transaction APIs under ACLs: a user who may only consume cannot start a transactional
/// producer (InitProducerId needs `produce` somewhere: CLUSTER_AUTHORIZATION_FAILED), add a
/// partition (TOPIC_AUTHORIZATION_FAILED for each) or end a transaction
/// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); a super user can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transaction_apis_need_produce_rights() {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest, ProducerId, TopicName,
        TransactionalId,
    };
    let (_directory, server, _security) = auth_server().await;
    let client = fencelog::client::Client::builder()
        .addr(server.addr().to_string())
        .credentials("admin", "admin-pw")
        .connect()
        .await
        .unwrap();
    client
        .create_topic("orders-1", 1, fencelog::domain::TopicConfig::default())
        .await
        .unwrap();
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx"))))
        .with_transaction_timeout_ms(60_000);
    let add = |producer_id: i64, producer_epoch: i16| {
        AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_static_str("tx")))
            .with_v3_and_below_producer_id(ProducerId(producer_id))
            .with_v3_and_below_producer_epoch(producer_epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("orders-1")))
                .with_partitions(vec![0])])
    };
    let mut alice = kafka_as(&server, "alice").await;
    assert_eq!(
        alice.call(4, &init).await.error_code,
        31,
        "CLUSTER_AUTHORIZATION_FAILED"
    );
    let refused = alice.call(3, &add(0, 0)).await;
    assert_eq!(
        refused.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        29
    );
    let end = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_static_str("tx")))
        .with_committed(true);
    assert_eq!(alice.call(3, &end).await.error_code, 53);
    let mut admin = kafka_as(&server, "admin").await;
    let granted = admin.call(4, &init).await;
    assert_eq!(granted.error_code, 0);
    let added = admin
        .call(3, &add(granted.producer_id.0, granted.producer_epoch))
        .await;
    assert_eq!(
        added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        0
    );
}
