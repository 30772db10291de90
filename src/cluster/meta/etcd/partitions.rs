//! Partition states on etcd: reading one or all, and the compare-and-swap by which elections and
//! ISR changes replace one.
//!
//! Why the swap is not retried here, unlike the topic changes: its caller computed the new state
//! from the revision it read, so a lost comparison is that caller's answer (`Conflict`, with the
//! state that won, read in the same transaction), not a reason to write anyway.

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use super::super::layout::ParsedKey;
use super::super::{decode_value, encode_value, MetaError, PartitionId, PartitionStates};
use super::requests::{txn_read, txn_revision};
use super::EtcdMetaStore;
use crate::cluster::{PartitionState, Versioned};

impl EtcdMetaStore {
    /// `partition`'s state with its mod revision; `NotFound` if it has none.
    pub(super) async fn read_partition_state(
        &self,
        partition: PartitionId,
    ) -> Result<Versioned<PartitionState>, MetaError> {
        let key = self.inner.layout.partition_key(&partition);
        let mut client = self.client();
        let request_key = key.clone();
        let response = self
            .request("read the partition state", async move {
                client.get(request_key, None).await
            })
            .await?;
        let kv = response.kvs().first().ok_or_else(|| MetaError::NotFound {
            what: format!("partition {partition}"),
        })?;
        Ok(Versioned {
            value: decode_value(&key, kv.value())?,
            revision: kv.mod_revision(),
        })
    }

    /// Every partition state, by topic and index.
    pub(super) async fn read_partition_states(&self) -> Result<PartitionStates, MetaError> {
        let prefix = self.inner.layout.partitions_prefix();
        let response = self.get_prefix("list the partition states", prefix).await?;
        let mut states = Vec::with_capacity(response.kvs().len());
        for kv in response.kvs() {
            let key = String::from_utf8_lossy(kv.key());
            if let Some(ParsedKey::Partition(id)) = self.inner.layout.parse(&key) {
                let value = decode_value(&key, kv.value())?;
                states.push((
                    id,
                    Versioned {
                        value,
                        revision: kv.mod_revision(),
                    },
                ));
            }
        }
        states.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(states)
    }

    /// Replaces `partition`'s state by `state` if it is still at `expected_revision`: else
    /// `Conflict` with the current state, or `NotFound` if the key is gone.
    pub(super) async fn swap_partition_state(
        &self,
        partition: PartitionId,
        expected_revision: i64,
        state: PartitionState,
    ) -> Result<Versioned<PartitionState>, MetaError> {
        let key = self.inner.layout.partition_key(&partition);
        // `version > 0` too: a deleted key has mod_revision 0, and a CAS must never re-create
        // the partition of a deleted topic.
        let txn = Txn::new()
            .when([
                Compare::version(key.clone(), CompareOp::Greater, 0),
                Compare::mod_revision(key.clone(), CompareOp::Equal, expected_revision),
            ])
            .and_then([TxnOp::put(key.clone(), encode_value(&state), None)])
            .or_else([TxnOp::get(key.clone(), None)]);
        let response = self
            .txn("compare-and-swap the partition state", txn)
            .await?;
        if response.succeeded() {
            return Ok(Versioned {
                value: state,
                revision: txn_revision(&response),
            });
        }
        match txn_read(&response).first() {
            None => Err(MetaError::NotFound {
                what: format!("partition {partition}"),
            }),
            Some(kv) => Err(MetaError::Conflict {
                partition,
                expected_revision,
                current: Box::new(Versioned {
                    value: decode_value(&key, kv.value())?,
                    revision: kv.mod_revision(),
                }),
            }),
        }
    }
}
