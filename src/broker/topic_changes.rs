//! Changes to the topics of the data directory: create, grow, alter and delete, each durable
//! before it is visible (files created and synced, then `topic.json`, then the topic map), and
//! the fence floors that keep a re-created topic's old holders fenced.
//!
//! Why apart from [`super::Broker`]'s file: opening the directory and serving its partitions is
//! one job, changing which topics it holds another.

use super::*;

impl Broker {
    /// Creates a topic durably: its settings file is written and fsynced before it is announced.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        config: TopicConfig,
    ) -> Result<Arc<Topic>, BrokerError> {
        validate_topic_name(name)?;
        if !(1..=MAX_PARTITIONS_PER_TOPIC).contains(&partitions) {
            return Err(BrokerError::InvalidConfig(format!(
                "partitions {partitions} is outside 1..={MAX_PARTITIONS_PER_TOPIC}"
            )));
        }
        partition_config(&config, partitions)
            .validate()
            .map_err(|error| BrokerError::InvalidConfig(error.to_string()))?;
        let _serialized = self.create_lock.lock().expect("create lock poisoned");
        {
            let topics = self.topics.read().expect("topics lock poisoned");
            if topics.contains_key(name) {
                return Err(BrokerError::TopicExists(name.to_string()));
            }
            if topics.len() >= MAX_TOPICS {
                return Err(BrokerError::InvalidConfig(format!(
                    "the broker already has the maximum of {MAX_TOPICS} topics"
                )));
            }
        }
        let topics_dir = self.data_dir.join("topics");
        let topic_dir = topics_dir.join(name);
        fs::create_dir_all(&topic_dir).map_err(io_error("create topic directory"))?;
        let floor = self
            .epoch_floors
            .lock()
            .expect("epoch floors lock poisoned")
            .floor(name);
        if floor > 0 {
            Self::record_creation_epochs(&topic_dir, 0..partitions, floor)?;
        }
        let topic = Self::open_topic(&topics_dir, name, partitions, config, &self.seal_worker)?;
        let file = TopicFile::new(partitions, &config).to_json();
        write_durably(&topic_dir, TOPIC_FILE, &file).map_err(io_error("write topic.json"))?;
        crate::storage::durable_file::sync_directory(&topics_dir)
            .map_err(io_error("sync topics directory"))?;
        let topic = Arc::new(topic);
        self.topics
            .write()
            .expect("topics lock poisoned")
            .insert(name.to_string(), Arc::clone(&topic));
        info!(topic = name, partitions, ?config, "created topic");
        Ok(topic)
    }

    /// Grows topic `name` to `partitions` partitions (the new total, as Kafka's
    /// CreatePartitions counts), durably, and serves the new ones at once. Partitions only ever
    /// grow: a count not above the current one, or above [`MAX_PARTITIONS_PER_TOPIC`], is
    /// [`BrokerError::InvalidPartitions`]; nothing changes then.
    ///
    /// In order, under the lock that serializes topic changes: the new partitions' directories
    /// are created (with the name's creation epoch above its fence floor, as for a new topic:
    /// [`Broker::record_creation_epochs`]) and opened; then `topic.json` records the new count
    /// (temporary file, fsync, rename, directory fsync); then metadata lists them. Why this
    /// order: a crash before the rename leaves `topic.json` at the old count, and the topic
    /// opens as it was (the empty new directories are ignored, and reused by the next grow);
    /// after it, the topic opens with every partition (a directory that is missing is
    /// created by the open). No record was ever served from a new directory before the file
    /// named it, so nothing acknowledged can be lost either way.
    pub fn add_partitions(&self, name: &str, partitions: u32) -> Result<Arc<Topic>, BrokerError> {
        validate_topic_name(name)?;
        let _serialized = self.create_lock.lock().expect("create lock poisoned");
        let topic = self.topic(name)?;
        let current = u32::try_from(topic.partitions.len()).expect("partition counts fit u32");
        check_partition_growth(name, current, partitions, MAX_PARTITIONS_PER_TOPIC)?;
        let topics_dir = self.data_dir.join("topics");
        let topic_dir = topics_dir.join(name);
        let floor = self
            .epoch_floors
            .lock()
            .expect("epoch floors lock poisoned")
            .floor(name);
        if floor > 0 {
            Self::record_creation_epochs(&topic_dir, current..partitions, floor)?;
        }
        let jobs: Vec<_> = open_jobs(&topics_dir, name, partitions, &topic.config)
            .into_iter()
            .skip(current as usize)
            .collect();
        let added = partition_opener::open_all(&jobs, &self.seal_worker)
            .into_iter()
            .map(|opened| opened.map(|(partition, _)| PartitionSlot::Open(partition)))
            .collect::<Result<Vec<_>, _>>()?;
        let file = TopicFile::new(partitions, &topic.config).to_json();
        write_durably(&topic_dir, TOPIC_FILE, &file).map_err(io_error("write topic.json"))?;
        let mut slots = topic.partitions.clone();
        slots.extend(added);
        let grown = Arc::new(Topic {
            name: name.to_string(),
            config: topic.config,
            partitions: slots,
        });
        self.topics
            .write()
            .expect("topics lock poisoned")
            .insert(name.to_string(), Arc::clone(&grown));
        info!(
            topic = name,
            from = current,
            to = partitions,
            "added partitions"
        );
        Ok(grown)
    }

    /// Changes the settings of an existing topic that can change while it is open: segment size
    /// and retention. Durable first (`topic.json` written to a temporary file, fsynced and
    /// renamed over the old one), then applied to every open partition (the next retention pass
    /// and the next roll use it) and to what metadata reports. The flush policy cannot change
    /// here (`BrokerError::InvalidConfig` names it). Setting what is already there is a no-op.
    ///
    /// `change` computes the new settings from the current ones, under the lock that serializes
    /// topic changes (so two concurrent changes cannot both start from the same settings).
    pub fn alter_topic_config(
        &self,
        name: &str,
        change: impl FnOnce(&TopicConfig) -> Result<TopicConfig, BrokerError>,
    ) -> Result<Arc<Topic>, BrokerError> {
        let _serialized = self.create_lock.lock().expect("create lock poisoned");
        let topic = self.topic(name)?;
        let config = change(&topic.config)?;
        if topic.config == config {
            return Ok(topic);
        }
        if topic.config.flush != config.flush {
            return Err(BrokerError::InvalidConfig(format!(
                "topic {name:?}: the flush policy ({}) cannot change on an existing topic; \
                 create a new topic with the policy wanted",
                topic.config.flush
            )));
        }
        let partitions = topic.partitions.len() as u32;
        partition_config(&config, partitions)
            .validate()
            .map_err(|error| BrokerError::InvalidConfig(error.to_string()))?;
        let topic_dir = self.data_dir.join("topics").join(name);
        let file = TopicFile::new(partitions, &config).to_json();
        write_durably(&topic_dir, TOPIC_FILE, &file).map_err(io_error("write topic.json"))?;
        let limits = crate::storage::Limits {
            segment_bytes: config.segment_bytes,
            retention_bytes: config.retention_bytes,
            retention_ms: config.retention_ms,
        };
        for partition in topic.open_partitions() {
            partition
                .set_limits(limits)
                .map_err(|error| BrokerError::InvalidConfig(error.to_string()))?;
        }
        let altered = Arc::new(Topic {
            name: name.to_string(),
            config,
            partitions: topic.partitions.clone(),
        });
        self.topics
            .write()
            .expect("topics lock poisoned")
            .insert(name.to_string(), Arc::clone(&altered));
        info!(topic = name, ?config, "altered topic config");
        Ok(altered)
    }

    /// Gives each partition of a topic re-created under a deleted one's name the creation epoch
    /// `floor + 1`, durably, before the partitions are opened: holders of the old epochs are
    /// fenced and the first grant is above all of them.
    fn record_creation_epochs(
        topic_dir: &Path,
        partitions: std::ops::Range<u32>,
        floor: u64,
    ) -> Result<(), BrokerError> {
        let creation_epoch = floor.checked_add(1).ok_or_else(|| {
            BrokerError::InvalidConfig(format!(
                "the deleted topic of this name used up every epoch ({floor})"
            ))
        })?;
        for index in partitions {
            let directory = topic_dir.join(index.to_string());
            fs::create_dir_all(&directory).map_err(io_error("create partition directory"))?;
            crate::storage::fence::EpochCheckpoint::load(&directory)
                .and_then(|mut checkpoint| checkpoint.record_creation(creation_epoch))
                .map_err(io_error(format!(
                    "record creation epoch {creation_epoch} in {}",
                    directory.display()
                )))?;
        }
        crate::storage::durable_file::sync_directory(topic_dir)
            .map_err(io_error("sync topic directory"))
    }

    /// Deletes a topic durably (blocking). In order: its partitions are retired (appends and
    /// epoch installs already inside a partition's writer finish, none starts after), the
    /// highest epoch they ever installed becomes the name's fence floor (durable before
    /// anything is removed), the topic stops being served, its directory is renamed into
    /// `DATA/deleted/` (both directories fsynced), and every group's committed offsets for it
    /// are forgotten. The files themselves are left to [`DeletedTopic::remove_files`]. If the
    /// floor or the rename fails, the topic is served again as it was and the error returned.
    pub fn delete_topic(&self, name: &str) -> Result<DeletedTopic, BrokerError> {
        validate_topic_name(name)?;
        let _serialized = self.create_lock.lock().expect("create lock poisoned");
        let topic = self.topic(name)?;
        // A partition that could not be opened has an epoch nobody could read: deleting it would
        // lose its part of the name's fence floor, so the topic stays until it opens again.
        for (index, slot) in topic.partitions.iter().enumerate() {
            if let PartitionSlot::Unavailable(reason) = slot {
                return Err(BrokerError::PartitionUnavailable {
                    topic: name.to_string(),
                    partition: u32::try_from(index).expect("partition indexes fit u32"),
                    reason: format!(
                        "{reason}; a topic is deleted only once every partition opens, so that \
                         no epoch it issued is forgotten: repair it and restart first"
                    ),
                });
            }
        }
        let floor = topic
            .open_partitions()
            .map(|partition| partition.retire())
            .max()
            .unwrap_or(0);
        let files = match self.record_floor_and_move(name, floor) {
            Ok(files) => files,
            Err(error) => {
                for partition in topic.open_partitions() {
                    partition.reinstate();
                }
                return Err(error);
            }
        };
        self.topics
            .write()
            .expect("topics lock poisoned")
            .remove(name);
        let topics_dir = self.data_dir.join("topics");
        let deleted_dir = self.data_dir.join(DELETED_DIRECTORY);
        crate::storage::durable_file::sync_directory(&topics_dir)
            .and_then(|()| crate::storage::durable_file::sync_directory(&deleted_dir))
            .map_err(io_error(format!(
                "topic {name:?} is deleted but the deletion may not survive a crash (syncing the \
                 topics directories failed); after a restart, delete it again if it is back"
            )))?;
        let prefix = format!("{name}/");
        self.interval_syncs
            .lock()
            .expect("interval lock poisoned")
            .retain(|partition, _| !partition.starts_with(&prefix));
        if let Err(error) = self.group_offsets.forget_topics(|topic| topic == name) {
            // The delete itself is durable; the next start after a crash forgets them, and until
            // then a commit or fetch of the deleted topic's offsets answers UNKNOWN_TOPIC anyway.
            tracing::error!(topic = name, %error, "could not forget the deleted topic's committed offsets");
        }
        info!(topic = name, floor, "deleted topic");
        Ok(DeletedTopic {
            name: name.to_string(),
            partitions: topic.partitions.len() as u32,
            floor,
            files,
        })
    }

    /// The first steps of a delete: the floor, durably, then the rename out of `topics/` (made
    /// durable by the caller). Nothing is served from the old files once this succeeded.
    fn record_floor_and_move(&self, name: &str, floor: u64) -> Result<PathBuf, BrokerError> {
        self.epoch_floors
            .lock()
            .expect("epoch floors lock poisoned")
            .raise(name, floor)
            .map_err(io_error(format!(
                "record the fence floor {floor} of topic {name:?}"
            )))?;
        let topics_dir = self.data_dir.join("topics");
        let deleted_dir = self.data_dir.join(DELETED_DIRECTORY);
        fs::create_dir_all(&deleted_dir)
            .and_then(|()| crate::storage::durable_file::sync_directory(&self.data_dir))
            .map_err(io_error("create the deleted-topics directory"))?;
        let suffix: u64 = rand::random();
        let files = deleted_dir.join(format!("{name}.{suffix:016x}"));
        fs::rename(topics_dir.join(name), &files).map_err(io_error(format!(
            "move topic {name:?} into {}",
            deleted_dir.display()
        )))?;
        Ok(files)
    }
}
