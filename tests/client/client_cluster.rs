//! The client follows the cluster: it sends each partition's requests to the leader a
//! `NOT_LEADER` answer names (a fake broker plays the broker that does not lead, a real server
//! the leader), waits out `LEADER_NOT_AVAILABLE`, sends again only what is safe, and against
//! one standalone server behaves exactly as before (no extra request on the wire). The CLI's
//! cluster flags (`cluster status`, `--replication-factor`, `--acks`) are checked against a real
//! standalone server.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::batch;
use fencelog::batch::BatchBuilder;
use fencelog::client::{Client, ClientError};
use fencelog::protocol::{
    Acks, ApiKey, BrokerMetadata, ClusterMetadata, ErrorCode, ErrorResponse, FrameCodec,
    PartitionMetadata, Replication, Request, RequestFrame, Response, ResponseFrame, TopicConfig,
    TopicMetadata,
};
use fencelog::testing::TestServer;
use fencelog::testing_proxy::Proxy;
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_util::codec::Framed;

const TTL: Duration = Duration::from_secs(30);

/// How a fake broker answers one request.
type Answer = dyn Fn(&Request) -> Result<Response, ErrorResponse> + Send + Sync;

/// A broker that speaks the protocol but holds no data: it answers every request with
/// `answer`, and records which APIs (and versions) it was asked.
struct FakeBroker {
    addr: SocketAddr,
    asked: Arc<Mutex<Vec<(ApiKey, u16)>>>,
}

impl FakeBroker {
    async fn start(answer: Arc<Answer>) -> FakeBroker {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&asked);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let answer = Arc::clone(&answer);
                let log = Arc::clone(&log);
                tokio::spawn(async move {
                    let mut framed = Framed::new(socket, FrameCodec::default());
                    while let Some(Ok(frame)) = framed.next().await {
                        let request = RequestFrame::decode(frame).unwrap();
                        log.lock()
                            .unwrap()
                            .push((request.request.api_key(), request.api_version));
                        let result = answer(&request.request);
                        let response = ResponseFrame {
                            correlation_id: request.correlation_id,
                            result,
                        };
                        if framed.send(response).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        FakeBroker { addr, asked }
    }

    fn asked(&self, api: ApiKey) -> usize {
        let asked = self.asked.lock().unwrap();
        asked.iter().filter(|(key, _)| *key == api).count()
    }
}

/// Cluster metadata of two brokers, node 0 (the fake) and node 1 (the real server), in which
/// node 1 leads `orders/0` in leader epoch 3.
fn two_brokers(fake: SocketAddr, leader: SocketAddr) -> Response {
    Response::Metadata {
        topics: vec![TopicMetadata {
            name: "orders".into(),
            partitions: 1,
            config: TopicConfig::default(),
        }],
        cluster: Some(ClusterMetadata {
            brokers: vec![
                BrokerMetadata {
                    node_id: 0,
                    address: fake.to_string(),
                },
                BrokerMetadata {
                    node_id: 1,
                    address: leader.to_string(),
                },
            ],
            partitions: vec![PartitionMetadata {
                topic: "orders".into(),
                partition: 0,
                leader: Some(1),
                leader_epoch: 3,
                replicas: vec![1, 0],
                isr: vec![1, 0],
                high_watermark: 0,
            }],
        }),
    }
}

/// A fake broker 0 that leads nothing: `NOT_LEADER` naming node 1 at `leader` for every
/// partition request, and the two-broker metadata.
async fn follower_of(leader: SocketAddr) -> FakeBroker {
    let fake_addr = Arc::new(Mutex::new(None::<SocketAddr>));
    let known = Arc::clone(&fake_addr);
    let answer: Arc<Answer> = Arc::new(move |request: &Request| match request {
        Request::ApiVersions => Ok(Response::supported_api_versions()),
        Request::Metadata { cluster: true, .. } => {
            let fake = known.lock().unwrap().expect("address set before use");
            Ok(two_brokers(fake, leader))
        }
        _ => Err(ErrorResponse::not_leader(
            "orders",
            0,
            Some((1, leader.to_string())),
            3,
        )),
    });
    let fake = FakeBroker::start(answer).await;
    *fake_addr.lock().unwrap() = Some(fake.addr);
    fake
}

#[tokio::test]
async fn a_request_to_a_broker_that_does_not_lead_goes_to_the_leader_it_names() {
    // Proves: produce, fetch, list offsets and lease requests sent to a broker that answers
    // NOT_LEADER reach the leader it names; after the first redirect the client goes to the
    // leader directly (the follower sees each API at most once) and, knowing the partition is
    // replicated, asks for acks=all (Produce version 1).
    let leader = TestServer::start().await.unwrap();
    let direct = Client::connect(leader.addr()).await.unwrap();
    direct
        .create_topic("orders", 1, TopicConfig::default())
        .await
        .unwrap();
    let follower = follower_of(leader.addr()).await;
    let client = Client::connect(follower.addr).await.unwrap();

    let lease = client
        .acquire_lease("orders", 0, "writer", TTL)
        .await
        .unwrap();
    assert_eq!(follower.asked(ApiKey::AcquireLease), 1, "redirected once");
    assert!(follower.asked(ApiKey::Metadata) >= 1, "metadata refreshed");
    for value in ["a", "b"] {
        client
            .produce("orders", 0, batch(lease.epoch, value))
            .await
            .unwrap();
    }
    assert_eq!(follower.asked(ApiKey::Produce), 0, "straight to the leader");
    let fetched = client
        .fetch("orders", 0, 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    let values: Vec<&[u8]> = fetched
        .records
        .iter()
        .map(|record| record.value.as_deref().unwrap())
        .collect();
    assert_eq!(values, [&b"a"[..], b"b"]);
    assert_eq!(client.list_offsets("orders", 0).await.unwrap().latest, 2);
    client
        .renew_lease("orders", 0, lease.lease_id)
        .await
        .unwrap();
    for api in [ApiKey::Fetch, ApiKey::ListOffsets, ApiKey::RenewLease] {
        assert_eq!(follower.asked(api), 0, "{api} went to the leader");
    }
    // Non-partition requests still go to the bootstrap broker.
    let asked = follower.asked(ApiKey::ApiVersions);
    client.api_versions().await.unwrap();
    assert_eq!(follower.asked(ApiKey::ApiVersions), asked + 1);
}

#[tokio::test]
async fn the_not_leader_error_names_the_leader_when_it_keeps_moving() {
    // Proves: when every attempt is answered NOT_LEADER (a leader that keeps moving, here a
    // hint pointing back at the same broker), the client gives up after MAX_ROUTING_ATTEMPTS
    // with the typed error naming the leader, node id, address and leader epoch.
    let fake_addr = Arc::new(Mutex::new(String::new()));
    let known = Arc::clone(&fake_addr);
    let answer: Arc<Answer> = Arc::new(move |request: &Request| match request {
        Request::Metadata { .. } => Err(ErrorResponse::new(ErrorCode::UnsupportedVersion, "v0")),
        _ => Err(ErrorResponse::not_leader(
            "orders",
            0,
            Some((2, known.lock().unwrap().clone())),
            5,
        )),
    });
    let fake = FakeBroker::start(answer).await;
    *fake_addr.lock().unwrap() = fake.addr.to_string();
    let client = Client::builder()
        .addr(fake.addr.to_string())
        .reconnect_backoff(Duration::from_millis(1), Duration::from_millis(5))
        .connect()
        .await
        .unwrap();
    match client.list_offsets("orders", 0).await {
        Err(ClientError::NotLeader {
            message,
            leader,
            address,
            leader_epoch,
        }) => {
            assert_eq!(leader, Some(2));
            assert_eq!(address, fake.addr.to_string());
            assert_eq!(leader_epoch, 5);
            assert!(
                message.contains(&format!("node 2 at {} leads (leader epoch 5)", fake.addr)),
                "{message}"
            );
        }
        other => panic!("expected NOT_LEADER, got {other:?}"),
    }
    assert_eq!(
        fake.asked(ApiKey::ListOffsets),
        fencelog::client::MAX_ROUTING_ATTEMPTS as usize
    );
}

#[tokio::test]
async fn an_election_in_progress_is_waited_out_and_a_written_batch_is_not_resent() {
    // Proves: LEADER_NOT_AVAILABLE (nothing done) is retried until the partition has a leader
    // again; NOT_ENOUGH_REPLICAS_AFTER_APPEND (written) is not resent for a plain batch.
    let list_offsets = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&list_offsets);
    let answer: Arc<Answer> = Arc::new(move |request: &Request| match request {
        Request::ListOffsets { .. } => {
            if counted.fetch_add(1, Ordering::SeqCst) < 2 {
                Err(ErrorResponse::new(
                    ErrorCode::LeaderNotAvailable,
                    "orders/0 is electing a leader",
                ))
            } else {
                Ok(Response::ListOffsets {
                    earliest: 0,
                    latest: 7,
                    epoch: 1,
                    offset_for_timestamp: None,
                })
            }
        }
        Request::Produce { .. } => Err(ErrorResponse::new(
            ErrorCode::NotEnoughReplicasAfterAppend,
            "written, not replicated in time",
        )),
        _ => Err(ErrorResponse::new(ErrorCode::UnsupportedVersion, "no")),
    });
    let fake = FakeBroker::start(answer).await;
    let client = Client::builder()
        .addr(fake.addr.to_string())
        .reconnect_backoff(Duration::from_millis(1), Duration::from_millis(5))
        .connect()
        .await
        .unwrap();
    assert_eq!(client.list_offsets("orders", 0).await.unwrap().latest, 7);
    assert_eq!(list_offsets.load(Ordering::SeqCst), 3);
    let error = client
        .produce("orders", 0, batch(1, "x"))
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::NotEnoughReplicasAfterAppend));
    assert_eq!(
        fake.asked(ApiKey::Produce),
        1,
        "a written batch is not resent"
    );
}

#[tokio::test]
async fn against_one_standalone_server_the_client_sends_nothing_extra() {
    // Proves: a client of one standalone server sends exactly the requests it is asked to (no
    // metadata lookups of its own), plus its connection's first exchange (one ApiVersions
    // before the first request the server may hold), and cluster metadata shows the server as
    // the one broker leading in leader epoch 0.
    let server = TestServer::start().await.unwrap();
    let proxy = Proxy::start(server.addr()).await.unwrap();
    let client = Client::connect(proxy.addr()).await.unwrap();
    client
        .create_topic("orders", 1, TopicConfig::default())
        .await
        .unwrap();
    let lease = client
        .acquire_lease("orders", 0, "writer", TTL)
        .await
        .unwrap();
    client
        .produce("orders", 0, batch(lease.epoch, "a"))
        .await
        .unwrap();
    client
        .produce_with_acks("orders", 0, batch(lease.epoch, "b"), Acks::All)
        .await
        .unwrap();
    client
        .produce_with_acks("orders", 0, batch(lease.epoch, "c"), Acks::Leader)
        .await
        .unwrap();
    client
        .fetch("orders", 0, 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(proxy.requests_forwarded(), 1 + 6);
    let info = client.cluster_metadata(&["orders"]).await.unwrap();
    assert_eq!(info.brokers.len(), 1);
    assert_eq!(info.brokers[0].address, server.addr().to_string());
    assert_eq!(info.partitions[0].leader, Some(0));
    assert_eq!(info.partitions[0].leader_epoch, 0);
    assert_eq!(info.partitions[0].high_watermark, 3);
    // Knowing the whole (one-broker) cluster changes nothing: still the bootstrap connection.
    client.list_offsets("orders", 0).await.unwrap();
    assert_eq!(proxy.connections(), 1);
    let refused = client
        .create_replicated_topic(
            "replicated",
            1,
            TopicConfig::default(),
            Replication {
                factor: 3,
                min_insync: None,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::ClusterRequired));
    assert!(refused.to_string().contains("--etcd"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_produce_that_lost_its_connection_has_an_unknown_outcome() {
    // Proves: a produce without producer id whose connection died after it was sent fails with
    // OutcomeUnknown (never resent: it was in fact appended), while an idempotent batch in the
    // same situation is resent and answered with its original offsets, appended once.
    let server = TestServer::start().await.unwrap();
    let direct = Client::connect(server.addr()).await.unwrap();
    direct
        .create_topic("events", 1, TopicConfig::default())
        .await
        .unwrap();
    let lease = direct
        .acquire_lease("events", 0, "writer", TTL)
        .await
        .unwrap();
    let proxy = Proxy::start(server.addr()).await.unwrap();
    let client = Client::connect(proxy.addr()).await.unwrap();
    // The connection's first exchange, without which no produce is written on it.
    client.api_versions().await.unwrap();
    proxy.cut_after_requests(1);
    let error = client
        .produce("events", 0, batch(lease.epoch, "plain"))
        .await
        .unwrap_err();
    assert!(error.is_outcome_unknown(), "{error:?}");
    assert!(!error.is_retriable());
    proxy.stop_cutting_after_requests();

    let producer_id = direct.init_producer_id().await.unwrap();
    let mut idempotent = BatchBuilder::with_producer(
        lease.epoch,
        producer_id.producer_id,
        producer_id.producer_epoch,
    );
    idempotent.push(0, None, Some(b"idempotent"));
    let idempotent = idempotent.finish_with_sequence(0);
    let before = proxy.requests_forwarded();
    proxy.cut_after_requests(1);
    let sending = tokio::spawn(async move { client.produce("events", 0, idempotent).await });
    // The first send reaches the server and its connection is cut; let the resend through.
    while proxy.requests_forwarded() == before {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    proxy.stop_cutting_after_requests();
    let ack = sending.await.unwrap().unwrap();
    assert_eq!(ack.base_offset, 1);
    assert!(
        proxy.requests_forwarded() >= before + 2,
        "it was sent again"
    );
    let fetched = direct
        .fetch("events", 0, 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    let values: Vec<&[u8]> = fetched
        .records
        .iter()
        .map(|record| record.value.as_deref().unwrap())
        .collect();
    assert_eq!(values, [&b"plain"[..], b"idempotent"]);
}

use crate::support::BIN;

/// Runs `fencelog ARGS --addr ADDR` and returns (status, stdout, stderr).
fn run(args: &[&str], addr: &str) -> (i32, String, String) {
    let output = Command::new(BIN)
        .args(args)
        .args(["--addr", addr])
        .env_remove("FENCELOG_ADDR")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_cli_shows_a_standalone_server_as_a_one_broker_cluster() {
    // Proves: `cluster status --json` prints exactly the contract's field names, for one broker
    // leading every partition; `topic create --replication-factor 3` is refused by a standalone
    // server with "replication needs a cluster", factor 1 is accepted; `produce --acks all`
    // appends. Unreachable bootstrap addresses before a live one are skipped (`--addr A,B`).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(TestServer::start()).unwrap();
    let addr = format!("127.0.0.1:1,{}", server.addr());

    let (status, _, stderr) = run(
        &["topic", "create", "r3", "--replication-factor", "3"],
        &addr,
    );
    assert_eq!(status, 1, "{stderr}");
    assert!(
        stderr.contains("needs a cluster: start the brokers with --etcd"),
        "{stderr}"
    );
    let (status, _, stderr) = run(
        &[
            "topic",
            "create",
            "orders",
            "--partitions",
            "2",
            "--replication-factor",
            "1",
            "--min-insync",
            "1",
        ],
        &addr,
    );
    assert_eq!(status, 0, "{stderr}");

    let lease = runtime.block_on(async {
        let client = Client::connect(server.addr()).await.unwrap();
        client.acquire_lease("orders", 1, "cli", TTL).await.unwrap()
    });
    let mut produce = Command::new(BIN)
        .args(["produce", "orders", "--partition", "1", "--acks", "all"])
        .args(["--epoch", &lease.epoch.to_string(), "--addr", &addr])
        .env_remove("FENCELOG_ADDR")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    produce
        .stdin
        .take()
        .unwrap()
        .write_all(b"one\ntwo\n")
        .unwrap();
    let produced = produce.wait_with_output().unwrap();
    assert!(produced.status.success());

    let (status, stdout, stderr) = run(&["cluster", "status", "--json"], &addr);
    assert_eq!(status, 0, "{stderr}");
    let json: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        json["brokers"],
        serde_json::json!([{"id": 0, "addr": server.addr().to_string(), "alive": true}])
    );
    let partitions = json["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 2);
    assert_eq!(
        partitions[1],
        serde_json::json!({
            "topic": "orders",
            "partition": 1,
            "leader": 0,
            "leader_epoch": 0,
            "replicas": [0],
            "isr": [0],
            "high_watermark": 2
        })
    );
    let (status, stdout, _) = run(&["cluster", "status"], &addr);
    assert_eq!(status, 0);
    assert!(stdout.contains("high_watermark"), "{stdout}");
    assert!(stdout.contains(&server.addr().to_string()), "{stdout}");
    let (_, help, _) = run(&["produce", "--help"], &addr);
    assert!(help.contains("--acks"), "{help}");
}
