//! DescribeConfigs (key 32), v1..=4: a topic's or this broker's configs, with Kafka's names
//! (see [`super::super::configs`]).
//!
//! What a Kafka client can observe:
//! - Topic (resource type 2): every topic setting fencelog has, under Kafka's names, with its
//!   source (`TOPIC_CONFIG` when set on the topic, else `DEFAULT_CONFIG`) and whether an alter
//!   can change it; an unknown topic is `UNKNOWN_TOPIC_OR_PARTITION`. Needs some operation on
//!   the topic (it may see it, as for Metadata), else `TOPIC_AUTHORIZATION_FAILED` for it.
//! - Broker (resource type 4), named by this broker's node id or empty: a read-only set
//!   (`STATIC_BROKER_CONFIG` for what `serve` was given, `DEFAULT_CONFIG` otherwise). Another
//!   broker's id is `INVALID_REQUEST` (ask that broker). Needs `admin` on some topic, else
//!   `CLUSTER_AUTHORIZATION_FAILED`.
//! - `configuration_keys` lists only those keys (unknown ones are left out, as in Kafka).
//! - No config is sensitive; synonyms are never listed (each value has one source);
//!   documentation is sent when asked for (v3+).
//! - Other resource types, and resources past [`CONFIG_RESOURCES_MAX`], are `INVALID_REQUEST`.

use std::sync::Arc;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{ApiKey, DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::configs::{
    broker_configs, topic_configs_of, ConfigEntry, Refusal, CONFIG_RESOURCES_MAX, RESOURCE_BROKER,
    RESOURCE_TOPIC,
};
use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{Call, KafkaApi};
use crate::auth::{Access, Operation};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// DescribeConfigs as the listener serves it: checked per resource by its handler.
pub struct DescribeConfigs;

impl KafkaApi for DescribeConfigs {
    type Request = DescribeConfigsRequest;
    const KEY: ApiKey = ApiKey::DescribeConfigs;
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 4;

    fn start(call: Call<'_>, request: DescribeConfigsRequest) -> Started<KafkaResponse> {
        Started::ready(handle(
            call.service,
            &call.access,
            call.correlation_id,
            call.version,
            &request,
        ))
    }
}

/// Describes each requested resource; each has its own outcome.
pub fn handle(
    service: &Arc<BrokerService>,
    access: &Access,
    correlation_id: i32,
    version: i16,
    request: &DescribeConfigsRequest,
) -> KafkaResponse {
    let documentation = request.include_documentation;
    let results = request
        .resources
        .iter()
        .enumerate()
        .map(|(index, resource)| {
            let outcome = if index >= CONFIG_RESOURCES_MAX {
                Err(Refusal::new(
                    ResponseError::InvalidRequest,
                    format!(
                        "a DescribeConfigs request names at most {CONFIG_RESOURCES_MAX} resources"
                    ),
                ))
            } else {
                describe(service, access, resource)
            };
            result(resource, outcome, documentation)
        })
        .collect();
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::DescribeConfigs,
        api_version: version,
        body: ResponseBody::message(DescribeConfigsResponse::default().with_results(results)),
    }
}

/// Checks that a broker resource is this broker (by node id, or empty for "the broker").
pub(super) fn check_broker_name(service: &BrokerService, name: &str) -> Result<(), Refusal> {
    let node_id = service.node_id();
    if name.is_empty() || name.trim().parse::<i64>().ok() == Some(i64::from(node_id)) {
        Ok(())
    } else {
        Err(Refusal::new(
            ResponseError::InvalidRequest,
            format!("broker resource {name:?} is not this broker (node id {node_id}): send it to that broker"),
        ))
    }
}

/// The configs of one resource, filtered by the keys asked for.
fn describe(
    service: &BrokerService,
    access: &Access,
    resource: &DescribeConfigsResource,
) -> Result<Vec<ConfigEntry>, Refusal> {
    let name = resource.resource_name.as_str();
    let configs = match resource.resource_type {
        RESOURCE_TOPIC => {
            if !access.may_see(name) {
                return Err(Refusal::new(
                    ResponseError::TopicAuthorizationFailed,
                    format!("not authorized to describe the configs of topic {name:?}"),
                ));
            }
            topic_configs_of(service, name)
                .map_err(|error| Refusal::new(kafka_error(&error), error.to_string()))?
        }
        RESOURCE_BROKER => {
            if let Err(refused) = access.check_somewhere(Operation::Admin) {
                return Err(Refusal::new(
                    ResponseError::ClusterAuthorizationFailed,
                    refused.to_string(),
                ));
            }
            check_broker_name(service, name)?;
            broker_configs(service)
        }
        other => {
            return Err(Refusal::new(
                ResponseError::InvalidRequest,
                format!("resource type {other} is not supported (topics are 2, brokers 4)"),
            ))
        }
    };
    Ok(match &resource.configuration_keys {
        Some(keys) if !keys.is_empty() => configs
            .into_iter()
            .filter(|entry| keys.iter().any(|key| key.as_str() == entry.name))
            .collect(),
        _ => configs,
    })
}

fn result(
    resource: &DescribeConfigsResource,
    outcome: Result<Vec<ConfigEntry>, Refusal>,
    documentation: bool,
) -> DescribeConfigsResult {
    let answer = DescribeConfigsResult::default()
        .with_resource_type(resource.resource_type)
        .with_resource_name(resource.resource_name.clone());
    match outcome {
        Ok(configs) => answer.with_configs(
            configs
                .into_iter()
                .map(|entry| {
                    DescribeConfigsResourceResult::default()
                        .with_name(StrBytes::from_static_str(entry.name))
                        .with_value(Some(StrBytes::from_string(entry.value)))
                        .with_read_only(entry.read_only)
                        .with_config_source(entry.source as i8)
                        .with_is_sensitive(false)
                        .with_config_type(entry.config_type as i8)
                        .with_documentation(
                            documentation.then(|| StrBytes::from_static_str(entry.documentation)),
                        )
                })
                .collect(),
        ),
        Err(refusal) => answer
            .with_error_code(refusal.error.code())
            .with_error_message(Some(StrBytes::from_string(refusal.message))),
    }
}
