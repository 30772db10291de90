//! `AddToTransaction` (key 21): partitions join a native transaction, each with the epoch of the
//! writer's lease there.
//!
//! Request: `transactional_id string16, producer_id i64, producer_epoch i16, partition_count
//! u32`, then per partition `topic string16, partition u32, epoch u64`. Response: empty. All or
//! nothing: one refused partition refuses the request.

use bytes::{BufMut, BytesMut};

use crate::protocol::node::{put_entry_count, read_entry_count};
use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Smallest encoding of one partition entry (empty topic name).
const ENTRY_MIN_BYTES: usize = 2 + 4 + 8;

/// A transaction's producer: the transactional id with the producer id and epoch
/// `InitTransaction` returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionProducer {
    /// The transactional id.
    pub transactional_id: String,
    /// From `InitTransaction`.
    pub producer_id: i64,
    /// From `InitTransaction`.
    pub producer_epoch: i16,
}

/// A partition joining a transaction, under the writer's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// The epoch of the writer's lease on the partition (its batches carry it).
    pub epoch: u64,
}

/// Size of the producer fields.
pub(in crate::protocol) fn producer_len(producer: &TransactionProducer) -> usize {
    str16_len(&producer.transactional_id) + 8 + 2
}

/// Writes the producer fields.
pub(in crate::protocol) fn put_producer(
    dst: &mut BytesMut,
    producer: &TransactionProducer,
) -> Result<(), ProtocolError> {
    put_str16(dst, "transactional_id", &producer.transactional_id)?;
    dst.put_i64(producer.producer_id);
    dst.put_i16(producer.producer_epoch);
    Ok(())
}

/// Reads the producer fields.
pub(in crate::protocol) fn read_producer(r: &mut Reader) -> Result<TransactionProducer, WireError> {
    Ok(TransactionProducer {
        transactional_id: r.string16("transactional_id")?,
        producer_id: r.i64("producer_id")?,
        producer_epoch: r.u16("producer_epoch")? as i16,
    })
}

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(
    producer: &TransactionProducer,
    partitions: &[TransactionPartition],
) -> usize {
    producer_len(producer)
        + 4
        + partitions
            .iter()
            .map(|p| str16_len(&p.topic) + ENTRY_MIN_BYTES - 2)
            .sum::<usize>()
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    producer: &TransactionProducer,
    partitions: &[TransactionPartition],
) -> Result<(), ProtocolError> {
    put_producer(dst, producer)?;
    put_entry_count(dst, "AddToTransaction partitions", partitions.len())?;
    for partition in partitions {
        put_str16(dst, "topic", &partition.topic)?;
        dst.put_u32(partition.partition);
        dst.put_u64(partition.epoch);
    }
    Ok(())
}

/// Reads the request body; the list's capacity is capped by the bytes that remain.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    let producer = read_producer(r)?;
    let count = read_entry_count(r, "partition_count")?;
    let mut partitions = Vec::with_capacity(r.capped(count, ENTRY_MIN_BYTES));
    for _ in 0..count {
        partitions.push(TransactionPartition {
            topic: r.string16("topic")?,
            partition: r.u32("partition")?,
            epoch: r.u64("epoch")?,
        });
    }
    Ok(Request::AddToTransaction {
        producer,
        partitions,
    })
}

/// Reads the response body: nothing.
pub(in crate::protocol) fn decode_response(_r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::AddToTransaction)
}
