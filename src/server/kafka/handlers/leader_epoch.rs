//! The `current_leader_epoch` check of Fetch, ListOffsets and OffsetForLeaderEpoch (KIP-320): a
//! client names the leader epoch its metadata showed, and a broker whose view differs says which
//! side is behind, so a consumer that missed a failover refreshes its metadata (and detects a
//! truncation) instead of reading from a deposed leader.
//!
//! Only in a cluster: standalone Metadata shows -1, and -1 ("no check") is what clients send
//! back.

use std::cmp::Ordering;

use kafka_protocol::ResponseError;

use crate::broker::BrokerService;
use crate::domain::LeaderEpoch;

/// The partition's leader epoch as this broker sees it: `None` standalone (no leadership to
/// check; answers show -1).
pub fn known(service: &BrokerService, topic: &str, partition: u32) -> Option<LeaderEpoch> {
    let replicas = service.replica_manager();
    replicas
        .is_cluster()
        .then(|| replicas.partition_state(topic, partition).leader_epoch)
}

/// `Ok` when `current_leader_epoch` (-1: none) matches `known`; `FENCED_LEADER_EPOCH` when the
/// client's is older, `UNKNOWN_LEADER_EPOCH` when it is newer (this broker has not seen that
/// epoch yet).
pub fn check_known(
    known: Option<LeaderEpoch>,
    current_leader_epoch: i32,
) -> Result<(), ResponseError> {
    let Some(known) = known else {
        return Ok(());
    };
    if current_leader_epoch < 0 {
        return Ok(());
    }
    match (current_leader_epoch as u32).cmp(&known) {
        Ordering::Less => Err(ResponseError::FencedLeaderEpoch),
        Ordering::Greater => Err(ResponseError::UnknownLeaderEpoch),
        Ordering::Equal => Ok(()),
    }
}

/// [`check_known`] against the partition's epoch read now.
pub fn check(
    service: &BrokerService,
    topic: &str,
    partition: u32,
    current_leader_epoch: i32,
) -> Result<(), ResponseError> {
    if current_leader_epoch < 0 {
        return Ok(());
    }
    check_known(known(service, topic, partition), current_leader_epoch)
}

/// The leader epoch answers show: `known`, or -1 standalone (as Metadata shows it).
pub fn shown(known: Option<LeaderEpoch>) -> i32 {
    known.map_or(-1, |epoch| i32::try_from(epoch).unwrap_or(i32::MAX))
}
