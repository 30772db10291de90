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

/// `Ok` when `current_leader_epoch` (-1: none) matches the partition's leader epoch as this
/// broker sees it; `FENCED_LEADER_EPOCH` when the client's is older, `UNKNOWN_LEADER_EPOCH`
/// when it is newer (this broker has not seen that epoch yet).
pub fn check(
    service: &BrokerService,
    topic: &str,
    partition: u32,
    current_leader_epoch: i32,
) -> Result<(), ResponseError> {
    let replicas = service.replica_manager();
    if current_leader_epoch < 0 || !replicas.is_cluster() {
        return Ok(());
    }
    let known = replicas.partition_state(topic, partition).leader_epoch;
    match (current_leader_epoch as u32).cmp(&known) {
        Ordering::Less => Err(ResponseError::FencedLeaderEpoch),
        Ordering::Greater => Err(ResponseError::UnknownLeaderEpoch),
        Ordering::Equal => Ok(()),
    }
}

/// The leader epoch answers show for a partition: the cluster's, or -1 standalone (as Metadata
/// shows it).
pub fn shown(service: &BrokerService, topic: &str, partition: u32) -> i32 {
    let replicas = service.replica_manager();
    if !replicas.is_cluster() {
        return -1;
    }
    i32::try_from(replicas.partition_state(topic, partition).leader_epoch).unwrap_or(i32::MAX)
}
