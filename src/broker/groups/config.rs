//! The limits of the committed-offset store, in one place: each has a name, a default, a check
//! in [`GroupOffsetsConfig::validate`] and an error a client is told when a request meets it.
//!
//! The store rewrites a bucket file on every commit, so these limits are also what bounds the
//! size of one write: at most `max_offsets_per_group` entries of at most `max_metadata_bytes`
//! each.

use crate::domain::{ConfigError, Quantity};

/// Default longest consumer group name, in bytes.
pub const DEFAULT_MAX_GROUP_NAME_BYTES: usize = 255;
/// Default most consumer groups with committed offsets.
pub const DEFAULT_MAX_GROUPS: usize = 10_000;
/// Default most committed partitions of one group.
pub const DEFAULT_MAX_OFFSETS_PER_GROUP: usize = 4_096;
/// Default longest metadata string stored with a committed offset, in bytes (Kafka's
/// `offset.metadata.max.bytes` default).
pub const DEFAULT_MAX_METADATA_BYTES: usize = 4_096;
/// The longest a name or metadata string can be in the store's file (a `u16` length).
pub const MAX_STORED_STRING_BYTES: usize = u16::MAX as usize;

/// Limits of the committed-offset store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupOffsetsConfig {
    /// Longest group name in bytes; names are 1 to this many bytes of UTF-8.
    pub max_group_name_bytes: usize,
    /// Most groups that hold committed offsets; a commit that would add one more is refused.
    pub max_groups: usize,
    /// Most partitions one group can hold committed offsets for.
    pub max_offsets_per_group: usize,
    /// Longest metadata string stored with an offset, in bytes (0 refuses any metadata).
    pub max_metadata_bytes: usize,
}

impl Default for GroupOffsetsConfig {
    fn default() -> Self {
        Self {
            max_group_name_bytes: DEFAULT_MAX_GROUP_NAME_BYTES,
            max_groups: DEFAULT_MAX_GROUPS,
            max_offsets_per_group: DEFAULT_MAX_OFFSETS_PER_GROUP,
            max_metadata_bytes: DEFAULT_MAX_METADATA_BYTES,
        }
    }
}

impl GroupOffsetsConfig {
    /// Refuses a group name the store cannot hold (empty, or past its limit).
    pub fn check_group(&self, group: &str) -> Result<(), super::GroupOffsetsError> {
        let max = self.max_group_name_bytes;
        if group.is_empty() || group.len() > max {
            return Err(super::GroupOffsetsError::InvalidGroupName {
                bytes: group.len(),
                max,
            });
        }
        Ok(())
    }

    /// Checks that every limit is usable: groups and offsets at least 1, names and metadata
    /// within what the file format can hold.
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_range(
            "max_group_name_bytes",
            Quantity::bytes(self.max_group_name_bytes),
            Quantity::Bytes(1),
            Quantity::bytes(MAX_STORED_STRING_BYTES),
        )?;
        ConfigError::check_range(
            "max_metadata_bytes",
            Quantity::bytes(self.max_metadata_bytes),
            Quantity::Bytes(0),
            Quantity::bytes(MAX_STORED_STRING_BYTES),
        )?;
        ConfigError::check_positive("max_groups", Quantity::count(self.max_groups))?;
        ConfigError::check_positive(
            "max_offsets_per_group",
            Quantity::count(self.max_offsets_per_group),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_zero_limits_are_refused() {
        assert_eq!(GroupOffsetsConfig::default().validate(), Ok(()));
        let no_groups = GroupOffsetsConfig {
            max_groups: 0,
            ..GroupOffsetsConfig::default()
        };
        assert!(no_groups.validate().is_err());
        let long_names = GroupOffsetsConfig {
            max_group_name_bytes: MAX_STORED_STRING_BYTES + 1,
            ..GroupOffsetsConfig::default()
        };
        assert!(long_names.validate().is_err());
    }
}
