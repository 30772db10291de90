//! Writing group snapshots to a durable store (a standalone broker's `DATA/groups/`), in the
//! order the coordinator took them, with an answer for the writes someone waits on.
//!
//! The coordinator takes snapshots under its lock but must not block there, and a write
//! (fsync) blocks. Snapshots therefore go, in the order they were taken, into one bounded
//! queue that a single writer task drains (each write on the blocking pool). One writer keeps
//! an older snapshot of a group from overwriting a newer one; writes are rare (a generation
//! completing, members leaving), so their being one after another costs nothing.
//!
//! The leader's SyncGroup waits for its snapshot to be written before any member's SyncGroup
//! is answered (Kafka writes the group metadata record before it answers): once a member holds
//! its assignment, a restart keeps the generation that assignment belongs to.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::GroupSnapshot;

/// Most snapshots waiting to be written; past this a write is refused
/// ([`super::GroupError::StoreFailed`] for a sync, a warning for the others).
pub const MAX_PENDING_GROUP_WRITES: usize = 1024;

/// Where a coordinator keeps its groups durably. Blocking: called on the blocking pool.
pub trait GroupStore: Send + Sync {
    /// Stores `snapshot` as group `group_id`'s, replacing the previous one, durably before it
    /// returns; a snapshot without members removes the group. The error says what failed.
    fn save(&self, group_id: &str, snapshot: &GroupSnapshot) -> Result<(), String>;
}

/// The answer to one write: `Err` with what failed.
pub(super) type WriteDone = oneshot::Receiver<Result<(), String>>;

struct Write {
    group_id: String,
    snapshot: GroupSnapshot,
    done: oneshot::Sender<Result<(), String>>,
}

/// The sending end of the writer task (which ends when this is dropped).
pub(super) struct DurableWriter {
    queue: mpsc::Sender<Write>,
}

impl DurableWriter {
    /// Starts the writer task on the current runtime.
    pub(super) fn start(store: Arc<dyn GroupStore>) -> Self {
        let (queue, mut writes) = mpsc::channel::<Write>(MAX_PENDING_GROUP_WRITES);
        tokio::spawn(async move {
            while let Some(write) = writes.recv().await {
                let store = Arc::clone(&store);
                let Write {
                    group_id,
                    snapshot,
                    done,
                } = write;
                let result = tokio::task::spawn_blocking(move || {
                    let result = store.save(&group_id, &snapshot);
                    if let Err(reason) = &result {
                        tracing::warn!(group = %group_id, %reason, "group state not written");
                    }
                    result
                })
                .await
                .unwrap_or_else(|panicked| Err(format!("the write panicked: {panicked}")));
                // Nobody waiting (a leave, an expiry) is fine: the write happened anyway.
                let _ = done.send(result);
            }
        });
        Self { queue }
    }

    /// Queues `snapshot` (call it under the coordinator's lock, so the queue's order is the
    /// order the snapshots were taken in). Never blocks.
    pub(super) fn enqueue(&self, group_id: String, snapshot: GroupSnapshot) -> WriteDone {
        let (done, answered) = oneshot::channel();
        let write = Write {
            group_id,
            snapshot,
            done,
        };
        if let Err(refused) = self.queue.try_send(write) {
            let write = match refused {
                mpsc::error::TrySendError::Full(write)
                | mpsc::error::TrySendError::Closed(write) => write,
            };
            tracing::warn!(group = %write.group_id, "group state write queue full: not written");
            let _ = write.done.send(Err(format!(
                "{MAX_PENDING_GROUP_WRITES} group state writes are already waiting"
            )));
        }
        answered
    }
}
