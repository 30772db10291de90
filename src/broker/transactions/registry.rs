//! The transactional ids a broker coordinates, with the rule that makes them safe: a new state
//! is written durably *before* it is installed and before the caller answers.
//!
//! One async lock serialises the updates (decide, write, install), so two requests for the same
//! id (a zombie and its successor) are decided one after the other on the state the previous
//! one stored. Reads take a short synchronous lock of the installed states: the Kafka produce
//! path looks a transactional producer's lease epoch up there without waiting for an update's
//! fsync. Writes are one small file each and happen a few times per transaction; serialising
//! them across ids is the simple first step (a per-id lock is the refinement if a benchmark
//! shows the need).
//!
//! Where a state is made durable depends on the broker: standalone, a file per id
//! ([`TransactionStore`]); on a cluster, the id's offsets partition
//! ([`ReplicatedOffsets::save_transaction`], `acks=all`, only by that partition's leader), so
//! the id's state moves with its coordinator. On a cluster the installed states are this
//! broker's working copy of what it coordinates: [`TransactionRegistry::refresh`] reads an id
//! again from its offsets partition (the coordinator may have moved away and back), and an
//! update refreshes first, so a decision is always made on the state the log holds.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use tokio::sync::Mutex;

use super::state::MAX_TRANSACTIONAL_IDS;
use super::{TransactionMetadata, TransactionStore, TxnError};
use crate::broker::coordinator::GroupCoordinator;
use crate::broker::offsets_topic::ReplicatedOffsets;
use crate::broker::BrokerError;

/// Why an update did not happen.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// The state machine refused the request: tell the client.
    #[error(transparent)]
    Refused(#[from] TxnError),
    /// The new state could not be written: nothing changed; the client may retry
    /// (`COORDINATOR_NOT_AVAILABLE`), the operator should check the data directory.
    #[error("transaction state not written: {0}")]
    Store(#[from] io::Error),
    /// On a cluster: the state could not be read or stored in the id's offsets partition (this
    /// broker is not the id's coordinator, or it is loading, or the append's outcome is
    /// unknown); the error says which, and who coordinates the id when known.
    #[error(transparent)]
    Cluster(BrokerError),
}

/// Where the registry makes states durable.
enum Durable {
    /// A standalone broker's `DATA/transactions/`.
    Files(Arc<TransactionStore>),
    /// A cluster's offsets topic (the group coordinator is what its partitions load into).
    Offsets {
        offsets: Arc<ReplicatedOffsets>,
        groups: Arc<GroupCoordinator>,
    },
}

/// Every transactional id's current state, and its durable store.
pub struct TransactionRegistry {
    durable: Durable,
    /// Held across an update's decide, write and install.
    updates: Mutex<()>,
    /// The installed (durable) states.
    states: RwLock<HashMap<String, TransactionMetadata>>,
    /// On a cluster: the leader epoch of each id's offsets partition when it was last read (the
    /// coordinator epoch of its markers).
    coordinator_epochs: std::sync::Mutex<HashMap<String, i32>>,
}

impl TransactionRegistry {
    /// Opens `DATA/transactions/` and loads every id.
    pub fn open(data: &Path) -> io::Result<Self> {
        let store = TransactionStore::open(data)?;
        let states = store
            .load()?
            .into_iter()
            .map(|state| (state.transactional_id.clone(), state))
            .collect();
        Ok(Self {
            durable: Durable::Files(Arc::new(store)),
            updates: Mutex::new(()),
            states: RwLock::new(states),
            coordinator_epochs: Default::default(),
        })
    }

    /// A cluster broker's registry: states live in the offsets topic, each id's in its offsets
    /// partition; none is installed until [`refresh`](Self::refresh) or an update reads it.
    pub fn replicated(offsets: Arc<ReplicatedOffsets>, groups: Arc<GroupCoordinator>) -> Self {
        Self {
            durable: Durable::Offsets { offsets, groups },
            updates: Mutex::new(()),
            states: RwLock::new(HashMap::new()),
            coordinator_epochs: Default::default(),
        }
    }

    /// Reads `transactional_id`'s state again from where it is durable and installs it (a
    /// cluster: from the id's offsets partition, which this broker must lead; standalone the
    /// installed state is the file's, and nothing is read). Errors say who coordinates the id;
    /// on one the working copy is forgotten (this broker may coordinate the id no longer).
    pub async fn refresh(&self, transactional_id: &str) -> Result<(), BrokerError> {
        let Durable::Offsets { offsets, groups } = &self.durable else {
            return Ok(());
        };
        let (state, leader_epoch) =
            match offsets.transaction_in_epoch(groups, transactional_id).await {
                Ok(read) => read,
                Err(error) => {
                    self.forget(transactional_id);
                    return Err(error);
                }
            };
        self.coordinator_epochs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                transactional_id.to_string(),
                i32::try_from(leader_epoch).unwrap_or(i32::MAX),
            );
        let mut states = self.states.write().unwrap_or_else(PoisonError::into_inner);
        match state {
            Some(state) => states.insert(transactional_id.to_string(), state),
            None => states.remove(transactional_id),
        };
        Ok(())
    }

    /// On a cluster: installs the state of every id in the offsets partitions this broker
    /// leads (with its coordinator epoch) and forgets the working copies of the others, so
    /// that the timeout task finds what a leadership change handed this broker (prepared
    /// outcomes to complete, open transactions to lease or time out). Serialised with the
    /// updates. Standalone nothing changes (the files are the installed states).
    pub async fn reload_led(&self) {
        let Durable::Offsets { offsets, groups } = &self.durable else {
            return;
        };
        // Loads what was not loaded yet outside the lock (a partition still loading must not
        // hold up the updates of every other id), then reads the loaded states under it.
        offsets.led_transactions(groups).await;
        let _serialised = self.updates.lock().await;
        let led = offsets.led_transactions(groups).await;
        let mut epochs = self
            .coordinator_epochs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        epochs.clear();
        let mut states = HashMap::with_capacity(led.len());
        for (state, leader_epoch) in led {
            epochs.insert(
                state.transactional_id.clone(),
                i32::try_from(leader_epoch).unwrap_or(i32::MAX),
            );
            states.insert(state.transactional_id.clone(), state);
        }
        *self.states.write().unwrap_or_else(PoisonError::into_inner) = states;
    }

    /// `transactional_id`'s durable state, read without installing it (standalone the
    /// installed state; on a cluster from the id's offsets partition, which this broker must
    /// lead).
    pub async fn durable_state(
        &self,
        transactional_id: &str,
    ) -> Result<Option<TransactionMetadata>, BrokerError> {
        match &self.durable {
            Durable::Files(_) => Ok(self.get(transactional_id)),
            Durable::Offsets { offsets, groups } => {
                offsets.transaction(groups, transactional_id).await
            }
        }
    }

    /// The coordinator epoch this broker's markers for `transactional_id` carry: standalone
    /// [`super::markers::STANDALONE_COORDINATOR_EPOCH`]; on a cluster the leader epoch of the
    /// id's offsets partition when it was last read (0 before: a marker then is refused where a
    /// newer coordinator wrote one, never taken in its place).
    pub fn coordinator_epoch(&self, transactional_id: &str) -> i32 {
        match self.durable {
            Durable::Files(_) => super::markers::STANDALONE_COORDINATOR_EPOCH,
            Durable::Offsets { .. } => self
                .coordinator_epochs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(transactional_id)
                .copied()
                .unwrap_or(super::markers::STANDALONE_COORDINATOR_EPOCH),
        }
    }

    /// Forgets this broker's working copy of `transactional_id` (a cluster broker that no
    /// longer coordinates it); its durable state is untouched.
    pub fn forget(&self, transactional_id: &str) {
        if matches!(self.durable, Durable::Offsets { .. }) {
            self.states
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(transactional_id);
            self.coordinator_epochs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(transactional_id);
        }
    }

    /// Makes `state` durable, replacing the id's previous state (`None`: forgets the id).
    async fn store(
        &self,
        transactional_id: &str,
        state: Option<TransactionMetadata>,
    ) -> Result<(), UpdateError> {
        match &self.durable {
            Durable::Files(store) => {
                let store = Arc::clone(store);
                let id = transactional_id.to_string();
                tokio::task::spawn_blocking(move || match state {
                    Some(state) => store.save(&state),
                    None => store.remove(&id),
                })
                .await
                .map_err(|panicked| {
                    io::Error::other(format!("the write panicked: {panicked}"))
                })??;
                Ok(())
            }
            Durable::Offsets { offsets, groups } => offsets
                .save_transaction(groups, transactional_id, state)
                .await
                .map_err(UpdateError::Cluster),
        }
    }

    /// The installed states (a panic while they were held cannot have left them half-changed:
    /// an install is one insert).
    fn installed(&self) -> RwLockReadGuard<'_, HashMap<String, TransactionMetadata>> {
        self.states.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of `transactional_id`'s state, if it has one.
    pub fn get(&self, transactional_id: &str) -> Option<TransactionMetadata> {
        self.installed().get(transactional_id).cloned()
    }

    /// What `read` makes of `transactional_id`'s installed state, without copying it.
    pub fn read<T>(
        &self,
        transactional_id: &str,
        read: impl FnOnce(Option<&TransactionMetadata>) -> T,
    ) -> T {
        read(self.installed().get(transactional_id))
    }

    /// Forgets the ids with nothing open that have been idle past their expiration at
    /// `now_ms` (file first, then memory); how many.
    pub async fn expire_idle(&self, now_ms: i64) -> io::Result<usize> {
        let _serialised = self.updates.lock().await;
        let expired: Vec<String> = self
            .installed()
            .values()
            .filter(|state| state.is_idle_expired(now_ms))
            .map(|state| state.transactional_id.clone())
            .collect();
        for id in &expired {
            match self.store(id, None).await {
                Ok(()) => {}
                Err(UpdateError::Store(error)) => return Err(error),
                Err(other) => return Err(io::Error::other(other.to_string())),
            }
            self.states
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(id);
        }
        Ok(expired.len())
    }

    /// Whether any id's installed state satisfies `test` (without copying the states).
    pub fn any(&self, test: impl Fn(&TransactionMetadata) -> bool) -> bool {
        self.installed().values().any(test)
    }

    /// Every id's state (DescribeTransactions, ListTransactions, the timeout task).
    pub fn all(&self) -> Vec<TransactionMetadata> {
        self.installed().values().cloned().collect()
    }

    /// Decides `transactional_id`'s next state with `decide` (given its current one), writes it
    /// durably, then installs it; returns what `decide` returned beside the state. Nothing is
    /// installed if `decide` refuses or the write fails.
    pub async fn update<T>(
        &self,
        transactional_id: &str,
        decide: impl FnOnce(Option<&TransactionMetadata>) -> Result<(TransactionMetadata, T), TxnError>,
    ) -> Result<T, UpdateError> {
        let _serialised = self.updates.lock().await;
        self.refresh(transactional_id)
            .await
            .map_err(UpdateError::Cluster)?;
        let (mut next, answer) = {
            let installed = self.installed();
            if !installed.contains_key(transactional_id) && installed.len() >= MAX_TRANSACTIONAL_IDS
            {
                return Err(TxnError::TooManyIds {
                    max: MAX_TRANSACTIONAL_IDS,
                }
                .into());
            }
            decide(installed.get(transactional_id))?
        };
        next.updated_ms = super::now_ms();
        self.store(transactional_id, Some(next.clone())).await?;
        self.states
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(transactional_id.to_string(), next);
        Ok(answer)
    }
}

impl TransactionRegistry {
    /// [`update`](Self::update) for a decision made inside a blocking step: `section` gets
    /// `transactional_id`'s current state and `save`, which makes a next state durable (setting
    /// its `updated_ms`) from inside the step: the atomic commit saves its decision while it
    /// holds the partitions' fence locks. `section` returns the state to install (`None`:
    /// nothing changed; a state it returns must be one it saved) and its answer. Serialised
    /// with every other update.
    pub async fn update_within<T, E>(
        &self,
        transactional_id: &str,
        section: impl FnOnce(
                Option<TransactionMetadata>,
                &Saver,
            ) -> Result<(Option<TransactionMetadata>, T), E>
            + Send
            + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<io::Error> + Send + 'static,
    {
        let Durable::Files(store) = &self.durable else {
            return Err(io::Error::other(
                "native atomic appends hold every partition's fence lock at once, which only a standalone broker can",
            )
            .into());
        };
        let _serialised = self.updates.lock().await;
        let current = self.get(transactional_id);
        let saver = Saver {
            store: Arc::clone(store),
        };
        let (next, answer) = tokio::task::spawn_blocking(move || section(current, &saver))
            .await
            .map_err(|panicked| io::Error::other(format!("the update panicked: {panicked}")))??;
        if let Some(next) = next {
            self.states
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(transactional_id.to_string(), next);
        }
        Ok(answer)
    }
}

/// The durable write of a state, handed to [`TransactionRegistry::update_within`]'s step.
pub struct Saver {
    store: Arc<TransactionStore>,
}

impl Saver {
    /// Stamps `state` as updated now and writes it durably (blocking: fsync).
    pub fn save(&self, state: &mut TransactionMetadata) -> io::Result<()> {
        state.updated_ms = super::now_ms();
        self.store.save(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::transactions::{InitOutcome, TxnState};

    #[tokio::test]
    async fn an_update_is_durable_before_it_is_visible_and_a_refusal_changes_nothing() {
        let data = tempfile::tempdir().unwrap();
        let registry = TransactionRegistry::open(data.path()).unwrap();
        registry
            .update("t", |current| {
                assert!(current.is_none());
                Ok((TransactionMetadata::new("t", 7, 60_000), ()))
            })
            .await
            .unwrap();
        let epoch = registry
            .update("t", |current| {
                match current.unwrap().init_producer_id(60_000, || 8)? {
                    InitOutcome::Ready(next) => {
                        let epoch = next.producer_epoch;
                        Ok((next, epoch))
                    }
                    InitOutcome::AbortFirst(_) => panic!("nothing open"),
                }
            })
            .await
            .unwrap();
        assert_eq!(epoch, 1);
        let refused: Result<(), _> = registry
            .update("t", |current| {
                current.unwrap().end(7, 0, false).map(|_| unreachable!())
            })
            .await;
        assert!(matches!(
            refused,
            Err(UpdateError::Refused(TxnError::ProducerFenced { .. }))
        ));
        // A restart sees exactly what was installed.
        let reopened = TransactionRegistry::open(data.path()).unwrap();
        let state = reopened.get("t").unwrap();
        assert_eq!((state.producer_id, state.producer_epoch), (7, 1));
        assert_eq!(state.state, TxnState::Empty);
        assert_eq!(reopened.all().len(), 1);
    }

    #[tokio::test]
    async fn an_idle_id_expires_and_an_open_one_does_not() {
        use crate::broker::transactions::state::TRANSACTIONAL_ID_EXPIRATION_MS;
        use crate::broker::transactions::TxnPartition;
        let data = tempfile::tempdir().unwrap();
        let registry = TransactionRegistry::open(data.path()).unwrap();
        registry
            .update("idle", |_| {
                Ok((TransactionMetadata::new("idle", 1, 60_000), ()))
            })
            .await
            .unwrap();
        registry
            .update("open", |_| {
                let state = TransactionMetadata::new("open", 2, 60_000).add_partitions(
                    2,
                    0,
                    &[TxnPartition {
                        topic: "t".into(),
                        partition: 0,
                        lease_epoch: 1,
                        client_leased: false,
                    }],
                    1,
                )?;
                Ok((state, ()))
            })
            .await
            .unwrap();
        let now = crate::broker::transactions::now_ms();
        assert_eq!(
            registry.expire_idle(now).await.unwrap(),
            0,
            "not idle long enough"
        );
        let later = now + TRANSACTIONAL_ID_EXPIRATION_MS + 1;
        assert_eq!(registry.expire_idle(later).await.unwrap(), 1);
        assert!(registry.get("idle").is_none());
        assert!(
            registry.get("open").is_some(),
            "an open transaction is never forgotten"
        );
        let reopened = TransactionRegistry::open(data.path()).unwrap();
        assert!(reopened.get("idle").is_none(), "its file is gone too");
    }
}
