//! Errors of the committed-offset store: what a client is told when a commit or a read of a
//! committed offset fails. Each variant maps to one wire error code in every listener.

use std::path::PathBuf;

use thiserror::Error;

/// Why a commit or a read of a committed offset failed.
#[derive(Debug, Error)]
pub enum GroupOffsetsError {
    /// The group name is empty or longer than the limit.
    #[error("group name of {bytes} bytes is invalid: names are 1 to {max} bytes")]
    InvalidGroupName {
        /// Length of the name given.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The topic name cannot be stored (empty, or longer than a stored string can be).
    #[error("topic name of {bytes} bytes cannot be stored: names are 1 to {max} bytes")]
    InvalidTopicName {
        /// Length of the name given.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The metadata string is longer than the limit.
    #[error("offset metadata of {bytes} bytes exceeds the maximum of {max} bytes")]
    MetadataTooLarge {
        /// Length of the metadata given.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The store already holds the most groups it may; a new group cannot commit.
    #[error("the server already holds committed offsets of the maximum of {max} groups")]
    TooManyGroups {
        /// The limit.
        max: usize,
    },
    /// The group already holds committed offsets of the most partitions it may.
    #[error("group {group:?} already holds committed offsets of the maximum of {max} partitions")]
    TooManyOffsets {
        /// The group.
        group: String,
        /// The limit.
        max: usize,
    },
    /// The file holding the group's offsets failed its integrity check when the store opened:
    /// its offsets are not served (nor overwritten) until an operator repairs or removes it.
    #[error("committed offsets file {path} is damaged ({reason}); its groups are unavailable")]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// What check failed.
        reason: String,
    },
    /// The disk failed; a commit that fails this way is not acknowledged (and not kept).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The limits are unusable.
    #[error("invalid committed-offset store limits: {0}")]
    InvalidConfig(crate::domain::ConfigError),
}
