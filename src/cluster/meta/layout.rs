//! Where each piece of cluster metadata lives in etcd's key space (`docs/replication.md`, "etcd
//! layout"), in one place so that writers, readers and the watch agree on every byte of a key.
//!
//! ```text
//! /fencelog/<cluster>/brokers/<node_id>            BrokerRegistration (under the broker's lease)
//! /fencelog/<cluster>/topics/<name>                TopicRecord
//! /fencelog/<cluster>/partitions/<name>/<index>    PartitionState
//! ```
//!
//! Cluster and topic names are limited to `[A-Za-z0-9._-]` (the standalone topic rule), so
//! neither can contain the `/` that separates the parts, and the prefix of one topic's partitions
//! (`partitions/<name>/`) never covers another topic's.

use super::{MetaError, PartitionId};
use crate::cluster::NodeId;

/// The cluster name used when none is given (`--cluster-name`).
pub const DEFAULT_CLUSTER_NAME: &str = "fencelog";

/// Longest cluster or topic name, in bytes (the standalone topic name limit).
pub const NAME_BYTES_MAX: usize = 200;

/// What a key under the cluster's prefix addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParsedKey {
    /// `brokers/<node_id>`.
    Broker(NodeId),
    /// `topics/<name>`.
    Topic(String),
    /// `partitions/<name>/<index>`.
    Partition(PartitionId),
}

/// The keys of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    prefix: String,
}

impl KeyLayout {
    /// The layout of cluster `cluster_name` (checked like a topic name).
    pub fn new(cluster_name: &str) -> Result<Self, MetaError> {
        validate_name("cluster name", cluster_name)?;
        Ok(Self {
            prefix: format!("/fencelog/{cluster_name}/"),
        })
    }

    /// `/fencelog/<cluster>/`: every key of the cluster starts with it.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The prefix of every broker registration.
    pub fn brokers_prefix(&self) -> String {
        format!("{}brokers/", self.prefix)
    }

    /// The key of broker `node_id`'s registration.
    pub fn broker_key(&self, node_id: NodeId) -> String {
        format!("{}brokers/{node_id}", self.prefix)
    }

    /// The prefix of every topic record.
    pub fn topics_prefix(&self) -> String {
        format!("{}topics/", self.prefix)
    }

    /// The key of topic `name`'s record.
    pub fn topic_key(&self, name: &str) -> String {
        format!("{}topics/{name}", self.prefix)
    }

    /// The prefix of every partition state.
    pub fn partitions_prefix(&self) -> String {
        format!("{}partitions/", self.prefix)
    }

    /// The prefix of topic `name`'s partition states.
    pub fn topic_partitions_prefix(&self, name: &str) -> String {
        format!("{}partitions/{name}/", self.prefix)
    }

    /// The key of one partition's state.
    pub fn partition_key(&self, partition: &PartitionId) -> String {
        format!(
            "{}partitions/{}/{}",
            self.prefix, partition.topic, partition.partition
        )
    }

    /// What `key` addresses, or `None` for a key outside this layout (another cluster, or a
    /// kind of key a later version added: ignored, not an error).
    pub fn parse(&self, key: &str) -> Option<ParsedKey> {
        let rest = key.strip_prefix(&self.prefix)?;
        if let Some(node_id) = rest.strip_prefix("brokers/") {
            return canonical_number(node_id).map(ParsedKey::Broker);
        }
        if let Some(name) = rest.strip_prefix("topics/") {
            return validate_name("topic name", name)
                .ok()
                .map(|()| ParsedKey::Topic(name.to_owned()));
        }
        let rest = rest.strip_prefix("partitions/")?;
        let (topic, index) = rest.rsplit_once('/')?;
        validate_name("topic name", topic).ok()?;
        let partition = canonical_number(index)?;
        Some(ParsedKey::Partition(PartitionId::new(topic, partition)))
    }
}

/// Keys of deleted topics' fence floors (`docs/replication.md`, "Topic delete on a cluster").
/// Not parsed by [`KeyLayout::parse`] (the watch and snapshots leave them out: a broker reads
/// them only when it finds local files of a topic the store no longer has).
impl KeyLayout {
    /// The prefix of every deleted topic's tombstone.
    pub fn topic_tombstones_prefix(&self) -> String {
        format!("{}deleted-topics/", self.prefix)
    }

    /// The key of the tombstone of topic name `name`: a [`super::TopicTombstone`].
    pub fn topic_tombstone_key(&self, name: &str) -> String {
        format!("{}deleted-topics/{name}", self.prefix)
    }

    /// The key of the cluster-wide floor of every deleted name without a tombstone of its own
    /// (tombstones folded past [`super::TOPIC_TOMBSTONES_MAX`]): a [`super::TopicTombstone`].
    /// Outside [`KeyLayout::topic_tombstones_prefix`], so no name's tombstone can be it.
    pub fn folded_tombstone_key(&self) -> String {
        format!("{}deleted-topics-floor", self.prefix)
    }
}

/// The end of etcd's range for every key starting with `prefix` (its last byte plus one).
pub fn prefix_range_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Checks a cluster or topic name: 1 to [`NAME_BYTES_MAX`] bytes of `[A-Za-z0-9._-]`, not `.`
/// or `..` (the standalone topic rule, so a name is a safe key segment).
pub fn validate_name(what: &str, name: &str) -> Result<(), MetaError> {
    let valid = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(MetaError::Invalid(format!(
            "{what} {name:?} must be 1 to {NAME_BYTES_MAX} characters of [A-Za-z0-9._-] and not \
             . or .."
        )))
    }
}

/// A decimal `u32` written the way this layout writes it (no sign, no leading zero), so that
/// each number has exactly one key.
fn canonical_number(text: &str) -> Option<u32> {
    let number: u32 = text.parse().ok()?;
    (number.to_string() == text).then_some(number)
}

/// The keys of a cluster's users and ACLs (`crate::cluster::meta::security`):
///
/// ```text
/// /fencelog/<cluster>/users/<name>                 StoredUser (a SCRAM credential, no password)
/// /fencelog/<cluster>/acls/<principal>/<pattern>   AclEntry
/// ```
///
/// A principal name has no `/` (the user name rule), so the first `/` after `acls/` ends it and
/// the pattern is everything after, whatever it holds.
impl KeyLayout {
    /// The prefix of every user's credential.
    pub fn users_prefix(&self) -> String {
        format!("{}users/", self.prefix)
    }

    /// The key of user `name`'s credential.
    pub fn user_key(&self, name: &str) -> String {
        format!("{}users/{name}", self.prefix)
    }

    /// The prefix of every ACL entry.
    pub fn acls_prefix(&self) -> String {
        format!("{}acls/", self.prefix)
    }

    /// The key of the ACL entry of `principal` on topic pattern `pattern`.
    pub fn acl_key(&self, principal: &str, pattern: &str) -> String {
        format!("{}acls/{principal}/{pattern}", self.prefix)
    }

    /// The user name a key under [`Self::users_prefix`] addresses.
    pub fn parse_user_key<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix(&self.prefix)?.strip_prefix("users/")
    }

    /// The principal and pattern a key under [`Self::acls_prefix`] addresses.
    pub fn parse_acl_key<'a>(&self, key: &'a str) -> Option<(&'a str, &'a str)> {
        key.strip_prefix(&self.prefix)?
            .strip_prefix("acls/")?
            .split_once('/')
    }
}

#[cfg(test)]
mod security_key_tests {
    use super::*;

    /// User and ACL keys parse back; a pattern may hold anything after the principal's `/`;
    /// neither kind is mistaken for cluster metadata.
    #[test]
    fn user_and_acl_keys_parse_back() {
        let layout = KeyLayout::new("prod").unwrap();
        assert_eq!(layout.user_key("alice"), "/fencelog/prod/users/alice");
        assert_eq!(
            layout.parse_user_key(&layout.user_key("alice")),
            Some("alice")
        );
        let key = layout.acl_key("alice", "orders/eu-*");
        assert_eq!(key, "/fencelog/prod/acls/alice/orders/eu-*");
        assert_eq!(layout.parse_acl_key(&key), Some(("alice", "orders/eu-*")));
        assert_eq!(layout.parse(&key), None);
        assert_eq!(layout.parse(&layout.user_key("alice")), None);
        assert_eq!(layout.parse_acl_key("/fencelog/prod/acls/alice"), None);
        assert_eq!(layout.parse_user_key("/fencelog/other/users/alice"), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key this layout writes parses back to what it addresses.
    #[test]
    fn keys_parse_back() {
        let layout = KeyLayout::new("prod-1").unwrap();
        assert_eq!(layout.broker_key(7), "/fencelog/prod-1/brokers/7");
        assert_eq!(
            layout.parse(&layout.broker_key(7)),
            Some(ParsedKey::Broker(7))
        );
        assert_eq!(
            layout.parse(&layout.topic_key("orders")),
            Some(ParsedKey::Topic("orders".into()))
        );
        let partition = PartitionId::new("orders.v2", 12);
        assert_eq!(
            layout.partition_key(&partition),
            "/fencelog/prod-1/partitions/orders.v2/12"
        );
        assert_eq!(
            layout.parse(&layout.partition_key(&partition)),
            Some(ParsedKey::Partition(partition))
        );
    }

    /// Keys of another cluster, unknown kinds and non-canonical numbers are not ours.
    #[test]
    fn foreign_and_malformed_keys_are_ignored() {
        let layout = KeyLayout::new("a").unwrap();
        assert_eq!(layout.parse("/fencelog/b/brokers/1"), None);
        assert_eq!(layout.parse("/fencelog/a/brokers/01"), None);
        assert_eq!(layout.parse("/fencelog/a/brokers/-1"), None);
        assert_eq!(layout.parse("/fencelog/a/partitions/t"), None);
        assert_eq!(layout.parse("/fencelog/a/partitions/t/x"), None);
        assert_eq!(layout.parse("/fencelog/a/future/1"), None);
    }

    /// Names that could escape their key segment are refused.
    #[test]
    fn unsafe_names_are_refused() {
        for name in ["", ".", "..", "a/b", "a b", &"x".repeat(NAME_BYTES_MAX + 1)] {
            assert!(KeyLayout::new(name).is_err(), "{name:?}");
        }
        assert!(KeyLayout::new(DEFAULT_CLUSTER_NAME).is_ok());
    }

    /// A prefix's range end is the first key after every key with that prefix.
    #[test]
    fn prefix_range_end_increments_the_last_byte() {
        assert_eq!(prefix_range_end("/a/"), b"/a0".to_vec());
    }
}
