//! Topics on etcd: create, delete, alter the config, add partitions, list them, and read a
//! deleted name's fence floor.
//!
//! Each change reads what it depends on and writes in one transaction that compares the
//! revisions read (see each attempt for what it compares); a lost comparison writes nothing and
//! is read and tried again by [`retry_compare_and_swap`], up to [`TOPIC_DELETE_ATTEMPTS_MAX`]
//! attempts, after which the change fails with [`MetaError::Contended`]. Why read-then-compare
//! rather than one blind write: a topic's fence floor, its partitions' leader epochs and its
//! record may change under the change (an election, a concurrent delete or grow), and the
//! change must be computed from what it overwrites.

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, Txn, TxnOp};

use super::super::layout::{prefix_range_end, validate_name, ParsedKey};
use super::super::{
    decode_value, encode_value, prepare_new_partitions, start_above_floor, validate_new_topic,
    GrownTopic, MetaError, PartitionId, TopicRecord, TopicTombstone, TOPIC_DELETE_ATTEMPTS_MAX,
    TOPIC_TOMBSTONES_MAX,
};
use super::cas::retry_compare_and_swap;
use super::requests::{txn_read, txn_revision};
use super::EtcdMetaStore;
use crate::cluster::{LeaderEpoch, PartitionState, Versioned};
use crate::domain::TopicConfig;

impl EtcdMetaStore {
    /// Creates `topic` with `partitions` above its name's fence floor, read again while deletes
    /// of the name race it.
    pub(super) async fn create_topic_retried(
        &self,
        topic: TopicRecord,
        partitions: Vec<PartitionState>,
    ) -> Result<Vec<Versioned<PartitionState>>, MetaError> {
        validate_new_topic(&topic, &partitions)?;
        retry_compare_and_swap(
            TOPIC_DELETE_ATTEMPTS_MAX,
            || self.try_create_topic(&topic, &partitions),
            || MetaError::Contended {
                what: format!("create topic {} (deletes of its name raced it)", topic.name),
                attempts: TOPIC_DELETE_ATTEMPTS_MAX,
            },
        )
        .await
    }

    /// Deletes `topic` and raises its tombstone, read again while its partitions change.
    pub(super) async fn delete_topic_retried(
        &self,
        topic: String,
    ) -> Result<TopicTombstone, MetaError> {
        validate_name("topic name", &topic)?;
        retry_compare_and_swap(
            TOPIC_DELETE_ATTEMPTS_MAX,
            || self.try_delete_topic(&topic),
            || MetaError::Contended {
                what: format!("delete topic {topic} (its partitions kept changing)"),
                attempts: TOPIC_DELETE_ATTEMPTS_MAX,
            },
        )
        .await
    }

    /// Replaces `topic`'s config by `config` if it is still `expected`, read again while
    /// another field of the record changes.
    pub(super) async fn alter_topic_config_retried(
        &self,
        topic: String,
        expected: TopicConfig,
        config: TopicConfig,
    ) -> Result<TopicRecord, MetaError> {
        validate_name("topic name", &topic)?;
        retry_compare_and_swap(
            TOPIC_DELETE_ATTEMPTS_MAX,
            || self.try_alter_topic_config(&topic, expected, config),
            || MetaError::Contended {
                what: format!("alter the config of topic {topic}"),
                attempts: TOPIC_DELETE_ATTEMPTS_MAX,
            },
        )
        .await
    }

    /// Grows `topic` from `expected_count` partitions by `partitions`, read again while another
    /// field of the record changes.
    pub(super) async fn create_partitions_retried(
        &self,
        topic: String,
        expected_count: u32,
        partitions: Vec<PartitionState>,
    ) -> Result<GrownTopic, MetaError> {
        validate_name("topic name", &topic)?;
        retry_compare_and_swap(
            TOPIC_DELETE_ATTEMPTS_MAX,
            || self.try_create_partitions(&topic, expected_count, &partitions),
            || MetaError::Contended {
                what: format!("add partitions to topic {topic}"),
                attempts: TOPIC_DELETE_ATTEMPTS_MAX,
            },
        )
        .await
    }

    /// Every topic record, by name.
    pub(super) async fn topics_listed(&self) -> Result<Vec<TopicRecord>, MetaError> {
        let prefix = self.inner.layout.topics_prefix();
        let response = self.get_prefix("list the topics", prefix).await?;
        let mut topics = Vec::with_capacity(response.kvs().len());
        for kv in response.kvs() {
            let key = String::from_utf8_lossy(kv.key());
            if let Some(ParsedKey::Topic(_)) = self.inner.layout.parse(&key) {
                topics.push(decode_value::<TopicRecord>(&key, kv.value())?);
            }
        }
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(topics)
    }

    /// The fence floor of the name `topic`: its tombstone's, else the folded floor.
    pub(super) async fn deleted_topic_floor_of(
        &self,
        topic: String,
    ) -> Result<LeaderEpoch, MetaError> {
        validate_name("topic name", &topic)?;
        Ok(self.read_floor(&topic).await?.floor())
    }
}

/// A name's fence floor as read, with the revisions a transaction compares against (0: the key
/// is absent, which etcd compares as mod revision 0).
#[derive(Debug, Clone, Copy, Default)]
struct FloorRead {
    /// The name's own tombstone and its mod revision.
    own: Option<(LeaderEpoch, i64)>,
    /// The folded floor of names without a tombstone, and its mod revision.
    folded: Option<(LeaderEpoch, i64)>,
}

impl FloorRead {
    /// The floor the name has: its tombstone, else the folded floor.
    fn floor(&self) -> LeaderEpoch {
        match (self.own, self.folded) {
            (Some((own, _)), _) => own,
            (None, Some((folded, _))) => folded,
            (None, None) => 0,
        }
    }

    fn own_revision(&self) -> i64 {
        self.own.map_or(0, |(_, revision)| revision)
    }

    fn folded_revision(&self) -> i64 {
        self.folded.map_or(0, |(_, revision)| revision)
    }
}

impl EtcdMetaStore {
    /// Decodes a tombstone key-value into its floor and mod revision.
    fn tombstone_of(key: &str, kv: &KeyValue) -> Result<(LeaderEpoch, i64), MetaError> {
        let tombstone: TopicTombstone = decode_value(key, kv.value())?;
        Ok((tombstone.leader_epoch_floor, kv.mod_revision()))
    }

    /// Reads `topic`'s tombstone and the folded floor at one revision.
    async fn read_floor(&self, topic: &str) -> Result<FloorRead, MetaError> {
        let layout = &self.inner.layout;
        let own_key = layout.topic_tombstone_key(topic);
        let folded_key = layout.folded_tombstone_key();
        let txn = Txn::new().and_then([
            TxnOp::get(own_key.clone(), None),
            TxnOp::get(folded_key.clone(), None),
        ]);
        let response = self.txn("read the topic's fence floor", txn).await?;
        let mut read = FloorRead::default();
        for kv in txn_read(&response) {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            if key == own_key {
                read.own = Some(Self::tombstone_of(&key, &kv)?);
            } else if key == folded_key {
                read.folded = Some(Self::tombstone_of(&key, &kv)?);
            }
        }
        Ok(read)
    }

    /// One attempt at creating `topic` above its name's fence floor: `None` if a delete of the
    /// name changed the floor between the read and the transaction (read again).
    async fn try_create_topic(
        &self,
        topic: &TopicRecord,
        partitions: &[PartitionState],
    ) -> Result<Option<Vec<Versioned<PartitionState>>>, MetaError> {
        let floor = self.read_floor(&topic.name).await?;
        let mut topic = topic.clone();
        let mut partitions = partitions.to_vec();
        start_above_floor(&mut topic, &mut partitions, floor.floor())?;
        let layout = &self.inner.layout;
        let topic_key = layout.topic_key(&topic.name);
        let mut puts = Vec::with_capacity(partitions.len() + 1);
        puts.push(TxnOp::put(topic_key.clone(), encode_value(&topic), None));
        for (index, state) in partitions.iter().enumerate() {
            let id = PartitionId::new(&topic.name, index as u32);
            puts.push(TxnOp::put(
                layout.partition_key(&id),
                encode_value(state),
                None,
            ));
        }
        let txn = Txn::new()
            .when([
                Compare::create_revision(topic_key.clone(), CompareOp::Equal, 0),
                Compare::mod_revision(
                    layout.topic_tombstone_key(&topic.name),
                    CompareOp::Equal,
                    floor.own_revision(),
                ),
                Compare::mod_revision(
                    layout.folded_tombstone_key(),
                    CompareOp::Equal,
                    floor.folded_revision(),
                ),
            ])
            .and_then(puts)
            .or_else([TxnOp::get(topic_key, None)]);
        let response = self.txn("create the topic", txn).await?;
        if !response.succeeded() {
            if txn_read(&response).is_empty() {
                return Ok(None);
            }
            return Err(MetaError::AlreadyExists {
                what: format!("topic {}", topic.name),
            });
        }
        let revision = txn_revision(&response);
        Ok(Some(
            partitions
                .into_iter()
                .map(|value| Versioned { value, revision })
                .collect(),
        ))
    }

    /// One attempt at deleting `topic` and raising its tombstone: `None` if anything read
    /// changed before the transaction (an election raised an epoch: read again), `NotFound` if
    /// the topic is gone.
    ///
    /// The read and the compares: the topic record's mod revision; every partition key of the
    /// topic at a mod revision no later than the read (one range compare, so a topic of any
    /// partition count fits etcd's operation limit); the name's tombstone and the folded floor
    /// at the mod revisions read; and each tombstone folded away unchanged.
    async fn try_delete_topic(&self, topic: &str) -> Result<Option<TopicTombstone>, MetaError> {
        let layout = &self.inner.layout;
        let topic_key = layout.topic_key(topic);
        let partitions_prefix = layout.topic_partitions_prefix(topic);
        let own_key = layout.topic_tombstone_key(topic);
        let folded_key = layout.folded_tombstone_key();
        let tombstones_prefix = layout.topic_tombstones_prefix();
        let read = Txn::new().and_then([
            TxnOp::get(topic_key.clone(), None),
            TxnOp::get(
                partitions_prefix.clone(),
                Some(GetOptions::new().with_prefix()),
            ),
            TxnOp::get(
                tombstones_prefix.clone(),
                Some(GetOptions::new().with_prefix()),
            ),
            TxnOp::get(folded_key.clone(), None),
        ]);
        let response = self.txn("read the topic to delete", read).await?;
        let read_revision = txn_revision(&response);
        let mut topic_revision = None;
        let mut highest: LeaderEpoch = 0;
        let mut tombstones: Vec<(String, LeaderEpoch, i64)> = Vec::new();
        let mut folded: Option<(LeaderEpoch, i64)> = None;
        for kv in txn_read(&response) {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            if key == topic_key {
                let record: TopicRecord = decode_value(&key, kv.value())?;
                highest = highest.max(record.first_leader_epoch());
                topic_revision = Some(kv.mod_revision());
            } else if key.starts_with(&partitions_prefix) {
                let state: PartitionState = decode_value(&key, kv.value())?;
                highest = highest.max(state.leader_epoch);
            } else if let Some(name) = key.strip_prefix(&tombstones_prefix) {
                let (floor, revision) = Self::tombstone_of(&key, &kv)?;
                tombstones.push((name.to_owned(), floor, revision));
            } else if key == folded_key {
                folded = Some(Self::tombstone_of(&key, &kv)?);
            }
        }
        let Some(topic_revision) = topic_revision else {
            return Err(MetaError::NotFound {
                what: format!("topic {topic}"),
            });
        };
        let own = tombstones
            .iter()
            .find(|(name, _, _)| name == topic)
            .map(|(_, floor, revision)| (*floor, *revision));
        let floor_read = FloorRead { own, folded };
        let leader_epoch_floor = highest.max(floor_read.floor());
        let tombstone = TopicTombstone { leader_epoch_floor };
        // Fold the lowest other tombstones while the names kept would pass the limit.
        let listed = tombstones.len() + usize::from(own.is_none());
        let mut others: Vec<&(String, LeaderEpoch, i64)> = tombstones
            .iter()
            .filter(|(name, _, _)| name != topic)
            .collect();
        others.sort_by_key(|(name, floor, _)| (*floor, name.clone()));
        let folding = &others[..listed
            .saturating_sub(TOPIC_TOMBSTONES_MAX)
            .min(others.len())];
        let mut compares = vec![
            Compare::mod_revision(topic_key.clone(), CompareOp::Equal, topic_revision),
            Compare::mod_revision(
                partitions_prefix.clone(),
                CompareOp::Less,
                read_revision + 1,
            )
            .with_range(prefix_range_end(&partitions_prefix)),
            Compare::mod_revision(own_key.clone(), CompareOp::Equal, floor_read.own_revision()),
            Compare::mod_revision(
                folded_key.clone(),
                CompareOp::Equal,
                floor_read.folded_revision(),
            ),
        ];
        let mut operations = vec![
            // Partitions first, the record last: a watcher sees the topic go as one event.
            TxnOp::delete(partitions_prefix, Some(DeleteOptions::new().with_prefix())),
            TxnOp::delete(topic_key, None),
            TxnOp::put(own_key, encode_value(&tombstone), None),
        ];
        if !folding.is_empty() {
            let mut folded_floor = floor_read.folded.map_or(0, |(floor, _)| floor);
            for (name, floor, revision) in folding {
                let key = layout.topic_tombstone_key(name);
                compares.push(Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    *revision,
                ));
                operations.push(TxnOp::delete(key, None));
                folded_floor = folded_floor.max(*floor);
            }
            let folded_tombstone = TopicTombstone {
                leader_epoch_floor: folded_floor,
            };
            operations.push(TxnOp::put(
                folded_key,
                encode_value(&folded_tombstone),
                None,
            ));
        }
        let txn = Txn::new().when(compares).and_then(operations);
        let response = self.txn("delete the topic", txn).await?;
        Ok(response.succeeded().then_some(tombstone))
    }

    /// One attempt at replacing `topic`'s config: `None` if the record changed between the read
    /// and the transaction (read again); `NotFound` if the topic is gone,
    /// `TopicConfigChanged` if its config is no longer `expected`.
    async fn try_alter_topic_config(
        &self,
        topic: &str,
        expected: TopicConfig,
        config: TopicConfig,
    ) -> Result<Option<TopicRecord>, MetaError> {
        let key = self.inner.layout.topic_key(topic);
        let read = Txn::new().and_then([TxnOp::get(key.clone(), None)]);
        let response = self.txn("read the topic to alter", read).await?;
        let Some(kv) = txn_read(&response).into_iter().next() else {
            return Err(MetaError::NotFound {
                what: format!("topic {topic}"),
            });
        };
        let mut record: TopicRecord = decode_value(&key, kv.value())?;
        if record.config != expected {
            return Err(MetaError::TopicConfigChanged {
                topic: topic.to_owned(),
                current: record.config,
            });
        }
        record.config = config;
        // The record unchanged since the read (not deleted, not re-created, no other field
        // rewritten): else read again.
        let txn = Txn::new()
            .when([
                Compare::version(key.clone(), CompareOp::Greater, 0),
                Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision()),
            ])
            .and_then([TxnOp::put(key.clone(), encode_value(&record), None)]);
        let response = self.txn("compare-and-swap the topic record", txn).await?;
        Ok(response.succeeded().then_some(record))
    }

    /// One attempt at growing `topic` from `expected_count` partitions: `None` if the record
    /// changed between the read and the transaction (read again); `NotFound` if the topic is
    /// gone, `PartitionCountChanged` if it no longer has `expected_count` partitions.
    async fn try_create_partitions(
        &self,
        topic: &str,
        expected_count: u32,
        partitions: &[PartitionState],
    ) -> Result<Option<GrownTopic>, MetaError> {
        let layout = &self.inner.layout;
        let key = layout.topic_key(topic);
        let read = Txn::new().and_then([TxnOp::get(key.clone(), None)]);
        let response = self.txn("read the topic to grow", read).await?;
        let Some(kv) = txn_read(&response).into_iter().next() else {
            return Err(MetaError::NotFound {
                what: format!("topic {topic}"),
            });
        };
        let record: TopicRecord = decode_value(&key, kv.value())?;
        let mut states = partitions.to_vec();
        let grown = prepare_new_partitions(&record, expected_count, &mut states)?;
        let mut puts = Vec::with_capacity(states.len() + 1);
        puts.push(TxnOp::put(key.clone(), encode_value(&grown), None));
        for (offset, state) in states.iter().enumerate() {
            let index = expected_count + u32::try_from(offset).expect("at most 127 new");
            puts.push(TxnOp::put(
                layout.partition_key(&PartitionId::new(topic, index)),
                encode_value(state),
                None,
            ));
        }
        // The record unchanged since the read (not deleted, not re-created, not grown by
        // another, no config change): else read again, and a grow that came first answers
        // `PartitionCountChanged` on the next read.
        let txn = Txn::new()
            .when([
                Compare::version(key.clone(), CompareOp::Greater, 0),
                Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision()),
            ])
            .and_then(puts);
        let response = self.txn("grow the topic", txn).await?;
        if !response.succeeded() {
            return Ok(None);
        }
        let revision = txn_revision(&response);
        let created = states
            .into_iter()
            .map(|value| Versioned { value, revision })
            .collect();
        Ok(Some((grown, created)))
    }
}
