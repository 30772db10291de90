//! `EndTransaction` (key 22): commit or abort a native transaction.
//!
//! Request: `transactional_id string16, producer_id i64, producer_epoch i16, commit u8` (`1`
//! commit, `0` abort; any other value is `INVALID_REQUEST`). Response: empty.

use bytes::{BufMut, BytesMut};

use super::add_to_transaction::{producer_len, put_producer, read_producer, TransactionProducer};
use crate::protocol::wire::{Reader, WireError};
use crate::protocol::{ProtocolError, Request, Response};

/// Size of the request body.
pub(in crate::protocol) fn request_body_len(producer: &TransactionProducer) -> usize {
    producer_len(producer) + 1
}

/// Writes the request body.
pub(in crate::protocol) fn encode_request(
    dst: &mut BytesMut,
    producer: &TransactionProducer,
    commit: bool,
) -> Result<(), ProtocolError> {
    put_producer(dst, producer)?;
    dst.put_u8(u8::from(commit));
    Ok(())
}

/// Reads the request body.
pub(in crate::protocol) fn decode_request(r: &mut Reader) -> Result<Request, WireError> {
    let producer = read_producer(r)?;
    let commit = match r.u8("commit")? {
        0 => false,
        1 => true,
        other => {
            return Err(WireError::Invalid(format!(
                "field `commit` is {other}; 1 commits, 0 aborts"
            )))
        }
    };
    Ok(Request::EndTransaction { producer, commit })
}

/// Reads the response body: nothing.
pub(in crate::protocol) fn decode_response(_r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response::EndTransaction)
}
