//! The leader's view of one partition: how far each follower has replicated, the in-sync replica
//! set as last read from the metadata store, the high watermark, the `acks=all` produces waiting
//! for it, and the ISR changes to propose.
//!
//! Safety rests on three rules kept here. The high watermark is the lowest log end over the ISR
//! (the leader's own counted only as far as its flush policy made it durable, followers only from
//! fetches that carried this leader epoch), so a committed record is on every replica that may
//! become leader; while an ISR change is in flight the ISR counted is the union of the old and
//! the proposed one. A leader that cannot prove it still leads (its own registration lapsed by
//! its own conservative clock, a fetch or a read showed a newer epoch, a compare-and-swap
//! discovered a newer state) is deposed for good: it fails its waiters, advances nothing and
//! answers nothing; the broker re-reads the partition state and, if still named leader,
//! re-elects itself with a new epoch. And the high watermark consumers see is withheld until it
//! reaches the start of this leader's epoch, so a new leader never shows them less than its
//! predecessor did.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use thiserror::Error;

use super::epoch_range::epoch_containing;
use super::{
    CasOutcome, EpochEndRequest, FetchError, FetchRequest, FetchServe, LiveBrokers, Proposal,
    ReplicaLog, ReplicationConfig,
};
use crate::cluster::{LeaderEpoch, NodeId, PartitionState, Versioned};

/// How many of a follower's latest requests the leader remembers its own log end at (see
/// [`FollowerProgress`]): a pipelined follower has at most a fetch and a progress report
/// outstanding, so its report of a log end always refers to one of the last few.
const RECENT_LEADER_ENDS: usize = 4;

/// How far one follower has replicated, from its fetches in this leader epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerProgress {
    /// The follower's log end, from its latest fetch or progress report.
    pub fetch_offset: u64,
    /// The last time the follower had everything the leader had (Kafka's `lastCaughtUpTime`).
    pub last_caught_up_ms: u64,
    /// The incarnation its fetches carried.
    pub incarnation: u64,
    /// The leader's log end when the follower's latest requests arrived, and when, oldest first
    /// (`recent_len` of them). A later request that reports a log end at or past one of them
    /// proves the follower had, at that time, everything the leader had: Kafka's caught-up rule
    /// ("the fetch offset reached the leader's log end of the previous fetch"), kept for a few
    /// requests back because a pipelined follower reports its log end one request late.
    recent_leader_ends: [(u64, u64); RECENT_LEADER_ENDS],
    recent_len: usize,
}

impl FollowerProgress {
    /// Credits the follower for a request reporting `log_end` at `now_ms`, when the leader's own
    /// log ends at `leader_end`.
    fn record(&mut self, now_ms: u64, log_end: u64, leader_end: u64) {
        self.fetch_offset = self.fetch_offset.max(log_end);
        if log_end >= leader_end {
            self.last_caught_up_ms = now_ms;
            self.recent_len = 0;
        } else {
            let recent = &self.recent_leader_ends[..self.recent_len];
            if let Some(reached) = recent.iter().rposition(|(end, _)| *end <= log_end) {
                self.last_caught_up_ms = self.last_caught_up_ms.max(recent[reached].1);
                self.recent_leader_ends
                    .copy_within(reached + 1..self.recent_len, 0);
                self.recent_len -= reached + 1;
            }
        }
        if self.recent_len == RECENT_LEADER_ENDS {
            // Forget the oldest: a later report can only be credited less, never more.
            self.recent_leader_ends.copy_within(1.., 0);
            self.recent_len -= 1;
        }
        self.recent_leader_ends[self.recent_len] = (leader_end, now_ms);
        self.recent_len += 1;
    }
}

/// Why a produce was refused before anything was written (a definite "not written").
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum ProduceRefusal {
    /// This broker no longer leads the partition (or cannot prove it does).
    #[error("not the leader of this partition; refresh metadata and send to the current leader")]
    NotLeader,
    /// The ISR is smaller than `min_insync`: an `acks=all` write could not be made safe.
    #[error("not enough in-sync replicas: {isr} in sync, {min_insync} required; wait for followers to catch up")]
    NotEnoughReplicas {
        /// Size of the ISR.
        isr: usize,
        /// The partition's `min_insync`.
        min_insync: u16,
    },
    /// Too many `acks=all` produces are already waiting.
    #[error("{waiting} acks=all produces are already waiting for replication (limit acks_all_waiters_max); retry later")]
    TooManyWaiters {
        /// How many wait.
        waiting: usize,
    },
}

/// Why an `acks=all` produce written to the leader's log was not acknowledged. Its records may
/// or may not survive: the producer must treat the outcome as unknown.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum AcksAllError {
    /// The leader was deposed (or could not prove it still led) before the records committed.
    #[error("the leader was deposed before the write committed; its outcome is unknown")]
    Deposed,
    /// The records did not commit within `acks_all_timeout_ms`.
    #[error("the write did not replicate within acks_all_timeout_ms; its outcome is unknown")]
    TimedOut,
    /// The records committed while the ISR was smaller than `min_insync`.
    #[error("the write committed with {isr} in-sync replicas, below min_insync {min_insync}")]
    NotEnoughReplicasAfterAppend {
        /// Size of the ISR.
        isr: usize,
        /// The partition's `min_insync`.
        min_insync: u16,
    },
}

/// An `acks=all` produce answered: `id` is the driver's, given to [`Leader::on_appended`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaiterCompletion {
    /// The driver's id of the produce.
    pub id: u64,
    /// Acknowledged (`Ok`), or why not.
    pub result: Result<(), AcksAllError>,
}

/// What the driver must do after a leader input.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderOutput {
    /// Answer these `acks=all` produces.
    pub completions: Vec<WaiterCompletion>,
    /// Raise the log's high watermark to this ([`ReplicaLog::advance_high_watermark`]).
    pub high_watermark: Option<u64>,
    /// Send this compare-and-swap to the metadata store, then call [`Leader::on_cas_outcome`].
    pub proposal: Option<Proposal>,
    /// Re-read the partition state and call [`Leader::on_partition_read`] (a compare-and-swap
    /// failed or its outcome is unknown).
    pub reread: bool,
    /// The leader was deposed by this input: drop it, re-read the partition state and follow
    /// (or re-elect itself) from there.
    pub deposed: bool,
}

/// Why the leader could not be started.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LeaderStartError {
    /// The partition state read does not name this broker as leader.
    #[error("the partition state names {leader:?} as leader, not broker {node_id}")]
    NotNamedLeader {
        /// This broker.
        node_id: NodeId,
        /// The leader named.
        leader: Option<NodeId>,
    },
    /// The partition state names this broker leader but not in its ISR (a corrupt state).
    #[error("the partition state names broker {node_id} leader but not in its ISR")]
    LeaderNotInIsr {
        /// This broker.
        node_id: NodeId,
    },
    /// The configuration cannot work.
    #[error(transparent)]
    Config(#[from] super::ReplicationConfigError),
}

/// What a new leader starts from: the partition state that names it and its log's figures after
/// [`ReplicaLog::become_leader`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderStart {
    /// The partition state (naming this broker leader) with its revision.
    pub partition: Versioned<PartitionState>,
    /// The log end offset (the start of this leader's epoch).
    pub log_end_offset: u64,
    /// How far the log is durable under its flush policy.
    pub durable_end_offset: u64,
    /// The log's high watermark.
    pub high_watermark: u64,
    /// Now.
    pub now_ms: u64,
    /// When this broker's registration lapses by its own clock (see
    /// [`Leader::on_registration_renewed`]).
    pub registration_valid_until_ms: u64,
    /// Which registration that is (the store's lease id; 0: none). Only its renewals count.
    pub registration: u64,
}

/// One `acks=all` produce waiting for the high watermark.
#[derive(Debug, Clone, Copy)]
struct Waiter {
    id: u64,
    last_offset: u64,
    deadline_ms: u64,
}

/// The leader of one partition in one leader epoch. Created after the log's
/// [`ReplicaLog::become_leader`] returned; dropped once deposed.
#[derive(Debug)]
pub struct Leader {
    node_id: NodeId,
    config: ReplicationConfig,
    partition: Versioned<PartitionState>,
    epoch_start_offset: u64,
    leader_since_ms: u64,
    followers: BTreeMap<NodeId, FollowerProgress>,
    durable_end_offset: u64,
    high_watermark: u64,
    registration_valid_until_ms: u64,
    /// The registration this leader was elected under (see [`Leader::on_registration_renewed`]).
    registration: u64,
    deposed: bool,
    waiters: VecDeque<Waiter>,
    /// The compare-and-swap sent and not yet settled, and the members it adds (counted in the
    /// high watermark until a read shows the key moved past the expected revision).
    in_flight: Option<Proposal>,
    /// A compare-and-swap failed or its outcome is unknown: no new proposal until a read.
    awaiting_read: bool,
}

impl Leader {
    /// Starts leading `start.partition`, which must name `node_id` leader.
    pub fn new(
        node_id: NodeId,
        config: ReplicationConfig,
        start: LeaderStart,
    ) -> Result<Self, LeaderStartError> {
        config.validate()?;
        let LeaderStart {
            partition,
            log_end_offset,
            durable_end_offset,
            high_watermark,
            now_ms,
            registration_valid_until_ms,
            registration,
        } = start;
        if partition.value.leader != Some(node_id) {
            return Err(LeaderStartError::NotNamedLeader {
                node_id,
                leader: partition.value.leader,
            });
        }
        if !partition.value.isr.contains(&node_id) {
            return Err(LeaderStartError::LeaderNotInIsr { node_id });
        }
        Ok(Leader {
            node_id,
            config,
            partition,
            epoch_start_offset: log_end_offset,
            leader_since_ms: now_ms,
            followers: BTreeMap::new(),
            durable_end_offset,
            high_watermark,
            registration_valid_until_ms,
            registration,
            deposed: false,
            waiters: VecDeque::new(),
            in_flight: None,
            awaiting_read: false,
        })
    }

    /// The leader epoch this leader serves.
    pub fn epoch(&self) -> LeaderEpoch {
        self.partition.value.leader_epoch
    }

    /// The partition state as last read or written, with its revision.
    pub fn partition(&self) -> &Versioned<PartitionState> {
        &self.partition
    }

    /// The high watermark (never goes down).
    pub fn high_watermark(&self) -> u64 {
        self.high_watermark
    }

    /// The offset of this leader's first record (its log end when it took over).
    pub fn epoch_start_offset(&self) -> u64 {
        self.epoch_start_offset
    }

    /// Each follower's progress in this epoch.
    pub fn followers(&self) -> &BTreeMap<NodeId, FollowerProgress> {
        &self.followers
    }

    /// Whether this leader was deposed (it then does nothing).
    pub fn is_deposed(&self) -> bool {
        self.deposed
    }

    /// How many `acks=all` produces wait.
    pub fn waiting(&self) -> usize {
        self.waiters.len()
    }

    /// Whether this leader may acknowledge anything at `now_ms`: not deposed and its registration
    /// valid by its own clock.
    pub fn can_acknowledge(&self, now_ms: u64) -> bool {
        !self.deposed && now_ms < self.registration_valid_until_ms
    }

    /// The high watermark consumers may see at `now_ms`, or `None` while this leader cannot
    /// acknowledge or its high watermark is still below the start of its epoch (the predecessor
    /// may have shown consumers up to there).
    pub fn consumer_high_watermark(&self, now_ms: u64) -> Option<u64> {
        (self.can_acknowledge(now_ms) && self.high_watermark >= self.epoch_start_offset)
            .then_some(self.high_watermark)
    }

    /// This broker's registration `registration` was renewed: a keep-alive *sent* at `sent_ms`
    /// succeeded on a lease of `ttl_ms`, so the store cannot expire it before `sent_ms + ttl_ms`.
    /// A lapse already observed is not undone (the leader is deposed). Nor is one not observed:
    /// a renewal of another registration than the one this leader was elected under (the broker
    /// lost that one and registered again, perhaps while paused or cut off, and a successor may
    /// have been elected meanwhile) extends nothing, so the leader stops acknowledging when the
    /// old one lapses, and re-elects itself with a new epoch if it is still the one named.
    pub fn on_registration_renewed(&mut self, registration: u64, valid_until_ms: u64) {
        if registration == self.registration {
            self.registration_valid_until_ms = self.registration_valid_until_ms.max(valid_until_ms);
        }
    }

    /// Checks whether a produce may be written now (before the driver appends anything).
    pub fn check_produce(&mut self, now_ms: u64) -> Result<(), ProduceRefusal> {
        if !self.observe_time(now_ms) {
            return Err(ProduceRefusal::NotLeader);
        }
        let isr = self.partition.value.isr.len();
        let min_insync = self.partition.value.min_insync;
        if isr < usize::from(min_insync) {
            return Err(ProduceRefusal::NotEnoughReplicas { isr, min_insync });
        }
        if self.waiters.len() >= self.config.acks_all_waiters_max {
            return Err(ProduceRefusal::TooManyWaiters {
                waiting: self.waiters.len(),
            });
        }
        Ok(())
    }

    /// A produce accepted by [`Leader::check_produce`] was appended; its last record is at
    /// `last_offset`. It is answered through a later [`LeaderOutput::completions`].
    pub fn on_appended(&mut self, now_ms: u64, id: u64, last_offset: u64) -> LeaderOutput {
        let mut output = LeaderOutput::default();
        if !self.observe_time(now_ms) {
            output.completions.push(WaiterCompletion {
                id,
                result: Err(AcksAllError::Deposed),
            });
            output.deposed = true;
            return output;
        }
        self.waiters.push_back(Waiter {
            id,
            last_offset,
            deadline_ms: now_ms.saturating_add(self.config.acks_all_timeout_ms),
        });
        output
    }

    /// The leader's own log is durable up to `durable_end_offset` (its flush policy synced it).
    pub fn on_local_durable(&mut self, now_ms: u64, durable_end_offset: u64) -> LeaderOutput {
        let mut output = LeaderOutput::default();
        if !self.observe_time(now_ms) {
            return self.deposed_output(output);
        }
        self.durable_end_offset = self.durable_end_offset.max(durable_end_offset);
        self.advance(&mut output);
        output
    }

    /// Answers a follower's fetch (or records its progress report, serving nothing). `log` is
    /// this leader's log (read only).
    pub fn on_fetch(
        &mut self,
        now_ms: u64,
        request: &FetchRequest,
        log: &dyn ReplicaLog,
    ) -> (Result<FetchServe, FetchError>, LeaderOutput) {
        let mut output = LeaderOutput::default();
        if let Err(error) = self.check_asker(now_ms, request.follower, request.leader_epoch) {
            if self.deposed {
                output = self.deposed_output(output);
            }
            return (Err(error), output);
        }
        let log_end_offset = log.log_end_offset();
        if request.fetch_offset > log_end_offset {
            return (
                Err(FetchError::OffsetOutOfRange {
                    fetch_offset: request.fetch_offset,
                    high_watermark: self.high_watermark,
                }),
                output,
            );
        }
        self.record_progress(now_ms, request, log_end_offset);
        self.advance(&mut output);
        let serve = match epoch_containing(log, request.fetch_offset) {
            // A progress report: nothing to send.
            _ if request.report_only => FetchServe {
                from_offset: request.fetch_offset,
                to_offset: request.fetch_offset,
                records_epoch: self.epoch(),
                high_watermark: self.high_watermark,
            },
            Some((records_epoch, to_offset)) => FetchServe {
                from_offset: request.fetch_offset,
                to_offset,
                records_epoch,
                high_watermark: self.high_watermark,
            },
            None => FetchServe {
                from_offset: request.fetch_offset,
                to_offset: request.fetch_offset,
                records_epoch: self.epoch(),
                high_watermark: self.high_watermark,
            },
        };
        (Ok(serve), output)
    }

    /// Answers a follower's epoch-end question (OffsetsForLeaderEpoch) from this leader's log:
    /// the largest epoch `<=` the one asked and where it ended.
    pub fn on_epoch_end(
        &mut self,
        now_ms: u64,
        request: &EpochEndRequest,
        log: &dyn ReplicaLog,
    ) -> (Result<Option<(LeaderEpoch, u64)>, FetchError>, LeaderOutput) {
        let mut output = LeaderOutput::default();
        if let Err(error) = self.check_asker(now_ms, request.follower, request.leader_epoch) {
            if self.deposed {
                output = self.deposed_output(output);
            }
            return (Err(error), output);
        }
        (Ok(log.end_offset_for_epoch(request.epoch)), output)
    }

    /// A timer: fails produces past their deadline and proposes ISR changes (a follower lagging
    /// more than `replica_lag_max_ms` or whose registration is gone leaves; one caught up with
    /// the high watermark and this epoch's start, whose incarnation matches its live
    /// registration, joins). `live` is the registrations as last read.
    pub fn on_tick(&mut self, now_ms: u64, live: &LiveBrokers) -> LeaderOutput {
        let mut output = LeaderOutput::default();
        if !self.observe_time(now_ms) {
            return self.deposed_output(output);
        }
        while let Some(position) = self.waiters.iter().position(|w| w.deadline_ms <= now_ms) {
            let waiter = self.waiters.remove(position).expect("position is in range");
            output.completions.push(WaiterCompletion {
                id: waiter.id,
                result: Err(AcksAllError::TimedOut),
            });
        }
        if self.in_flight.is_none() && !self.awaiting_read {
            if let Some(isr) = self.desired_isr(now_ms, live) {
                let mut state = self.partition.value.clone();
                state.isr = isr;
                let proposal = Proposal {
                    expected_revision: self.partition.revision,
                    state,
                };
                self.in_flight = Some(proposal.clone());
                output.proposal = Some(proposal);
            }
        }
        output
    }

    /// The store answered the proposal from [`LeaderOutput::proposal`].
    pub fn on_cas_outcome(&mut self, now_ms: u64, outcome: CasOutcome) -> LeaderOutput {
        let mut output = LeaderOutput::default();
        if !self.observe_time(now_ms) {
            return self.deposed_output(output);
        }
        match outcome {
            CasOutcome::Applied { revision } => {
                if let Some(proposal) = self.in_flight.take() {
                    if revision > self.partition.revision {
                        self.partition = Versioned {
                            value: proposal.state,
                            revision,
                        };
                    }
                }
                self.advance(&mut output);
            }
            CasOutcome::Conflict | CasOutcome::Unknown => {
                // The proposal stays counted (if it adds members) until a read shows the key
                // moved past its expected revision: only then can it no longer apply.
                self.awaiting_read = true;
                output.reread = true;
            }
        }
        output
    }

    /// The partition state read from the store (a periodic read, a watch, or the re-read asked
    /// for). A newer leader epoch or another leader deposes this one.
    pub fn on_partition_read(
        &mut self,
        now_ms: u64,
        read: &Versioned<PartitionState>,
    ) -> LeaderOutput {
        let mut output = LeaderOutput::default();
        if !self.observe_time(now_ms) {
            return self.deposed_output(output);
        }
        if read.revision < self.partition.revision {
            return output;
        }
        if read.value.leader != Some(self.node_id) || read.value.leader_epoch != self.epoch() {
            self.depose();
            return self.deposed_output(output);
        }
        self.partition = read.clone();
        if let Some(proposal) = &self.in_flight {
            if read.revision > proposal.expected_revision {
                self.in_flight = None;
            }
        }
        match &self.in_flight {
            None => self.awaiting_read = false,
            Some(proposal) if self.awaiting_read => {
                // The key has not moved since the proposal whose answer was lost: it may still
                // apply, so it stays counted; sending it again settles it either way.
                output.proposal = Some(proposal.clone());
                self.awaiting_read = false;
            }
            Some(_) => {}
        }
        self.advance(&mut output);
        output
    }

    /// Deposes this leader now (the broker learned from elsewhere that it no longer leads, or is
    /// shutting the partition down): every waiter fails.
    pub fn depose_now(&mut self) -> LeaderOutput {
        self.depose();
        self.deposed_output(LeaderOutput::default())
    }

    /// Checks the asker of a fetch or epoch-end question: a replica, this epoch.
    fn check_asker(
        &mut self,
        now_ms: u64,
        follower: NodeId,
        epoch: LeaderEpoch,
    ) -> Result<(), FetchError> {
        if !self.observe_time(now_ms) {
            return Err(FetchError::NotLeader);
        }
        if follower == self.node_id || !self.partition.value.replicas.contains(&follower) {
            return Err(FetchError::NotAReplica { follower });
        }
        if epoch < self.epoch() {
            return Err(FetchError::FencedLeaderEpoch {
                epoch,
                current: self.epoch(),
            });
        }
        if epoch > self.epoch() {
            // The follower saw a newer leader epoch in the store: this broker was deposed.
            self.depose();
            return Err(FetchError::NotLeader);
        }
        Ok(())
    }

    /// Records a fetch as the follower's progress (Kafka's caught-up rule, see
    /// [`FollowerProgress`]).
    fn record_progress(&mut self, now_ms: u64, request: &FetchRequest, log_end_offset: u64) {
        let fresh = FollowerProgress {
            fetch_offset: 0,
            last_caught_up_ms: self.leader_since_ms,
            incarnation: request.incarnation,
            recent_leader_ends: [(0, 0); RECENT_LEADER_ENDS],
            recent_len: 0,
        };
        let progress = self.followers.entry(request.follower).or_insert(fresh);
        if progress.incarnation != request.incarnation {
            // A restarted follower: what the old process reported says nothing about this one.
            *progress = fresh;
        }
        progress.record(now_ms, request.reported_log_end(), log_end_offset);
    }

    /// The ISR this leader wants, if it differs from the one read.
    fn desired_isr(&self, now_ms: u64, live: &LiveBrokers) -> Option<Vec<NodeId>> {
        let state = &self.partition.value;
        let lag_max = self.config.replica_lag_max_ms;
        let keep = |node: &NodeId| -> bool {
            if *node == self.node_id {
                return true;
            }
            let Some(incarnation) = live.get(node) else {
                return false;
            };
            match self.followers.get(node) {
                Some(progress) => {
                    progress.incarnation == *incarnation
                        && now_ms.saturating_sub(progress.last_caught_up_ms) <= lag_max
                }
                None => now_ms.saturating_sub(self.leader_since_ms) <= lag_max,
            }
        };
        // Joining asks what keeping asks, and more: a follower that stopped fetching (crashed
        // while its registration lives on) would otherwise be proposed out for lagging and back
        // in for holding the high watermark, over and over (Kafka's expansion asks `isCaughtUp`
        // too).
        let join = |node: &NodeId| -> bool {
            match (self.followers.get(node), live.get(node)) {
                (Some(progress), Some(incarnation)) => {
                    progress.incarnation == *incarnation
                        && now_ms.saturating_sub(progress.last_caught_up_ms) <= lag_max
                        && progress.fetch_offset >= self.high_watermark
                        && progress.fetch_offset >= self.epoch_start_offset
                }
                _ => false,
            }
        };
        let isr: Vec<NodeId> = state
            .replicas
            .iter()
            .copied()
            .filter(|node| {
                if state.isr.contains(node) {
                    keep(node)
                } else {
                    join(node)
                }
            })
            .collect();
        let same = isr.len() == state.isr.len() && isr.iter().all(|n| state.isr.contains(n));
        (!same).then_some(isr)
    }

    /// Raises the high watermark as far as the ISR (and any member an in-flight proposal adds)
    /// allows, and answers the waiters it passed.
    fn advance(&mut self, output: &mut LeaderOutput) {
        let mut members: BTreeSet<NodeId> = self.partition.value.isr.iter().copied().collect();
        if let Some(proposal) = &self.in_flight {
            members.extend(proposal.state.isr.iter().copied());
        }
        let mut candidate = self.durable_end_offset;
        for member in members.iter().filter(|m| **m != self.node_id) {
            match self.followers.get(member) {
                Some(progress) => candidate = candidate.min(progress.fetch_offset),
                None => return,
            }
        }
        if candidate <= self.high_watermark {
            return;
        }
        self.high_watermark = candidate;
        output.high_watermark = Some(candidate);
        let isr = self.partition.value.isr.len();
        let min_insync = self.partition.value.min_insync;
        while let Some(waiter) = self.waiters.front() {
            if waiter.last_offset >= candidate {
                break;
            }
            let waiter = self.waiters.pop_front().expect("front exists");
            let result = if isr >= usize::from(min_insync) {
                Ok(())
            } else {
                Err(AcksAllError::NotEnoughReplicasAfterAppend { isr, min_insync })
            };
            output.completions.push(WaiterCompletion {
                id: waiter.id,
                result,
            });
        }
    }

    /// Deposes the leader if its registration lapsed; returns whether it may still act.
    fn observe_time(&mut self, now_ms: u64) -> bool {
        if !self.deposed && now_ms >= self.registration_valid_until_ms {
            self.depose();
        }
        !self.deposed
    }

    fn depose(&mut self) {
        self.deposed = true;
    }

    /// Fails every waiter and says the leader is deposed.
    fn deposed_output(&mut self, mut output: LeaderOutput) -> LeaderOutput {
        output.deposed = true;
        output
            .completions
            .extend(self.waiters.drain(..).map(|waiter| WaiterCompletion {
                id: waiter.id,
                result: Err(AcksAllError::Deposed),
            }));
        output
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::replica_log::ReplicaLogError;

    /// A log that is only a leader-epoch history and an end: what the leader reads.
    struct HistoryLog {
        history: Vec<(LeaderEpoch, u64)>,
        end: u64,
    }

    impl ReplicaLog for HistoryLog {
        fn log_end_offset(&self) -> u64 {
            self.end
        }
        fn log_start_offset(&self) -> u64 {
            0
        }
        fn high_watermark(&self) -> u64 {
            0
        }
        fn durable_end_offset(&self) -> u64 {
            self.log_end_offset()
        }
        fn leader_epoch_floor(&self) -> LeaderEpoch {
            self.history.last().map_or(0, |(epoch, _)| *epoch)
        }
        fn latest_epoch_entry(&self) -> Option<(LeaderEpoch, u64)> {
            self.history.last().copied()
        }
        fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, u64)> {
            crate::storage::leader_epochs::end_offset_for(&self.history, epoch, self.end)
        }
        fn become_leader(&self, _: LeaderEpoch) -> Result<(), ReplicaLogError> {
            unreachable!()
        }
        fn become_follower(&self, _: LeaderEpoch) -> Result<(), ReplicaLogError> {
            unreachable!()
        }
        fn append_replicated(
            &self,
            _: &[u8],
            _: LeaderEpoch,
            _: LeaderEpoch,
        ) -> Result<u64, ReplicaLogError> {
            unreachable!()
        }
        fn truncate_to(&self, _: u64) -> Result<(), ReplicaLogError> {
            unreachable!()
        }
        fn start_over_at(&self, _: u64) -> Result<(), ReplicaLogError> {
            unreachable!()
        }
        fn advance_high_watermark(&self, _: u64) {}
    }

    const EPOCH: LeaderEpoch = 5;

    fn leader(isr: Vec<NodeId>, log_end_offset: u64) -> Leader {
        let partition = Versioned {
            value: PartitionState {
                replicas: vec![0, 1, 2],
                leader: Some(0),
                leader_epoch: EPOCH,
                isr,
                min_insync: 2,
            },
            revision: 10,
        };
        let start = LeaderStart {
            partition,
            log_end_offset,
            durable_end_offset: log_end_offset,
            high_watermark: 0,
            now_ms: 0,
            registration_valid_until_ms: 1_000,
            registration: 1,
        };
        Leader::new(0, ReplicationConfig::default(), start).unwrap()
    }

    fn log(end: u64) -> HistoryLog {
        HistoryLog {
            history: vec![(3, 0), (EPOCH, 4)],
            end,
        }
    }

    fn fetch(follower: NodeId, leader_epoch: LeaderEpoch, fetch_offset: u64) -> FetchRequest {
        FetchRequest {
            follower,
            incarnation: 7,
            leader_epoch,
            fetch_offset,
            log_end_offset: fetch_offset,
            report_only: false,
        }
    }

    fn pipelined(fetch_offset: u64, log_end_offset: u64) -> FetchRequest {
        FetchRequest {
            log_end_offset,
            ..fetch(1, EPOCH, fetch_offset)
        }
    }

    fn report(log_end_offset: u64) -> FetchRequest {
        FetchRequest {
            report_only: true,
            ..pipelined(log_end_offset, log_end_offset)
        }
    }

    /// A pipelined fetch counts the follower's log end, not where it reads from (nor a log end
    /// past that); the progress report after its append commits, and serves nothing.
    #[test]
    fn a_pipelined_fetch_counts_its_log_end_and_the_report_commits() {
        let mut leader = leader(vec![0, 1], 4);
        let log = log(10);
        leader.check_produce(1).unwrap();
        leader.on_appended(1, 1, 9);
        leader.on_local_durable(1, 10);
        let (served, output) = leader.on_fetch(2, &pipelined(8, 4), &log);
        assert_eq!(output.high_watermark, Some(4));
        assert!(output.completions.is_empty());
        let served = served.unwrap();
        assert_eq!((served.from_offset, served.to_offset), (8, 10));
        let (_, output) = leader.on_fetch(3, &pipelined(6, 9), &log);
        assert_eq!(output.high_watermark, Some(6), "capped at the fetch offset");
        let (served, output) = leader.on_fetch(4, &report(10), &log);
        assert_eq!(output.high_watermark, Some(10));
        assert_eq!(
            output.completions,
            vec![WaiterCompletion {
                id: 1,
                result: Ok(())
            }]
        );
        let served = served.unwrap();
        assert_eq!((served.from_offset, served.to_offset), (10, 10));
    }

    /// A follower that pipelines under steady load never has the leader's current log end when
    /// it asks (the leader's log grew meanwhile) and reports each log end one request late; it
    /// is caught up all the same (it has what the leader had one fetch earlier) and stays in
    /// the ISR far past `replica_lag_max_ms`.
    #[test]
    fn a_pipelining_follower_under_steady_load_stays_in_the_isr() {
        let mut leader = leader(vec![0, 1], 10);
        let live: LiveBrokers = [(0, 1), (1, 7)].into_iter().collect();
        leader.on_registration_renewed(1, 1_000_000);
        for step in 1..=60u64 {
            let now = step * 500;
            let leader_end = 10 * step + 10;
            let log = log(leader_end);
            leader.on_local_durable(now, leader_end);
            // Asks from past what it was sent last time while still appending it...
            let (served, _) = leader.on_fetch(now, &pipelined(10 * step, 10 * step - 10), &log);
            assert_eq!(served.unwrap().to_offset, leader_end);
            // ...then reports the append done, by when the leader's log has grown again.
            let (_, output) = leader.on_fetch(now + 100, &report(10 * step), &log);
            assert_eq!(leader.high_watermark(), 10 * step, "{output:?}");
            assert_eq!(
                leader.on_tick(now + 200, &live).proposal,
                None,
                "step {step}"
            );
        }
        // It had, at the previous report, everything the leader had then.
        assert_eq!(leader.followers()[&1].last_caught_up_ms, 59 * 500 + 100);
    }

    /// A renewal of another registration than the one the leader was elected under (the broker
    /// lost it and registered again) does not keep the leader acknowledging: it stops when the
    /// old registration lapses, even if it never looked in between.
    #[test]
    fn only_the_electing_registration_keeps_a_leader_acknowledging() {
        let mut leader = leader(vec![0, 1], 4);
        leader.on_registration_renewed(2, 60_000);
        assert!(!leader.can_acknowledge(1_000));
        assert_eq!(leader.consumer_high_watermark(1_000), None);
        leader.on_registration_renewed(1, 60_000);
        assert!(leader.can_acknowledge(1_000));
    }

    /// A follower that stopped fetching while its registration lives on (a crashed broker
    /// before its lease runs out) is proposed out for lagging and not back in, although its log
    /// end still reaches the high watermark.
    #[test]
    fn a_follower_that_stopped_fetching_is_not_proposed_back_in() {
        let mut leader = leader(vec![0, 1, 2], 4);
        let log = log(10);
        let live: LiveBrokers = [(0, 1), (1, 7), (2, 7)].into_iter().collect();
        leader.on_registration_renewed(1, 60_000);
        leader.on_local_durable(1, 10);
        leader.on_fetch(1, &fetch(1, EPOCH, 10), &log).0.unwrap();
        leader.on_fetch(1, &fetch(2, EPOCH, 10), &log).0.unwrap();
        assert_eq!(leader.high_watermark(), 10);
        leader
            .on_fetch(11_000, &fetch(1, EPOCH, 10), &log)
            .0
            .unwrap();
        let proposal = leader.on_tick(11_000, &live).proposal.expect("2 lags");
        assert_eq!(proposal.state.isr, vec![0, 1]);
        leader.on_cas_outcome(11_001, CasOutcome::Applied { revision: 11 });
        assert_eq!(leader.partition().value.isr, vec![0, 1]);
        assert_eq!(leader.on_tick(11_050, &live).proposal, None);
        // Once it fetches again (caught up), it joins.
        leader
            .on_fetch(11_100, &fetch(2, EPOCH, 10), &log)
            .0
            .unwrap();
        let proposal = leader.on_tick(11_100, &live).proposal.expect("2 is back");
        assert_eq!(proposal.state.isr, vec![0, 1, 2]);
    }

    /// The high watermark is the lowest log end over the ISR, waits for every member, and
    /// answers the `acks=all` waiters it passes.
    #[test]
    fn high_watermark_is_the_lowest_log_end_over_the_isr() {
        let mut leader = leader(vec![0, 1, 2], 4);
        let log = log(10);
        leader.check_produce(1).unwrap();
        assert!(leader.on_appended(1, 42, 6).completions.is_empty());
        let output = leader.on_local_durable(2, 10);
        assert_eq!(output.high_watermark, None, "no follower has fetched yet");
        let (_, output) = leader.on_fetch(3, &fetch(1, EPOCH, 8), &log);
        assert_eq!(
            output.high_watermark, None,
            "follower 2 has not fetched yet"
        );
        let (served, output) = leader.on_fetch(4, &fetch(2, EPOCH, 7), &log);
        assert_eq!(output.high_watermark, Some(7));
        assert_eq!(
            output.completions,
            vec![WaiterCompletion {
                id: 42,
                result: Ok(())
            }]
        );
        let served = served.unwrap();
        assert_eq!(
            (served.from_offset, served.to_offset, served.records_epoch),
            (7, 10, EPOCH)
        );
    }

    /// A fetch of an older epoch is fenced and not counted; one of a newer epoch deposes the
    /// leader, which fails its waiters.
    #[test]
    fn fetches_of_other_epochs_are_fenced_or_depose() {
        let mut leader = leader(vec![0, 1], 4);
        let log = log(10);
        leader.on_local_durable(1, 10);
        let (answer, output) = leader.on_fetch(2, &fetch(1, EPOCH - 1, 10), &log);
        assert_eq!(
            answer,
            Err(FetchError::FencedLeaderEpoch {
                epoch: EPOCH - 1,
                current: EPOCH
            })
        );
        assert_eq!(output.high_watermark, None);
        leader.on_appended(3, 1, 9);
        let (answer, output) = leader.on_fetch(4, &fetch(1, EPOCH + 1, 10), &log);
        assert_eq!(answer, Err(FetchError::NotLeader));
        assert!(output.deposed && leader.is_deposed());
        assert_eq!(
            output.completions,
            vec![WaiterCompletion {
                id: 1,
                result: Err(AcksAllError::Deposed)
            }]
        );
    }

    /// A leader whose registration lapsed by its own clock acknowledges nothing, even a write
    /// every replica holds.
    #[test]
    fn a_lapsed_registration_acknowledges_nothing() {
        let mut leader = leader(vec![0, 1], 4);
        let log = log(10);
        leader.on_appended(1, 1, 9);
        leader.on_local_durable(2, 10);
        let (answer, output) = leader.on_fetch(1_000, &fetch(1, EPOCH, 10), &log);
        assert_eq!(answer, Err(FetchError::NotLeader));
        assert!(output.deposed);
        assert_eq!(
            output.completions,
            vec![WaiterCompletion {
                id: 1,
                result: Err(AcksAllError::Deposed)
            }]
        );
        assert_eq!(leader.consumer_high_watermark(1_000), None);
    }

    /// `min_insync` refuses produces when the ISR is smaller, before anything is written.
    #[test]
    fn an_isr_below_min_insync_refuses_produces() {
        let mut leader = leader(vec![0], 4);
        assert_eq!(
            leader.check_produce(1),
            Err(ProduceRefusal::NotEnoughReplicas {
                isr: 1,
                min_insync: 2
            })
        );
    }

    /// A follower that stopped fetching is proposed out after `replica_lag_max_ms`; the
    /// proposal's outcome unknown, nothing more is proposed until a read; a read showing a
    /// newer epoch deposes the leader.
    #[test]
    fn a_lagging_follower_is_proposed_out_and_a_newer_epoch_deposes() {
        let mut leader = leader(vec![0, 1, 2], 4);
        let log = log(10);
        let live: LiveBrokers = [(0, 1), (1, 7), (2, 7)].into_iter().collect();
        leader.on_registration_renewed(1, 60_000);
        leader.on_fetch(1, &fetch(1, EPOCH, 10), &log).0.unwrap();
        leader.on_fetch(1, &fetch(2, EPOCH, 10), &log).0.unwrap();
        assert_eq!(leader.on_tick(5_000, &live).proposal, None);
        leader
            .on_fetch(11_000, &fetch(1, EPOCH, 10), &log)
            .0
            .unwrap();
        let proposal = leader
            .on_tick(11_000, &live)
            .proposal
            .expect("follower 2 lags");
        assert_eq!(
            (proposal.expected_revision, proposal.state.isr.clone()),
            (10, vec![0, 1])
        );
        let output = leader.on_cas_outcome(11_001, CasOutcome::Unknown);
        assert!(output.reread);
        assert_eq!(leader.on_tick(11_002, &live).proposal, None);
        let mut newer = leader.partition().clone();
        newer.value.leader = Some(1);
        newer.value.leader_epoch = EPOCH + 1;
        newer.revision = 12;
        assert!(leader.on_partition_read(11_003, &newer).deposed);
    }
}
