//! The nemesis's cluster: one etcd and three `fencelog serve` processes, with a [`LinkProxy`] on
//! every broker-to-etcd link and on every ordered broker-to-broker link (advertised to the peers
//! with `--peer-addr`), and each broker's data directory on a tmpfs of its own so that its disk
//! can be filled, and each broker's lease clock follows a file (`--test-clock-skew-file`) so
//! that it can be jumped forward. Clients reach the brokers directly: the faults are between the servers.
//!
//! A run with power cuts puts each broker's data directory on LazyFS instead, whose backing
//! directory is on the broker's tmpfs (so a run's files stay in memory and bounded). Such a run
//! has no `disk-full` faults: LazyFS (0.x) keeps writes in its own cache until an fsync and then
//! ignores the backing's errors (`sync_pages` drops `pwritev`'s result, marks the blocks clean
//! and answers success), so a full backing would not fail a single call of the broker; it would
//! turn acknowledged, "synced" records into records lost at the next power cut, a fault of the
//! rig and not of the broker. A full disk is tested in runs without power cuts.
//!
//! Kept apart from the faults and the workload so that what the cluster *is* reads in one place;
//! the faults only call the handles here.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fencelog::client::Client;
use fencelog::testing_link::LinkProxy;
use tempfile::TempDir;

use crate::cluster_processes::BrokerProcess;
use crate::support::etcd::EtcdServer;
use crate::support::lazyfs::LazyFs;
use crate::support::tmpfs::Tmpfs;

/// Size of each broker's tmpfs: room for a long run's log (a few hundred thousand small
/// records) many times over, small enough that filling it takes a moment.
pub const DISK_BYTES: u64 = 192 << 20;

/// How long the cluster may take to register, elect or converge before the run reports it.
pub const CONVERGE: Duration = Duration::from_secs(90);

/// The brokers' node ids.
pub const NODES: [u32; 3] = [1, 2, 3];

/// etcd, the three brokers and every link between them.
pub struct NemesisCluster {
    /// Declared first: dropped (killed) before the disks under them are unmounted.
    pub brokers: Vec<BrokerProcess>,
    /// Broker `id`'s link to etcd.
    pub etcd_links: BTreeMap<u32, LinkProxy>,
    /// The link `from` reaches `to` through, by `(from, to)`.
    pub peer_links: BTreeMap<(u32, u32), LinkProxy>,
    pub etcd: EtcdServer,
    /// Each broker's LazyFS mount (its data directory), by node id, in a run with power cuts;
    /// dropped (unmounted) after the brokers and before the tmpfs under them.
    pub power: BTreeMap<u32, LazyFs>,
    /// LazyFS mounts found wedged and recovered (`faults::kill9`), each a power cut of its broker.
    pub wedged_mounts: usize,
    /// Each broker's tmpfs, by node id; empty where mounting is not permitted.
    pub disks: BTreeMap<u32, Tmpfs>,
    /// Why there are no disk-full faults, when there are none.
    pub no_disks: Option<String>,
    /// Why there are no power cuts in a run that asked for them.
    pub no_power: Option<String>,
    /// Broker `id`'s lease clock: the file its `--test-clock-skew-file` follows and the skew
    /// written there so far (milliseconds; it only grows).
    pub clocks: BTreeMap<u32, (std::path::PathBuf, u64)>,
    _root: TempDir,
}

impl NemesisCluster {
    /// Starts etcd, the links and the brokers (on LazyFS when `power_cuts`), and waits until all
    /// three are registered. `None` (with a note) where etcd is not installed and `CI` is not
    /// `true`; a panic where LazyFS cannot mount and `CI` is `true`.
    pub async fn start(test: &str, power_cuts: bool) -> Option<NemesisCluster> {
        let etcd = match EtcdServer::start_or_skip(test) {
            Some(etcd) => etcd,
            None if std::env::var("CI").as_deref() == Ok("true") => {
                panic!("{test}: etcd is required when CI=true")
            }
            None => return None,
        };
        let root = tempfile::tempdir().expect("temp dir");
        let target: SocketAddr = etcd
            .endpoint()
            .trim_start_matches("http://")
            .parse()
            .expect("etcd address");
        let mut brokers = Vec::new();
        let mut etcd_links = BTreeMap::new();
        for id in NODES {
            let link = LinkProxy::start(target).await.expect("link to etcd");
            let endpoint = format!("http://{}", link.addr());
            brokers.push(BrokerProcess::prepare(id, &root, &endpoint));
            etcd_links.insert(id, link);
        }
        let mut peer_links = BTreeMap::new();
        for from in 0..brokers.len() {
            for to in 0..brokers.len() {
                if from == to {
                    continue;
                }
                let target = brokers[to].addr.parse().expect("broker address");
                let link = LinkProxy::start(target).await.expect("broker link");
                let flag = format!("{}={}", brokers[to].id, link.addr());
                brokers[from].extra.extend(["--peer-addr".to_owned(), flag]);
                peer_links.insert((brokers[from].id, brokers[to].id), link);
            }
        }
        let mut clocks = BTreeMap::new();
        for broker in &mut brokers {
            let path = root.path().join(format!("clock-{}", broker.id));
            broker.extra.push("--test-clock-skew-file".to_owned());
            broker.extra.push(path.display().to_string());
            clocks.insert(broker.id, (path, 0));
        }
        let mut disks = BTreeMap::new();
        let mut no_disks = None;
        for broker in &brokers {
            let path = if power_cuts {
                root.path().join(format!("disk-{}", broker.id))
            } else {
                broker.data_dir.clone()
            };
            match Tmpfs::mount(&path, DISK_BYTES) {
                Ok(disk) => {
                    disks.insert(broker.id, disk);
                }
                Err(why) => {
                    no_disks = Some(why);
                    break;
                }
            }
        }
        if no_disks.is_some() {
            // All or none: a partly mounted cluster would fill only some disks.
            disks.clear();
        }
        let mut power = BTreeMap::new();
        let mut no_power = None;
        if power_cuts {
            for broker in &brokers {
                let backing = match disks.get(&broker.id) {
                    Some(disk) => disk.path().join("data"),
                    None => root.path().join(format!("backing-{}", broker.id)),
                };
                match LazyFs::mount(&backing, &broker.data_dir) {
                    Ok(lazyfs) => {
                        power.insert(broker.id, lazyfs);
                    }
                    Err(why) if std::env::var("CI").as_deref() == Ok("true") => {
                        panic!("{test}: LazyFS is required when CI=true: {why}")
                    }
                    Err(why) => {
                        no_power = Some(why);
                        break;
                    }
                }
            }
            if let Some(why) = &no_power {
                // All or none; the tmpfs are not under the data directories then.
                power.clear();
                disks.clear();
                no_disks = Some(format!("no LazyFS ({why})"));
            } else {
                no_disks = Some(
                    "the data directories are on LazyFS, which ignores its backing's write \
                     errors at fsync (see tests/cli/nemesis/cluster.rs)"
                        .to_owned(),
                );
            }
        }
        for broker in &mut brokers {
            tokio::task::block_in_place(|| broker.spawn());
        }
        let cluster = NemesisCluster {
            brokers,
            etcd_links,
            peer_links,
            etcd,
            power,
            wedged_mounts: 0,
            disks,
            no_disks,
            no_power,
            clocks,
            _root: root,
        };
        cluster.wait_registered().await;
        Some(cluster)
    }

    /// Every broker's client address, comma-separated order kept.
    pub fn addrs(&self) -> Vec<String> {
        self.brokers.iter().map(|b| b.addr.clone()).collect()
    }

    /// A client of every broker with timeouts short enough to notice a fault within seconds.
    pub async fn client(&self) -> Client {
        client_of(self.addrs()).await
    }

    /// The broker with node id `id`.
    pub fn broker(&mut self, id: u32) -> &mut BrokerProcess {
        self.brokers
            .iter_mut()
            .find(|b| b.id == id)
            .expect("a broker of the cluster")
    }

    /// Every link touching broker `id` (to and from each peer).
    pub fn peer_links_of(&self, id: u32) -> impl Iterator<Item = &LinkProxy> {
        self.peer_links
            .iter()
            .filter(move |((from, to), _)| *from == id || *to == id)
            .map(|(_, link)| link)
    }

    /// The last lines of every broker's log, for a report.
    pub fn log_tails(&self, lines: usize) -> String {
        self.brokers
            .iter()
            .map(|broker| {
                let log = broker.log();
                let all: Vec<&str> = log.lines().collect();
                let tail = all[all.len().saturating_sub(lines)..].join("\n");
                format!("--- broker {} at {}:\n{tail}\n", broker.id, broker.addr)
            })
            .collect()
    }

    async fn wait_registered(&self) {
        let client = self.client().await;
        let deadline = Instant::now() + CONVERGE;
        loop {
            if let Ok(info) = client.cluster_metadata::<&str>(&[]).await {
                if info.brokers.len() == NODES.len() {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "brokers never registered:\n{}",
                self.log_tails(15)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A client of `addrs` with short timeouts: a request to a frozen or cut-off broker fails (its
/// outcome unknown) within seconds, so the writers keep moving.
pub async fn client_of(addrs: Vec<String>) -> Client {
    let deadline = Instant::now() + CONVERGE;
    loop {
        match Client::builder()
            .addrs(addrs.clone())
            .connect_timeout(Duration::from_secs(1))
            .request_timeout(Duration::from_secs(3))
            .reconnect_timeout(Duration::from_secs(3))
            .connect()
            .await
        {
            Ok(client) => return client,
            Err(error) => {
                assert!(
                    Instant::now() < deadline,
                    "no broker of {addrs:?} answers: {error}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
