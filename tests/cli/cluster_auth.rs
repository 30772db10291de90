//! A cluster run with `--auth`: three `fencelog serve --etcd --auth --broker-user broker`
//! processes whose followers authenticate to their leaders as the broker user. The followers
//! reach a full ISR, an admin's `acks=all` writes are acknowledged, a user with no grant is
//! refused, and a user posing as a follower (a `ReplicaFetch` of its own) is refused: only the
//! broker principal (or `admin` on the topic) may replicate.
//!
//! Users live in each broker's data directory for now (`fencelog user add --data-dir`), so the
//! test adds them to all three before starting them.

use std::process::Command;
use std::time::{Duration, Instant};

use fencelog::client::Client;
use fencelog::domain::{Replication, TopicConfig};
use fencelog::protocol::{Acks, ReplicaFetch, ReplicaFetchPartition, Request};
use tempfile::TempDir;

use crate::cluster_processes::BrokerProcess;
use crate::support::etcd::EtcdServer;
use crate::support::BIN;

const CONVERGE: Duration = Duration::from_secs(30);

fn add_user(data_dir: &std::path::Path, name: &str, password: &str) {
    let output = Command::new(BIN)
        .args(["user", "add", name, "--data-dir"])
        .arg(data_dir)
        .env("FENCELOG_PASSWORD", password)
        .output()
        .expect("run fencelog user add");
    assert!(
        output.status.success(),
        "user add {name}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn connect(brokers: &[BrokerProcess], user: &str, password: &str) -> Client {
    Client::builder()
        .addrs(brokers.iter().map(|broker| broker.addr.clone()))
        .credentials(user, password)
        .request_timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_authenticate_as_the_broker_user_and_clients_cannot_pose_as_one() {
    let Some(etcd) = EtcdServer::start_or_skip("cluster_auth") else {
        return;
    };
    let root = TempDir::new().expect("temp dir");
    let password_file = root.path().join("broker-password");
    std::fs::write(&password_file, "broker-secret\n").expect("password file");
    let mut brokers: Vec<BrokerProcess> = (1..=3)
        .map(|id| BrokerProcess::prepare(id, &root, &etcd.endpoint()))
        .collect();
    for (index, broker) in brokers.iter_mut().enumerate() {
        let data_dir = root.path().join(format!("broker-{}", index + 1));
        std::fs::create_dir_all(&data_dir).expect("data dir");
        add_user(&data_dir, "admin", "admin-secret");
        add_user(&data_dir, "broker", "broker-secret");
        add_user(&data_dir, "alice", "alice-secret");
        broker.extra.extend(
            [
                "--auth",
                "--super-user",
                "admin",
                "--broker-user",
                "broker",
                "--broker-password-file",
            ]
            .map(str::to_owned),
        );
        broker.extra.push(password_file.display().to_string());
        tokio::task::block_in_place(|| broker.spawn());
    }
    let admin = connect(&brokers, "admin", "admin-secret").await;
    admin
        .create_replicated_topic(
            "secured",
            1,
            TopicConfig::default(),
            Replication {
                factor: 3,
                min_insync: Some(2),
            },
        )
        .await
        .expect("admin creates a replicated topic");
    let deadline = Instant::now() + CONVERGE;
    loop {
        let info = admin.cluster_metadata(&["secured"]).await;
        if info
            .as_ref()
            .is_ok_and(|info| info.partitions.first().is_some_and(|p| p.isr.len() == 3))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the followers never joined the ISR (they could not authenticate?): {info:?}\n{}",
            brokers
                .iter()
                .map(BrokerProcess::log)
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let batch = crate::support::batch(0, "committed");
    admin
        .produce_with_acks("secured", 0, batch.clone(), Acks::All)
        .await
        .expect("an acks=all write with three in sync");

    let alice = connect(&brokers, "alice", "alice-secret").await;
    let refused = alice
        .produce_with_acks("secured", 0, batch, Acks::All)
        .await
        .expect_err("alice has no grant");
    assert!(
        refused
            .to_string()
            .to_lowercase()
            .contains("not authorized"),
        "{refused}"
    );
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
        posed
            .as_ref()
            .is_err_and(|error| error.to_string().to_lowercase().contains("not authorized")),
        "a client posing as a follower: {posed:?}"
    );
}
