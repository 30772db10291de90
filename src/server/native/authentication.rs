//! The native protocol's authentication gate and ACL checks, before any request reaches the
//! handler: AuthenticateStart/AuthenticateContinue drive the connection's SCRAM exchange; with
//! `--auth` on, anything but ApiVersions before authentication is refused with
//! `AUTHENTICATION_REQUIRED` (the connection closes after
//! [`MAX_AUTHENTICATION_FAILURES`](crate::auth::MAX_AUTHENTICATION_FAILURES) refusals); after
//! it, each request is checked against the principal's ACLs (one operation per API, see
//! [`operation`]) and a refusal is `NOT_AUTHORIZED`, with nothing changed.

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;

use super::super::protocol::Started;
use crate::auth::{
    Access, AuthenticationError, ConnectionAuthentication, NotAuthorized, Operation,
};
use crate::protocol::{ErrorCode, ErrorResponse, Request, RequestFrame, Response, ResponseFrame};

/// Answers the frame here if it is an authentication step or must be refused before
/// authentication; `None` lets it through to authorization and the handler.
pub fn intercept(
    authentication: &mut ConnectionAuthentication,
    frame: &RequestFrame,
) -> Option<Started<ResponseFrame>> {
    let correlation_id = frame.correlation_id;
    match &frame.request {
        Request::AuthenticateStart { mechanism, message } => {
            let result = authentication
                .check_mechanism(mechanism)
                .and_then(|()| authentication.start(message));
            Some(step(authentication, correlation_id, result, |message| {
                Response::AuthenticateStart { message }
            }))
        }
        Request::AuthenticateContinue { message } => {
            let result = authentication.finish(message);
            Some(step(authentication, correlation_id, result, |message| {
                Response::AuthenticateContinue { message }
            }))
        }
        Request::ApiVersions => None,
        request if authentication.is_required() => {
            let close = authentication.refused();
            let message = format!(
                "{} needs an authenticated connection: this server runs with --auth; authenticate with SCRAM-SHA-256 first (AuthenticateStart, AuthenticateContinue){}",
                request.api_key(),
                if close { "; closing the connection" } else { "" }
            );
            Some(Started {
                close,
                ..Started::ready(ResponseFrame::error(
                    correlation_id,
                    ErrorResponse::new(ErrorCode::AuthenticationRequired, message),
                ))
            })
        }
        _ => None,
    }
}

fn step(
    authentication: &mut ConnectionAuthentication,
    correlation_id: u32,
    result: Result<Vec<u8>, AuthenticationError>,
    response: impl FnOnce(Bytes) -> Response,
) -> Started<ResponseFrame> {
    match result {
        Ok(message) => Started::ready(ResponseFrame::ok(correlation_id, response(message.into()))),
        Err(error) => {
            let code = if error.is_state_error() {
                ErrorCode::IllegalAuthenticationState
            } else {
                ErrorCode::AuthenticationFailed
            };
            // A server without --auth answers, but never closes for it.
            let close = authentication.is_enabled() && authentication.refused();
            Started {
                close,
                ..Started::ready(ResponseFrame::error(
                    correlation_id,
                    ErrorResponse::new(code, error.to_string()),
                ))
            }
        }
    }
}

/// The operation a request needs, and on which topic (`None`: on some topic).
pub fn operation(request: &Request) -> Option<(Operation, Option<&str>)> {
    match request {
        Request::ApiVersions
        | Request::Metadata { .. }
        | Request::AuthenticateStart { .. }
        | Request::AuthenticateContinue { .. } => None,
        Request::CreateTopic { name, .. } => Some((Operation::Create, Some(name))),
        Request::DeleteTopic { name }
        | Request::AlterTopicConfig { name, .. }
        | Request::CreatePartitions { name, .. } => Some((Operation::Admin, Some(name))),
        // Kafka asks DELETE on the topic; `admin` on it is what deletes the topic too.
        Request::DeleteRecords { topic, .. } => Some((Operation::Admin, Some(topic))),
        Request::AcquireLease { topic, .. }
        | Request::RenewLease { topic, .. }
        | Request::ReleaseLease { topic, .. } => Some((Operation::Lease, Some(topic))),
        Request::Produce { topic, .. } => Some((Operation::Produce, Some(topic))),
        Request::InitProducerId
        | Request::InitTransaction { .. }
        | Request::EndTransaction { .. } => Some((Operation::Produce, None)),
        // Every topic named is checked in `authorize`.
        Request::AddToTransaction { .. } => Some((Operation::Produce, None)),
        // Broker to broker: every topic named is checked in `authorize` (the broker principal,
        // or `admin` on the topic).
        Request::ReplicaFetch(_) | Request::LeaderEpochEnd { .. } => Some((Operation::Admin, None)),
        Request::VerifyTransaction { topic, .. } => Some((Operation::Admin, Some(topic))),
        Request::TxnOffsetCommit { .. } | Request::EndTxnOffsets { .. } => {
            Some((Operation::Admin, None))
        }
        Request::Fetch { topic, .. }
        | Request::ListOffsets { topic, .. }
        | Request::OffsetCommit { topic, .. }
        | Request::OffsetFetch { topic, .. } => Some((Operation::Consume, Some(topic))),
    }
}

/// Checks a request against the connection's rights before anything is done. Metadata naming
/// topics the principal may not see is refused whole; Metadata of all topics is filtered by
/// [`filter_metadata`].
pub fn authorize(access: &Access, request: &Request) -> Result<(), NotAuthorized> {
    if let Request::Metadata { topics, .. } = request {
        for topic in topics {
            if !access.may_see(topic) {
                return access.check(Operation::Consume, topic);
            }
        }
        return Ok(());
    }
    if let Request::AddToTransaction { partitions, .. } = request {
        for partition in partitions {
            access.check(Operation::Produce, &partition.topic)?;
        }
        return Ok(());
    }
    // The transaction coordinators' shared lease (a cluster's brokers ask for it at each
    // partition's leader): the broker principal's, or `admin` on the topic, as replication.
    if let Request::AcquireLease { topic, holder, .. } = request {
        if holder == crate::lease::SHARED_HOLDER {
            return access.check_replicate(topic);
        }
    }
    if let Some(topics) = replication_topics(request) {
        for topic in topics {
            access.check_replicate(topic)?;
        }
        return Ok(());
    }
    match operation(request) {
        None => Ok(()),
        Some((operation, Some(topic))) => access.check(operation, topic),
        Some((operation, None)) => access.check_somewhere(operation),
    }
}

/// The topics a replication request names (it replicates their data, so it needs the broker
/// principal or `admin` on each); `None` for other requests.
fn replication_topics(request: &Request) -> Option<Vec<&str>> {
    match request {
        Request::ReplicaFetch(fetch) => Some(
            fetch
                .partitions
                .iter()
                .map(|partition| partition.topic.as_str())
                .collect(),
        ),
        Request::LeaderEpochEnd { partitions } => Some(
            partitions
                .iter()
                .map(|partition| partition.topic.as_str())
                .collect(),
        ),
        // A partition's leader asking a transaction coordinator about the partition.
        Request::VerifyTransaction { topic, .. } => Some(vec![topic.as_str()]),
        // Brokers handing a transaction's consumer positions to each other: the offsets
        // topic's (where they end up) and each partition's.
        Request::TxnOffsetCommit { offsets, .. } | Request::EndTxnOffsets { offsets, .. } => Some(
            std::iter::once(crate::domain::OFFSETS_TOPIC)
                .chain(offsets.iter().map(|offset| offset.topic.as_str()))
                .collect(),
        ),
        _ => None,
    }
}

/// The refusal of a request the principal may not make.
pub fn refusal(correlation_id: u32, refused: &NotAuthorized) -> Started<ResponseFrame> {
    tracing::info!(%refused, "request refused by ACL");
    Started::ready(ResponseFrame::error(
        correlation_id,
        ErrorResponse::new(ErrorCode::NotAuthorized, refused.to_string()),
    ))
}

/// Leaves out of a Metadata answer the topics the principal may not see.
pub fn filter_metadata(
    access: Access,
    response: BoxFuture<'static, ResponseFrame>,
) -> BoxFuture<'static, ResponseFrame> {
    if access.principal().is_none() {
        return response;
    }
    response
        .map(move |mut frame| {
            if let Ok(Response::Metadata { topics, cluster }) = &mut frame.result {
                topics.retain(|topic| access.may_see(&topic.name));
                if let Some(cluster) = cluster {
                    cluster
                        .partitions
                        .retain(|partition| access.may_see(&partition.topic));
                }
            }
            frame
        })
        .boxed()
}
