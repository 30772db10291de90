//! One local replica as the driver holds it: the partition's log, the sans-I/O replica node that
//! decides for it ([`ReplicaNode`]), and the I/O the node's effects started that is still under
//! way: the `acks=all` produces waiting for an answer and the follower task.
//!
//! All of it sits behind one lock, so a step and the application of its effects are one atomic
//! act: a completion is sent, a follower task cancelled or a high watermark raised in the order
//! the node decided them, whichever task stepped it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::cluster::backoff::Backoff;
use crate::cluster::meta::PartitionId;
use crate::cluster::replication::leader::AcksAllError;
use crate::cluster::replication::node::ReplicaNode;
use crate::cluster::{LeaderEpoch, NodeId};
use crate::storage::Partition;

/// An `acks=all` produce's answer.
pub(super) type Waiter = oneshot::Sender<Result<(), AcksAllError>>;

/// A running follower task.
#[derive(Debug)]
pub(super) struct FollowTask {
    /// The node's generation of the follower it carries out.
    pub generation: u64,
    /// The leader followed.
    pub leader: NodeId,
    /// In this leader epoch.
    pub leader_epoch: LeaderEpoch,
    /// Stops the task.
    pub cancel: CancellationToken,
}

/// What the lock of a [`Replica`] guards.
#[derive(Debug)]
pub(super) struct ReplicaShell {
    /// The decisions.
    pub node: ReplicaNode,
    /// `acks=all` produces waiting, by the id given to the node.
    pub waiters: HashMap<u64, Waiter>,
    /// The follower task, while one runs.
    pub following: Option<FollowTask>,
    /// The leader and epoch the last follower task followed: a task started again for the same
    /// pair (its leader refused it, and the node tries again after a pause) logs at debug, so
    /// a broker in that state does not log a line per partition per pause.
    pub last_followed: Option<(NodeId, LeaderEpoch)>,
    /// The wait before a follower task started again for the same leader and epoch begins
    /// (`follower_task::FOLLOWER_RESTART_BASE`, `_CAP`): reset by a follower that fetched, or by
    /// a new leader or epoch. A leader that keeps refusing (it lost its registration while etcd
    /// is gone) is then asked less and less often, not every restart pause.
    pub follower_restarts: Backoff,
    /// A re-read of the partition state from the store is under way: the node's further
    /// requests for one are covered by it (at most one per replica, however often a refused
    /// follower asks while etcd does not answer).
    pub reread_pending: bool,
    /// The replica was stopped (moved away, deleted, shut down): late answers of its I/O are
    /// not stepped into the node any more.
    pub stopped: bool,
}

/// One local replica. See the module docs.
#[derive(Debug)]
pub(crate) struct Replica {
    pub(super) id: PartitionId,
    pub(super) partition: Arc<Partition>,
    shell: Mutex<ReplicaShell>,
}

impl Replica {
    pub(super) fn new(id: PartitionId, partition: Arc<Partition>, node: ReplicaNode) -> Self {
        Self {
            id,
            partition,
            shell: Mutex::new(ReplicaShell {
                node,
                waiters: HashMap::new(),
                following: None,
                last_followed: None,
                follower_restarts: super::follower_task::restart_backoff(),
                reread_pending: false,
                stopped: false,
            }),
        }
    }

    pub(super) fn shell(&self) -> MutexGuard<'_, ReplicaShell> {
        self.shell.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ReplicaShell {
    /// Answers every waiter left (its write's outcome is unknown) and cancels the follower
    /// task: what stopping a replica leaves behind once the node has stopped.
    pub fn release(&mut self) {
        self.stopped = true;
        for (_, waiter) in self.waiters.drain() {
            let _ = waiter.send(Err(AcksAllError::Deposed));
        }
        if let Some(following) = self.following.take() {
            following.cancel.cancel();
        }
    }
}
