//! CreateAcls (key 30), v1..=3: Kafka ACL bindings become fencelog grants (Kafka's
//! `kafka-acls --add`, the AdminClient's `createAcls`), through the one mapping in
//! [`super::super::acl_mapping`], written where `fencelog acl add` writes them.
//!
//! What a client sees, per binding (in request order):
//! - Without `--auth`: `SECURITY_DISABLED` (54) for every binding.
//! - A principal that is not a super user (Kafka: ALTER on the cluster):
//!   `CLUSTER_AUTHORIZATION_FAILED` (31) for every binding, saying why.
//! - A binding fencelog cannot hold (DENY, a host, a group or cluster resource, DESCRIBE, ...):
//!   `INVALID_REQUEST` (42) with the reason; the other bindings are still created.
//! - Past [`ACL_CHANGES_PER_REQUEST_MAX`] bindings: `INVALID_REQUEST` for the extra ones.
//! - Otherwise the grant is merged into the principal's grant on the same pattern, durably
//!   (standalone: `acls.json`, atomically, read again at once; on a cluster: etcd, which every
//!   broker follows) before the answer. A write whose outcome is unknown answers
//!   `REQUEST_TIMED_OUT`; creating it again is safe (grants merge).

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::{ApiKey, CreateAclsRequest, CreateAclsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::acl_mapping::{grant_of, Creation};
use super::super::authorization::acl_api_security;
use super::super::errors::acl_store_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{Call, KafkaApi};
use crate::auth::Access;
use crate::server::protocol::Started;

/// CreateAcls as the listener serves it: checked by its handler (a super user; see [`acl_api_security`]).
pub struct CreateAcls;

impl KafkaApi for CreateAcls {
    type Request = CreateAclsRequest;
    const KEY: ApiKey = ApiKey::CreateAcls;
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 3;

    fn start(call: Call<'_>, request: CreateAclsRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            call.access,
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// Most bindings one CreateAcls or DeleteAcls request may change (each is a durable write):
/// the extra ones are refused with `INVALID_REQUEST`, the first ones still run.
pub const ACL_CHANGES_PER_REQUEST_MAX: usize = 1_000;

fn failed(code: i16, message: String) -> AclCreationResult {
    AclCreationResult::default()
        .with_error_code(code)
        .with_error_message(Some(StrBytes::from_string(message)))
}

/// Answers a CreateAcls request.
pub async fn handle(
    access: Access,
    correlation_id: i32,
    version: i16,
    request: CreateAclsRequest,
) -> KafkaResponse {
    let answer = |results: Vec<AclCreationResult>| KafkaResponse {
        correlation_id,
        api_key: ApiKey::CreateAcls,
        api_version: version,
        body: ResponseBody::message(CreateAclsResponse::default().with_results(results)),
    };
    let security = match acl_api_security(&access, true) {
        Ok(security) => security,
        Err((code, message)) => {
            return answer(
                request
                    .creations
                    .iter()
                    .map(|_| failed(code, message.clone()))
                    .collect(),
            )
        }
    };
    let mut results = Vec::with_capacity(request.creations.len());
    for (index, creation) in request.creations.iter().enumerate() {
        if index >= ACL_CHANGES_PER_REQUEST_MAX {
            results.push(failed(
                ResponseError::InvalidRequest.code(),
                format!("at most {ACL_CHANGES_PER_REQUEST_MAX} ACLs per request (ACL_CHANGES_PER_REQUEST_MAX): send the rest in another request"),
            ));
            continue;
        }
        let binding = Creation {
            resource_type: creation.resource_type,
            resource_name: creation.resource_name.as_str(),
            pattern_type: creation.resource_pattern_type,
            principal: creation.principal.as_str(),
            host: creation.host.as_str(),
            operation: creation.operation,
            permission: creation.permission_type,
        };
        let grant = match grant_of(&binding) {
            Ok(grant) => grant,
            Err(reason) => {
                results.push(failed(ResponseError::InvalidRequest.code(), reason));
                continue;
            }
        };
        let written = security
            .add_acl(&grant.principal, &grant.pattern, &grant.operations)
            .await;
        results.push(match written {
            Ok(entry) => {
                tracing::info!(principal = %entry.principal, topic = entry.topic.as_str(), "ACL granted through the Kafka listener");
                AclCreationResult::default()
            }
            Err(error) => failed(acl_store_error(&error).code(), error.to_string()),
        });
    }
    answer(results)
}
