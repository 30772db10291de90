//! A topic's settings as every layer sees them: what the client asks for when it creates a
//! topic, what metadata reports, and what the broker turns into per-partition storage settings.

use serde::{Deserialize, Serialize};

use super::{FlushPolicy, DEFAULT_SEGMENT_BYTES};

/// A topic's configuration, as sent in `CreateTopic` and returned by
/// `Metadata`, and as the broker applies it to storage.
///
/// The native wire format uses 0 for "unlimited" retention, so `Some(0)` cannot
/// be represented there: it is encoded as 0 and decodes as `None`. A server should
/// reject `Some(0)` from its own configuration sources as invalid config.
///
/// The serde derives serve the JSON the command line prints. The broker's on-disk `topic.json`
/// has its own versioned struct, so changing this type does not silently change the disk format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TopicConfig {
    /// Size at which the active segment is rolled to a new file.
    pub segment_bytes: u64,
    /// When appends are fsynced.
    pub flush: FlushPolicy,
    /// Delete old segments once a partition exceeds this many bytes.
    pub retention_bytes: Option<u64>,
    /// Delete segments whose newest record is older than this many ms.
    pub retention_ms: Option<u64>,
}

impl TopicConfig {
    /// Default segment size: [`DEFAULT_SEGMENT_BYTES`] (64 MiB).
    pub const DEFAULT_SEGMENT_BYTES: u64 = DEFAULT_SEGMENT_BYTES;
}

impl Default for TopicConfig {
    /// 64 MiB segments, fsync on every produce, keep everything forever.
    fn default() -> Self {
        TopicConfig {
            segment_bytes: Self::DEFAULT_SEGMENT_BYTES,
            flush: FlushPolicy::Always,
            retention_bytes: None,
            retention_ms: None,
        }
    }
}

/// A change of a topic's live settings (`fencelog topic alter`, the native `AlterTopicConfig`):
/// each field `None` is left as it is. The flush policy is not among them: it is chosen at
/// creation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TopicConfigChange {
    /// A new segment size (from the next roll).
    pub segment_bytes: Option<u64>,
    /// A new size-based retention (`Some(None)`: unlimited).
    pub retention_bytes: Option<Option<u64>>,
    /// A new time-based retention (`Some(None)`: unlimited).
    pub retention_ms: Option<Option<u64>>,
}

impl TopicConfigChange {
    /// `config` with this change.
    pub fn apply(&self, config: &TopicConfig) -> TopicConfig {
        TopicConfig {
            segment_bytes: self.segment_bytes.unwrap_or(config.segment_bytes),
            flush: config.flush,
            retention_bytes: self.retention_bytes.unwrap_or(config.retention_bytes),
            retention_ms: self.retention_ms.unwrap_or(config.retention_ms),
        }
    }

    /// Whether it changes nothing at all.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_durable_and_keeps_everything() {
        let config = TopicConfig::default();
        assert_eq!(config.segment_bytes, 64 * 1024 * 1024);
        assert_eq!(config.flush, FlushPolicy::Always);
        assert_eq!((config.retention_bytes, config.retention_ms), (None, None));
    }
}
