//! The simulated cluster: three brokers, each running the broker's own sans-I/O replica node
//! (`fencelog::cluster::replication::node::ReplicaNode`, the code the cluster driver runs) per
//! partition, with simulated I/O in place of the driver's (the network of `net.rs`, the store of
//! `store.rs`, the logs of `log.rs`): this file only carries messages and effects, it decides
//! nothing about replication. Producers
//! sending `acks=all` writes with unique values, a consumer watching every self-believed leader,
//! and faults (pauses past the lease TTL, crashes and restarts, cuts between any pair and to the
//! store). Everything random comes from one seeded RNG; the event queue breaks ties by insertion
//! order, so a seed replays exactly.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use std::collections::VecDeque;

use fencelog::cluster::replica_log::ReplicaLog;
use fencelog::cluster::replication::follower::FollowerAction;
use fencelog::cluster::replication::node::{
    Effect, Effects, ElectionOutcome, FollowerEvent, Input, ProposalPurpose, ReplicaNode,
    ReplicaNodeConfig, StopReason,
};
use fencelog::cluster::replication::{
    CasOutcome, FetchError, FetchResponse, LiveBrokers, ReplicationConfig,
};
use fencelog::cluster::{producer_epoch_base, LeaderEpoch, NodeId, PartitionState, Versioned};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::lineage::{grant, judge, Grants, Judgement, PartitionView};
use super::log::{encode_batches, Record, SimLog};
use super::net::{
    Addr, Event, Fault, Msg, Net, ProduceAnswer, StoreAnswer, StoreOp, Target, Timer,
};
use super::store::Store;

pub const BROKERS: u32 = 3;
pub const LEASE_TTL_MS: u64 = 1_500;
const KEEP_ALIVE_MS: u64 = 400;
const POLL_MS: u64 = 150;
const TICK_MS: u64 = 50;
const FETCH_RETRY_MS: u64 = 250;
const FETCH_IDLE_MS: u64 = 20;
/// The tag of a progress report's fetch: no fetch has it, so its answer is dropped.
const REPORT_TAG: u64 = u64::MAX;
const FETCH_RECORDS_MAX: u64 = 16;
const CAS_TIMEOUT_MS: u64 = 600;
const PRODUCE_TIMEOUT_MS: u64 = 4_000;
const CONSUMER_MS: u64 = 40;
const CHECK_MS: u64 = 500;
const TRACE_LINES_MAX: usize = 20_000;

/// The replication settings of the simulated brokers (milliseconds of simulated time).
pub fn replication_config() -> ReplicationConfig {
    ReplicationConfig {
        replica_lag_max_ms: 1_000,
        acks_all_timeout_ms: 3_000,
        acks_all_waiters_max: 64,
        election_backoff_ms: 300,
        epoch_end_rounds_max: 64,
        pipelined_fetches: false,
    }
}

/// One run's shape.
#[derive(Debug, Clone)]
pub struct Plan {
    pub seed: u64,
    pub partitions: usize,
    pub producers: usize,
    /// Random faults until `heal_ms` (none when false: only the script).
    pub random_faults: bool,
    /// Scripted faults: (at, fault).
    pub script: Vec<(u64, Fault)>,
    /// Topic deletes (`lineage.rs`): (at, partition, ms until the re-creation).
    pub deletes: Vec<(u64, usize, u64)>,
    /// Faults stop and everything heals here.
    pub heal_ms: u64,
    /// Until `heal_ms`, leaders delete their committed records now and then (DeleteRecords up
    /// to the high watermark), so that followers that were away start over.
    pub delete_records: bool,
    /// Producers stop here.
    pub producers_stop_ms: u64,
    /// The run ends here.
    pub end_ms: u64,
    /// Message drops (per mille) and slow messages (per mille) during the fault phase.
    pub drop_per_mille: u32,
    pub slow_per_mille: u32,
    /// The leader's group-commit delay: its own appends are durable (and count toward the high
    /// watermark) this long after they are written; a crash loses what is not.
    pub sync_delay_ms: u64,
    pub trace: bool,
}

impl Plan {
    pub fn random(seed: u64) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x005e_ed0f_fa17);
        let partitions = rng.gen_range(1..=2);
        Plan {
            seed,
            partitions,
            producers: rng.gen_range(1..=3),
            random_faults: true,
            script: Vec::new(),
            deletes: Vec::new(),
            heal_ms: 10_000,
            delete_records: false,
            producers_stop_ms: 17_000,
            end_ms: 20_000,
            drop_per_mille: rng.gen_range(0..30),
            slow_per_mille: rng.gen_range(0..80),
            sync_delay_ms: rng.gen_range(1..=40),
            trace: false,
        }
        .with_random_deletes(&mut rng, partitions)
        .with_random_delete_records(&mut rng)
    }

    /// Half the random seeds delete records; drawn last, so the rest of a seed's plan is what
    /// it was before.
    fn with_random_delete_records(mut self, rng: &mut StdRng) -> Plan {
        self.delete_records = rng.gen_bool(0.5);
        self
    }

    /// A quarter of the random seeds delete a topic (sometimes twice) and re-create it after a
    /// gap (sometimes none), among the other faults; drawn after every other field, so the rest
    /// of a seed's plan is what it was before deletes existed.
    fn with_random_deletes(mut self, rng: &mut StdRng, partitions: usize) -> Plan {
        if rng.gen_ratio(1, 4) {
            let mut at = rng.gen_range(1_500..5_000);
            for _ in 0..rng.gen_range(1..=2) {
                let gap = if rng.gen_bool(0.3) {
                    0
                } else {
                    rng.gen_range(50..1_500)
                };
                self.deletes.push((at, rng.gen_range(0..partitions), gap));
                at += gap + rng.gen_range(500..3_000);
            }
        }
        self
    }

    pub fn scripted(seed: u64, script: Vec<(u64, Fault)>, heal_ms: u64) -> Plan {
        Plan {
            seed,
            partitions: 1,
            producers: 2,
            random_faults: false,
            script,
            deletes: Vec::new(),
            heal_ms,
            delete_records: false,
            producers_stop_ms: heal_ms + 7_000,
            end_ms: heal_ms + 10_000,
            drop_per_mille: 0,
            slow_per_mille: 20,
            sync_delay_ms: 10,
            trace: false,
        }
    }
}

/// One broker's replica of one partition: the node that decides, and the simulated I/O under
/// way for it.
struct Part {
    node: ReplicaNode,
    /// The tag of the follower's latest request: an answer with another tag is late.
    tag: u64,
    /// The compare-and-swap under way (its id, for its timeout) and what it is for.
    cas: Option<(u64, ProposalPurpose)>,
    sync_scheduled: bool,
    /// waiter id -> (client, request, base offset, epoch appended in)
    waiters: BTreeMap<u64, (usize, u64, u64, LeaderEpoch)>,
    /// The earliest wake-up scheduled for the node.
    wake_scheduled: Option<u64>,
    /// The batches of the fetch answer the follower appends next.
    fetched: Option<Vec<u8>>,
    /// The filler of the start-over the last fetch answer may lead to (see `log.rs`).
    deleted: Vec<Record>,
    /// The follower's last append carried no records: its next fetch waits `FETCH_IDLE_MS`.
    idle: bool,
}

impl Part {
    /// The replica opened again in place of `old` (its local copy deleted): a fresh node whose
    /// request tags continue past the old one's, so no answer to the old replica is taken.
    fn reopened(old: &Part, node: NodeId, incarnation: u64, config: &ReplicationConfig) -> Part {
        Part {
            tag: old.tag + 1,
            ..Part::new(node, incarnation, config)
        }
    }

    fn new(node: NodeId, incarnation: u64, config: &ReplicationConfig) -> Part {
        Part {
            node: ReplicaNode::new(ReplicaNodeConfig::new(node, incarnation, config.clone())),
            tag: 0,
            cas: None,
            sync_scheduled: false,
            waiters: BTreeMap::new(),
            wake_scheduled: None,
            fetched: None,
            deleted: Vec::new(),
            idle: false,
        }
    }
}

struct Broker {
    up: bool,
    generation: u64,
    incarnation: u64,
    paused_until: u64,
    lease: Option<u64>,
    valid_until: u64,
    live: LiveBrokers,
    read_sent: Option<u64>,
    /// The store revision of the newest read applied (a later answer of an older read is
    /// dropped).
    read_revision: i64,
    parts: Vec<Part>,
    /// The lineage of each partition's local copy (`lineage.rs`), `None` when it has none (its
    /// topic deleted): the replica takes no input and serves nothing then. Kept over crashes,
    /// as the files are.
    local: Vec<Option<u32>>,
    /// How often each partition's replica was opened (a wipe opens it again).
    opened: Vec<u64>,
}

/// What one producer was told, per value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pending,
    Acked {
        offset: u64,
        at_ms: u64,
        /// The lineage of the leader's copy that acknowledged it.
        lineage: u32,
    },
    Refused,
    Unknown,
}

struct Producer {
    target: Option<NodeId>,
    outstanding: Option<(u64, usize, Vec<u64>, u64)>,
    sequence: u64,
}

/// Everything a run observed, for the checker.
pub struct Observed {
    /// value -> (producer, partition, outcome)
    pub values: BTreeMap<u64, (usize, usize, Outcome)>,
    /// Each producer's values in send order.
    pub sent: Vec<Vec<u64>>,
    /// (partition, lineage, offset, value) a consumer read below a high watermark.
    pub consumer_reads: Vec<(usize, u32, u64, u64)>,
    /// Producer epochs the leaders granted, by partition and lineage.
    pub grants: Grants,
    pub refusals: BTreeMap<String, u64>,
    pub violations: Vec<String>,
}

pub struct World {
    pub plan: Plan,
    pub now: u64,
    rng: StdRng,
    pub net: Net,
    pub store: Store,
    brokers: Vec<Broker>,
    /// logs[node][partition]
    pub logs: Vec<Vec<SimLog>>,
    producers: Vec<Producer>,
    next_request: u64,
    next_id: u64,
    pub observed: Observed,
    /// The highest high watermark a consumer saw, by partition and lineage.
    consumer_high: BTreeMap<(usize, u32), u64>,
    /// The (broker, leader epoch) pairs that loaded the offsets partition (`super::offsets`).
    offsets_loaded: std::collections::BTreeSet<(NodeId, LeaderEpoch)>,
    /// What read_committed readers saw of the transactional partition, by lineage
    /// (`super::transactions`).
    transactions_seen: BTreeMap<u32, super::transactions::Seen>,
    config: ReplicationConfig,
    pub trace: Vec<String>,
    pub events: u64,
    pub truncations_below_high_watermark: u64,
    pub acks_by_time: Vec<(u64, usize)>,
    /// What happened, counted (printed over many seeds to show what the runs exercise).
    pub stats: BTreeMap<&'static str, u64>,
    healed: bool,
}

impl World {
    pub fn new(plan: Plan) -> World {
        let mut rng = StdRng::seed_from_u64(plan.seed);
        let replicas: Vec<NodeId> = (0..BROKERS).collect();
        let partitions = (0..plan.partitions)
            .map(|p| {
                let mut order = replicas.clone();
                order.rotate_left(p % replicas.len());
                PartitionState {
                    replicas: order.clone(),
                    leader: Some(order[0]),
                    leader_epoch: 0,
                    isr: order,
                    min_insync: 2,
                }
            })
            .collect();
        // Half the seeds run with pipelined follower fetches, half without.
        let config = ReplicationConfig {
            pipelined_fetches: plan.seed % 2 == 1,
            ..replication_config()
        };
        let brokers = (0..BROKERS)
            .map(|id| {
                let incarnation = rng.gen();
                Broker {
                    up: true,
                    generation: 0,
                    incarnation,
                    paused_until: 0,
                    lease: None,
                    valid_until: 0,
                    live: LiveBrokers::new(),
                    read_sent: None,
                    read_revision: 0,
                    parts: (0..plan.partitions)
                        .map(|_| Part::new(id, incarnation, &config))
                        .collect(),
                    local: (0..plan.partitions as u32).map(Some).collect(),
                    opened: vec![0; plan.partitions],
                }
            })
            .collect();
        let logs = (0..BROKERS)
            .map(|_| (0..plan.partitions).map(|_| SimLog::new()).collect())
            .collect();
        let mut world = World {
            now: 0,
            rng,
            net: Net::new(),
            store: Store::new(partitions),
            brokers,
            logs,
            producers: (0..plan.producers)
                .map(|_| Producer {
                    target: None,
                    outstanding: None,
                    sequence: 0,
                })
                .collect(),
            next_request: 0,
            next_id: 0,
            observed: Observed {
                values: BTreeMap::new(),
                sent: vec![Vec::new(); plan.producers],
                consumer_reads: Vec::new(),
                grants: Grants::new(),
                refusals: BTreeMap::new(),
                violations: Vec::new(),
            },
            consumer_high: BTreeMap::new(),
            offsets_loaded: Default::default(),
            transactions_seen: BTreeMap::new(),
            config,
            trace: Vec::new(),
            events: 0,
            truncations_below_high_watermark: 0,
            acks_by_time: Vec::new(),
            stats: BTreeMap::new(),
            healed: false,
            plan,
        };
        world.net.drop_per_mille = world.plan.drop_per_mille;
        world.net.slow_per_mille = world.plan.slow_per_mille;
        for id in 0..BROKERS {
            world.start_broker(id);
        }
        for client in 0..world.plan.producers {
            world.net.schedule(100, Event::ClientTick(client));
        }
        world.net.schedule(CONSUMER_MS, Event::ConsumerTick);
        world.net.schedule(CHECK_MS, Event::CheckTick);
        for (at, fault) in world.plan.script.clone() {
            world.net.schedule(at, Event::Fault(fault));
        }
        for (at, partition, recreate_after_ms) in world.plan.deletes.clone() {
            let fault = Fault::DeleteTopic {
                partition,
                recreate_after_ms,
            };
            world.net.schedule(at, Event::Fault(fault));
        }
        if world.plan.random_faults {
            let first = world.rng.gen_range(300..1_500);
            world
                .net
                .schedule(first, Event::Fault(Fault::Resume { node: u32::MAX }));
        }
        let heal = world.plan.heal_ms;
        world.net.schedule(heal, Event::Fault(Fault::HealAll));
        world
    }

    fn trace_line(&mut self, line: impl FnOnce() -> String) {
        if self.plan.trace && self.trace.len() < TRACE_LINES_MAX {
            let now = self.now;
            self.trace.push(format!("{now:>6} {}", line()));
        }
    }

    fn count(&mut self, what: &'static str, by: u64) {
        *self.stats.entry(what).or_default() += by;
    }

    fn violation(&mut self, what: String) {
        let now = self.now;
        self.trace_line(|| format!("VIOLATION {what}"));
        self.observed
            .violations
            .push(format!("at {now} ms: {what}"));
    }

    /// Runs to the end of the plan.
    pub fn run(&mut self) {
        while let Some((at, event)) = self.net.next() {
            if at > self.plan.end_ms {
                break;
            }
            self.now = at;
            self.events += 1;
            self.handle(event);
        }
        self.now = self.plan.end_ms;
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver { to, from, msg } => {
                if self.net.is_cut(from, to) {
                    self.net.dropped += 1;
                    return;
                }
                match to {
                    Addr::Broker(node) => {
                        let broker = &self.brokers[node as usize];
                        if !broker.up {
                            return;
                        }
                        if broker.paused_until > self.now {
                            let until = broker.paused_until;
                            self.net.schedule(until, Event::Deliver { to, from, msg });
                            return;
                        }
                        self.net.delivered += 1;
                        self.broker_message(node, msg);
                    }
                    Addr::Store => self.store_message(msg),
                    Addr::Client(client) => self.client_message(client, msg),
                }
            }
            Event::Timer {
                broker,
                generation,
                timer,
            } => {
                let state = &self.brokers[broker as usize];
                if !state.up || state.generation != generation {
                    return;
                }
                if state.paused_until > self.now {
                    let until = state.paused_until;
                    self.net.schedule(
                        until,
                        Event::Timer {
                            broker,
                            generation,
                            timer,
                        },
                    );
                    return;
                }
                self.broker_timer(broker, timer);
            }
            Event::Fault(fault) => self.fault(fault),
            Event::ClientTick(client) => self.client_tick(client),
            Event::ConsumerTick => {
                self.consume();
                self.net
                    .schedule(self.now + CONSUMER_MS, Event::ConsumerTick);
            }
            Event::CheckTick => {
                self.check_replicas();
                self.net.schedule(self.now + CHECK_MS, Event::CheckTick);
            }
        }
    }

    // ----- brokers: lifecycle -----

    fn start_broker(&mut self, id: NodeId) {
        let generation = self.brokers[id as usize].generation;
        for (timer, at) in [
            (Timer::KeepAlive, 0),
            (Timer::Poll, 1),
            (Timer::Tick, TICK_MS),
        ] {
            self.net.schedule(
                self.now + at,
                Event::Timer {
                    broker: id,
                    generation,
                    timer,
                },
            );
        }
    }

    fn timer(&mut self, broker: NodeId, at_ms: u64, timer: Timer) {
        let generation = self.brokers[broker as usize].generation;
        self.net.schedule(
            at_ms,
            Event::Timer {
                broker,
                generation,
                timer,
            },
        );
    }

    fn crash(&mut self, node: NodeId) {
        let broker = &mut self.brokers[node as usize];
        if !broker.up {
            return;
        }
        broker.up = false;
        broker.paused_until = 0;
        let lost: u64 = self.logs[node as usize]
            .iter()
            .map(|log| log.log_end_offset() - log.durable_end())
            .sum();
        broker.generation += 1;
        broker.lease = None;
        broker.valid_until = 0;
        broker.read_sent = None;
        broker.read_revision = 0;
        let mut clamped = 0;
        let incarnation = broker.incarnation;
        for part in &mut broker.parts {
            clamped += part.node.truncations_below_high_watermark();
            *part = Part::new(node, incarnation, &self.config);
        }
        self.truncations_below_high_watermark += clamped;
        for log in &self.logs[node as usize] {
            log.crash();
        }
        self.count("crashes", 1);
        self.count("unsynced records lost in crashes", lost);
        self.trace_line(|| format!("CRASH broker {node}"));
    }

    fn restart(&mut self, node: NodeId) {
        if self.brokers[node as usize].up {
            return;
        }
        let incarnation = self.rng.gen();
        let broker = &mut self.brokers[node as usize];
        broker.up = true;
        broker.incarnation = incarnation;
        for part in &mut broker.parts {
            *part = Part::new(node, incarnation, &self.config);
        }
        self.trace_line(|| format!("RESTART broker {node} incarnation {incarnation:x}"));
        self.start_broker(node);
    }

    fn registered(&self, node: NodeId) -> bool {
        self.now < self.brokers[node as usize].valid_until
    }

    // ----- brokers: timers -----

    fn broker_timer(&mut self, node: NodeId, timer: Timer) {
        match timer {
            Timer::KeepAlive => {
                let broker = &self.brokers[node as usize];
                let op = match broker.lease {
                    Some(lease) => StoreOp::KeepAlive {
                        lease,
                        sent_ms: self.now,
                    },
                    None => StoreOp::Register {
                        incarnation: broker.incarnation,
                        sent_ms: self.now,
                    },
                };
                self.send_to_store(node, op);
                self.timer(node, self.now + KEEP_ALIVE_MS, Timer::KeepAlive);
            }
            Timer::Poll => {
                let stale = self.brokers[node as usize]
                    .read_sent
                    .is_none_or(|sent| sent + CAS_TIMEOUT_MS <= self.now);
                if stale {
                    self.read(node);
                }
                self.timer(node, self.now + POLL_MS, Timer::Poll);
            }
            Timer::Tick => {
                for partition in 0..self.plan.partitions {
                    self.step(node, partition, Input::Tick);
                }
                self.timer(node, self.now + TICK_MS, Timer::Tick);
            }
            Timer::FollowerRetry { partition, tag } => {
                let part = &self.brokers[node as usize].parts[partition];
                if part.tag != tag {
                    return;
                }
                if let Some((generation, _)) = part.node.follower() {
                    let input = Input::Follower {
                        generation,
                        event: FollowerEvent::Retry,
                    };
                    self.step(node, partition, input);
                }
            }
            Timer::Sync { partition } => {
                self.brokers[node as usize].parts[partition].sync_scheduled = false;
                let durable_end_offset = self.logs[node as usize][partition].sync();
                self.count("local syncs", 1);
                self.step(node, partition, Input::LocalDurable { durable_end_offset });
            }
            Timer::CasTimeout { partition, id } => {
                let part = &mut self.brokers[node as usize].parts[partition];
                let Some((pending, purpose)) = part.cas else {
                    return;
                };
                if pending != id {
                    return;
                }
                part.cas = None;
                let input = match purpose {
                    ProposalPurpose::Election => Input::ElectionOutcome(ElectionOutcome::Unknown),
                    ProposalPurpose::Isr { leader_epoch } => Input::IsrOutcome {
                        leader_epoch,
                        outcome: CasOutcome::Unknown,
                    },
                };
                self.step(node, partition, input);
            }
            Timer::Wake { partition } => {
                self.brokers[node as usize].parts[partition].wake_scheduled = None;
                self.step(node, partition, Input::Wake);
            }
        }
    }

    fn send_to_store(&mut self, node: NodeId, op: StoreOp) {
        let generation = self.brokers[node as usize].generation;
        let msg = Msg::StoreRequest {
            from: node,
            generation,
            op,
        };
        self.net.send(
            &mut self.rng,
            self.now,
            Addr::Broker(node),
            Addr::Store,
            msg,
        );
    }

    fn read(&mut self, node: NodeId) {
        self.brokers[node as usize].read_sent = Some(self.now);
        self.send_to_store(node, StoreOp::Read);
    }

    /// Sends a follower's request `msg` (tagged `tag`) to `leader`, with the timer that asks
    /// again if no answer of that tag comes within `FETCH_RETRY_MS`.
    fn send_with_retry(
        &mut self,
        node: NodeId,
        leader: NodeId,
        partition: usize,
        tag: u64,
        msg: Msg,
    ) {
        self.send(node, Addr::Broker(leader), msg);
        self.timer(
            node,
            self.now + FETCH_RETRY_MS,
            Timer::FollowerRetry { partition, tag },
        );
    }

    fn send(&mut self, from: NodeId, to: Addr, msg: Msg) {
        self.net
            .send(&mut self.rng, self.now, Addr::Broker(from), to, msg);
    }

    // ----- the store -----

    fn store_message(&mut self, msg: Msg) {
        let Msg::StoreRequest {
            from,
            generation,
            op,
        } = msg
        else {
            return;
        };
        let now = self.now;
        let answer = match &op {
            StoreOp::Register { incarnation, .. } => StoreAnswer::Registered {
                lease: self.store.register(now, from, *incarnation, LEASE_TTL_MS),
            },
            StoreOp::KeepAlive { lease, .. } => {
                StoreAnswer::KeptAlive(self.store.keep_alive(now, from, *lease, LEASE_TTL_MS))
            }
            StoreOp::Read => StoreAnswer::Read {
                partitions: self.store.read(now),
                live: self.store.live(now),
                revision: self.store.revision(now),
            },
            StoreOp::Cas {
                partition,
                proposal,
                ..
            } => {
                let result = self.store.compare_and_swap(
                    now,
                    *partition,
                    proposal.expected_revision,
                    proposal.state.clone(),
                );
                if let Some(revision) = result {
                    let state = proposal.state.clone();
                    self.trace_line(|| {
                        format!("STORE p{partition} rev {revision} <- {state:?} (from {from})")
                    });
                }
                StoreAnswer::Cas(result)
            }
        };
        let msg = Msg::StoreResponse {
            generation,
            op,
            answer,
        };
        self.net
            .send(&mut self.rng, now, Addr::Store, Addr::Broker(from), msg);
    }

    fn store_response(&mut self, node: NodeId, op: StoreOp, answer: StoreAnswer) {
        match (op, answer) {
            (StoreOp::Register { sent_ms, .. }, StoreAnswer::Registered { lease }) => {
                self.brokers[node as usize].lease = Some(lease);
                self.trace_line(|| {
                    format!("broker {node}: registered with lease {lease} (sent at {sent_ms})")
                });
                self.renewed(node, sent_ms + LEASE_TTL_MS);
            }
            (StoreOp::KeepAlive { lease, sent_ms }, StoreAnswer::KeptAlive(alive)) => {
                let broker = &mut self.brokers[node as usize];
                if broker.lease != Some(lease) {
                    return;
                }
                if alive {
                    self.renewed(node, sent_ms + LEASE_TTL_MS);
                } else {
                    broker.lease = None;
                    self.trace_line(|| format!("broker {node}: lease {lease} lost"));
                }
            }
            (
                StoreOp::Read,
                StoreAnswer::Read {
                    partitions,
                    live,
                    revision,
                },
            ) => {
                let broker = &mut self.brokers[node as usize];
                broker.read_sent = None;
                if revision < broker.read_revision {
                    // A late answer (the network held it): the registrations it lists are older
                    // than those already read. A broker's view only moves forward, as the real
                    // driver's does (its watch delivers the store's changes in revision order);
                    // taking it would let a stale "this leader is not registered" start an
                    // election while that leader is registered and serving.
                    self.trace_line(|| {
                        format!("broker {node}: drops a read of revision {revision}")
                    });
                    return;
                }
                broker.read_revision = revision;
                broker.live = live.clone();
                for (partition, view) in partitions.into_iter().enumerate() {
                    if let Some(state) = self.take_view(node, partition, view) {
                        let input = Input::View {
                            state,
                            live: live.clone(),
                        };
                        self.step(node, partition, input);
                    }
                }
            }
            (
                StoreOp::Cas {
                    partition,
                    proposal,
                    election,
                    id,
                    opened,
                },
                StoreAnswer::Cas(result),
            ) => {
                if self.brokers[node as usize].opened[partition] != opened {
                    // The proposer's replica was deleted since (`lineage.rs`).
                    return;
                }
                let part = &mut self.brokers[node as usize].parts[partition];
                if part.cas.is_some_and(|(pending, _)| pending == id) {
                    part.cas = None;
                }
                let input = if election {
                    Input::ElectionOutcome(match result {
                        Some(revision) => ElectionOutcome::Won(Versioned {
                            value: proposal.state,
                            revision,
                        }),
                        None => ElectionOutcome::Lost { current: None },
                    })
                } else {
                    Input::IsrOutcome {
                        leader_epoch: proposal.state.leader_epoch,
                        outcome: match result {
                            Some(revision) => CasOutcome::Applied { revision },
                            None => CasOutcome::Conflict,
                        },
                    }
                };
                self.step(node, partition, input);
            }
            _ => {}
        }
    }

    fn renewed(&mut self, node: NodeId, valid_until: u64) {
        let broker = &mut self.brokers[node as usize];
        broker.valid_until = broker.valid_until.max(valid_until);
        let input = Input::Registration {
            registration: broker.lease.unwrap_or(0),
            valid_until_ms: broker.valid_until,
        };
        self.count("registration renewals", 1);
        for partition in 0..self.plan.partitions {
            self.step(node, partition, input.clone());
        }
    }

    // ----- the replica nodes -----

    /// Steps a replica's node with `input` now and carries out its effects.
    fn step(&mut self, node: NodeId, partition: usize, input: Input) {
        if self.brokers[node as usize].local[partition].is_none() {
            // No local copy (its topic deleted): no replica to step.
            return;
        }
        let now = self.now;
        let log = &self.logs[node as usize][partition];
        let effects = self.brokers[node as usize].parts[partition]
            .node
            .step(now, log, input);
        self.apply(node, partition, effects);
    }

    /// Carries out a node's effects with simulated I/O, as the driver does with real I/O;
    /// what a synchronous log step returns is stepped in at once and its effects follow.
    fn apply(&mut self, node: NodeId, partition: usize, effects: Effects) {
        let mut queue = VecDeque::from(effects);
        while let Some(effect) = queue.pop_front() {
            let more = self.apply_one(node, partition, effect);
            queue.extend(more);
        }
    }

    fn apply_one(&mut self, node: NodeId, partition: usize, effect: Effect) -> Effects {
        let now = self.now;
        match effect {
            Effect::Propose { proposal, purpose } => {
                self.next_id += 1;
                let id = self.next_id;
                self.brokers[node as usize].parts[partition].cas = Some((id, purpose));
                let election = purpose == ProposalPurpose::Election;
                self.trace_line(|| {
                    if election {
                        format!("broker {node} p{partition}: proposes {proposal:?}")
                    } else {
                        format!(
                            "broker {node} p{partition}: proposes ISR {:?}",
                            proposal.state.isr
                        )
                    }
                });
                let opened = self.brokers[node as usize].opened[partition];
                self.send_to_store(
                    node,
                    StoreOp::Cas {
                        partition,
                        proposal,
                        election,
                        id,
                        opened,
                    },
                );
                self.timer(
                    node,
                    now + CAS_TIMEOUT_MS,
                    Timer::CasTimeout { partition, id },
                );
                Effects::new()
            }
            Effect::Reread => {
                self.read(node);
                Effects::new()
            }
            Effect::InstallLeaderEpoch { leader_epoch } => {
                let log = &self.logs[node as usize][partition];
                let result = log.become_leader(leader_epoch);
                if let Err(error) = &result {
                    let error = error.clone();
                    self.trace_line(|| {
                        format!("broker {node} p{partition}: become_leader({leader_epoch}) refused: {error}")
                    });
                }
                let log = &self.logs[node as usize][partition];
                self.brokers[node as usize].parts[partition].node.step(
                    now,
                    log,
                    Input::LeaderEpochInstalled {
                        leader_epoch,
                        result,
                    },
                )
            }
            Effect::Leading {
                leader_epoch,
                from_offset,
                high_watermark,
            } => {
                self.count("leaders elected", 1);
                self.trace_line(|| {
                    format!(
                        "broker {node} p{partition}: LEADS epoch {leader_epoch} from offset {from_offset} (hw {high_watermark})"
                    )
                });
                Effects::new()
            }
            Effect::Deposed { leader_epoch } => {
                self.count("leaders deposed", 1);
                self.trace_line(|| {
                    format!("broker {node} p{partition}: DEPOSED in epoch {leader_epoch}")
                });
                Effects::new()
            }
            Effect::StartFollowing {
                generation,
                leader,
                leader_epoch,
                first,
            } => {
                self.trace_line(|| {
                    format!("broker {node} p{partition}: follows {leader} in epoch {leader_epoch}")
                });
                self.follower_action(node, partition, generation, first)
            }
            Effect::FollowerStep { generation, action } => {
                self.follower_action(node, partition, generation, action)
            }
            Effect::StopFollowing { reason, .. } => {
                // Answers to the stopped follower's requests are dropped by their tag.
                let part = &mut self.brokers[node as usize].parts[partition];
                part.tag += 1;
                part.fetched = None;
                part.idle = false;
                self.count(
                    match reason {
                        StopReason::LeaderChanged => "followers stopped: leader changed",
                        StopReason::Finished => "followers stopped: re-read asked",
                        StopReason::Elected => "followers stopped: elected",
                        StopReason::Stopped => "followers stopped: replica stopped",
                    },
                    1,
                );
                self.trace_line(|| {
                    format!("broker {node} p{partition}: stops following ({reason:?})")
                });
                Effects::new()
            }
            Effect::AdvanceHighWatermark(high_watermark) => {
                self.logs[node as usize][partition].advance_high_watermark(high_watermark);
                Effects::new()
            }
            Effect::Complete(completion) => {
                let part = &mut self.brokers[node as usize].parts[partition];
                let Some((client, request, base_offset, epoch)) =
                    part.waiters.remove(&completion.id)
                else {
                    return Effects::new();
                };
                if completion.result.is_ok() && !self.registered(node) {
                    self.violation(format!(
                        "broker {node} acknowledged with its registration lapsed"
                    ));
                }
                let lineage = self.brokers[node as usize].local[partition].unwrap_or(u32::MAX);
                if completion.result.is_ok() {
                    let acked =
                        self.logs[node as usize][partition].range(base_offset, base_offset + 1);
                    self.check_lineage(node, partition, "acknowledged", &acked);
                }
                let answer = match completion.result {
                    Ok(()) => ProduceAnswer::Acked {
                        base_offset,
                        broker: node,
                        epoch,
                        lineage,
                    },
                    Err(error) => ProduceAnswer::Failed(error.to_string()),
                };
                self.send(
                    node,
                    Addr::Client(client),
                    Msg::ProduceResponse { request, answer },
                );
                Effects::new()
            }
            Effect::WakeAt(at) => {
                let part = &mut self.brokers[node as usize].parts[partition];
                if part.wake_scheduled.is_none_or(|scheduled| scheduled > at) {
                    part.wake_scheduled = Some(at);
                    self.timer(node, at.max(now), Timer::Wake { partition });
                }
                Effects::new()
            }
        }
    }

    /// Carries out one of the follower's actions: a log step at once (its result stepped into
    /// the node), a request sent with its retry timer.
    fn follower_action(
        &mut self,
        node: NodeId,
        partition: usize,
        generation: u64,
        action: FollowerAction,
    ) -> Effects {
        let now = self.now;
        let leader = match self.brokers[node as usize].parts[partition].node.follower() {
            Some((running, follower)) if running == generation => follower.leader(),
            _ => return Effects::new(),
        };
        let event = match action {
            FollowerAction::BecomeFollower { leader_epoch } => {
                let log = &self.logs[node as usize][partition];
                FollowerEvent::BecameFollower(log.become_follower(leader_epoch))
            }
            FollowerAction::Truncate { offset } => {
                let log = &self.logs[node as usize][partition];
                let before = log.log_end_offset();
                let result = log.truncate_to(offset);
                self.count(
                    "records truncated by leader epoch",
                    before.saturating_sub(offset),
                );
                let traced = result.clone();
                self.trace_line(|| {
                    format!("broker {node} p{partition}: truncate {before} -> {offset}: {traced:?}")
                });
                FollowerEvent::Truncated(result)
            }
            FollowerAction::Append {
                records_epoch,
                leader_epoch,
                high_watermark,
                record_count,
                then_fetch,
            } => {
                if let Some(request) = then_fetch {
                    // The pipelined fetch leaves before the append; its answer can only arrive
                    // after it (the append here is instant), as the node wants.
                    let part = &mut self.brokers[node as usize].parts[partition];
                    part.tag += 1;
                    let tag = part.tag;
                    let msg = Msg::Fetch {
                        partition,
                        request,
                        tag,
                    };
                    self.send_with_retry(node, leader, partition, tag, msg);
                }
                let part = &mut self.brokers[node as usize].parts[partition];
                let log = &self.logs[node as usize][partition];
                let before = log.log_end_offset();
                let result = match part.fetched.take() {
                    Some(bytes) if record_count > 0 => {
                        log.append_replicated(&bytes, records_epoch, leader_epoch)
                    }
                    _ => {
                        part.idle = true;
                        Ok(log.log_end_offset())
                    }
                };
                if result.is_ok() {
                    log.advance_high_watermark(high_watermark);
                    // As the driver: the leader's log start, up to this replica's high watermark.
                    let filler = std::mem::take(&mut part.deleted);
                    if !filler.is_empty() {
                        log.follow_log_start_with(&filler);
                    }
                }
                let appended = log.range(before, log.log_end_offset());
                self.check_lineage(node, partition, "replicated", &appended);
                FollowerEvent::Appended(result)
            }
            FollowerAction::AskEpochEnd(request) => {
                let part = &mut self.brokers[node as usize].parts[partition];
                part.tag += 1;
                let tag = part.tag;
                let msg = Msg::EpochEnd {
                    partition,
                    request,
                    tag,
                };
                self.send_with_retry(node, leader, partition, tag, msg);
                return Effects::new();
            }
            FollowerAction::Fetch(request) => {
                let part = &mut self.brokers[node as usize].parts[partition];
                part.tag += 1;
                let tag = part.tag;
                if std::mem::take(&mut part.idle) {
                    self.timer(
                        node,
                        now + FETCH_IDLE_MS,
                        Timer::FollowerRetry { partition, tag },
                    );
                    return Effects::new();
                }
                let msg = Msg::Fetch {
                    partition,
                    request,
                    tag,
                };
                self.send_with_retry(node, leader, partition, tag, msg);
                return Effects::new();
            }
            FollowerAction::Report(request) => {
                // Its answer is never awaited: a tag no fetch has.
                let msg = Msg::Fetch {
                    partition,
                    request,
                    tag: REPORT_TAG,
                };
                self.send(node, Addr::Broker(leader), msg);
                return Effects::new();
            }
            FollowerAction::StartOver { offset } => {
                let filler =
                    std::mem::take(&mut self.brokers[node as usize].parts[partition].deleted);
                let log = &self.logs[node as usize][partition];
                let before = log.log_end_offset();
                let result = if filler.len() as u64 == offset {
                    log.start_over_with(offset, &filler)
                } else {
                    let skipped = filler.len();
                    self.violation(format!(
                        "p{partition}: broker {node} starts over at {offset} from {before}, but the leader's answer deleted {skipped} records"
                    ));
                    Err(fencelog::cluster::replica_log::ReplicaLogError::Storage(
                        "no filler".into(),
                    ))
                };
                if result.is_ok() {
                    self.count("follower start-overs", 1);
                    self.count("records skipped by start-overs", offset - before);
                }
                let traced = result.clone();
                self.trace_line(|| {
                    format!(
                        "broker {node} p{partition}: start over {before} -> {offset}: {traced:?}"
                    )
                });
                FollowerEvent::StartedOver(result)
            }
            // The node takes a re-read itself; nothing to do for the rest.
            FollowerAction::RereadMetadata | FollowerAction::Nothing => return Effects::new(),
        };
        let log = &self.logs[node as usize][partition];
        self.brokers[node as usize].parts[partition].node.step(
            now,
            log,
            Input::Follower { generation, event },
        )
    }

    // ----- brokers: messages -----

    fn broker_message(&mut self, node: NodeId, msg: Msg) {
        let now = self.now;
        match msg {
            Msg::Fetch {
                partition,
                request,
                tag,
            } if self.brokers[node as usize].local[partition].is_none() => {
                // No replica here (its topic deleted): as a broker without the partition.
                let msg = Msg::FetchAnswer {
                    partition,
                    tag,
                    result: Err(FetchError::NotLeader),
                    deleted: Vec::new(),
                };
                self.send(node, Addr::Broker(request.follower), msg);
            }
            Msg::EpochEnd {
                partition,
                request,
                tag,
            } if self.brokers[node as usize].local[partition].is_none() => {
                let msg = Msg::EpochEndAnswer {
                    partition,
                    tag,
                    result: Err(FetchError::NotLeader),
                };
                self.send(node, Addr::Broker(request.follower), msg);
            }
            Msg::Fetch {
                partition,
                request,
                tag,
            } => {
                let log = &self.logs[node as usize][partition];
                let (result, effects) = self.brokers[node as usize].parts[partition]
                    .node
                    .serve_fetch(now, log, &request);
                let mut served = Vec::new();
                let mut deleted = Vec::new();
                // As the driver: a read below the log start is refused with the log start.
                let log_start = log.log_start_offset();
                let result = match result {
                    Ok(serve) if !request.report_only && serve.from_offset < log_start => {
                        // Every record below the log start: a follower that starts over keeps
                        // none of its own (`SimLog::start_over_with`).
                        deleted = log.range(0, log_start);
                        Err(FetchError::BelowLogStart {
                            fetch_offset: serve.from_offset,
                            log_start_offset: log_start,
                        })
                    }
                    other => other,
                };
                // As the driver's answer carries the leader's log start, which the follower
                // adopts after its append: the filler it needs for that.
                let follower_log_start =
                    self.logs[request.follower as usize][partition].log_start_offset();
                if result.is_ok() && follower_log_start < log_start {
                    deleted = log.range(0, log_start);
                }
                let result = result.map(|serve| {
                    let records = log.read(serve.from_offset, serve.to_offset, FETCH_RECORDS_MAX);
                    let response = FetchResponse {
                        base_offset: serve.from_offset,
                        record_count: records.len() as u64,
                        records_epoch: serve.records_epoch,
                        high_watermark: serve.high_watermark,
                    };
                    let batches = encode_batches(serve.from_offset, &records);
                    served = records;
                    (response, batches)
                });
                self.check_lineage(node, partition, "served", &served);
                self.apply(node, partition, effects);
                let msg = Msg::FetchAnswer {
                    partition,
                    tag,
                    result,
                    deleted,
                };
                self.send(node, Addr::Broker(request.follower), msg);
            }
            Msg::EpochEnd {
                partition,
                request,
                tag,
            } => {
                let log = &self.logs[node as usize][partition];
                let (result, effects) = self.brokers[node as usize].parts[partition]
                    .node
                    .serve_epoch_end(now, log, &request);
                self.apply(node, partition, effects);
                let msg = Msg::EpochEndAnswer {
                    partition,
                    tag,
                    result,
                };
                self.send(node, Addr::Broker(request.follower), msg);
            }
            Msg::FetchAnswer {
                partition,
                tag,
                result,
                deleted,
            } => {
                let part = &mut self.brokers[node as usize].parts[partition];
                if part.tag != tag {
                    return;
                }
                let Some((generation, _)) = part.node.follower() else {
                    return;
                };
                part.deleted = deleted;
                let response = match result {
                    Ok((response, batches)) => {
                        part.fetched = Some(batches);
                        Ok(response)
                    }
                    Err(error) => Err(error),
                };
                let input = Input::Follower {
                    generation,
                    event: FollowerEvent::Fetched(response),
                };
                self.step(node, partition, input);
            }
            Msg::EpochEndAnswer {
                partition,
                tag,
                result,
            } => {
                self.trace_line(|| {
                    format!("broker {node} p{partition}: epoch end answer {result:?}")
                });
                let part = &self.brokers[node as usize].parts[partition];
                if part.tag != tag {
                    return;
                }
                let Some((generation, _)) = part.node.follower() else {
                    return;
                };
                let input = Input::Follower {
                    generation,
                    event: FollowerEvent::EpochEnd(result),
                };
                self.step(node, partition, input);
            }
            Msg::StoreResponse {
                generation,
                op,
                answer,
            } => {
                if generation == self.brokers[node as usize].generation {
                    self.store_response(node, op, answer);
                }
            }
            Msg::Produce {
                client,
                request,
                partition,
                values,
            } => self.produce(node, client, request, partition, values),
            Msg::StoreRequest { .. } | Msg::ProduceResponse { .. } => {}
        }
    }

    fn produce(
        &mut self,
        node: NodeId,
        client: usize,
        request: u64,
        partition: usize,
        values: Vec<u64>,
    ) {
        use fencelog::cluster::replication::leader::ProduceRefusal;
        let now = self.now;
        let Some(lineage) = self.brokers[node as usize].local[partition] else {
            let answer = ProduceAnswer::Refused("UNKNOWN_TOPIC_OR_PARTITION".into());
            self.send(
                node,
                Addr::Client(client),
                Msg::ProduceResponse { request, answer },
            );
            return;
        };
        let (checked, effects) = self.brokers[node as usize].parts[partition]
            .node
            .check_produce(now, true);
        self.apply(node, partition, effects);
        let epoch = match checked {
            Ok(epoch) => epoch,
            Err(refusal) => {
                let name = match refusal {
                    ProduceRefusal::NotLeader => "NOT_LEADER",
                    ProduceRefusal::NotEnoughReplicas { .. } => "NOT_ENOUGH_REPLICAS",
                    ProduceRefusal::TooManyWaiters { .. } => "TOO_MANY_WAITERS",
                };
                let answer = ProduceAnswer::Refused(name.into());
                self.send(
                    node,
                    Addr::Client(client),
                    Msg::ProduceResponse { request, answer },
                );
                return;
            }
        };
        // The producer epoch an idempotent producer would be granted here (`InitProducerId`).
        let producer_epoch = producer_epoch_base(epoch) | client as u64;
        grant(
            &mut self.observed.grants,
            partition,
            lineage,
            producer_epoch,
        );
        let log = &self.logs[node as usize][partition];
        let base_offset = match log.append_as_leader(&values, epoch, lineage) {
            Ok(base) => base,
            Err(error) => {
                let message = format!("leader's log refused the append: {error}");
                self.violation(message.clone());
                let answer = ProduceAnswer::Refused(message);
                self.send(
                    node,
                    Addr::Client(client),
                    Msg::ProduceResponse { request, answer },
                );
                return;
            }
        };
        let last = base_offset + values.len() as u64 - 1;
        self.next_id += 1;
        let id = self.next_id;
        let part = &mut self.brokers[node as usize].parts[partition];
        part.waiters
            .insert(id, (client, request, base_offset, epoch));
        let effects = part.node.await_commit(now, log, id, last);
        if !part.sync_scheduled {
            part.sync_scheduled = true;
            self.timer(
                node,
                now + self.plan.sync_delay_ms,
                Timer::Sync { partition },
            );
        }
        self.trace_line(|| {
            format!("broker {node} p{partition}: appended {values:?} at {base_offset}")
        });
        self.apply(node, partition, effects);
    }

    // ----- clients -----

    fn client_tick(&mut self, client: usize) {
        if let Some((request, partition, values, sent)) = self.producers[client].outstanding.clone()
        {
            if self.now >= sent + PRODUCE_TIMEOUT_MS {
                self.trace_line(|| format!("client {client}: request {request} timed out"));
                for value in values {
                    self.observed
                        .values
                        .insert(value, (client, partition, Outcome::Unknown));
                }
                self.producers[client].outstanding = None;
                self.producers[client].target = None;
            }
        }
        if self.producers[client].outstanding.is_none() && self.now < self.plan.producers_stop_ms {
            let partition = self.rng.gen_range(0..self.plan.partitions);
            let target = match self.producers[client].target {
                Some(target) => Some(target),
                None => self
                    .store
                    .partition(partition)
                    .and_then(|state| state.value.leader),
            };
            if let Some(target) = target {
                self.producers[client].target = Some(target);
                let count = self.rng.gen_range(1..=3);
                let producer = &mut self.producers[client];
                let values: Vec<u64> = (0..count)
                    .map(|_| {
                        producer.sequence += 1;
                        ((client as u64 + 1) << 32) | producer.sequence
                    })
                    .collect();
                for value in &values {
                    self.observed
                        .values
                        .insert(*value, (client, partition, Outcome::Pending));
                    self.observed.sent[client].push(*value);
                }
                self.next_request += 1;
                let request = self.next_request;
                self.producers[client].outstanding =
                    Some((request, partition, values.clone(), self.now));
                let msg = Msg::Produce {
                    client,
                    request,
                    partition,
                    values,
                };
                self.net.send(
                    &mut self.rng,
                    self.now,
                    Addr::Client(client),
                    Addr::Broker(target),
                    msg,
                );
            }
        }
        let next = self.now + self.rng.gen_range(5..40);
        self.net.schedule(next, Event::ClientTick(client));
    }

    fn client_message(&mut self, client: usize, msg: Msg) {
        let Msg::ProduceResponse { request, answer } = msg else {
            return;
        };
        let Some((outstanding, partition, values, _)) = self.producers[client].outstanding.clone()
        else {
            return;
        };
        if outstanding != request {
            return;
        }
        self.producers[client].outstanding = None;
        let now = self.now;
        match &answer {
            ProduceAnswer::Acked {
                base_offset,
                lineage,
                ..
            } => {
                for (i, value) in values.iter().enumerate() {
                    let outcome = Outcome::Acked {
                        offset: base_offset + i as u64,
                        at_ms: now,
                        lineage: *lineage,
                    };
                    self.observed
                        .values
                        .insert(*value, (client, partition, outcome));
                }
                self.acks_by_time.push((now, partition));
                self.count("acknowledged values", values.len() as u64);
            }
            ProduceAnswer::Refused(name) => {
                *self.observed.refusals.entry(name.clone()).or_default() += 1;
                if name == "NOT_ENOUGH_REPLICAS" {
                    self.count("NOT_ENOUGH_REPLICAS refusals", 1);
                }
                for value in &values {
                    self.observed
                        .values
                        .insert(*value, (client, partition, Outcome::Refused));
                }
                self.producers[client].target = None;
            }
            ProduceAnswer::Failed(why) => {
                *self
                    .observed
                    .refusals
                    .entry(format!("failed: {why}"))
                    .or_default() += 1;
                self.count("written but not acknowledged", values.len() as u64);
                for value in &values {
                    self.observed
                        .values
                        .insert(*value, (client, partition, Outcome::Unknown));
                }
                self.producers[client].target = None;
            }
        }
        self.trace_line(|| format!("client {client}: request {request} {values:?} -> {answer:?}"));
    }

    // ----- the consumer and the online checks -----

    fn consume(&mut self) {
        let mut seen = Vec::new();
        let mut loads = Vec::new();
        for node in 0..BROKERS {
            let broker = &self.brokers[node as usize];
            if !broker.up || broker.paused_until > self.now {
                continue;
            }
            for partition in 0..self.plan.partitions {
                let Some(lineage) = broker.local[partition] else {
                    continue;
                };
                if let Some(leader) = broker.parts[partition].node.leader() {
                    if let Some(high_watermark) = leader.consumer_high_watermark(self.now) {
                        seen.push((node, partition, lineage, high_watermark));
                        if partition == super::offsets::OFFSETS_PARTITION {
                            loads.push((node, lineage, leader.epoch(), high_watermark));
                        }
                    }
                }
            }
        }
        for (node, lineage, leader_epoch, high_watermark) in loads {
            self.load_offsets(node, lineage, leader_epoch, high_watermark);
        }
        for (node, partition, lineage, high_watermark) in seen {
            // A re-created topic starts its offsets again: the high watermark only rises within
            // one lineage.
            let highest = self.consumer_high.entry((partition, lineage)).or_default();
            let before = *highest;
            *highest = before.max(high_watermark);
            if high_watermark < before {
                self.violation(format!(
                    "p{partition}: a consumer saw the high watermark go back from {before} to {high_watermark} (leader {node}, lineage {lineage})"
                ));
            }
            if partition == super::transactions::TRANSACTIONS_PARTITION {
                self.read_committed(node, lineage, high_watermark);
            }
            if self.plan.delete_records && self.now < self.plan.heal_ms && self.rng.gen_ratio(1, 8)
            {
                let log = &self.logs[node as usize][partition];
                let before = log.log_start_offset();
                if let Ok(after) = log.delete_records_before(log.high_watermark()) {
                    self.count("records deleted (DeleteRecords)", after - before);
                }
            }
            if high_watermark > 0 {
                let offset = self.rng.gen_range(0..high_watermark);
                let read = self.logs[node as usize][partition].range(offset, offset + 1);
                self.check_lineage(node, partition, "read by a consumer", &read);
                match read.first().map(|record| record.value) {
                    Some(value) => self
                        .observed
                        .consumer_reads
                        .push((partition, lineage, offset, value)),
                    None => self.violation(format!(
                        "p{partition}: leader {node} has no record at {offset} below its high watermark {high_watermark}"
                    )),
                }
            }
        }
    }

    /// A read_committed reader of the transactional partition at leader `node` (see
    /// `super::transactions`).
    fn read_committed(&mut self, node: NodeId, lineage: u32, high_watermark: u64) {
        let partition = super::transactions::TRANSACTIONS_PARTITION;
        let values: Vec<u64> = self.logs[node as usize][partition]
            .records()
            .iter()
            .map(|record| record.value)
            .collect();
        let seen = self.transactions_seen.entry(lineage).or_default();
        let checked = super::transactions::check_read(&values, high_watermark, seen);
        self.count("read_committed views checked", 1);
        match checked {
            Ok((visible, aborted)) => {
                self.count("read_committed records visible", visible as u64);
                self.count("read_committed records aborted", aborted as u64);
            }
            Err(failure) => self.violation(format!(
                "p{partition}: read_committed at leader {node} (lineage {lineage}): {failure}"
            )),
        }
    }

    /// A coordinator's load of the offsets partition (see `super::offsets`): once per broker
    /// and leader epoch, when its high watermark covers its log end.
    fn load_offsets(
        &mut self,
        node: NodeId,
        lineage: u32,
        leader_epoch: LeaderEpoch,
        high_watermark: u64,
    ) {
        let partition = super::offsets::OFFSETS_PARTITION;
        let log = &self.logs[node as usize][partition];
        let values: Vec<u64> = log.records().iter().map(|record| record.value).collect();
        if high_watermark < values.len() as u64 || !self.offsets_loaded.insert((node, leader_epoch))
        {
            return;
        }
        let acknowledged: BTreeMap<u64, u64> = self
            .observed
            .values
            .iter()
            .filter_map(|(value, (_, sent_to, outcome))| match outcome {
                // A re-created offsets topic answers only what was acknowledged in it.
                Outcome::Acked {
                    offset,
                    lineage: acked_in,
                    ..
                } if *sent_to == partition && *acked_in == lineage => Some((*value, *offset)),
                _ => None,
            })
            .collect();
        self.count("offsets partition loads", 1);
        if let Err(failure) = super::offsets::check_load(&values, high_watermark, &acknowledged) {
            self.violation(format!(
                "p{partition}: broker {node} loading in leader epoch {leader_epoch}: {failure}"
            ));
        }
    }

    /// No two replicas hold different records below a high watermark; epochs never decrease
    /// along a log.
    pub fn check_replicas(&mut self) {
        let mut found = Vec::new();
        for partition in 0..self.plan.partitions {
            let logs: Vec<_> = (0..BROKERS as usize)
                .map(|node| {
                    let log = &self.logs[node][partition];
                    (log.records(), log.high_watermark())
                })
                .collect();
            for (node, (records, _)) in logs.iter().enumerate() {
                let local = self.brokers[node].local[partition];
                found.extend(self.lineage_breaks(node as NodeId, partition, local, records));
            }
            for (node, (records, high_watermark)) in logs.iter().enumerate() {
                if let Some(at) = records.windows(2).position(|w| w[1].epoch < w[0].epoch) {
                    found.push(format!(
                        "p{partition}: broker {node}'s log has epochs going down at offset {}",
                        at + 1
                    ));
                }
                if *high_watermark > records.len() as u64 {
                    found.push(format!("p{partition}: broker {node}'s high watermark {high_watermark} is past its log end {}", records.len()));
                }
                for (other, (other_records, other_high_watermark)) in logs.iter().enumerate() {
                    // Copies of different lineages (one not yet wiped) share nothing.
                    if other == node
                        || self.brokers[other].local[partition]
                            != self.brokers[node].local[partition]
                    {
                        continue;
                    }
                    // Committed on both: a replica not yet truncated may hold a diverging
                    // suffix above its own high watermark.
                    let end = (*high_watermark).min(*other_high_watermark) as usize;
                    let end = end.min(other_records.len()).min(records.len());
                    if let Some(at) = (0..end).find(|&o| records[o] != other_records[o]) {
                        found.push(format!(
                            "p{partition}: brokers {node} and {other} differ at offset {at}, below both high watermarks: {:?} vs {:?}",
                            records[at], other_records[at]
                        ));
                    }
                }
            }
        }
        for what in found {
            self.violation(what);
        }
    }

    // ----- topic delete and re-create (`lineage.rs`) -----

    /// A broker's read of one partition: its local copy judged by the driver's rules (wiped if
    /// of an older or deleted lineage), a copy created for a topic it lacks; the state to step
    /// into the replica, if the topic is present.
    fn take_view(
        &mut self,
        node: NodeId,
        partition: usize,
        view: PartitionView,
    ) -> Option<Versioned<PartitionState>> {
        let has_copy = self.brokers[node as usize].local[partition].is_some();
        let log = &self.logs[node as usize][partition];
        match judge(has_copy.then_some(log), &view) {
            Judgement::Keep => {}
            Judgement::Older(reason) => {
                self.count("local copies of an older lineage deleted", 1);
                let wiped = self.wipe(node, partition, &reason.to_string());
                self.count("records deleted with an older lineage's copy", wiped);
            }
            Judgement::Deleted => {
                self.count("local copies of a deleted topic deleted", 1);
                self.wipe(node, partition, "the topic was deleted from the cluster");
            }
            Judgement::KeptAbsent => {
                // Every epoch a copy holds came from the store, whose tombstone covers them all;
                // only a topic deleted before its first election leaves a tombstone of 0, which
                // the driver reads as none, keeping a copy that holds no epoch (and so no
                // replicated record): nothing to judge.
                let epochs = super::lineage::local_epochs(log);
                if epochs.iter().all(|epochs| epochs.highest() == 0) {
                    self.count("copies without an epoch kept under a tombstone of 0", 1);
                } else {
                    self.violation(format!(
                        "p{partition}: broker {node}'s copy holds epochs {epochs:?} above the deleted topic's floor ({view:?})"
                    ));
                }
            }
        }
        let PartitionView::Present { lineage, state, .. } = view else {
            return None;
        };
        let local = self.brokers[node as usize].local[partition];
        if local != Some(lineage) {
            // The driver's `ensure_local_topic` (no copy), or a copy judged the record's own
            // (it holds no epoch of an older lineage): from now on the store's topic's.
            if local.is_none() {
                self.count("local copies created for a re-created topic", 1);
            }
            self.trace_line(|| {
                format!("broker {node} p{partition}: local copy of lineage {local:?} -> {lineage}")
            });
            self.brokers[node as usize].local[partition] = Some(lineage);
            let records = self.logs[node as usize][partition].records();
            if let Some(broken) = self
                .lineage_breaks(node, partition, Some(lineage), &records)
                .into_iter()
                .next()
            {
                self.violation(format!("taking part in lineage {lineage}: {broken}"));
            }
        }
        Some(state)
    }

    /// Deletes a broker's local copy of `partition` (the driver's `delete_local_topic`): the
    /// replica stops (its waiting producers are answered), the files go, and the replica takes
    /// no input until a copy is created for a re-created topic.
    /// Returns how many records the copy held.
    fn wipe(&mut self, node: NodeId, partition: usize, reason: &str) -> u64 {
        let broker = &mut self.brokers[node as usize];
        let old = &broker.parts[partition];
        self.truncations_below_high_watermark += old.node.truncations_below_high_watermark();
        let reopened = Part::reopened(old, node, broker.incarnation, &self.config);
        let waiters = std::mem::replace(&mut broker.parts[partition], reopened).waiters;
        broker.opened[partition] += 1;
        let lineage = broker.local[partition].take();
        let wiped = self.logs[node as usize][partition].log_end_offset();
        self.logs[node as usize][partition] = SimLog::new();
        for (client, request, _, _) in waiters.into_values() {
            let answer = ProduceAnswer::Failed("the topic was deleted".into());
            self.send(
                node,
                Addr::Client(client),
                Msg::ProduceResponse { request, answer },
            );
        }
        self.trace_line(|| {
            format!("broker {node} p{partition}: DELETES its copy of lineage {lineage:?}: {reason}")
        });
        wiped
    }

    fn delete_topic(&mut self, partition: usize, recreate_after_ms: u64) {
        let Some(floor) = self.store.delete(self.now, partition) else {
            return;
        };
        self.count("topic deletes", 1);
        self.trace_line(|| format!("STORE p{partition}: topic deleted, tombstone {floor}"));
        if recreate_after_ms == 0 {
            self.recreate_topic(partition);
        } else {
            let at = (self.now + recreate_after_ms).min(self.plan.heal_ms);
            self.net
                .schedule(at, Event::Fault(Fault::RecreateTopic { partition }));
        }
    }

    fn recreate_topic(&mut self, partition: usize) {
        if let Some(id) = self.store.recreate(self.now, partition) {
            self.count("topic re-creations", 1);
            let state = self
                .store
                .partition(partition)
                .map(|state| state.value.clone());
            self.trace_line(|| {
                format!("STORE p{partition}: re-created as lineage {id}: {state:?}")
            });
        }
    }

    /// A violation if any of `records`, which broker `node` just did `what` with, is not of
    /// the lineage of its local copy of `partition`.
    fn check_lineage(&mut self, node: NodeId, partition: usize, what: &str, records: &[Record]) {
        let local = self.brokers[node as usize].local[partition];
        if let Some(record) = records.iter().find(|record| Some(record.lineage) != local) {
            self.violation(format!(
                "p{partition}: broker {node} (copy of lineage {local:?}) {what} value {:x} of lineage {}",
                record.value, record.lineage
            ));
        }
    }

    /// What is wrong with broker `node`'s log `records` of `partition`, whose local copy is of
    /// lineage `local`: records of another lineage, records with an epoch not above the floor
    /// their lineage was created over or above the floor its deletion raised (at most one
    /// finding of each kind).
    fn lineage_breaks(
        &self,
        node: NodeId,
        partition: usize,
        local: Option<u32>,
        records: &[Record],
    ) -> Vec<String> {
        let mut found = Vec::new();
        if let Some((offset, record)) = records
            .iter()
            .enumerate()
            .find(|(_, record)| Some(record.lineage) != local)
        {
            found.push(format!(
                "p{partition}: broker {node}'s copy of lineage {local:?} holds value {:x} of lineage {} at offset {offset}",
                record.value, record.lineage
            ));
        }
        let lineages = &self.store.lineages;
        if let Some(record) = records
            .iter()
            .find(|record| lineages[record.lineage as usize].below_floor(record.epoch))
        {
            found.push(format!(
                "p{partition}: broker {node} holds value {:x} of lineage {} written in epoch {}, not above the floor {} it was created over",
                record.value, record.lineage, record.epoch, lineages[record.lineage as usize].floor_below
            ));
        }
        if let Some(record) = records.iter().find(|record| {
            lineages[record.lineage as usize]
                .deleted
                .is_some_and(|(_, _, floor)| record.epoch > floor)
        }) {
            found.push(format!(
                "p{partition}: broker {node} holds value {:x} of deleted lineage {} written in epoch {}, above its tombstone",
                record.value, record.lineage, record.epoch
            ));
        }
        found
    }

    // ----- faults -----

    fn resolve(&self, target: Target) -> Option<NodeId> {
        match target {
            Target::Node(node) => Some(node),
            Target::Leader(partition) => self.store.partition(partition)?.value.leader,
            Target::Follower(partition, k) => {
                let state = &self.store.partition(partition)?.value;
                state
                    .replicas
                    .iter()
                    .copied()
                    .filter(|node| Some(*node) != state.leader)
                    .nth(k)
            }
        }
    }

    fn cut_both(&mut self, a: Addr, b: Addr, ms: u64) {
        self.net.cut(a, b);
        self.net.cut(b, a);
        let at = self.now + ms;
        self.net.schedule(at, Event::Fault(Fault::Heal { a, b }));
        self.net
            .schedule(at, Event::Fault(Fault::Heal { a: b, b: a }));
    }

    fn fault(&mut self, fault: Fault) {
        if self.healed && !matches!(fault, Fault::HealAll | Fault::RecreateTopic { .. }) {
            return;
        }
        let description = format!("{fault:?}");
        self.trace_line(|| format!("FAULT {description}"));
        match fault {
            Fault::Pause { target, ms } => {
                if let Some(node) = self.resolve(target) {
                    let broker = &mut self.brokers[node as usize];
                    if broker.up {
                        broker.paused_until = self.now + ms;
                    }
                }
            }
            Fault::Crash { target } => {
                if let Some(node) = self.resolve(target) {
                    self.crash(node);
                }
            }
            Fault::Restart { node, target } => {
                if let Some(node) = node.or_else(|| self.resolve(target)) {
                    self.restart(node);
                }
            }
            Fault::IsolateFromBrokers { target, ms } => {
                if let Some(node) = self.resolve(target) {
                    for other in (0..BROKERS).filter(|o| *o != node) {
                        self.cut_both(Addr::Broker(node), Addr::Broker(other), ms);
                    }
                }
            }
            Fault::CutFromStore { target, ms } => {
                if let Some(node) = self.resolve(target) {
                    self.cut_both(Addr::Broker(node), Addr::Store, ms);
                }
            }
            Fault::CutLink { a, b, one_way, ms } => {
                if let (Some(a), Some(b)) = (self.resolve(a), self.resolve(b)) {
                    if a != b {
                        let (a, b) = (Addr::Broker(a), Addr::Broker(b));
                        if one_way {
                            self.net.cut(a, b);
                            self.net
                                .schedule(self.now + ms, Event::Fault(Fault::Heal { a, b }));
                        } else {
                            self.cut_both(a, b, ms);
                        }
                    }
                }
            }
            Fault::StoreUnreachable { ms } => {
                for node in 0..BROKERS {
                    self.cut_both(Addr::Broker(node), Addr::Store, ms);
                }
            }
            Fault::Heal { a, b } => self.net.heal(a, b),
            Fault::Resume { node } => {
                if node == u32::MAX {
                    self.random_fault();
                } else {
                    self.brokers[node as usize].paused_until = 0;
                }
            }
            Fault::DeleteTopic {
                partition,
                recreate_after_ms,
            } => self.delete_topic(partition, recreate_after_ms),
            Fault::RecreateTopic { partition } => self.recreate_topic(partition),
            Fault::HealAll => {
                for partition in 0..self.plan.partitions {
                    self.recreate_topic(partition);
                }
                self.healed = true;
                self.net.heal_all();
                self.net.drop_per_mille = 0;
                self.net.slow_per_mille = 0;
                for node in 0..BROKERS {
                    self.brokers[node as usize].paused_until = 0;
                    self.restart(node);
                }
            }
        }
    }

    /// Draws the next random fault and schedules the one after.
    fn random_fault(&mut self) {
        let node = self.rng.gen_range(0..BROKERS);
        let target = match self.rng.gen_range(0..3) {
            0 => Target::Node(node),
            1 => Target::Leader(self.rng.gen_range(0..self.plan.partitions)),
            _ => Target::Follower(
                self.rng.gen_range(0..self.plan.partitions),
                self.rng.gen_range(0..2),
            ),
        };
        let ms = match self.rng.gen_range(0..3) {
            0 => self.rng.gen_range(50..600),
            1 => self.rng.gen_range(600..2_500),
            _ => self.rng.gen_range(2_500..5_000),
        };
        let fault = match self.rng.gen_range(0..100) {
            0..=19 => Fault::Pause { target, ms },
            20..=39 => {
                if let Some(node) = self.resolve(target) {
                    self.net.schedule(
                        self.now + ms,
                        Event::Fault(Fault::Restart {
                            node: Some(node),
                            target,
                        }),
                    );
                }
                Fault::Crash { target }
            }
            40..=54 => Fault::IsolateFromBrokers { target, ms },
            55..=69 => Fault::CutFromStore { target, ms },
            70..=89 => {
                let other = Target::Node(self.rng.gen_range(0..BROKERS));
                let one_way = self.rng.gen_bool(0.5);
                Fault::CutLink {
                    a: target,
                    b: other,
                    one_way,
                    ms,
                }
            }
            _ => Fault::StoreUnreachable { ms },
        };
        self.fault(fault);
        let next = self.now + self.rng.gen_range(100..1_500);
        if next < self.plan.heal_ms {
            self.net
                .schedule(next, Event::Fault(Fault::Resume { node: u32::MAX }));
        }
    }

    // ----- the end -----

    pub fn log_summary(&self) -> String {
        let mut out = String::new();
        for partition in 0..self.plan.partitions {
            match self.store.partition(partition) {
                Some(state) => writeln!(
                    out,
                    "p{partition}: store {:?} rev {} lineage {:?}",
                    state.value,
                    state.revision,
                    self.store.lineage_of(partition)
                ),
                None => writeln!(out, "p{partition}: deleted"),
            }
            .expect("a String takes writes");
            for node in 0..BROKERS as usize {
                let log = &self.logs[node][partition];
                let _ = writeln!(
                    out,
                    "  broker {node}: lineage {:?} end {} hw {} floor {} history {:?}",
                    self.brokers[node].local[partition],
                    log.log_end_offset(),
                    log.high_watermark(),
                    log.leader_epoch_floor(),
                    log.history()
                );
            }
        }
        out
    }
}

impl World {
    /// Truncations stopped by a high watermark, over every follower that ever ran.
    pub fn truncations_below_high_watermark_total(&self) -> u64 {
        let running: u64 = self
            .brokers
            .iter()
            .flat_map(|b| b.parts.iter())
            .map(|part| part.node.truncations_below_high_watermark())
            .sum();
        self.truncations_below_high_watermark + running
    }
}
