//! The node's rules, one input at a time (the simulation checks them under faults).

use super::*;
use crate::cluster::replication::ReplicationConfig;
use crate::cluster::NodeId;

/// An empty log that installs whatever it is told.
struct EmptyLog;

impl ReplicaLog for EmptyLog {
    fn log_end_offset(&self) -> u64 {
        0
    }
    fn log_start_offset(&self) -> u64 {
        0
    }
    fn high_watermark(&self) -> u64 {
        0
    }
    fn durable_end_offset(&self) -> u64 {
        0
    }
    fn leader_epoch_floor(&self) -> LeaderEpoch {
        0
    }
    fn latest_epoch_entry(&self) -> Option<(LeaderEpoch, u64)> {
        None
    }
    fn end_offset_for_epoch(&self, _epoch: LeaderEpoch) -> Option<(LeaderEpoch, u64)> {
        None
    }
    fn become_leader(&self, _epoch: LeaderEpoch) -> Result<(), ReplicaLogError> {
        Ok(())
    }
    fn become_follower(&self, _epoch: LeaderEpoch) -> Result<(), ReplicaLogError> {
        Ok(())
    }
    fn append_replicated(
        &self,
        _batches: &[u8],
        _records_epoch: LeaderEpoch,
        _leader_epoch: LeaderEpoch,
    ) -> Result<u64, ReplicaLogError> {
        Ok(0)
    }
    fn truncate_to(&self, _offset: u64) -> Result<(), ReplicaLogError> {
        Ok(())
    }
    fn start_over_at(&self, _offset: u64) -> Result<(), ReplicaLogError> {
        Ok(())
    }
    fn advance_high_watermark(&self, _offset: u64) {}
}

const ME: NodeId = 1;
const TTL_MS: u64 = 6_000;

fn node() -> ReplicaNode {
    let mut node = ReplicaNode::new(ReplicaNodeConfig::new(ME, 7, ReplicationConfig::default()));
    let effects = node.step(
        0,
        &EmptyLog,
        Input::Registration {
            registration: 1,
            valid_until_ms: TTL_MS,
        },
    );
    assert!(effects.is_empty(), "{effects:?}");
    node
}

fn state(leader: NodeId, leader_epoch: LeaderEpoch, revision: i64) -> Versioned<PartitionState> {
    Versioned {
        value: PartitionState {
            replicas: vec![0, 1, 2],
            leader: Some(leader),
            leader_epoch,
            isr: vec![0, 1, 2],
            min_insync: 2,
        },
        revision,
    }
}

fn live() -> LiveBrokers {
    [(0, 10), (1, 7), (2, 12)].into_iter().collect()
}

fn view(node: &mut ReplicaNode, now: u64, state: Versioned<PartitionState>) -> Effects {
    node.step(
        now,
        &EmptyLog,
        Input::View {
            state,
            live: live(),
        },
    )
}

/// Leads `node` in epoch 1 (it is named in epoch 0 and re-elects itself).
fn lead(node: &mut ReplicaNode) {
    let effects = view(node, 1, state(ME, 0, 1));
    let [Effect::Propose {
        proposal,
        purpose: ProposalPurpose::Election,
    }] = effects.as_slice()
    else {
        panic!("{effects:?}");
    };
    assert_eq!(proposal.state.leader_epoch, 1);
    let won = Versioned {
        value: proposal.state.clone(),
        revision: 2,
    };
    let effects = node.step(
        2,
        &EmptyLog,
        Input::ElectionOutcome(ElectionOutcome::Won(won)),
    );
    assert_eq!(
        effects,
        vec![Effect::InstallLeaderEpoch { leader_epoch: 1 }]
    );
    assert!(node.is_electing());
    assert!(
        !node.is_leading(2),
        "nothing is served before the log installed the epoch"
    );
    let effects = node.step(
        3,
        &EmptyLog,
        Input::LeaderEpochInstalled {
            leader_epoch: 1,
            result: Ok(()),
        },
    );
    assert!(
        matches!(
            effects.as_slice(),
            [Effect::Leading {
                leader_epoch: 1,
                ..
            }]
        ),
        "{effects:?}"
    );
    assert!(node.is_leading(3));
}

/// A broker named leader that does not lead in that epoch re-elects itself with a new epoch, and
/// takes over only once its log installed it.
#[test]
fn a_named_leader_reelects_itself_and_leads_after_the_install() {
    let mut node = node();
    lead(&mut node);
    assert_eq!(node.leading_epoch(), Some(1));
}

/// A replica of a partition led by another broker follows it, starting by installing the epoch.
#[test]
fn an_idle_replica_follows_the_leader_named() {
    let mut node = node();
    let effects = view(&mut node, 1, state(0, 3, 5));
    assert_eq!(
        effects,
        vec![Effect::StartFollowing {
            generation: 1,
            leader: 0,
            leader_epoch: 3,
            first: FollowerAction::BecomeFollower { leader_epoch: 3 },
        }]
    );
    // The same view again changes nothing.
    assert!(view(&mut node, 2, state(0, 3, 5)).is_empty());
}

/// The finished-follower rule: a follower that asks for a re-read stops, the state is read
/// again, and a new follower starts only after the restart pause; a late result of the old one
/// is dropped.
#[test]
fn a_finished_follower_restarts_after_a_pause_and_its_late_results_are_dropped() {
    let mut node = node();
    view(&mut node, 1, state(0, 3, 5));
    let fenced = FollowerEvent::BecameFollower(Err(ReplicaLogError::Storage("disk".into())));
    let effects = node.step(
        10,
        &EmptyLog,
        Input::Follower {
            generation: 1,
            event: fenced,
        },
    );
    let until = 10 + DEFAULT_FOLLOWER_RESTART_PAUSE_MS;
    assert_eq!(
        effects,
        vec![
            Effect::StopFollowing {
                generation: 1,
                reason: StopReason::Finished
            },
            Effect::Reread,
            Effect::WakeAt(until),
        ]
    );
    assert_eq!(
        view(&mut node, 20, state(0, 3, 5)),
        vec![Effect::WakeAt(until)]
    );
    let effects = node.step(until, &EmptyLog, Input::Wake);
    assert!(
        matches!(
            effects.as_slice(),
            [Effect::StartFollowing { generation: 2, .. }]
        ),
        "{effects:?}"
    );
    let late = node.step(
        until + 1,
        &EmptyLog,
        Input::Follower {
            generation: 1,
            event: FollowerEvent::Retry,
        },
    );
    assert!(late.is_empty(), "{late:?}");
}

/// A state naming another leader deposes this one: its `acks=all` producers are answered with
/// an unknown outcome, the state is read again, and the replica follows the new leader.
#[test]
fn a_newer_leader_deposes_this_one_and_fails_its_waiters_as_unknown() {
    let mut node = node();
    lead(&mut node);
    let (checked, effects) = node.check_produce(4, true);
    assert_eq!(checked, Ok(1));
    assert!(effects.is_empty());
    let effects = node.await_commit(5, &EmptyLog, 42, 0);
    assert!(effects.is_empty(), "waits for the followers: {effects:?}");
    let effects = view(&mut node, 6, state(2, 2, 9));
    assert_eq!(
        effects[..3],
        [
            Effect::Complete(WaiterCompletion {
                id: 42,
                result: Err(AcksAllError::Deposed)
            }),
            Effect::Deposed { leader_epoch: 1 },
            Effect::Reread,
        ]
    );
    assert!(
        matches!(
            effects[3..],
            [Effect::StartFollowing {
                leader: 2,
                leader_epoch: 2,
                ..
            }]
        ),
        "{effects:?}"
    );
    assert!(!node.is_leading(6));
}

/// A leader whose registration lapsed by its own clock refuses produces as not leader, and a
/// renewal of another registration than the one it was elected under extends nothing.
#[test]
fn a_lapsed_registration_stops_the_leader() {
    let mut node = node();
    lead(&mut node);
    node.step(
        100,
        &EmptyLog,
        Input::Registration {
            registration: 2,
            valid_until_ms: 100 + TTL_MS * 10,
        },
    );
    let (checked, _) = node.check_produce(TTL_MS, true);
    assert_eq!(checked, Err(ProduceRefusal::NotLeader));
    assert!(!node.is_leading(TTL_MS));
}
