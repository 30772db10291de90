//! Reading everything under the cluster's prefix at one revision: the snapshot a watch starts
//! from, and the one it sends as a `Resync` when it cannot resume.
//!
//! Why in pages at one revision: a cluster's keys may pass gRPC's message limit in one answer,
//! and pages read at the first page's revision still form one consistent state.

use etcd_client::{GetOptions, KeyValue};

use super::super::layout::{prefix_range_end, ParsedKey};
use super::super::watch::MetaSnapshot;
use super::super::{decode_value, MetaError};
use super::EtcdMetaStore;
use crate::cluster::Versioned;

/// Keys read per request when taking a snapshot (pages at one revision).
pub const SNAPSHOT_PAGE_KEYS: i64 = 500;

impl EtcdMetaStore {
    /// Everything under the cluster's prefix at one revision, read in pages.
    pub(super) async fn snapshot(&self) -> Result<MetaSnapshot, MetaError> {
        let prefix = self.inner.layout.prefix().to_owned();
        let range_end = prefix_range_end(&prefix);
        let mut from = prefix.into_bytes();
        let mut revision = 0;
        let mut snapshot = MetaSnapshot::default();
        loop {
            let mut client = self.client();
            let options = GetOptions::new()
                .with_range(range_end.clone())
                .with_limit(SNAPSHOT_PAGE_KEYS)
                .with_revision(revision);
            let key = from.clone();
            let page = self
                .request("read a snapshot", async move {
                    client.get(key, Some(options)).await
                })
                .await?;
            if revision == 0 {
                revision = page.header().map_or(0, |header| header.revision());
            }
            for kv in page.kvs() {
                self.add_to_snapshot(&mut snapshot, kv)?;
            }
            match page.kvs().last() {
                Some(last) if page.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        snapshot.revision = revision;
        snapshot.brokers.sort_by_key(|broker| broker.node_id);
        snapshot.topics.sort_by(|a, b| a.name.cmp(&b.name));
        snapshot.partitions.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(snapshot)
    }

    fn add_to_snapshot(&self, snapshot: &mut MetaSnapshot, kv: &KeyValue) -> Result<(), MetaError> {
        let key = String::from_utf8_lossy(kv.key());
        match self.inner.layout.parse(&key) {
            Some(ParsedKey::Broker(_)) => snapshot.brokers.push(decode_value(&key, kv.value())?),
            Some(ParsedKey::Topic(_)) => snapshot.topics.push(decode_value(&key, kv.value())?),
            Some(ParsedKey::Partition(id)) => snapshot.partitions.push((
                id,
                Versioned {
                    value: decode_value(&key, kv.value())?,
                    revision: kv.mod_revision(),
                },
            )),
            None => {}
        }
        Ok(())
    }
}
