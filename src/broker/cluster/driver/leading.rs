//! The role a broker plays for one local replica, and what each role holds: a leader its engine
//! and the `acks=all` produces waiting for the high watermark, a follower its fetch task.

use std::collections::HashMap;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::cluster::replication::leader::{AcksAllError, Leader, LeaderStart, LeaderStartError};
use crate::cluster::replication::ReplicationConfig;
use crate::cluster::{LeaderEpoch, NodeId};

/// An `acks=all` produce's answer.
pub(super) type Waiter = oneshot::Sender<Result<(), AcksAllError>>;

/// Leading one partition in one epoch.
#[derive(Debug)]
pub(crate) struct Leading {
    /// The replication engine's leader side.
    pub engine: Leader,
    /// `acks=all` produces waiting, by the id given to the engine.
    pub waiters: HashMap<u64, Waiter>,
}

impl Leading {
    /// Starts leading from `start` (after the log installed the epoch).
    pub fn start(
        node_id: NodeId,
        config: ReplicationConfig,
        start: LeaderStart,
    ) -> Result<Self, LeaderStartError> {
        Ok(Self {
            engine: Leader::new(node_id, config, start)?,
            waiters: HashMap::new(),
        })
    }
}

/// A running follower task.
#[derive(Debug)]
pub(crate) struct Following {
    /// The leader followed.
    pub leader: NodeId,
    /// In this leader epoch.
    pub leader_epoch: LeaderEpoch,
    /// Stops the task.
    pub cancel: CancellationToken,
    /// The task.
    pub task: tokio::task::JoinHandle<()>,
}

impl Following {
    /// Whether the task ended by itself (it wants the partition state read again).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

/// What this broker does for a local replica.
#[derive(Debug, Default)]
pub(crate) enum Role {
    /// Nothing yet (or no longer): waiting for the state to name a leader, or for an election.
    #[default]
    Idle,
    /// Leading.
    Leader(Box<Leading>),
    /// Following.
    Follower(Following),
}

impl Role {
    /// Stops whatever runs: a leader's waiters fail as deposed (their writes' outcome is
    /// unknown), a follower task is cancelled. The role becomes `Idle`.
    pub fn stop(&mut self) {
        match std::mem::take(self) {
            Role::Leader(mut leading) => {
                let _ = leading.engine.depose_now();
                for (_, waiter) in leading.waiters.drain() {
                    let _ = waiter.send(Err(AcksAllError::Deposed));
                }
            }
            Role::Follower(following) => {
                following.cancel.cancel();
            }
            Role::Idle => {}
        }
    }

    /// The epoch this broker leads in, if it leads and was not deposed.
    pub fn leading_epoch(&self) -> Option<LeaderEpoch> {
        match self {
            Role::Leader(leading) if !leading.engine.is_deposed() => Some(leading.engine.epoch()),
            _ => None,
        }
    }

    /// Whether this broker leads and may act at `now_ms`.
    pub fn is_leading(&self, now_ms: u64) -> bool {
        matches!(self, Role::Leader(leading) if leading.engine.can_acknowledge(now_ms))
    }
}
