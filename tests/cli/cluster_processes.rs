//! A real cluster: an etcd process and three `fencelog serve --etcd` processes on loopback,
//! driven through the client library and the CLI as an operator would, with the faults the
//! cluster exists for: `kill -9` of the leader under `acks=all` load, a leader paused (SIGSTOP)
//! past its registration and resumed, two failovers in quick succession, a follower that drops
//! out and comes back. After each, the checker compares what producers were told with what the
//! replicas hold: every acknowledged record present once, in order, epochs never decreasing
//! along the log, every replica at the same high watermark.
//!
//! Skipped with a note where the `etcd` binary is missing (`.ci/run` installs `etcd-server`).

use crate::support::etcd;
use crate::support::storage;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::batch;
use etcd::EtcdServer;
use fencelog::client::{Client, ClientError};
use fencelog::cluster::leader_epoch_of_producer_epoch;
use fencelog::protocol::Acks;
use fencelog::testing_link::LinkProxy;
use tempfile::TempDir;

use crate::support::BIN;
/// Registration TTL of the test brokers: failover within a few seconds.
const TTL_MS: &str = "2000";
/// A follower this far behind leaves the ISR.
const LAG_MS: &str = "1500";
/// How long a test waits for the cluster to converge.
const CONVERGE: Duration = Duration::from_secs(30);

/// One `fencelog serve` process and where it keeps its data (also the Kafka cluster test's).
pub(crate) struct BrokerProcess {
    pub(crate) id: u32,
    pub(crate) addr: String,
    pub(crate) data_dir: PathBuf,
    etcd: String,
    /// More `serve` flags (`--peer-addr` of a cluster started with links, `--kafka-listen`).
    pub(crate) extra: Vec<String>,
    /// More environment variables of `serve` (`FENCELOG_BROKER_PASSWORD` of a secured cluster).
    pub(crate) env: Vec<(String, String)>,
    /// `--registration-ttl-ms` ([`TTL_MS`] unless a test needs a kill -9'd broker's
    /// registration to linger longer).
    pub(crate) ttl_ms: &'static str,
    pub(crate) child: Option<Child>,
    /// The listener that reserved `addr` from `prepare` until the process is spawned: a port
    /// only picked free and released could be taken meanwhile by the next port picked free (a
    /// link proxy's of the same cluster: the broker then could not bind, while `spawn` saw the
    /// proxy answer on its address; "brokers never registered" under load).
    reserved: Option<TcpListener>,
}

impl BrokerProcess {
    fn start(id: u32, root: &TempDir, etcd: &str) -> BrokerProcess {
        let mut broker = Self::prepare(id, root, etcd);
        broker.spawn();
        broker
    }

    /// A broker on a free port, not started yet.
    pub(crate) fn prepare(id: u32, root: &TempDir, etcd: &str) -> BrokerProcess {
        let reserved = TcpListener::bind("127.0.0.1:0").expect("free port");
        let port = reserved.local_addr().expect("free port").port();
        BrokerProcess {
            id,
            addr: format!("127.0.0.1:{port}"),
            data_dir: root.path().join(format!("broker-{id}")),
            etcd: etcd.to_owned(),
            extra: Vec::new(),
            env: Vec::new(),
            ttl_ms: TTL_MS,
            child: None,
            reserved: Some(reserved),
        }
    }

    pub(crate) fn spawn(&mut self) {
        std::fs::create_dir_all(&self.data_dir).expect("data dir");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data_dir.with_extension("log"))
            .expect("log file");
        // Released at the last moment: the process binds it next.
        drop(self.reserved.take());
        let child = Command::new(BIN)
            .args(["serve", "--node-id", &self.id.to_string()])
            .args(["--etcd", &self.etcd, "--cluster-name", "processes"])
            .args(["--listen", &self.addr])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--registration-ttl-ms", self.ttl_ms])
            .args(["--replica-lag-max-ms", LAG_MS])
            .args(&self.extra)
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .env("RUST_LOG", "fencelog=info")
            .env_remove("FENCELOG_ADDR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start fencelog serve");
        self.child = Some(child);
        let deadline = Instant::now() + CONVERGE;
        while std::net::TcpStream::connect(&self.addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "broker {} never listened",
                self.id
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id();
        crate::support::process::signal(pid, signal);
    }

    /// Stops the process (SIGSTOP) and waits until every one of its threads is stopped: the
    /// signal is delivered asynchronously, and a thread still running could serve a request
    /// sent "after" the pause.
    pub(crate) fn pause(&self) {
        let pid = self.child.as_ref().expect("running").id();
        crate::support::process::pause(pid, CONVERGE);
    }

    pub(crate) fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `kill -9`, then waits at most `wait` for the process to exit: whether it did. A process
    /// that did not is kept (its threads wait in the kernel, for a FUSE file system that stopped
    /// answering: see `LazyFs::recover_wedged`); [`Self::kill9`] reaps it once they can go.
    pub(crate) fn kill9_within(&mut self, wait: Duration) -> bool {
        let Some(child) = self.child.as_mut() else {
            return true;
        };
        let _ = child.kill();
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if child.try_wait().ok().flatten().is_some() {
                self.child = None;
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Stops the broker gracefully (SIGTERM: it leaves the cluster, syncs and records its high
    /// watermark) and waits for it to exit: whether it did. One that has not exited
    /// [`CONVERGE`] after the signal is killed; one that has not exited 10 s after that waits on
    /// a file system that stopped answering, and is kept (see [`Self::kill9_within`]).
    pub(crate) fn stop(&mut self) -> bool {
        let Some(child) = self.child.as_mut() else {
            return true;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + CONVERGE;
        while child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                return self.kill9_within(Duration::from_secs(10));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = None;
        true
    }

    /// What this replica's log of `topic`/0 holds up to its high watermark, read from its files
    /// (the broker must be stopped): values and epochs, and its log end.
    pub(crate) fn replica_contents(&self, topic: &str) -> (Vec<(String, u64)>, u64) {
        let directory = self.data_dir.join("topics").join(topic).join("0");
        let config =
            fencelog::broker::partition_config(&fencelog::domain::TopicConfig::default(), 1);
        let partition = fencelog::storage::Partition::open(
            &format!("{topic}/0"),
            &directory,
            config,
            &storage::seal_worker(),
        )
        .expect("open the replica");
        let records = storage::read_all_records(&partition)
            .into_iter()
            .map(|record| {
                let value = record.value.as_deref().unwrap_or(b"");
                (String::from_utf8_lossy(value).into_owned(), record.epoch)
            })
            .collect();
        (records, partition.log_end_offset())
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir.with_extension("log")).unwrap_or_default()
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A stopped process must be resumed to die promptly.
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
        }
        self.kill9();
    }
}

/// etcd, three brokers, and a client that knows all of them.
struct Cluster {
    brokers: Vec<BrokerProcess>,
    /// Each broker's link to etcd, by node id (when started with [`Cluster::start_with_links`]).
    etcd_links: Vec<(u32, LinkProxy)>,
    /// Each ordered broker-to-broker link `(from, to)`: the way `from` reaches `to`'s listener.
    peer_links: Vec<((u32, u32), LinkProxy)>,
    etcd: EtcdServer,
    _root: TempDir,
}

impl Cluster {
    fn start(test: &str) -> Option<Cluster> {
        let etcd = EtcdServer::start_or_skip(test)?;
        let root = tempfile::tempdir().expect("temp dir");
        let brokers = (1..=3)
            .map(|id| BrokerProcess::start(id, &root, &etcd.endpoint()))
            .collect();
        let cluster = Cluster {
            brokers,
            etcd_links: Vec::new(),
            peer_links: Vec::new(),
            etcd,
            _root: root,
        };
        cluster.wait_registered();
        Some(cluster)
    }

    /// Like [`Cluster::start`], with each broker reaching etcd through its own [`LinkProxy`],
    /// so one broker can be cut off from etcd while it still serves its followers and clients.
    async fn start_with_links(test: &str) -> Option<Cluster> {
        let etcd = EtcdServer::start_or_skip(test)?;
        let root = tempfile::tempdir().expect("temp dir");
        let target: std::net::SocketAddr = etcd
            .endpoint()
            .trim_start_matches("http://")
            .parse()
            .expect("etcd address");
        let mut brokers = Vec::new();
        let mut etcd_links = Vec::new();
        for id in 1..=3 {
            let link = LinkProxy::start(target).await.expect("link to etcd");
            let endpoint = format!("http://{}", link.addr());
            brokers.push(BrokerProcess::prepare(id, &root, &endpoint));
            etcd_links.push((id, link));
        }
        let mut peer_links = Vec::new();
        for from in 0..brokers.len() {
            for to in 0..brokers.len() {
                if from == to {
                    continue;
                }
                let target = brokers[to].addr.parse().expect("broker address");
                let link = LinkProxy::start(target).await.expect("broker link");
                let flag = format!("{}={}", brokers[to].id, link.addr());
                brokers[from].extra.extend(["--peer-addr".to_owned(), flag]);
                peer_links.push(((brokers[from].id, brokers[to].id), link));
            }
        }
        for broker in &mut brokers {
            tokio::task::block_in_place(|| broker.spawn());
        }
        let cluster = Cluster {
            brokers,
            etcd_links,
            peer_links,
            etcd,
            _root: root,
        };
        tokio::task::block_in_place(|| cluster.wait_registered());
        Some(cluster)
    }

    fn wait_registered(&self) {
        // Listening is not registered: wait until every broker is in the store.
        let deadline = Instant::now() + CONVERGE;
        while self.registered() < 3 {
            assert!(
                Instant::now() < deadline,
                "brokers never registered; their logs:\n{}",
                self.log_tails()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of every broker's log, for a failure message (a broker that could not
    /// bind its port or reach etcd says so there).
    fn log_tails(&self) -> String {
        self.brokers
            .iter()
            .map(|broker| {
                let log = std::fs::read_to_string(broker.data_dir.with_extension("log"))
                    .unwrap_or_else(|error| format!("(no log: {error})"));
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(15)..].join("\n");
                format!("--- broker {} at {}:\n{tail}", broker.id, broker.addr)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The link `from` reaches `to` through.
    fn peer_link(&self, from: u32, to: u32) -> &LinkProxy {
        &self
            .peer_links
            .iter()
            .find(|(pair, _)| *pair == (from, to))
            .expect("started with links")
            .1
    }

    /// Broker `id`'s link to etcd.
    fn etcd_link(&self, id: u32) -> &LinkProxy {
        &self
            .etcd_links
            .iter()
            .find(|(node, _)| *node == id)
            .expect("started with links")
            .1
    }

    /// How many brokers `cluster status` lists as alive.
    fn registered(&self) -> usize {
        let out = self.cli(&["cluster", "status", "--json"]);
        let status: serde_json::Value = serde_json::from_str(&out).expect("status json");
        status["brokers"].as_array().map_or(0, |brokers| {
            brokers.iter().filter(|b| b["alive"] == true).count()
        })
    }

    fn addrs(&self) -> String {
        self.brokers
            .iter()
            .map(|b| b.addr.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn broker(&mut self, id: u32) -> &mut BrokerProcess {
        self.brokers
            .iter_mut()
            .find(|b| b.id == id)
            .expect("broker")
    }

    /// Runs the CLI with `--addr` set to every broker; returns stdout, panics on failure.
    fn cli(&self, args: &[&str]) -> String {
        let output = Command::new(BIN)
            .args(args)
            .args(["--addr", &self.addrs()])
            .env_remove("FENCELOG_ADDR")
            .output()
            .expect("run fencelog");
        assert!(
            output.status.success(),
            "fencelog {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            self.logs()
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn logs(&self) -> String {
        self.brokers
            .iter()
            .map(|b| format!("--- broker {} ---\n{}", b.id, tail(&b.log(), 40)))
            .collect()
    }

    async fn client(&self, ids: &[u32]) -> Client {
        Client::builder()
            .addrs(
                self.brokers
                    .iter()
                    .filter(|b| ids.contains(&b.id))
                    .map(|b| b.addr.clone()),
            )
            .request_timeout(Duration::from_secs(10))
            .connect()
            .await
            .expect("connect")
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Creates `topic` with one partition on all three brokers, through the CLI (`extra`: more
/// flags).
fn create_replicated(cluster: &Cluster, topic: &str, extra: &[&str]) {
    let mut args = vec![
        "topic",
        "create",
        topic,
        "--partitions",
        "1",
        "--replication-factor",
        "3",
    ];
    args.extend_from_slice(extra);
    cluster.cli(&args);
}

/// Produces `count` single-record batches `prefix-i` with `acks=all`, each acknowledged.
pub(crate) async fn produce_values(
    client: &Client,
    topic: &str,
    epoch: u64,
    prefix: &str,
    count: usize,
) -> Vec<String> {
    let mut values = Vec::new();
    for i in 0..count {
        let value = format!("{prefix}-{i}");
        client
            .produce_with_acks(topic, 0, batch(epoch, &value), Acks::All)
            .await
            .unwrap_or_else(|error| panic!("produce {value}: {error}"));
        values.push(value);
    }
    values
}

/// Like [`produce_values`] under the lease `holder` holds at `epoch`, taking the lease again
/// when a *later leader epoch* fenced it: a leader that lapsed on a loaded machine (a keep-alive
/// later than its registration allows) is replaced, and its successor's grants fence every
/// lease the old one gave. That failover is the system working, so the writer follows it as a
/// real one would, and the value is sent again (a fenced batch is refused before anything is
/// written, so nothing is duplicated). Fenced within the same leader epoch is still a failure.
/// Returns the values and the epoch of the lease held at the end.
async fn produce_values_following_failovers(
    client: &Client,
    topic: &str,
    (holder, mut epoch): (&str, u64),
    prefix: &str,
    count: usize,
) -> (Vec<String>, u64) {
    let acquire = || async {
        client
            .acquire_lease(topic, 0, holder, Duration::from_secs(60))
            .await
            .unwrap_or_else(|error| panic!("lease for {holder}: {error}"))
            .epoch
    };
    let mut values = Vec::new();
    for i in 0..count {
        let value = format!("{prefix}-{i}");
        loop {
            match client
                .produce_with_acks(topic, 0, batch(epoch, &value), Acks::All)
                .await
            {
                Ok(_) => break,
                Err(ClientError::Fenced { current, .. })
                    if leader_epoch_of_producer_epoch(current)
                        > leader_epoch_of_producer_epoch(epoch) =>
                {
                    epoch = acquire().await;
                }
                Err(error) => panic!("produce {value}: {error}"),
            }
        }
        values.push(value);
    }
    (values, epoch)
}

/// The partition's leader epoch in `state` (from [`status`]) is `epoch` or later: a further
/// failover on a loaded machine may have raised it, but it never goes back.
fn assert_leader_epoch_at_least(state: &serde_json::Value, epoch: u32) {
    assert!(
        state["leader_epoch"]
            .as_u64()
            .is_some_and(|current| current >= u64::from(epoch)),
        "the leader epoch went back below {epoch}: {state}"
    );
}

/// A client of one broker alone.
async fn direct_client(addr: &str, timeout: Duration) -> Client {
    Client::builder()
        .addrs([addr.to_owned()])
        .request_timeout(timeout)
        .connect()
        .await
        .expect("connect to one broker")
}

/// `cluster status --json` of one partition, as the CLI prints it.
fn status(cluster: &Cluster, topic: &str) -> serde_json::Value {
    let out = cluster.cli(&["cluster", "status", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&out).expect("status json");
    status["partitions"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["topic"] == topic).cloned())
        .unwrap_or(serde_json::Value::Null)
}

/// The leader of partition 0 of `topic` and its epoch, once one serves above `above`.
pub(crate) async fn leader_above(client: &Client, topic: &str, above: u32) -> (u32, u32) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        if let Ok(info) = client.cluster_metadata(&[topic]).await {
            if let Some(found) = info
                .partitions
                .iter()
                .find(|p| p.partition == 0)
                .and_then(|p| p.leader.map(|leader| (leader, p.leader_epoch)))
            {
                if found.1 > above {
                    return found;
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader above epoch {above}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until a broker's own view (asked directly) shows the ISR at `size`.
pub(crate) async fn wait_isr(client: &Client, topic: &str, size: usize) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        if let Ok(info) = client.cluster_metadata(&[topic]).await {
            if info.partitions.first().is_some_and(|p| p.isr.len() == size) {
                return;
            }
        }
        assert!(Instant::now() < deadline, "the ISR never reached {size}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A producer task writing `acks=all` single-record batches as fast as it is answered,
/// re-acquiring its lease when a new leader fenced it. Records what it was told.
struct Load {
    acknowledged: Arc<Mutex<Vec<String>>>,
    last_error: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Load {
    fn start(client: Client, topic: &'static str, tag: &'static str) -> Load {
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (written, stopping) = (Arc::clone(&acknowledged), Arc::clone(&stop));
        let last_error = Arc::new(Mutex::new(None));
        let failed = Arc::clone(&last_error);
        let task = tokio::spawn(async move {
            let mut epoch = None;
            let mut i = 0u64;
            while !stopping.load(Ordering::Relaxed) {
                let current = match epoch {
                    Some(epoch) => epoch,
                    None => match client
                        .acquire_lease(topic, 0, "load", Duration::from_secs(60))
                        .await
                    {
                        Ok(lease) => *epoch.insert(lease.epoch),
                        Err(error) => {
                            *failed.lock().unwrap() = Some(format!("lease: {error}"));
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                };
                i += 1;
                let value = format!("{tag}-{i}");
                match client
                    .produce_with_acks(topic, 0, batch(current, &value), Acks::All)
                    .await
                {
                    Ok(_) => written.lock().unwrap().push(value),
                    Err(ClientError::Fenced { .. }) => epoch = None,
                    Err(error) => {
                        *failed.lock().unwrap() = Some(format!("produce: {error}"));
                        tokio::time::sleep(Duration::from_millis(50)).await
                    }
                }
            }
        });
        Load {
            acknowledged,
            last_error,
            stop,
            task,
        }
    }

    async fn finish(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        Arc::try_unwrap(self.acknowledged)
            .map(|m| m.into_inner().unwrap())
            .unwrap_or_else(|shared| shared.lock().unwrap().clone())
    }
}

/// Reads the whole partition from its leader: values and their epochs.
pub(crate) async fn read_all(client: &Client, topic: &str) -> Vec<(String, u64)> {
    let mut records = Vec::new();
    let mut offset = 0;
    loop {
        let fetched = client
            .fetch(topic, 0, offset, 1 << 20, Duration::ZERO)
            .await
            .expect("fetch");
        if fetched.records.is_empty() {
            return records;
        }
        for record in fetched.records {
            offset = record.offset + 1;
            let value = String::from_utf8_lossy(record.value.as_deref().unwrap_or(b"")).into();
            records.push((value, record.epoch));
        }
    }
}

/// The checker: every acknowledged value present exactly once and in the order acknowledged,
/// epochs never decreasing along the log, and nothing in `absent` present.
fn check(log: &[(String, u64)], acknowledged: &[String], absent: &[&str]) {
    let mut positions = std::collections::HashMap::new();
    for (index, (value, _)) in log.iter().enumerate() {
        assert!(
            positions.insert(value.clone(), index).is_none(),
            "{value} appears twice in the log"
        );
    }
    let mut last = None;
    for value in acknowledged {
        let position = *positions
            .get(value)
            .unwrap_or_else(|| panic!("acknowledged {value} is missing from the log"));
        assert!(
            last.is_none_or(|last| position > last),
            "acknowledged {value} is out of order"
        );
        last = Some(position);
    }
    for pair in log.windows(2) {
        assert!(
            pair[1].1 >= pair[0].1,
            "epochs decrease along the log: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
    for value in absent {
        assert!(
            !positions.contains_key(*value),
            "{value} must not be in the log"
        );
    }
}

/// The checker's last step: stops every broker and reads each replica's files. Every replica
/// holds exactly the log the leader served (`log`), committed up to its end.
fn every_replica_holds(cluster: &mut Cluster, topic: &str, log: &[(String, u64)]) {
    for broker in &mut cluster.brokers {
        broker.stop();
    }
    for broker in &cluster.brokers {
        let (records, log_end) = broker.replica_contents(topic);
        assert_eq!(
            log_end,
            log.len() as u64,
            "broker {} holds a log of a different length",
            broker.id
        );
        assert!(
            records.as_slice() == log,
            "broker {} holds different records than its leader served",
            broker.id
        );
    }
}

/// Every broker, asked directly, reports the same high watermark as the leader's log end.
async fn replicas_converge(cluster: &Cluster, topic: &str, expected: usize) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let mut marks = Vec::new();
        for broker in &cluster.brokers {
            let direct = Client::connect(broker.addr.as_str())
                .await
                .expect("connect");
            let info = direct.cluster_metadata(&[topic]).await.expect("metadata");
            marks.push(info.partitions[0].high_watermark);
        }
        if marks.iter().all(|m| *m == expected as u64) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "replicas did not converge on {expected}: {marks:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_leader_under_acks_all_load_loses_nothing_acknowledged() {
    let Some(mut cluster) = Cluster::start("kill_9_of_the_leader") else {
        return;
    };
    create_replicated(&cluster, "orders", &[]);
    let client = cluster.client(&[1, 2, 3]).await;
    let (leader, epoch) = leader_above(&client, "orders", 1).await;
    let load = Load::start(client.clone(), "orders", "v");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cluster.broker(leader).kill9();
    let survivors: Vec<u32> = (1..=3).filter(|id| *id != leader).collect();
    let others = cluster.client(&survivors).await;
    let (new_leader, new_epoch) = leader_above(&others, "orders", epoch).await;
    assert_ne!(new_leader, leader);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let acknowledged = load.finish().await;
    assert!(
        acknowledged.len() > 10,
        "the load made progress: {acknowledged:?}"
    );

    // The killed broker comes back on its data, rejoins as a follower and catches up.
    cluster.broker(leader).spawn();
    wait_isr(&others, "orders", 3).await;
    let log = read_all(&others, "orders").await;
    check(&log, &acknowledged, &[]);
    replicas_converge(&cluster, "orders", log.len()).await;
    let state = status(&cluster, "orders");
    assert_eq!(state["leader_epoch"].as_u64(), Some(u64::from(new_epoch)));
    every_replica_holds(&mut cluster, "orders", &log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_registration_acknowledges_nothing_and_rejoins() {
    let Some(mut cluster) = Cluster::start("a_leader_paused") else {
        return;
    };
    create_replicated(&cluster, "payments", &[]);
    let client = cluster.client(&[1, 2, 3]).await;
    let (leader, epoch) = leader_above(&client, "payments", 1).await;
    let lease = client
        .acquire_lease("payments", 0, "first", Duration::from_secs(60))
        .await
        .expect("lease");
    let mut acknowledged = produce_values(&client, "payments", lease.epoch, "before", 10).await;
    // A connection to the leader alone, opened before it freezes.
    let direct = direct_client(&cluster.broker(leader).addr, Duration::from_secs(30)).await;
    direct.api_versions().await.expect("leader answers");

    cluster.broker(leader).pause();
    // Sent while it is frozen: read by it only after it wakes up.
    let stale = tokio::spawn({
        let direct = direct.clone();
        async move {
            direct
                .produce_with_acks("payments", 0, batch(lease.epoch, "stale"), Acks::All)
                .await
        }
    });
    let survivors: Vec<u32> = (1..=3).filter(|id| *id != leader).collect();
    let others = cluster.client(&survivors).await;
    let (new_leader, new_epoch) = leader_above(&others, "payments", epoch).await;
    assert_ne!(new_leader, leader);
    let lease = others
        .acquire_lease("payments", 0, "second", Duration::from_secs(60))
        .await
        .expect("lease from the new leader");
    // On a loaded machine the new leader may itself be replaced meanwhile (see
    // `produce_values_following_failovers`), which is not what this test is about.
    let (during, epoch_held) = produce_values_following_failovers(
        &others,
        "payments",
        ("second", lease.epoch),
        "during",
        10,
    )
    .await;
    acknowledged.extend(during);

    cluster.broker(leader).signal("-CONT");
    let answer = stale.await.expect("task");
    assert!(
        answer.is_err(),
        "the deposed leader acknowledged a write after waking up: {answer:?}"
    );
    // It rejoins as a follower of the new epoch.
    wait_isr(&others, "payments", 3).await;
    let (after, _) =
        produce_values_following_failovers(&others, "payments", ("second", epoch_held), "after", 5)
            .await;
    acknowledged.extend(after);
    let log = read_all(&others, "payments").await;
    if let Some(position) = log.iter().position(|(value, _)| value == "stale") {
        panic!(
            "stale landed at offset {position} (epoch {}), answer {answer:?}; log around it: {:?}\n{}",
            log[position].1,
            &log[position.saturating_sub(3)..(position + 3).min(log.len())],
            cluster.logs()
        );
    }
    check(&log, &acknowledged, &["stale"]);
    replicas_converge(&cluster, "payments", log.len()).await;
    let state = status(&cluster, "payments");
    assert_leader_epoch_at_least(&state, new_epoch);
    assert!(
        cluster.broker(leader).log().contains("deposed")
            || cluster.broker(leader).log().contains("registration lost"),
        "the paused leader should report it lost its role:\n{}",
        tail(&cluster.broker(leader).log(), 30)
    );
    every_replica_holds(&mut cluster, "payments", &log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_failovers_in_quick_succession_keep_every_acknowledged_record() {
    let Some(mut cluster) = Cluster::start("two_failovers") else {
        return;
    };
    create_replicated(&cluster, "ledger", &["--min-insync", "1"]);
    let client = cluster.client(&[1, 2, 3]).await;
    let (first, epoch) = leader_above(&client, "ledger", 1).await;
    let load = Load::start(client.clone(), "ledger", "a");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    cluster.broker(first).kill9();
    let rest: Vec<u32> = (1..=3).filter(|id| *id != first).collect();
    let others = cluster.client(&rest).await;
    let (second, second_epoch) = leader_above(&others, "ledger", epoch).await;
    // The second leader dies soon after taking over, under load.
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.broker(second).kill9();
    let last: Vec<u32> = rest.iter().copied().filter(|id| *id != second).collect();
    let survivor = cluster.client(&last).await;
    let (third, _) = leader_above(&survivor, "ledger", second_epoch).await;
    assert_eq!(vec![third], last);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let acknowledged = load.finish().await;

    // Both come back, truncate by leader epoch where they diverged, and catch up.
    cluster.broker(first).spawn();
    cluster.broker(second).spawn();
    let everyone = cluster.client(&[1, 2, 3]).await;
    wait_isr(&everyone, "ledger", 3).await;
    let log = read_all(&everyone, "ledger").await;
    check(&log, &acknowledged, &[]);
    replicas_converge(&cluster, "ledger", log.len()).await;
    every_replica_holds(&mut cluster, "ledger", &log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_drops_out_leaves_the_isr_and_comes_back() {
    let Some(mut cluster) = Cluster::start("a_follower_drops_out") else {
        return;
    };
    create_replicated(&cluster, "metrics", &[]);
    let client = cluster.client(&[1, 2, 3]).await;
    let (leader, _) = leader_above(&client, "metrics", 1).await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let load = Load::start(client.clone(), "metrics", "m");
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.broker(follower).pause();
    // Writes go on with two in sync (min_insync 2) once the follower is dropped.
    wait_isr(&client, "metrics", 2).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let during = load.acknowledged.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        load.acknowledged.lock().unwrap().len() > during,
        "acks=all writes continue with the follower out of the ISR"
    );
    cluster.broker(follower).signal("-CONT");
    wait_isr(&client, "metrics", 3).await;
    let acknowledged = load.finish().await;
    let log = read_all(&client, "metrics").await;
    check(&log, &acknowledged, &[]);
    replicas_converge(&cluster, "metrics", log.len()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_etcd_is_down_nothing_is_acknowledged_past_the_registration_and_all_recovers() {
    let Some(mut cluster) = Cluster::start("etcd_outage") else {
        return;
    };
    create_replicated(&cluster, "outage", &[]);
    let client = cluster.client(&[1, 2, 3]).await;
    let (_, epoch) = leader_above(&client, "outage", 1).await;
    let load = Load::start(client.clone(), "outage", "o");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    cluster.etcd.kill();
    // Past every registration's local deadline (80% of the 2 s TTL after the last renewal),
    // no leader can prove it leads: nothing more is acknowledged.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let stalled = load.acknowledged.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        load.acknowledged.lock().unwrap().len(),
        stalled,
        "a write was acknowledged while no broker could renew its registration"
    );
    cluster.etcd.start_again().expect("start etcd again");
    // The brokers register again and the partition gets a leader in a new epoch.
    let (_, recovered) = leader_above(&client, "outage", epoch).await;
    assert!(recovered > epoch);
    wait_isr(&client, "outage", 3).await;
    let deadline = Instant::now() + CONVERGE;
    while load.acknowledged.lock().unwrap().len() <= stalled {
        assert!(
            Instant::now() < deadline,
            "writes never resumed after etcd came back (last error: {:?})\n{}",
            load.last_error.lock().unwrap(),
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let acknowledged = load.finish().await;
    let log = read_all(&client, "outage").await;
    check(&log, &acknowledged, &[]);
    replicas_converge(&cluster, "outage", log.len()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_etcd_stops_acknowledging_while_a_new_leader_takes_over() {
    let Some(mut cluster) = Cluster::start_with_links("a_leader_cut_off_from_etcd").await else {
        return;
    };
    tokio::task::block_in_place(|| create_replicated(&cluster, "isolated", &[]));
    let client = cluster.client(&[1, 2, 3]).await;
    let (leader, epoch) = leader_above(&client, "isolated", 1).await;
    let lease = client
        .acquire_lease("isolated", 0, "first", Duration::from_secs(60))
        .await
        .expect("lease");
    let mut acknowledged = produce_values(&client, "isolated", lease.epoch, "before", 10).await;
    let direct = direct_client(&cluster.broker(leader).addr, Duration::from_secs(5)).await;

    // The leader loses etcd (a silent partition) but still reaches its followers and clients.
    cluster.etcd_link(leader).hold();
    let survivors: Vec<u32> = (1..=3).filter(|id| *id != leader).collect();
    let others = cluster.client(&survivors).await;
    let (new_leader, new_epoch) = leader_above(&others, "isolated", epoch).await;
    assert_ne!(new_leader, leader);
    // The isolated leader's own deadline passed before etcd expired it: it acknowledges nothing.
    let stale = direct
        .produce_with_acks("isolated", 0, batch(lease.epoch, "stale"), Acks::All)
        .await;
    assert!(
        stale.is_err(),
        "the isolated leader acknowledged: {stale:?}"
    );
    let lease = others
        .acquire_lease("isolated", 0, "second", Duration::from_secs(60))
        .await
        .expect("lease from the new leader");
    // On a loaded machine the new leader may itself be replaced meanwhile (see
    // `produce_values_following_failovers`), which is not what this test is about.
    let (during, _) = produce_values_following_failovers(
        &others,
        "isolated",
        ("second", lease.epoch),
        "during",
        10,
    )
    .await;
    acknowledged.extend(during);

    // Healed: the old leader registers again and rejoins as a follower of the new epoch.
    cluster.etcd_link(leader).open();
    wait_isr(&others, "isolated", 3).await;
    let log = read_all(&others, "isolated").await;
    check(&log, &acknowledged, &["stale"]);
    replicas_converge(&cluster, "isolated", log.len()).await;
    let state = tokio::task::block_in_place(|| status(&cluster, "isolated"));
    assert_leader_epoch_at_least(&state, new_epoch);
    tokio::task::block_in_place(|| every_replica_holds(&mut cluster, "isolated", &log));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cut_off_from_its_leader_leaves_the_isr_and_comes_back() {
    let Some(mut cluster) = Cluster::start_with_links("a_follower_cut_off").await else {
        return;
    };
    tokio::task::block_in_place(|| create_replicated(&cluster, "cut", &[]));
    let client = cluster.client(&[1, 2, 3]).await;
    let (leader, epoch) = leader_above(&client, "cut", 1).await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let load = Load::start(client.clone(), "cut", "c");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Only the follower's link to its leader fails (silently); it still reaches etcd, so it
    // stays registered: only its lag takes it out of the ISR.
    cluster.peer_link(follower, leader).hold();
    wait_isr(&client, "cut", 2).await;
    let during = load.acknowledged.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        load.acknowledged.lock().unwrap().len() > during,
        "acks=all writes continue with two in sync (min_insync 2)"
    );
    cluster.peer_link(follower, leader).open();
    wait_isr(&client, "cut", 3).await;
    let acknowledged = load.finish().await;
    let (still, same_epoch) = leader_above(&client, "cut", 1).await;
    assert_eq!(
        (still, same_epoch),
        (leader, epoch),
        "no failover was needed"
    );
    let log = read_all(&client, "cut").await;
    check(&log, &acknowledged, &[]);
    replicas_converge(&cluster, "cut", log.len()).await;
    tokio::task::block_in_place(|| every_replica_holds(&mut cluster, "cut", &log));
}
