//! The `current_leader_epoch` check of Fetch, ListOffsets and OffsetForLeaderEpoch (KIP-320): a
//! client names the leader epoch its metadata showed, and a broker whose view differs says which
//! side is behind, so a consumer that missed a failover refreshes its metadata (and detects a
//! truncation) instead of reading from a deposed leader.
//!
//! Only in a cluster: standalone Metadata shows -1, and -1 ("no check") is what clients send
//! back. The comparison is the fence's own ([`epoch_standing`]), so a client's epoch is judged
//! by the rule the segment writer applies to a replicated append.

use kafka_protocol::ResponseError;

use crate::broker::BrokerService;
use crate::domain::LeaderEpoch;
use crate::storage::fence::{epoch_standing, EpochStanding};

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
    // Negative: the client asks for no check.
    let Ok(current_leader_epoch) = LeaderEpoch::try_from(current_leader_epoch) else {
        return Ok(());
    };
    match epoch_standing(current_leader_epoch, known) {
        EpochStanding::Stale => Err(ResponseError::FencedLeaderEpoch),
        EpochStanding::Current => Ok(()),
        EpochStanding::Ahead => Err(ResponseError::UnknownLeaderEpoch),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The fence's rule, in Kafka's codes: an older epoch is fenced, a newer one unknown, and
    /// no check standalone or when the client sends a negative epoch.
    #[test]
    fn a_clients_epoch_is_judged_by_the_fences_rule() {
        assert_eq!(check_known(Some(5), 5), Ok(()));
        assert_eq!(
            check_known(Some(5), 4),
            Err(ResponseError::FencedLeaderEpoch)
        );
        assert_eq!(
            check_known(Some(5), 6),
            Err(ResponseError::UnknownLeaderEpoch)
        );
        assert_eq!(check_known(Some(5), -1), Ok(()));
        assert_eq!(check_known(None, 3), Ok(()));
    }
}
