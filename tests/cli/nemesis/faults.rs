//! The nemesis's faults: one at a time, each chosen, aimed and timed by the seeded generator,
//! applied to the real processes and links, held for a while, then healed. Every fault goes into
//! the [`FaultLog`] with its start and end, for the counts and for naming what overlapped the
//! longest unavailability window.
//!
//! Clock jumps go through the hidden `serve --test-clock-skew-file`: the broker's lease clock
//! (`src/clock.rs`'s `SkewedClock`, also its cluster driver's) jumps forward and stays there; a
//! monotonic clock cannot be set back, so the fault does not heal, it is survived.

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

use super::cluster::{client_of, NemesisCluster, NODES};
use super::workload::{PARTITIONS, TOPIC};

/// The brokers' registration TTL (`BrokerProcess`'s `--registration-ttl-ms`): a pause "past
/// the registration" lasts longer than this.
pub const REGISTRATION_TTL: Duration = Duration::from_millis(2000);

/// How long after a fault healed a window without acknowledgements is still laid at its door.
pub const RECENTLY_HEALED: Duration = Duration::from_secs(3);

/// The kinds of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// `kill -9` of a broker, restarted on the same data after a while.
    Kill9,
    /// SIGSTOP of a broker, SIGCONT after a while (usually past the registration TTL).
    Pause,
    /// Every link between a broker and its peers held (bytes flow again when healed).
    PeerPartition,
    /// The same, then every connection on those links reset as it heals.
    PeerPartitionReset,
    /// A broker's link to etcd held (sometimes reset as it heals).
    EtcdCut,
    /// etcd killed and started again on the same data.
    EtcdRestart,
    /// A broker's disk filled to the last page, freed after a while.
    DiskFull,
    /// A broker's lease clock jumped forward (past a lease's TTL, sometimes past the
    /// registration TTL): its leases and its leadership deadline expire early.
    ClockJump,
}

impl FaultKind {
    pub const ALL: [FaultKind; 8] = [
        FaultKind::Kill9,
        FaultKind::Pause,
        FaultKind::PeerPartition,
        FaultKind::PeerPartitionReset,
        FaultKind::EtcdCut,
        FaultKind::EtcdRestart,
        FaultKind::DiskFull,
        FaultKind::ClockJump,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill9 => "kill9",
            FaultKind::Pause => "pause",
            FaultKind::PeerPartition => "peer-partition",
            FaultKind::PeerPartitionReset => "peer-partition-reset",
            FaultKind::EtcdCut => "etcd-cut",
            FaultKind::EtcdRestart => "etcd-restart",
            FaultKind::DiskFull => "disk-full",
            FaultKind::ClockJump => "clock-jump",
        }
    }

    /// The kinds named in a comma-separated list (`FENCELOG_NEMESIS_FAULTS`).
    pub fn parse_list(list: &str) -> Vec<FaultKind> {
        list.split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(|name| {
                *FaultKind::ALL
                    .iter()
                    .find(|kind| kind.name() == name)
                    .unwrap_or_else(|| {
                        panic!(
                            "unknown fault {name:?}: one of {:?}",
                            FaultKind::ALL.map(FaultKind::name)
                        )
                    })
            })
            .collect()
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One fault as it happened.
#[derive(Debug, Clone)]
pub struct Fault {
    pub kind: FaultKind,
    /// The broker it hit (none for an etcd restart).
    pub broker: Option<u32>,
    /// Whether that broker led a partition when it was chosen.
    pub leader: bool,
    pub start: Duration,
    pub end: Duration,
}

/// Every fault of a run, in order.
#[derive(Debug, Default)]
pub struct FaultLog {
    pub faults: Vec<Fault>,
}

impl FaultLog {
    /// How many of each kind.
    pub fn counts(&self) -> Vec<(FaultKind, usize)> {
        FaultKind::ALL
            .iter()
            .map(|kind| {
                (
                    *kind,
                    self.faults.iter().filter(|f| f.kind == *kind).count(),
                )
            })
            .collect()
    }

    /// The faults active at some time within `[from, to]`, or healed less than
    /// [`RECENTLY_HEALED`] before it (a window often begins while the cluster recovers from one).
    pub fn overlapping(&self, from: Duration, to: Duration) -> Vec<&Fault> {
        self.faults
            .iter()
            .filter(|f| f.start <= to && f.end + RECENTLY_HEALED >= from)
            .collect()
    }
}

/// The fault loop's knobs.
pub struct Schedule {
    pub kinds: Vec<FaultKind>,
    /// No new fault starts after this (since the start of the run).
    pub until: Duration,
}

/// Injects faults until `schedule.until`, one at a time; `now` is the run's clock.
pub async fn run(
    cluster: &mut NemesisCluster,
    schedule: &Schedule,
    rng: &mut StdRng,
    now: impl Fn() -> Duration,
    log: &mut FaultLog,
) {
    let mut kinds = schedule.kinds.clone();
    if cluster.disks.is_empty() {
        kinds.retain(|kind| *kind != FaultKind::DiskFull);
    }
    let metadata = client_of(cluster.addrs()).await;
    while now() < schedule.until && !kinds.is_empty() {
        let kind = *kinds.choose(rng).expect("a kind");
        // Most faults aim at a partition's leader, where they hurt most.
        let partition = rng.gen_range(0..PARTITIONS);
        let leader = leader_of(&metadata, partition).await;
        let aim_at_leader = leader.is_some() && rng.gen_bool(0.7);
        let broker = if aim_at_leader {
            leader.expect("a leader")
        } else {
            *NODES.choose(rng).expect("a node")
        };
        let hold = match kind {
            FaultKind::Kill9 => rng.gen_range(500..5_000),
            // Mostly past the registration TTL (the leader must be replaced), sometimes under
            // it (it must carry on as if nothing happened).
            FaultKind::Pause if rng.gen_bool(0.8) => {
                REGISTRATION_TTL.as_millis() as u64 + rng.gen_range(300..3_000)
            }
            FaultKind::Pause => rng.gen_range(300..1_500),
            FaultKind::PeerPartition | FaultKind::PeerPartitionReset => rng.gen_range(1_000..6_000),
            FaultKind::EtcdCut => rng.gen_range(1_000..6_000),
            FaultKind::EtcdRestart => rng.gen_range(200..4_000),
            FaultKind::DiskFull => rng.gen_range(1_000..5_000),
            // How far the clock jumps; the fault is then watched for as long.
            FaultKind::ClockJump => rng.gen_range(500..8_000),
        };
        let hold = Duration::from_millis(hold);
        let reset_on_heal = rng.gen_bool(0.5);
        let start = now();
        inject(cluster, kind, broker, hold, reset_on_heal).await;
        log.faults.push(Fault {
            kind,
            broker: (kind != FaultKind::EtcdRestart).then_some(broker),
            leader: aim_at_leader && kind != FaultKind::EtcdRestart,
            start,
            end: now(),
        });
        let gap = Duration::from_millis(rng.gen_range(300..3_000));
        tokio::time::sleep(gap).await;
    }
}

/// Applies one fault, holds it for `hold`, heals it.
async fn inject(
    cluster: &mut NemesisCluster,
    kind: FaultKind,
    broker: u32,
    hold: Duration,
    reset_on_heal: bool,
) {
    match kind {
        FaultKind::Kill9 => {
            cluster.broker(broker).kill9();
            tokio::time::sleep(hold).await;
            tokio::task::block_in_place(|| cluster.broker(broker).spawn());
        }
        FaultKind::Pause => {
            tokio::task::block_in_place(|| cluster.broker(broker).pause());
            tokio::time::sleep(hold).await;
            cluster.broker(broker).signal("-CONT");
        }
        FaultKind::PeerPartition | FaultKind::PeerPartitionReset => {
            for link in cluster.peer_links_of(broker) {
                link.hold();
            }
            tokio::time::sleep(hold).await;
            for link in cluster.peer_links_of(broker) {
                if kind == FaultKind::PeerPartitionReset {
                    link.reset_all();
                }
                link.open();
            }
        }
        FaultKind::EtcdCut => {
            let link = &cluster.etcd_links[&broker];
            link.hold();
            tokio::time::sleep(hold).await;
            if reset_on_heal {
                link.reset_all();
            }
            link.open();
        }
        FaultKind::EtcdRestart => {
            tokio::task::block_in_place(|| cluster.etcd.kill());
            tokio::time::sleep(hold).await;
            tokio::task::block_in_place(|| cluster.etcd.start_again()).expect("restart etcd");
        }
        FaultKind::DiskFull => {
            let disk = &cluster.disks[&broker];
            tokio::task::block_in_place(|| disk.fill()).expect("fill the disk");
            tokio::time::sleep(hold).await;
            tokio::task::block_in_place(|| disk.unfill()).expect("free the disk");
        }
        FaultKind::ClockJump => {
            let (path, skew_ms) = cluster.clocks.get_mut(&broker).expect("a clock");
            *skew_ms += hold.as_millis() as u64;
            std::fs::write(&*path, skew_ms.to_string()).expect("jump the clock");
            tokio::time::sleep(hold).await;
        }
    }
}

/// Undoes whatever may still be broken (each fault heals itself; this is the safety net before
/// the final convergence): links open, brokers running and resumed, disks free.
pub async fn heal_all(cluster: &mut NemesisCluster) {
    for link in cluster
        .peer_links
        .values()
        .chain(cluster.etcd_links.values())
    {
        link.open();
    }
    for disk in cluster.disks.values() {
        let _ = disk.unfill();
    }
    for broker in &mut cluster.brokers {
        if broker.child.is_some() {
            broker.signal("-CONT");
        } else {
            tokio::task::block_in_place(|| broker.spawn());
        }
    }
}

/// The leader of `partition` as some broker sees it now, if any answers.
async fn leader_of(client: &fencelog::client::Client, partition: u32) -> Option<u32> {
    let info = tokio::time::timeout(Duration::from_secs(2), client.cluster_metadata(&[TOPIC]))
        .await
        .ok()?
        .ok()?;
    info.partitions
        .iter()
        .find(|p| p.partition == partition)
        .and_then(|p| p.leader)
}
