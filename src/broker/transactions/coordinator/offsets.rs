//! Consumer positions committed with a transaction (Kafka's AddOffsetsToTxn, TxnOffsetCommit
//! and, on a cluster, their hand-over between the group's and the transactional id's
//! coordinators).

use super::*;

impl TransactionCoordinator {
    /// Kafka's TxnOffsetCommit answered by `group`'s coordinator on a cluster: the positions
    /// are handed to the transactional id's coordinator (wherever it is), and held here
    /// (OffsetFetch `require_stable` answers them unstable) until it tells the outcome. `None`
    /// standalone (the registry here holds them: [`commit_offsets`](Self::commit_offsets)).
    pub async fn hand_over_offsets(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        group: &str,
        offsets: Vec<(String, i32, crate::broker::transactions::PendingOffset)>,
    ) -> Option<Result<(), PeerError>> {
        let cluster = self.cluster.as_ref()?;
        let producer = crate::protocol::TransactionProducer {
            transactional_id: transactional_id.to_string(),
            producer_id,
            producer_epoch,
        };
        let partitions: Vec<(String, i32)> = offsets
            .iter()
            .map(|(topic, partition, _)| (topic.clone(), *partition))
            .collect();
        let entries = offsets
            .into_iter()
            .filter_map(|(topic, partition, pending)| {
                Some(crate::protocol::TxnOffset {
                    topic,
                    partition: u32::try_from(partition).ok()?,
                    offset: u64::try_from(pending.offset).ok()?,
                    leader_epoch: pending.leader_epoch,
                    metadata: pending.metadata.unwrap_or_default(),
                })
            })
            .collect();
        // Held before the hand-over: its outcome may come back before the answer does.
        self.held_offsets.hold(group, transactional_id, &partitions);
        let handed = cluster
            .txn_offset_commit(producer, group, entries)
            .await
            .map_err(PeerError::from);
        if handed.as_ref().is_err_and(|error| error.code.is_some()) {
            // Refused: the transaction holds nothing (an unknown outcome stays held until the
            // outcome or the hold's time limit).
            self.held_offsets
                .release_partitions(group, transactional_id, &partitions);
        }
        Some(handed)
    }

    /// `EndTxnOffsets`, as `group`'s coordinator: `transactional_id`'s transaction ended; on
    /// commit its positions `offsets` are stored, and either way they are no longer held.
    pub async fn end_offsets(
        &self,
        group: &str,
        transactional_id: &str,
        commit: bool,
        offsets: Vec<(String, u32, CommittedOffset)>,
    ) -> Result<(), BrokerError> {
        if commit {
            self.parts
                .groups
                .commit_offsets_within(group.to_string(), offsets, CommitBound::Existence)
                .await
                .written?;
        }
        self.held_offsets.release(group, transactional_id);
        Ok(())
    }

    /// `AddOffsetsToTxn`: the group's offsets will commit with the transaction.
    pub async fn add_offsets(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        group: &str,
    ) -> Result<(), CoordinatorError> {
        self.registry
            .update(transactional_id, |current| {
                let current = known(current, producer_id)?;
                Ok((
                    current.add_offsets(producer_id, producer_epoch, group, now_ms())?,
                    (),
                ))
            })
            .await?;
        Ok(())
    }

    /// `TxnOffsetCommit`: positions held until the transaction commits.
    pub async fn commit_offsets(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        group: &str,
        offsets: Vec<(String, i32, crate::broker::transactions::PendingOffset)>,
    ) -> Result<(), CoordinatorError> {
        self.registry
            .update(transactional_id, |current| {
                let current = known(current, producer_id)?;
                Ok((
                    current.commit_offsets(producer_id, producer_epoch, group, offsets)?,
                    (),
                ))
            })
            .await?;
        Ok(())
    }
}
