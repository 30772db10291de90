//! The writers of the power-loss test: a native idempotent producer under a lease, a Kafka
//! idempotent producer through the Kafka listener (raw requests), the `flush never` topic's
//! writer, and the Kafka requests the checks send too. Each records what it was told.

use std::net::SocketAddr;

use bytes::Bytes;
use fencelog::batch::BatchBuilder;
use fencelog::client::Client;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    GroupId, InitProducerIdRequest, OffsetCommitRequest, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;

use super::{Acknowledged, LEDGER, METRICS, METRICS_BATCH, METRICS_BATCHES};
use crate::support::kafka::{kafka_batch_of, kafka_record, KafkaConnection};

/// A native idempotent producer on ledger/0, under the holder's lease.
pub(super) struct NativeProducer {
    pub(super) producer_id: i64,
    pub(super) epoch: u64,
    pub(super) sequence: i32,
    /// The last batch written and the offsets it was acknowledged at.
    pub(super) last: Option<(Bytes, u64, u64)>,
}

impl NativeProducer {
    pub(super) async fn new(client: &Client, epoch: u64) -> Self {
        let id = client.init_producer_id().await.unwrap();
        Self {
            producer_id: id.producer_id,
            epoch,
            sequence: 0,
            last: None,
        }
    }

    pub(super) async fn write(
        &mut self,
        client: &Client,
        tag: &str,
        batches: usize,
        acked: &mut Acknowledged,
    ) {
        for batch in 0..batches {
            let values: Vec<String> = (0..1 + batch % 4)
                .map(|record| format!("native-{tag}-{batch}-{record}"))
                .collect();
            let mut builder = BatchBuilder::with_producer(self.epoch, self.producer_id, 0);
            for value in &values {
                builder.push(1_000, None, Some(value.as_bytes()));
            }
            let bytes = builder.finish_with_sequence(self.sequence);
            let ack = client.produce(LEDGER, 0, bytes.clone()).await.unwrap();
            for (n, value) in values.iter().enumerate() {
                acked
                    .ledger
                    .insert((0, ack.base_offset + n as u64), value.clone());
            }
            self.sequence += values.len() as i32;
            self.last = Some((bytes, ack.base_offset, ack.last_offset));
        }
    }
}

/// A Kafka idempotent producer on ledger/1, through the Kafka listener (raw requests).
pub(super) struct KafkaProducer {
    pub(super) producer_id: i64,
    pub(super) sequence: i32,
    /// The last batch written and the offset it was acknowledged at.
    pub(super) last: Option<(Bytes, i64)>,
}

impl KafkaProducer {
    pub(super) async fn new(kafka: SocketAddr) -> Self {
        let mut connection = KafkaConnection::connect(kafka).await;
        Self {
            producer_id: kafka_init_producer_id(&mut connection).await,
            sequence: 0,
            last: None,
        }
    }

    pub(super) async fn write(
        &mut self,
        kafka: SocketAddr,
        tag: &str,
        batches: usize,
        acked: &mut Acknowledged,
    ) {
        let mut connection = KafkaConnection::connect(kafka).await;
        for batch in 0..batches {
            let values: Vec<String> = (0..1 + batch % 3)
                .map(|record| format!("kafka-{tag}-{batch}-{record}"))
                .collect();
            let records: Vec<_> = values
                .iter()
                .enumerate()
                .map(|(delta, value)| {
                    kafka_record(
                        delta as i64,
                        "key",
                        value,
                        Some((self.producer_id, self.sequence)),
                    )
                })
                .collect();
            let bytes = kafka_batch_of(&records, Compression::None);
            let base_offset = kafka_produce(&mut connection, bytes.clone()).await;
            for (n, value) in values.iter().enumerate() {
                acked
                    .ledger
                    .insert((1, base_offset as u64 + n as u64), value.clone());
            }
            self.sequence += values.len() as i32;
            self.last = Some((bytes, base_offset));
        }
    }
}

/// Writes [`METRICS_BATCHES`] batches of [`METRICS_BATCH`] records to `metrics`.
pub(super) async fn write_metrics(
    client: &Client,
    epoch: u64,
    tag: &str,
    acked: &mut Acknowledged,
) {
    for batch in 0..METRICS_BATCHES {
        let values: Vec<String> = (0..METRICS_BATCH)
            .map(|record| format!("metric-{tag}-{batch}-{record}"))
            .collect();
        let mut builder = BatchBuilder::new(epoch);
        for value in &values {
            builder.push(1_000, None, Some(value.as_bytes()));
        }
        let ack = client.produce(METRICS, 0, builder.finish()).await.unwrap();
        assert_eq!(ack.base_offset, acked.metrics.len() as u64);
        acked.metrics.extend(values);
    }
}

pub(super) async fn kafka_init_producer_id(connection: &mut KafkaConnection) -> i64 {
    let init = connection
        .call::<InitProducerIdRequest>(4, &InitProducerIdRequest::default())
        .await;
    assert_eq!(init.error_code, 0);
    init.producer_id.0
}

/// Produces `records` to ledger/1 with `acks=all`; the base offset.
pub(super) async fn kafka_produce(connection: &mut KafkaConnection, records: Bytes) -> i64 {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(LEDGER)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(1)
                .with_records(Some(records))])]);
    let response = connection.call::<ProduceRequest>(9, &request).await;
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, 0, "Kafka produce");
    partition.base_offset
}

pub(super) async fn kafka_commit(
    kafka: SocketAddr,
    group: &str,
    topic: &str,
    partition: i32,
    offset: i64,
) {
    let mut connection = KafkaConnection::connect(kafka).await;
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset)])]);
    let committed = connection.call::<OffsetCommitRequest>(8, &commit).await;
    assert_eq!(committed.topics[0].partitions[0].error_code, 0);
}
