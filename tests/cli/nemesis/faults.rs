//! The nemesis's faults: one at a time, each chosen, aimed and timed by the seeded generator,
//! applied to the real processes and links, held for a while, then healed. Every fault goes into
//! the [`FaultLog`] with its start and end, for the counts and for naming what overlapped the
//! longest unavailability window.
//!
//! Power cuts (`power-cut`, `power-cut-minority`, `power-cut-all`) kill the brokers with
//! `kill -9`, wait until they are reaped (their dirty mmap pages reach LazyFS when their mappings
//! close), drop every write LazyFS holds that was not fsync'd, and restart them on what is left.
//! Before each, every partition must have its full ISR again (so that at most one broker at a
//! time is missing what it lost: the promise of a `flush never` topic); after each, a stale
//! writer (the epoch below the highest granted) must still be refused on every partition.
//!
//! Clock jumps go through the hidden `serve --test-clock-skew-file`: the broker's lease clock
//! (`src/clock.rs`'s `SkewedClock`, also its cluster driver's) jumps forward and stays there; a
//! monotonic clock cannot be set back, so the fault does not heal, it is survived.

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

use fencelog::client::Client;
use fencelog::protocol::Acks;

use super::cluster::{client_of, NemesisCluster, CONVERGE, NODES};
use super::workload::{all_partitions, classify, Answer, Attempt, PartitionKey, Shared};
use crate::support::batch;

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
    /// A broker loses power: `kill -9`, its unsynced writes dropped, restarted on what is left.
    PowerCut,
    /// A minority of the brokers (`⌊(N−1)/2⌋`, one of three) chosen at random lose power at the
    /// same instant, then restart together.
    PowerCutMinority,
    /// Every broker loses power at the same instant, then all restart.
    PowerCutAll,
}

impl FaultKind {
    pub const ALL: [FaultKind; 11] = [
        FaultKind::Kill9,
        FaultKind::Pause,
        FaultKind::PeerPartition,
        FaultKind::PeerPartitionReset,
        FaultKind::EtcdCut,
        FaultKind::EtcdRestart,
        FaultKind::DiskFull,
        FaultKind::ClockJump,
        FaultKind::PowerCut,
        FaultKind::PowerCutMinority,
        FaultKind::PowerCutAll,
    ];

    /// The kinds that cut a broker's power (they need LazyFS).
    pub const POWER_CUTS: [FaultKind; 3] = [
        FaultKind::PowerCut,
        FaultKind::PowerCutMinority,
        FaultKind::PowerCutAll,
    ];

    pub fn is_power_cut(self) -> bool {
        FaultKind::POWER_CUTS.contains(&self)
    }

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
            FaultKind::PowerCut => "power-cut",
            FaultKind::PowerCutMinority => "power-cut-minority",
            FaultKind::PowerCutAll => "power-cut-all",
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
    /// The broker it hit (none for an etcd restart or a power cut of every broker).
    pub broker: Option<u32>,
    /// The brokers whose power was cut, and when their unsynced writes were dropped (after
    /// they were killed and reaped, before they restarted).
    pub cut: Option<(Vec<u32>, Duration)>,
    /// Whether that broker led a partition when it was chosen.
    pub leader: bool,
    pub start: Duration,
    pub end: Duration,
}

impl Fault {
    /// What it hit, for a report: a broker, `etcd`, or the brokers cut.
    pub fn target(&self) -> String {
        match (&self.cut, self.broker) {
            (Some((brokers, _)), _) if brokers.len() > 1 => brokers
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join("+"),
            (_, Some(broker)) => broker.to_string(),
            (_, None) => "etcd".to_owned(),
        }
    }
}

/// What a stale writer (the epoch below the highest granted) was answered after a power cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleAnswer {
    /// Refused as fenced: the promise.
    Refused,
    /// Written: a violation.
    Accepted,
    /// No definite answer within [`CONVERGE`] (the partition had no serving leader).
    NoAnswer,
}

/// One stale writer's produce after a power cut.
#[derive(Debug, Clone)]
pub struct StaleProbe {
    pub partition: PartitionKey,
    pub epoch: u64,
    pub answer: StaleAnswer,
    /// The last error (or acknowledgement) it got, for a report.
    pub detail: String,
}

/// Every fault of a run, in order, and what the stale writers were answered after power cuts.
#[derive(Debug, Default)]
pub struct FaultLog {
    pub faults: Vec<Fault>,
    pub stale_probes: Vec<StaleProbe>,
    /// Power cuts not made because the cluster had not converged (full ISR) in time.
    pub skipped_cuts: usize,
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

    /// When the power cuts of every broker dropped the unsynced writes, in order.
    pub fn cuts_of_all(&self) -> Vec<Duration> {
        self.faults
            .iter()
            .filter(|f| f.kind == FaultKind::PowerCutAll)
            .filter_map(|f| f.cut.as_ref().map(|(_, at)| *at))
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
    /// The kinds to choose among. Each power-cut kind among them is also injected once first
    /// (in seeded order), so that even a short run has one of each.
    pub kinds: Vec<FaultKind>,
    /// No new fault starts after this (since the start of the run).
    pub until: Duration,
}

/// Injects faults until `schedule.until`, one at a time; `now` is the run's clock.
pub async fn run(
    cluster: &mut NemesisCluster,
    schedule: &Schedule,
    rng: &mut StdRng,
    shared: &Shared,
    log: &mut FaultLog,
) {
    let now = || shared.now();
    let mut kinds = schedule.kinds.clone();
    if cluster.no_disks.is_some() {
        kinds.retain(|kind| *kind != FaultKind::DiskFull);
    }
    if cluster.power.is_empty() {
        kinds.retain(|kind| !kind.is_power_cut());
    }
    let mut first: Vec<FaultKind> = kinds.iter().copied().filter(|k| k.is_power_cut()).collect();
    first.shuffle(rng);
    first.reverse();
    let metadata = client_of(cluster.addrs()).await;
    let partitions = all_partitions();
    while now() < schedule.until && !kinds.is_empty() {
        let kind = match first.pop() {
            Some(kind) => kind,
            None => *kinds.choose(rng).expect("a kind"),
        };
        if kind.is_power_cut() && !full_isr(&metadata).await {
            // The promise of a `flush never` topic holds while at most one broker at a time
            // lacks what it lost: wait until every cut broker caught up before the next cut.
            log.skipped_cuts += 1;
            continue;
        }
        // Most faults aim at a partition's leader, where they hurt most.
        let partition = *partitions.choose(rng).expect("a partition");
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
            // How long the power stays off.
            FaultKind::PowerCut | FaultKind::PowerCutMinority | FaultKind::PowerCutAll => {
                rng.gen_range(200..3_000)
            }
        };
        let hold = Duration::from_millis(hold);
        let reset_on_heal = rng.gen_bool(0.5);
        let minority = {
            let mut nodes = NODES.to_vec();
            nodes.shuffle(rng);
            nodes.truncate((NODES.len() - 1) / 2);
            nodes
        };
        let start = now();
        let cut = match kind {
            FaultKind::PowerCut => Some(power_cut(cluster, &[broker], hold, shared).await),
            FaultKind::PowerCutMinority => Some(power_cut(cluster, &minority, hold, shared).await),
            FaultKind::PowerCutAll => Some(power_cut(cluster, &NODES, hold, shared).await),
            _ => {
                inject(cluster, kind, broker, hold, reset_on_heal).await;
                None
            }
        };
        let aimed = !matches!(
            kind,
            FaultKind::EtcdRestart | FaultKind::PowerCutMinority | FaultKind::PowerCutAll
        );
        log.faults.push(Fault {
            kind,
            broker: match kind {
                FaultKind::PowerCutMinority => minority.first().copied(),
                _ => aimed.then_some(broker),
            },
            cut,
            leader: aim_at_leader && aimed,
            start,
            end: now(),
        });
        if kind.is_power_cut() {
            for partition in &partitions {
                if let Some(probe) = stale_writer(&metadata, *partition, shared).await {
                    log.stale_probes.push(probe);
                }
            }
        }
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
            tokio::task::block_in_place(|| kill9(cluster, broker));
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
        FaultKind::PowerCut | FaultKind::PowerCutMinority | FaultKind::PowerCutAll => {
            unreachable!("power cuts go through power_cut")
        }
    }
}

/// Cuts the power of `brokers` at the same instant: kills every one (`kill -9`, reaped, so that
/// its dirty mmap pages have reached LazyFS), then drops what LazyFS holds unsynced for each,
/// keeps the power off for `hold`, and restarts them on what is left. Returns the brokers and
/// when the unsynced writes were dropped.
async fn power_cut(
    cluster: &mut NemesisCluster,
    brokers: &[u32],
    hold: Duration,
    shared: &Shared,
) -> (Vec<u32>, Duration) {
    for id in brokers {
        tokio::task::block_in_place(|| kill9(cluster, *id));
    }
    for id in brokers {
        let lazyfs = &cluster.power[id];
        tokio::task::block_in_place(|| lazyfs.power_cut()).expect("cut the power");
    }
    let at = shared.now();
    tokio::time::sleep(hold).await;
    for id in brokers {
        tokio::task::block_in_place(|| cluster.broker(*id).spawn());
    }
    (brokers.to_vec(), at)
}

/// How long a killed broker may take to exit before its LazyFS mount counts as wedged.
const EXIT_AFTER_KILL: Duration = Duration::from_secs(10);

/// `kill -9` and reap broker `id`. A broker on a LazyFS mount that does not exit within
/// [`EXIT_AFTER_KILL`] waits on a wedged mount (`LazyFs::recover_wedged`): the mount is recovered,
/// which cuts that broker's power (its unsynced writes are lost), and the broker is reaped then.
pub fn kill9(cluster: &mut NemesisCluster, id: u32) {
    if !cluster.power.contains_key(&id) {
        cluster.broker(id).kill9();
        return;
    }
    if cluster.broker(id).kill9_within(EXIT_AFTER_KILL) {
        return;
    }
    eprintln!(
        "nemesis: broker {id} did not exit {EXIT_AFTER_KILL:?} after kill -9: its LazyFS mount is wedged; recovering it (a power cut of broker {id})"
    );
    let lazyfs = cluster.power.get_mut(&id).expect("a LazyFS mount");
    lazyfs
        .recover_wedged()
        .unwrap_or_else(|why| panic!("recover broker {id}'s wedged LazyFS mount: {why}"));
    cluster.broker(id).kill9();
    cluster.wedged_mounts += 1;
}

/// Whether every partition has a leader and its full ISR, waiting up to [`CONVERGE`].
async fn full_isr(client: &Client) -> bool {
    let deadline = std::time::Instant::now() + CONVERGE;
    loop {
        let mut all = true;
        for (topic, partition) in all_partitions() {
            let state =
                tokio::time::timeout(Duration::from_secs(3), client.cluster_metadata(&[topic]))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .and_then(|info| {
                        info.partitions
                            .into_iter()
                            .find(|p| p.partition == partition)
                    });
            if !state.is_some_and(|p| p.leader.is_some() && p.isr.len() == NODES.len()) {
                all = false;
                break;
            }
        }
        if all {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A writer one epoch below the highest granted on `partition` produces to it until it gets a
/// definite answer (or [`CONVERGE`] passes): after a power cut it must still be refused as
/// fenced. Every attempt goes into the history (a new value each), so the checker also holds
/// its answers against the log. `None` when no lease was ever granted there.
async fn stale_writer(
    client: &Client,
    partition: PartitionKey,
    shared: &Shared,
) -> Option<StaleProbe> {
    let (topic, number) = partition;
    let epoch = shared.highest_grant(partition)?.checked_sub(1)?;
    let deadline = std::time::Instant::now() + CONVERGE;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let value = format!("stale-{topic}-{number}-{epoch}-{attempt}");
        let sent = shared.now();
        let result = client
            .produce_with_acks(topic, number, batch(epoch, &value), Acks::All)
            .await;
        let (answer, probe) = match &result {
            Ok(ack) => (
                Answer::Acked {
                    offset: ack.base_offset,
                },
                Some((
                    StaleAnswer::Accepted,
                    format!("acknowledged at {}", ack.base_offset),
                )),
            ),
            Err(error) if error.is_fencing() => (
                classify(error),
                Some((StaleAnswer::Refused, error.to_string())),
            ),
            Err(error) => (classify(error), None),
        };
        let detail = format!("{answer:?}");
        shared.record_attempt(Attempt {
            topic,
            partition: number,
            value,
            epoch,
            sent,
            returned: shared.now(),
            answer,
        });
        if let Some((answer, detail)) = probe {
            return Some(StaleProbe {
                partition,
                epoch,
                answer,
                detail,
            });
        }
        if std::time::Instant::now() > deadline {
            return Some(StaleProbe {
                partition,
                epoch,
                answer: StaleAnswer::NoAnswer,
                detail,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
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
async fn leader_of(client: &Client, (topic, partition): PartitionKey) -> Option<u32> {
    let info = tokio::time::timeout(Duration::from_secs(2), client.cluster_metadata(&[topic]))
        .await
        .ok()?
        .ok()?;
    info.partitions
        .iter()
        .find(|p| p.partition == partition)
        .and_then(|p| p.leader)
}
