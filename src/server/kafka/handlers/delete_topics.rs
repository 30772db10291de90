//! DeleteTopics (key 20), v1..=6: deletes each named topic through the broker service, durably,
//! one after the other, each with its own result.
//!
//! What a client sees, and why:
//! - A deleted topic is gone at once: its data, its leases, every group's committed offsets for
//!   it (as Kafka does); the name's fence floor stays, so a re-created topic fences every
//!   holder of the old one (`docs/fencing.md`).
//! - No such topic: `UNKNOWN_TOPIC_OR_PARTITION` (3). A name fencelog cannot hold:
//!   `INVALID_TOPIC_EXCEPTION` (17). A name given twice in one request: `INVALID_REQUEST` (42)
//!   for each entry, as CreateTopics answers.
//! - v6 entries may name the topic by id instead (the id Metadata and CreateTopics report,
//!   [`topic_id`]); an id no topic has is `UNKNOWN_TOPIC_ID` (100). An entry with a name is
//!   deleted by name.
//! - `timeout_ms` needs nothing: deletion is synchronous and durable before the answer, so a
//!   successful entry answers `NONE` whatever the timeout.
//! - v5+ results carry a message with each error.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{ApiKey, DeleteTopicsRequest, DeleteTopicsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::super::authorization::{each, TOPIC_REFUSED};
use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::super::topic_id::{topic_id, topic_name};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::{validate_topic_name, BrokerService};
use crate::server::protocol::Started;

/// DeleteTopics as the listener serves it.
pub struct DeleteTopics;

/// A name only a grant on every topic (`*`) matches: what deleting a topic by id needs.
const ANY_TOPIC: &str = "*";

impl KafkaApi for DeleteTopics {
    type Request = DeleteTopicsRequest;
    const KEY: ApiKey = ApiKey::DeleteTopics;
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 6;

    /// `admin` on every topic named; a topic named by id only (v6) needs `admin` on every
    /// topic, since which topic it is is not known before the handler resolves it.
    fn authorize(access: &Access, request: &DeleteTopicsRequest) -> Result<(), NotAuthorized> {
        each(
            access,
            Operation::Admin,
            request.topic_names.iter().map(|name| name.as_str()),
        )?;
        for topic in &request.topics {
            match &topic.name {
                Some(name) => access.check_delete_topic(name)?,
                None => access.check_delete_topic(ANY_TOPIC)?,
            }
        }
        Ok(())
    }

    /// Every topic `TOPIC_AUTHORIZATION_FAILED` (v6's, named by state, with the reason).
    fn refuse(refusal: &AclRefusal<'_>, request: &DeleteTopicsRequest) -> Option<ResponseBody> {
        let message = refusal.message();
        let named = request.topic_names.iter().map(|name| {
            DeletableTopicResult::default()
                .with_name(Some(name.clone()))
                .with_error_code(TOPIC_REFUSED)
        });
        let by_state = request.topics.iter().map(|topic| {
            DeletableTopicResult::default()
                .with_name(topic.name.clone())
                .with_topic_id(topic.topic_id)
                .with_error_code(TOPIC_REFUSED)
                .with_error_message(message.clone())
        });
        Some(ResponseBody::message(
            DeleteTopicsResponse::default().with_responses(named.chain(by_state).collect()),
        ))
    }

    fn start(call: Call<'_>, request: DeleteTopicsRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// One entry of the request: a topic by name, or (v6) by id only.
enum Target {
    Name(String),
    Id(Uuid),
}

/// Deletes the requested topics; the answer lists each with its outcome, in request order.
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: DeleteTopicsRequest,
) -> KafkaResponse {
    let targets: Vec<Target> = if version >= 6 {
        request
            .topics
            .iter()
            .map(|topic| match &topic.name {
                Some(name) => Target::Name(name.0.to_string()),
                None => Target::Id(topic.topic_id),
            })
            .collect()
    } else {
        request
            .topic_names
            .iter()
            .map(|name| Target::Name(name.0.to_string()))
            .collect()
    };
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for target in &targets {
        if let Target::Name(name) = target {
            *seen.entry(name.as_str()).or_default() += 1;
        }
    }
    let mut results = Vec::with_capacity(targets.len());
    for target in &targets {
        let result = match target {
            Target::Name(name) if seen[name.as_str()] > 1 => refused(
                Some(name),
                ResponseError::InvalidRequest,
                format!("topic {name:?} appears more than once in the request"),
            ),
            Target::Name(name) => delete_by_name(&service, name).await,
            Target::Id(id) => delete_by_id(&service, *id).await,
        };
        results.push(result);
    }
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::DeleteTopics,
        api_version: version,
        body: ResponseBody::message(DeleteTopicsResponse::default().with_responses(results)),
    }
}

async fn delete_by_name(service: &Arc<BrokerService>, name: &str) -> DeletableTopicResult {
    if let Err(error) = validate_topic_name(name) {
        return refused(
            Some(name),
            ResponseError::InvalidTopicException,
            error.to_string(),
        );
    }
    match service.topics().delete_topic(name.to_string()).await {
        Ok(()) => DeletableTopicResult::default()
            .with_name(Some(topic_name(name)))
            .with_topic_id(topic_id(name)),
        Err(error) => refused(Some(name), kafka_error(&error), error.to_string()),
    }
}

async fn delete_by_id(service: &Arc<BrokerService>, id: Uuid) -> DeletableTopicResult {
    let found = service
        .broker()
        .topics()
        .into_iter()
        .find(|topic| topic_id(topic.name()) == id);
    let Some(topic) = found else {
        return refused(
            None,
            ResponseError::UnknownTopicId,
            format!("no topic has the id {id}"),
        )
        .with_topic_id(id);
    };
    delete_by_name(service, topic.name()).await
}

fn refused(name: Option<&str>, error: ResponseError, message: String) -> DeletableTopicResult {
    DeletableTopicResult::default()
        .with_name(name.map(topic_name))
        .with_error_code(error.code())
        .with_error_message(Some(StrBytes::from_string(message)))
}
