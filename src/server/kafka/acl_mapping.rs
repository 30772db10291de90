//! Kafka ACL bindings ⇄ fencelog grants: the one place that says which Kafka ACL is which
//! fencelog grant and back (DescribeAcls, CreateAcls and DeleteAcls use it; `docs/security.md`
//! has the same table).
//!
//! A fencelog grant ([`AclEntry`]) gives a principal (a user name) a set of operations on a
//! topic pattern. A Kafka binding gives a principal (`User:NAME`) from a host one operation on a
//! resource pattern, allowed or denied. Both ways:
//!
//! | Kafka | fencelog |
//! |---|---|
//! | resource `TOPIC` | the only resource: grants are per topic pattern |
//! | pattern `LITERAL` `name` | `name` |
//! | pattern `LITERAL` `*` | `*` (every topic) |
//! | pattern `PREFIXED` `orders-` | `orders-*` |
//! | principal `User:alice` | `alice` |
//! | host `*` | (grants are not per host) |
//! | permission `ALLOW` | a grant (there is nothing else) |
//! | `READ` | `consume` |
//! | `WRITE` | `produce` |
//! | `CREATE` | `create` |
//! | `DELETE` | `admin` |
//! | `ALTER` | `lease` |
//! | `ALL` | all five (`create`, `lease`, `produce`, `consume`, `admin`) |
//!
//! A grant holding all five operations is described as one `ALL` binding, any other as one
//! binding per operation. What has no fencelog meaning is refused per binding, saying why, and
//! never approximated by a wider grant: a `DENY` (fencelog has no deny, only the absence of a
//! grant), a host other than `*`, another principal type, the resources `GROUP`, `CLUSTER`,
//! `TRANSACTIONAL_ID`, `USER` and `DELEGATION_TOKEN`, and the operations `DESCRIBE`,
//! `DESCRIBE_CONFIGS`, `ALTER_CONFIGS`, `IDEMPOTENT_WRITE`, `CLUSTER_ACTION` and the token
//! operations (see [`operations_of`] for each reason).

use std::collections::BTreeSet;

use crate::auth::acl::{AclEntry, Operation, TopicPattern};

/// Kafka's `ResourceType` codes.
pub mod resource_type {
    /// Not a type: refused in a filter or a creation.
    pub const UNKNOWN: i8 = 0;
    /// Any type (filters only).
    pub const ANY: i8 = 1;
    /// A topic.
    pub const TOPIC: i8 = 2;
    /// A consumer group.
    pub const GROUP: i8 = 3;
    /// The cluster.
    pub const CLUSTER: i8 = 4;
    /// A transactional id.
    pub const TRANSACTIONAL_ID: i8 = 5;
    /// A delegation token.
    pub const DELEGATION_TOKEN: i8 = 6;
    /// A user (quotas, SCRAM credentials).
    pub const USER: i8 = 7;
}

/// Kafka's `PatternType` codes.
pub mod pattern_type {
    /// Not a type: refused.
    pub const UNKNOWN: i8 = 0;
    /// Any pattern with exactly the filter's name (filters only).
    pub const ANY: i8 = 1;
    /// Every pattern that matches the filter's name (filters only).
    pub const MATCH: i8 = 2;
    /// The name itself (`*`: every resource).
    pub const LITERAL: i8 = 3;
    /// Every name starting with it.
    pub const PREFIXED: i8 = 4;
}

/// Kafka's `AclOperation` codes.
pub mod operation {
    /// Not an operation: refused.
    pub const UNKNOWN: i8 = 0;
    /// Any operation (filters only).
    pub const ANY: i8 = 1;
    /// Every operation.
    pub const ALL: i8 = 2;
    /// Read (fencelog `consume`).
    pub const READ: i8 = 3;
    /// Write (fencelog `produce`).
    pub const WRITE: i8 = 4;
    /// Create (fencelog `create`).
    pub const CREATE: i8 = 5;
    /// Delete (fencelog `admin`).
    pub const DELETE: i8 = 6;
    /// Alter (fencelog `lease`).
    pub const ALTER: i8 = 7;
    /// Describe: no fencelog grant.
    pub const DESCRIBE: i8 = 8;
    /// Cluster action: no fencelog grant.
    pub const CLUSTER_ACTION: i8 = 9;
    /// Describe configs: no fencelog grant.
    pub const DESCRIBE_CONFIGS: i8 = 10;
    /// Alter configs: no fencelog grant.
    pub const ALTER_CONFIGS: i8 = 11;
    /// Idempotent write: no fencelog grant.
    pub const IDEMPOTENT_WRITE: i8 = 12;
}

/// Kafka's `AclPermissionType` codes.
pub mod permission {
    /// Not a permission: refused.
    pub const UNKNOWN: i8 = 0;
    /// Any permission (filters only).
    pub const ANY: i8 = 1;
    /// Deny: fencelog has none.
    pub const DENY: i8 = 2;
    /// Allow: a fencelog grant.
    pub const ALLOW: i8 = 3;
}

/// The principal type of every fencelog principal.
pub const USER_PRINCIPAL_PREFIX: &str = "User:";
/// The only host a fencelog grant has.
pub const ANY_HOST: &str = "*";

/// A Kafka ACL binding as fencelog describes one of its grants (resource type `TOPIC`, host
/// `*`, permission `ALLOW`), with the fencelog operations it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The resource name (`orders`, `*`, or a prefix).
    pub resource_name: String,
    /// [`pattern_type::LITERAL`] or [`pattern_type::PREFIXED`].
    pub pattern_type: i8,
    /// The fencelog principal (without `User:`).
    pub principal: String,
    /// The fencelog pattern the binding comes from.
    pub pattern: TopicPattern,
    /// The Kafka operation.
    pub operation: i8,
    /// The fencelog operations it stands for (several for `ALL`).
    pub operations: BTreeSet<Operation>,
}

impl Binding {
    /// `User:NAME`.
    pub fn kafka_principal(&self) -> String {
        format!("{USER_PRINCIPAL_PREFIX}{}", self.principal)
    }
}

/// A fencelog grant made from one Kafka binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The user name.
    pub principal: String,
    /// The topic pattern.
    pub pattern: TopicPattern,
    /// The operations.
    pub operations: BTreeSet<Operation>,
}

/// The Kafka operation standing for one fencelog operation.
pub fn kafka_operation(operation: Operation) -> i8 {
    match operation {
        Operation::Consume => operation::READ,
        Operation::Produce => operation::WRITE,
        Operation::Create => operation::CREATE,
        Operation::Admin => operation::DELETE,
        Operation::Lease => operation::ALTER,
    }
}

/// The fencelog operations a Kafka operation on a topic stands for, or why there are none.
pub fn operations_of(kafka: i8) -> Result<BTreeSet<Operation>, String> {
    let one = |operation: Operation| Ok(BTreeSet::from([operation]));
    match kafka {
        operation::ALL => Ok(Operation::ALL.into_iter().collect()),
        operation::READ => one(Operation::Consume),
        operation::WRITE => one(Operation::Produce),
        operation::CREATE => one(Operation::Create),
        operation::DELETE => one(Operation::Admin),
        operation::ALTER => one(Operation::Lease),
        operation::DESCRIBE => Err("fencelog has no describe-only grant: a principal sees a topic (Metadata, configs, offsets) when it has any grant on it; grant READ instead".into()),
        operation::DESCRIBE_CONFIGS => Err("fencelog has no configs-only grant: describing a topic's configs needs any grant on it; grant READ instead".into()),
        operation::ALTER_CONFIGS => Err("altering a topic's configs needs fencelog's admin, which also deletes the topic; grant DELETE if that is meant".into()),
        operation::IDEMPOTENT_WRITE => Err("IDEMPOTENT_WRITE is a CLUSTER operation; in fencelog WRITE (produce) on a topic lets a producer be idempotent".into()),
        operation::CLUSTER_ACTION => Err("CLUSTER_ACTION is for brokers; fencelog's brokers authenticate as `serve --broker-user`".into()),
        operation::ANY | operation::UNKNOWN => Err(format!("operation {kafka} is a filter value, not an operation a grant can hold")),
        other => Err(format!("operation {other} has no meaning on a fencelog topic")),
    }
}

/// Why a Kafka resource type other than `TOPIC` has no fencelog grant.
fn resource_refusal(kind: i8) -> String {
    match kind {
        resource_type::GROUP => "fencelog's consumer groups are not ACL resources: joining a group and committing its offsets need READ (consume) on the topics; grant that on TOPIC".into(),
        resource_type::CLUSTER => "fencelog has no cluster grants: cluster-wide rights belong to super users (`serve --super-user NAME`); describing the cluster needs DELETE (admin) on some topic".into(),
        resource_type::TRANSACTIONAL_ID => "fencelog has no transactions, so no transactional id grants".into(),
        resource_type::ANY | resource_type::UNKNOWN => format!("resource type {kind} is a filter value, not a resource a grant can name"),
        other => format!("resource type {other} is not an ACL resource in fencelog; only TOPIC is"),
    }
}

/// The fencelog pattern of a Kafka topic resource pattern.
pub fn pattern_of(kind: i8, name: &str) -> Result<TopicPattern, String> {
    match kind {
        pattern_type::LITERAL if name == "*" => TopicPattern::parse("*"),
        pattern_type::LITERAL if name.contains('*') => Err(format!(
            "literal topic name {name:?} contains '*', which no topic name can: use PREFIXED for a prefix, or the literal '*' for every topic"
        )),
        pattern_type::LITERAL => TopicPattern::parse(name),
        pattern_type::PREFIXED if name.is_empty() || name.contains('*') => Err(format!(
            "prefix {name:?} is not a topic name prefix: it must be non-empty and without '*'"
        )),
        pattern_type::PREFIXED => TopicPattern::parse(&format!("{name}*")),
        other => Err(format!(
            "pattern type {other} is not one a grant can hold: use LITERAL or PREFIXED"
        )),
    }
}

/// The Kafka resource pattern (pattern type, name) of a fencelog pattern.
pub fn kafka_pattern(pattern: &TopicPattern) -> (i8, String) {
    let text = pattern.as_str();
    match text.strip_suffix('*') {
        Some("") => (pattern_type::LITERAL, "*".to_owned()),
        Some(prefix) => (pattern_type::PREFIXED, prefix.to_owned()),
        None => (pattern_type::LITERAL, text.to_owned()),
    }
}

/// The fencelog user name of a Kafka principal.
fn principal_of(kafka: &str) -> Result<String, String> {
    match kafka.strip_prefix(USER_PRINCIPAL_PREFIX) {
        Some(name) if !name.is_empty() => Ok(name.to_owned()),
        _ => Err(format!(
            "principal {kafka:?} is not a fencelog principal: write User:NAME with a fencelog user's name"
        )),
    }
}

/// One Kafka ACL to create, as its fields arrive.
#[derive(Debug, Clone, Copy)]
pub struct Creation<'a> {
    /// Resource type.
    pub resource_type: i8,
    /// Resource name.
    pub resource_name: &'a str,
    /// Pattern type.
    pub pattern_type: i8,
    /// Principal (`User:NAME`).
    pub principal: &'a str,
    /// Host.
    pub host: &'a str,
    /// Operation.
    pub operation: i8,
    /// Permission.
    pub permission: i8,
}

/// The fencelog grant of a Kafka ACL to create, or why it cannot be one.
pub fn grant_of(creation: &Creation<'_>) -> Result<Grant, String> {
    if creation.permission == permission::DENY {
        return Err("fencelog has no DENY ACLs: a principal may do only what a grant allows (deny by default), so remove the grant that allows it instead (DeleteAcls)".into());
    }
    if creation.permission != permission::ALLOW {
        return Err(format!(
            "permission type {} is not one a grant can hold: use ALLOW",
            creation.permission
        ));
    }
    if creation.resource_type != resource_type::TOPIC {
        return Err(resource_refusal(creation.resource_type));
    }
    if creation.host != ANY_HOST {
        return Err(format!(
            "host {:?}: fencelog grants are not per host; use '*'",
            creation.host
        ));
    }
    Ok(Grant {
        principal: principal_of(creation.principal)?,
        pattern: pattern_of(creation.pattern_type, creation.resource_name)?,
        operations: operations_of(creation.operation)?,
    })
}

/// The Kafka bindings describing one fencelog grant: `ALL` for a grant of every operation,
/// else one per operation.
pub fn bindings_of(entry: &AclEntry) -> Vec<Binding> {
    let (pattern_type, resource_name) = kafka_pattern(&entry.topic);
    let binding = |operation: i8, operations: BTreeSet<Operation>| Binding {
        resource_name: resource_name.clone(),
        pattern_type,
        principal: entry.principal.clone(),
        pattern: entry.topic.clone(),
        operation,
        operations,
    };
    if entry.operations.len() == Operation::ALL.len() {
        return vec![binding(operation::ALL, entry.operations.clone())];
    }
    entry
        .operations
        .iter()
        .map(|&operation| binding(kafka_operation(operation), BTreeSet::from([operation])))
        .collect()
}

/// A DescribeAcls or DeleteAcls filter, as its fields arrive.
#[derive(Debug, Clone, Copy)]
pub struct Filter<'a> {
    /// Resource type (`ANY` matches every one).
    pub resource_type: i8,
    /// Resource name (`None`: any).
    pub resource_name: Option<&'a str>,
    /// Pattern type (`ANY`, `MATCH`, `LITERAL`, `PREFIXED`).
    pub pattern_type: i8,
    /// Principal (`None`: any).
    pub principal: Option<&'a str>,
    /// Host (`None`: any).
    pub host: Option<&'a str>,
    /// Operation (`ANY` matches every one).
    pub operation: i8,
    /// Permission (`ANY` matches every one).
    pub permission: i8,
}

impl Filter<'_> {
    /// Refuses a filter Kafka's broker refuses too (an `UNKNOWN` field).
    pub fn validate(&self) -> Result<(), String> {
        let fields = [
            ("resource type", self.resource_type, resource_type::UNKNOWN),
            ("pattern type", self.pattern_type, pattern_type::UNKNOWN),
            ("operation", self.operation, operation::UNKNOWN),
            ("permission type", self.permission, permission::UNKNOWN),
        ];
        for (field, value, unknown) in fields {
            if value == unknown {
                return Err(format!(
                    "the filter's {field} is UNKNOWN ({value}): use ANY to match every one"
                ));
            }
        }
        Ok(())
    }

    /// Whether `binding` (a fencelog grant's, so `TOPIC`, host `*`, `ALLOW`) matches.
    pub fn matches(&self, binding: &Binding) -> bool {
        let resource = matches!(
            self.resource_type,
            resource_type::ANY | resource_type::TOPIC
        );
        let principal = self
            .principal
            .is_none_or(|principal| principal == binding.kafka_principal());
        let host = self.host.is_none_or(|host| host == ANY_HOST);
        let operation = self.operation == operation::ANY || self.operation == binding.operation;
        let permission = matches!(self.permission, permission::ANY | permission::ALLOW);
        resource && principal && host && operation && permission && self.pattern_matches(binding)
    }

    fn pattern_matches(&self, binding: &Binding) -> bool {
        let same_name = self
            .resource_name
            .is_none_or(|name| name == binding.resource_name);
        match self.pattern_type {
            pattern_type::ANY => same_name,
            pattern_type::LITERAL | pattern_type::PREFIXED => {
                same_name && self.pattern_type == binding.pattern_type
            }
            pattern_type::MATCH => match self.resource_name {
                None => true,
                Some(name) => {
                    (binding.pattern_type == pattern_type::LITERAL
                        && (binding.resource_name == name || binding.resource_name == "*"))
                        || (binding.pattern_type == pattern_type::PREFIXED
                            && name.starts_with(&binding.resource_name))
                }
            },
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::acl::parse_operations;

    fn creation<'a>(name: &'a str, pattern: i8, operation: i8) -> Creation<'a> {
        Creation {
            resource_type: resource_type::TOPIC,
            resource_name: name,
            pattern_type: pattern,
            principal: "User:alice",
            host: "*",
            operation,
            permission: permission::ALLOW,
        }
    }

    fn filter() -> Filter<'static> {
        Filter {
            resource_type: resource_type::ANY,
            resource_name: None,
            pattern_type: pattern_type::ANY,
            principal: None,
            host: None,
            operation: operation::ANY,
            permission: permission::ANY,
        }
    }

    /// Every row of the table round-trips: a Kafka binding becomes a grant whose description
    /// is the same binding (pattern, principal and operation).
    #[test]
    fn the_mapping_round_trips_both_ways() {
        let cases = [
            ("orders", pattern_type::LITERAL, "orders"),
            ("*", pattern_type::LITERAL, "*"),
            ("orders-", pattern_type::PREFIXED, "orders-*"),
        ];
        let operations = [
            operation::READ,
            operation::WRITE,
            operation::CREATE,
            operation::DELETE,
            operation::ALTER,
            operation::ALL,
        ];
        for (name, kind, fencelog) in cases {
            for kafka in operations {
                let grant = grant_of(&creation(name, kind, kafka)).unwrap();
                assert_eq!(grant.principal, "alice");
                assert_eq!(grant.pattern.as_str(), fencelog);
                let entry = AclEntry {
                    principal: grant.principal,
                    topic: grant.pattern,
                    operations: grant.operations,
                };
                let bindings = bindings_of(&entry);
                assert_eq!(bindings.len(), 1, "{name} {kafka}");
                assert_eq!(
                    (bindings[0].resource_name.as_str(), bindings[0].pattern_type),
                    (name, kind)
                );
                assert_eq!(bindings[0].operation, kafka);
                assert_eq!(bindings[0].kafka_principal(), "User:alice");
            }
        }
    }

    /// What has no fencelog meaning is refused, never widened: DENY, hosts, other principal
    /// types, other resources, describe-style operations, bad patterns.
    #[test]
    fn what_fencelog_cannot_hold_is_refused_saying_why() {
        let deny = Creation {
            permission: permission::DENY,
            ..creation("orders", pattern_type::LITERAL, operation::READ)
        };
        assert!(grant_of(&deny).unwrap_err().contains("no DENY"));
        let host = Creation {
            host: "10.0.0.1",
            ..creation("orders", pattern_type::LITERAL, operation::READ)
        };
        assert!(grant_of(&host).unwrap_err().contains("not per host"));
        let group = Creation {
            resource_type: resource_type::GROUP,
            ..creation("g", pattern_type::LITERAL, operation::READ)
        };
        assert!(grant_of(&group).unwrap_err().contains("consumer groups"));
        let principal = Creation {
            principal: "Group:ops",
            ..creation("orders", pattern_type::LITERAL, operation::READ)
        };
        assert!(grant_of(&principal).unwrap_err().contains("User:NAME"));
        for refused in [
            operation::DESCRIBE,
            operation::DESCRIBE_CONFIGS,
            operation::ALTER_CONFIGS,
            operation::IDEMPOTENT_WRITE,
            operation::ANY,
        ] {
            assert!(grant_of(&creation("orders", pattern_type::LITERAL, refused)).is_err());
        }
        assert!(grant_of(&creation("or*ders", pattern_type::LITERAL, operation::READ)).is_err());
        assert!(grant_of(&creation("", pattern_type::PREFIXED, operation::READ)).is_err());
        assert!(grant_of(&creation("orders", pattern_type::MATCH, operation::READ)).is_err());
    }

    /// A grant of some operations is one binding per operation; filters match by resource,
    /// pattern (ANY, LITERAL, PREFIXED, MATCH), principal, host, operation and permission.
    #[test]
    fn filters_match_as_kafka_defines_them() {
        let entry = AclEntry {
            principal: "alice".into(),
            topic: TopicPattern::parse("orders-*").unwrap(),
            operations: parse_operations("produce,consume").unwrap(),
        };
        let bindings = bindings_of(&entry);
        assert_eq!(bindings.len(), 2);
        let read = bindings
            .iter()
            .find(|binding| binding.operation == operation::READ)
            .unwrap();
        assert!(filter().matches(read));
        let by_match = Filter {
            resource_name: Some("orders-eu"),
            pattern_type: pattern_type::MATCH,
            ..filter()
        };
        assert!(by_match.matches(read));
        let other_topic = Filter {
            resource_name: Some("payments"),
            ..by_match
        };
        assert!(!other_topic.matches(read));
        let prefixed = Filter {
            resource_name: Some("orders-"),
            pattern_type: pattern_type::PREFIXED,
            ..filter()
        };
        assert!(prefixed.matches(read));
        let literal = Filter {
            pattern_type: pattern_type::LITERAL,
            ..prefixed
        };
        assert!(!literal.matches(read));
        let write_only = Filter {
            operation: operation::WRITE,
            ..filter()
        };
        assert!(!write_only.matches(read));
        let bob = Filter {
            principal: Some("User:bob"),
            ..filter()
        };
        assert!(!bob.matches(read));
        let deny = Filter {
            permission: permission::DENY,
            ..filter()
        };
        assert!(!deny.matches(read));
        let groups = Filter {
            resource_type: resource_type::GROUP,
            ..filter()
        };
        assert!(!groups.matches(read));
        let unknown = Filter {
            operation: operation::UNKNOWN,
            ..filter()
        };
        assert!(unknown.validate().is_err() && filter().validate().is_ok());
    }
}
