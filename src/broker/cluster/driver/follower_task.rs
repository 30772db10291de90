//! A follower's task for one partition: the follower steps
//! ([`Follower`](crate::cluster::replication::follower::Follower)) carried out with real I/O. It installs the leader epoch in the log's fence, asks the
//! leader where its latest epoch ended and truncates there (as often as the engine says), then
//! fetches in a loop, appending what comes back through the fence's leader-epoch check and
//! raising the high watermark. Requests go over one native-protocol connection to the leader.
//!
//! A broker started with `serve --replica-fetch-pipelining` (off by default) pipelines its
//! fetches as the engine says: the fetch that follows an answer with records is sent from a
//! task of its own before those records are appended (on the blocking pool), and once
//! they are, a progress report carries the new log end to the leader at once, while that fetch
//! may still be waiting there. So one follower has at most a fetch, an append and a report under
//! way, and its cycle is the longer of the transfer and the append, not their sum.
//!
//! The task carries out actions and nothing else: the replica's node ([`ReplicaNode`]) decides
//! each next one from the result of the last. The task ends when the node wants no more of this
//! follower (the leader refused with another epoch, the log refused a step, the state names
//! another leader); the node starts a new one from the state it reads. A lost connection is
//! only slow: the same step is sent again, after a pause that doubles up to a cap (jittered;
//! [`FOLLOWER_RETRY_BASE`], [`FOLLOWER_RETRY_CAP`]) while the leader does not answer, and a
//! task started again for the same leader and epoch waits likewise before it begins
//! ([`FOLLOWER_RESTART_BASE`], [`FOLLOWER_RESTART_CAP`]), so a leader that is down or keeps
//! refusing is not asked ten times a second per partition.
//!
//! [`ReplicaNode`]: crate::cluster::replication::node::ReplicaNode

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::{debug, info, warn};

use super::{ClusterDriver, Replica};
use crate::batch::BatchHeader;
use crate::client::{Client, ClientConfig, ClientError};
use crate::cluster::backoff::Backoff;
use crate::cluster::replica_log::{ReplicaLog, ReplicaLogError};
use crate::cluster::replication::follower::FollowerAction;
use crate::cluster::replication::node::FollowerEvent;
use crate::cluster::replication::{FetchError, FetchRequest, FetchResponse};
use crate::cluster::{LeaderEpoch, NodeId};
use crate::protocol::{
    ErrorCode, LeaderEpochQuery, ReplicaFetch, ReplicaFetchPartition, Request, Response,
};

/// First pause after a failed request or connection to the leader before the step is sent
/// again (each pause is jittered, see [`Backoff`]): a dropped connection is usually made again
/// at once.
pub(super) const FOLLOWER_RETRY_BASE: Duration = Duration::from_millis(200);

/// Longest pause between two tries of a follower's step: a leader that is down is asked about
/// once every one or two seconds per partition, and one that comes back is fetched from again
/// well within the default `replica_lag_max` (10 s), so the follower stays in sync.
pub(super) const FOLLOWER_RETRY_CAP: Duration = Duration::from_secs(2);

/// First wait before a follower task started again for the same leader and epoch begins (after
/// the node's own restart pause): see [`restart_backoff`].
pub(super) const FOLLOWER_RESTART_BASE: Duration = Duration::from_millis(100);

/// Longest wait before a follower task restarted for the same leader and epoch begins. A
/// leader that refused a follower of its epoch refuses it until the partition state changes
/// (a deposed leader whose registration lapsed while etcd is gone), and a new leader or epoch
/// starts the next task at once, so a long cap costs nothing; a short one had every refused
/// follower connect to its leader ten times a second.
pub(super) const FOLLOWER_RESTART_CAP: Duration = Duration::from_secs(5);

/// The schedule of a replica's follower restarts for one leader and epoch (kept in the
/// replica's shell across tasks).
pub(super) fn restart_backoff() -> Backoff {
    Backoff::new(FOLLOWER_RESTART_BASE, FOLLOWER_RESTART_CAP)
}

/// Which follower a task carries out.
pub(super) struct Following {
    /// The node's generation of the follower.
    pub generation: u64,
    /// The leader followed.
    pub leader: NodeId,
    /// In this leader epoch.
    pub leader_epoch: LeaderEpoch,
    /// Log "following" at info: the leader or epoch differs from the last task's (a restart
    /// against the same leader logs at debug only).
    pub announce: bool,
    /// How long to wait before the first action (a restart for the same leader and epoch).
    pub start_after: Duration,
}

/// Starts the task of the follower `following` for `replica`, beginning with the node's action
/// `first`. Returns what cancels it.
pub(super) fn spawn(
    driver: Arc<ClusterDriver>,
    replica: Arc<Replica>,
    following: Following,
    first: FollowerAction,
) -> CancellationToken {
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let Following {
        generation,
        leader,
        leader_epoch,
        announce,
        start_after,
    } = following;
    if announce {
        info!(partition = %replica.id, leader, leader_epoch, "following");
    } else {
        debug!(partition = %replica.id, leader, leader_epoch, "following again");
    }
    tokio::spawn(async move {
        tokio::select! {
            () = stop.cancelled() => {}
            () = async {
                tokio::time::sleep(start_after).await;
                follow(&driver, &replica, generation, leader, first).await;
            } => {}
        }
    });
    cancel
}

/// The follower's loop: carries out each action the node asks for and steps the node with its
/// result; returns when the node wants no more of this follower.
async fn follow(
    driver: &Arc<ClusterDriver>,
    replica: &Arc<Replica>,
    generation: u64,
    leader: NodeId,
    first: FollowerAction,
) {
    let log: &dyn ReplicaLog = replica.partition.as_ref();
    // The runtime does not change under the task: its inline-append bound is read once.
    let inline_max_bytes = crate::broker::produce_queue::inline_append_max_bytes();
    let mut action = first;
    let mut connection: Option<Client> = None;
    // The pauses after failed requests: reset by every answer.
    let mut backoff = Backoff::new(FOLLOWER_RETRY_BASE, FOLLOWER_RETRY_CAP);
    let mut fetched: Option<Bytes> = None;
    // The leader's log start, as its last answer said: adopted after the append (see
    // `adopt_log_start`).
    let mut leader_log_start: u64 = 0;
    // The fetch sent beside an append (`FollowerAction::Append::then_fetch`) and its answer.
    let mut pipelined: Option<(
        FetchRequest,
        AbortOnDropHandle<Result<Response, ClientError>>,
    )> = None;
    loop {
        let event = match action {
            FollowerAction::BecomeFollower { leader_epoch } => {
                let partition = Arc::clone(&replica.partition);
                let result =
                    blocking(move || ReplicaLog::become_follower(partition.as_ref(), leader_epoch))
                        .await;
                FollowerEvent::BecameFollower(result)
            }
            FollowerAction::AskEpochEnd(question) => {
                let request = Request::LeaderEpochEnd {
                    partitions: vec![LeaderEpochQuery {
                        topic: replica.id.topic.clone(),
                        partition: replica.id.partition,
                        current_leader_epoch: question.leader_epoch,
                        epoch: question.epoch,
                    }],
                };
                match send(driver, &mut connection, leader, request).await {
                    Ok(Response::LeaderEpochEnd { partitions }) => {
                        let answer = match partitions.into_iter().next() {
                            Some(entry) if entry.error == ErrorCode::None => {
                                Ok(entry.end.map(|end| (end.epoch, end.end_offset)))
                            }
                            Some(entry) => Err(fetch_error(entry.error)),
                            None => Err(FetchError::NotLeader),
                        };
                        backoff.reset();
                        FollowerEvent::EpochEnd(answer)
                    }
                    Ok(_) | Err(_) => {
                        backoff.wait().await;
                        FollowerEvent::Retry
                    }
                }
            }
            FollowerAction::Truncate { offset } => {
                let before = log.log_end_offset();
                let partition = Arc::clone(&replica.partition);
                let result =
                    blocking(move || ReplicaLog::truncate_to(partition.as_ref(), offset)).await;
                match &result {
                    Ok(()) if before > offset => info!(
                        partition = %replica.id,
                        from = before,
                        to = offset,
                        "truncated by leader epoch"
                    ),
                    Ok(()) => {}
                    Err(error) => {
                        warn!(partition = %replica.id, offset, %error, "truncation refused")
                    }
                }
                FollowerEvent::Truncated(result)
            }
            FollowerAction::StartOver { offset } => {
                let before = log.log_end_offset();
                let partition = Arc::clone(&replica.partition);
                let result =
                    blocking(move || ReplicaLog::start_over_at(partition.as_ref(), offset)).await;
                match &result {
                    Ok(()) => info!(
                        partition = %replica.id,
                        from = before,
                        to = offset,
                        "the leader deleted the records this replica would fetch next: its log starts over at the leader's log start"
                    ),
                    Err(error) => {
                        warn!(partition = %replica.id, offset, %error, "start-over refused")
                    }
                }
                FollowerEvent::StartedOver(result)
            }
            FollowerAction::Fetch(fetch) => {
                let answer = send(
                    driver,
                    &mut connection,
                    leader,
                    fetch_request(driver, replica, &fetch),
                )
                .await;
                on_fetch_answer(
                    replica,
                    &fetch,
                    answer,
                    &mut fetched,
                    &mut leader_log_start,
                    &mut backoff,
                )
                .await
            }
            FollowerAction::Append {
                records_epoch,
                leader_epoch,
                high_watermark,
                record_count,
                then_fetch,
            } => {
                // The next fetch leaves before the append starts, so its transfer (and its wait
                // at the leader) overlaps the append.
                pipelined = match then_fetch {
                    Some(fetch) => {
                        let request = fetch_request(driver, replica, &fetch);
                        let task = spawn_request(driver, &mut connection, leader, request).await;
                        Some((fetch, AbortOnDropHandle::new(task)))
                    }
                    None => None,
                };
                let batches = fetched.take().unwrap_or_default();
                let batches_len = batches.len();
                let result = if record_count > 0 && !batches.is_empty() {
                    let partition = Arc::clone(&replica.partition);
                    let append = move || {
                        ReplicaLog::append_replicated(
                            partition.as_ref(),
                            &batches,
                            records_epoch,
                            leader_epoch,
                        )
                    };
                    if appends_inline(replica, batches_len, inline_max_bytes) {
                        append()
                    } else {
                        blocking(append).await
                    }
                } else {
                    Ok(log.log_end_offset())
                };
                if let Err(error) = &result {
                    warn!(partition = %replica.id, %error, "replicated append refused");
                }
                log.advance_high_watermark(high_watermark);
                adopt_log_start(replica, leader_log_start).await;
                FollowerEvent::Appended(result)
            }
            FollowerAction::Report(report) => {
                let Some((fetch, mut answer)) = pipelined.take() else {
                    // No fetch under way (the engine's order broken): ask again.
                    action = match driver.follower_step(replica, generation, FollowerEvent::Retry) {
                        Some(next) => next,
                        None => return,
                    };
                    continue;
                };
                if !answer.is_finished() {
                    // Fire and forget: the answer carries nothing, and the next fetch reports the
                    // same log end if this one is lost.
                    let request = fetch_request(driver, replica, &report);
                    drop(spawn_request(driver, &mut connection, leader, request).await);
                }
                let result = match (&mut answer).await {
                    Ok(result) => result,
                    Err(error) => Err(ClientError::InvalidArgument(format!(
                        "the pipelined fetch's task failed: {error}"
                    ))),
                };
                if result.as_ref().is_err_and(|error| !keeps_connection(error)) {
                    connection = None;
                }
                on_fetch_answer(
                    replica,
                    &fetch,
                    result,
                    &mut fetched,
                    &mut leader_log_start,
                    &mut backoff,
                )
                .await
            }
            FollowerAction::RereadMetadata => {
                // The node takes this one itself (it stops the follower and re-reads).
                debug!(partition = %replica.id, leader, "follower stops; the partition state is read again");
                return;
            }
            FollowerAction::Nothing => {
                backoff.wait().await;
                FollowerEvent::Retry
            }
        };
        action = match driver.follower_step(replica, generation, event) {
            Some(next) => next,
            None => return,
        };
    }
}

/// Whether a follower appends `batches_len` fetched bytes on its own task rather than on the
/// blocking pool: up to `inline_max_bytes`, the produce path's bound
/// (`produce_queue::inline_append_max_bytes`: 2 MiB on a runtime of several workers, an answer
/// of the default 1 MiB fetch size, else 128 KiB), when the append cannot wait for a sync
/// (flush `always` syncs before a follower reports). The hand-off to a pool thread and back
/// woke two threads per answer, on the path of every `acks=all` acknowledgement (a
/// single-record produce waits for the followers' appends, and a stream of 1 MiB batches for
/// each follower's next fetch).
///
/// Measured with 1 MiB answers inline (`LABELS="rf1 rf3-all" tools/cluster-bench BINARY 1 10s`,
/// five interleaved pairs, AMD EPYC VM, 2026-12-06): factor 3 acks=all at 0.47–0.53 of factor 1
/// (median 0.49) against 0.44–0.49 (0.46) with them on the pool, the brokers at 1.08–1.21
/// against 1.11–1.29 core-s per GB. Tried with 4 MiB fetches in an earlier session (+3–9%)
/// and not kept then: a 4 MiB answer held a worker for 2 ms.
fn appends_inline(replica: &Replica, batches_len: usize, inline_max_bytes: usize) -> bool {
    batches_len <= inline_max_bytes && !replica.partition.acknowledge_blocks()
}

/// Runs a log operation on the blocking pool (it may fsync).
async fn blocking<T: Send + 'static>(
    operation: impl FnOnce() -> Result<T, ReplicaLogError> + Send + 'static,
) -> Result<T, ReplicaLogError> {
    tokio::task::spawn_blocking(operation)
        .await
        .unwrap_or_else(|error| Err(ReplicaLogError::Storage(error.to_string())))
}

/// The `ReplicaFetch` of one of the engine's fetches (or progress reports) for `replica`. A
/// fetch that reports its read offset as its log end goes as version 0; one that names them
/// apart, or a report, as version 1 (a report asks for no bytes and does not wait).
fn fetch_request(driver: &ClusterDriver, replica: &Replica, fetch: &FetchRequest) -> Request {
    let (max_wait_ms, min_bytes, max_bytes) = if fetch.report_only {
        (0, 0, 0)
    } else {
        (
            driver.config.replica_fetch_max_wait.as_millis() as u32,
            1,
            driver.config.replica_fetch_max_bytes,
        )
    };
    let log_end_offset = (fetch.report_only || fetch.log_end_offset != fetch.fetch_offset)
        .then_some(fetch.reported_log_end());
    Request::ReplicaFetch(ReplicaFetch {
        follower: fetch.follower,
        follower_incarnation: fetch.incarnation,
        leader_epoch: fetch.leader_epoch,
        max_wait_ms,
        min_bytes,
        max_bytes,
        partitions: vec![ReplicaFetchPartition {
            topic: replica.id.topic.clone(),
            partition: replica.id.partition,
            fetch_offset: fetch.fetch_offset,
            log_end_offset,
        }],
    })
}

/// Moves this replica's log start up to the leader's (never past its own high watermark: see
/// `Partition::follow_log_start`), durably, when the leader's is ahead: records deleted on the
/// leader (DeleteRecords, retention) then stay deleted if this replica takes over. Nothing is
/// written while the two agree, so a fetch costs no fsync. A failure is logged: the next
/// answer tries again, and the replica's log is whole either way.
async fn adopt_log_start(replica: &Replica, leader_log_start: u64) {
    if leader_log_start <= replica.partition.log_start_offset() {
        return;
    }
    let partition = Arc::clone(&replica.partition);
    let adopted =
        tokio::task::spawn_blocking(move || partition.follow_log_start(leader_log_start)).await;
    match adopted {
        Ok(Ok(log_start)) => {
            debug!(partition = %replica.id, log_start, leader_log_start, "adopted the leader's log start")
        }
        Ok(Err(error)) => {
            warn!(partition = %replica.id, leader_log_start, %error, "could not adopt the leader's log start")
        }
        Err(error) => {
            warn!(partition = %replica.id, leader_log_start, %error, "the log start task failed")
        }
    }
}

/// The leader's answer to `fetch` (or the failure to get one) as the node's input, keeping the
/// batches for the append it asks for next and the leader's log start.
async fn on_fetch_answer(
    replica: &Replica,
    fetch: &FetchRequest,
    answer: Result<Response, ClientError>,
    fetched: &mut Option<Bytes>,
    leader_log_start: &mut u64,
    backoff: &mut Backoff,
) -> FollowerEvent {
    let Ok(Response::ReplicaFetch { partitions }) = answer else {
        backoff.wait().await;
        return FollowerEvent::Retry;
    };
    backoff.reset();
    let response = match partitions.into_iter().next() {
        Some(entry) if entry.error == ErrorCode::None => {
            *leader_log_start = (*leader_log_start).max(entry.log_start_offset);
            let batches = contiguous(entry.batches);
            let record_count = record_count(&batches, fetch.fetch_offset);
            *fetched = Some(batches);
            Ok(FetchResponse {
                base_offset: fetch.fetch_offset,
                record_count,
                records_epoch: entry.records_epoch,
                high_watermark: entry.high_watermark,
            })
        }
        // Below the leader's log start: its answer names where that is now.
        Some(entry)
            if entry.error == ErrorCode::OffsetOutOfRange
                && entry.log_start_offset > fetch.fetch_offset =>
        {
            Err(FetchError::BelowLogStart {
                fetch_offset: fetch.fetch_offset,
                log_start_offset: entry.log_start_offset,
            })
        }
        Some(entry) if entry.error == ErrorCode::OffsetOutOfRange => {
            Err(FetchError::OffsetOutOfRange {
                fetch_offset: fetch.fetch_offset,
                high_watermark: entry.high_watermark,
            })
        }
        Some(entry) => Err(fetch_error(entry.error)),
        None => Err(FetchError::NotLeader),
    };
    if let Err(error) = &response {
        debug!(partition = %replica.id, %error, "fetch refused");
    }
    FollowerEvent::Fetched(response)
}

/// The connection to `leader`, made first if there is none.
async fn connect<'a>(
    driver: &ClusterDriver,
    connection: &'a mut Option<Client>,
    leader: NodeId,
) -> Result<&'a Client, ClientError> {
    if connection.is_none() {
        let address = match driver.config.peer_addrs.get(&leader) {
            Some(overridden) => Some(overridden.clone()),
            None => driver
                .state()
                .brokers
                .get(&leader)
                .map(|b| b.native_addr.clone()),
        };
        let Some(address) = address else {
            return Err(ClientError::InvalidArgument(format!(
                "broker {leader} is not registered"
            )));
        };
        let config = ClientConfig {
            connect_timeout: Duration::from_secs(2),
            reconnect_timeout: Duration::from_secs(2),
            credentials: driver.config.peer_credentials.clone(),
            tls: driver.config.peer_tls.clone(),
            ..ClientConfig::default()
        };
        *connection = Some(Client::connect_with(address.as_str(), config).await?);
    }
    Ok(connection.as_ref().expect("connected above"))
}

/// Whether the connection stays usable after `error`: the leader answered (a refusal), as
/// opposed to a lost or broken connection, which the next step makes again (perhaps to a new
/// address).
fn keeps_connection(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Server { .. } | ClientError::NotLeader { .. }
    )
}

/// How long a replication request may take: the leader's longest hold plus slack.
fn request_timeout(driver: &ClusterDriver) -> Duration {
    driver.config.replica_fetch_max_wait + Duration::from_secs(5)
}

/// Sends `request` to `leader`, connecting first if needed, and waits for the answer.
async fn send(
    driver: &ClusterDriver,
    connection: &mut Option<Client>,
    leader: NodeId,
    request: Request,
) -> Result<Response, ClientError> {
    let client = connect(driver, connection, leader).await?;
    let result = client.request(request, request_timeout(driver)).await;
    if result.as_ref().is_err_and(|error| !keeps_connection(error)) {
        *connection = None;
    }
    result
}

/// Sends `request` to `leader` from a task of its own (connecting first if needed) and returns
/// the task, whose result is the answer: the caller goes on (appends) while it is under way.
async fn spawn_request(
    driver: &ClusterDriver,
    connection: &mut Option<Client>,
    leader: NodeId,
    request: Request,
) -> JoinHandle<Result<Response, ClientError>> {
    let timeout = request_timeout(driver);
    match connect(driver, connection, leader).await {
        Ok(client) => {
            let client = client.clone();
            tokio::spawn(async move { client.request(request, timeout).await })
        }
        Err(error) => tokio::spawn(async move { Err(error) }),
    }
}

/// A partition's fetched batches as one buffer. A response read off the wire holds them as a
/// single slice of the received frame (or none), which is returned as it is: the batches reach
/// `append_replicated` without a copy. Only a response built in memory can hold several parts;
/// those are joined.
fn contiguous(mut parts: Vec<Bytes>) -> Bytes {
    match parts.len() {
        0 => Bytes::new(),
        1 => parts.pop().expect("one part"),
        _ => Bytes::from(parts.concat()),
    }
}

/// How many records `batches` holds past `fetch_offset` (0 for none).
fn record_count(batches: &[u8], fetch_offset: u64) -> u64 {
    let mut position = 0;
    let mut end = fetch_offset;
    while let Some(header) = batches.get(position..).and_then(BatchHeader::parse) {
        end = end.max(header.next_offset());
        let length = header.batch_length as usize;
        if length == 0 {
            break;
        }
        position += length;
    }
    end - fetch_offset
}

/// A leader's per-partition refusal as the engine's error.
fn fetch_error(code: ErrorCode) -> FetchError {
    match code {
        ErrorCode::FencedLeaderEpoch => FetchError::FencedLeaderEpoch {
            epoch: 0,
            current: 0,
        },
        _ => FetchError::NotLeader,
    }
}
