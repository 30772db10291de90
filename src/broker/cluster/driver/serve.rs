//! The leader's side of replication requests: a follower's `ReplicaFetch` (which is also how the
//! leader learns the follower's log end, so it moves the high watermark) and `LeaderEpochEnd`.
//!
//! A fetch is answered at once when there is something to send; otherwise it is held (up to its
//! `max_wait_ms`, bounded by the driver's `replica_fetch_max_wait`) until the leader's
//! acknowledged end moves, so a follower learns of a new batch one round trip after it was
//! written, without polling. The follower's log end is recorded *before* the wait: it may be
//! exactly what commits a produce waiting for `acks=all`. A progress report (version 1,
//! `max_bytes` 0: a pipelining follower's new log end while its next fetch waits here) is
//! recorded the same way and answered at once, without batches.

use std::sync::Arc;
use std::time::Duration;

use super::{ClusterDriver, Replica};
use crate::cluster::replication::{FetchError, FetchRequest};
use crate::cluster::LeaderEpoch;
use crate::protocol::{
    EpochEnd, ErrorCode, LeaderEpochEndPartition, LeaderEpochQuery, ReplicaFetch,
    ReplicaFetchPartition, ReplicaFetchedPartition, Response,
};

/// Why a partition's fetch was refused: the wire code, and for a fetch past the leader's log end
/// the leader's high watermark (every other refusal sends 0).
struct FetchRefusal {
    code: ErrorCode,
    high_watermark: u64,
}

impl FetchRefusal {
    fn code(code: ErrorCode) -> Self {
        FetchRefusal {
            code,
            high_watermark: 0,
        }
    }
}

impl ClusterDriver {
    /// Answers a follower's `ReplicaFetch`, one partition after another.
    pub async fn serve_replica_fetch(self: &Arc<Self>, fetch: ReplicaFetch) -> Response {
        let max_wait = Duration::from_millis(u64::from(fetch.max_wait_ms))
            .min(self.config.replica_fetch_max_wait);
        // The follower's limit, within this broker's own (a response must fit a frame).
        let mut budget = fetch
            .max_bytes
            .clamp(1, self.config.replica_fetch_max_bytes) as usize;
        let mut partitions = Vec::with_capacity(fetch.partitions.len());
        for entry in &fetch.partitions {
            let answer = self
                .serve_partition_fetch(&fetch, entry, budget, max_wait)
                .await;
            budget = budget.saturating_sub(answer.batches_len()).max(1);
            partitions.push(answer);
        }
        Response::ReplicaFetch { partitions }
    }

    async fn serve_partition_fetch(
        self: &Arc<Self>,
        fetch: &ReplicaFetch,
        entry: &ReplicaFetchPartition,
        max_bytes: usize,
        max_wait: Duration,
    ) -> ReplicaFetchedPartition {
        let refused = |refusal: FetchRefusal| ReplicaFetchedPartition {
            topic: entry.topic.clone(),
            partition: entry.partition,
            error: refusal.code,
            high_watermark: refusal.high_watermark,
            log_start_offset: 0,
            records_epoch: 0,
            batches: Vec::new(),
        };
        let Some(replica) = self.replica(&entry.topic, entry.partition) else {
            return refused(FetchRefusal::code(ErrorCode::NotLeader));
        };
        let request = FetchRequest {
            follower: fetch.follower,
            incarnation: fetch.follower_incarnation,
            leader_epoch: fetch.leader_epoch,
            fetch_offset: entry.fetch_offset,
            log_end_offset: entry.log_end_offset(),
            report_only: fetch.is_report_only(),
        };
        let mut acknowledged = replica.partition.subscribe_acknowledged();
        let mut serve = match self.record_fetch(&replica, &request) {
            Ok(serve) => serve,
            Err(error) => return refused(error),
        };
        if request.report_only {
            // The engine served nothing; a report never waits.
            return self.read_for(&replica, entry, serve, max_bytes);
        }
        if serve.from_offset >= serve.to_offset && !max_wait.is_zero() {
            // Nothing new: wait for the log to grow (or the deadline), then record the
            // follower's progress once more and send what there is.
            let more = async {
                while *acknowledged.borrow_and_update() <= entry.fetch_offset {
                    if acknowledged.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            };
            tokio::select! {
                () = more => {}
                () = tokio::time::sleep(max_wait) => {}
                () = self.stop.cancelled() => {}
            }
            serve = match self.record_fetch(&replica, &request) {
                Ok(serve) => serve,
                Err(error) => return refused(error),
            };
        }
        self.read_for(&replica, entry, serve, max_bytes)
    }

    /// Gives the fetch to the leader engine (it records the follower's progress and may move
    /// the high watermark) and returns what to send, or the refusal.
    fn record_fetch(
        self: &Arc<Self>,
        replica: &Arc<Replica>,
        request: &FetchRequest,
    ) -> Result<crate::cluster::replication::FetchServe, FetchRefusal> {
        let now = self.now_ms();
        let mut shell = replica.shell();
        if shell.node.leader().is_none() {
            return Err(FetchRefusal::code(not_leading_code(
                replica,
                request.leader_epoch,
            )));
        }
        let (result, effects) = shell
            .node
            .serve_fetch(now, replica.partition.as_ref(), request);
        self.apply(replica, &mut shell, effects);
        result.map_err(|error| match error {
            FetchError::FencedLeaderEpoch { .. } => {
                FetchRefusal::code(ErrorCode::FencedLeaderEpoch)
            }
            FetchError::NotLeader => FetchRefusal::code(ErrorCode::NotLeader),
            FetchError::NotAReplica { .. } => FetchRefusal::code(ErrorCode::InvalidRequest),
            // Past the leader's log end: the follower cuts a longer log to this high watermark.
            FetchError::OffsetOutOfRange { high_watermark, .. } => FetchRefusal {
                code: ErrorCode::OffsetOutOfRange,
                high_watermark,
            },
            FetchError::BelowLogStart { .. } => FetchRefusal::code(ErrorCode::OffsetOutOfRange),
        })
    }

    /// Reads what the engine said to send.
    fn read_for(
        &self,
        replica: &Replica,
        entry: &ReplicaFetchPartition,
        serve: crate::cluster::replication::FetchServe,
        max_bytes: usize,
    ) -> ReplicaFetchedPartition {
        let mut answer = ReplicaFetchedPartition {
            topic: entry.topic.clone(),
            partition: entry.partition,
            error: ErrorCode::None,
            high_watermark: serve.high_watermark,
            log_start_offset: replica.partition.log_start_offset(),
            records_epoch: serve.records_epoch,
            batches: Vec::new(),
        };
        if serve.from_offset >= serve.to_offset {
            return answer;
        }
        match replica
            .partition
            .read_for_replication(serve.from_offset, max_bytes)
        {
            Ok(read) => {
                answer.records_epoch = read.records_epoch;
                answer.log_start_offset = read.log_start_offset;
                // Slices of the segment maps, sent as they are by the vectored response writer.
                answer.batches = read.batches;
            }
            // Retention or a DeleteRecords deleted what the follower asks for: it hears where
            // the log starts now, and starts its own over there.
            Err(crate::storage::StorageError::OffsetOutOfRange {
                offset, earliest, ..
            }) if offset < earliest => {
                tracing::debug!(partition = %replica.id, offset, log_start = earliest, "a follower fetches below the log start");
                answer.error = ErrorCode::OffsetOutOfRange;
                answer.log_start_offset = earliest;
            }
            Err(error) => {
                tracing::warn!(partition = %replica.id, %error, "cannot read for a follower");
                answer.error = ErrorCode::StorageError;
            }
        }
        answer
    }

    /// Answers a follower's `LeaderEpochEnd` questions.
    pub fn serve_epoch_end(&self, questions: Vec<LeaderEpochQuery>) -> Response {
        let now = self.now_ms();
        let partitions = questions
            .into_iter()
            .map(|question| {
                let mut answer = LeaderEpochEndPartition {
                    topic: question.topic.clone(),
                    partition: question.partition,
                    error: ErrorCode::None,
                    end: None,
                };
                let Some(replica) = self.replica(&question.topic, question.partition) else {
                    answer.error = ErrorCode::NotLeader;
                    return answer;
                };
                let shell = replica.shell();
                match shell.node.leader() {
                    Some(leader) if leader.can_acknowledge(now) => {
                        let epoch = leader.epoch();
                        if question.current_leader_epoch < epoch {
                            answer.error = ErrorCode::FencedLeaderEpoch;
                        } else if question.current_leader_epoch > epoch {
                            answer.error = ErrorCode::UnknownLeaderEpoch;
                        } else {
                            answer.end = replica
                                .partition
                                .end_offset_for_epoch(question.epoch)
                                .map(|(epoch, end_offset)| EpochEnd { epoch, end_offset });
                        }
                    }
                    _ => answer.error = not_leading_code(&replica, question.current_leader_epoch),
                }
                answer
            })
            .collect();
        Response::LeaderEpochEnd { partitions }
    }
}

/// Why a broker that does not lead refuses a replication request: the asker follows an epoch
/// older than this replica installed (`FENCED_LEADER_EPOCH`), or simply not this broker.
fn not_leading_code(replica: &Replica, asked: LeaderEpoch) -> ErrorCode {
    if asked < replica.partition.leader_epoch_floor() {
        ErrorCode::FencedLeaderEpoch
    } else {
        ErrorCode::NotLeader
    }
}
