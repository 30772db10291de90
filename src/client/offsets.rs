//! Committed offsets of consumer groups, from the client side: a group stores where it has read
//! up to in a partition ([`Client::commit_offset`]) and reads it back when it resumes
//! ([`Client::committed_offset`]), so consumers can stop and start without keeping offsets
//! themselves.
//!
//! Committed means *the offset of the next record to read*: after processing the record at
//! offset 41, commit 42. A commit is acknowledged once the server stored it durably.
//!
//! On a cluster a group's offsets live with its coordinator, the leader of the group's
//! partition of the offsets topic ([`OFFSETS_TOPIC`], chosen by the group id as Kafka chooses
//! it). The client sends group requests there once its metadata lists that topic, and to the
//! bootstrap broker before; a broker that does not coordinate the group answers `NOT_LEADER`
//! naming the coordinator, one that is still loading the group or creating the topic
//! `LEADER_NOT_AVAILABLE`, and the client refreshes its view and sends the request again
//! (a commit is safe to repeat: it sets the same position).

use tokio::time::Instant;

use super::retry::RetryDelay;
use super::routing::{self, MAX_ROUTING_ATTEMPTS};
use super::{Client, ClientError};
use crate::domain::{offsets_partition, OFFSETS_TOPIC};
use crate::protocol::{ErrorCode, ProtocolError, Request, Response};

/// A group's committed position in a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The offset of the next record the group will read.
    pub offset: u64,
    /// The text stored with the offset (empty if none).
    pub metadata: String,
}

impl Client {
    /// Stores `offset` (the next record to read) as `group`'s position in `topic/partition`,
    /// with `metadata` beside it (`""` for none). Returns once the server has it durably.
    ///
    /// Refused with `OFFSET_OUT_OF_RANGE` past the partition's high watermark, `INVALID_GROUP`
    /// for an empty or too long group name, `OFFSET_METADATA_TOO_LARGE`, `GROUP_LIMIT_REACHED`,
    /// `UNKNOWN_TOPIC` and `UNKNOWN_PARTITION` (all as [`ClientError::Server`]).
    ///
    /// ```
    /// use fencelog::client::Client;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = fencelog::testing::TestServer::start().await?;
    /// let client = Client::connect(server.addr()).await?;
    /// client.create_topic("events", 1, Default::default()).await?;
    /// assert_eq!(client.committed_offset("billing", "events", 0).await?, None);
    /// client.commit_offset("billing", "events", 0, 0, "started").await?;
    /// let committed = client.committed_offset("billing", "events", 0).await?.unwrap();
    /// assert_eq!((committed.offset, committed.metadata.as_str()), (0, "started"));
    /// # Ok(()) }
    /// ```
    pub async fn commit_offset(
        &self,
        group: &str,
        topic: &str,
        partition: u32,
        offset: u64,
        metadata: &str,
    ) -> Result<(), ClientError> {
        let response = self
            .call_group(
                group,
                Request::OffsetCommit {
                    group: group.to_owned(),
                    topic: topic.to_owned(),
                    partition,
                    offset,
                    metadata: metadata.to_owned(),
                },
            )
            .await?;
        match response {
            Response::OffsetCommit => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// `group`'s committed position in `topic/partition`, or `None` if it never committed one
    /// there.
    pub async fn committed_offset(
        &self,
        group: &str,
        topic: &str,
        partition: u32,
    ) -> Result<Option<CommittedOffset>, ClientError> {
        let response = self
            .call_group(
                group,
                Request::OffsetFetch {
                    group: group.to_owned(),
                    topic: topic.to_owned(),
                    partition,
                },
            )
            .await?;
        match response {
            Response::OffsetFetch { offset, metadata } => {
                Ok(offset.map(|offset| CommittedOffset { offset, metadata }))
            }
            other => Err(unexpected(&other)),
        }
    }
}

impl Client {
    /// Sends a request about `group` to its coordinator (see the module docs), within the
    /// request timeout.
    pub(super) async fn call_group(
        &self,
        group: &str,
        request: Request,
    ) -> Result<Response, ClientError> {
        let timeout = self.config().request_timeout;
        let deadline = Instant::now() + timeout;
        let mut delay = RetryDelay::new(self.config());
        let mut attempt = 0;
        loop {
            attempt += 1;
            let answer = match self.routing.partition_count(OFFSETS_TOPIC) {
                Some(partitions) => {
                    let partition = offsets_partition(group, partitions);
                    self.call_partition(
                        OFFSETS_TOPIC,
                        partition,
                        request.clone(),
                        routing::remaining(deadline),
                    )
                    .await
                }
                None => {
                    self.request(request.clone(), routing::remaining(deadline))
                        .await
                }
            };
            let coordinator_moved = matches!(
                answer.as_ref().err().and_then(ClientError::code),
                Some(ErrorCode::NotLeader | ErrorCode::LeaderNotAvailable)
            );
            if !coordinator_moved || attempt >= MAX_ROUTING_ATTEMPTS || !delay.wait(deadline).await
            {
                return answer;
            }
            self.routing.mark_stale();
            if let Err(error) = self.routing.refresh(deadline).await {
                tracing::debug!(%error, "metadata refresh failed while finding a group's coordinator");
            }
        }
    }
}

/// A response of another API than the request's cannot come from a correct server (responses
/// are decoded by the API of the request they answer).
fn unexpected(response: &Response) -> ClientError {
    ClientError::Protocol(ProtocolError::Malformed(format!(
        "unexpected {} response",
        response.api_key()
    )))
}
