//! AlterConfigs (key 33), v0..=2, and the alteration it shares with IncrementalAlterConfigs
//! (key 44, [`super::incremental_alter_configs`]): change the topic settings that can change
//! live (see [`super::super::configs`]), one resource after the other, each with its own
//! outcome.
//!
//! What a Kafka client can observe:
//! - Topic: `retention.ms`, `retention.bytes` and `segment.bytes` change without a restart,
//!   durably before the answer (standalone: the topic's `topic.json`, written atomically; in a
//!   cluster: a compare-and-swap of the topic record in etcd, which every broker applies).
//!   The next retention pass uses the new retention; the next roll the new segment size.
//! - A key that cannot change is `POLICY_VIOLATION` naming it, unless it is "set" to the value
//!   it has; an unknown key or bad value is `INVALID_CONFIG` naming it; a key twice for one
//!   resource is `INVALID_REQUEST`. Nothing of a refused resource changes.
//! - AlterConfigs replaces the whole set, as in Kafka: a live key it does not name goes back
//!   to its default. IncrementalAlterConfigs changes only what it names (SET, DELETE = back to
//!   the default; APPEND/SUBTRACT only on `cleanup.policy`, which stays `delete`).
//! - `validate_only` checks everything and changes nothing.
//! - Needs `admin` on the topic, else `TOPIC_AUTHORIZATION_FAILED` for it. Broker resources are
//!   read-only (`POLICY_VIOLATION` for any change; `CLUSTER_AUTHORIZATION_FAILED` without
//!   `admin` somewhere). A resource named twice is `INVALID_REQUEST` for each, other resource
//!   types and resources past [`CONFIG_RESOURCES_MAX`] are `INVALID_REQUEST`.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::{
    alter_configs_response, AlterConfigsRequest, AlterConfigsResponse, ApiKey,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::configs::{
    broker_changes, broker_configs, topic_changes, topic_configs_of, Operation, Refusal,
    CONFIG_RESOURCES_MAX, RESOURCE_BROKER, RESOURCE_TOPIC,
};
use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{Call, KafkaApi};
use super::describe_configs::check_broker_name;
use crate::auth::Access;
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// AlterConfigs as the listener serves it: checked per resource by its handler.
pub struct AlterConfigs;

impl KafkaApi for AlterConfigs {
    type Request = AlterConfigsRequest;
    const KEY: ApiKey = ApiKey::AlterConfigs;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 2;

    fn start(call: Call<'_>, request: AlterConfigsRequest) -> Started<KafkaResponse> {
        Started::later(handle_alter(
            Arc::clone(call.service),
            call.access,
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// One resource of either request: type, name, and the changes asked for.
pub(super) struct Requested {
    pub(super) resource_type: i8,
    pub(super) name: String,
    pub(super) changes: Result<Vec<(String, Operation, Option<String>)>, Refusal>,
}

/// Runs each resource's change; the outcomes in request order.
pub(super) async fn alter_all(
    service: &Arc<BrokerService>,
    access: &Access,
    resources: Vec<Requested>,
    replace_all: bool,
    validate_only: bool,
) -> Vec<Result<(), Refusal>> {
    let mut seen: HashMap<(i8, String), usize> = HashMap::new();
    for resource in &resources {
        *seen
            .entry((resource.resource_type, resource.name.clone()))
            .or_default() += 1;
    }
    let mut outcomes = Vec::with_capacity(resources.len());
    for (index, resource) in resources.into_iter().enumerate() {
        let outcome = if index >= CONFIG_RESOURCES_MAX {
            Err(Refusal::new(
                ResponseError::InvalidRequest,
                format!("a request names at most {CONFIG_RESOURCES_MAX} resources"),
            ))
        } else if seen[&(resource.resource_type, resource.name.clone())] > 1 {
            Err(Refusal::new(
                ResponseError::InvalidRequest,
                format!(
                    "resource {:?} appears more than once in the request",
                    resource.name
                ),
            ))
        } else {
            alter(service, access, resource, replace_all, validate_only).await
        };
        outcomes.push(outcome);
    }
    outcomes
}

async fn alter(
    service: &Arc<BrokerService>,
    access: &Access,
    resource: Requested,
    replace_all: bool,
    validate_only: bool,
) -> Result<(), Refusal> {
    let requested = resource.changes?;
    let name = resource.name;
    match resource.resource_type {
        RESOURCE_TOPIC => {
            if let Err(refused) = access.check(crate::auth::Operation::Admin, &name) {
                return Err(Refusal::new(
                    ResponseError::TopicAuthorizationFailed,
                    refused.to_string(),
                ));
            }
            let refused = |error: crate::broker::BrokerError| {
                Refusal::new(kafka_error(&error), error.to_string())
            };
            let current = topic_configs_of(service, &name).map_err(refused)?;
            let changes = topic_changes(&current, &requested, replace_all)?;
            let change = Arc::new(move |config: &crate::domain::TopicConfig| {
                let mut config = *config;
                for change in &changes {
                    change.apply(&mut config);
                }
                Ok(config)
            });
            service
                .topics()
                .alter_topic_config(name, change, validate_only)
                .await
                .map(drop)
                .map_err(refused)
        }
        RESOURCE_BROKER => {
            if let Err(refused) = access.check_somewhere(crate::auth::Operation::Admin) {
                return Err(Refusal::new(
                    ResponseError::ClusterAuthorizationFailed,
                    refused.to_string(),
                ));
            }
            check_broker_name(service, &name)?;
            broker_changes(&broker_configs(service), &requested)
        }
        other => Err(Refusal::new(
            ResponseError::InvalidRequest,
            format!("resource type {other} is not supported (topics are 2, brokers 4)"),
        )),
    }
}

pub(super) fn error_parts(outcome: Result<(), Refusal>) -> (i16, Option<StrBytes>) {
    match outcome {
        Ok(()) => (0, None),
        Err(refusal) => (
            refusal.error.code(),
            Some(StrBytes::from_string(refusal.message)),
        ),
    }
}

/// AlterConfigs: replaces each resource's live settings.
pub async fn handle_alter(
    service: Arc<BrokerService>,
    access: Access,
    correlation_id: i32,
    version: i16,
    request: AlterConfigsRequest,
) -> KafkaResponse {
    let requested = request
        .resources
        .iter()
        .map(|resource| Requested {
            resource_type: resource.resource_type,
            name: resource.resource_name.to_string(),
            changes: Ok(resource
                .configs
                .iter()
                .map(|config| {
                    (
                        config.name.to_string(),
                        Operation::Set,
                        config.value.as_ref().map(|value| value.to_string()),
                    )
                })
                .collect()),
        })
        .collect();
    let outcomes = alter_all(&service, &access, requested, true, request.validate_only).await;
    let responses = request
        .resources
        .iter()
        .zip(outcomes)
        .map(|(resource, outcome)| {
            let (code, message) = error_parts(outcome);
            alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone())
                .with_error_code(code)
                .with_error_message(message)
        })
        .collect();
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::AlterConfigs,
        api_version: version,
        body: ResponseBody::message(AlterConfigsResponse::default().with_responses(responses)),
    }
}
