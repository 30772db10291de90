//! The native protocol's requests translated into broker service calls, and the results back
//! into responses. No broker logic lives here: ordering, long polls, fsyncs on the blocking pool
//! and leases are the service's.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{self, BoxFuture};
use futures::{FutureExt, TryFutureExt};

use super::refusals::{led_partition, refusal};
use crate::batch::{BatchError, BatchHeader};
use crate::broker::cluster::ReplicaManager;
use crate::broker::produce_queue::ProduceQueue;
use crate::broker::{BrokerError, BrokerService, CommittedOffset, FetchRequest, ProduceRequest};
use crate::protocol::{
    BrokerMetadata, ClusterMetadata, PartitionMetadata, Request, RequestFrame, Response,
    ResponseFrame, TopicMetadata, NO_OFFSET_FOR_TIMESTAMP,
};
use crate::server::ServerConfig;
use crate::storage::{Appended, StorageError};

/// Starts one request and returns the future of its response frame.
///
/// A produce is handed to the connection's [`ProduceQueue`] *now*, which appends in the
/// connection's request order, so pipelined produces to a partition land in the order they were
/// sent; the returned future waits for the append and then for durability. Every other request
/// runs entirely in the future.
pub fn start(
    service: &Arc<BrokerService>,
    config: &ServerConfig,
    advertised: &str,
    produce_queue: &ProduceQueue,
    frame: RequestFrame,
) -> BoxFuture<'static, ResponseFrame> {
    let correlation_id = frame.correlation_id;
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
    let request = match super::transactions::answer(service, frame.request) {
        Ok(transaction) => {
            return Box::pin(transaction.map(move |result| match result {
                Ok(response) => ResponseFrame::ok(correlation_id, response),
                Err(error) => ResponseFrame::error(correlation_id, error),
            }))
        }
        Err(request) => request,
    };
    // A partition's storage that refuses as not the leader (a cluster's, when leadership moved
    // between the service's check and the write) is answered naming the leader: the refusal
    // needs to know which partition it was.
    let led = led_partition(&request);
    let answer = answer(service, config, advertised, produce_queue, request);
    let service = Arc::clone(service);
    Box::pin(answer.map(move |result| match result {
        Ok(response) => ResponseFrame::ok(correlation_id, response),
        Err(error) => {
            let partition = led.as_ref().map(|(topic, index)| (topic.as_str(), *index));
            ResponseFrame::error(correlation_id, refusal(&service, partition, &error))
        }
    }))
}

/// The service call for one request. Produce is submitted to the queue before this returns;
/// everything else runs in the returned future. What a request means in this broker's mode
/// (who leads, `acks`, where topics are made) is the service's replica manager's to decide.
fn answer(
    service: &Arc<BrokerService>,
    config: &ServerConfig,
    advertised: &str,
    produce_queue: &ProduceQueue,
    request: Request,
) -> BoxFuture<'static, Result<Response, BrokerError>> {
    let service = Arc::clone(service);
    match request {
        Request::Produce {
            topic,
            partition,
            batch,
            acks,
        } => {
            // The native batch carries its writer's epoch in its header (bytes 20..28).
            let Some(epoch) = BatchHeader::peek_epoch(&batch) else {
                let error = StorageError::from(BatchError::TooShort { len: batch.len() });
                return Box::pin(future::ready(Err(error.into())));
            };
            let request = ProduceRequest {
                verification: None,
                topic,
                partition,
                credential: service.producing().native_credential(epoch),
                batch: batch.into(),
            };
            Box::pin(
                service
                    .producing()
                    .produce(produce_queue, request, acks)
                    .map_ok(produced),
            )
        }
        Request::Fetch {
            topic,
            partition,
            offset,
            max_bytes,
            max_wait_ms,
            read_committed,
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
            super::fetch::answer(service, request, read_committed)
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
            let advertised = with_cluster.then_some(advertised);
            Box::pin(future::ready(metadata(&service, &topics, advertised)))
        }
        Request::ListOffsets {
            topic,
            partition,
            timestamp,
        } => Box::pin(future::ready(list_offsets(
            &service, &topic, partition, timestamp,
        ))),
        Request::CreateTopic {
            name,
            partitions,
            config,
            replication,
        } => Box::pin(async move {
            service
                .topics()
                .create_topic(name, partitions, config, replication)
                .await?;
            Ok(Response::CreateTopic)
        }),
        Request::DeleteTopic { name } => Box::pin(async move {
            service.topics().delete_topic(name).await?;
            Ok(Response::DeleteTopic)
        }),
        Request::DeleteRecords {
            topic,
            partition,
            offset,
        } => Box::pin(async move {
            let low_watermark = service
                .reads()
                .delete_records(&topic, partition, offset)
                .await?;
            Ok(Response::DeleteRecords { low_watermark })
        }),
        Request::AlterTopicConfig { name, change } => Box::pin(async move {
            let config = service
                .topics()
                .alter_topic_config(
                    name,
                    Arc::new(move |config| Ok(change.apply(config))),
                    false,
                )
                .await?;
            Ok(Response::AlterTopicConfig { config })
        }),
        Request::CreatePartitions {
            name,
            partition_count,
            validate_only,
        } => Box::pin(async move {
            let partition_count = service
                .topics()
                .create_partitions(name, partition_count, validate_only)
                .await?;
            Ok(Response::CreatePartitions { partition_count })
        }),
        Request::AcquireLease {
            topic,
            partition,
            holder,
            ttl_ms,
        } => Box::pin(async move {
            let grant = service
                .leases()
                .acquire(&topic, partition, holder, ttl_ms)
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
            let renewed = service.leases().renew(&topic, partition, lease_id).await?;
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
            service
                .leases()
                .release(&topic, partition, lease_id)
                .await?;
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
                .groups()
                .commit_offset(group, topic, partition, committed)
                .await?;
            Ok(Response::OffsetCommit)
        }),
        Request::OffsetFetch {
            group,
            topic,
            partition,
        } => Box::pin(async move {
            let committed = service
                .groups()
                .committed_offset(&group, &topic, partition)
                .await?;
            Ok(Response::OffsetFetch {
                offset: committed.as_ref().map(|committed| committed.offset),
                metadata: committed
                    .map(|committed| committed.metadata)
                    .unwrap_or_default(),
            })
        }),
        Request::ReplicaFetch(fetch) => {
            Box::pin(async move { service.replica_manager().serve_replica_fetch(fetch).await })
        }
        Request::LeaderEpochEnd { partitions } => Box::pin(future::ready(
            service.replica_manager().serve_epoch_end(partitions),
        )),
        // Answered in `start` before dispatch; never reaches the broker.
        Request::InitTransaction { .. }
        | Request::AddToTransaction { .. }
        | Request::EndTransaction { .. }
        | Request::VerifyTransaction { .. }
        | Request::TxnOffsetCommit { .. }
        | Request::EndTxnOffsets { .. } => unreachable!("answered by `super::transactions`"),
        Request::AuthenticateStart { .. } | Request::AuthenticateContinue { .. } => {
            Box::pin(future::ready(Err(BrokerError::InvalidConfig(
                "authentication requests are answered by the connection".into(),
            ))))
        }
    }
}

/// The topics, and for a version-1 request (`advertised` given: where this listener is reached)
/// the brokers and each partition's leader, replicas, in-sync replicas and high watermark.
fn metadata(
    service: &BrokerService,
    topics: &[String],
    advertised: Option<&str>,
) -> Result<Response, BrokerError> {
    let found = service.reads().metadata(topics)?;
    let topics: Vec<TopicMetadata> = found
        .iter()
        .map(|topic| TopicMetadata {
            name: topic.name().to_string(),
            partitions: topic.partitions().len() as u32,
            config: *topic.config(),
        })
        .collect();
    let cluster = advertised.map(|advertised| {
        let replicas = service.replica_manager();
        ClusterMetadata {
            brokers: replicas
                .brokers(advertised)
                .into_iter()
                .map(|broker| BrokerMetadata {
                    node_id: broker.node_id,
                    address: broker.native_addr,
                })
                .collect(),
            partitions: topics
                .iter()
                .flat_map(|topic| (0..topic.partitions).map(move |index| (topic, index)))
                .map(|(topic, index)| partition_metadata(service, replicas, &topic.name, index))
                .collect(),
        }
    });
    Ok(Response::Metadata { topics, cluster })
}

/// One partition's replication state; its high watermark is this broker's (0 for a partition
/// that could not be opened: its requests answer `PARTITION_UNAVAILABLE`).
fn partition_metadata(
    service: &BrokerService,
    replicas: &ReplicaManager,
    topic: &str,
    partition: u32,
) -> PartitionMetadata {
    let state = replicas.partition_state(topic, partition);
    let high_watermark = service.reads().local_high_watermark(topic, partition);
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
    let offsets = service.reads().list_offsets(topic, partition)?;
    let offset_for_timestamp = match timestamp {
        None => None,
        Some(timestamp) => Some(
            service
                .reads()
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
