//! The bookkeeping of a producer's batches through their life: open (being filled), closed
//! (bytes and sequence numbers fixed, ready to send or resend), in flight (on the wire with the
//! future of its acknowledgement), and the idempotent session that numbers them.
//!
//! Each record's [`Reply`] travels with its batch through these states, so whatever becomes of
//! the batch (acknowledged, failed, given up) answers every record in it exactly once.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::{RecordReply, SendError};
use crate::batch::BatchBuilder;
use crate::client::{ClientError, ProduceAck, ProducerId};

/// A queued record's way back to its sender: the record itself (to give back on failure), where
/// its outcome goes, and its unit of `max_pending_records`.
pub(super) struct Reply {
    pub(super) key: Option<Bytes>,
    pub(super) value: Bytes,
    pub(super) sender: RecordReply,
    pub(super) _permit: OwnedSemaphorePermit,
}

impl Reply {
    pub(super) fn succeed(self, offset: u64) {
        let _ = self.sender.send(Ok(offset));
    }

    pub(super) fn fail(self, error: ClientError) {
        let _ = self
            .sender
            .send(Err(SendError::new(error, self.key, self.value)));
    }
}

/// A batch being filled.
pub(super) struct OpenBatch {
    pub(super) builder: BatchBuilder,
    pub(super) replies: Vec<Reply>,
    /// When linger runs out for its first record.
    pub(super) deadline: Instant,
}

/// A batch ready to be sent (or resent: its bytes never change).
pub(super) struct ClosedBatch {
    pub(super) bytes: Bytes,
    pub(super) replies: Vec<Reply>,
    /// After this it is not resent any more.
    pub(super) give_up_at: Instant,
    /// Whether an earlier send of it may have landed (it got no answer): then a later refusal
    /// that does not speak for earlier sends leaves its outcome unknown.
    pub(super) maybe_landed: bool,
    /// Why its last send failed, when it waits to be sent again: what it fails with if its
    /// delivery timeout runs out first.
    pub(super) last_error: Option<ClientError>,
}

pub(super) type Acknowledgement =
    Pin<Box<dyn Future<Output = Result<ProduceAck, ClientError>> + Send>>;

/// A batch on the wire, and the future of its acknowledgement.
pub(super) struct InFlight {
    pub(super) batch: ClosedBatch,
    pub(super) ack: Acknowledgement,
}

/// An idempotent producer's identity and its next sequence number on the partition.
pub(super) struct Session {
    pub(super) id: ProducerId,
    pub(super) next_sequence: i32,
}
