//! Reading a partition: [`Client::fetch`] (records) and [`Client::fetch_batches`] (batches
//! decoded later), and the offset queries `ListOffsets` answers.
//!
//! The read side is apart from the write side ([`produce`](super::produce)) because its
//! answers carry their own work: a fetch's batches are checked and split into records on the
//! client ([`FetchedBatches::decode`]), which a consumer may overlap with the next fetch.

use std::time::Duration;

use bytes::Bytes;

use super::calls::expect_response;
use super::{Client, ClientError};
use crate::batch::{decode_batches_into, Record};
use crate::protocol::{CommittedRead, ProtocolError, Request, Response, NO_OFFSET_FOR_TIMESTAMP};

/// The answer to a fetch, with the batches already split into records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResult {
    /// One past the last offset readers can see.
    pub high_watermark: u64,
    /// Oldest offset still stored.
    pub log_start_offset: u64,
    /// Records from the requested offset on (none below it), in offset order.
    pub records: Vec<Record>,
    /// The offset after the last batch returned (the requested offset when none was): where
    /// the next fetch starts even when the last batches held no records to show (transaction
    /// markers), so a consumer never stalls on them.
    pub next_offset: u64,
}

/// A fetch answer whose batches are not checked or decoded yet (see [`Client::fetch_batches`]):
/// a consumer can ask for the next range ([`next_offset`](Self::next_offset), read from the
/// batch headers alone) before it spends the time to [`decode`](Self::decode) this one, so
/// that the server sends while the consumer decodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedBatches {
    /// One past the last offset readers can see.
    pub high_watermark: u64,
    /// Oldest offset still stored.
    pub log_start_offset: u64,
    /// The offset the fetch asked for (records below it are dropped by `decode`).
    pub offset: u64,
    /// The stored batches as received, unchecked.
    pub batches: Vec<Bytes>,
    /// A read_committed fetch's last stable offset and next offset
    /// ([`Client::fetch_batches_committed`]); `None` for read_uncommitted.
    pub committed: Option<CommittedRead>,
}

impl FetchedBatches {
    /// The offset after the last record the batches hold, read from their headers without
    /// checking them: where the next fetch starts. `None` when there are no batches or their
    /// framing is unreadable (then [`decode`](Self::decode) says what is wrong). A batch whose
    /// CRC turns out bad still fails `decode`: a consumer that fetched ahead from this offset
    /// discards that answer with the error.
    pub fn next_offset(&self) -> Option<u64> {
        // A read_committed answer says where to go on: the batches it left out (aborted
        // transactions, markers) are not there to read it from.
        if let Some(committed) = self.committed {
            return Some(committed.next_offset);
        }
        let mut next = None;
        for chunk in &self.batches {
            let mut rest: &[u8] = chunk;
            while !rest.is_empty() {
                let header = crate::batch::BatchHeader::parse(rest)?;
                let length = header.batch_length as usize;
                if length < crate::batch::HEADER_BYTES || length > rest.len() {
                    return None;
                }
                next = Some(
                    header
                        .base_offset
                        .checked_add(u64::from(header.record_count))?,
                );
                rest = &rest[length..];
            }
        }
        next
    }

    /// Checks every batch (length and CRC) and splits them into records from the requested
    /// offset on.
    pub fn decode(self) -> Result<FetchResult, ClientError> {
        let next_offset = self.next_offset().unwrap_or(self.offset).max(self.offset);
        let mut records = Vec::new();
        for chunk in self.batches {
            decode_batches_into(chunk, &mut records)?;
        }
        records.retain(|record| record.offset >= self.offset);
        Ok(FetchResult {
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start_offset,
            records,
            next_offset,
        })
    }
}

/// A partition's offset range and epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    /// Oldest offset still stored.
    pub earliest: u64,
    /// Next offset to be written (the log end offset).
    pub latest: u64,
    /// The partition's current epoch (0 if never leased).
    pub epoch: u64,
}

impl Client {
    /// Reads records from `offset` on: at least the batch holding `offset` if it exists, then
    /// more while the batches fit in `max_bytes`. If nothing is available yet, the server waits
    /// up to `max_wait` for new records (long polling) and may answer with none.
    ///
    /// Each batch's CRC is checked again here; records below `offset` (the first batch may
    /// start earlier) are dropped.
    pub async fn fetch(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait: Duration,
    ) -> Result<FetchResult, ClientError> {
        self.fetch_batches(topic, partition, offset, max_bytes, max_wait)
            .await?
            .decode()
    }

    /// [`fetch`](Self::fetch) of committed records only (Fetch version 1, read_committed): the
    /// answer stops at the partition's last stable offset (the first record of its oldest open
    /// transaction) and leaves out aborted transactions' records and transaction markers.
    pub async fn fetch_committed(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait: Duration,
    ) -> Result<FetchResult, ClientError> {
        self.fetch_batches_committed(topic, partition, offset, max_bytes, max_wait)
            .await?
            .decode()
    }

    /// [`fetch_batches`](Self::fetch_batches) of committed records only (see
    /// [`fetch_committed`](Self::fetch_committed)).
    pub async fn fetch_batches_committed(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait: Duration,
    ) -> Result<FetchedBatches, ClientError> {
        self.fetch_batches_as(topic, partition, offset, max_bytes, max_wait, true)
            .await
    }

    /// [`fetch`](Self::fetch) without the check and decoding of the batches, which the caller
    /// does with [`FetchedBatches::decode`] (after asking for the next range, if it likes).
    pub async fn fetch_batches(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait: Duration,
    ) -> Result<FetchedBatches, ClientError> {
        self.fetch_batches_as(topic, partition, offset, max_bytes, max_wait, false)
            .await
    }

    async fn fetch_batches_as(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait: Duration,
        read_committed: bool,
    ) -> Result<FetchedBatches, ClientError> {
        let max_wait_ms = u32::try_from(max_wait.as_millis()).unwrap_or(u32::MAX);
        let config = self.config();
        let timeout = config
            .request_timeout
            .max(Duration::from_millis(max_wait_ms.into()) + config.fetch_slack);
        let request = Request::Fetch {
            topic: topic.to_owned(),
            partition,
            offset,
            max_bytes,
            max_wait_ms,
            // Version 0 unless reading committed records (a server before transactions
            // answers version 1 UNSUPPORTED_VERSION).
            read_committed: read_committed.then_some(true),
        };
        let response = self
            .call_partition(topic, partition, request, timeout)
            .await?;
        expect_response!(response,
        Response::Fetch { high_watermark, log_start_offset, batches, committed } => FetchedBatches {
            high_watermark,
            log_start_offset,
            offset,
            batches,
            committed,
        })
    }

    /// A partition's offset range and current epoch.
    pub async fn list_offsets(&self, topic: &str, partition: u32) -> Result<Offsets, ClientError> {
        let request = Request::ListOffsets {
            topic: topic.to_owned(),
            partition,
            timestamp: None,
        };
        let response = self.call_routed(topic, partition, request).await?;
        expect_response!(response, Response::ListOffsets { earliest, latest, epoch, .. } => Offsets { earliest, latest, epoch })
    }

    /// The first offset whose record timestamp is at or after `timestamp` (ms since the Unix
    /// epoch), or `None` if no record is that recent. Timestamps are the producers', so they
    /// need not grow with offsets: this is the *smallest* such offset.
    ///
    /// Uses `ListOffsets` version 1; a server that only knows version 0 answers
    /// `UNSUPPORTED_VERSION` (as [`ClientError::Server`]).
    pub async fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> Result<Option<u64>, ClientError> {
        let request = Request::ListOffsets {
            topic: topic.to_owned(),
            partition,
            timestamp: Some(timestamp),
        };
        let response = self.call_routed(topic, partition, request).await?;
        let found = expect_response!(response,
            Response::ListOffsets { offset_for_timestamp: Some(found), .. } => found)?;
        if found == NO_OFFSET_FOR_TIMESTAMP {
            return Ok(None);
        }
        u64::try_from(found).map(Some).map_err(|_| {
            ClientError::Protocol(ProtocolError::Malformed(format!(
                "ListOffsets offset_for_timestamp {found} is neither an offset nor -1"
            )))
        })
    }
}
