//! The native transaction APIs (`InitTransaction`, `AddToTransaction`, `EndTransaction`)
//! translated into transaction coordinator calls, and the coordinator's refusals into native
//! error responses; and the refusal of a native lease under the coordinator's reserved holder
//! name. The coordinator is the one Kafka transactions use (see
//! `broker::transactions`); a cluster's brokers refuse native atomic appends (their commit
//! holds every partition's fence lock at once), and answer the broker-to-broker APIs of Kafka
//! transactions on a cluster (`VerifyTransaction`, `TxnOffsetCommit`, `EndTxnOffsets`).

use std::sync::Arc;

use futures::future::BoxFuture;

use super::errors::storage_error;
use super::refusals::{lease_held, refusal};
use crate::broker::transactions::{CoordinatorError, TransactionCoordinator, TxnError};
use crate::broker::BrokerService;
use crate::protocol::{ErrorCode, ErrorResponse, Request, Response, TransactionProducer};

/// The answer to a transaction request; any other request is handed back.
pub fn answer(
    service: &Arc<BrokerService>,
    request: Request,
) -> Result<BoxFuture<'static, Result<Response, ErrorResponse>>, Request> {
    // The transaction coordinator says whether its holder name is reserved here (see
    // `TransactionCoordinator::reserved_holder_refusal`).
    if let Request::AcquireLease { holder, .. } = &request {
        if let Some(refusal) = service.transactions().reserved_holder_refusal(holder) {
            return Ok(Box::pin(futures::future::ready(Err(ErrorResponse::new(
                ErrorCode::InvalidRequest,
                refusal,
            )))));
        }
    }
    let service = Arc::clone(service);
    Ok(match request {
        Request::InitTransaction {
            transactional_id,
            timeout_ms,
        } => Box::pin(async move {
            let coordinator = coordinator(&service)?;
            let (producer_id, producer_epoch) = coordinator
                .init_producer_id(&transactional_id, i64::from(timeout_ms), None)
                .await
                .map_err(|error| coordinator_error(&service, &error))?;
            Ok(Response::InitTransaction {
                producer_id,
                producer_epoch,
            })
        }),
        Request::AddToTransaction {
            producer,
            partitions,
        } => Box::pin(async move {
            let coordinator = coordinator(&service)?;
            let mut joining = Vec::with_capacity(partitions.len());
            for partition in partitions {
                let index = i32::try_from(partition.partition).map_err(|_| {
                    ErrorResponse::new(
                        ErrorCode::UnknownPartition,
                        format!(
                            "partition {} of {} does not exist",
                            partition.partition, partition.topic
                        ),
                    )
                })?;
                joining.push((partition.topic, index, partition.epoch));
            }
            let TransactionProducer {
                transactional_id,
                producer_id,
                producer_epoch,
            } = producer;
            coordinator
                .add_client_partitions(&transactional_id, producer_id, producer_epoch, joining)
                .await
                .map_err(|error| coordinator_error(&service, &error))?;
            Ok(Response::AddToTransaction)
        }),
        Request::EndTransaction { producer, commit } => Box::pin(async move {
            let coordinator = coordinator(&service)?;
            let TransactionProducer {
                transactional_id,
                producer_id,
                producer_epoch,
            } = producer;
            let ended = if commit {
                coordinator
                    .commit_atomically(&transactional_id, producer_id, producer_epoch)
                    .await
            } else {
                coordinator
                    .end(&transactional_id, producer_id, producer_epoch, false)
                    .await
            };
            ended.map_err(|error| coordinator_error(&service, &error))?;
            Ok(Response::EndTransaction)
        }),
        Request::VerifyTransaction {
            producer,
            topic,
            partition,
        } => Box::pin(async move {
            let coordinator = service.transactions();
            let index = i32::try_from(partition).map_err(|_| {
                ErrorResponse::new(
                    ErrorCode::UnknownPartition,
                    format!("partition {partition} of {topic} does not exist"),
                )
            })?;
            coordinator
                .verify(
                    &producer.transactional_id,
                    producer.producer_id,
                    producer.producer_epoch,
                    &topic,
                    index,
                )
                .await
                .map_err(|error| coordinator_error(&service, &error))?;
            Ok(Response::VerifyTransaction)
        }),
        Request::TxnOffsetCommit {
            producer,
            group,
            offsets,
        } => Box::pin(async move {
            let coordinator = service.transactions();
            let offsets = offsets
                .into_iter()
                .map(|offset| {
                    let partition = i32::try_from(offset.partition).unwrap_or(i32::MAX);
                    let pending = crate::broker::transactions::PendingOffset {
                        offset: i64::try_from(offset.offset).unwrap_or(i64::MAX),
                        leader_epoch: offset.leader_epoch,
                        metadata: (!offset.metadata.is_empty()).then_some(offset.metadata),
                    };
                    (offset.topic, partition, pending)
                })
                .collect();
            coordinator
                .commit_offsets(
                    &producer.transactional_id,
                    producer.producer_id,
                    producer.producer_epoch,
                    &group,
                    offsets,
                )
                .await
                .map_err(|error| coordinator_error(&service, &error))?;
            Ok(Response::TxnOffsetCommit)
        }),
        Request::EndTxnOffsets {
            group,
            transactional_id,
            commit,
            offsets,
        } => Box::pin(async move {
            let coordinator = service.transactions();
            let offsets = offsets
                .into_iter()
                .map(|offset| {
                    let committed = crate::broker::CommittedOffset {
                        offset: offset.offset,
                        metadata: offset.metadata,
                    };
                    (offset.topic, offset.partition, committed)
                })
                .collect();
            coordinator
                .end_offsets(&group, &transactional_id, commit, offsets)
                .await
                .map_err(|error| refusal(&service, None, &error))?;
            Ok(Response::EndTxnOffsets)
        }),
        other => return Err(other),
    })
}

/// The broker's transaction coordinator for native atomic appends, or the refusal of a
/// cluster's: an atomic commit holds every partition's fence lock at
/// once, which only a broker holding every partition can (docs/kafka.md, "Transactions on a
/// cluster", step 4).
fn coordinator(service: &BrokerService) -> Result<Arc<TransactionCoordinator>, ErrorResponse> {
    let coordinator = Arc::clone(service.transactions());
    if let Some(refusal) = coordinator.atomic_appends_refusal() {
        return Err(ErrorResponse::new(ErrorCode::InvalidRequest, refusal));
    }
    Ok(coordinator)
}

/// The native error for a coordinator's refusal, with its message and its code's details.
fn coordinator_error(service: &BrokerService, error: &CoordinatorError) -> ErrorResponse {
    let message = error.to_string();
    let plain = |code| ErrorResponse::new(code, message.clone());
    match error {
        CoordinatorError::Refused(refused) => plain(match refused {
            TxnError::ProducerFenced { .. } => ErrorCode::ProducerFenced,
            TxnError::ConcurrentTransactions { .. } => ErrorCode::ConcurrentTransactions,
            TxnError::InvalidProducerIdMapping { .. }
            | TxnError::InvalidTxnState { .. }
            | TxnError::PartitionNotAdded { .. } => ErrorCode::InvalidTransactionState,
            TxnError::InvalidTimeout { .. } | TxnError::TooManyPartitions { .. } => {
                ErrorCode::InvalidRequest
            }
            TxnError::TooManyIds { .. } => ErrorCode::ResourceExhausted,
        }),
        // Nothing changed: the state file could not be written.
        CoordinatorError::Store(_) => plain(ErrorCode::StorageError),
        CoordinatorError::PartitionLeased {
            topic,
            partition,
            holder,
            expires_in_ms,
        } => match u32::try_from(*partition) {
            Ok(index) => lease_held(
                service,
                message.clone(),
                topic,
                index,
                holder,
                *expires_in_ms,
            ),
            // Partitions are numbered from 0: a negative one names none, and holds no lease.
            Err(_) => plain(ErrorCode::UnknownPartition),
        },
        // A prepared outcome whose markers are still being written.
        CoordinatorError::Markers(_) => plain(ErrorCode::ConcurrentTransactions),
        CoordinatorError::Broker(broker) => refusal(service, None, broker),
        CoordinatorError::Unleased { .. } => plain(ErrorCode::InvalidRequest),
        CoordinatorError::Fenced { epoch, current, .. } => {
            ErrorResponse::with_epochs(ErrorCode::Fenced, message.clone(), *epoch, *current)
        }
        CoordinatorError::CommitRefused { source, .. } => storage_error(source, message.clone()),
    }
}
