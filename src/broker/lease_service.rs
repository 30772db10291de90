//! Leases for every listener: grant, renew and release a partition's lease through the lease
//! authority chosen at assembly, only at the partition's leader.
//!
//! Why a part of its own: the transaction coordinator leases the partitions its transactions
//! write through the same calls as clients do, and must not hold the whole service to make them.

use std::sync::Arc;

use super::reads::ReadPath;
use super::topic_admin::TopicAdmin;
use super::BrokerError;
use crate::lease::{AuthorityError, Grant, LeaseAuthority, LeaseTarget, Renewed};
use crate::storage::StorageError;

/// Grants, renews and releases leases of this broker's partitions. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LeaseService {
    authority: Arc<dyn LeaseAuthority>,
    reads: ReadPath,
    topics: Arc<dyn TopicAdmin>,
}

impl LeaseService {
    /// Leases granted by `authority`, of partitions this broker leads (as `reads` decides), not
    /// of the topics `topics` keeps internal.
    pub fn new(
        authority: Arc<dyn LeaseAuthority>,
        reads: ReadPath,
        topics: Arc<dyn TopicAdmin>,
    ) -> Self {
        Self {
            authority,
            reads,
            topics,
        }
    }

    /// The lease authority (who holds which partition's lease).
    pub fn authority(&self) -> &Arc<dyn LeaseAuthority> {
        &self.authority
    }

    /// Grants the partition's lease if it has no live one; the new epoch is installed durably in
    /// the partition's writer before this returns.
    pub async fn acquire(
        &self,
        topic: &str,
        partition: u32,
        holder: String,
        ttl_ms: u64,
    ) -> Result<Grant, BrokerError> {
        self.topics.refuse_internal(topic, "leased")?;
        let target = self.target(topic, partition)?;
        let log = Arc::clone(&target.log);
        match self.authority.acquire(target, holder.clone(), ttl_ms).await {
            // The topic was deleted while the grant was being installed.
            Err(AuthorityError::Install { source, .. })
                if matches!(*source, StorageError::Deleted { .. }) =>
            {
                Err(BrokerError::UnknownTopic(topic.to_string()))
            }
            granted => {
                let grant = granted?;
                if grant.joined {
                    log.metrics().lease_renewed();
                } else {
                    log.metrics().lease_granted_to(grant.epoch, &holder);
                }
                Ok(grant)
            }
        }
    }

    /// Extends a live lease.
    pub async fn renew(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
    ) -> Result<Renewed, BrokerError> {
        let target = self.target(topic, partition)?;
        let log = Arc::clone(&target.log);
        let renewed = self.authority.renew(target, lease_id).await?;
        log.metrics().lease_renewed();
        Ok(renewed)
    }

    /// Ends a live lease at once.
    pub async fn release(
        &self,
        topic: &str,
        partition: u32,
        lease_id: u128,
    ) -> Result<(), BrokerError> {
        let target = self.target(topic, partition)?;
        Ok(self.authority.release(target, lease_id).await?)
    }

    /// The partition a lease request is for; only its leader grants, renews and releases.
    fn target(&self, topic: &str, partition: u32) -> Result<LeaseTarget, BrokerError> {
        Ok(LeaseTarget {
            topic: topic.to_string(),
            partition,
            log: self.reads.leader_partition(topic, partition)?,
        })
    }
}
