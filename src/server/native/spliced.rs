//! Native `Produce` frames read only to the batch's header, the rest spliced from the socket
//! into the segment (the one-copy produce path: [`crate::server::frame_reader`] reads the head,
//! [`crate::broker::spliced_produce`] appends).
//!
//! A frame qualifies when it is a `Produce` (version 0 or 1) of at least the listener's
//! `splice_min_frame_bytes` whose fields agree with its length and whose batch is a plain magic-1
//! or magic-3 batch (a marker or a transactional batch is checked against its records, so it
//! is read whole). Anything else about it, a malformed field included, is left to the ordinary
//! decoder on the whole frame, so every error a client can get is the one it got before.

use std::sync::Arc;

use bytes::Bytes;
use futures::{FutureExt, TryFutureExt};

use super::authentication;
use super::errors::to_error_response;
use super::refusals::refusal;
use crate::auth::Access;
use crate::batch::{BatchHeader, MAGIC, MAGIC_WITH_PRODUCER, PRODUCER_HEADER_BYTES};
use crate::broker::produce_queue::ProduceQueue;
use crate::broker::spliced_produce::SplicedProduce;
use crate::broker::{BrokerError, BrokerService};
use crate::domain::Acks;
use crate::protocol::{ApiKey, Request, Response, ResponseFrame, REQUEST_HEADER_BYTES};
use crate::server::frame_reader::{FrameHead, FrameHeader, FrameTail};
use crate::server::protocol::Started;

/// Default smallest native `Produce` frame whose batch is spliced: 0, never. Whether the one
/// copy beats the copy path's two depends on the machine: on one 2-core host it saved 7–10% of
/// the server's CPU per GB, on another (AMD EPYC, Linux 6.18) it cost 25% more, 15% less
/// throughput and three times the p99, because the kernel's copy out of the pipe's pages into
/// the page cache ran slower than a receive and a `pwrite` together (`docs/benchmarks.md`,
/// "The one-copy produce path"). A default must never be the slow one, so the path is opt-in:
/// measure with `fencelog bench --server-splice-min-bytes` and turn it on with
/// `serve --splice-min-bytes` (for example [`SPLICE_MIN_FRAME_BYTES_WHEN_ON`]).
pub const DEFAULT_SPLICE_MIN_FRAME_BYTES: usize = 0;

/// The threshold to splice from when the path is on: below 256 KiB the copy costs less than
/// the splice's system calls on every host measured.
pub const SPLICE_MIN_FRAME_BYTES_WHEN_ON: usize = 256 * 1024;

/// The fields of a native `Produce` frame up to its batch's header.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProduceHead {
    version: u16,
    correlation_id: u32,
    topic_at: usize,
    topic_len: usize,
    partition: u32,
    /// Where the batch starts in the frame body.
    batch_at: usize,
    batch_len: usize,
    /// Bytes after the batch (`acks` in version 1).
    trailer_len: usize,
}

/// What reading the head found.
enum Parsed {
    Head(ProduceHead),
    Need(usize),
    /// Not a frame to splice.
    Whole,
}

impl ProduceHead {
    /// Parses the head of a frame body of `declared` bytes from its first bytes `body`.
    fn parse(header: &FrameHeader, declared: usize, body: &[u8]) -> Parsed {
        if header.api_key != ApiKey::Produce as u16 || header.api_version > 1 {
            return Parsed::Whole;
        }
        let topic_at = REQUEST_HEADER_BYTES + 2;
        let Some(&[t0, t1]) = body.get(REQUEST_HEADER_BYTES..topic_at) else {
            return Parsed::Need(topic_at);
        };
        let topic_len = usize::from(u16::from_be_bytes([t0, t1]));
        let batch_at = topic_at + topic_len + 4 + 4;
        let head_end = batch_at + PRODUCER_HEADER_BYTES;
        if body.len() < head_end {
            return Parsed::Need(head_end);
        }
        let be_u32 =
            |at: usize| u32::from_be_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
        let partition = be_u32(topic_at + topic_len);
        let batch_len = be_u32(batch_at - 4) as usize;
        let trailer_len = if header.api_version >= 1 { 2 } else { 0 };
        let Some(batch) = BatchHeader::parse(&body[batch_at..]) else {
            return Parsed::Whole;
        };
        let fits = batch_at
            .checked_add(batch_len)
            .and_then(|end| end.checked_add(trailer_len))
            == Some(declared);
        let plain = matches!(batch.magic, MAGIC | MAGIC_WITH_PRODUCER)
            && !batch.is_control()
            && !batch.is_transactional();
        if !fits
            || !plain
            || batch.batch_length as usize != batch_len
            || body.len() >= batch_at + batch_len
        {
            return Parsed::Whole;
        }
        Parsed::Head(ProduceHead {
            version: header.api_version,
            correlation_id: header.correlation_id,
            topic_at,
            topic_len,
            partition,
            batch_at,
            batch_len,
            trailer_len,
        })
    }
}

/// The native listener's [`crate::server::frame_reader::SpliceRule`] judge.
pub fn judge(header: &FrameHeader, declared: usize, body: &[u8]) -> FrameHead {
    match ProduceHead::parse(header, declared, body) {
        Parsed::Head(head) => FrameHead::Splice {
            piped_end: head.batch_at + head.batch_len,
        },
        Parsed::Need(bytes) => FrameHead::Need(bytes),
        Parsed::Whole => FrameHead::Whole,
    }
}

/// Starts a produce whose frame was read to `head` (its bytes before the batch's piped ones),
/// the batch's other bytes in `tail`'s pipe: the same checks as a produce read whole (access,
/// `acks`), then the batch goes to the connection's produce queue.
pub fn start(
    service: &Arc<BrokerService>,
    queue: &ProduceQueue,
    access: &Access,
    head: Bytes,
    tail: FrameTail,
) -> Started<ResponseFrame> {
    let declared = head.len() + tail.pipe.holds() + tail.trailer.len();
    let header = FrameHeader::peek(&head);
    let parsed = header.map(|header| ProduceHead::parse(&header, declared, &head));
    let Some(Parsed::Head(fields)) = parsed else {
        // The reader hands on only the heads its judge recognised.
        let correlation_id = header.map_or(0, |header| header.correlation_id);
        return refuse(
            correlation_id,
            BrokerError::InvalidRequest("a produce frame read in part is not a produce".into()),
        );
    };
    let correlation_id = fields.correlation_id;
    let topic_bytes = &head[fields.topic_at..fields.topic_at + fields.topic_len];
    let Ok(topic) = std::str::from_utf8(topic_bytes).map(str::to_string) else {
        return refuse(
            correlation_id,
            BrokerError::InvalidRequest("topic is not valid UTF-8".into()),
        );
    };
    let acks = match read_acks(fields.version, &tail.trailer) {
        Ok(acks) => acks,
        Err(refused) => return refuse(correlation_id, refused),
    };
    // The same access rule as a produce read whole.
    let probe = Request::Produce {
        topic: topic.clone(),
        partition: fields.partition,
        batch: Bytes::new(),
        acks,
    };
    if let Err(refused) = authentication::authorize(access, &probe) {
        return authentication::refusal(correlation_id, &refused);
    }
    let batch_head = head.slice(fields.batch_at..);
    let epoch = BatchHeader::peek_epoch(&batch_head).unwrap_or(0);
    let refused_on = (topic.clone(), fields.partition);
    let service = Arc::clone(service);
    let request = SplicedProduce {
        topic,
        partition: fields.partition,
        credential: service.producing().native_credential(epoch),
        head: batch_head,
        tail: tail.pipe,
    };
    Started::later(
        service
            .producing()
            .produce_spliced(queue, request, acks)
            .map_ok(|appended| Response::Produce {
                base_offset: appended.base_offset,
                last_offset: appended.last_offset,
                log_end_offset: appended.log_end_offset,
            })
            .map(move |result| match result {
                Ok(response) => ResponseFrame::ok(correlation_id, response),
                Err(error) => {
                    let (topic, partition) = &refused_on;
                    let error = refusal(&service, Some((topic, *partition)), &error);
                    ResponseFrame::error(correlation_id, error)
                }
            }),
    )
}

fn refuse(correlation_id: u32, error: BrokerError) -> Started<ResponseFrame> {
    Started::ready(ResponseFrame::error(
        correlation_id,
        to_error_response(&error),
    ))
}

/// The fields after the batch: version 1's `acks`, which must be one the server offers (the
/// decoder's rule for a frame read whole).
fn read_acks(version: u16, trailer: &[u8]) -> Result<Option<Acks>, BrokerError> {
    if version == 0 {
        return Ok(None);
    }
    let &[a, b] = trailer else {
        return Err(BrokerError::InvalidRequest("acks missing".into()));
    };
    let raw = i16::from_be_bytes([a, b]);
    Acks::from_i16(raw).map(Some).ok_or_else(|| {
        BrokerError::InvalidRequest(format!(
            "acks {raw} is not offered: send -1 (all in-sync replicas) or 1 (the leader)"
        ))
    })
}
