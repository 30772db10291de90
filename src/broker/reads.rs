//! The read path: every read of a partition, for every listener, through one leader rule and
//! one long poll.
//!
//! Why one place: "reads go to the leader" used to be copied into each read method, and the
//! timestamp reads had skipped it, so a ListOffsets by timestamp sent to a follower answered
//! from the follower's copy instead of `NOT_LEADER`. Here [`ReadPath::leader_partition`] is the
//! only way a read reaches a partition, and [`ReadPath::long_poll`] the only wait for data.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::cluster::ReplicaManager;
use super::shutdown::ShutdownSignal;
use super::{blocking, Broker, BrokerError, Topic};
use crate::protocol::CommittedRead;
use crate::storage::producer_state::ActiveProducer;
use crate::storage::{AbortedTransaction, OpenTransaction, Partition, ReadResult};

/// A read, waiting up to `max_wait` for data at `offset` to exist.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// First offset wanted.
    pub offset: u64,
    /// Most bytes returned (at least one whole batch is returned if any is there).
    pub max_bytes: usize,
    /// Longest to wait when nothing at `offset` is visible yet (already clamped by the listener).
    pub max_wait: Duration,
}

/// Where a partition's log starts and ends, and its current epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// First offset still kept.
    pub earliest: u64,
    /// The high watermark: the next offset to be written and made visible.
    pub latest: u64,
    /// The epoch the fence enforces.
    pub epoch: u64,
}

/// What one look at a partition found: enough to answer now, or not yet (the answer to give if
/// the wait ends first).
enum Look<T> {
    Ready(T),
    NotYet(T),
}

/// Reads of this broker's partitions, served only where this broker may serve them.
#[derive(Debug, Clone)]
pub struct ReadPath {
    broker: Arc<Broker>,
    replicas: ReplicaManager,
    shutdown: ShutdownSignal,
}

impl ReadPath {
    /// Reads of `broker`'s partitions, with leadership as `replicas` says, and long polls that
    /// end when `shutdown` is signalled.
    pub fn new(broker: Arc<Broker>, replicas: ReplicaManager, shutdown: ShutdownSignal) -> Self {
        Self {
            broker,
            replicas,
            shutdown,
        }
    }

    /// The one leader rule of every read: the partition, if this broker may serve reads,
    /// offsets and leases of it now; else who does (`NOT_LEADER`, `LEADER_NOT_AVAILABLE`).
    pub fn leader_partition(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Arc<Partition>, BrokerError> {
        self.replicas.require_leader(topic, partition)?;
        self.broker.partition(topic, partition)
    }

    /// The one long poll: looks at `targets` with `look` until it has an answer, or none of
    /// their high watermarks moves for `max_wait`, or the broker begins to stop; then looks
    /// once more and answers with what there is.
    async fn long_poll<T>(
        &self,
        targets: &[&Partition],
        max_wait: Duration,
        mut look: impl FnMut() -> Result<Look<T>, BrokerError>,
    ) -> Result<T, BrokerError> {
        // The common case answers at once: no subscription, no allocation.
        if let Look::Ready(answer) = look()? {
            return Ok(answer);
        }
        // Subscribed before the next look, so a change between that look and the wait is seen.
        let mut changes: Vec<_> = targets.iter().map(|target| target.subscribe()).collect();
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            if let Look::Ready(answer) = look()? {
                return Ok(answer);
            }
            let changed = futures::future::select_all(
                changes
                    .iter_mut()
                    .map(|changes| Box::pin(changes.changed())),
            );
            let changed = tokio::select! {
                changed = tokio::time::timeout_at(deadline, changed) => changed,
                () = self.shutdown.stopped() => break,
            };
            if !matches!(changed, Ok((Ok(()), _, _))) {
                break;
            }
        }
        match look()? {
            Look::Ready(answer) | Look::NotYet(answer) => Ok(answer),
        }
    }

    /// Waits until the partitions of `wanted` (topic, partition, offset, most bytes of each)
    /// hold at least `min_bytes` visible bytes from their offsets together, or `max_wait`
    /// passes (Kafka's Fetch `min_bytes` and `max_wait_ms`): the same long poll as every read,
    /// over several partitions. Returns at once when a partition cannot be read here (not its
    /// leader, unknown): the answer that follows tells why.
    pub async fn wait_for_bytes(
        &self,
        wanted: &[(&str, u32, u64, usize)],
        min_bytes: usize,
        max_wait: Duration,
    ) {
        let mut targets = Vec::with_capacity(wanted.len());
        for &(topic, partition, offset, max_bytes) in wanted {
            let Ok(target) = self.leader_partition(topic, partition) else {
                return;
            };
            targets.push((target, offset, max_bytes.max(1)));
        }
        if targets.is_empty() {
            return;
        }
        let partitions: Vec<&Partition> = targets.iter().map(|(target, ..)| &**target).collect();
        let _ = self
            .long_poll(&partitions, max_wait, || {
                let mut available = 0usize;
                for (target, offset, max_bytes) in &targets {
                    let read = target.read(*offset, *max_bytes)?;
                    available += read.batches.iter().map(Bytes::len).sum::<usize>();
                }
                Ok(match available >= min_bytes {
                    true => Look::Ready(()),
                    false => Look::NotYet(()),
                })
            })
            .await;
    }

    /// Reads from `offset`; when nothing there is visible yet, waits (long poll) until the high
    /// watermark moves past it or `max_wait` passes, then answers with what there is. What it
    /// returns is counted as fetched.
    pub async fn fetch(&self, request: FetchRequest) -> Result<ReadResult, BrokerError> {
        let target = self.leader_partition(&request.topic, request.partition)?;
        let result = self
            .long_poll(&[&target], request.max_wait, || {
                let result = target.read(request.offset, request.max_bytes)?;
                Ok(
                    match !result.batches.is_empty() || request.offset < result.high_watermark {
                        true => Look::Ready(result),
                        false => Look::NotYet(result),
                    },
                )
            })
            .await?;
        target.metrics().fetched_batches(&result.batches);
        Ok(result)
    }

    /// [`ReadPath::fetch`] for a read_committed reader (the native Fetch version 1): the
    /// batches below the partition's last stable offset, without transaction markers and
    /// aborted transactions' batches, and where the reader goes on. Waits up to `max_wait` while
    /// nothing at `offset` is committed yet (an open transaction holds the last stable offset
    /// back), so a reader behind one does not spin.
    pub async fn fetch_committed(
        &self,
        request: FetchRequest,
    ) -> Result<(ReadResult, CommittedRead), BrokerError> {
        let target = self.leader_partition(&request.topic, request.partition)?;
        let (mut read, batches, committed) = self
            .long_poll(&[&target], request.max_wait, || {
                let last_stable = target.last_stable_offset();
                let mut read = target.read(request.offset, request.max_bytes)?;
                let aborted = target.aborted_transactions(request.offset, last_stable);
                let (batches, next): (Vec<Bytes>, _) = crate::storage::committed_batches(
                    std::mem::take(&mut read.batches),
                    last_stable,
                    &aborted,
                );
                let next_offset = next.unwrap_or(request.offset).max(request.offset);
                let ready = !batches.is_empty() || next_offset > request.offset;
                let answer = (
                    read,
                    batches,
                    CommittedRead {
                        last_stable_offset: last_stable,
                        next_offset,
                    },
                );
                Ok(match ready {
                    true => Look::Ready(answer),
                    false => Look::NotYet(answer),
                })
            })
            .await?;
        target.metrics().fetched_batches(&batches);
        read.batches = batches;
        Ok((read, committed))
    }

    /// Reads from `offset` at once, without waiting (see [`ReadPath::fetch`] for the long
    /// poll): listeners that wait on several partitions at a time read each with this.
    pub fn read_now(&self, request: FetchRequest) -> Result<ReadResult, BrokerError> {
        let target = self.leader_partition(&request.topic, request.partition)?;
        let result = target.read(request.offset, request.max_bytes)?;
        target.metrics().fetched_batches(&result.batches);
        Ok(result)
    }

    /// Where a partition's log starts and ends, and its epoch.
    pub fn list_offsets(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<PartitionOffsets, BrokerError> {
        let target = self.leader_partition(topic, partition)?;
        Ok(PartitionOffsets {
            earliest: target.log_start_offset(),
            latest: target.high_watermark(),
            epoch: target.current_epoch(),
        })
    }

    /// The first offset whose record timestamp is at or after `timestamp` (ms), among visible
    /// records; `None` if none is that recent.
    pub fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> Result<Option<u64>, BrokerError> {
        let target = self.leader_partition(topic, partition)?;
        Ok(target.offset_for_timestamp(timestamp)?)
    }

    /// [`ReadPath::offset_for_timestamp`] with the found record's own timestamp (what
    /// Kafka's ListOffsets answers): at least `timestamp`, read from the record's batch.
    pub fn record_for_timestamp(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> Result<Option<(u64, i64)>, BrokerError> {
        let target = self.leader_partition(topic, partition)?;
        let Some(offset) = target.offset_for_timestamp(timestamp)? else {
            return Ok(None);
        };
        let read = target.read(offset, 1)?;
        let found = read
            .batches
            .first()
            .and_then(|batch| crate::batch::decode_batch(batch).ok())
            .and_then(|records| records.into_iter().find(|record| record.offset == offset))
            .map_or(timestamp, |record| record.timestamp.max(timestamp));
        Ok(Some((offset, found)))
    }

    /// The first visible offset holding `topic/partition`'s largest record timestamp, with that
    /// timestamp (Kafka's ListOffsets max timestamp); `None` if no record is visible.
    pub fn record_of_max_timestamp(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Option<(u64, i64)>, BrokerError> {
        Ok(self
            .leader_partition(topic, partition)?
            .offset_of_max_timestamp()?)
    }

    /// Deletes `topic/partition`'s records below `offset`
    /// ([`DELETE_UP_TO_HIGH_WATERMARK`](crate::domain::DELETE_UP_TO_HIGH_WATERMARK): below the
    /// high watermark) and returns the new low watermark (the log start). Only the partition's
    /// leader accepts it (else `NotLeader`); an offset past the high watermark is out of range
    /// and changes nothing; the log start never moves back. The answer comes once the new log
    /// start is durable on this broker; followers adopt it from their next fetch (see
    /// `docs/replication.md`). Off the async workers: it fsyncs and deletes files.
    pub async fn delete_records(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
    ) -> Result<u64, BrokerError> {
        let target = self.leader_partition(topic, partition)?;
        blocking(move || {
            let offset = match offset {
                crate::domain::DELETE_UP_TO_HIGH_WATERMARK => target.high_watermark(),
                offset => offset,
            };
            Ok(target.delete_records_before(offset)?)
        })
        .await
    }

    /// The idempotent producers `topic/partition` remembers (Kafka's DescribeProducers): only
    /// its leader answers, as only the leader's state decides which retries land.
    pub fn active_producers(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Vec<ActiveProducer>, BrokerError> {
        Ok(self.leader_partition(topic, partition)?.active_producers())
    }

    /// A partition's last stable offset: what a read_committed reader may read up to (the high
    /// watermark when no transaction is open). Only the leader answers.
    pub fn last_stable_offset(&self, topic: &str, partition: u32) -> Result<u64, BrokerError> {
        Ok(self
            .leader_partition(topic, partition)?
            .last_stable_offset())
    }

    /// The aborted transactions whose records fall in `[from, to)` of a partition, for a
    /// read_committed reader to drop. Only the leader answers.
    pub fn aborted_transactions(
        &self,
        topic: &str,
        partition: u32,
        from: u64,
        to: u64,
    ) -> Result<Vec<AbortedTransaction>, BrokerError> {
        Ok(self
            .leader_partition(topic, partition)?
            .aborted_transactions(from, to))
    }

    /// The transactions open in a partition (DescribeProducers, DescribeTransactions). Only
    /// the leader answers.
    pub fn open_transactions(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Vec<OpenTransaction>, BrokerError> {
        Ok(self.leader_partition(topic, partition)?.open_transactions())
    }

    /// This broker's high watermark of `topic`/`partition`, whether it leads it or not (for
    /// metadata, which shows every replica's view; 0 for a partition that could not be opened).
    pub fn local_high_watermark(&self, topic: &str, partition: u32) -> u64 {
        self.broker
            .partition(topic, partition)
            .map_or(0, |target| target.high_watermark())
    }

    /// The named topics (all, sorted by name, when `names` is empty).
    pub fn metadata(&self, names: &[String]) -> Result<Vec<Arc<Topic>>, BrokerError> {
        if names.is_empty() {
            return Ok(self.broker.topics());
        }
        names.iter().map(|name| self.broker.topic(name)).collect()
    }

    /// Every topic this broker knows and its partition count (what consumer-protocol
    /// subscriptions resolve against).
    pub fn topic_partition_counts(&self) -> BTreeMap<String, u32> {
        self.broker
            .topics()
            .iter()
            .map(|topic| {
                let count = u32::try_from(topic.partitions().len()).unwrap_or(u32::MAX);
                (topic.name().to_owned(), count)
            })
            .collect()
    }
}
