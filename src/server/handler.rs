//! Request handling: parse → apply to the broker → encode, one function per API.
//!
//! Anything that may block on the disk (fsync for flush `always`, epoch installs, topic
//! creation) runs on the blocking pool, so a sync never stalls the async workers serving other
//! connections.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::appender::Appender;
use super::{errors::to_error_response, ServerConfig};
use crate::broker::{Broker, BrokerError};
use futures::future::BoxFuture;

use crate::protocol::{Request, RequestFrame, Response, ResponseFrame, TopicMetadata};

/// Starts one request and returns the future of its response frame.
///
/// A produce is handed to the connection's [`Appender`] *now*, which appends in the connection's
/// request order, so pipelined produces to a partition land in the order they were sent; the
/// returned future waits for the append and then for durability. Every other request runs
/// entirely in the future.
pub fn start(
    broker: &Arc<Broker>,
    config: &Arc<ServerConfig>,
    appender: &Appender,
    frame: RequestFrame,
) -> BoxFuture<'static, ResponseFrame> {
    let correlation_id = frame.correlation_id;
    let respond = move |result: Result<Response, BrokerError>| match result {
        Ok(response) => ResponseFrame::ok(correlation_id, response),
        Err(error) => ResponseFrame::error(correlation_id, to_error_response(&error)),
    };
    if let Request::Produce {
        topic,
        partition,
        batch,
    } = frame.request
    {
        let acknowledged = appender.produce(broker, topic, partition, batch);
        return Box::pin(async move { respond(acknowledged.await) });
    }
    let (broker, config) = (Arc::clone(broker), Arc::clone(config));
    Box::pin(async move { respond(apply(&broker, &config, frame.request).await) })
}

/// Appends a produce's batch now (the fence check and the copy fix its offsets) and returns the
/// wait for its acknowledgement: a group-commit sync on the blocking pool under flush `always`,
/// nothing otherwise. The one produce path, whoever calls it.
pub(super) fn begin_produce(
    broker: &Broker,
    topic: &str,
    partition: u32,
    batch: &[u8],
) -> BoxFuture<'static, Result<Response, BrokerError>> {
    let started = broker
        .partition(topic, partition)
        .and_then(|target| Ok((target.append_pending(batch)?, target)));
    match started {
        Err(error) => Box::pin(futures::future::ready(Err(error))),
        Ok((pending, target)) if target.acknowledge_blocks() => {
            Box::pin(blocking(move || Ok(produced(target.acknowledge(pending)?))))
        }
        Ok((pending, target)) => Box::pin(futures::future::ready(
            target
                .acknowledge(pending)
                .map(produced)
                .map_err(BrokerError::from),
        )),
    }
}

fn produced(appended: crate::storage::Appended) -> Response {
    Response::Produce {
        base_offset: appended.base_offset,
        last_offset: appended.last_offset,
        log_end_offset: appended.log_end_offset,
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, BrokerError> + Send + 'static,
) -> Result<T, BrokerError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|join_error| {
            Err(BrokerError::Io {
                context: "request task failed".into(),
                source: std::io::Error::other(join_error.to_string()),
            })
        })
}

async fn apply(
    broker: &Arc<Broker>,
    config: &ServerConfig,
    request: Request,
) -> Result<Response, BrokerError> {
    match request {
        Request::ApiVersions => Ok(Response::supported_api_versions()),
        Request::CreateTopic {
            name,
            partitions,
            config,
        } => {
            let broker = Arc::clone(broker);
            blocking(move || {
                broker
                    .create_topic(&name, partitions, config)
                    .map(|_| Response::CreateTopic)
            })
            .await
        }
        Request::Metadata { topics } => {
            let selected = if topics.is_empty() {
                broker.topics()
            } else {
                topics
                    .iter()
                    .map(|name| broker.topic(name))
                    .collect::<Result<_, _>>()?
            };
            Ok(Response::Metadata {
                topics: selected
                    .iter()
                    .map(|topic| TopicMetadata {
                        name: topic.name().to_string(),
                        partitions: topic.partitions().len() as u32,
                        config: *topic.config(),
                    })
                    .collect(),
            })
        }
        Request::AcquireLease {
            topic,
            partition,
            holder,
            ttl_ms,
        } => {
            let broker = Arc::clone(broker);
            blocking(move || {
                let grant =
                    broker.acquire_lease(&topic, partition, &holder, ttl_ms, Instant::now())?;
                Ok(Response::AcquireLease {
                    epoch: grant.epoch,
                    lease_id: grant.lease_id,
                    ttl_ms: grant.ttl_ms,
                })
            })
            .await
        }
        Request::RenewLease {
            topic,
            partition,
            lease_id,
        } => {
            let renewed = broker.renew_lease(&topic, partition, lease_id, Instant::now())?;
            Ok(Response::RenewLease {
                epoch: renewed.epoch,
                ttl_ms: renewed.ttl_ms,
            })
        }
        Request::ReleaseLease {
            topic,
            partition,
            lease_id,
        } => {
            broker.release_lease(&topic, partition, lease_id, Instant::now())?;
            Ok(Response::ReleaseLease)
        }
        Request::Produce {
            topic,
            partition,
            batch,
        } => begin_produce(broker, &topic, partition, &batch).await,
        Request::Fetch {
            topic,
            partition,
            offset,
            max_bytes,
            max_wait_ms,
        } => {
            let target = broker.partition(&topic, partition)?;
            let max_bytes = max_bytes.min(config.max_fetch_bytes) as usize;
            let wait = Duration::from_millis(u64::from(max_wait_ms.min(config.max_fetch_wait_ms)));
            let mut changes = target.subscribe();
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                let result = target.read(offset, max_bytes)?;
                if !result.batches.is_empty() || offset < result.high_watermark {
                    return Ok(fetched(result));
                }
                // Long poll: wait for the high watermark to move past `offset`, or the deadline.
                match tokio::time::timeout_at(deadline, changes.changed()).await {
                    Ok(Ok(())) => continue,
                    _ => return Ok(fetched(target.read(offset, max_bytes)?)),
                }
            }
        }
        Request::ListOffsets { topic, partition } => {
            let target = broker.partition(&topic, partition)?;
            Ok(Response::ListOffsets {
                earliest: target.log_start_offset(),
                latest: target.high_watermark(),
                epoch: target.current_epoch(),
            })
        }
    }
}

fn fetched(result: crate::storage::ReadResult) -> Response {
    Response::Fetch {
        high_watermark: result.high_watermark,
        log_start_offset: result.log_start_offset,
        batches: result.batches,
    }
}
