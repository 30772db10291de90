//! A follower's task for one partition: the replication engine's follower steps
//! ([`Follower`]) driven with real I/O. It installs the leader epoch in the log's fence, asks the
//! leader where its latest epoch ended and truncates there (as often as the engine says), then
//! fetches in a loop, appending what comes back through the fence's leader-epoch check and
//! raising the high watermark. Requests go over one native-protocol connection to the leader.
//!
//! The task ends by itself when the engine wants the partition state read again (the leader
//! refused with another epoch, the log refused a step); the driver's loop then starts a new one
//! from the state it reads. A lost connection is only slow: the same step is sent again.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::leading::Following;
use super::{ClusterDriver, Replica};
use crate::batch::BatchHeader;
use crate::client::{Client, ClientConfig, ClientError};
use crate::cluster::replica_log::{ReplicaLog, ReplicaLogError};
use crate::cluster::replication::follower::{Follower, FollowerAction};
use crate::cluster::replication::{FetchError, FetchResponse};
use crate::cluster::{LeaderEpoch, NodeId};
use crate::protocol::{
    ErrorCode, LeaderEpochQuery, ReplicaFetch, ReplicaFetchPartition, Request, Response,
};

/// Pause after a failed request or connection before the step is sent again.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// Pause before a follower that wants a re-read ends (so a persistent refusal does not spin).
const REREAD_PAUSE: Duration = Duration::from_millis(100);

/// Starts following `leader` in `leader_epoch` for `replica`.
pub(super) fn spawn(
    driver: Arc<ClusterDriver>,
    replica: Arc<Replica>,
    leader: NodeId,
    leader_epoch: LeaderEpoch,
) -> Following {
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    info!(partition = %replica.id, leader, leader_epoch, "following");
    let task = tokio::spawn(async move {
        tokio::select! {
            () = stop.cancelled() => {}
            () = follow(&driver, &replica, leader, leader_epoch) => {}
        }
    });
    Following {
        leader,
        leader_epoch,
        cancel,
        task,
    }
}

/// The follower's loop; returns when the engine wants the partition state read again.
async fn follow(
    driver: &Arc<ClusterDriver>,
    replica: &Arc<Replica>,
    leader: NodeId,
    leader_epoch: LeaderEpoch,
) {
    let log: &dyn ReplicaLog = replica.partition.as_ref();
    let (mut follower, mut action) = Follower::new(
        driver.config.node_id,
        driver.incarnation,
        leader,
        leader_epoch,
        &driver.config.replication,
    );
    let mut connection: Option<Client> = None;
    let mut fetched: Option<Bytes> = None;
    loop {
        action = match action {
            FollowerAction::BecomeFollower { leader_epoch } => {
                let partition = Arc::clone(&replica.partition);
                let result =
                    blocking(move || ReplicaLog::become_follower(partition.as_ref(), leader_epoch))
                        .await;
                follower.on_became_follower(log, result)
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
                        follower.on_epoch_end(log, answer)
                    }
                    Ok(_) | Err(_) => {
                        tokio::time::sleep(RETRY_PAUSE).await;
                        follower.retry(log)
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
                follower.on_truncated(log, result)
            }
            FollowerAction::Fetch(fetch) => {
                let request = Request::ReplicaFetch(ReplicaFetch {
                    follower: fetch.follower,
                    follower_incarnation: fetch.incarnation,
                    leader_epoch: fetch.leader_epoch,
                    max_wait_ms: driver.config.replica_fetch_max_wait.as_millis() as u32,
                    min_bytes: 1,
                    max_bytes: driver.config.replica_fetch_max_bytes,
                    partitions: vec![ReplicaFetchPartition {
                        topic: replica.id.topic.clone(),
                        partition: replica.id.partition,
                        fetch_offset: fetch.fetch_offset,
                    }],
                });
                match send(driver, &mut connection, leader, request).await {
                    Ok(Response::ReplicaFetch { partitions }) => {
                        let response = match partitions.into_iter().next() {
                            Some(entry) if entry.error == ErrorCode::None => {
                                let batches = contiguous(entry.batches);
                                let record_count = record_count(&batches, fetch.fetch_offset);
                                fetched = Some(batches);
                                Ok(FetchResponse {
                                    base_offset: fetch.fetch_offset,
                                    record_count,
                                    records_epoch: entry.records_epoch,
                                    high_watermark: entry.high_watermark,
                                })
                            }
                            Some(entry) if entry.error == ErrorCode::OffsetOutOfRange => {
                                Err(FetchError::OffsetOutOfRange {
                                    fetch_offset: fetch.fetch_offset,
                                    log_end_offset: entry.high_watermark,
                                })
                            }
                            Some(entry) => Err(fetch_error(entry.error)),
                            None => Err(FetchError::NotLeader),
                        };
                        if let Err(error) = &response {
                            debug!(partition = %replica.id, %error, "fetch refused");
                        }
                        follower.on_fetch_response(log, response)
                    }
                    Ok(_) | Err(_) => {
                        tokio::time::sleep(RETRY_PAUSE).await;
                        follower.retry(log)
                    }
                }
            }
            FollowerAction::Append {
                records_epoch,
                leader_epoch,
                high_watermark,
                record_count,
            } => {
                let batches = fetched.take().unwrap_or_default();
                let result = if record_count > 0 && !batches.is_empty() {
                    let partition = Arc::clone(&replica.partition);
                    blocking(move || {
                        ReplicaLog::append_replicated(
                            partition.as_ref(),
                            &batches,
                            records_epoch,
                            leader_epoch,
                        )
                    })
                    .await
                } else {
                    Ok(log.log_end_offset())
                };
                if let Err(error) = &result {
                    warn!(partition = %replica.id, %error, "replicated append refused");
                }
                log.advance_high_watermark(high_watermark);
                follower.on_appended(log, result)
            }
            FollowerAction::RereadMetadata => {
                debug!(partition = %replica.id, leader, leader_epoch, "follower stops; the partition state is read again");
                tokio::time::sleep(REREAD_PAUSE).await;
                driver.wake.notify_one();
                return;
            }
            FollowerAction::Nothing => {
                tokio::time::sleep(RETRY_PAUSE).await;
                follower.retry(log)
            }
        };
    }
}

/// Runs a log operation on the blocking pool (it may fsync).
async fn blocking<T: Send + 'static>(
    operation: impl FnOnce() -> Result<T, ReplicaLogError> + Send + 'static,
) -> Result<T, ReplicaLogError> {
    tokio::task::spawn_blocking(operation)
        .await
        .unwrap_or_else(|error| Err(ReplicaLogError::Storage(error.to_string())))
}

/// Sends `request` to `leader`, connecting first if needed; a failed connection is dropped so
/// the next step connects again (perhaps to a new address).
async fn send(
    driver: &ClusterDriver,
    connection: &mut Option<Client>,
    leader: NodeId,
    request: Request,
) -> Result<Response, ClientError> {
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
            ..ClientConfig::default()
        };
        *connection = Some(Client::connect_with(address.as_str(), config).await?);
    }
    let client = connection.as_ref().expect("connected above");
    let timeout = driver.config.replica_fetch_max_wait + Duration::from_secs(5);
    let result = client.request(request, timeout).await;
    if let Err(error) = &result {
        if !matches!(
            error,
            ClientError::Server { .. } | ClientError::NotLeader { .. }
        ) {
            *connection = None;
        }
    }
    result
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
