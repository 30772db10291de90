//! The coordinator's timeout task and the transactions' leases: recovery after a restart,
//! renewing the leases of open transactions, aborting expired ones and finishing prepared ones.
//!
//! Why apart: what runs on a timer is read apart from the requests that change a transaction.

use super::*;

impl TransactionCoordinator {
    /// Brings every id left mid-transaction by a restart back under the fence, before any
    /// client is served: the partitions of open and prepared transactions are leased again (the
    /// lease table starts empty, and a native client must not take a partition with an open
    /// transaction on it and stall read_committed readers for ever), and prepared outcomes'
    /// markers are written.
    pub async fn recover(&self) {
        for state in self.registry.all() {
            let id = state.transactional_id.clone();
            let recovered = match state.state {
                TxnState::Ongoing => self.hold_leases(&id).await,
                TxnState::PrepareCommit | TxnState::PrepareAbort => self.complete(&id).await,
                _ => continue,
            };
            match recovered {
                Ok(()) => {
                    info!(transactional_id = %id, state = state.state.kafka_name(), "transaction recovered")
                }
                Err(error) => {
                    warn!(transactional_id = %id, %error, "transaction not recovered yet; retried by the timeout task")
                }
            }
        }
    }

    /// Starts the task that renews the transactions' leases, aborts expired transactions and
    /// finishes prepared ones, every [`TRANSACTION_CHECK_INTERVAL`], until the coordinator
    /// is dropped.
    pub fn start_timeouts(self: &Arc<Self>) {
        let coordinator = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(TRANSACTION_CHECK_INTERVAL);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(coordinator) = coordinator.upgrade() else {
                    return;
                };
                coordinator.tick().await;
            }
        });
    }

    /// One pass of the timeout task.
    pub(super) async fn tick(&self) {
        // On a cluster: what this broker coordinates now (it may have taken offsets
        // partitions over, or lost some).
        self.registry.reload_led().await;
        self.forget_stale_leases();
        self.renew_leases().await;
        let now = now_ms();
        match self.registry.expire_idle(now).await {
            Ok(0) => {}
            Ok(expired) => info!(
                expired,
                "forgot transactional ids idle past their expiration"
            ),
            Err(error) => warn!(%error, "idle transactional ids not forgotten; retrying"),
        }
        for state in self.registry.all() {
            let id = &state.transactional_id;
            let result = if state.is_expired(now) {
                info!(transactional_id = %id, timeout_ms = state.timeout_ms, "transaction timed out: aborting it");
                self.expire(id).await
            } else if state.state.is_preparing() {
                self.complete(id).await
            } else if state.state == TxnState::Ongoing {
                self.hold_leases(id).await
            } else {
                Ok(())
            };
            if let Err(error) = result {
                warn!(transactional_id = %id, %error, "transaction not completed yet; retrying");
            }
        }
    }

    /// Forgets the leases this coordinator cannot use any more (on a cluster): those of
    /// partitions whose leader changed since the grant (the lease was in the old leader's
    /// table; the partition's open transactions lease it again at the new leader, at once
    /// rather than at the next renewal), and its use of them for ids it no longer coordinates
    /// (another broker took their offsets partition: it leases what they need), so that a
    /// lease no transaction here needs is no longer renewed and lapses.
    pub(super) fn forget_stale_leases(&self) {
        let mut leases = lock(&self.leases);
        leases.retain(|(topic, partition), lease| {
            let moved = u32::try_from(*partition).is_ok_and(|index| {
                self.partitions.leader_epoch(topic, index) != lease.leader_epoch
            });
            if moved {
                info!(%topic, partition, "the partition's leader changed: its transactions lease it again there");
                return false;
            }
            lease.users.retain(|id| self.coordinates(id));
            !lease.users.is_empty()
        });
    }

    /// Renews every transactions' lease a third of its TTL old; one that cannot be renewed is
    /// forgotten (its transactions lease the partition again, or find their writes fenced).
    pub(super) async fn renew_leases(&self) {
        let _changing = self.lease_changes.lock().await;
        let due: Vec<(PartitionKey, u128)> = lock(&self.leases)
            .iter()
            .filter(|(_, lease)| {
                lease.renewed_at.elapsed() >= Duration::from_millis(TRANSACTIONS_LEASE_TTL_MS / 3)
            })
            .map(|(key, lease)| (key.clone(), lease.lease_id))
            .collect();
        for ((topic, partition), lease_id) in due {
            let renewed = match u32::try_from(partition) {
                Ok(index) => self.partitions.renew(&topic, index, lease_id).await.is_ok(),
                Err(_) => false,
            };
            let mut leases = lock(&self.leases);
            if renewed {
                if let Some(lease) = leases.get_mut(&(topic.clone(), partition)) {
                    lease.renewed_at = Instant::now();
                }
            } else {
                warn!(%topic, partition, "the transactions' lease was lost; the partition is leased again for its open transactions");
                leases.remove(&(topic, partition));
            }
        }
    }

    /// Makes sure the coordinator holds the lease of every partition of `transactional_id`'s
    /// transaction (acquiring those it lost or never had since a restart).
    pub(super) async fn hold_leases(&self, transactional_id: &str) -> Result<(), CoordinatorError> {
        let Some(state) = self.registry.get(transactional_id) else {
            return Ok(());
        };
        for partition in state.partitions.iter().filter(|p| !p.client_leased) {
            self.lease(transactional_id, &partition.topic, partition.partition)
                .await?;
        }
        Ok(())
    }

    /// The transactions' lease on `topic`-`partition` for `transactional_id`: joins the one the
    /// coordinator holds, or acquires it. Its epoch.
    pub(super) async fn lease(
        &self,
        transactional_id: &str,
        topic: &str,
        partition: i32,
    ) -> Result<u64, CoordinatorError> {
        let key = (topic.to_string(), partition);
        let _changing = self.lease_changes.lock().await;
        if let Some(lease) = lock(&self.leases).get_mut(&key) {
            lease.users.insert(transactional_id.to_string());
            return Ok(lease.epoch);
        }
        let index = crate::broker::transactions::markers::partition_index(topic, partition)?;
        // Read before the grant: a leader change in between makes it look moved, and the
        // lease is taken again (never the other way round).
        let leader_epoch = self.partitions.leader_epoch(topic, index);
        match self
            .partitions
            .acquire(topic, index, TRANSACTIONS_LEASE_TTL_MS)
            .await
        {
            Ok(grant) => {
                lock(&self.leases).insert(
                    key,
                    SharedLease {
                        epoch: grant.epoch,
                        lease_id: grant.lease_id,
                        renewed_at: Instant::now(),
                        leader_epoch,
                        users: BTreeSet::from([transactional_id.to_string()]),
                    },
                );
                Ok(grant.epoch)
            }
            Err(BrokerError::Lease(AuthorityError::Refused(LeaseError::Held {
                holder,
                expires_in_ms,
                ..
            }))) => Err(CoordinatorError::PartitionLeased {
                topic: topic.to_string(),
                partition,
                holder,
                expires_in_ms,
            }),
            Err(error) => Err(error.into()),
        }
    }

    /// `transactional_id` no longer uses `partitions`: a lease no transaction uses any more is
    /// released (a release that fails only leaves the lease to expire).
    pub(super) async fn leave(&self, transactional_id: &str, partitions: &[TxnPartition]) {
        let _changing = self.lease_changes.lock().await;
        let unused: Vec<(PartitionKey, u128)> = {
            let mut leases = lock(&self.leases);
            partitions
                .iter()
                .filter_map(|partition| {
                    let key = (partition.topic.clone(), partition.partition);
                    let lease = leases.get_mut(&key)?;
                    lease.users.remove(transactional_id);
                    if !lease.users.is_empty() {
                        return None;
                    }
                    let lease_id = lease.lease_id;
                    leases.remove(&key);
                    Some((key, lease_id))
                })
                .collect()
        };
        for ((topic, partition), lease_id) in unused {
            let Ok(index) = u32::try_from(partition) else {
                continue;
            };
            if let Err(error) = self.partitions.release(&topic, index, lease_id).await {
                tracing::debug!(%topic, partition, %error, "transactions' lease not released");
            }
        }
    }

    /// Aborts `transactional_id`'s transaction if it is still open past its timeout, with the
    /// producer epoch bumped (the instance that let it expire is fenced).
    pub(super) async fn expire(&self, transactional_id: &str) -> Result<(), CoordinatorError> {
        let spare = self.spare_producer_id(transactional_id).await?;
        let decided = self
            .registry
            .update(transactional_id, |current| {
                let current = current.expect("expiring a known id");
                match current.expire(now_ms(), || spare.expect("taken when near the end")) {
                    Some(next) => Ok((next, true)),
                    None => Ok((current.clone(), false)),
                }
            })
            .await?;
        if decided {
            self.complete(transactional_id).await?;
        }
        Ok(())
    }
}
