//! The ACL file (`DATA/acls.json`): which principal may do which operations on which topics, and
//! the changes `fencelog acl add|remove` make to it.
//!
//! An entry grants; nothing denies. A principal with no entry may do nothing (deny by default
//! once `--auth` is on); super users (`serve --super-user NAME`) are not checked at all.
//!
//! ```json
//! {"format": 1, "acls": [{"principal": "alice", "topic": "orders-*", "operations": ["produce"]}]}
//! ```

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::files::{self, SecurityFileError, ACLS_FILE};
use super::users::validate_user_name;

/// The version of the file's layout this build writes and reads.
pub const ACLS_FORMAT: u32 = 1;
/// Longest topic pattern, in bytes (a topic name's limit plus the `*`).
pub const MAX_PATTERN_BYTES: usize = 256;

/// What a request does to a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// Create a topic (native CreateTopic, Kafka CreateTopics).
    Create,
    /// Acquire, renew or release a partition's lease: a grant fences the current writer.
    Lease,
    /// Append records (native and Kafka Produce, Kafka InitProducerId).
    Produce,
    /// Read records and offsets, commit and read group offsets, take part in groups.
    Consume,
    /// Administer a topic (delete).
    Admin,
}

impl Operation {
    /// Every operation, in the order the CLI lists them.
    pub const ALL: [Operation; 5] = [
        Operation::Create,
        Operation::Lease,
        Operation::Produce,
        Operation::Consume,
        Operation::Admin,
    ];

    /// The lower-case name used by the CLI, the file and error messages.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Create => "create",
            Operation::Lease => "lease",
            Operation::Produce => "produce",
            Operation::Consume => "consume",
            Operation::Admin => "admin",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Operation {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Operation::ALL
            .into_iter()
            .find(|operation| operation.name() == text.trim())
            .ok_or_else(|| {
                format!(
                    "unknown operation {text:?}: use create, lease, produce, consume, admin or all"
                )
            })
    }
}

/// Parses `--ops`: a comma-separated list of operations, or `all`.
pub fn parse_operations(list: &str) -> Result<BTreeSet<Operation>, String> {
    if list.trim() == "all" {
        return Ok(Operation::ALL.into_iter().collect());
    }
    let operations: BTreeSet<Operation> = list
        .split(',')
        .filter(|part| !part.trim().is_empty())
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    if operations.is_empty() {
        return Err("--ops needs at least one operation".into());
    }
    Ok(operations)
}

/// A topic pattern: `*` (every topic), `prefix*` (names starting with the prefix), or a literal
/// name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPattern(String);

impl TopicPattern {
    /// Parses a pattern; a `*` anywhere but at the end is refused (no such pattern exists).
    pub fn parse(text: &str) -> Result<Self, String> {
        let star = text.find('*');
        if text.is_empty() || text.len() > MAX_PATTERN_BYTES {
            return Err(format!(
                "invalid topic pattern {text:?}: use '*', a name, or a prefix ending in '*' (at most {MAX_PATTERN_BYTES} bytes)"
            ));
        }
        if star.is_some_and(|position| position != text.len() - 1) {
            return Err(format!(
                "invalid topic pattern {text:?}: '*' may only end a pattern ('orders-*' or '*')"
            ));
        }
        Ok(Self(text.to_owned()))
    }

    /// Whether `topic` matches.
    pub fn matches(&self, topic: &str) -> bool {
        match self.0.strip_suffix('*') {
            Some(prefix) => topic.starts_with(prefix),
            None => self.0 == topic,
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Serialize for TopicPattern {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for TopicPattern {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        TopicPattern::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// One grant: `principal` may do `operations` on topics matching `topic`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclEntry {
    /// The user name.
    pub principal: String,
    /// The topics.
    pub topic: TopicPattern,
    /// What is allowed.
    pub operations: BTreeSet<Operation>,
}

/// The whole ACL file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclFile {
    /// Layout version ([`ACLS_FORMAT`]).
    #[serde(default = "acls_format")]
    pub format: u32,
    /// The grants, in the order they were added.
    #[serde(default)]
    pub acls: Vec<AclEntry>,
}

fn acls_format() -> u32 {
    ACLS_FORMAT
}

impl AclFile {
    /// Whether some entry lets `principal` do `operation` on `topic`.
    pub fn allows(&self, principal: &str, operation: Operation, topic: &str) -> bool {
        self.acls.iter().any(|entry| {
            entry.principal == principal
                && entry.operations.contains(&operation)
                && entry.topic.matches(topic)
        })
    }

    /// Whether some entry lets `principal` do `operation` on some topic.
    pub fn allows_somewhere(&self, principal: &str, operation: Operation) -> bool {
        self.acls
            .iter()
            .any(|entry| entry.principal == principal && entry.operations.contains(&operation))
    }

    /// Whether `principal` may do anything at all on `topic` (to see it in Metadata).
    pub fn allows_any(&self, principal: &str, topic: &str) -> bool {
        self.acls
            .iter()
            .any(|entry| entry.principal == principal && entry.topic.matches(topic))
    }
}

/// Grants `operations` on `pattern` to `principal` (merged into an existing entry for the same
/// principal and pattern). Returns the entry as stored.
pub fn add_acl(
    data_dir: &Path,
    principal: &str,
    pattern: &TopicPattern,
    operations: &BTreeSet<Operation>,
) -> Result<AclEntry, SecurityFileError> {
    validate_user_name(principal)?;
    files::update(data_dir, ACLS_FILE, |file: &mut AclFile| {
        file.format = ACLS_FORMAT;
        let existing = file
            .acls
            .iter_mut()
            .find(|entry| entry.principal == principal && entry.topic == *pattern);
        let entry = match existing {
            Some(entry) => {
                entry.operations.extend(operations.iter().copied());
                entry.clone()
            }
            None => {
                let entry = AclEntry {
                    principal: principal.to_owned(),
                    topic: pattern.clone(),
                    operations: operations.clone(),
                };
                file.acls.push(entry.clone());
                entry
            }
        };
        Ok(entry)
    })
}

/// Takes `operations` away from the entry of `principal` and `pattern` (the entry goes when
/// nothing is left). Returns whether an entry was changed.
pub fn remove_acl(
    data_dir: &Path,
    principal: &str,
    pattern: &TopicPattern,
    operations: &BTreeSet<Operation>,
) -> Result<bool, SecurityFileError> {
    files::update(data_dir, ACLS_FILE, |file: &mut AclFile| {
        let mut changed = false;
        for entry in file
            .acls
            .iter_mut()
            .filter(|entry| entry.principal == principal && entry.topic == *pattern)
        {
            let before = entry.operations.len();
            entry
                .operations
                .retain(|operation| !operations.contains(operation));
            changed |= entry.operations.len() != before;
        }
        file.acls.retain(|entry| !entry.operations.is_empty());
        Ok(changed)
    })
}

/// Every entry.
pub fn list_acls(data_dir: &Path) -> Result<Vec<AclEntry>, SecurityFileError> {
    let file: AclFile = files::open_read(data_dir, ACLS_FILE)?;
    Ok(file.acls)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `*` matches everything, `orders-*` the names with that prefix, a literal only itself.
    #[test]
    fn patterns_match_as_documented() {
        let all = TopicPattern::parse("*").unwrap();
        let prefix = TopicPattern::parse("orders-*").unwrap();
        let literal = TopicPattern::parse("payments").unwrap();
        assert!(all.matches("anything") && all.matches(""));
        assert!(prefix.matches("orders-eu") && prefix.matches("orders-"));
        assert!(!prefix.matches("orders") && !prefix.matches("payments"));
        assert!(literal.matches("payments"));
        assert!(!literal.matches("payments-x") && !literal.matches("payment"));
        for bad in ["", "*orders", "or*ders", "**"] {
            assert!(TopicPattern::parse(bad).is_err(), "{bad}");
        }
    }

    /// The judged example: produce on `orders-*`, nothing on `payments`.
    #[test]
    fn grants_are_per_principal_operation_and_pattern() {
        let file = AclFile {
            format: ACLS_FORMAT,
            acls: vec![AclEntry {
                principal: "alice".into(),
                topic: TopicPattern::parse("orders-*").unwrap(),
                operations: parse_operations("produce,consume").unwrap(),
            }],
        };
        assert!(file.allows("alice", Operation::Produce, "orders-eu"));
        assert!(!file.allows("alice", Operation::Lease, "orders-eu"));
        assert!(!file.allows("alice", Operation::Lease, "payments"));
        assert!(!file.allows("alice", Operation::Produce, "payments"));
        assert!(!file.allows("bob", Operation::Produce, "orders-eu"));
        assert!(file.allows_somewhere("alice", Operation::Consume));
        assert!(file.allows_any("alice", "orders-1") && !file.allows_any("alice", "payments"));
        assert!(parse_operations("all").unwrap().len() == Operation::ALL.len());
        assert!(parse_operations("produce,fly").is_err());
        assert!(parse_operations("").is_err());
    }

    /// Adding merges into one entry; removing takes operations away and drops empty entries.
    #[test]
    fn acls_are_added_merged_and_removed() {
        let directory = tempfile::tempdir().unwrap();
        let pattern = TopicPattern::parse("orders-*").unwrap();
        add_acl(
            directory.path(),
            "alice",
            &pattern,
            &parse_operations("produce").unwrap(),
        )
        .unwrap();
        let entry = add_acl(
            directory.path(),
            "alice",
            &pattern,
            &parse_operations("consume").unwrap(),
        )
        .unwrap();
        assert_eq!(
            entry.operations,
            parse_operations("produce,consume").unwrap()
        );
        assert_eq!(list_acls(directory.path()).unwrap().len(), 1);
        assert!(remove_acl(
            directory.path(),
            "alice",
            &pattern,
            &parse_operations("all").unwrap()
        )
        .unwrap());
        assert!(list_acls(directory.path()).unwrap().is_empty());
    }
}
