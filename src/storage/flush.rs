//! Group commit: many appenders waiting for durability share one sync.
//!
//! With flush policy `always`, an append is acknowledged only once its bytes are on disk. Each
//! appender calls [`GroupCommit::wait_durable`] with the offset it needs. If no sync is running,
//! it becomes the leader and syncs *everything written so far* (not just its own batch); appenders
//! that arrive meanwhile wait, and most find their offset covered when the leader finishes. The
//! sync itself runs outside the partition's append lock, so appends continue during it.

use std::sync::{Condvar, Mutex};

#[derive(Debug, Default)]
struct State {
    durable_offset: u64,
    in_progress: bool,
    syncs: u64,
    /// Truncations so far (see [`GroupCommit::lower_to`]).
    truncations: u64,
}

/// Coordinates syncs for one partition.
#[derive(Debug, Default)]
pub struct GroupCommit {
    state: Mutex<State>,
    done: Condvar,
}

impl GroupCommit {
    /// Starts with everything below `durable_offset` durable (what recovery found on disk).
    pub fn new(durable_offset: u64) -> Self {
        Self {
            state: Mutex::new(State {
                durable_offset,
                ..State::default()
            }),
            done: Condvar::new(),
        }
    }

    /// Offsets below this are durable.
    pub fn durable_offset(&self) -> u64 {
        self.state
            .lock()
            .expect("group commit lock poisoned")
            .durable_offset
    }

    /// A truncation cut the log at `offset`: nothing at or above it is durable any more (the
    /// offsets will be given to other records). A sync already running when this is called
    /// must not raise the durable offset again with what it planned before; the partition
    /// makes such a sync report nothing new.
    ///
    /// Every wait in progress returns: the offset it waits for may have been cut, so the caller
    /// must check what became of its records (the partition does).
    pub fn lower_to(&self, offset: u64) {
        let mut state = self.state.lock().expect("group commit lock poisoned");
        state.durable_offset = state.durable_offset.min(offset);
        state.truncations += 1;
        self.done.notify_all();
    }

    /// The log now starts at `offset`, past everything written before (a follower started
    /// over at its leader's log start): the offsets below it hold nothing to sync.
    pub fn raise_to(&self, offset: u64) {
        let mut state = self.state.lock().expect("group commit lock poisoned");
        state.durable_offset = state.durable_offset.max(offset);
        self.done.notify_all();
    }

    /// Syncs performed so far (for benchmarks and tests of the batching).
    pub fn syncs(&self) -> u64 {
        self.state.lock().expect("group commit lock poisoned").syncs
    }

    /// Returns once every offset below `target` is durable, or once a truncation came (see
    /// [`GroupCommit::lower_to`]). `sync` syncs all that is written and returns the offset it
    /// made durable; it is called by at most one thread at a time. A failed sync is returned to
    /// the leader; waiters then try again themselves (and meet the same failure, which the
    /// partition makes sticky).
    pub fn wait_durable<E>(&self, target: u64, sync: impl Fn() -> Result<u64, E>) -> Result<(), E> {
        let mut state = self.state.lock().expect("group commit lock poisoned");
        let truncations = state.truncations;
        loop {
            if state.durable_offset >= target || state.truncations != truncations {
                return Ok(());
            }
            if state.in_progress {
                state = self.done.wait(state).expect("group commit lock poisoned");
                continue;
            }
            state.in_progress = true;
            drop(state);
            let result = sync();
            state = self.state.lock().expect("group commit lock poisoned");
            state.in_progress = false;
            state.syncs += 1;
            self.done.notify_all();
            let synced = result?;
            state.durable_offset = state.durable_offset.max(synced);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    /// Many concurrent waiters are served by fewer syncs than waiters, and all return durable.
    #[test]
    fn concurrent_waiters_share_syncs() {
        let commit = Arc::new(GroupCommit::new(0));
        let written = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (commit, written) = (Arc::clone(&commit), Arc::clone(&written));
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let target = written.fetch_add(1, Ordering::SeqCst) + 1;
                        commit
                            .wait_durable(target, || {
                                std::thread::sleep(std::time::Duration::from_micros(200));
                                Ok::<_, ()>(written.load(Ordering::SeqCst))
                            })
                            .unwrap();
                        assert!(commit.durable_offset() >= target);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert!(commit.syncs() <= 400);
    }
}
