//! `InitProducerId` on the client: a producer id for idempotent appends.

use super::{Client, ClientError};
use crate::protocol::{ProtocolError, Request, Response};

/// A producer identity handed out by the server: stamped into every batch of an idempotent
/// [`Producer`](super::Producer) with its per-partition sequence numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerId {
    /// Unique on the server for ever.
    pub producer_id: i64,
    /// The session: a higher one starts the sequences again at 0.
    pub producer_epoch: i16,
}

impl Client {
    /// Obtains a new producer id (one round trip; the server reserves ids in durable blocks).
    pub async fn init_producer_id(&self) -> Result<ProducerId, ClientError> {
        let response = self.call(Request::InitProducerId).await?;
        match response {
            Response::InitProducerId {
                producer_id,
                producer_epoch,
            } => Ok(ProducerId {
                producer_id,
                producer_epoch,
            }),
            other => Err(ClientError::Protocol(ProtocolError::Malformed(format!(
                "unexpected {} response",
                other.api_key()
            )))),
        }
    }
}
