//! The bench's Kafka wire connection: just enough of a Kafka client to drive the Kafka listener
//! with the same load as the native producers and consumers (`--protocol kafka`).
//!
//! One TCP connection, pipelined: a request is a frame (`i32` size, request header v1/v2, body,
//! all through kafka-protocol's encoders), written by one writer task in the order callers
//! submit them; the server answers a connection's requests in order, so one reader task hands
//! each response frame to the oldest waiting caller, which checks its correlation id and decodes
//! it. A handle is cheap to clone; the connection closes when the last one is dropped.
//!
//! Only what the bench sends is wrapped: Produce (v11, acks = 1, or acks = all for idempotent and
//! transactional producers), Fetch (v12), and for `--idempotent`/`--transactional` producers
//! InitProducerId (v4), AddPartitionsToTxn (v3) and EndTxn (v3). The records a
//! fetch returns are decoded with kafka-protocol's [`RecordBatchDecoder`] (which checks each
//! batch's CRC32C, as any Kafka consumer does) into the same [`Record`]s a native fetch gives.
//!
//! This module is a leaf of the bench: it uses nothing of it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, BrokerId, EndTxnRequest, FetchRequest, InitProducerIdRequest,
    ProduceRequest, ProducerId, RequestHeader, ResponseHeader, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use kafka_protocol::records::RecordBatchDecoder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::batch::varint::put_unsigned_varint;
use crate::batch::Record;
use crate::client::{FetchResult, ProduceAck};

/// The Produce version the bench sends (the newest the listener serves).
pub const PRODUCE_VERSION: i16 = 11;
/// The Fetch version the bench sends (the newest the listener serves).
pub const FETCH_VERSION: i16 = 12;
/// Produce `acks`: answered once the partition has appended (one broker: 1 and -1 are alike).
pub const PRODUCE_ACKS: i16 = 1;
/// Produce `acks` of idempotent and transactional producers: all in-sync replicas, as Kafka's
/// clients insist on for them.
pub const PRODUCE_ACKS_ALL: i16 = -1;
/// The InitProducerId version the bench sends.
pub const INIT_PRODUCER_ID_VERSION: i16 = 4;
/// The AddPartitionsToTxn version the bench sends (the last a client sends one transaction in).
pub const ADD_PARTITIONS_TO_TXN_VERSION: i16 = 3;
/// The EndTxn version the bench sends.
pub const END_TXN_VERSION: i16 = 3;
/// How long the coordinator lets a bench transaction stay open before aborting it.
const TRANSACTION_TIMEOUT_MS: i32 = 60_000;
/// Longest the server may hold a produce before answering with a timeout.
const PRODUCE_TIMEOUT_MS: i32 = 30_000;
/// Largest response frame read: above the largest fetch the bench asks for
/// (`config::MAX_FETCH_BYTES`) plus headers.
const MAX_RESPONSE_BYTES: usize = 65 * 1024 * 1024;
/// Bytes read from the socket at a time, at least.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Requests queued for the writer task beyond those being written.
const QUEUE_REQUESTS: usize = 64;
/// Kafka's OFFSET_OUT_OF_RANGE error code.
pub const OFFSET_OUT_OF_RANGE: i16 = 1;

/// Why a Kafka call failed.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    /// The socket failed.
    #[error("kafka connection: {0}")]
    Io(#[from] std::io::Error),
    /// The connection closed before the answer came.
    #[error("kafka connection closed before the answer")]
    Closed,
    /// A request could not be encoded.
    #[error("encode a kafka request: {0}")]
    Encode(String),
    /// A response could not be decoded or did not match its request.
    #[error("decode a kafka response: {0}")]
    Decode(String),
    /// The server answered with an error code.
    #[error("kafka error code {code} ({name}){message}")]
    Server {
        /// Kafka's error code.
        code: i16,
        /// Its name, as kafka-protocol knows it.
        name: String,
        /// The server's message, if any (with a leading ": ").
        message: String,
    },
}

impl KafkaError {
    fn server(code: i16, message: Option<&StrBytes>) -> Self {
        let name = kafka_protocol::ResponseError::try_from_code(code)
            .map_or_else(|| "unknown".to_string(), |error| format!("{error:?}"));
        KafkaError::Server {
            code,
            name,
            message: message.map_or_else(String::new, |message| format!(": {}", &**message)),
        }
    }

    /// The Kafka error code, when the server answered with one.
    pub fn code(&self) -> Option<i16> {
        match self {
            KafkaError::Server { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// A request on its way to the writer task: the frame, and where its response goes.
struct Outgoing {
    /// The frame's bytes, in parts written with one vectored write (a produce's records are a
    /// part of their own, never copied into the frame).
    frame: Vec<Bytes>,
    answer: oneshot::Sender<Bytes>,
}

/// Responses awaited, oldest first, shared by the writer (which adds one before writing its
/// request) and the reader (which takes one per response frame); `None` once the reader has
/// stopped, so that no caller waits for an answer that cannot come.
type Pending = Arc<Mutex<Option<VecDeque<oneshot::Sender<Bytes>>>>>;

/// A pipelined Kafka connection (cheap to clone; closed when the last clone is dropped).
#[derive(Clone)]
pub struct KafkaConnection {
    requests: mpsc::Sender<Outgoing>,
    next_correlation_id: Arc<AtomicI32>,
    /// Fetch's `isolation_level`: 0 read_uncommitted, 1 read_committed.
    isolation_level: i8,
}

impl KafkaConnection {
    /// Connects to a Kafka listener.
    pub async fn connect(addr: &str) -> Result<Self, KafkaError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (read, write) = stream.into_split();
        let pending: Pending = Arc::new(Mutex::new(Some(VecDeque::new())));
        let (requests, queue) = mpsc::channel(QUEUE_REQUESTS);
        tokio::spawn(write_requests(write, queue, Arc::clone(&pending)));
        tokio::spawn(read_responses(read, pending));
        Ok(Self {
            requests,
            next_correlation_id: Arc::new(AtomicI32::new(1)),
            isolation_level: 0,
        })
    }

    /// The same connection fetching with read_committed isolation (stopping at the last
    /// stable offset, as a Kafka consumer with `isolation.level=read_committed` does).
    pub fn read_committed(mut self, read_committed: bool) -> Self {
        self.isolation_level = i8::from(read_committed);
        self
    }

    /// Sends a request and decodes its response (requests sent by concurrent calls are
    /// pipelined on the connection).
    pub async fn call<R: Request>(
        &self,
        version: i16,
        body: &R,
    ) -> Result<R::Response, KafkaError> {
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = vec![encode_frame(correlation_id, version, body)?];
        self.call_with_frame(correlation_id, version, frame).await
    }

    /// [`call`](Self::call) with a request frame already encoded (as parts).
    async fn call_with_frame<Response: Decodable + HeaderVersion>(
        &self,
        correlation_id: i32,
        version: i16,
        frame: Vec<Bytes>,
    ) -> Result<Response, KafkaError> {
        let (answer, response) = oneshot::channel();
        self.requests
            .send(Outgoing { frame, answer })
            .await
            .map_err(|_| KafkaError::Closed)?;
        let mut frame = response.await.map_err(|_| KafkaError::Closed)?;
        let header = ResponseHeader::decode(&mut frame, Response::header_version(version))
            .map_err(|error| KafkaError::Decode(error.to_string()))?;
        if header.correlation_id != correlation_id {
            return Err(KafkaError::Decode(format!(
                "correlation id {} answers request {correlation_id}",
                header.correlation_id
            )));
        }
        Response::decode(&mut frame, version).map_err(|error| KafkaError::Decode(error.to_string()))
    }

    /// Appends `records` (Kafka record batches v2) to one partition: with acks = 1, or for an
    /// idempotent or transactional producer (`producer`) acks = all, and the transactional id
    /// of a transactional one.
    pub async fn produce(
        &self,
        topic: &str,
        partition: u32,
        records: Bytes,
        record_count: u32,
        producer: Option<&KafkaProducerId>,
    ) -> Result<ProduceAck, KafkaError> {
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = encode_produce_frame(
            correlation_id,
            producer.map_or(PRODUCE_ACKS, |_| PRODUCE_ACKS_ALL),
            producer.and_then(|producer| producer.transactional_id.as_ref()),
            topic,
            partition,
            records,
        )?;
        let response: <ProduceRequest as Request>::Response = self
            .call_with_frame(correlation_id, PRODUCE_VERSION, frame)
            .await?;
        let answer = response
            .responses
            .first()
            .and_then(|topic| topic.partition_responses.first())
            .ok_or_else(|| KafkaError::Decode("a produce response without a partition".into()))?;
        if answer.error_code != 0 {
            return Err(KafkaError::server(
                answer.error_code,
                answer.error_message.as_ref(),
            ));
        }
        let base_offset = u64::try_from(answer.base_offset)
            .map_err(|_| KafkaError::Decode(format!("base offset {}", answer.base_offset)))?;
        let records = u64::from(record_count);
        Ok(ProduceAck {
            base_offset,
            last_offset: base_offset + records.saturating_sub(1),
            log_end_offset: base_offset + records,
        })
    }

    /// Fetches one partition from `offset`, waiting up to `max_wait` for records, and decodes
    /// the Kafka batches it returns into records (those below `offset` dropped, as Kafka
    /// consumers do).
    pub async fn fetch(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait: Duration,
    ) -> Result<FetchResult, KafkaError> {
        let max_bytes = i32::try_from(max_bytes).unwrap_or(i32::MAX);
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(i32::try_from(max_wait.as_millis()).unwrap_or(i32::MAX))
            .with_min_bytes(1)
            .with_max_bytes(max_bytes)
            .with_isolation_level(self.isolation_level)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition as i32)
                    .with_fetch_offset(offset as i64)
                    .with_partition_max_bytes(max_bytes)])]);
        let response = self.call(FETCH_VERSION, &request).await?;
        if response.error_code != 0 {
            return Err(KafkaError::server(response.error_code, None));
        }
        let answer = response
            .responses
            .first()
            .and_then(|topic| topic.partitions.first())
            .ok_or_else(|| KafkaError::Decode("a fetch response without a partition".into()))?;
        if answer.error_code != 0 {
            return Err(KafkaError::server(answer.error_code, None));
        }
        let records = match &answer.records {
            Some(bytes) if !bytes.is_empty() => decode_records(bytes.clone(), offset)?,
            _ => Vec::new(),
        };
        let next_offset = records.last().map_or(offset, |record| record.offset + 1);
        Ok(FetchResult {
            high_watermark: u64::try_from(answer.high_watermark).unwrap_or(0),
            log_start_offset: u64::try_from(answer.log_start_offset).unwrap_or(0),
            records,
            next_offset,
        })
    }
}

/// An idempotent or transactional producer's identity, from InitProducerId.
#[derive(Debug, Clone)]
pub struct KafkaProducerId {
    /// The producer id.
    pub id: i64,
    /// Its epoch.
    pub epoch: i16,
    /// The transactional id, for a transactional producer.
    pub transactional_id: Option<StrBytes>,
}

impl KafkaConnection {
    /// Gets a producer id (and epoch) from the listener: for `transactional_id`, the
    /// transaction coordinator's (this connection's server is its coordinator: the bench
    /// runs against one broker's Kafka listener).
    pub async fn init_producer_id(
        &self,
        transactional_id: Option<&str>,
    ) -> Result<KafkaProducerId, KafkaError> {
        let transactional_id = transactional_id.map(|id| StrBytes::from_string(id.to_owned()));
        let request = InitProducerIdRequest::default()
            .with_transactional_id(transactional_id.clone().map(TransactionalId))
            .with_transaction_timeout_ms(TRANSACTION_TIMEOUT_MS)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let response = self.call(INIT_PRODUCER_ID_VERSION, &request).await?;
        if response.error_code != 0 {
            return Err(KafkaError::server(response.error_code, None));
        }
        Ok(KafkaProducerId {
            id: response.producer_id.0,
            epoch: response.producer_epoch,
            transactional_id,
        })
    }

    /// Adds `partitions` of `topic` to the producer's open transaction.
    pub async fn add_partitions_to_txn(
        &self,
        producer: &KafkaProducerId,
        topic: &str,
        partitions: &[u32],
    ) -> Result<(), KafkaError> {
        let request = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(
                producer.transactional_id.clone().unwrap_or_default(),
            ))
            .with_v3_and_below_producer_id(ProducerId(producer.id))
            .with_v3_and_below_producer_epoch(producer.epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(partitions.iter().map(|p| *p as i32).collect())]);
        let response = self.call(ADD_PARTITIONS_TO_TXN_VERSION, &request).await?;
        if response.error_code != 0 {
            return Err(KafkaError::server(response.error_code, None));
        }
        for topic in &response.results_by_topic_v3_and_below {
            for partition in &topic.results_by_partition {
                if partition.partition_error_code != 0 {
                    return Err(KafkaError::server(partition.partition_error_code, None));
                }
            }
        }
        Ok(())
    }

    /// Commits (or aborts) the producer's open transaction.
    pub async fn end_txn(
        &self,
        producer: &KafkaProducerId,
        commit: bool,
    ) -> Result<(), KafkaError> {
        let request = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(
                producer.transactional_id.clone().unwrap_or_default(),
            ))
            .with_producer_id(ProducerId(producer.id))
            .with_producer_epoch(producer.epoch)
            .with_committed(commit);
        let response = self.call(END_TXN_VERSION, &request).await?;
        if response.error_code != 0 {
            return Err(KafkaError::server(response.error_code, None));
        }
        Ok(())
    }
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

/// Encodes a Produce (v[`PRODUCE_VERSION`]) frame of one partition as three parts: the fields
/// before the records, the records themselves (not copied), the tagged fields after them. The
/// same bytes as [`encode_frame`] of the equivalent [`ProduceRequest`] (tested), written by
/// hand because the generic encoder copies the records into the frame.
fn encode_produce_frame(
    correlation_id: i32,
    acks: i16,
    transactional_id: Option<&StrBytes>,
    topic: &str,
    partition: u32,
    records: Bytes,
) -> Result<Vec<Bytes>, KafkaError> {
    const CLIENT_ID: &[u8] = b"fencelog-bench";
    let mut head = BytesMut::with_capacity(64 + topic.len());
    head.put_u32(0); // the size, filled in below
    head.put_i16(ProduceRequest::KEY);
    head.put_i16(PRODUCE_VERSION);
    head.put_i32(correlation_id);
    head.put_i16(CLIENT_ID.len() as i16); // header v2: client_id is a (non-compact) string
    head.put_slice(CLIENT_ID);
    put_unsigned_varint(&mut head, 0); // header: no tagged fields
    match transactional_id {
        None => put_unsigned_varint(&mut head, 0),
        Some(id) => {
            put_unsigned_varint(&mut head, id.len() as u64 + 1);
            head.put_slice(id.as_bytes());
        }
    }
    head.put_i16(acks);
    head.put_i32(PRODUCE_TIMEOUT_MS);
    put_unsigned_varint(&mut head, 2); // one topic
    put_unsigned_varint(&mut head, topic.len() as u64 + 1);
    head.put_slice(topic.as_bytes());
    put_unsigned_varint(&mut head, 2); // one partition
    head.put_i32(partition as i32);
    put_unsigned_varint(&mut head, records.len() as u64 + 1);
    // After the records: no tagged fields on the partition, the topic, the body.
    let tail = Bytes::from_static(&[0, 0, 0]);
    let size = u32::try_from(head.len() - 4 + records.len() + tail.len())
        .map_err(|_| KafkaError::Encode("a request above 4 GiB".into()))?;
    head[..4].copy_from_slice(&size.to_be_bytes());
    Ok(vec![head.freeze(), records, tail])
}

/// Encodes a request frame as a Kafka client does: size, header, body.
fn encode_frame<R: Request>(
    correlation_id: i32,
    version: i16,
    body: &R,
) -> Result<Bytes, KafkaError> {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("fencelog-bench")));
    let header_version = R::header_version(version);
    // Sized up front: a produce request is a megabyte, and growing the buffer by doubling
    // would copy it several times over.
    let capacity = 4
        + header
            .compute_size(header_version)
            .map_err(|error| KafkaError::Encode(error.to_string()))?
        + body
            .compute_size(version)
            .map_err(|error| KafkaError::Encode(error.to_string()))?;
    let mut frame = BytesMut::with_capacity(capacity);
    frame.put_u32(0); // the size, filled in below
    header
        .encode(&mut frame, header_version)
        .map_err(|error| KafkaError::Encode(error.to_string()))?;
    body.encode(&mut frame, version)
        .map_err(|error| KafkaError::Encode(error.to_string()))?;
    let size = u32::try_from(frame.len() - 4)
        .map_err(|_| KafkaError::Encode("a request above 4 GiB".into()))?;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    Ok(frame.freeze())
}

/// Decodes a fetch's Kafka batches into records at or above `from`: with the library's lean
/// reader of the batches fencelog serves (CRC-32C checked, record bytes sliced, not copied),
/// as lean as the native client's decoder, so that the bench's own decoding weighs the same on
/// both protocols; with `kafka-protocol`'s general decoder for anything else.
fn decode_records(bytes: Bytes, from: u64) -> Result<Vec<Record>, KafkaError> {
    let mut lean = Vec::new();
    if crate::batch::decode_kafka_batches_into(bytes.clone(), &mut lean).is_ok() {
        lean.retain(|record| record.offset >= from);
        return Ok(lean);
    }
    let mut bytes = bytes;
    let sets = RecordBatchDecoder::decode_all(&mut bytes)
        .map_err(|error| KafkaError::Decode(format!("fetched record batches: {error}")))?;
    let mut records = Vec::new();
    for set in sets {
        for record in set.records {
            let Ok(offset) = u64::try_from(record.offset) else {
                continue;
            };
            if offset < from {
                continue;
            }
            records.push(Record {
                offset,
                epoch: 0,
                timestamp: record.timestamp,
                key: record.key,
                value: record.value,
                headers: Vec::new(),
            });
        }
    }
    Ok(records)
}

/// Writes queued requests in order, registering each one's answer slot before its bytes leave,
/// so the reader never sees a response nobody waits for. Ends when every handle is dropped
/// (closing the sending side, so the server closes the connection and the reader ends too) or
/// the socket fails (dropping the slots: their callers get [`KafkaError::Closed`]).
async fn write_requests(
    mut write: OwnedWriteHalf,
    mut queue: mpsc::Receiver<Outgoing>,
    pending: Pending,
) {
    while let Some(Outgoing { frame, answer }) = queue.recv().await {
        match pending.lock().expect("pending lock").as_mut() {
            Some(waiting) => waiting.push_back(answer),
            // The reader stopped: dropping `answer` tells the caller.
            None => return,
        }
        if let Err(error) = write_parts(&mut write, frame).await {
            tracing::debug!(%error, "bench: kafka connection write failed");
            return;
        }
    }
    let _ = write.shutdown().await;
}

/// Writes `parts` one after the other, with vectored writes.
async fn write_parts(write: &mut OwnedWriteHalf, mut parts: Vec<Bytes>) -> std::io::Result<()> {
    let mut first = 0;
    while first < parts.len() {
        let slices: Vec<std::io::IoSlice<'_>> = parts[first..]
            .iter()
            .map(|part| std::io::IoSlice::new(part))
            .collect();
        let mut written = write.write_vectored(&slices).await?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while first < parts.len() && written >= parts[first].len() {
            written -= parts[first].len();
            first += 1;
        }
        if first < parts.len() {
            parts[first].advance(written);
        }
    }
    Ok(())
}

/// Reads response frames and hands each to the oldest waiting caller. Frames are read into one
/// buffer without zeroing it first, and that buffer's memory is reused once the callers have
/// dropped the frames it held (as a `Framed` codec does): a fresh multi-megabyte allocation per
/// fetch would cost this VM a page fault per 4 KiB (docs/benchmarks.md, "fresh memory").
async fn read_responses(mut read: OwnedReadHalf, pending: Pending) {
    let mut buffer = BytesMut::with_capacity(READ_BUFFER_BYTES);
    while let Some(frame) = read_frame(&mut read, &mut buffer).await {
        let next = pending
            .lock()
            .expect("pending lock")
            .as_mut()
            .and_then(VecDeque::pop_front);
        let Some(answer) = next else {
            tracing::debug!("bench: a kafka response nobody asked for");
            break;
        };
        // A caller that gave up no longer listens; its response is dropped.
        let _ = answer.send(frame);
    }
    // Every caller still waiting gets `KafkaError::Closed`.
    pending.lock().expect("pending lock").take();
}

/// Reads the next response frame (without its size); `None` when the connection ends or a
/// frame is above [`MAX_RESPONSE_BYTES`].
async fn read_frame(read: &mut OwnedReadHalf, buffer: &mut BytesMut) -> Option<Bytes> {
    fill(read, buffer, 4).await?;
    let size = u32::from_be_bytes(buffer[..4].try_into().expect("4 bytes")) as usize;
    if size > MAX_RESPONSE_BYTES {
        tracing::debug!(size, "bench: kafka response above the frame limit");
        return None;
    }
    fill(read, buffer, 4 + size).await?;
    buffer.advance(4);
    Some(buffer.split_to(size).freeze())
}

/// Reads until `buffer` holds at least `len` bytes; `None` at the end of the stream or on an
/// error.
async fn fill(read: &mut OwnedReadHalf, buffer: &mut BytesMut, len: usize) -> Option<()> {
    if buffer.len() < len {
        // Reclaims the buffer's memory when no frame cut from it is still held.
        buffer.reserve((len - buffer.len()).max(READ_BUFFER_BYTES));
    }
    while buffer.len() < len {
        match read.read_buf(buffer).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};

    /// Proves: the hand-written Produce frame is, part for part joined, the generic encoder's
    /// frame of the same request, with and without a transactional id, and its records part is
    /// the records themselves.
    #[test]
    fn the_produce_frame_is_the_generic_encoders() {
        let records = Bytes::from(vec![5u8; 300]);
        for transactional_id in [None, Some(StrBytes::from_static_str("txn-1"))] {
            let request = ProduceRequest::default()
                .with_acks(-1)
                .with_transactional_id(transactional_id.clone().map(TransactionalId))
                .with_timeout_ms(PRODUCE_TIMEOUT_MS)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(topic_name("bench-topic"))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(3)
                        .with_records(Some(records.clone()))])]);
            let generic = encode_frame(42, PRODUCE_VERSION, &request).unwrap();
            let parts = encode_produce_frame(
                42,
                -1,
                transactional_id.as_ref(),
                "bench-topic",
                3,
                records.clone(),
            )
            .unwrap();
            assert_eq!(parts.concat(), generic.to_vec());
            assert_eq!(parts[1].as_ptr(), records.as_ptr(), "not copied");
        }
    }
}
