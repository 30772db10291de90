//! A broker's refusal as the native error a client receives, with every detail section 4 of
//! `docs/protocol.md` promises for its code, on every API that can answer it.
//!
//! Most refusals carry their details themselves ([`to_error_response`]). Three do not, because
//! the layer that refused did not know them; the listener looks the missing part up from the
//! service as it answers, through the service's ordinary reads:
//!
//! - `OFFSET_OUT_OF_RANGE` of an `OffsetCommit` past the high watermark: the check names the
//!   offset and the high watermark it was judged against, not the log start (`earliest`);
//! - `NOT_LEADER` from a partition's storage (leadership moved between the service's check and
//!   the write): the storage knows the leader epoch it follows, not who leads; the cluster layer
//!   knows, for the partition the request names;
//! - `LEASE_HELD` of the transaction coordinator's lease (`super::transactions`): the
//!   coordinator keeps the holder and the time left, not the partition's epoch.
//!
//! When the lookup itself is refused (the partition was deleted, or moved to another leader, in
//! between) the answer is that refusal: it is as true, and it carries its own details.

use super::errors::{error_chain, to_error_response};
use crate::broker::cluster::ClusterError;
use crate::broker::{BrokerError, BrokerService};
use crate::protocol::{ErrorDetails, ErrorResponse, Request};

/// The wire error for `error`, its details complete. `partition` is the partition the request
/// was about (see [`led_partition`]), for a storage layer's `NOT_LEADER`.
pub(super) fn refusal(
    service: &BrokerService,
    partition: Option<(&str, u32)>,
    error: &BrokerError,
) -> ErrorResponse {
    if let BrokerError::CommitOutOfRange {
        topic,
        partition,
        offset,
        high_watermark,
    } = error
    {
        return commit_out_of_range(service, error, topic, *partition, *offset, *high_watermark);
    }
    let response = to_error_response(error);
    let names_no_leader = matches!(
        response.details,
        Some(ErrorDetails::NotLeader { leader: None, .. })
    );
    match partition {
        Some((topic, index)) if names_no_leader => {
            known_leader(service, topic, index).unwrap_or(response)
        }
        _ => response,
    }
}

/// The partition a request reads or writes directly, whose leader a storage layer's
/// `NOT_LEADER` is about. `None` for the rest: a group's requests are refused by its
/// coordinator's partition (`NOT_LEADER` naming it comes from the cluster layer, complete), and
/// the others name no single partition. Only asked on a cluster: a standalone broker leads
/// every partition, and the hot path does not copy topic names for nothing.
pub(super) fn led_partition(request: &Request) -> Option<(String, u32)> {
    match request {
        Request::Produce {
            topic, partition, ..
        }
        | Request::Fetch {
            topic, partition, ..
        }
        | Request::ListOffsets {
            topic, partition, ..
        }
        | Request::AcquireLease {
            topic, partition, ..
        }
        | Request::RenewLease {
            topic, partition, ..
        }
        | Request::ReleaseLease {
            topic, partition, ..
        }
        | Request::DeleteRecords {
            topic, partition, ..
        } => Some((topic.clone(), *partition)),
        _ => None,
    }
}

/// `LEASE_HELD` for a lease `holder` holds on `topic`/`partition` for another `expires_in_ms`,
/// with the partition's current epoch (the live lease's) looked up.
pub(super) fn lease_held(
    service: &BrokerService,
    message: String,
    topic: &str,
    partition: u32,
    holder: &str,
    expires_in_ms: u64,
) -> ErrorResponse {
    match service.reads().list_offsets(topic, partition) {
        Ok(offsets) => ErrorResponse::lease_held(message, offsets.epoch, holder, expires_in_ms),
        Err(lookup) => to_error_response(&lookup),
    }
}

/// `OFFSET_OUT_OF_RANGE` for a commit of `offset` past `high_watermark`: the range is the
/// partition's log start now (never above the high watermark the commit was judged against, so
/// the range stays a range) up to that high watermark, which `offset` is past.
fn commit_out_of_range(
    service: &BrokerService,
    error: &BrokerError,
    topic: &str,
    partition: u32,
    offset: u64,
    high_watermark: u64,
) -> ErrorResponse {
    match service.reads().list_offsets(topic, partition) {
        Ok(offsets) => ErrorResponse::offset_out_of_range(
            error_chain(error),
            offset,
            offsets.earliest.min(high_watermark),
            high_watermark,
        ),
        Err(lookup) => to_error_response(&lookup),
    }
}

/// `NOT_LEADER` naming the leader the cluster layer knows for `topic`/`partition`; `None` when
/// it says this broker leads (again), and the storage's answer stands.
fn known_leader(service: &BrokerService, topic: &str, partition: u32) -> Option<ErrorResponse> {
    match service.replica_manager().require_leader(topic, partition) {
        Err(refused @ BrokerError::Cluster(ClusterError::NotLeader { .. })) => {
            Some(to_error_response(&refused))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::broker::{Broker, CommittedOffset};
    use crate::domain::TopicConfig;
    use crate::protocol::ErrorCode;
    use crate::storage::StorageError;

    async fn service(directory: &std::path::Path) -> Arc<BrokerService> {
        let broker = Arc::new(Broker::open(directory).unwrap());
        let service = BrokerService::standalone(
            broker,
            &crate::broker::BrokerConfig::default(),
            Arc::new(crate::clock::SystemClock),
        )
        .await
        .unwrap();
        service
            .topics()
            .create_topic("orders".into(), 1, TopicConfig::default(), None)
            .await
            .unwrap();
        service
    }

    /// A commit past the high watermark answers the offset, the log start and the high
    /// watermark, though the broker's refusal knew only the two of them.
    #[tokio::test]
    async fn a_commit_past_the_high_watermark_gets_the_whole_range() {
        let directory = tempfile::tempdir().unwrap();
        let service = service(directory.path()).await;
        let refused = service
            .groups()
            .commit_offset(
                "billing".into(),
                "orders".into(),
                0,
                CommittedOffset {
                    offset: 7,
                    metadata: String::new(),
                },
            )
            .await
            .unwrap_err();
        assert!(matches!(refused, BrokerError::CommitOutOfRange { .. }));
        assert_eq!(to_error_response(&refused).details, None);
        let answered = refusal(&service, None, &refused);
        assert_eq!(answered.code, ErrorCode::OffsetOutOfRange);
        assert_eq!(
            answered.details,
            Some(ErrorDetails::OffsetOutOfRange {
                offset: 7,
                earliest: 0,
                latest: 0,
            })
        );
    }

    /// A storage layer's `NOT_LEADER` names no leader but its leader epoch; a standalone
    /// broker, which leads every partition, leaves it so.
    #[tokio::test]
    async fn a_storage_not_leader_has_its_details_without_a_leader() {
        let directory = tempfile::tempdir().unwrap();
        let service = service(directory.path()).await;
        let refused = BrokerError::Storage(StorageError::NotLeader { leader_epoch: 4 });
        let answered = refusal(&service, Some(("orders", 0)), &refused);
        assert_eq!(answered.code, ErrorCode::NotLeader);
        assert_eq!(
            answered.details,
            Some(ErrorDetails::NotLeader {
                leader: None,
                address: String::new(),
                leader_epoch: 4,
            })
        );
    }

    /// The coordinator's `LEASE_HELD` gets the partition's epoch; a partition that is gone is
    /// answered as gone.
    #[tokio::test]
    async fn a_transaction_lease_held_gets_the_partition_epoch() {
        let directory = tempfile::tempdir().unwrap();
        let service = service(directory.path()).await;
        let grant = service
            .leases()
            .acquire("orders", 0, "writer-1".into(), 10_000)
            .await
            .unwrap();
        let answered = lease_held(&service, "held".into(), "orders", 0, "writer-1", 9_000);
        assert_eq!(
            (answered.code, answered.current_epoch),
            (ErrorCode::LeaseHeld, grant.epoch)
        );
        assert_eq!(
            answered.details,
            Some(ErrorDetails::LeaseHeld {
                holder: "writer-1".into(),
                expires_in_ms: 9_000,
            })
        );
        let gone = lease_held(&service, "held".into(), "nowhere", 0, "writer-1", 9_000);
        assert_eq!(gone.code, ErrorCode::UnknownTopic);
    }
}
