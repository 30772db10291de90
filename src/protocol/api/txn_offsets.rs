//! The two broker-to-broker APIs that carry a Kafka transaction's consumer positions on a
//! cluster, where a group's coordinator and a transactional id's coordinator are often
//! different brokers (docs/kafka.md, "Transactions on a cluster"):
//!
//! * `TxnOffsetCommit` (key 24): the group's coordinator, which received Kafka's
//!   TxnOffsetCommit and checked the member, hands the positions to the transactional id's
//!   coordinator, which holds them in the transaction's replicated state. Request:
//!   `transactional_id string16, producer_id i64, producer_epoch i16, group string16,
//!   entry_count u32`, then per entry `topic string16, partition u32, offset u64, leader_epoch
//!   i32, metadata string16` (empty: none). Response: empty.
//! * `EndTxnOffsets` (key 25): the transactional id's coordinator, once the transaction is
//!   decided and its markers written, tells the group's coordinator: on commit it stores the
//!   positions (as OffsetCommit does), and either way the group's positions stop being held by
//!   that transaction (Kafka's OffsetFetch `require_stable`). Request: `group string16,
//!   transactional_id string16, commit u8` (`1` commit, `0` abort), `entry_count u32`, entries
//!   as above (empty on abort). Response: empty. Repeating it is harmless.

use bytes::{BufMut, BytesMut};

use super::add_to_transaction::{producer_len, put_producer, read_producer, TransactionProducer};
use crate::protocol::node::{put_entry_count, read_entry_count};
use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Smallest encoding of one entry (empty topic and metadata).
const ENTRY_MIN_BYTES: usize = 2 + 4 + 8 + 4 + 2;

/// One partition's position held by a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffset {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// The next offset the group will read.
    pub offset: u64,
    /// The leader epoch the consumer saw (-1: none).
    pub leader_epoch: i32,
    /// The consumer's metadata (empty: none).
    pub metadata: String,
}

fn entries_len(entries: &[TxnOffset]) -> usize {
    4 + entries
        .iter()
        .map(|entry| str16_len(&entry.topic) + 4 + 8 + 4 + str16_len(&entry.metadata))
        .sum::<usize>()
}

fn put_entries(dst: &mut BytesMut, entries: &[TxnOffset]) -> Result<(), ProtocolError> {
    put_entry_count(dst, "transaction offsets", entries.len())?;
    for entry in entries {
        put_str16(dst, "topic", &entry.topic)?;
        dst.put_u32(entry.partition);
        dst.put_u64(entry.offset);
        dst.put_i32(entry.leader_epoch);
        put_str16(dst, "metadata", &entry.metadata)?;
    }
    Ok(())
}

fn read_entries(r: &mut Reader) -> Result<Vec<TxnOffset>, WireError> {
    let count = read_entry_count(r, "entry_count")?;
    let mut entries = Vec::with_capacity(r.capped(count, ENTRY_MIN_BYTES));
    for _ in 0..count {
        entries.push(TxnOffset {
            topic: r.string16("topic")?,
            partition: r.u32("partition")?,
            offset: r.u64("offset")?,
            leader_epoch: r.u32("leader_epoch")? as i32,
            metadata: r.string16("metadata")?,
        });
    }
    Ok(entries)
}

/// Size of a `TxnOffsetCommit` request body.
pub(in crate::protocol) fn commit_request_len(
    producer: &TransactionProducer,
    group: &str,
    entries: &[TxnOffset],
) -> usize {
    producer_len(producer) + str16_len(group) + entries_len(entries)
}

/// Writes a `TxnOffsetCommit` request body.
pub(in crate::protocol) fn encode_commit_request(
    dst: &mut BytesMut,
    producer: &TransactionProducer,
    group: &str,
    entries: &[TxnOffset],
) -> Result<(), ProtocolError> {
    put_producer(dst, producer)?;
    put_str16(dst, "group", group)?;
    put_entries(dst, entries)
}

/// Reads a `TxnOffsetCommit` request body.
pub(in crate::protocol) fn decode_commit_request(r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::TxnOffsetCommit {
        producer: read_producer(r)?,
        group: r.string16("group")?,
        offsets: read_entries(r)?,
    })
}

/// Size of an `EndTxnOffsets` request body.
pub(in crate::protocol) fn end_request_len(
    group: &str,
    transactional_id: &str,
    entries: &[TxnOffset],
) -> usize {
    str16_len(group) + str16_len(transactional_id) + 1 + entries_len(entries)
}

/// Writes an `EndTxnOffsets` request body.
pub(in crate::protocol) fn encode_end_request(
    dst: &mut BytesMut,
    group: &str,
    transactional_id: &str,
    commit: bool,
    entries: &[TxnOffset],
) -> Result<(), ProtocolError> {
    put_str16(dst, "group", group)?;
    put_str16(dst, "transactional_id", transactional_id)?;
    dst.put_u8(u8::from(commit));
    put_entries(dst, entries)
}

/// Reads an `EndTxnOffsets` request body.
pub(in crate::protocol) fn decode_end_request(r: &mut Reader) -> Result<Request, WireError> {
    let group = r.string16("group")?;
    let transactional_id = r.string16("transactional_id")?;
    let commit = match r.u8("commit")? {
        0 => false,
        1 => true,
        other => {
            return Err(WireError::Invalid(format!(
                "field `commit` is {other}; 1 commits, 0 aborts"
            )))
        }
    };
    Ok(Request::EndTxnOffsets {
        group,
        transactional_id,
        commit,
        offsets: read_entries(r)?,
    })
}

/// Reads a `TxnOffsetCommit` response body: nothing.
pub(in crate::protocol) fn decode_commit_response(_r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::TxnOffsetCommit)
}

/// Reads an `EndTxnOffsets` response body: nothing.
pub(in crate::protocol) fn decode_end_response(_r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::EndTxnOffsets)
}
