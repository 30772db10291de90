//! The simulated network and event queue: messages between brokers, the store and clients with
//! seeded delays and drops, cuts between any pair (one way or both), and one ordered queue of
//! timed events (ties broken by insertion order, so a seed replays exactly).

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use fencelog::cluster::replication::{
    EpochEndRequest, FetchError, FetchRequest, FetchResponse, LiveBrokers, Proposal,
};
use fencelog::cluster::{LeaderEpoch, NodeId};

use super::lineage::PartitionView;
use rand::rngs::StdRng;
use rand::Rng;

/// An endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Addr {
    Broker(NodeId),
    Store,
    Client(usize),
}

/// What a produce came to, as the broker answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProduceAnswer {
    /// Acknowledged: the first value is at this offset.
    Acked {
        base_offset: u64,
        broker: NodeId,
        epoch: LeaderEpoch,
        /// The lineage of the leader's local copy (`lineage.rs`).
        lineage: u32,
    },
    /// Refused before anything was written.
    Refused(String),
    /// Written, but not acknowledged: outcome unknown.
    Failed(String),
}

#[derive(Debug, Clone)]
pub enum StoreOp {
    Register {
        incarnation: u64,
        sent_ms: u64,
    },
    KeepAlive {
        lease: u64,
        sent_ms: u64,
    },
    Read,
    Cas {
        partition: usize,
        proposal: Proposal,
        election: bool,
        id: u64,
        /// Which opening of the proposer's replica proposed (a replica deleted and opened again
        /// for a re-created topic drops its predecessor's answers, as a stopped replica's
        /// requests die with it in the driver).
        opened: u64,
    },
}

#[derive(Debug, Clone)]
pub enum StoreAnswer {
    Registered {
        lease: u64,
    },
    KeptAlive(bool),
    Read {
        partitions: Vec<PartitionView>,
        live: LiveBrokers,
        /// The store's revision the read saw (etcd's header revision).
        revision: i64,
    },
    Cas(Option<i64>),
}

#[derive(Debug, Clone)]
pub enum Msg {
    Fetch {
        partition: usize,
        request: FetchRequest,
        tag: u64,
    },
    FetchAnswer {
        partition: usize,
        tag: u64,
        result: Result<(FetchResponse, Vec<u8>), FetchError>,
        /// Every record of the leader's below its log start (their number is that log start)
        /// when the follower's log starts below it: the filler of a start-over after
        /// `BelowLogStart`, or of the follower adopting the leader's log start after an append
        /// (`log.rs`); empty otherwise.
        deleted: Vec<super::log::Record>,
    },
    EpochEnd {
        partition: usize,
        request: EpochEndRequest,
        tag: u64,
    },
    EpochEndAnswer {
        partition: usize,
        tag: u64,
        result: Result<Option<(LeaderEpoch, u64)>, FetchError>,
    },
    StoreRequest {
        from: NodeId,
        generation: u64,
        op: StoreOp,
    },
    StoreResponse {
        generation: u64,
        op: StoreOp,
        answer: StoreAnswer,
    },
    Produce {
        client: usize,
        request: u64,
        partition: usize,
        values: Vec<u64>,
    },
    ProduceResponse {
        request: u64,
        answer: ProduceAnswer,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    KeepAlive,
    Poll,
    Tick,
    FollowerRetry {
        partition: usize,
        tag: u64,
    },
    Sync {
        partition: usize,
    },
    CasTimeout {
        partition: usize,
        id: u64,
    },
    /// A time the replica's node asked to be woken at (an election turn, a restart pause).
    Wake {
        partition: usize,
    },
}

/// Who a scripted fault hits, resolved from the store's state when it fires.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    Node(NodeId),
    /// The partition's leader as the store names it.
    Leader(usize),
    /// The `k`-th replica of the partition that the store does not name leader.
    Follower(usize, usize),
}

#[derive(Debug, Clone)]
pub enum Fault {
    Pause {
        target: Target,
        ms: u64,
    },
    Crash {
        target: Target,
    },
    Restart {
        node: Option<NodeId>,
        target: Target,
    },
    /// Cut `target` from every other broker (not from the store) for `ms`.
    IsolateFromBrokers {
        target: Target,
        ms: u64,
    },
    /// Cut `target` from the store for `ms`.
    CutFromStore {
        target: Target,
        ms: u64,
    },
    /// Cut one link between two brokers (one way when `one_way`).
    CutLink {
        a: Target,
        b: Target,
        one_way: bool,
        ms: u64,
    },
    /// Cut every broker from the store for `ms`.
    StoreUnreachable {
        ms: u64,
    },
    /// Heal one link.
    Heal {
        a: Addr,
        b: Addr,
    },
    /// Resume a paused broker.
    Resume {
        node: NodeId,
    },
    /// Delete partition `partition`'s topic (`lineage.rs`); re-create it `recreate_after_ms`
    /// later (at the heal at the latest).
    DeleteTopic {
        partition: usize,
        recreate_after_ms: u64,
    },
    /// Re-create partition `partition`'s deleted topic.
    RecreateTopic {
        partition: usize,
    },
    /// End of the fault phase: resume, restart and heal everything; a quiet network from now.
    /// Deleted topics are re-created.
    HealAll,
}

#[derive(Debug, Clone)]
pub enum Event {
    Deliver {
        to: Addr,
        from: Addr,
        msg: Msg,
    },
    Timer {
        broker: NodeId,
        generation: u64,
        timer: Timer,
    },
    Fault(Fault),
    ClientTick(usize),
    ConsumerTick,
    CheckTick,
}

/// The event queue and the network's state.
pub struct Net {
    queue: BinaryHeap<(Reverse<u64>, Reverse<u64>, usize)>,
    slots: Vec<Option<Event>>,
    free: Vec<usize>,
    sequence: u64,
    /// Directed cuts: (from, to).
    cuts: BTreeSet<(Addr, Addr)>,
    pub drop_per_mille: u32,
    pub slow_per_mille: u32,
    pub delivered: u64,
    pub dropped: u64,
}

impl Net {
    pub fn new() -> Self {
        Net {
            queue: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            sequence: 0,
            cuts: BTreeSet::new(),
            drop_per_mille: 0,
            slow_per_mille: 0,
            delivered: 0,
            dropped: 0,
        }
    }

    pub fn schedule(&mut self, at_ms: u64, event: Event) {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(event);
                slot
            }
            None => {
                self.slots.push(Some(event));
                self.slots.len() - 1
            }
        };
        self.sequence += 1;
        self.queue
            .push((Reverse(at_ms), Reverse(self.sequence), slot));
    }

    pub fn next(&mut self) -> Option<(u64, Event)> {
        let (Reverse(at_ms), _, slot) = self.queue.pop()?;
        let event = self.slots[slot]
            .take()
            .expect("scheduled slot holds an event");
        self.free.push(slot);
        Some((at_ms, event))
    }

    pub fn is_cut(&self, from: Addr, to: Addr) -> bool {
        self.cuts.contains(&(from, to))
    }

    pub fn cut(&mut self, from: Addr, to: Addr) {
        self.cuts.insert((from, to));
    }

    pub fn heal(&mut self, from: Addr, to: Addr) {
        self.cuts.remove(&(from, to));
    }

    pub fn heal_all(&mut self) {
        self.cuts.clear();
    }

    /// Sends a message: dropped if the link is cut or by chance, else delivered after a seeded
    /// delay (a few milliseconds, sometimes much longer).
    pub fn send(&mut self, rng: &mut StdRng, now_ms: u64, from: Addr, to: Addr, msg: Msg) {
        if self.is_cut(from, to) || rng.gen_range(0..1000) < self.drop_per_mille {
            self.dropped += 1;
            return;
        }
        let delay = if rng.gen_range(0..1000) < self.slow_per_mille {
            rng.gen_range(20..300)
        } else {
            rng.gen_range(1..6)
        };
        self.schedule(now_ms + delay, Event::Deliver { to, from, msg });
    }
}
