//! A secured cluster: etcd and three `fencelog serve --etcd --auth --broker-user broker`
//! processes whose users and ACLs live in etcd (`fencelog user|acl add --etcd`), and a cluster
//! whose brokers speak mutual TLS to each other.
//!
//! * The followers authenticate to their leaders as the broker user and reach a full ISR; a
//!   user with no grant is refused; an authenticated user posing as a follower (a
//!   `ReplicaFetch` of its own) is refused: only the broker principal (or `admin` on the topic)
//!   may replicate.
//! * The judged scenario through confluent-kafka
//!   (`tools/kafka-clients/cluster_sasl_acls.py`): alice, limited to `sec-*`, creates `sec-1`
//!   with replication factor 3, her `acks=all` writes land and read back, her write elsewhere is
//!   `TOPIC_AUTHORIZATION_FAILED`, and a client without credentials gets no metadata.
//! * Users and ACLs changed in etcd while the brokers run take effect on every broker; a
//!   removed user's open connection is refused from then on; a damaged value is an error
//!   naming its key; the user limit is enforced.
//! * Three brokers with `--tls-cert --tls-key --tls-client-ca --auth` replicate over mutual
//!   TLS, their followers authenticating as the broker user inside it.
//!
//! Skipped with a note where `etcd` (or, for the Kafka scenario, `python3` with
//! `confluent_kafka`) is missing; `.ci/run` installs them.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use fencelog::client::{Client, ClientError, TlsClientConfig};
use fencelog::cluster::meta::security::{EtcdSecurityStore, SecurityLimits, SecurityStoreError};
use fencelog::cluster::meta::{EtcdConfig, EtcdMetaStore};
use fencelog::domain::{Replication, TopicConfig};
use fencelog::protocol::{Acks, ErrorCode, ReplicaFetch, ReplicaFetchPartition, Request};
use tempfile::TempDir;

use crate::cluster_processes::BrokerProcess;
use crate::support::etcd::EtcdServer;
use crate::support::python as python_support;
use crate::support::BIN;

const CONVERGE: Duration = Duration::from_secs(30);
/// The cluster name `BrokerProcess` starts its brokers with.
const CLUSTER: &str = "processes";
const BROKER_PASSWORD: &str = "broker-secret";
const KAFKA_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/kafka-clients/cluster_sasl_acls.py"
);

/// Runs `fencelog ARGS --etcd ENDPOINT --cluster-name processes` with `env`.
fn fencelog_on_etcd(etcd: &EtcdServer, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(BIN)
        .args(args)
        .args(["--etcd", &etcd.endpoint(), "--cluster-name", CLUSTER])
        .envs(env.iter().copied())
        .output()
        .expect("run fencelog")
}

/// Like [`fencelog_on_etcd`], asserting success; returns stdout.
fn succeed_on_etcd(etcd: &EtcdServer, args: &[&str], env: &[(&str, &str)]) -> String {
    let output = fencelog_on_etcd(etcd, args, env);
    assert!(
        output.status.success(),
        "fencelog {args:?} --etcd: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn add_user(etcd: &EtcdServer, name: &str, password: &str) {
    succeed_on_etcd(
        etcd,
        &["user", "add", name],
        &[("FENCELOG_PASSWORD", password)],
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("free port")
        .port()
}

/// Three brokers started with `--auth --super-user admin --broker-user broker`, the broker
/// password in `FENCELOG_BROKER_PASSWORD`, and `more` flags each.
fn start_secured(root: &TempDir, etcd: &EtcdServer, more: &[&str]) -> Vec<BrokerProcess> {
    (1..=3)
        .map(|id| {
            let mut broker = BrokerProcess::prepare(id, root, &etcd.endpoint());
            broker.extra.extend(
                ["--auth", "--super-user", "admin", "--broker-user", "broker"]
                    .iter()
                    .chain(more)
                    .map(|flag| flag.to_string()),
            );
            broker.env.push((
                "FENCELOG_BROKER_PASSWORD".to_owned(),
                BROKER_PASSWORD.to_owned(),
            ));
            broker.spawn();
            broker
        })
        .collect()
}

async fn connect(addrs: &[&str], user: &str, password: &str) -> Result<Client, String> {
    Client::builder()
        .addrs(addrs.iter().map(|addr| addr.to_string()))
        .credentials(user, password)
        .request_timeout(Duration::from_secs(10))
        .connect()
        .await
        .map_err(|error| error.to_string())
}

fn all_addrs(brokers: &[BrokerProcess]) -> Vec<&str> {
    brokers.iter().map(|broker| broker.addr.as_str()).collect()
}

fn logs(brokers: &[BrokerProcess]) -> String {
    brokers
        .iter()
        .map(|broker| format!("--- broker at {} ---\n{}", broker.addr, broker.log()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits until `condition` holds, failing with `what` and the brokers' logs after
/// [`CONVERGE`] (a bound on convergence, not a timing claim).
async fn eventually<F, Fut>(brokers: &[BrokerProcess], what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + CONVERGE;
    loop {
        let last = match condition().await {
            Ok(()) => return,
            Err(last) => last,
        };
        assert!(
            Instant::now() < deadline,
            "{what} never happened (last: {last})\n{}",
            logs(brokers)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates `topic` (one partition, replication factor 3) and waits for three in-sync replicas.
/// The creation is retried while the brokers are still registering (a broker listens before
/// its registration reaches etcd, and placing three replicas needs three registered).
async fn create_with_full_isr(brokers: &[BrokerProcess], client: &Client, topic: &str) {
    eventually(brokers, "the topic's creation", move || async move {
        let created = client
            .create_replicated_topic(
                topic,
                1,
                TopicConfig::default(),
                Replication {
                    factor: 3,
                    min_insync: Some(2),
                },
            )
            .await;
        match created {
            Ok(()) => Ok(()),
            // An earlier attempt whose answer was lost created it.
            Err(ClientError::Server {
                code: ErrorCode::TopicExists,
                ..
            }) => Ok(()),
            Err(error) => Err(error.to_string()),
        }
    })
    .await;
    eventually(brokers, "three in-sync replicas", move || async move {
        let info = client
            .cluster_metadata(&[topic])
            .await
            .map_err(|e| e.to_string())?;
        match info.partitions.first() {
            Some(partition) if partition.isr.len() == 3 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// A connection as `user` to the broker at `addr` alone, once that broker knows the user.
async fn connect_eventually(
    brokers: &[BrokerProcess],
    addr: &str,
    user: &str,
    password: &str,
) -> Client {
    let deadline = Instant::now() + CONVERGE;
    loop {
        match connect(&[addr], user, password).await {
            Ok(client) => return client,
            Err(last) => assert!(
                Instant::now() < deadline,
                "{user} never logged in at {addr} (last: {last})\n{}",
                logs(brokers)
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn is_refused(result: &Result<impl std::fmt::Debug, impl std::fmt::Display>) -> bool {
    result
        .as_ref()
        .is_err_and(|error| error.to_string().to_lowercase().contains("not authorized"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_authenticate_as_the_broker_user_and_clients_cannot_pose_as_one() {
    // Proves: with users in etcd, followers authenticate as the broker user (full ISR, acks=all
    // acknowledged); a user without a grant is refused; an authenticated non-broker user's
    // ReplicaFetch is refused as not authorized.
    let Some(etcd) = EtcdServer::start_or_skip("cluster_auth") else {
        return;
    };
    add_user(&etcd, "admin", "admin-secret");
    add_user(&etcd, "broker", BROKER_PASSWORD);
    add_user(&etcd, "alice", "alice-secret");
    let root = TempDir::new().expect("temp dir");
    let brokers = tokio::task::block_in_place(|| start_secured(&root, &etcd, &[]));
    let addrs = all_addrs(&brokers);
    let admin = connect(&addrs, "admin", "admin-secret").await.unwrap();
    create_with_full_isr(&brokers, &admin, "secured").await;
    let batch = crate::support::batch(0, "committed");
    admin
        .produce_with_acks("secured", 0, batch.clone(), Acks::All)
        .await
        .expect("an acks=all write with three in sync");

    let alice = connect(&addrs, "alice", "alice-secret").await.unwrap();
    let refused = alice
        .produce_with_acks("secured", 0, batch, Acks::All)
        .await;
    assert!(is_refused(&refused), "alice has no grant: {refused:?}");
    let posing = Request::ReplicaFetch(ReplicaFetch {
        follower: 2,
        follower_incarnation: 1,
        leader_epoch: 0,
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes: 1 << 20,
        partitions: vec![ReplicaFetchPartition {
            topic: "secured".into(),
            partition: 0,
            fetch_offset: 0,
            log_end_offset: None,
        }],
    });
    let posed = alice.request(posing, Duration::from_secs(10)).await;
    assert!(
        is_refused(&posed),
        "a client posing as a follower: {posed:?}"
    );
}

#[test]
fn confluent_kafka_users_limited_by_acls_on_a_cluster_whose_followers_authenticate() {
    // Proves the judged scenario (see the module docs) on a fresh cluster whose users
    // and ACLs were put in etcd before the brokers started.
    let test = "confluent_kafka_users_limited_by_acls_on_a_cluster_whose_followers_authenticate";
    if python_support::python_module_missing("confluent_kafka") {
        return;
    }
    let Some(etcd) = EtcdServer::start_or_skip(test) else {
        return;
    };
    add_user(&etcd, "admin", "admin-secret");
    add_user(&etcd, "broker", BROKER_PASSWORD);
    add_user(&etcd, "alice", "alice-secret");
    succeed_on_etcd(
        &etcd,
        &[
            "acl",
            "add",
            "--principal",
            "alice",
            "--topic",
            "sec-*",
            "--ops",
            "produce,consume,create",
        ],
        &[],
    );
    let root = TempDir::new().expect("temp dir");
    let kafka: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let brokers: Vec<BrokerProcess> = (1..=3u32)
        .map(|id| {
            let address = &kafka[id as usize - 1];
            let mut broker = BrokerProcess::prepare(id, &root, &etcd.endpoint());
            broker.extra.extend(
                [
                    "--auth",
                    "--super-user",
                    "admin",
                    "--broker-user",
                    "broker",
                    "--kafka-listen",
                    address,
                ]
                .map(str::to_owned),
            );
            broker.env.push((
                "FENCELOG_BROKER_PASSWORD".to_owned(),
                BROKER_PASSWORD.to_owned(),
            ));
            broker.spawn();
            let deadline = Instant::now() + CONVERGE;
            while std::net::TcpStream::connect(address).is_err() {
                assert!(
                    Instant::now() < deadline,
                    "broker {id} never listened for Kafka"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            broker
        })
        .collect();
    let output = Command::new("python3")
        .args([
            KAFKA_SCRIPT,
            &kafka.join(","),
            "alice",
            "alice-secret",
            "sec-1",
            "other-1",
            "50",
        ])
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.lines().last() == Some("ok"),
        "the scenario failed:\n{stdout}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        logs(&brokers)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_and_acls_changed_in_etcd_take_effect_on_every_broker_without_a_restart() {
    // Proves: a user added after the brokers started can log in on every broker; a grant added
    // then is honoured by every broker; removing the user refuses its open connection and new
    // logins; `user|acl list --etcd` show the cluster's; a damaged value is an error naming its
    // key (for the CLI, and for a broker that starts); the user limit is enforced.
    let Some(etcd) = EtcdServer::start_or_skip("cluster_auth_live") else {
        return;
    };
    add_user(&etcd, "admin", "admin-secret");
    add_user(&etcd, "broker", BROKER_PASSWORD);
    let root = TempDir::new().expect("temp dir");
    let brokers = tokio::task::block_in_place(|| start_secured(&root, &etcd, &[]));
    let addrs = all_addrs(&brokers);
    let admin = connect(&addrs, "admin", "admin-secret").await.unwrap();
    create_with_full_isr(&brokers, &admin, "live-1").await;
    assert!(connect(&addrs[..1], "bob", "bob-secret").await.is_err());

    tokio::task::block_in_place(|| add_user(&etcd, "bob", "bob-secret"));
    let mut bob_on = Vec::new();
    for addr in &addrs {
        bob_on.push(connect_eventually(&brokers, addr, "bob", "bob-secret").await);
    }
    for bob in &bob_on {
        let refused = bob.cluster_metadata(&["live-1"]).await;
        assert!(is_refused(&refused), "bob has no grant yet: {refused:?}");
    }

    tokio::task::block_in_place(|| {
        succeed_on_etcd(
            &etcd,
            &[
                "acl",
                "add",
                "--principal",
                "bob",
                "--topic",
                "live-*",
                "--ops",
                "produce",
            ],
            &[],
        )
    });
    for (bob, addr) in bob_on.iter().zip(&addrs) {
        eventually(
            &brokers,
            &format!("bob's grant reaching {addr}"),
            move || async move {
                bob.cluster_metadata(&["live-1"])
                    .await
                    .map(drop)
                    .map_err(|error| error.to_string())
            },
        )
        .await;
    }
    let bob = connect(&addrs, "bob", "bob-secret").await.unwrap();
    bob.produce_with_acks("live-1", 0, crate::support::batch(0, "by bob"), Acks::All)
        .await
        .expect("bob's acks=all write once granted");
    let listed = tokio::task::block_in_place(|| {
        (
            succeed_on_etcd(&etcd, &["user", "list"], &[]),
            succeed_on_etcd(&etcd, &["acl", "list"], &[]),
        )
    });
    assert_eq!(listed.0, "admin\nbob\nbroker\n");
    assert_eq!(listed.1, "bob live-* produce\n");

    tokio::task::block_in_place(|| succeed_on_etcd(&etcd, &["user", "remove", "bob"], &[]));
    let bob = &bob;
    eventually(
        &brokers,
        "bob's open connection being refused",
        move || async move {
            let result = bob
                .produce_with_acks("live-1", 0, crate::support::batch(0, "late"), Acks::All)
                .await;
            match result {
                Err(error) if error.to_string().contains("was removed") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(connect(&addrs, "bob", "bob-secret").await.is_err());

    // A damaged grant: the CLI names the key, a broker refuses to start, the running ones go on.
    let damaged_key = format!("/fencelog/{CLUSTER}/acls/carol/x*");
    let mut raw = etcd_client::Client::connect([etcd.endpoint()], None)
        .await
        .expect("etcd client");
    raw.put(damaged_key.as_str(), "{not json", None)
        .await
        .expect("put a damaged value");
    let listing = tokio::task::block_in_place(|| fencelog_on_etcd(&etcd, &["acl", "list"], &[]));
    let stderr = String::from_utf8_lossy(&listing.stderr);
    assert!(
        !listing.status.success() && stderr.contains(&damaged_key),
        "acl list over a damaged value: {stderr}"
    );
    let started = tokio::task::block_in_place(|| start_refused(&etcd, &root));
    assert!(
        started.contains(&damaged_key),
        "a broker starting over a damaged value: {started}"
    );
    admin
        .produce_with_acks("live-1", 0, crate::support::batch(0, "still"), Acks::All)
        .await
        .expect("the running brokers keep their last good ACLs");
    raw.delete(damaged_key.as_str(), None)
        .await
        .expect("delete");

    let store =
        EtcdMetaStore::connect(EtcdConfig::new([etcd.endpoint()]).with_cluster_name(CLUSTER))
            .await
            .expect("connect");
    let limited = EtcdSecurityStore::new(store).with_limits(SecurityLimits {
        users_max: 2,
        ..SecurityLimits::default()
    });
    let error = limited
        .add_user("dave", "dave-secret")
        .await
        .expect_err("the cluster has its two users already");
    assert!(
        matches!(
            error,
            SecurityStoreError::TooManyUsers { count: 2, limit: 2 }
        ),
        "{error}"
    );
}

/// Starts a fourth secured broker, which must refuse to start; returns its stderr.
fn start_refused(etcd: &EtcdServer, root: &TempDir) -> String {
    let output = Command::new(BIN)
        .args(["serve", "--node-id", "9", "--listen", "127.0.0.1:0"])
        .args(["--etcd", &etcd.endpoint(), "--cluster-name", CLUSTER])
        .arg("--data-dir")
        .arg(root.path().join("broker-9"))
        .args(["--auth", "--broker-user", "broker"])
        .env("FENCELOG_BROKER_PASSWORD", BROKER_PASSWORD)
        .output()
        .expect("run fencelog serve");
    assert!(!output.status.success(), "it started");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Writes a CA, a certificate for `127.0.0.1` and `localhost` that every broker serves and
/// presents to its leaders, and a client certificate, into `directory`.
fn write_pki(directory: &Path) {
    let write = |name: &str, text: &str| std::fs::write(directory.join(name), text).unwrap();
    let ca = crate::tls::authority("fencelog cluster test CA");
    write("ca.pem", &ca.pem);
    let (certificate, key) = crate::tls::leaf(&ca, &["localhost", "127.0.0.1"]);
    write("broker.pem", &certificate);
    write("broker.key", &key);
    let (certificate, key) = crate::tls::leaf(&ca, &["client-1"]);
    write("client.pem", &certificate);
    write("client.key", &key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_replicate_over_mutual_tls() {
    // Proves: `serve --etcd --tls-cert` refuses to start without a CA to check leaders by; with
    // one, three brokers under mutual TLS (`--tls-client-ca`) and `--auth` replicate to each
    // other (followers present their certificate, then authenticate as the broker user): full
    // ISR, an acks=all write acknowledged and read back over TLS.
    let pki = TempDir::new().expect("temp dir");
    write_pki(pki.path());
    let path = |name: &str| pki.path().join(name).display().to_string();
    let refused = Command::new(BIN)
        .args([
            "serve",
            "--etcd",
            "http://127.0.0.1:1",
            "--listen",
            "127.0.0.1:0",
        ])
        .args([
            "--tls-cert",
            &path("broker.pem"),
            "--tls-key",
            &path("broker.key"),
        ])
        .output()
        .expect("run fencelog serve");
    assert!(
        !refused.status.success()
            && String::from_utf8_lossy(&refused.stderr).contains("--peer-tls-ca"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let Some(etcd) = EtcdServer::start_or_skip("cluster_tls") else {
        return;
    };
    add_user(&etcd, "admin", "admin-secret");
    add_user(&etcd, "broker", BROKER_PASSWORD);
    let root = TempDir::new().expect("temp dir");
    let brokers: Vec<BrokerProcess> = (1..=3)
        .map(|id| {
            let mut broker = BrokerProcess::prepare(id, &root, &etcd.endpoint());
            broker.extra.extend([
                "--tls-cert".to_owned(),
                path("broker.pem"),
                "--tls-key".to_owned(),
                path("broker.key"),
                "--tls-client-ca".to_owned(),
                path("ca.pem"),
            ]);
            // Followers authenticate with SCRAM inside the mutual-TLS session.
            broker.extra.extend(
                ["--auth", "--super-user", "admin", "--broker-user", "broker"].map(str::to_owned),
            );
            broker.env.push((
                "FENCELOG_BROKER_PASSWORD".to_owned(),
                BROKER_PASSWORD.to_owned(),
            ));
            if id == 1 {
                // The same CA named for peers explicitly; the others default to the client CA.
                broker
                    .extra
                    .extend(["--peer-tls-ca".to_owned(), path("ca.pem")]);
            }
            tokio::task::block_in_place(|| broker.spawn());
            broker
        })
        .collect();
    let tls = TlsClientConfig::ca_file(pki.path().join("ca.pem"))
        .and_then(|tls| {
            tls.with_client_certificate(
                pki.path().join("client.pem"),
                pki.path().join("client.key"),
            )
        })
        .expect("client TLS");
    let client = Client::builder()
        .addrs(brokers.iter().map(|broker| broker.addr.clone()))
        .tls(tls)
        .credentials("admin", "admin-secret")
        .request_timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("connect over TLS");
    create_with_full_isr(&brokers, &client, "tls-1").await;
    let ack = client
        .produce_with_acks("tls-1", 0, crate::support::batch(0, "over tls"), Acks::All)
        .await
        .expect("an acks=all write replicated over TLS");
    let fetched = client
        .fetch("tls-1", 0, ack.base_offset, 1 << 20, Duration::ZERO)
        .await
        .expect("fetch over TLS");
    assert_eq!(fetched.records.len(), 1, "{fetched:?}");
}

#[test]
fn user_and_acl_data_dir_forms_keep_working_standalone() {
    // Proves: without --etcd, `user` and `acl` change the data directory's files as before.
    let directory = TempDir::new().expect("temp dir");
    let run = |args: &[&str]| {
        let output = Command::new(BIN)
            .args(args)
            .arg("--data-dir")
            .arg(directory.path())
            .env("FENCELOG_PASSWORD", "pw")
            .env_remove("FENCELOG_CLUSTER")
            .output()
            .expect("run fencelog");
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    run(&["user", "add", "carol"]);
    run(&[
        "acl",
        "add",
        "--principal",
        "carol",
        "--topic",
        "c-*",
        "--ops",
        "consume",
    ]);
    assert_eq!(run(&["user", "list"]), "carol\n");
    assert_eq!(run(&["acl", "list"]), "carol c-* consume\n");
    assert!(directory.path().join("users.json").exists());
}

/// A Kafka connection to `addr` authenticated as `user` with `password` (SASL/SCRAM-SHA-256).
async fn kafka_as(
    addr: &str,
    user: &str,
    password: &str,
) -> crate::support::kafka::KafkaConnection {
    use fencelog::auth::ClientExchange;
    use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
    use kafka_protocol::protocol::StrBytes;
    let mut connection =
        crate::support::kafka::KafkaConnection::connect(addr.parse().expect("address")).await;
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("SCRAM-SHA-256"));
    assert_eq!(connection.call(1, &handshake).await.error_code, 0);
    let (mut exchange, first) = ClientExchange::start(user, password);
    let authenticate = |bytes: Vec<u8>| {
        SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::from(bytes))
    };
    let answer = connection.call(2, &authenticate(first)).await;
    let last = exchange.respond(&answer.auth_bytes).unwrap();
    let answer = connection.call(2, &authenticate(last)).await;
    assert_eq!(answer.error_code, 0, "authenticate {user}");
    connection
}

/// The error code DescribeProducers answers `user` for partition 0 of the (absent) topic
/// `orders` on `addr`: `UNKNOWN_TOPIC_OR_PARTITION` (3) once `consume` on it is granted,
/// `TOPIC_AUTHORIZATION_FAILED` (29) before.
async fn describe_producers_code(addr: &str, user: &str, password: &str) -> i16 {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::{DescribeProducersRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let mut connection = kafka_as(addr, user, password).await;
    let request = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(TopicName(StrBytes::from_static_str("orders")))
        .with_partition_indexes(vec![0])]);
    connection.call(0, &request).await.topics[0].partitions[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_acl_changes_on_one_broker_reach_every_broker_through_etcd() {
    // Proves: on a cluster, a super user's Kafka CreateAcls on broker 1 is written to etcd
    // (`acl list --etcd` shows it as a fencelog grant) and applies on broker 2 without a restart
    // (alice's DescribeProducers there goes from TOPIC_AUTHORIZATION_FAILED to authorized); a
    // DeleteAcls on broker 2 revokes it on broker 1 the same way.
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
    use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest};
    use kafka_protocol::protocol::StrBytes;
    let test = "kafka_acl_changes_on_one_broker_reach_every_broker_through_etcd";
    let Some(etcd) = EtcdServer::start_or_skip(test) else {
        return;
    };
    add_user(&etcd, "admin", "admin-secret");
    add_user(&etcd, "broker", BROKER_PASSWORD);
    add_user(&etcd, "alice", "alice-secret");
    let root = TempDir::new().expect("temp dir");
    let kafka: Vec<String> = (0..2)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let brokers: Vec<BrokerProcess> = (1..=2u32)
        .map(|id| {
            let address = &kafka[id as usize - 1];
            let mut broker = BrokerProcess::prepare(id, &root, &etcd.endpoint());
            broker.extra.extend(
                [
                    "--auth",
                    "--super-user",
                    "admin",
                    "--broker-user",
                    "broker",
                    "--kafka-listen",
                    address,
                ]
                .map(str::to_owned),
            );
            broker.env.push((
                "FENCELOG_BROKER_PASSWORD".to_owned(),
                BROKER_PASSWORD.to_owned(),
            ));
            broker.spawn();
            let deadline = Instant::now() + CONVERGE;
            while std::net::TcpStream::connect(address).is_err() {
                assert!(
                    Instant::now() < deadline,
                    "broker {id} never listened for Kafka"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            broker
        })
        .collect();
    assert_eq!(
        describe_producers_code(&kafka[1], "alice", "alice-secret").await,
        29
    );

    let mut admin = kafka_as(&kafka[0], "admin", "admin-secret").await;
    let creation = AclCreation::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_static_str("orders"))
        .with_resource_pattern_type(3)
        .with_principal(StrBytes::from_static_str("User:alice"))
        .with_host(StrBytes::from_static_str("*"))
        .with_operation(3)
        .with_permission_type(3);
    let created = admin
        .call(
            3,
            &CreateAclsRequest::default().with_creations(vec![creation]),
        )
        .await;
    assert_eq!(created.results[0].error_code, 0, "{created:?}");
    let listed = succeed_on_etcd(&etcd, &["acl", "list", "--json"], &[]);
    assert!(
        listed.contains("\"alice\"") && listed.contains("\"orders\"") && listed.contains("consume"),
        "{listed}"
    );
    let second: &str = &kafka[1];
    eventually(
        &brokers,
        "the grant applies on broker 2",
        move || async move {
            match describe_producers_code(second, "alice", "alice-secret").await {
                3 => Ok(()),
                other => Err(format!("error code {other}")),
            }
        },
    )
    .await;

    let mut admin = kafka_as(&kafka[1], "admin", "admin-secret").await;
    let filter = DeleteAclsFilter::default()
        .with_resource_type_filter(1)
        .with_resource_name_filter(None)
        .with_pattern_type_filter(1)
        .with_principal_filter(Some(StrBytes::from_static_str("User:alice")))
        .with_host_filter(None)
        .with_operation(1)
        .with_permission_type(1);
    let deleted = admin
        .call(3, &DeleteAclsRequest::default().with_filters(vec![filter]))
        .await;
    assert_eq!(
        deleted.filter_results[0].matching_acls.len(),
        1,
        "{deleted:?}"
    );
    let first: &str = &kafka[0];
    eventually(
        &brokers,
        "the revocation applies on broker 1",
        move || async move {
            match describe_producers_code(first, "alice", "alice-secret").await {
                29 => Ok(()),
                other => Err(format!("error code {other}")),
            }
        },
    )
    .await;
}
