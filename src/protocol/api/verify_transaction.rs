//! `VerifyTransaction` (key 23): a partition's leader asks a transactional id's coordinator
//! whether the producer's transaction is open with that partition in it, before it writes the
//! transaction's first batch there (KIP-890's verification; see
//! `crate::storage::verification`). Brokers send it to each other; a client has no use for it.
//!
//! Request: `transactional_id string16, producer_id i64, producer_epoch i16, topic string16,
//! partition u32`. Response: empty (the transaction is open and includes the partition).
//! Refusals: `INVALID_TRANSACTION_STATE` (no open transaction with that partition: it ended or
//! the partition was never added), `PRODUCER_FENCED` (a newer producer epoch exists),
//! `INVALID_PRODUCER_EPOCH`-class codes as for `EndTransaction`, and `NOT_LEADER` naming the
//! id's coordinator when the receiver is not it.

use bytes::{BufMut, BytesMut};

use super::add_to_transaction::{producer_len, put_producer, read_producer, TransactionProducer};
use crate::protocol::wire::{put_str16, str16_len, Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(producer: &TransactionProducer, topic: &str) -> usize {
    producer_len(producer) + str16_len(topic) + 4
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    producer: &TransactionProducer,
    topic: &str,
    partition: u32,
) -> Result<(), ProtocolError> {
    put_producer(dst, producer)?;
    put_str16(dst, "topic", topic)?;
    dst.put_u32(partition);
    Ok(())
}

/// Reads the request body.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    Ok(Request::VerifyTransaction {
        producer: read_producer(r)?,
        topic: r.string16("topic")?,
        partition: r.u32("partition")?,
    })
}

/// Reads the response body: nothing.
pub(in crate::protocol) fn decode_response(_r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::VerifyTransaction)
}
