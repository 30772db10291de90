//! The follower's steps for one partition in one leader epoch: install the epoch in the log's
//! fence, truncate by leader epoch, then fetch in a loop.
//!
//! Truncation asks the leader where the follower's latest history epoch ended in the leader's log
//! (Kafka's OffsetsForLeaderEpoch) and cuts there, never at a high watermark (truncating to a
//! stale high watermark lost acknowledged records in Kafka: KIP-101). When the leader answers
//! with an older epoch than the one asked (the follower holds an epoch the leader never saw), the
//! follower cuts at the end of that older epoch in *both* logs and asks again, until the leader
//! answers the epoch asked: after that the follower's log is a prefix of the leader's (KIP-279).
//! An epoch older than everything the leader holds ended where the leader's history starts. A
//! fetch past the leader's log end cuts to the leader's high watermark and asks again. Only then
//! does the follower fetch, so every fetch offset the leader counts describes a log that agrees
//! with its own.
//!
//! A cut lands below the follower's high watermark only when the leader lost committed records
//! (committed records are on every ISR member, so a leader elected from the ISR holds them
//! unless a power cut of the replicas under `flush never` took them): the leader's log is the
//! log then, and the follower warns and counts it.
//!
//! Fetches may be pipelined ([`ReplicationConfig::pipelined_fetches`], off by default): when an
//! answer carries records, the follower asks for what follows them
//! at once and appends while that fetch travels and waits at the leader, so the transfer of the
//! next records overlaps the append of these. A fetch therefore names two offsets: where to read
//! from (past the records being appended) and the follower's log end (what it holds). Once the
//! append is done the follower sends a progress report with its new log end, so the leader's high
//! watermark (and every `acks=all` producer waiting on it) moves without waiting for the next
//! answer. At most one fetch and one append are under way at a time, in order.

use super::{
    EpochEndRequest, FetchError, FetchRequest, FetchResponse, ReplicaLog, ReplicationConfig,
};
use crate::cluster::replica_log::ReplicaLogError;
use crate::cluster::{LeaderEpoch, NodeId};

/// What the driver must do next for this follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerAction {
    /// Call [`ReplicaLog::become_follower`] with this epoch, then
    /// [`Follower::on_became_follower`].
    BecomeFollower {
        /// The leader epoch to install.
        leader_epoch: LeaderEpoch,
    },
    /// Send this question to the leader, then [`Follower::on_epoch_end`] with its answer.
    AskEpochEnd(EpochEndRequest),
    /// Call [`ReplicaLog::truncate_to`] with this offset, then [`Follower::on_truncated`].
    Truncate {
        /// The new log end.
        offset: u64,
    },
    /// Call [`ReplicaLog::start_over_at`] with this offset (the leader's log start, past this
    /// log's end), then [`Follower::on_started_over`].
    StartOver {
        /// The leader's log start: the new log start and log end.
        offset: u64,
    },
    /// Send this fetch to the leader, then [`Follower::on_fetch_response`] with its answer.
    Fetch(FetchRequest),
    /// Append the records of the fetch response ([`ReplicaLog::append_replicated`] with these
    /// epochs; nothing when it carried none), raise the log's high watermark to
    /// `high_watermark` ([`ReplicaLog::advance_high_watermark`] caps it at the log end), then
    /// call [`Follower::on_appended`]. When the response carried no records, wait a little before
    /// the next fetch (or let the leader hold the fetch until records arrive).
    ///
    /// With `then_fetch`, send that fetch first (it asks for what follows these records) and
    /// append while it is under way; its answer goes to [`Follower::on_fetch_response`] only
    /// after [`Follower::on_appended`].
    Append {
        /// The epoch that wrote the records.
        records_epoch: LeaderEpoch,
        /// The epoch of the leader that sent them.
        leader_epoch: LeaderEpoch,
        /// The leader's high watermark.
        high_watermark: u64,
        /// How many records the response carried.
        record_count: u64,
        /// The pipelined fetch to send before appending (`None`: the next fetch comes from
        /// [`Follower::on_appended`]).
        then_fetch: Option<FetchRequest>,
    },
    /// Send this progress report to the leader (its answer carries nothing to act on), then
    /// give the answer of the fetch sent with the last [`FollowerAction::Append`] to
    /// [`Follower::on_fetch_response`] (a lost answer: [`Follower::retry`]). The report may be
    /// left out when that answer is already in: the next fetch carries the same log end.
    Report(FetchRequest),
    /// Re-read the partition state from the metadata store and start over from it (a new
    /// follower, or an election): this leader or epoch is no longer the right one, or the log
    /// refused a step.
    RereadMetadata,
    /// The input did not belong to the current step (a late or duplicate answer): keep waiting.
    Nothing,
}

/// Where the follower is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Becoming,
    Asking {
        asked_epoch: LeaderEpoch,
    },
    Truncating {
        consistent: bool,
    },
    StartingOver,
    Fetching {
        fetch_offset: u64,
    },
    /// Appending a fetch's records; `next_fetch_offset` is where the pipelined fetch sent
    /// beside the append reads from (`None`: no fetch is under way).
    Appending {
        next_fetch_offset: Option<u64>,
    },
    Stopped,
}

/// One partition's follower of `leader` in `leader_epoch`.
#[derive(Debug, Clone)]
pub struct Follower {
    node_id: NodeId,
    incarnation: u64,
    leader: NodeId,
    leader_epoch: LeaderEpoch,
    phase: Phase,
    rounds: u32,
    rounds_max: u32,
    truncations_below_high_watermark: u64,
    pipelined: bool,
}

impl Follower {
    /// Starts following `leader` in `leader_epoch`; the first action installs the epoch.
    pub fn new(
        node_id: NodeId,
        incarnation: u64,
        leader: NodeId,
        leader_epoch: LeaderEpoch,
        config: &ReplicationConfig,
    ) -> (Self, FollowerAction) {
        let follower = Follower {
            node_id,
            incarnation,
            leader,
            leader_epoch,
            phase: Phase::Becoming,
            rounds: 0,
            rounds_max: config.epoch_end_rounds_max,
            truncations_below_high_watermark: 0,
            pipelined: config.pipelined_fetches,
        };
        (follower, FollowerAction::BecomeFollower { leader_epoch })
    }

    /// The leader followed.
    pub fn leader(&self) -> NodeId {
        self.leader
    }

    /// The leader epoch followed.
    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.leader_epoch
    }

    /// Whether the follower is fetching (it has truncated and its log agrees with the leader's).
    pub fn is_fetching(&self) -> bool {
        matches!(self.phase, Phase::Fetching { .. } | Phase::Appending { .. })
    }

    /// How many truncations went below the follower's high watermark because the leader's log
    /// was shorter. Zero unless committed records were lost (a power cut of every replica under
    /// `flush never`); the simulation, which loses nothing synced, checks it stays zero.
    pub fn truncations_below_high_watermark(&self) -> u64 {
        self.truncations_below_high_watermark
    }

    /// The log installed the epoch (or refused it).
    pub fn on_became_follower(
        &mut self,
        log: &dyn ReplicaLog,
        result: Result<(), ReplicaLogError>,
    ) -> FollowerAction {
        if self.phase != Phase::Becoming {
            return FollowerAction::Nothing;
        }
        match result {
            Ok(()) => self.start_truncation(log),
            Err(_) => self.stop(),
        }
    }

    /// The leader's answer to [`FollowerAction::AskEpochEnd`]: the largest epoch `<=` the one
    /// asked in its history and where it ended, or `None` if it has none.
    pub fn on_epoch_end(
        &mut self,
        log: &dyn ReplicaLog,
        response: Result<Option<(LeaderEpoch, u64)>, FetchError>,
    ) -> FollowerAction {
        let Phase::Asking { asked_epoch } = self.phase else {
            return FollowerAction::Nothing;
        };
        let answer = match response {
            Ok(answer) => answer,
            Err(_) => return self.stop(),
        };
        let (target, consistent) = match answer {
            // The leader's history is empty (no leader has one: it records its own epoch before
            // it serves): keep only what is committed, as Kafka's follower does.
            None => (log.high_watermark(), true),
            // The asked epoch ended at `end` in the leader's log; when the leader holds nothing
            // that old (its log started over past it, or a power cut of every replica lost it),
            // it answers the asked epoch itself, ended where its history starts.
            Some((epoch, end)) if epoch >= asked_epoch => (end.min(log.log_end_offset()), true),
            Some((epoch, end)) => {
                // This log holds epochs the leader never had: cut at the end of `epoch` in both
                // logs, then ask again about what is left. A log whose history holds nothing at
                // or below `epoch` holds none of its records: `epoch` ended where this history
                // starts, and never below the log start.
                let own_end = log
                    .end_offset_for_epoch(epoch)
                    .map_or(log.log_start_offset(), |(_, own)| own)
                    .max(log.log_start_offset());
                (end.min(own_end), false)
            }
        };
        self.truncate(target, consistent, log)
    }

    /// Cuts this log at `target`; with `consistent`, what is left is a prefix of the leader's
    /// log and fetching follows, else the leader is asked again about what is left.
    fn truncate(&mut self, target: u64, consistent: bool, log: &dyn ReplicaLog) -> FollowerAction {
        let high_watermark = log.high_watermark();
        if target < high_watermark {
            // The leader's log is shorter than what this replica knew to be committed: only a
            // power cut of the replicas that held it, under `flush never` or `interval`, loses
            // committed records (docs/reliability.md). The leader's log is the log now; keeping
            // records it does not have would make this replica differ from it at the same
            // offsets for good. Kafka truncates and warns too. Counted: the simulation, which
            // loses no synced data, holds any such cut to be a bug.
            self.truncations_below_high_watermark += 1;
            tracing::warn!(
                leader = self.leader,
                leader_epoch = self.leader_epoch,
                offset = target,
                high_watermark,
                "the leader's log ends below this replica's high watermark (committed records lost to a power cut?): truncating below it"
            );
        }
        self.phase = Phase::Truncating { consistent };
        FollowerAction::Truncate { offset: target }
    }

    /// The log was truncated as asked (or refused).
    pub fn on_truncated(
        &mut self,
        log: &dyn ReplicaLog,
        result: Result<(), ReplicaLogError>,
    ) -> FollowerAction {
        let Phase::Truncating { consistent } = self.phase else {
            return FollowerAction::Nothing;
        };
        match result {
            Err(_) => self.stop(),
            Ok(()) if consistent => self.fetch(log),
            Ok(()) => self.start_truncation(log),
        }
    }

    /// The log was started over at the leader's log start (or refused).
    pub fn on_started_over(
        &mut self,
        log: &dyn ReplicaLog,
        result: Result<(), ReplicaLogError>,
    ) -> FollowerAction {
        if self.phase != Phase::StartingOver {
            return FollowerAction::Nothing;
        }
        match result {
            Ok(()) => self.fetch(log),
            Err(_) => self.stop(),
        }
    }

    /// The leader's answer to [`FollowerAction::Fetch`].
    pub fn on_fetch_response(
        &mut self,
        log: &dyn ReplicaLog,
        response: Result<FetchResponse, FetchError>,
    ) -> FollowerAction {
        let Phase::Fetching { fetch_offset } = self.phase else {
            return FollowerAction::Nothing;
        };
        match response {
            // The leader's log ends below this one (it lost a tail this log kept: a power cut
            // of every replica under `flush never`): cut to where the leader's log surely
            // reaches (its high watermark; Kafka's follower cuts to the leader's log end), then
            // ask where the epochs agree below it. Records cut that the leader has come back
            // with the next fetches.
            Err(FetchError::OffsetOutOfRange { high_watermark, .. })
                if high_watermark < log.log_end_offset() =>
            {
                self.rounds = 0;
                self.truncate(high_watermark, false, log)
            }
            Err(FetchError::OffsetOutOfRange { .. }) => {
                self.rounds = 0;
                self.start_truncation(log)
            }
            // The leader deleted what this log would fetch next, and everything this log holds
            // lies below what it kept (the fetch offset is this log's end): start over there.
            Err(FetchError::BelowLogStart {
                fetch_offset,
                log_start_offset,
            }) if fetch_offset == log.log_end_offset() && log_start_offset > fetch_offset => {
                self.phase = Phase::StartingOver;
                FollowerAction::StartOver {
                    offset: log_start_offset,
                }
            }
            Err(_) => self.stop(),
            Ok(response) if response.base_offset != fetch_offset => FollowerAction::Nothing,
            Ok(response) if response.records_epoch > self.leader_epoch => self.stop(),
            Ok(response) => {
                let then_fetch = (self.pipelined && response.record_count > 0).then(|| {
                    let next_fetch_offset = fetch_offset + response.record_count;
                    FetchRequest {
                        fetch_offset: next_fetch_offset,
                        ..self.fetch_request(log)
                    }
                });
                self.phase = Phase::Appending {
                    next_fetch_offset: then_fetch.map(|fetch| fetch.fetch_offset),
                };
                FollowerAction::Append {
                    records_epoch: response.records_epoch,
                    leader_epoch: self.leader_epoch,
                    high_watermark: response.high_watermark,
                    record_count: response.record_count,
                    then_fetch,
                }
            }
        }
    }

    /// The records were appended (or refused) and the high watermark raised.
    pub fn on_appended(
        &mut self,
        log: &dyn ReplicaLog,
        result: Result<u64, ReplicaLogError>,
    ) -> FollowerAction {
        let Phase::Appending { next_fetch_offset } = self.phase else {
            return FollowerAction::Nothing;
        };
        match (result, next_fetch_offset) {
            (Err(_), _) => self.stop(),
            (Ok(_), None) => self.fetch(log),
            // The pipelined fetch asked from past these records: they must all be in the log,
            // or its answer would not follow on.
            (Ok(_), Some(next)) if log.log_end_offset() != next => self.stop(),
            (Ok(_), Some(next)) => {
                self.phase = Phase::Fetching { fetch_offset: next };
                FollowerAction::Report(FetchRequest {
                    report_only: true,
                    ..self.fetch_request(log)
                })
            }
        }
    }

    /// The request of the current step, to send again after its answer was lost.
    pub fn retry(&self, log: &dyn ReplicaLog) -> FollowerAction {
        match self.phase {
            Phase::Asking { asked_epoch } => FollowerAction::AskEpochEnd(EpochEndRequest {
                follower: self.node_id,
                leader_epoch: self.leader_epoch,
                epoch: asked_epoch,
            }),
            Phase::Fetching { .. } => FollowerAction::Fetch(self.fetch_request(log)),
            _ => FollowerAction::Nothing,
        }
    }

    fn start_truncation(&mut self, log: &dyn ReplicaLog) -> FollowerAction {
        let Some((asked_epoch, _)) = log.latest_epoch_entry() else {
            return self.fetch(log);
        };
        self.rounds += 1;
        if self.rounds > self.rounds_max {
            return self.stop();
        }
        self.phase = Phase::Asking { asked_epoch };
        FollowerAction::AskEpochEnd(EpochEndRequest {
            follower: self.node_id,
            leader_epoch: self.leader_epoch,
            epoch: asked_epoch,
        })
    }

    fn fetch(&mut self, log: &dyn ReplicaLog) -> FollowerAction {
        let request = self.fetch_request(log);
        self.phase = Phase::Fetching {
            fetch_offset: request.fetch_offset,
        };
        FollowerAction::Fetch(request)
    }

    /// A fetch from the log's end, reporting it.
    fn fetch_request(&self, log: &dyn ReplicaLog) -> FetchRequest {
        let log_end_offset = log.log_end_offset();
        FetchRequest {
            follower: self.node_id,
            incarnation: self.incarnation,
            leader_epoch: self.leader_epoch,
            fetch_offset: log_end_offset,
            log_end_offset,
            report_only: false,
        }
    }

    fn stop(&mut self) -> FollowerAction {
        self.phase = Phase::Stopped;
        FollowerAction::RereadMetadata
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// A log of a fresh follower: no epochs (so no truncation), and a log end the test moves.
    struct FreshLog {
        end: AtomicU64,
    }

    impl ReplicaLog for FreshLog {
        fn log_end_offset(&self) -> u64 {
            self.end.load(Ordering::Relaxed)
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
            0
        }
        fn latest_epoch_entry(&self) -> Option<(LeaderEpoch, u64)> {
            None
        }
        fn end_offset_for_epoch(&self, _: LeaderEpoch) -> Option<(LeaderEpoch, u64)> {
            None
        }
        fn become_leader(&self, _: LeaderEpoch) -> Result<(), ReplicaLogError> {
            unreachable!()
        }
        fn become_follower(&self, _: LeaderEpoch) -> Result<(), ReplicaLogError> {
            Ok(())
        }
        fn append_replicated(
            &self,
            _: &[u8],
            _: LeaderEpoch,
            _: LeaderEpoch,
        ) -> Result<u64, ReplicaLogError> {
            unreachable!("the test appends by moving the log end")
        }
        fn truncate_to(&self, _: u64) -> Result<(), ReplicaLogError> {
            unreachable!()
        }
        fn start_over_at(&self, offset: u64) -> Result<(), ReplicaLogError> {
            self.end.store(offset, Ordering::Relaxed);
            Ok(())
        }
        fn advance_high_watermark(&self, _: u64) {}
    }

    /// A follower's log after every broker lost power under `flush never`: 980 records of
    /// epoch 17 that its own syncs kept, and a high watermark of 980 (synced, whatever the flush
    /// policy), while the leader elected after the cut kept fewer.
    struct SurvivorLog;

    impl ReplicaLog for SurvivorLog {
        fn log_end_offset(&self) -> u64 {
            980
        }
        fn log_start_offset(&self) -> u64 {
            0
        }
        fn high_watermark(&self) -> u64 {
            980
        }
        fn durable_end_offset(&self) -> u64 {
            980
        }
        fn leader_epoch_floor(&self) -> LeaderEpoch {
            17
        }
        fn latest_epoch_entry(&self) -> Option<(LeaderEpoch, u64)> {
            Some((17, 0))
        }
        fn end_offset_for_epoch(&self, _: LeaderEpoch) -> Option<(LeaderEpoch, u64)> {
            Some((17, 980))
        }
        fn become_leader(&self, _: LeaderEpoch) -> Result<(), ReplicaLogError> {
            unreachable!()
        }
        fn become_follower(&self, _: LeaderEpoch) -> Result<(), ReplicaLogError> {
            Ok(())
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
            Ok(())
        }
        fn start_over_at(&self, _: u64) -> Result<(), ReplicaLogError> {
            unreachable!()
        }
        fn advance_high_watermark(&self, _: u64) {}
    }

    /// Issue 56, found by the nemesis's power cuts (`tools/nemesis --seed 20261207 --seconds
    /// 300 --faults power-cut,power-cut-minority,power-cut-all,kill9`): when every broker loses
    /// power under `flush never`, the leader elected after the cut may hold less than a
    /// follower's (synced) high watermark: epoch 17 ended at 0 in its log. The follower must
    /// then follow the leader's log, below its own high watermark too (Kafka truncates and
    /// warns), or it keeps records the leader's log does not have at the same offsets, serves a
    /// log that differs from the leader's, and never rejoins the ISR. The cut was clamped to the
    /// high watermark (and storage refused a truncation below it): the nemesis run ended with broker 2 holding
    /// `t1p1-w0-2489` (epoch 17) at offset 0 where its leader serves `t1p1-w0-7787` (epoch 33),
    /// and the partition's ISR stuck at two. Now the follower cuts where the leader says.
    #[test]
    fn after_every_broker_lost_power_a_follower_truncates_below_its_high_watermark_to_the_leader() {
        let log = SurvivorLog;
        let (mut follower, _) = Follower::new(2, 9, 1, 33, &ReplicationConfig::default());
        let FollowerAction::AskEpochEnd(asked) = follower.on_became_follower(&log, Ok(())) else {
            panic!("expected the follower to ask where its latest epoch ended");
        };
        assert_eq!(asked.epoch, 17);
        assert_eq!(
            follower.on_epoch_end(&log, Ok(Some((17, 0)))),
            FollowerAction::Truncate { offset: 0 },
            "the follower must cut where the leader's log says epoch 17 ended"
        );
    }

    /// The long power-cut run's second divergence (issue 56, same command): the leader elected
    /// after a cut of every broker had started its log over at offset 0 in epoch 30 and held no
    /// epoch as old as the follower's 3, so it answered "none", the follower kept its log up to
    /// its synced high watermark (above the leader's log end), and every fetch from there was
    /// out of range. The leader now answers the asked epoch ended where its history starts (a
    /// test above); and a fetch past the leader's log end cuts to the leader's high watermark
    /// and asks again.
    #[test]
    fn a_fetch_past_the_leader_log_end_cuts_to_its_high_watermark_and_asks_again() {
        let log = SurvivorLog;
        let (mut follower, _) = Follower::new(2, 9, 1, 33, &ReplicationConfig::default());
        follower.on_became_follower(&log, Ok(()));
        assert_eq!(
            follower.on_epoch_end(&log, Ok(Some((17, 980)))),
            FollowerAction::Truncate { offset: 980 }
        );
        let FollowerAction::Fetch(fetch) = follower.on_truncated(&log, Ok(())) else {
            panic!("expected a fetch after a consistent truncation");
        };
        assert_eq!(fetch.fetch_offset, 980);
        let out_of_range = Err(FetchError::OffsetOutOfRange {
            fetch_offset: 980,
            high_watermark: 400,
        });
        assert_eq!(
            follower.on_fetch_response(&log, out_of_range),
            FollowerAction::Truncate { offset: 400 }
        );
        assert_eq!(follower.truncations_below_high_watermark(), 1);
        assert!(
            matches!(
                follower.on_truncated(&log, Ok(())),
                FollowerAction::AskEpochEnd(EpochEndRequest { epoch: 17, .. })
            ),
            "after the cut the follower asks where its epochs agree below it"
        );
    }

    fn pipelining() -> ReplicationConfig {
        ReplicationConfig {
            pipelined_fetches: true,
            ..ReplicationConfig::default()
        }
    }

    /// Without pipelining (the default), an answer with records is appended before the next
    /// fetch, which then reports the new log end: no report.
    #[test]
    fn by_default_the_next_fetch_waits_for_the_append() {
        let log = FreshLog {
            end: AtomicU64::new(0),
        };
        let (mut follower, _) = Follower::new(2, 9, 1, 3, &ReplicationConfig::default());
        follower.on_became_follower(&log, Ok(()));
        let FollowerAction::Append {
            record_count: 10,
            then_fetch: None,
            ..
        } = follower.on_fetch_response(&log, answer(0, 10))
        else {
            panic!("expected an append without a pipelined fetch");
        };
        log.end.store(10, Ordering::Relaxed);
        let FollowerAction::Fetch(next) = follower.on_appended(&log, Ok(10)) else {
            panic!("expected the next fetch");
        };
        assert_eq!((next.fetch_offset, next.log_end_offset), (10, 10));
        assert!(!next.report_only);
    }

    fn answer(base_offset: u64, record_count: u64) -> Result<FetchResponse, FetchError> {
        Ok(FetchResponse {
            base_offset,
            record_count,
            records_epoch: 3,
            high_watermark: base_offset,
        })
    }

    /// An answer with records: the next fetch reads past them while they are appended, then a
    /// progress report carries the new log end, and the pipelined fetch's answer goes on from
    /// there. An empty answer is not pipelined.
    #[test]
    fn fetches_are_pipelined_behind_appends() {
        let log = FreshLog {
            end: AtomicU64::new(0),
        };
        let (mut follower, action) = Follower::new(2, 9, 1, 3, &pipelining());
        assert_eq!(action, FollowerAction::BecomeFollower { leader_epoch: 3 });
        let FollowerAction::Fetch(first) = follower.on_became_follower(&log, Ok(())) else {
            panic!("expected the first fetch");
        };
        assert_eq!((first.fetch_offset, first.log_end_offset), (0, 0));
        assert!(!first.report_only);

        let FollowerAction::Append {
            record_count: 10,
            then_fetch: Some(next),
            ..
        } = follower.on_fetch_response(&log, answer(0, 10))
        else {
            panic!("expected an append with a pipelined fetch");
        };
        assert_eq!((next.fetch_offset, next.log_end_offset), (10, 0));
        log.end.store(10, Ordering::Relaxed);
        let FollowerAction::Report(report) = follower.on_appended(&log, Ok(10)) else {
            panic!("expected a progress report");
        };
        assert!(report.report_only);
        assert_eq!((report.fetch_offset, report.log_end_offset), (10, 10));

        // The pipelined fetch's answer: nothing new, so the next fetch waits for it to be done.
        let FollowerAction::Append {
            record_count: 0,
            then_fetch: None,
            ..
        } = follower.on_fetch_response(&log, answer(10, 0))
        else {
            panic!("expected an empty append without a pipelined fetch");
        };
        let FollowerAction::Fetch(after) = follower.on_appended(&log, Ok(10)) else {
            panic!("expected a plain fetch");
        };
        assert_eq!((after.fetch_offset, after.log_end_offset), (10, 10));
    }

    /// An append that did not take every record it was given cannot be followed by the
    /// pipelined fetch's answer (it starts past them): the follower starts over.
    #[test]
    fn a_short_append_under_a_pipelined_fetch_rereads() {
        let log = FreshLog {
            end: AtomicU64::new(0),
        };
        let (mut follower, _) = Follower::new(2, 9, 1, 3, &pipelining());
        follower.on_became_follower(&log, Ok(()));
        follower.on_fetch_response(&log, answer(0, 10));
        log.end.store(7, Ordering::Relaxed);
        assert_eq!(
            follower.on_appended(&log, Ok(7)),
            FollowerAction::RereadMetadata
        );
    }

    /// A fetch below the leader's log start (everything this log holds lies below it) starts
    /// the log over there, and the next fetch asks from it; an answer that does not describe
    /// this log (its fetch offset is not this log's end) changes nothing of the log: the
    /// follower re-reads the partition state.
    #[test]
    fn a_fetch_below_the_leader_log_start_starts_the_log_over_there() {
        let log = FreshLog {
            end: AtomicU64::new(5),
        };
        let (mut follower, _) = Follower::new(2, 9, 1, 3, &ReplicationConfig::default());
        follower.on_became_follower(&log, Ok(()));
        let below = Err(FetchError::BelowLogStart {
            fetch_offset: 5,
            log_start_offset: 700,
        });
        assert_eq!(
            follower.on_fetch_response(&log, below),
            FollowerAction::StartOver { offset: 700 }
        );
        // A late answer meanwhile changes nothing.
        assert_eq!(
            follower.on_fetch_response(&log, answer(5, 1)),
            FollowerAction::Nothing
        );
        log.start_over_at(700).unwrap();
        let FollowerAction::Fetch(next) = follower.on_started_over(&log, Ok(())) else {
            panic!("expected a fetch from the new start");
        };
        assert_eq!((next.fetch_offset, next.log_end_offset), (700, 700));

        let (mut other, _) = Follower::new(2, 9, 1, 3, &ReplicationConfig::default());
        other.on_became_follower(&log, Ok(()));
        let stale = Err(FetchError::BelowLogStart {
            fetch_offset: 5,
            log_start_offset: 900,
        });
        assert_eq!(
            other.on_fetch_response(&log, stale),
            FollowerAction::RereadMetadata
        );
    }
}
