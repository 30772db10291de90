//! The native `Fetch` answered in the layout of its request's version (section 5.7 of
//! `docs/protocol.md`): version 0 ends at `batches`; every version-1 answer appends
//! `last_stable_offset` and `next_offset`, whatever its isolation, because a client decodes a
//! response by the version it asked in and cannot tell the two layouts apart otherwise.
//!
//! read_committed (isolation 1) is the service's `fetch_committed`, which filters the batches
//! and says where to go on. read_uncommitted (isolation 0) returns the batches as version 0 does;
//! its `last_stable_offset` is the partition's, read from the service after the read (and never
//! above the answer's own high watermark), and its `next_offset` is the offset after the last
//! batch returned, or the request's offset when none was.

use bytes::Bytes;
use futures::future::BoxFuture;
use std::sync::Arc;

use crate::batch::BatchHeader;
use crate::broker::{BrokerError, BrokerService, FetchRequest};
use crate::protocol::{CommittedRead, Response};
use crate::storage::ReadResult;

/// The answer to a fetch of `read_committed` (`None`: version 0; `Some(false)`: version 1,
/// read_uncommitted; `Some(true)`: version 1, read_committed).
pub(super) fn answer(
    service: Arc<BrokerService>,
    request: FetchRequest,
    read_committed: Option<bool>,
) -> BoxFuture<'static, Result<Response, BrokerError>> {
    match read_committed {
        None => Box::pin(async move { Ok(fetched(service.reads().fetch(request).await?, None)) }),
        Some(true) => Box::pin(async move {
            let (result, committed) = service.reads().fetch_committed(request).await?;
            Ok(fetched(result, Some(committed)))
        }),
        Some(false) => Box::pin(async move {
            let (topic, partition, offset) =
                (request.topic.clone(), request.partition, request.offset);
            let result = service.reads().fetch(request).await?;
            // Read after the batches: the partition's last stable offset may have moved on
            // since, but not below what it was, so capping it at the answer's high watermark
            // keeps it one the partition had while the answer was read.
            let last_stable_offset = service
                .reads()
                .last_stable_offset(&topic, partition)?
                .min(result.high_watermark);
            let committed = CommittedRead {
                last_stable_offset,
                next_offset: next_offset_after(&result.batches, offset),
            };
            Ok(fetched(result, Some(committed)))
        }),
    }
}

fn fetched(result: ReadResult, committed: Option<CommittedRead>) -> Response {
    Response::Fetch {
        high_watermark: result.high_watermark,
        log_start_offset: result.log_start_offset,
        batches: result.batches,
        committed,
    }
}

/// The offset after the last whole batch of `chunks` (each a run of stored batches back to
/// back), never below `offset`: where a reader that asked at `offset` goes on.
fn next_offset_after(chunks: &[Bytes], offset: u64) -> u64 {
    let mut next = offset;
    for chunk in chunks {
        let mut position = 0;
        while let Some(header) = chunk.get(position..).and_then(BatchHeader::parse) {
            let length = header.batch_length as usize;
            if length == 0 || position + length > chunk.len() {
                break;
            }
            next = next.max(header.next_offset());
            position += length;
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::BatchBuilder;

    fn stored(base_offset: u64, records: usize) -> Bytes {
        let mut builder = BatchBuilder::new(1);
        for _ in 0..records {
            builder.push(1_000, None, Some(b"v"));
        }
        let mut batch = builder.finish().to_vec();
        batch[..8].copy_from_slice(&base_offset.to_be_bytes());
        Bytes::from(batch)
    }

    /// Past the last batch of the last chunk, batches run together in a chunk or not; the
    /// request's offset when nothing was returned, or when it lies past what was (never back).
    #[test]
    fn next_offset_is_past_the_last_batch_returned() {
        let run: Vec<u8> = [stored(0, 3), stored(3, 2)].concat();
        let chunks = vec![Bytes::from(run), stored(5, 4)];
        assert_eq!(next_offset_after(&chunks, 1), 9);
        assert_eq!(next_offset_after(&chunks[..1], 4), 5);
        assert_eq!(next_offset_after(&[], 7), 7);
        assert_eq!(next_offset_after(&[stored(0, 3)], 10), 10);
    }
}
