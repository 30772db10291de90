//! Whether and when a broker proposes itself as a partition's leader.
//!
//! Only a live member of the ISR may become leader (no unclean election: a record committed by
//! the old leader is on every ISR member, and on no one else for sure). When the leader named in
//! the partition state has no live registration, the live ISR members in replica order try one
//! after another: the first at once, the one at position `p` after `p * election_backoff_ms`
//! (in case the first is paused and cannot use its turn). All of them propose the same shape of
//! state against the revision they read, `{leader: self, leader_epoch + 1, isr: isr without the
//! dead leader}`, and the store's compare-and-swap lets exactly one win. A broker named leader
//! that is not leading in that epoch (it restarted, or deposed itself when its registration
//! lapsed) re-elects itself with a new epoch, so that nothing it acknowledged before can be
//! confused with what it acknowledges now.

use super::{LiveBrokers, Proposal};
use crate::cluster::{LeaderEpoch, NodeId, PartitionState, Versioned};

/// What the elector decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElectionDecision {
    /// Nothing to do (the leader is alive, or this broker may not stand).
    Nothing,
    /// Not this broker's turn yet: decide again at `until_ms` (with the state then read).
    Wait {
        /// When the turn comes.
        until_ms: u64,
    },
    /// Propose this state by compare-and-swap.
    Propose(Proposal),
}

/// One broker's elector for one partition. It remembers when it first saw the current
/// leaderless state, to count its back-off from there.
#[derive(Debug, Clone)]
pub struct Elector {
    node_id: NodeId,
    backoff_ms: u64,
    noticed: Option<(i64, u64)>,
}

impl Elector {
    /// An elector for broker `node_id`, waiting `backoff_ms` per position in the candidate order.
    pub fn new(node_id: NodeId, backoff_ms: u64) -> Self {
        Elector {
            node_id,
            backoff_ms,
            noticed: None,
        }
    }

    /// Decides at `now_ms`, from the partition state and registrations as last read. `leading`
    /// is the epoch this broker leads the partition in, if it does; `registered` whether its own
    /// registration is valid by its own clock (a broker that cannot prove it is registered does
    /// not stand).
    pub fn decide(
        &mut self,
        now_ms: u64,
        state: &Versioned<PartitionState>,
        live: &LiveBrokers,
        leading: Option<LeaderEpoch>,
        registered: bool,
    ) -> ElectionDecision {
        let partition = &state.value;
        let me = self.node_id;
        let me_live = registered && live.contains_key(&me);
        if partition.leader == Some(me) {
            self.noticed = None;
            if leading == Some(partition.leader_epoch) || !me_live || !partition.isr.contains(&me) {
                return ElectionDecision::Nothing;
            }
            return ElectionDecision::Propose(self.proposal(state, partition.isr.clone()));
        }
        let leader_alive = partition
            .leader
            .is_some_and(|leader| live.contains_key(&leader));
        if leader_alive || !me_live {
            self.noticed = None;
            return ElectionDecision::Nothing;
        }
        let isr: Vec<NodeId> = partition
            .isr
            .iter()
            .copied()
            .filter(|node| Some(*node) != partition.leader)
            .collect();
        let candidates = partition
            .replicas
            .iter()
            .filter(|node| isr.contains(node) && live.contains_key(node));
        let Some(position) = candidates.clone().position(|node| *node == me) else {
            self.noticed = None;
            return ElectionDecision::Nothing;
        };
        let since_ms = match self.noticed {
            Some((revision, since_ms)) if revision == state.revision => since_ms,
            _ => {
                self.noticed = Some((state.revision, now_ms));
                now_ms
            }
        };
        let turn_ms = since_ms.saturating_add(self.backoff_ms.saturating_mul(position as u64));
        if now_ms < turn_ms {
            return ElectionDecision::Wait { until_ms: turn_ms };
        }
        ElectionDecision::Propose(self.proposal(state, isr))
    }

    fn proposal(&self, state: &Versioned<PartitionState>, isr: Vec<NodeId>) -> Proposal {
        let mut next = state.value.clone();
        next.leader = Some(self.node_id);
        next.leader_epoch = next.leader_epoch.saturating_add(1);
        next.isr = isr;
        Proposal {
            expected_revision: state.revision,
            state: next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(leader: Option<NodeId>, isr: Vec<NodeId>) -> Versioned<PartitionState> {
        Versioned {
            value: PartitionState {
                replicas: vec![2, 0, 1],
                leader,
                leader_epoch: 4,
                isr,
                min_insync: 2,
            },
            revision: 9,
        }
    }

    /// With the leader's registration gone, the first live ISR member in replica order proposes
    /// at once, the next after one back-off; a replica outside the ISR never stands.
    #[test]
    fn the_first_live_isr_member_in_replica_order_proposes_first() {
        let state = state(Some(2), vec![2, 1, 0]);
        let live: LiveBrokers = [(0, 1), (1, 1)].into_iter().collect();
        let mut first = Elector::new(0, 100);
        let ElectionDecision::Propose(proposal) = first.decide(50, &state, &live, None, true)
        else {
            panic!("broker 0 is first among the live ISR");
        };
        assert_eq!(proposal.expected_revision, 9);
        assert_eq!(proposal.state.leader, Some(0));
        assert_eq!(proposal.state.leader_epoch, 5);
        assert_eq!(proposal.state.isr, vec![1, 0]);
        let mut second = Elector::new(1, 100);
        assert_eq!(
            second.decide(50, &state, &live, None, true),
            ElectionDecision::Wait { until_ms: 150 }
        );
        assert!(matches!(
            second.decide(150, &state, &live, None, true),
            ElectionDecision::Propose(_)
        ));
        let outside = state_without(1);
        assert_eq!(
            Elector::new(1, 100).decide(50, &outside, &live, None, true),
            ElectionDecision::Nothing
        );
    }

    fn state_without(node: NodeId) -> Versioned<PartitionState> {
        state(
            Some(2),
            vec![2, 0, 1].into_iter().filter(|n| *n != node).collect(),
        )
    }

    /// A live leader is left alone; a broker named leader that does not lead re-elects itself
    /// with a new epoch; an unregistered broker never stands.
    #[test]
    fn live_leaders_stay_and_a_named_leader_not_leading_bumps_the_epoch() {
        let live: LiveBrokers = [(0, 1), (1, 1), (2, 1)].into_iter().collect();
        let alive = state(Some(2), vec![2, 0, 1]);
        assert_eq!(
            Elector::new(0, 100).decide(0, &alive, &live, None, true),
            ElectionDecision::Nothing
        );
        let mut named = Elector::new(2, 100);
        assert_eq!(
            named.decide(0, &alive, &live, Some(4), true),
            ElectionDecision::Nothing
        );
        let ElectionDecision::Propose(bump) = named.decide(0, &alive, &live, None, true) else {
            panic!("named but not leading");
        };
        assert_eq!((bump.state.leader, bump.state.leader_epoch), (Some(2), 5));
        assert_eq!(
            named.decide(0, &alive, &live, None, false),
            ElectionDecision::Nothing
        );
    }
}
