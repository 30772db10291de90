//! A broker's local copies of cluster topics follow the store's *lineage* of each name: a topic
//! deleted from the store is deleted here too, and local files of an older topic of the same name
//! (a broker that was down while the topic was deleted, and maybe re-created) are removed before
//! anything of the new topic is opened on them, so no replica ever serves or replicates a
//! deleted lineage's records into the new topic.
//!
//! How a local copy is judged (`docs/replication.md`, "Topic delete on a cluster"; the rules are
//! the sans-I/O [`crate::cluster::replication::lineage`], which the simulation runs too):
//! * the store has a record of the name: the local copy is of an older lineage when it has
//!   more partitions than the record (fewer is a grow not applied yet), or a partition's
//!   leader-epoch floor or history has an epoch below the record's `first_leader_epoch` (the
//!   store starts a re-created topic above every epoch of the deleted ones, so only a deleted
//!   lineage has epochs below it);
//! * the store has no record of the name: the local copy is deleted when the name's fence floor
//!   (its tombstone, or the folded floor) is above 0 and covers every leader epoch the copy
//!   holds. A copy without a tombstone, or with epochs above it, is left alone and not served
//!   (a wrong `--cluster-name`, or a store restored from an old backup, must not erase data).
//!
//! Deleting a local copy is the standalone delete ([`crate::broker::Broker::delete_topic`]): the
//! partitions retire, the highest producer epoch becomes the name's local fence floor, the
//! directory moves into `DATA/deleted/` and committed offsets of the topic are forgotten; then the
//! service's leases and metrics forget it and the files are removed off the runtime.

use std::collections::HashSet;
use std::sync::{Arc, PoisonError};

use tracing::{debug, error, info, warn};

use super::ClusterDriver;
use crate::broker::{BrokerError, Topic};
use crate::cluster::meta::TopicRecord;
use crate::cluster::replication::lineage::{deleted_lineage, older_lineage, LocalEpochs};
use crate::lease::LeaseAuthority;
use crate::metrics::Metrics;

/// What the broker service forgets when a local copy of a topic is deleted (set when the service
/// joins the cluster; a driver run without a service only deletes the files).
#[derive(Debug, Clone)]
pub(crate) struct ServiceState {
    /// The lease table: a deleted topic's leases are forgotten.
    pub leases: Arc<dyn LeaseAuthority>,
    /// The server-wide metrics: a deleted topic's partitions' share is kept in them.
    pub metrics: Arc<Metrics>,
}

/// The leader epochs each open partition of the local copy `topic` holds, for the judgement of
/// [`crate::cluster::replication::lineage`].
pub(super) fn local_epochs(topic: &Topic) -> Vec<LocalEpochs> {
    topic
        .open_partitions()
        .map(|partition| LocalEpochs {
            floor: partition.leader_epoch_floor(),
            history: partition
                .leader_epoch_history()
                .into_iter()
                .map(|(epoch, _)| epoch)
                .collect(),
        })
        .collect()
}

impl ClusterDriver {
    /// Brings the local topics in line with the store's: deletes local copies of older or
    /// deleted lineages (the latter only once the view is `synced` with the store, never from
    /// an empty view), then creates the store's topics missing locally.
    pub(super) async fn reconcile_local_topics(
        self: &Arc<Self>,
        topics: &[TopicRecord],
        synced: bool,
    ) {
        for record in topics {
            if let Ok(local) = self.broker.topic(&record.name) {
                let epochs = local_epochs(&local);
                if let Some(reason) = older_lineage(local.partitions().len(), &epochs, record) {
                    self.delete_local_topic(&record.name, &reason.to_string())
                        .await;
                }
            }
            self.ensure_local_topic(record).await;
        }
        if !synced {
            return;
        }
        let wanted: HashSet<&str> = topics.iter().map(|topic| topic.name.as_str()).collect();
        let absent: Vec<Arc<Topic>> = self
            .broker
            .topics()
            .into_iter()
            .filter(|topic| !wanted.contains(topic.name()))
            .collect();
        for local in absent {
            let name = local.name().to_owned();
            if self.kept_absent().contains(&name) {
                continue;
            }
            // Paced like the loop's other store calls: every tick while etcd is gone was ten
            // failed reads a second per such topic.
            if !self.floor_retry().is_due(tokio::time::Instant::now()) {
                return;
            }
            let floor = match self.store.deleted_topic_floor(&name).await {
                Ok(floor) => {
                    self.floor_retry().succeeded();
                    floor
                }
                Err(error) => {
                    self.floor_retry().failed(tokio::time::Instant::now());
                    debug!(topic = %name, %error, "cannot read the fence floor of a topic the store does not have; trying again");
                    return;
                }
            };
            // The view may have learned of a re-creation meanwhile: judge that on the next round.
            if self.state().topics.contains_key(&name) {
                continue;
            }
            if deleted_lineage(&local_epochs(&local), floor) {
                let reason = format!(
                    "the topic was deleted from the cluster (fence floor: leader epoch {floor})"
                );
                self.delete_local_topic(&name, &reason).await;
            } else {
                warn!(topic = %name, floor, "a local topic is not in the cluster's store and no deletion of it covers its epochs; it is kept and not served (another cluster's data directory, or a store restored from an old backup?)");
                self.kept_absent().insert(name);
            }
        }
    }

    /// Names of local topics absent from the store that were examined and kept (so the store
    /// is not asked again every tick; forgotten on every resync of the view).
    fn kept_absent(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.kept_absent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Deletes the local copy of `name` (see the module docs): its replicas stop first, so no
    /// follower appends to and no leader serves the files being removed.
    pub(super) async fn delete_local_topic(self: &Arc<Self>, name: &str, reason: &str) {
        let stopped: Vec<_> = {
            let mut replicas = self.replicas.lock().unwrap_or_else(PoisonError::into_inner);
            let ids: Vec<_> = replicas
                .keys()
                .filter(|id| id.topic == name)
                .cloned()
                .collect();
            ids.iter().filter_map(|id| replicas.remove(id)).collect()
        };
        for replica in &stopped {
            self.stop_replica(replica);
        }
        let Ok(topic) = self.broker.topic(name) else {
            return;
        };
        let broker = Arc::clone(&self.broker);
        let owned = name.to_owned();
        let deleted = crate::broker::blocking(move || broker.delete_topic(&owned)).await;
        match deleted {
            Ok(deleted) => {
                info!(topic = %name, %reason, floor = deleted.floor, "deleted the local copy of the topic");
                let service = &self.service_state;
                service.leases.forget_topic(&deleted.name);
                service.metrics.forget_partitions(
                    topic.open_partitions().map(|partition| partition.metrics()),
                );
                tokio::task::spawn_blocking(move || deleted.remove_files());
                self.view_changed.send_modify(|generation| *generation += 1);
            }
            Err(BrokerError::UnknownTopic(_)) => {}
            Err(error) => {
                error!(topic = %name, %reason, %error, "cannot delete the local copy of the topic; it is not served, and deleting it is tried again")
            }
        }
    }
}
