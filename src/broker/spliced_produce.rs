//! A produce whose batch did not pass through this process's memory: the one-copy produce path
//! (`docs/benchmarks.md`, "The one-copy produce path"), the broker's part.
//!
//! The listener read the request's fields and the batch's first bytes into memory and moved the
//! rest of the batch from the socket into a pipe as it arrived ([`crate::server::frame_reader`],
//! outside every lock). The append ([`crate::storage::Partition::append_spliced_pending`])
//! checks the fence and the producer's sequence from the batch's header *before* any byte
//! lands, then moves the bytes pipe → segment file (no wait: they are all in the pipe), and
//! validates the whole batch as it landed before publishing it. A batch refused before the move
//! leaves its bytes in the pipe, which is closed with them (`PooledPipe`'s drop).

use bytes::Bytes;

use super::BrokerError;
use crate::storage::splice::PooledPipe;
use crate::storage::{Partition, PendingAppend, WriteCredential};

/// One produce of a batch whose last bytes are in a pipe.
#[derive(Debug)]
pub struct SplicedProduce {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// What the writer presents to the partition's fence.
    pub credential: WriteCredential,
    /// The batch's first bytes (its header at least), read from the frame.
    pub head: Bytes,
    /// The rest of the batch: every byte of it is in the pipe.
    pub tail: PooledPipe,
}

impl SplicedProduce {
    /// Appends the batch to `target` ([`Partition::append_spliced_pending`]), its tail moved
    /// from the pipe into the segment file.
    pub(crate) fn append_to(mut self, target: &Partition) -> Result<PendingAppend, BrokerError> {
        let tail_len = self.tail.holds();
        let tail = &mut self.tail;
        Ok(target.append_spliced_pending(
            self.credential,
            &self.head,
            tail_len,
            &mut |file, offset| tail.drain_into(file, offset, tail_len),
        )?)
    }
}
