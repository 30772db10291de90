//! The native protocol's requests translated into broker service calls, and the results back
//! into responses. No broker logic lives here: ordering, long polls, fsyncs on the blocking pool
//! and leases are the service's.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{self, BoxFuture};
use futures::{FutureExt, TryFutureExt};

use super::cluster_view::ClusterView;
use super::errors::to_error_response;
use crate::batch::{BatchError, BatchHeader};
use crate::broker::produce_queue::ProduceQueue;
use crate::broker::{BrokerError, BrokerService, CommittedOffset, FetchRequest, ProduceRequest};
use crate::protocol::{
    Acks, ClusterMetadata, ErrorCode, ErrorResponse, PartitionMetadata, Replication, Request,
    RequestFrame, Response, ResponseFrame, TopicMetadata, NO_OFFSET_FOR_TIMESTAMP,
};
use crate::server::ServerConfig;
use crate::storage::{Appended, ReadResult, StorageError, WriteCredential};

/// Starts one request and returns the future of its response frame.
///
/// A produce is handed to the connection's [`ProduceQueue`] *now*, which appends in the
/// connection's request order, so pipelined produces to a partition land in the order they were
/// sent; the returned future waits for the append and then for durability. Every other request
/// runs entirely in the future.
pub fn start(
    service: &Arc<BrokerService>,
    config: &ServerConfig,
    cluster: &Arc<dyn ClusterView>,
    produce_queue: &ProduceQueue,
    frame: RequestFrame,
) -> BoxFuture<'static, ResponseFrame> {
    let correlation_id = frame.correlation_id;
    if let Some(refused) = cluster_refusal(cluster.as_ref(), &frame.request) {
        return Box::pin(future::ready(ResponseFrame::error(correlation_id, refused)));
    }
    if let Request::AuthenticateStart { .. } | Request::AuthenticateContinue { .. } = frame.request
    {
        // The connection's authentication state answers these (`super::authentication`).
        return Box::pin(future::ready(ResponseFrame::error(
            correlation_id,
            crate::protocol::ErrorResponse::new(
                crate::protocol::ErrorCode::IllegalAuthenticationState,
                "authentication requests are answered by the connection, not dispatched",
            ),
        )));
    }
    let answer = answer(service, config, cluster, produce_queue, frame.request);
    Box::pin(answer.map(move |result| match result {
        Ok(response) => ResponseFrame::ok(correlation_id, response),
        Err(error) => ResponseFrame::error(correlation_id, to_error_response(&error)),
    }))
}

/// The service call for one request. Produce is submitted to the queue before this returns;
/// everything else runs in the returned future.
fn answer(
    service: &Arc<BrokerService>,
    config: &ServerConfig,
    cluster: &Arc<dyn ClusterView>,
    produce_queue: &ProduceQueue,
    request: Request,
) -> BoxFuture<'static, Result<Response, BrokerError>> {
    let service = Arc::clone(service);
    let request = match &config.cluster {
        Some(driver) => match answer_in_cluster(driver, produce_queue, request) {
            Ok(answer) => return answer,
            Err(request) => request,
        },
        None => request,
    };
    match request {
        // Standalone, `acks` changes nothing: the leader is the only replica, so "the leader
        // has it" and "every in-sync replica has it" are the same moment. In a cluster the
        // produce went to `answer_in_cluster`.
        Request::Produce {
            topic,
            partition,
            batch,
            acks: _,
        } => {
            // The native batch carries its writer's epoch in its header (bytes 20..28).
            let Some(epoch) = BatchHeader::peek_epoch(&batch) else {
                let error = StorageError::from(BatchError::TooShort { len: batch.len() });
                return Box::pin(future::ready(Err(error.into())));
            };
            let acknowledged = produce_queue.produce(ProduceRequest {
                topic,
                partition,
                credential: WriteCredential::Epoch(epoch),
                batch,
            });
            Box::pin(acknowledged.map_ok(produced))
        }
        Request::Fetch {
            topic,
            partition,
            offset,
            max_bytes,
            max_wait_ms,
        } => {
            let request = FetchRequest {
                topic,
                partition,
                offset,
                max_bytes: max_bytes.min(config.max_fetch_bytes) as usize,
                max_wait: Duration::from_millis(u64::from(
                    max_wait_ms.min(config.max_fetch_wait_ms),
                )),
            };
            Box::pin(async move { service.fetch(request).await.map(fetched) })
        }
        Request::ApiVersions => Box::pin(future::ready(Ok(Response::supported_api_versions()))),
        Request::InitProducerId => Box::pin(async move {
            let (producer_id, producer_epoch) = service.init_producer_id().await?;
            Ok(Response::InitProducerId {
                producer_id,
                producer_epoch,
            })
        }),
        Request::Metadata {
            topics,
            cluster: with_cluster,
        } => {
            let view = with_cluster.then_some(cluster.as_ref());
            Box::pin(future::ready(metadata(&service, &topics, view)))
        }
        Request::ListOffsets {
            topic,
            partition,
            timestamp,
        } => Box::pin(future::ready(list_offsets(
            &service, &topic, partition, timestamp,
        ))),
        // A factor above 1 was refused by `cluster_refusal`; 1 is what a standalone topic has.
        // cluster: create the topic through the metadata store with its replication settings.
        Request::CreateTopic {
            name,
            partitions,
            config,
            replication: _,
        } => Box::pin(async move {
            service.create_topic(name, partitions, config).await?;
            Ok(Response::CreateTopic)
        }),
        Request::DeleteTopic { name } => Box::pin(async move {
            service.delete_topic(name).await?;
            Ok(Response::DeleteTopic)
        }),
        Request::AcquireLease {
            topic,
            partition,
            holder,
            ttl_ms,
        } => Box::pin(async move {
            let grant = service
                .acquire_lease(&topic, partition, holder, ttl_ms)
                .await?;
            Ok(Response::AcquireLease {
                epoch: grant.epoch,
                lease_id: grant.lease_id,
                ttl_ms: grant.ttl_ms,
            })
        }),
        Request::RenewLease {
            topic,
            partition,
            lease_id,
        } => Box::pin(async move {
            let renewed = service.renew_lease(&topic, partition, lease_id).await?;
            Ok(Response::RenewLease {
                epoch: renewed.epoch,
                ttl_ms: renewed.ttl_ms,
            })
        }),
        Request::ReleaseLease {
            topic,
            partition,
            lease_id,
        } => Box::pin(async move {
            service.release_lease(&topic, partition, lease_id).await?;
            Ok(Response::ReleaseLease)
        }),
        Request::OffsetCommit {
            group,
            topic,
            partition,
            offset,
            metadata,
        } => Box::pin(async move {
            let committed = CommittedOffset { offset, metadata };
            service
                .commit_offset(group, topic, partition, committed)
                .await?;
            Ok(Response::OffsetCommit)
        }),
        Request::OffsetFetch {
            group,
            topic,
            partition,
        } => {
            let committed = service.committed_offset(&group, &topic, partition);
            Box::pin(future::ready(committed.map(|committed| {
                Response::OffsetFetch {
                    offset: committed.as_ref().map(|committed| committed.offset),
                    metadata: committed
                        .map(|committed| committed.metadata)
                        .unwrap_or_default(),
                }
            })))
        }
        // Refused by `cluster_refusal` on a standalone broker.
        // cluster: serve them from the replica logs (the replication engine's leader side).
        Request::ReplicaFetch(_) | Request::LeaderEpochEnd { .. } => {
            Box::pin(future::ready(Err(BrokerError::InvalidConfig(
                "replication requests need a broker that is part of a cluster".into(),
            ))))
        }
        // Answered in `start` before dispatch; never reaches the broker.
        Request::AuthenticateStart { .. } | Request::AuthenticateContinue { .. } => {
            Box::pin(future::ready(Err(BrokerError::InvalidConfig(
                "authentication requests are answered by the connection".into(),
            ))))
        }
    }
}

/// The requests a broker in a cluster answers differently: a produce waits for `acks=all`, reads
/// and leases are served by the partition's leader only (others answer `NOT_LEADER` naming it),
/// topics are created and deleted in the metadata store, and the replication APIs are served.
/// `Err` gives the request back: it goes on as on a standalone broker.
fn answer_in_cluster(
    driver: &Arc<crate::cluster::driver::ClusterDriver>,
    produce_queue: &ProduceQueue,
    request: Request,
) -> Result<BoxFuture<'static, Result<Response, BrokerError>>, Request> {
    let driver = Arc::clone(driver);
    let leader_only = |topic: &str, partition: u32| driver.require_leader(topic, partition);
    let refused = match &request {
        Request::Fetch {
            topic, partition, ..
        }
        | Request::ListOffsets {
            topic, partition, ..
        }
        | Request::AcquireLease {
            topic, partition, ..
        }
        | Request::RenewLease {
            topic, partition, ..
        }
        | Request::ReleaseLease {
            topic, partition, ..
        } => leader_only(topic, *partition).err(),
        _ => None,
    };
    if let Some(refused) = refused {
        return Ok(Box::pin(future::ready(Err(refused))));
    }
    match request {
        Request::Produce {
            topic,
            partition,
            batch,
            acks,
        } => {
            // Version 0 (no `acks`) gets the broker's default: `all` on a replicated partition.
            let acks_all = acks.unwrap_or(Acks::All) == Acks::All;
            if let Err(refused) = driver.check_produce(&topic, partition, acks_all) {
                return Ok(Box::pin(future::ready(Err(refused))));
            }
            let Some(epoch) = BatchHeader::peek_epoch(&batch) else {
                let error = StorageError::from(BatchError::TooShort { len: batch.len() });
                return Ok(Box::pin(future::ready(Err(error.into()))));
            };
            // Epoch 0 is no lease at all (as a Kafka producer's write): accepted until the
            // partition's first grant. A literal epoch 0 could never pass the producer epoch
            // base every leader installs, so without this a never-leased replicated partition
            // would take no native writes.
            let credential = match epoch {
                0 => WriteCredential::Unleased,
                epoch => WriteCredential::Epoch(epoch),
            };
            let acknowledged = produce_queue.produce(ProduceRequest {
                topic: topic.clone(),
                partition,
                credential,
                batch,
            });
            Ok(Box::pin(async move {
                let appended = acknowledged.await?;
                driver
                    .await_commit(&topic, partition, appended.last_offset, acks_all)
                    .await?;
                Ok(produced(appended))
            }))
        }
        Request::CreateTopic {
            name,
            partitions,
            config,
            replication,
        } => Ok(Box::pin(async move {
            driver
                .create_topic(name, partitions, config, replication)
                .await?;
            Ok(Response::CreateTopic)
        })),
        Request::DeleteTopic { name } => Ok(Box::pin(async move {
            driver.delete_topic(&name).await?;
            Ok(Response::DeleteTopic)
        })),
        Request::ReplicaFetch(fetch) => Ok(Box::pin(async move {
            Ok(driver.serve_replica_fetch(fetch).await)
        })),
        Request::LeaderEpochEnd { partitions } => Ok(Box::pin(future::ready(Ok(
            driver.serve_epoch_end(partitions)
        )))),
        other => Err(other),
    }
}

/// The answer of a broker that cannot serve `request` because it is not part of a cluster:
/// the replication APIs, and a replication factor above 1 (or an invalid one). `None` when the
/// request goes on to the broker.
fn cluster_refusal(cluster: &dyn ClusterView, request: &Request) -> Option<ErrorResponse> {
    if let Request::CreateTopic {
        replication: Some(replication),
        ..
    } = request
    {
        if let Some(invalid) = invalid_replication(replication) {
            return Some(ErrorResponse::new(ErrorCode::InvalidConfig, invalid));
        }
        if replication.factor > 1 && !cluster.is_cluster() {
            return Some(ErrorResponse::new(
                ErrorCode::ClusterRequired,
                format!(
                    "replication factor {} needs a cluster: start the brokers with --etcd (this broker runs standalone and keeps one copy; use --replication-factor 1)",
                    replication.factor
                ),
            ));
        }
    }
    let api = request.api_key();
    match request {
        Request::ReplicaFetch(_) | Request::LeaderEpochEnd { .. } if !cluster.is_cluster() => {
            Some(ErrorResponse::new(
                ErrorCode::ClusterRequired,
                format!(
                    "{api}: this broker is not part of a cluster (it was started without --etcd), so it has no replicas to serve"
                ),
            ))
        }
        _ => None,
    }
}

/// Why a replication setting can never be honoured, whatever the cluster.
fn invalid_replication(replication: &Replication) -> Option<String> {
    if replication.factor == 0 {
        return Some("replication factor 0: every partition needs at least one copy".into());
    }
    let min_insync = replication.effective_min_insync();
    if min_insync > replication.factor {
        return Some(format!(
            "min_insync {min_insync} is above the replication factor {}: no write could ever be acknowledged with acks=all",
            replication.factor
        ));
    }
    None
}

/// The topics, and for a version-1 request (`cluster` given) the brokers and each partition's
/// leader, replicas, in-sync replicas and high watermark.
fn metadata(
    service: &BrokerService,
    topics: &[String],
    cluster: Option<&dyn ClusterView>,
) -> Result<Response, BrokerError> {
    let found = service.metadata(topics)?;
    let topics: Vec<TopicMetadata> = found
        .iter()
        .map(|topic| TopicMetadata {
            name: topic.name().to_string(),
            partitions: topic.partitions().len() as u32,
            config: *topic.config(),
        })
        .collect();
    let cluster = cluster.map(|view| ClusterMetadata {
        brokers: view.brokers(),
        partitions: topics
            .iter()
            .flat_map(|topic| (0..topic.partitions).map(move |index| (topic, index)))
            .map(|(topic, index)| partition_metadata(service, view, &topic.name, index))
            .collect(),
    });
    Ok(Response::Metadata { topics, cluster })
}

/// One partition's replication state; its high watermark is this broker's (0 for a partition
/// that could not be opened: its requests answer `PARTITION_UNAVAILABLE`).
fn partition_metadata(
    service: &BrokerService,
    view: &dyn ClusterView,
    topic: &str,
    partition: u32,
) -> PartitionMetadata {
    let state = view.partition_state(topic, partition);
    let high_watermark = service
        .list_offsets(topic, partition)
        .map_or(0, |offsets| offsets.latest);
    PartitionMetadata {
        topic: topic.to_owned(),
        partition,
        leader: state.leader,
        leader_epoch: state.leader_epoch,
        replicas: state.replicas,
        isr: state.isr,
        high_watermark,
    }
}

/// The offsets, and for a version-1 request the first offset at or after its timestamp.
fn list_offsets(
    service: &BrokerService,
    topic: &str,
    partition: u32,
    timestamp: Option<i64>,
) -> Result<Response, BrokerError> {
    let offsets = service.list_offsets(topic, partition)?;
    let offset_for_timestamp = match timestamp {
        None => None,
        Some(timestamp) => Some(
            service
                .offset_for_timestamp(topic, partition, timestamp)?
                .map_or(NO_OFFSET_FOR_TIMESTAMP, |offset| {
                    i64::try_from(offset).unwrap_or(i64::MAX)
                }),
        ),
    };
    Ok(Response::ListOffsets {
        earliest: offsets.earliest,
        latest: offsets.latest,
        epoch: offsets.epoch,
        offset_for_timestamp,
    })
}

fn produced(appended: Appended) -> Response {
    Response::Produce {
        base_offset: appended.base_offset,
        last_offset: appended.last_offset,
        log_end_offset: appended.log_end_offset,
    }
}

fn fetched(result: ReadResult) -> Response {
    Response::Fetch {
        high_watermark: result.high_watermark,
        log_start_offset: result.log_start_offset,
        batches: result.batches,
    }
}
