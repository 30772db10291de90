//! Produce (key 0), v3..=11: each partition's Kafka record batches are converted to fencelog
//! batches (`crate::server::kafka::batches::records`) and appended through the connection's produce queue, in
//! request order, before the next request is read.
//!
//! What a Kafka producer sees, and why:
//! - **Fencing.** A Kafka producer has no lease: it writes as [`WriteCredential::Unleased`].
//!   That is accepted only on a partition that has never granted a lease; on a leased partition
//!   the fence refuses it before any other check, and the producer gets
//!   `INVALID_PRODUCER_EPOCH` (non-retriable) with a message naming the lease's epoch. Nothing
//!   of the request's batches for that partition lands. The one exception writes nothing
//!   either: an idempotent producer's retry of a batch it wrote before the first grant (its
//!   answer was lost) is answered with the batch's original offsets, as on an unleased
//!   partition (the conversion to fencelog batches is deterministic, so the retry's batches
//!   match the stored ones byte for byte, CRC included).
//! - **Outcomes.** Each storage answer keeps its class (written, not written, unknown; see
//!   `ErrorCode::outcome`) in the Kafka code it becomes: fenced is `INVALID_PRODUCER_EPOCH` (not
//!   written), a batch appended too long ago `DUPLICATE_SEQUENCE_NUMBER` (written), a forgotten
//!   producer `UNKNOWN_PRODUCER_ID` and a commit not replicated in time
//!   `NOT_ENOUGH_REPLICAS_AFTER_APPEND` or `REQUEST_TIMED_OUT` (unknown: Kafka clients retry
//!   those, and the retry is answered from the producer state).
//! - **Idempotence.** An idempotent producer's batches (producer id >= 0) become magic-3
//!   batches: the partition's producer state dedupes retries (answered with the first offsets)
//!   and refuses gaps (`OUT_OF_ORDER_SEQUENCE_NUMBER`), stale producer epochs
//!   (`INVALID_PRODUCER_EPOCH`) and forgotten producers (`UNKNOWN_PRODUCER_ID`), as Kafka does.
//! - **Transactions.** A transactional request (a `transactional_id`) writes each partition
//!   with the lease epoch its transaction holds there (`WriteCredential::Epoch(F)`, looked up
//!   in the transaction coordinator for the batches' producer id and epoch): the fence in the
//!   segment writer refuses it once the partition was re-granted (a newer instance, a timeout),
//!   so a zombie's late write never lands after the abort marker. A partition not added with
//!   AddPartitionsToTxn, or a transaction no longer open, is `INVALID_TXN_STATE`; an older
//!   producer epoch `INVALID_PRODUCER_EPOCH` (fatal for a transactional producer); another
//!   producer id `INVALID_PRODUCER_ID_MAPPING`. Standalone the produce holds its transaction's
//!   gate until answered, so EndTxn's markers never overtake it; on a cluster the partition's
//!   leader writes under the transactions' lease in its own lease table and verifies a
//!   transaction's first batch with the transactional id's coordinator (docs/kafka.md,
//!   "Transactions on a cluster", step 3). A transactional batch without a transactional id is
//!   refused with `TRANSACTIONAL_ID_AUTHORIZATION_FAILED` (it would open a transaction no
//!   marker closes); a client's
//!   control batch is `INVALID_RECORD` (the record conversion's errors, each with its Kafka
//!   code: `RecordsError::kafka_error_code`).
//! - **acks**: 0 gets no response at all (the appends still happen); 1 and -1 (all) are answered
//!   once every batch is acknowledged under the topic's flush policy, and -1 once every in-sync
//!   replica has it: the service's replica manager decides, as for the native listener
//!   (standalone, "all" is this broker). Other values are `INVALID_REQUIRED_ACKS`.
//! - `log_append_time_ms` is -1 (CreateTime); `log_start_offset` (v5+) is the partition's.

use std::sync::Arc;

use futures::future::{join_all, BoxFuture};
use futures::FutureExt;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::errors::{coordinator_error, kafka_error};
use super::super::response::{KafkaResponse, ResponseBody};
use super::super::KafkaSession;

use super::super::authorization::{each, TOPIC_REFUSED};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::transactions::{CoordinatorError, PeerError, TransactionWrite, WriteRefusal};
use crate::broker::{BrokerError, BrokerService, ProduceRequest as Append};
use crate::domain::Acks;
use crate::protocol::ErrorCode;
use crate::server::kafka::batches::records::{first_batch_producer, RecordLimits, RecordsError};
use crate::server::kafka::batches::to_native_batches;
use crate::server::protocol::Started;
use crate::storage::{FenceError, StorageError, WriteCredential};

/// Produce as the listener serves it.
pub struct Produce;

impl KafkaApi for Produce {
    type Request = ProduceRequest;
    const KEY: ApiKey = ApiKey::Produce;
    const MIN_VERSION: i16 = 3;
    const MAX_VERSION: i16 = 11;

    /// `produce` on every topic of the request.
    fn authorize(access: &Access, request: &ProduceRequest) -> Result<(), NotAuthorized> {
        each(
            access,
            Operation::Produce,
            request.topic_data.iter().map(|topic| topic.name.as_str()),
        )
    }

    /// Every partition `TOPIC_AUTHORIZATION_FAILED` with the reason; an `acks=0` produce closes
    /// the connection instead (there is no response to carry the error; Kafka does the same).
    fn refuse(refusal: &AclRefusal<'_>, request: &ProduceRequest) -> Option<ResponseBody> {
        if request.acks == 0 {
            return None;
        }
        let message = refusal.message();
        let responses = request
            .topic_data
            .iter()
            .map(|topic| {
                TopicProduceResponse::default()
                    .with_name(topic.name.clone())
                    .with_partition_responses(
                        topic
                            .partition_data
                            .iter()
                            .map(|partition| {
                                PartitionProduceResponse::default()
                                    .with_index(partition.index)
                                    .with_error_code(TOPIC_REFUSED)
                                    .with_base_offset(-1)
                                    .with_error_message(message.clone())
                            })
                            .collect(),
                    )
            })
            .collect();
        Some(ResponseBody::message(
            ProduceResponse::default().with_responses(responses),
        ))
    }

    fn start(call: Call<'_>, request: ProduceRequest) -> Started<KafkaResponse> {
        start(
            call.service,
            call.session,
            call.correlation_id,
            call.version,
            request,
        )
    }
}

/// What Kafka's `acks` asks of the replica manager: -1 is every in-sync replica; 1 and 0 (no
/// answer, but the append happens all the same) the leader's own append.
fn kafka_acks(acks: i16) -> Acks {
    match acks {
        -1 => Acks::All,
        _ => Acks::Leader,
    }
}

/// A transactional produce's write of one partition, as the transaction coordinator answers
/// it (`writer_for`); `Ok(None)` for a request without a transactional id.
fn transaction_write(
    service: &Arc<BrokerService>,
    transactional_id: Option<&str>,
    records: Option<&[u8]>,
    topic: &str,
    partition: i32,
) -> Result<Option<TransactionWrite>, (ResponseError, String)> {
    let Some(transactional_id) = transactional_id else {
        return Ok(None);
    };
    let coordinator = service.transactions();
    let Some(producer) = records.and_then(first_batch_producer) else {
        return Err((
            ResponseError::CorruptMessage,
            "a transactional produce needs a record batch with its producer id and epoch".into(),
        ));
    };
    let index = u32::try_from(partition).map_err(|_| {
        (
            ResponseError::UnknownTopicOrPartition,
            format!("no partition {partition}"),
        )
    })?;
    match coordinator.writer_for(transactional_id, producer, topic, index) {
        Ok(write) => Ok(Some(write)),
        // A fenced producer on Produce is INVALID_PRODUCER_EPOCH in every version.
        Err(WriteRefusal::Refused(refused)) => Err((
            coordinator_error(
                &CoordinatorError::Refused(refused.clone()),
                ResponseError::InvalidProducerEpoch,
            ),
            refused.to_string(),
        )),
        Err(WriteRefusal::Broker(error)) => Err((kafka_error(&error), error.to_string())),
        // Retriable: the transaction's coordinator leases the partition again, or the
        // transaction times out.
        Err(refused @ WriteRefusal::NotLeased { .. }) => {
            Err((ResponseError::NotEnoughReplicas, refused.to_string()))
        }
    }
}

/// The coordinator's answer to a leader's verification, as this leader answers the produce:
/// the transaction is not open with the partition (`INVALID_TXN_STATE`), the producer is
/// fenced (`INVALID_PRODUCER_EPOCH`), or the coordinator could not answer now
/// (`NOT_ENOUGH_REPLICAS`, retriable and not written, as Kafka's brokers answer a failed
/// verification for clients that know no coordinator errors on Produce).
fn verification_refused(error: &PeerError) -> (ResponseError, String) {
    let code = match error.code {
        Some(ErrorCode::InvalidTransactionState) => ResponseError::InvalidTxnState,
        Some(ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch) => {
            ResponseError::InvalidProducerEpoch
        }
        _ => ResponseError::NotEnoughReplicas,
    };
    (
        code,
        format!("the transaction's coordinator did not verify it: {error}"),
    )
}

/// The question a cluster leader asks the transactional id's coordinator before a
/// transaction's first batches on `topic`/`partition`; its answer is `guard` (the
/// verification recorded before asking) or the refusal the produce answers with.
fn verify(
    service: &Arc<BrokerService>,
    transactional_id: Option<&StrBytes>,
    (producer_id, producer_epoch): (i64, i16),
    topic: &str,
    partition: u32,
    guard: u64,
) -> BoxFuture<'static, Result<u64, (ResponseError, String)>> {
    let service = Arc::clone(service);
    let transactional_id = transactional_id
        .map(|id| id.to_string())
        .unwrap_or_default();
    let topic = topic.to_string();
    async move {
        let coordinator = service.transactions();
        match coordinator
            .verify_at_coordinator(
                &transactional_id,
                producer_id,
                producer_epoch,
                &topic,
                partition,
            )
            .await
        {
            None | Some(Ok(())) => Ok(guard),
            Some(Err(error)) => {
                tracing::info!(%transactional_id, %topic, partition, %error, "a transaction's first batch not verified by its coordinator");
                Err(verification_refused(&error))
            }
        }
    }
    .boxed()
}

/// What one partition's produce came to.
struct PartitionOutcome {
    index: i32,
    result: Result<i64, (ResponseError, String)>,
}

/// Starts the appends of every partition now (request order) and answers once they are
/// acknowledged; `acks=0` gets no answer.
pub fn start(
    service: &Arc<BrokerService>,
    session: &mut KafkaSession,
    correlation_id: i32,
    version: i16,
    request: ProduceRequest,
) -> Started<crate::server::kafka::response::KafkaResponse> {
    let acks = request.acks;
    let limits = RecordLimits::default();
    let mut topics: Vec<(StrBytes, Vec<BoxFuture<'static, PartitionOutcome>>)> = Vec::new();
    for topic in request.topic_data {
        let name = topic.name.0.clone();
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in topic.partition_data {
            let index = data.index;
            let refused =
                |error: ResponseError, message: String| -> BoxFuture<'static, PartitionOutcome> {
                    futures::future::ready(PartitionOutcome {
                        index,
                        result: Err((error, message)),
                    })
                    .boxed()
                };
            if !(-1..=1).contains(&acks) {
                partitions.push(refused(
                    ResponseError::InvalidRequiredAcks,
                    format!("acks must be 0, 1 or -1, not {acks}"),
                ));
                continue;
            }
            let transaction = match transaction_write(
                service,
                request.transactional_id.as_ref().map(|id| id.as_str()),
                data.records.as_deref(),
                &name,
                index,
            ) {
                Ok(transaction) => transaction,
                Err((error, message)) => {
                    partitions.push(refused(error, message));
                    continue;
                }
            };
            let Ok(partition) = u32::try_from(index) else {
                partitions.push(refused(
                    ResponseError::UnknownTopicOrPartition,
                    format!("no partition {index}"),
                ));
                continue;
            };
            let Some(records) = data.records else {
                partitions.push(refused(
                    ResponseError::CorruptMessage,
                    "a produce needs records".into(),
                ));
                continue;
            };
            let epoch = transaction.as_ref().map_or(0, |write| write.epoch);
            let batches = match to_native_batches(&records, epoch, &limits) {
                Ok(batches) => batches,
                Err(error) => {
                    let code = records_error(&error);
                    partitions.push(refused(code, error.to_string()));
                    continue;
                }
            };
            // A transactional batch outside a transaction (no transactional id) would open a
            // transaction no marker ever closes, and read_committed readers would stop there
            // for good.
            if transaction.is_none() && batches.iter().any(|batch| batch.transactional) {
                partitions.push(refused(
                    ResponseError::TransactionalIdAuthorizationFailed,
                    "a transactional batch needs its producer's transactional id".into(),
                ));
                continue;
            }
            // Every batch of a transactional request is its producer's (the one the lease
            // epoch was looked up for).
            if let Some((expected_id, expected_epoch)) =
                transaction.as_ref().map(|write| write.producer)
            {
                let foreign = batches.iter().any(|batch| {
                    batch.producer.as_ref().is_none_or(|stamp| {
                        (stamp.producer_id, stamp.producer_epoch) != (expected_id, expected_epoch)
                    })
                });
                if foreign {
                    partitions.push(refused(
                        ResponseError::InvalidRecord,
                        "every batch of a transactional produce must carry the same producer id and epoch".into(),
                    ));
                    continue;
                }
            }
            let credential = match &transaction {
                Some(write) => WriteCredential::Epoch(write.epoch),
                None => WriteCredential::Unleased,
            };
            let requests: Vec<Append> = batches
                .into_iter()
                .map(|batch| Append {
                    topic: name.to_string(),
                    partition,
                    credential,
                    batch: batch.bytes,
                    verification: None,
                })
                .collect();
            let (gate, verification, producer) = match transaction {
                Some(write) => (write.gate, write.verification, write.producer),
                None => (None, None, (-1, -1)),
            };
            let appends = match verification {
                None => futures::future::ready(Ok(requests
                    .into_iter()
                    .map(|append| {
                        service.producing().produce(
                            &session.produce_queue,
                            append,
                            Some(kafka_acks(acks)),
                        )
                    })
                    .collect::<Vec<_>>()))
                .boxed(),
                Some(guard) => {
                    let ready = verify(
                        service,
                        request.transactional_id.as_ref().map(|id| &id.0),
                        producer,
                        &name,
                        partition,
                        guard,
                    );
                    match service.producing().produce_verified(
                        &session.produce_queue,
                        ready,
                        requests,
                        kafka_acks(acks),
                    ) {
                        Ok(appends) => appends,
                        Err(error) => {
                            partitions.push(refused(produce_error(&error), error.to_string()));
                            continue;
                        }
                    }
                }
            };
            partitions.push(
                async move {
                    // Held until every append is answered: the transaction's EndTxn waits.
                    let _gate = gate;
                    let appends = match appends.await {
                        Ok(appends) => appends,
                        Err(refused) => {
                            return PartitionOutcome {
                                index,
                                result: Err(refused),
                            }
                        }
                    };
                    let mut base_offset = None;
                    for appended in join_all(appends).await {
                        match appended {
                            Ok(appended) => {
                                base_offset.get_or_insert(appended.base_offset as i64);
                            }
                            Err(error) => {
                                return PartitionOutcome {
                                    index,
                                    result: Err((produce_error(&error), error.to_string())),
                                }
                            }
                        }
                    }
                    PartitionOutcome {
                        index,
                        result: Ok(base_offset.unwrap_or(-1)),
                    }
                }
                .boxed(),
            );
        }
        topics.push((name, partitions));
    }
    if acks == 0 {
        // Nobody reads an answer; the appends above are running and land in request order.
        for (_, partitions) in topics {
            for partition in partitions {
                tokio::spawn(partition);
            }
        }
        return Started {
            response: None,
            close: false,
        };
    }
    let service = Arc::clone(service);
    Started {
        response: Some(
            async move {
                let mut responses = Vec::with_capacity(topics.len());
                for (name, partitions) in topics {
                    let outcomes = join_all(partitions).await;
                    let partition_responses = outcomes
                        .into_iter()
                        .map(|outcome| partition_response(&service, &name, outcome))
                        .collect();
                    responses.push(
                        TopicProduceResponse::default()
                            .with_name(name.into())
                            .with_partition_responses(partition_responses),
                    );
                }
                KafkaResponse {
                    correlation_id,
                    api_key: ApiKey::Produce,
                    api_version: version,
                    body: ResponseBody::message(
                        ProduceResponse::default().with_responses(responses),
                    ),
                }
            }
            .boxed(),
        ),
        close: false,
    }
}

fn partition_response(
    service: &BrokerService,
    topic: &str,
    outcome: PartitionOutcome,
) -> PartitionProduceResponse {
    let log_start_offset = u32::try_from(outcome.index)
        .ok()
        .and_then(|partition| service.reads().list_offsets(topic, partition).ok())
        .map_or(-1, |offsets| offsets.earliest as i64);
    let response = PartitionProduceResponse::default()
        .with_index(outcome.index)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(log_start_offset);
    match outcome.result {
        Ok(base_offset) => response.with_base_offset(base_offset),
        Err((error, message)) => response
            .with_base_offset(-1)
            .with_error_code(error.code())
            .with_error_message(Some(message.into())),
    }
}

/// The Kafka error of a failed append. A Kafka producer on a leased partition is told its
/// writes are fenced with `INVALID_PRODUCER_EPOCH`, which every Kafka client treats as
/// non-retriable on produce.
fn produce_error(error: &BrokerError) -> ResponseError {
    match error {
        BrokerError::Storage(StorageError::Fence(
            FenceError::Leased { .. } | FenceError::Fenced { .. },
        )) => ResponseError::InvalidProducerEpoch,
        other => kafka_error(other),
    }
}

/// The Kafka error of records that cannot be converted.
fn records_error(error: &RecordsError) -> ResponseError {
    ResponseError::try_from_code(error.kafka_error_code()).unwrap_or(ResponseError::CorruptMessage)
}
