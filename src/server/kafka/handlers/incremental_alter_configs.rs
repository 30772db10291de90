//! IncrementalAlterConfigs (key 44), v0..=1: changes only the topic settings it names (SET,
//! DELETE = back to the default; APPEND/SUBTRACT only on `cleanup.policy`, which stays
//! `delete`), through the same per-resource alteration as AlterConfigs; what a client observes
//! (outcomes, validation, ACLs per resource) is described in [`super::alter_configs`].

use std::sync::Arc;

use kafka_protocol::messages::{
    incremental_alter_configs_response, ApiKey, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};
use kafka_protocol::ResponseError;

use super::super::configs::{Operation, Refusal};
use super::super::response::{KafkaResponse, ResponseBody};
use super::alter_configs::{alter_all, error_parts, Requested};
use super::api::{Call, KafkaApi};
use crate::auth::Access;
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// IncrementalAlterConfigs as the listener serves it: checked per resource by its handler.
pub struct IncrementalAlterConfigs;

impl KafkaApi for IncrementalAlterConfigs {
    type Request = IncrementalAlterConfigsRequest;
    const KEY: ApiKey = ApiKey::IncrementalAlterConfigs;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 1;

    fn start(call: Call<'_>, request: IncrementalAlterConfigsRequest) -> Started<KafkaResponse> {
        Started::later(handle_incremental(
            Arc::clone(call.service),
            call.access,
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// IncrementalAlterConfigs: changes only the keys named.
pub async fn handle_incremental(
    service: Arc<BrokerService>,
    access: Access,
    correlation_id: i32,
    version: i16,
    request: IncrementalAlterConfigsRequest,
) -> KafkaResponse {
    let requested = request
        .resources
        .iter()
        .map(|resource| Requested {
            resource_type: resource.resource_type,
            name: resource.resource_name.to_string(),
            changes: resource
                .configs
                .iter()
                .map(|config| {
                    let operation = Operation::from_code(config.config_operation).ok_or_else(|| {
                        Refusal::new(
                            ResponseError::InvalidRequest,
                            format!(
                                "config {}: operation {} is not SET (0), DELETE (1), APPEND (2) or SUBTRACT (3)",
                                config.name.as_str(),
                                config.config_operation
                            ),
                        )
                    })?;
                    Ok((
                        config.name.to_string(),
                        operation,
                        config.value.as_ref().map(|value| value.to_string()),
                    ))
                })
                .collect(),
        })
        .collect();
    let outcomes = alter_all(&service, &access, requested, false, request.validate_only).await;
    let responses = request
        .resources
        .iter()
        .zip(outcomes)
        .map(|(resource, outcome)| {
            let (code, message) = error_parts(outcome);
            incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone())
                .with_error_code(code)
                .with_error_message(message)
        })
        .collect();
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::IncrementalAlterConfigs,
        api_version: version,
        body: ResponseBody::message(
            IncrementalAlterConfigsResponse::default().with_responses(responses),
        ),
    }
}
