//! `topic.json`: a topic's settings on disk, in a format of its own.
//!
//! The wire's `TopicConfig` is not saved directly: a change to the wire type (a new field, a
//! renamed variant) must never silently change what is on disk, nor make an existing data
//! directory unreadable. This struct is the disk format; it converts to and from the domain type
//! explicitly, and carries a `format_version`.
//!
//! Versions: 0 is the file written before the version field existed (the same fields, no
//! `format_version`); 1 adds `format_version`. A file from a newer fencelog is refused with an
//! error that says so, rather than read wrongly.

use serde::{Deserialize, Serialize};

use crate::domain::{FlushPolicy, TopicConfig};

/// Name of the settings file in a topic's directory.
pub const TOPIC_FILE: &str = "topic.json";
/// The format version this build writes.
pub const TOPIC_FILE_VERSION: u32 = 1;

/// What `topic.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicFile {
    /// Layout version (absent, so 0, in files written before versions existed).
    #[serde(default)]
    pub format_version: u32,
    /// Number of partitions.
    pub partitions: u32,
    /// The topic's settings.
    pub config: StoredTopicConfig,
}

/// A topic's settings as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredTopicConfig {
    /// Segment file size in bytes.
    pub segment_bytes: u64,
    /// Flush policy.
    pub flush: StoredFlushPolicy,
    /// Size-based retention in bytes, if any.
    pub retention_bytes: Option<u64>,
    /// Time-based retention in milliseconds, if any.
    pub retention_ms: Option<u64>,
}

/// A flush policy as stored: `"never"`, `"always"` or `{"interval": {"interval_ms": N}}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredFlushPolicy {
    /// Page cache only.
    Never,
    /// Synced every `interval_ms`.
    Interval {
        /// Milliseconds between syncs.
        interval_ms: u64,
    },
    /// Synced before every acknowledgement.
    Always,
}

/// Why a `topic.json` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TopicFileError {
    /// Not the JSON this struct describes.
    #[error("not a valid topic file: {0}")]
    Malformed(#[from] serde_json::Error),
    /// Written by a newer fencelog.
    #[error("topic file format version {found} is newer than this build reads ({TOPIC_FILE_VERSION}); upgrade fencelog")]
    TooNew {
        /// The version found.
        found: u32,
    },
}

impl TopicFile {
    /// The file for a topic with these settings, in the current format version.
    pub fn new(partitions: u32, config: &TopicConfig) -> Self {
        let flush = match config.flush {
            FlushPolicy::Never => StoredFlushPolicy::Never,
            FlushPolicy::Interval { interval_ms } => StoredFlushPolicy::Interval { interval_ms },
            FlushPolicy::Always => StoredFlushPolicy::Always,
        };
        Self {
            format_version: TOPIC_FILE_VERSION,
            partitions,
            config: StoredTopicConfig {
                segment_bytes: config.segment_bytes,
                flush,
                retention_bytes: config.retention_bytes,
                retention_ms: config.retention_ms,
            },
        }
    }

    /// Reads a file of any version this build knows.
    pub fn parse(text: &str) -> Result<Self, TopicFileError> {
        let file: TopicFile = serde_json::from_str(text)?;
        if file.format_version > TOPIC_FILE_VERSION {
            return Err(TopicFileError::TooNew {
                found: file.format_version,
            });
        }
        Ok(file)
    }

    /// The bytes to write.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("a topic file always serializes")
    }

    /// The topic's settings as the domain type.
    pub fn config(&self) -> TopicConfig {
        let stored = self.config;
        TopicConfig {
            segment_bytes: stored.segment_bytes,
            flush: match stored.flush {
                StoredFlushPolicy::Never => FlushPolicy::Never,
                StoredFlushPolicy::Interval { interval_ms } => {
                    FlushPolicy::Interval { interval_ms }
                }
                StoredFlushPolicy::Always => FlushPolicy::Always,
            },
            retention_bytes: stored.retention_bytes,
            retention_ms: stored.retention_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file written before `format_version` existed (copied from a data directory made by the
    /// earlier build) reads with the same settings.
    #[test]
    fn version_zero_file_reads() {
        let text = r#"{
  "partitions": 1,
  "config": {
    "segment_bytes": 4096,
    "flush": {
      "interval": {
        "interval_ms": 250
      }
    },
    "retention_bytes": 1000000,
    "retention_ms": 3600000
  }
}"#;
        let file = TopicFile::parse(text).unwrap();
        assert_eq!(file.format_version, 0);
        assert_eq!(file.partitions, 1);
        let config = file.config();
        assert_eq!(config.flush, FlushPolicy::Interval { interval_ms: 250 });
        assert_eq!(config.retention_bytes, Some(1_000_000));
        assert_eq!(config.retention_ms, Some(3_600_000));
    }

    /// What this build writes reads back to the same settings, for every flush policy.
    #[test]
    fn written_file_round_trips() {
        for flush in [
            FlushPolicy::Never,
            FlushPolicy::Always,
            FlushPolicy::Interval { interval_ms: 7 },
        ] {
            let config = TopicConfig {
                flush,
                retention_bytes: None,
                ..TopicConfig::default()
            };
            let written = TopicFile::new(3, &config).to_json();
            let read = TopicFile::parse(std::str::from_utf8(&written).unwrap()).unwrap();
            assert_eq!(read.format_version, TOPIC_FILE_VERSION);
            assert_eq!(read.partitions, 3);
            assert_eq!(read.config(), config);
        }
    }

    /// A file from a newer build is refused, not misread.
    #[test]
    fn newer_version_is_refused() {
        let text = r#"{"format_version": 99, "partitions": 1, "config": {"segment_bytes": 4096,
            "flush": "never", "retention_bytes": null, "retention_ms": null}}"#;
        assert!(matches!(
            TopicFile::parse(text),
            Err(TopicFileError::TooNew { found: 99 })
        ));
    }
}
