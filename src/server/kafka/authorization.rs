//! ACL checks on the Kafka listener, before a request reaches its handler: the same
//! [`Access`] (principal, operation, topic) the native listener asks, with Kafka's error codes.
//! Each API's rule and its answer to a refused request are in its own file under
//! [`super::handlers`] (`KafkaApi::authorize` and `KafkaApi::refuse`); this module holds what
//! they share.
//!
//! Choices a Kafka client can observe, common to every API:
//! - Only a server with `--auth` checks (a connection without a principal is never refused).
//! - A request is checked whole before anything runs: if any topic in it is refused, every
//!   topic-partition of the request is answered `TOPIC_AUTHORIZATION_FAILED` (29) and nothing is
//!   appended, read or committed. (Kafka's broker answers per partition and runs the allowed
//!   ones; all-or-nothing is simpler to reason about and a client handles it the same way.)
//! - Requests that name no topic (group APIs, InitProducerId, the transaction APIs) need the
//!   operation on some topic; they answer `GROUP_AUTHORIZATION_FAILED` (30),
//!   `CLUSTER_AUTHORIZATION_FAILED` (31) or `TRANSACTIONAL_ID_AUTHORIZATION_FAILED` as Kafka's
//!   checks of the same requests do. fencelog has no group or transactional-id ACLs.
//! - The config APIs, CreatePartitions, DescribeLogDirs, DescribeProducers and the ACL APIs are
//!   checked per resource by their handlers (the other resources of the request still run);
//!   the ACL APIs through [`acl_api_security`]. Metadata leaves out, or refuses, the topics
//!   the principal may not see.

use kafka_protocol::ResponseError;

use crate::auth::{Access, NotAuthorized, Operation, Security};

/// `TOPIC_AUTHORIZATION_FAILED`, which every topic-partition of a refused request is answered.
pub const TOPIC_REFUSED: i16 = 29;

/// `GROUP_AUTHORIZATION_FAILED`, the answer of a group API refused.
pub fn group_refused() -> i16 {
    ResponseError::GroupAuthorizationFailed.code()
}

/// Checks `operation` on every topic named (all must pass).
pub fn each<'a>(
    access: &Access,
    operation: Operation,
    topics: impl IntoIterator<Item = &'a str>,
) -> Result<(), NotAuthorized> {
    for topic in topics {
        access.check(operation, topic)?;
    }
    Ok(())
}

/// What an ACL API may use: the server's [`Security`], or the error code and message to
/// answer with. Without `--auth` there are no ACLs (`SECURITY_DISABLED`). Describing them needs
/// `admin` on some topic (Kafka: DESCRIBE on the cluster); changing them needs a super user
/// (Kafka: ALTER on the cluster), because a grant can give any right on any topic: a principal
/// allowed to change ACLs can give itself everything, so only one that has everything may.
pub fn acl_api_security(
    access: &Access,
    change: bool,
) -> Result<std::sync::Arc<Security>, (i16, String)> {
    let Some(security) = access.security() else {
        return Err((
            ResponseError::SecurityDisabled.code(),
            "this server runs without --auth, so it has no ACLs: start it with `serve --auth` (and users) to use them".to_owned(),
        ));
    };
    let checked = if change {
        access.check_super_user("the ACLs")
    } else {
        access.check_somewhere(Operation::Admin)
    };
    if let Err(refused) = checked {
        tracing::info!(%refused, "Kafka ACL request refused");
        return Err((
            ResponseError::ClusterAuthorizationFailed.code(),
            refused.to_string(),
        ));
    }
    Ok(std::sync::Arc::clone(security))
}
