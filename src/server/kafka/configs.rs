//! Kafka's names for fencelog's settings, shared by DescribeConfigs, AlterConfigs,
//! IncrementalAlterConfigs and CreateTopics (v5+ returns a created topic's configs).
//!
//! Topic configs (every setting a fencelog topic has; `docs/kafka.md`, "Configs"):
//!
//! | Kafka name | fencelog setting | live (alterable) |
//! |---|---|---|
//! | `retention.ms` | `retention_ms` (-1: unlimited) | yes |
//! | `retention.bytes` | `retention_bytes` (-1: unlimited) | yes |
//! | `segment.bytes` | `segment_bytes` (from the next roll) | yes |
//! | `cleanup.policy` | always `delete` | only to `delete` |
//! | `min.insync.replicas` | the partitions' `min_insync` | no (set at creation) |
//! | `message.timestamp.type` | always `CreateTime` | only to `CreateTime` |
//! | `max.message.bytes` | largest batch: min(8 MiB, segment size) | no |
//! | `fencelog.flush` | the flush policy (`always`, `never`, `interval:Nms`) | no |
//!
//! A key that is not live may still be "set" to the value it has (tools that write a whole
//! config set back do that); any other value is `POLICY_VIOLATION` naming the key. An unknown
//! key or a malformed value is `INVALID_CONFIG` naming it. Broker configs are all read-only.

use kafka_protocol::ResponseError;

use crate::broker::{BrokerError, BrokerService, MAX_PARTITIONS_PER_TOPIC, MAX_TOPICS};
use crate::domain::{TopicConfig, DEFAULT_SEGMENT_BYTES};
use crate::storage::config::DEFAULT_MAX_BATCH_BYTES;

/// Partitions of a topic created with `num_partitions` -1 (Kafka's `num.partitions` default).
pub const DEFAULT_KAFKA_PARTITIONS: u32 = 1;

/// Most resources one DescribeConfigs, AlterConfigs or IncrementalAlterConfigs request may
/// name; the ones past it are answered `INVALID_REQUEST` (a broker holds at most
/// [`MAX_TOPICS`] topics, so describing all of them fits).
pub const CONFIG_RESOURCES_MAX: usize = MAX_TOPICS + 16;

/// Kafka's resource type of a topic.
pub const RESOURCE_TOPIC: i8 = 2;
/// Kafka's resource type of a broker.
pub const RESOURCE_BROKER: i8 = 4;

/// Where a config's value comes from (Kafka's `ConfigSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub enum ConfigSource {
    /// Set on the topic (at creation or by an alter).
    TopicConfig = 1,
    /// Given to the broker at start (`serve` flags).
    StaticBrokerConfig = 4,
    /// fencelog's default.
    Default = 5,
}

/// Kafka's `ConfigType` (DescribeConfigs v3+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub enum ConfigType {
    /// A string.
    String = 2,
    /// A 32-bit integer.
    Int = 3,
    /// A 64-bit integer.
    Long = 5,
    /// A comma-separated list.
    List = 7,
}

/// One config as DescribeConfigs reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// Kafka's name.
    pub name: &'static str,
    /// Its value now.
    pub value: String,
    /// Where it comes from.
    pub source: ConfigSource,
    /// Whether no alter can change it (a no-op "change" to its value is still accepted).
    pub read_only: bool,
    /// Its type.
    pub config_type: ConfigType,
    /// What it means in fencelog (DescribeConfigs v3+ `include_documentation`).
    pub documentation: &'static str,
}

/// Every topic key fencelog knows, in the order DescribeConfigs lists them.
pub const TOPIC_KEYS: [&str; 8] = [
    "cleanup.policy",
    "fencelog.flush",
    "max.message.bytes",
    "message.timestamp.type",
    "min.insync.replicas",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
];

fn source(is_default: bool) -> ConfigSource {
    if is_default {
        ConfigSource::Default
    } else {
        ConfigSource::TopicConfig
    }
}

fn unlimited(value: Option<u64>) -> String {
    value.map_or_else(|| "-1".to_string(), |value| value.to_string())
}

/// The configs of a topic with `config` and `min_insync` (its partitions' `min_insync`,
/// `default_min_insync` the value a topic of its factor gets when none is asked for).
pub fn topic_configs(
    config: &TopicConfig,
    min_insync: u16,
    default_min_insync: u16,
) -> Vec<ConfigEntry> {
    let max_message =
        DEFAULT_MAX_BATCH_BYTES.min(usize::try_from(config.segment_bytes).unwrap_or(usize::MAX));
    vec![
        ConfigEntry {
            name: "cleanup.policy",
            value: "delete".into(),
            source: ConfigSource::Default,
            read_only: true,
            config_type: ConfigType::List,
            documentation: "fencelog deletes whole old segments by retention; it never compacts",
        },
        ConfigEntry {
            name: "fencelog.flush",
            value: config.flush.to_string(),
            source: source(config.flush == TopicConfig::default().flush),
            read_only: true,
            config_type: ConfigType::String,
            documentation: "when appends are fsynced: always (before the acknowledgement), interval:Nms, or never; set at creation",
        },
        ConfigEntry {
            name: "max.message.bytes",
            value: max_message.to_string(),
            source: ConfigSource::Default,
            read_only: true,
            config_type: ConfigType::Int,
            documentation: "largest record batch a partition accepts: 8 MiB, and never more than a segment",
        },
        ConfigEntry {
            name: "message.timestamp.type",
            value: "CreateTime".into(),
            source: ConfigSource::Default,
            read_only: true,
            config_type: ConfigType::String,
            documentation: "fencelog keeps the producer's timestamps",
        },
        ConfigEntry {
            name: "min.insync.replicas",
            value: min_insync.to_string(),
            source: source(min_insync == default_min_insync),
            read_only: true,
            config_type: ConfigType::Int,
            documentation: "smallest ISR with which a leader accepts acks=all writes; set at creation",
        },
        ConfigEntry {
            name: "retention.bytes",
            value: unlimited(config.retention_bytes),
            source: source(config.retention_bytes.is_none()),
            read_only: false,
            config_type: ConfigType::Long,
            documentation: "delete the oldest sealed segments while a partition is larger than this (-1: unlimited)",
        },
        ConfigEntry {
            name: "retention.ms",
            value: unlimited(config.retention_ms),
            source: source(config.retention_ms.is_none()),
            read_only: false,
            config_type: ConfigType::Long,
            documentation: "delete sealed segments whose newest record is older than this (-1: unlimited)",
        },
        ConfigEntry {
            name: "segment.bytes",
            value: config.segment_bytes.to_string(),
            source: source(config.segment_bytes == DEFAULT_SEGMENT_BYTES),
            read_only: false,
            config_type: ConfigType::Int,
            documentation: "size of a partition's segment files (4096 to 1 GiB); a change applies from the next roll",
        },
    ]
}

/// The configs of `topic` as this broker has it now.
pub fn topic_configs_of(
    service: &BrokerService,
    topic: &str,
) -> Result<Vec<ConfigEntry>, BrokerError> {
    let local = service.broker().topic(topic)?;
    let manager = service.replica_manager();
    let state = manager.partition_state(topic, 0);
    let factor = u16::try_from(state.replicas.len())
        .unwrap_or(u16::MAX)
        .max(1);
    let default_min_insync = manager.default_min_insync(factor);
    Ok(topic_configs(
        local.config(),
        state.min_insync.max(1),
        default_min_insync,
    ))
}

/// The broker's configs: all read-only.
pub fn broker_configs(service: &BrokerService) -> Vec<ConfigEntry> {
    let manager = service.replica_manager();
    let replication_factor = manager.default_replication_factor();
    let entry = |name, value: String, source, config_type, documentation| ConfigEntry {
        name,
        value,
        source,
        read_only: true,
        config_type,
        documentation,
    };
    use ConfigSource::{Default as D, StaticBrokerConfig as S};
    use ConfigType::{Int, Long, String as Str};
    vec![
        entry("auto.create.topics.enable", "false".into(), D, Str, "fencelog creates topics only when asked"),
        entry("broker.id", service.node_id().to_string(), S, Int, "this broker's node id (serve --node-id)"),
        entry(
            "default.replication.factor",
            replication_factor.to_string(),
            D,
            Int,
            "replicas of a topic created with factor -1: 1 standalone, min(3, live brokers) in a cluster",
        ),
        entry("fencelog.max.partitions.per.topic", MAX_PARTITIONS_PER_TOPIC.to_string(), D, Int, "most partitions a topic may have"),
        entry("fencelog.max.topics", MAX_TOPICS.to_string(), D, Int, "most topics a broker holds"),
        entry(
            "fencelog.mode",
            manager.mode_name().into(),
            S,
            Str,
            "standalone, or a member of a cluster coordinated by etcd (serve --etcd)",
        ),
        entry("log.dirs", service.broker().data_dir().display().to_string(), S, Str, "the data directory (serve --data-dir)"),
        entry("log.retention.bytes", "-1".into(), D, Long, "retention.bytes of a topic created without it"),
        entry("log.retention.ms", "-1".into(), D, Long, "retention.ms of a topic created without it"),
        entry("log.segment.bytes", DEFAULT_SEGMENT_BYTES.to_string(), D, Int, "segment.bytes of a topic created without it"),
        entry("message.max.bytes", DEFAULT_MAX_BATCH_BYTES.to_string(), D, Int, "largest record batch a partition accepts"),
        entry(
            "min.insync.replicas",
            manager.default_min_insync(u16::MAX).to_string(),
            D,
            Int,
            "min.insync.replicas of a topic created without it: min(2, its replication factor)",
        ),
        entry(
            "num.partitions",
            DEFAULT_KAFKA_PARTITIONS.to_string(),
            D,
            Int,
            "partitions of a topic created with num_partitions -1",
        ),
    ]
}

/// A config change refused, with the Kafka error and a message naming the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The error code.
    pub error: ResponseError,
    /// What to tell the client.
    pub message: String,
}

impl Refusal {
    /// A refusal of `error` saying `message`.
    pub fn new(error: ResponseError, message: impl Into<String>) -> Self {
        Self {
            error,
            message: message.into(),
        }
    }
}

/// One requested change of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Set the value (AlterConfigs, IncrementalAlterConfigs SET = 0).
    Set,
    /// Back to the default (IncrementalAlterConfigs DELETE = 1).
    Delete,
    /// Add to a list (APPEND = 2).
    Append,
    /// Remove from a list (SUBTRACT = 3).
    Subtract,
}

impl Operation {
    /// IncrementalAlterConfigs' `config_operation`.
    pub fn from_code(code: i8) -> Option<Self> {
        Some(match code {
            0 => Self::Set,
            1 => Self::Delete,
            2 => Self::Append,
            3 => Self::Subtract,
            _ => return None,
        })
    }
}

/// A change of a live topic setting, applied to the config current when the change is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveChange {
    /// `retention.ms` (`None`: unlimited).
    RetentionMs(Option<u64>),
    /// `retention.bytes` (`None`: unlimited).
    RetentionBytes(Option<u64>),
    /// `segment.bytes`.
    SegmentBytes(u64),
}

impl LiveChange {
    /// `config` with this change.
    pub fn apply(self, config: &mut TopicConfig) {
        match self {
            LiveChange::RetentionMs(value) => config.retention_ms = value,
            LiveChange::RetentionBytes(value) => config.retention_bytes = value,
            LiveChange::SegmentBytes(value) => config.segment_bytes = value,
        }
    }

    /// The change that resets the live key `name` to its default, if it is one.
    fn reset(name: &str) -> Option<Self> {
        match name {
            "retention.ms" => Some(LiveChange::RetentionMs(None)),
            "retention.bytes" => Some(LiveChange::RetentionBytes(None)),
            "segment.bytes" => Some(LiveChange::SegmentBytes(DEFAULT_SEGMENT_BYTES)),
            _ => None,
        }
    }
}

/// -1 is unlimited (`None`); a positive number is itself; anything else is refused.
pub fn unlimited_or_positive(value: &str) -> Result<Option<u64>, String> {
    match value.trim().parse::<i64>() {
        Ok(-1) => Ok(None),
        Ok(number) if number > 0 => Ok(Some(number as u64)),
        Ok(number) => Err(format!(
            "{number} is not supported (use -1 for unlimited or a positive number)"
        )),
        Err(_) => Err(format!("{value:?} is not a number")),
    }
}

/// The live changes a topic gets for `requested` (key, operation, value), checked against the
/// topic's configs now (`current`, for the read-only keys' no-op rule). `replace_all` is
/// AlterConfigs: every live key not named goes back to its default, as Kafka's AlterConfigs
/// replaces a resource's whole config set.
pub fn topic_changes(
    current: &[ConfigEntry],
    requested: &[(String, Operation, Option<String>)],
    replace_all: bool,
) -> Result<Vec<LiveChange>, Refusal> {
    let mut seen = std::collections::HashSet::new();
    let mut changes = Vec::new();
    for (name, operation, value) in requested {
        if !seen.insert(name.as_str()) {
            return Err(Refusal::new(
                ResponseError::InvalidRequest,
                format!("config {name} appears more than once for the resource"),
            ));
        }
        let invalid = |why: String| {
            Refusal::new(
                ResponseError::InvalidConfig,
                format!("config {name}: {why}"),
            )
        };
        let Some(entry) = current.iter().find(|entry| entry.name == name) else {
            return Err(invalid(format!(
                "not a fencelog topic config (known: {})",
                TOPIC_KEYS.join(", ")
            )));
        };
        if let Some(reset) = (*operation == Operation::Delete)
            .then(|| LiveChange::reset(name))
            .flatten()
        {
            changes.push(reset);
            continue;
        }
        if matches!(operation, Operation::Append | Operation::Subtract)
            && entry.config_type != ConfigType::List
        {
            return Err(invalid(
                "APPEND and SUBTRACT apply only to list configs".into(),
            ));
        }
        if entry.read_only {
            let unchanged = match operation {
                // The default is the one value it has.
                Operation::Delete => true,
                Operation::Set | Operation::Append => {
                    value.as_deref().map(str::trim) == Some(entry.value.as_str())
                }
                Operation::Subtract => false,
            };
            if unchanged {
                continue;
            }
            return Err(Refusal::new(
                ResponseError::PolicyViolation,
                format!(
                    "config {name} cannot change on a fencelog topic (it is {}); {}",
                    entry.value, entry.documentation
                ),
            ));
        }
        let Some(value) = value.as_deref() else {
            return Err(invalid("a value is required".into()));
        };
        changes.push(match name.as_str() {
            "retention.ms" => {
                LiveChange::RetentionMs(unlimited_or_positive(value).map_err(invalid)?)
            }
            "retention.bytes" => {
                LiveChange::RetentionBytes(unlimited_or_positive(value).map_err(invalid)?)
            }
            "segment.bytes" => match unlimited_or_positive(value).map_err(invalid)? {
                Some(bytes) => LiveChange::SegmentBytes(bytes),
                None => return Err(invalid("must be a positive number of bytes".into())),
            },
            _ => unreachable!("every live key is matched above"),
        });
    }
    if replace_all {
        for key in ["retention.ms", "retention.bytes", "segment.bytes"] {
            if !seen.contains(key) {
                changes.extend(LiveChange::reset(key));
            }
        }
    }
    Ok(changes)
}

/// The refusal of any change of a broker config (all are read-only): a no-op "change" to a
/// key's value passes; an unknown key is `INVALID_CONFIG`.
pub fn broker_changes(
    current: &[ConfigEntry],
    requested: &[(String, Operation, Option<String>)],
) -> Result<(), Refusal> {
    for (name, operation, value) in requested {
        let Some(entry) = current.iter().find(|entry| entry.name == name) else {
            return Err(Refusal::new(
                ResponseError::InvalidConfig,
                format!("config {name}: not a fencelog broker config"),
            ));
        };
        let unchanged = *operation == Operation::Set
            && value.as_deref().map(str::trim) == Some(entry.value.as_str());
        if !unchanged {
            return Err(Refusal::new(
                ResponseError::PolicyViolation,
                format!(
                    "broker config {name} cannot change while the broker runs (it is {}): {}",
                    entry.value, entry.documentation
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str, value: &str) -> (String, Operation, Option<String>) {
        (name.to_string(), Operation::Set, Some(value.to_string()))
    }

    #[test]
    fn every_topic_key_is_described_once_in_order() {
        let configs = topic_configs(&TopicConfig::default(), 1, 1);
        let names: Vec<&str> = configs.iter().map(|entry| entry.name).collect();
        assert_eq!(names, TOPIC_KEYS);
        assert!(configs
            .iter()
            .all(|entry| entry.source == ConfigSource::Default));
    }

    #[test]
    fn live_keys_change_and_others_are_refused_by_name() {
        let current = topic_configs(&TopicConfig::default(), 1, 1);
        let changes = topic_changes(
            &current,
            &[
                set("retention.ms", "60000"),
                set("segment.bytes", "8192"),
                set("cleanup.policy", "delete"),
            ],
            false,
        )
        .unwrap();
        let mut config = TopicConfig::default();
        for change in changes {
            change.apply(&mut config);
        }
        assert_eq!(config.retention_ms, Some(60_000));
        assert_eq!(config.segment_bytes, 8192);
        let refused =
            topic_changes(&current, &[set("cleanup.policy", "compact")], false).unwrap_err();
        assert_eq!(refused.error, ResponseError::PolicyViolation);
        assert!(
            refused.message.contains("cleanup.policy"),
            "{}",
            refused.message
        );
        let refused =
            topic_changes(&current, &[set("fencelog.flush", "never")], false).unwrap_err();
        assert!(refused.message.contains("fencelog.flush"));
        let unknown =
            topic_changes(&current, &[set("compression.type", "zstd")], false).unwrap_err();
        assert_eq!(unknown.error, ResponseError::InvalidConfig);
        assert!(unknown.message.contains("compression.type"));
        let bad = topic_changes(&current, &[set("retention.ms", "0")], false).unwrap_err();
        assert_eq!(bad.error, ResponseError::InvalidConfig);
    }

    #[test]
    fn alter_configs_resets_the_live_keys_it_does_not_name() {
        let config = TopicConfig {
            retention_bytes: Some(1000),
            ..TopicConfig::default()
        };
        let current = topic_configs(&config, 1, 1);
        let mut altered = config;
        for change in topic_changes(&current, &[set("retention.ms", "5000")], true).unwrap() {
            change.apply(&mut altered);
        }
        assert_eq!(altered.retention_ms, Some(5000));
        assert_eq!(altered.retention_bytes, None);
    }
}
