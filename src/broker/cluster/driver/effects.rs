//! Carrying out what a replica's node decided ([`Effect`]): the compare-and-swaps and re-reads
//! against the metadata store, taking over the log in a won epoch, the follower task, the high
//! watermark and the answers to waiting `acks=all` producers. Whatever comes back (a store's
//! answer, the log's) is stepped into the node as its next input.
//!
//! Effects are applied under the replica's lock, in the order the node returned them; what takes
//! I/O is spawned, so the lock is never held across an await.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};

use super::replica::{FollowTask, Replica, ReplicaShell};
use super::{follower_task, ClusterDriver};
use crate::cluster::backoff::Backoff;
use crate::cluster::meta::MetaError;
use crate::cluster::replica_log::{ReplicaLog, ReplicaLogError};
use crate::cluster::replication::follower::FollowerAction;
use crate::cluster::replication::node::{
    Effect, Effects, ElectionOutcome, FollowerEvent, Input, ProposalPurpose,
};
use crate::cluster::replication::{CasOutcome, Proposal};
use crate::cluster::LeaderEpoch;

/// How long an ISR compare-and-swap may take before its outcome counts as unknown.
const ISR_CHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// First wait before a partition state read that etcd did not answer is tried again: a blip
/// (an etcd leader change) is over in about this long.
pub(super) const REREAD_RETRY_BASE: Duration = Duration::from_millis(100);

/// Longest wait between two tries of one replica's re-read. Long, because a broker runs one
/// such loop per replica it holds while etcd is gone (44 partitions at this cap: about 6 reads
/// a second in all), and because nothing waits on it alone: once etcd is back the watch
/// (re-opened within `WATCH_RETRY_MAX`) delivers every state, which each tick steps into the
/// node.
pub(super) const REREAD_RETRY_CAP: Duration = Duration::from_secs(10);

impl ClusterDriver {
    /// Steps `replica`'s node with `input` now and carries out its effects.
    pub(super) fn step(self: &Arc<Self>, replica: &Arc<Replica>, input: Input) {
        self.step_each(replica, [input]);
    }

    /// Steps `replica`'s node with each of `inputs` in turn, carrying out each one's effects
    /// before the next, under one acquisition of the replica's lock (the loop's tick).
    pub(super) fn step_each(
        self: &Arc<Self>,
        replica: &Arc<Replica>,
        inputs: impl IntoIterator<Item = Input>,
    ) {
        let now = self.now_ms();
        let mut shell = replica.shell();
        for input in inputs {
            if shell.stopped || self.stop.is_cancelled() {
                return;
            }
            let effects = shell.node.step(now, replica.partition.as_ref(), input);
            self.apply(replica, &mut shell, effects);
        }
    }

    /// Steps the follower of `generation` with the result of its last action; returns its next
    /// action, or `None` when that follower is no longer wanted (its task ends).
    pub(super) fn follower_step(
        self: &Arc<Self>,
        replica: &Arc<Replica>,
        generation: u64,
        event: FollowerEvent,
    ) -> Option<FollowerAction> {
        let now = self.now_ms();
        let fetched = matches!(event, FollowerEvent::Fetched(Ok(_)));
        let mut shell = replica.shell();
        if shell.stopped || self.stop.is_cancelled() {
            return None;
        }
        if fetched {
            // The leader serves this follower: a later restart is not a refusal that persists.
            shell.follower_restarts.reset();
        }
        let effects = shell.node.step(
            now,
            replica.partition.as_ref(),
            Input::Follower { generation, event },
        );
        let mut next = None;
        let mut rest = Effects::with_capacity(effects.len());
        for effect in effects {
            match effect {
                Effect::FollowerStep {
                    generation: step_generation,
                    action,
                } if step_generation == generation => next = Some(action),
                effect => rest.push(effect),
            }
        }
        self.apply(replica, &mut shell, rest);
        next
    }

    /// Stops a replica this broker no longer holds (or is shutting down).
    pub(super) fn stop_replica(self: &Arc<Self>, replica: &Arc<Replica>) {
        let mut shell = replica.shell();
        let effects = shell.node.stop();
        self.apply(replica, &mut shell, effects);
        shell.release();
    }

    /// Carries out `effects` for `replica` (see the module docs).
    pub(super) fn apply(
        self: &Arc<Self>,
        replica: &Arc<Replica>,
        shell: &mut ReplicaShell,
        effects: Effects,
    ) {
        for effect in effects {
            match effect {
                Effect::Propose {
                    proposal,
                    purpose: ProposalPurpose::Election,
                } => self.spawn_election(replica, proposal),
                Effect::Propose {
                    proposal,
                    purpose: ProposalPurpose::Isr { leader_epoch },
                } => self.spawn_isr_change(replica, leader_epoch, proposal),
                Effect::Reread => self.spawn_reread(replica, shell),
                Effect::InstallLeaderEpoch { leader_epoch } => {
                    self.spawn_take_over(replica, leader_epoch)
                }
                Effect::Leading {
                    leader_epoch,
                    from_offset,
                    high_watermark,
                } => info!(
                    partition = %replica.id,
                    epoch = leader_epoch,
                    from_offset,
                    high_watermark,
                    "leading"
                ),
                Effect::Deposed { leader_epoch } => {
                    info!(partition = %replica.id, epoch = leader_epoch, "deposed: no longer leading");
                    self.wake.notify_one();
                }
                Effect::StartFollowing {
                    generation,
                    leader,
                    leader_epoch,
                    first,
                } => {
                    if let Some(old) = shell.following.take() {
                        old.cancel.cancel();
                    }
                    let announce = shell.last_followed != Some((leader, leader_epoch));
                    shell.last_followed = Some((leader, leader_epoch));
                    // Again for the same leader and epoch: it refused this follower (or the
                    // log refused a step), and will until the state changes.
                    let start_after = if announce {
                        shell.follower_restarts.reset();
                        Duration::ZERO
                    } else {
                        shell.follower_restarts.next_delay()
                    };
                    let cancel = follower_task::spawn(
                        Arc::clone(self),
                        Arc::clone(replica),
                        follower_task::Following {
                            generation,
                            leader,
                            leader_epoch,
                            announce,
                            start_after,
                        },
                        first,
                    );
                    shell.following = Some(FollowTask {
                        generation,
                        leader,
                        leader_epoch,
                        cancel,
                    });
                }
                Effect::FollowerStep { generation, action } => {
                    // Only a follower's own step returns one, and takes it (`follower_step`).
                    debug!(partition = %replica.id, generation, ?action, "follower step without its task");
                }
                Effect::StopFollowing { generation, reason } => {
                    if shell
                        .following
                        .as_ref()
                        .is_some_and(|task| task.generation == generation)
                    {
                        let task = shell.following.take().expect("checked above");
                        debug!(partition = %replica.id, leader = task.leader, epoch = task.leader_epoch, ?reason, "follower stops");
                        task.cancel.cancel();
                    }
                }
                Effect::AdvanceHighWatermark(high_watermark) => {
                    replica.partition.advance_high_watermark(high_watermark);
                }
                Effect::Complete(completion) => {
                    if let Some(waiter) = shell.waiters.remove(&completion.id) {
                        let _ = waiter.send(completion.result);
                    }
                }
                // The loop's tick steps every node often enough for an election turn or a
                // follower's restart pause.
                Effect::WakeAt(_) => {}
            }
        }
    }

    /// Proposes this broker as leader; the store's answer goes back to the node.
    fn spawn_election(self: &Arc<Self>, replica: &Arc<Replica>, proposal: Proposal) {
        let driver = Arc::clone(self);
        let replica = Arc::clone(replica);
        tokio::spawn(async move {
            let epoch = proposal.state.leader_epoch;
            info!(partition = %replica.id, epoch, "proposing this broker as leader");
            let result = driver
                .store
                .compare_and_swap_partition(
                    replica.id.clone(),
                    proposal.expected_revision,
                    proposal.state,
                )
                .await;
            let outcome = match result {
                Ok(versioned) => {
                    driver.observe_partition(&replica.id, &versioned);
                    ElectionOutcome::Won(versioned)
                }
                Err(MetaError::Conflict { current, .. }) => {
                    debug!(partition = %replica.id, "lost the election");
                    driver.observe_partition(&replica.id, &current);
                    ElectionOutcome::Lost {
                        current: Some(*current),
                    }
                }
                Err(error) => {
                    warn!(partition = %replica.id, %error, "election proposal failed");
                    ElectionOutcome::Unknown
                }
            };
            driver.step(&replica, Input::ElectionOutcome(outcome));
            driver.wake.notify_one();
        });
    }

    /// Takes over the log in the won epoch (durably, on the blocking pool: it syncs) and tells
    /// the node; nothing is served in the epoch before.
    fn spawn_take_over(self: &Arc<Self>, replica: &Arc<Replica>, leader_epoch: LeaderEpoch) {
        let driver = Arc::clone(self);
        let replica = Arc::clone(replica);
        tokio::spawn(async move {
            let partition = Arc::clone(&replica.partition);
            let result = tokio::task::spawn_blocking(move || {
                ReplicaLog::become_leader(partition.as_ref(), leader_epoch)
            })
            .await
            .unwrap_or_else(|error| Err(ReplicaLogError::Storage(error.to_string())));
            if let Err(error) = &result {
                warn!(partition = %replica.id, epoch = leader_epoch, %error, "cannot take over as leader");
            }
            driver.step(
                &replica,
                Input::LeaderEpochInstalled {
                    leader_epoch,
                    result,
                },
            );
        });
    }

    /// Sends an ISR change by compare-and-swap and tells the node what became of it.
    fn spawn_isr_change(
        self: &Arc<Self>,
        replica: &Arc<Replica>,
        leader_epoch: LeaderEpoch,
        proposal: Proposal,
    ) {
        let driver = Arc::clone(self);
        let replica = Arc::clone(replica);
        info!(partition = %replica.id, isr = ?proposal.state.isr, "proposing an ISR change");
        tokio::spawn(async move {
            let result = tokio::time::timeout(
                ISR_CHANGE_TIMEOUT,
                driver.store.compare_and_swap_partition(
                    replica.id.clone(),
                    proposal.expected_revision,
                    proposal.state,
                ),
            )
            .await;
            let outcome = match result {
                Ok(Ok(versioned)) => {
                    driver.observe_partition(&replica.id, &versioned);
                    CasOutcome::Applied {
                        revision: versioned.revision,
                    }
                }
                Ok(Err(MetaError::Conflict { current, .. })) => {
                    driver.observe_partition(&replica.id, &current);
                    CasOutcome::Conflict
                }
                Ok(Err(_)) | Err(_) => CasOutcome::Unknown,
            };
            driver.step(
                &replica,
                Input::IsrOutcome {
                    leader_epoch,
                    outcome,
                },
            );
        });
    }

    /// Reads the partition state from the store for the node, unless a read is under way
    /// already (it answers this request too): a follower refused while etcd is gone asks after
    /// every restart pause, and one loop per request piled up to thousands of reads a second
    /// (issue 56). A read etcd does not answer is tried again after a [`Backoff`] wait
    /// ([`REREAD_RETRY_BASE`] doubling up to [`REREAD_RETRY_CAP`], jittered), until it answers,
    /// the replica stops or the driver does.
    fn spawn_reread(self: &Arc<Self>, replica: &Arc<Replica>, shell: &mut ReplicaShell) {
        if shell.reread_pending {
            return;
        }
        shell.reread_pending = true;
        let driver = Arc::clone(self);
        let replica = Arc::clone(replica);
        tokio::spawn(async move {
            let mut backoff = Backoff::new(REREAD_RETRY_BASE, REREAD_RETRY_CAP);
            let read = loop {
                let failed = match driver.store.partition_state(replica.id.clone()).await {
                    Ok(read) => break Some(read),
                    Err(MetaError::NotFound { .. }) => break None,
                    Err(error) => error,
                };
                if replica.shell().stopped {
                    break None;
                }
                debug!(partition = %replica.id, error = %failed, "cannot read the partition state; trying again");
                tokio::select! {
                    () = driver.stop.cancelled() => break None,
                    () = backoff.wait() => {}
                }
            };
            // Cleared before the step: a read the node asks for in it starts afresh.
            replica.shell().reread_pending = false;
            let Some(read) = read else { return };
            driver.observe_partition(&replica.id, &read);
            let live = driver.state().live_brokers();
            driver.step(&replica, Input::View { state: read, live });
            driver.wake.notify_one();
        });
    }
}
