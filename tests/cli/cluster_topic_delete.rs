//! Deleting a cluster topic and re-creating it under the same name while one of its replicas is
//! down (kill -9), with real processes: an etcd and three `fencelog serve --etcd
//! --kafka-listen`, driven through both listeners. The in-process version of the scenario is
//! `tests/cluster/cluster_topic_delete.rs`.
//!
//! Topic `T` (one partition, replication factor 3, `min_insync` 2) is created with `fencelog
//! topic create`; an `acks=all` native writer holding a lease of the first lineage writes five
//! `old-lineage-i` records, held by every replica (the broker to kill reports them committed).
//! Then one broker is killed (kill -9), its files checked to still hold the old records, and,
//! while it is down:
//!
//! 1. `T` is deleted, through the Kafka listener (confluent-kafka's `AdminClient.delete_topics`,
//!    `tools/kafka-clients/cluster_topic_delete.py`) or `fencelog topic delete`; both survivors'
//!    metadata then say it is unknown, and `topic list` no longer lists it;
//! 2. `T` is re-created under the same name, by `fencelog topic create` or Kafka CreateTopics;
//!    its partition is placed on all three brokers again (the killed broker's registration
//!    lingers for its TTL, `TTL_MS`), and its leader's epoch is above the old one's;
//! 3. the writer still holding the first lineage's producer epoch is refused as fenced; a new
//!    lease's epoch is above it, and five `new-lineage-i` records are written with `acks=all`.
//!
//! The killed broker is restarted on its old data directory: it deletes its leftover copy of
//! the first lineage (its log says so), rejoins the ISR and catches up. A native read and a
//! Kafka consumer (confluent-kafka) read exactly the new records; then every broker is stopped
//! and each one's files are read: every replica holds exactly the new records, no file under any
//! data directory holds a byte of an old record, and `DATA/deleted/` is empty.
//!
//! Two variants, one cluster each: a **follower** down (Kafka delete, native create) and the
//! **leader** down (native delete, Kafka create: the re-created partition's placement names the
//! killed broker as its leader, so a survivor takes over once its registration lapses). Where
//! confluent-kafka is missing the Kafka steps are done with the CLI instead (with a note);
//! where etcd is missing the tests skip.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fencelog::client::{Client, ClientError};
use fencelog::cluster::leader_epoch_of_producer_epoch;
use fencelog::cluster::meta::place_replicas;
use fencelog::protocol::{Acks, ErrorCode};
use tempfile::TempDir;

use crate::cluster_processes::{leader_above, produce_values, read_all, wait_isr, BrokerProcess};
use crate::kafka_cluster::{free_port, high_watermarks_reach, logs, tail};
use crate::support::etcd::EtcdServer;
use crate::support::python::python_module_missing;
use crate::support::{batch, BIN};

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tools/kafka-clients/cluster_topic_delete.py"
);
/// Registration TTL of these brokers: long enough that the killed broker is still registered
/// (so placeable) when the topic is re-created a moment after the kill, short enough that the
/// restarted broker (which waits for its old registration to lapse) and, with the leader down,
/// the re-created partition's election do not keep the test waiting long.
const TTL_MS: &str = "6000";
const CONVERGE: Duration = Duration::from_secs(30);
/// Records written to each lineage.
const RECORDS: usize = 5;
/// The first lineage's values: `old-lineage-i`. No byte string of them may survive the delete.
const OLD: &str = "old-lineage";
/// The re-created topic's values: `new-lineage-i`.
const NEW: &str = "new-lineage";

/// Which of the partition's replicas is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Down {
    /// A follower (in the placement of both lineages): Kafka delete, native create.
    Follower,
    /// The leader (the placement's leader of both lineages): native delete, Kafka create.
    Leader,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_deleted_through_kafka_and_recreated_while_a_follower_is_down_fences_the_old_lineage(
) {
    run(Down::Follower, "orders").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_recreated_through_kafka_while_its_leader_is_down_fences_the_old_lineage() {
    run(Down::Leader, "ledger").await;
}

/// etcd, three brokers with both listeners, and whether confluent-kafka can be used.
struct Harness {
    brokers: Vec<BrokerProcess>,
    /// Each broker's Kafka listener, by `node id - 1`.
    kafka: Vec<String>,
    kafka_clients: bool,
    _etcd: EtcdServer,
    _root: TempDir,
}

impl Harness {
    fn start(test: &str) -> Option<Harness> {
        let etcd = EtcdServer::start_or_skip(test)?;
        let kafka_clients = !python_module_missing("confluent_kafka");
        if !kafka_clients {
            eprintln!("{test}: the Kafka steps run through the CLI instead");
        }
        let root = tempfile::tempdir().expect("temp dir");
        let kafka: Vec<String> = (0..3)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let brokers = (1..=3u32)
            .map(|id| {
                let mut broker = BrokerProcess::prepare(id, &root, &etcd.endpoint());
                broker.ttl_ms = TTL_MS;
                broker
                    .extra
                    .extend(["--kafka-listen".to_owned(), kafka[id as usize - 1].clone()]);
                broker.spawn();
                broker
            })
            .collect();
        let harness = Harness {
            brokers,
            kafka,
            kafka_clients,
            _etcd: etcd,
            _root: root,
        };
        let deadline = Instant::now() + CONVERGE;
        for address in &harness.kafka {
            while std::net::TcpStream::connect(address).is_err() {
                assert!(Instant::now() < deadline, "{address} never listened");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Some(harness)
    }

    fn broker(&mut self, id: u32) -> &mut BrokerProcess {
        self.brokers
            .iter_mut()
            .find(|broker| broker.id == id)
            .expect("broker")
    }

    fn native_addrs(&self, ids: &[u32]) -> String {
        self.brokers
            .iter()
            .filter(|broker| ids.contains(&broker.id))
            .map(|broker| broker.addr.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn kafka_bootstrap(&self, ids: &[u32]) -> String {
        ids.iter()
            .map(|id| self.kafka[*id as usize - 1].clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    async fn client(&self, ids: &[u32]) -> Client {
        Client::builder()
            .addrs(self.native_addrs(ids).split(',').map(str::to_owned))
            .request_timeout(Duration::from_secs(10))
            .connect()
            .await
            .expect("connect")
    }

    /// Runs the CLI against the brokers `ids`; returns stdout, panics on failure.
    fn cli(&self, ids: &[u32], args: &[&str]) -> String {
        let output = tokio::task::block_in_place(|| {
            Command::new(BIN)
                .args(args)
                .args(["--addr", &self.native_addrs(ids)])
                .env_remove("FENCELOG_ADDR")
                .output()
                .expect("run fencelog")
        });
        assert!(
            output.status.success(),
            "fencelog {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            logs(&self.brokers)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Runs the Kafka client script against the Kafka listeners of `ids`; returns its stdout
    /// lines, panics on failure.
    fn kafka_script(&self, ids: &[u32], args: &[&str]) -> Vec<String> {
        let output = tokio::task::block_in_place(|| {
            Command::new("python3")
                .arg(SCRIPT)
                .arg(self.kafka_bootstrap(ids))
                .args(args)
                .output()
                .expect("run python3")
        });
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "cluster_topic_delete.py {args:?} failed:\n{stdout}\n{}\n{}",
            String::from_utf8_lossy(&output.stderr),
            logs(&self.brokers)
        );
        stdout.lines().map(str::to_owned).collect()
    }

    /// Creates `topic` (rf 3, min_insync 2), through Kafka CreateTopics or the CLI.
    fn create(&self, ids: &[u32], topic: &str, through_kafka: bool) {
        if through_kafka && self.kafka_clients {
            let said = self.kafka_script(ids, &["create", topic, "1", "3", "2"]);
            assert_eq!(said, ["created", "listed"]);
        } else {
            let args = [
                "topic",
                "create",
                topic,
                "--partitions",
                "1",
                "--replication-factor",
                "3",
                "--min-insync",
                "2",
            ];
            self.cli(ids, &args);
        }
    }

    /// Deletes `topic`, through Kafka DeleteTopics or the CLI.
    fn delete(&self, ids: &[u32], topic: &str, through_kafka: bool) {
        if through_kafka && self.kafka_clients {
            let said = self.kafka_script(ids, &["delete", topic]);
            assert_eq!(said, ["deleted", "not listed"]);
        } else {
            let said = self.cli(ids, &["topic", "delete", topic]);
            assert_eq!(said.trim(), format!("deleted topic {topic}"));
        }
    }
}

/// The scenario of the module docs with the `down` replica killed.
async fn run(down_role: Down, topic: &str) {
    let test = format!("cluster topic delete with the {down_role:?} down");
    let Some(mut harness) = tokio::task::block_in_place(|| Harness::start(&test)) else {
        return;
    };
    let everyone = [1, 2, 3];
    let client = harness.client(&everyone).await;
    wait_registered(&client, 3).await;
    harness.create(&everyone, topic, false);
    let (leader, old_epoch) = leader_above(&client, topic, 1).await;
    // The same placement is computed for the re-created topic (same name, same brokers).
    let placement = place_replicas(&everyone, topic, 1, 3, 2).expect("placement");
    let replicas = placement[0].replicas.clone();
    let down = match down_role {
        Down::Leader => leader,
        Down::Follower => *replicas
            .iter()
            .rev()
            .find(|id| **id != leader && **id != replicas[0])
            .expect("a follower"),
    };
    // A Kafka admin client sends DeleteTopics and CreateTopics to the controller Metadata
    // names: the answering broker, so never the killed one (which stays registered until its
    // TTL lapses).
    let survivors: Vec<u32> = everyone.into_iter().filter(|id| *id != down).collect();
    wait_isr(&client, topic, 3).await;
    let old_lease = client
        .acquire_lease(topic, 0, "writer", Duration::from_secs(60))
        .await
        .expect("lease on the first lineage");
    let old_values = produce_values(&client, topic, old_lease.epoch, OLD, RECORDS).await;
    let down_addr = harness.broker(down).addr.clone();
    wait_until(&format!("broker {down} holds the old records"), || {
        let (addr, topic) = (down_addr.clone(), topic.to_owned());
        async move { high_watermark(&addr, &topic).await == Some(RECORDS as u64) }
    })
    .await;

    harness.broker(down).kill9();
    let down_dir = harness.broker(down).data_dir.clone();
    assert!(
        !files_holding(&down_dir, OLD.as_bytes()).is_empty(),
        "the killed broker's files hold the old records (else the test proves nothing)"
    );
    let others = harness.client(&survivors).await;

    // Delete while it is down, through one listener; the survivors no longer know the topic.
    harness.delete(&survivors, topic, down_role == Down::Follower);
    for id in &survivors {
        let addr = harness.broker(*id).addr.clone();
        wait_until(&format!("broker {id} no longer knows {topic}"), || {
            let (addr, topic) = (addr.clone(), topic.to_owned());
            async move { unknown_topic(&addr, &topic).await }
        })
        .await;
    }
    let listed = harness.cli(&survivors, &["topic", "list"]);
    assert!(!listed.lines().any(|line| line.contains(topic)), "{listed}");

    // Re-create it under the same name (through the other listener) while it is still down.
    harness.create(&survivors, topic, down_role == Down::Leader);
    let (new_leader, new_epoch) = served_leader(&others, topic, down).await;
    assert!(
        new_epoch > old_epoch,
        "the re-created topic's leader epoch {new_epoch} must be above the deleted one's \
         {old_epoch}"
    );
    let info = others.cluster_metadata(&[topic]).await.expect("metadata");
    let mut placed = info.partitions[0].replicas.clone();
    placed.sort_unstable();
    assert_eq!(
        placed, everyone,
        "the re-created partition is placed on all three brokers (the killed one's \
         registration lingers for its TTL)"
    );

    // The first lineage's writer is fenced; a new lease is above it.
    let stale = others
        .produce_with_acks(topic, 0, batch(old_lease.epoch, "stale"), Acks::All)
        .await;
    assert!(
        matches!(stale, Err(ClientError::Fenced { .. })),
        "a producer epoch of the deleted lineage must be fenced on the new topic, got {stale:?}"
    );
    let lease = others
        .acquire_lease(topic, 0, "writer", Duration::from_secs(60))
        .await
        .expect("lease on the new topic");
    assert!(lease.epoch > old_lease.epoch);
    assert!(leader_epoch_of_producer_epoch(lease.epoch) > old_epoch);
    let new_values = produce_values(&others, topic, lease.epoch, NEW, RECORDS).await;
    assert_ne!(new_values, old_values);

    // The killed broker returns on its old data directory.
    tokio::task::block_in_place(|| harness.broker(down).spawn());
    let all = harness.client(&everyone).await;
    wait_isr(&all, topic, 3).await;
    high_watermarks_reach(&harness.brokers, topic, RECORDS as u64).await;
    let returned_log = harness.broker(down).log();
    assert!(
        returned_log.contains("deleted the local copy of the topic"),
        "the returning broker deletes its copy of the old lineage:\n{}",
        tail(&returned_log, 30)
    );

    // Consumers, native and Kafka, read only the new records.
    let log = read_all(&all, topic).await;
    let values: Vec<String> = log.iter().map(|(value, _)| value.clone()).collect();
    assert_eq!(values, new_values, "a native read of the re-created topic");
    assert!(log
        .iter()
        .all(|(_, epoch)| leader_epoch_of_producer_epoch(*epoch) > old_epoch));
    if harness.kafka_clients {
        let mut read = harness.kafka_script(&everyone, &["consume", topic]);
        assert_eq!(read.pop().as_deref(), Some("end"));
        assert_eq!(read, new_values, "a Kafka consumer of the re-created topic");
    }

    // Every replica's files: exactly the new records, nothing of the old lineage anywhere.
    for broker in &mut harness.brokers {
        tokio::task::block_in_place(|| broker.stop());
    }
    for broker in &harness.brokers {
        let (records, log_end) = broker.replica_contents(topic);
        let values: Vec<String> = records.into_iter().map(|(value, _)| value).collect();
        assert_eq!(
            (values, log_end),
            (new_values.clone(), RECORDS as u64),
            "broker {} holds other records than the re-created topic's",
            broker.id
        );
        let leftovers = files_holding(&broker.data_dir, OLD.as_bytes());
        assert!(
            leftovers.is_empty(),
            "broker {} still holds old records in {leftovers:?}",
            broker.id
        );
        let deleted = broker.data_dir.join("deleted");
        let pending = std::fs::read_dir(&deleted).map_or(0, |entries| entries.count());
        assert_eq!(pending, 0, "{} is not empty", deleted.display());
    }
    eprintln!(
        "{test}: {down_role:?} {down} down; leader epoch {old_epoch} -> {new_epoch} (leader \
         {leader} -> {new_leader})"
    );
}

/// Waits until `client`'s metadata lists `count` live brokers.
async fn wait_registered(client: &Client, count: usize) {
    wait_until("every broker registered", || async move {
        client
            .cluster_metadata::<&str>(&[])
            .await
            .is_ok_and(|info| info.brokers.len() == count)
    })
    .await;
}

async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + CONVERGE;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The high watermark of `topic`/0 as the broker at `addr` alone reports it.
async fn high_watermark(addr: &str, topic: &str) -> Option<u64> {
    let direct = Client::connect(addr).await.ok()?;
    let info = direct.cluster_metadata(&[topic]).await.ok()?;
    info.partitions
        .iter()
        .find(|partition| partition.partition == 0)
        .map(|partition| partition.high_watermark)
}

/// Whether the broker at `addr`, asked alone, says `topic` is unknown.
async fn unknown_topic(addr: &str, topic: &str) -> bool {
    let Ok(direct) = Client::connect(addr).await else {
        return false;
    };
    match direct.cluster_metadata(&[topic]).await {
        Err(ClientError::Server {
            code: ErrorCode::UnknownTopic,
            ..
        }) => true,
        Ok(info) => info.partitions.is_empty(),
        Err(_) => false,
    }
}

/// The leader of `topic`/0 and its epoch, once a broker other than `down` serves it.
async fn served_leader(client: &Client, topic: &str, down: u32) -> (u32, u32) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        if let Ok(info) = client.cluster_metadata(&[topic]).await {
            let found = info
                .partitions
                .iter()
                .find(|p| p.partition == 0)
                .and_then(|p| p.leader.map(|leader| (leader, p.leader_epoch)));
            if let Some(found) = found.filter(|(leader, _)| *leader != down) {
                return found;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no broker but {down} leads {topic}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every file under `directory` whose bytes contain `needle`.
fn files_holding(directory: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![directory.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&directory) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if std::fs::read(&path)
                .is_ok_and(|bytes| bytes.windows(needle.len()).any(|window| window == needle))
            {
                found.push(path);
            }
        }
    }
    found
}
