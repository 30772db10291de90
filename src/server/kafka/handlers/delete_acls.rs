//! DeleteAcls (key 31), v1..=3: the fencelog grants matching Kafka ACL filters are taken away
//! (Kafka's `kafka-acls --remove`, the AdminClient's `deleteAcls`), through the one mapping in
//! [`super::super::acl_mapping`], where `fencelog acl remove` removes them.
//!
//! What a client sees, per filter (in request order):
//! - Without `--auth`: `SECURITY_DISABLED` (54) for every filter.
//! - A principal that is not a super user (Kafka: ALTER on the cluster):
//!   `CLUSTER_AUTHORIZATION_FAILED` (31) for every filter.
//! - A filter with an `UNKNOWN` field, or past
//!   [`super::create_acls::ACL_CHANGES_PER_REQUEST_MAX`]: `INVALID_REQUEST` (42).
//! - Otherwise every binding the filter matches (as DescribeAcls lists them, read once from
//!   the store for the whole request) is removed, durably, and listed in `matching_acls`, each
//!   with its own outcome: removing an `ALL` binding takes every operation of the grant;
//!   removing one operation leaves the grant's others. A binding matched by two filters is
//!   listed under both and removed once. A removal whose outcome is unknown answers
//!   `REQUEST_TIMED_OUT` on its bindings; deleting again is safe.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::{ApiKey, DeleteAclsRequest, DeleteAclsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::acl_mapping::{
    bindings_of, permission, resource_type, Binding, Filter, ANY_HOST,
};
use super::super::authorization::acl_api_security;
use super::super::errors::acl_store_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{Call, KafkaApi};
use super::create_acls::ACL_CHANGES_PER_REQUEST_MAX;
use crate::auth::{Access, AclEntry, Operation, Security, TopicPattern};
use crate::server::protocol::Started;

/// DeleteAcls as the listener serves it: checked by its handler (a super user; see [`acl_api_security`]).
pub struct DeleteAcls;

impl KafkaApi for DeleteAcls {
    type Request = DeleteAclsRequest;
    const KEY: ApiKey = ApiKey::DeleteAcls;
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 3;

    fn start(call: Call<'_>, request: DeleteAclsRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            call.access,
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

fn failed(code: i16, message: String) -> DeleteAclsFilterResult {
    DeleteAclsFilterResult::default()
        .with_error_code(code)
        .with_error_message(Some(StrBytes::from_string(message)))
}

fn matching(binding: &Binding, outcome: Option<(i16, String)>) -> DeleteAclsMatchingAcl {
    let (code, message) = outcome.map_or((0, None), |(code, message)| {
        (code, Some(StrBytes::from_string(message)))
    });
    DeleteAclsMatchingAcl::default()
        .with_error_code(code)
        .with_error_message(message)
        .with_resource_type(resource_type::TOPIC)
        .with_resource_name(StrBytes::from_string(binding.resource_name.clone()))
        .with_pattern_type(binding.pattern_type)
        .with_principal(StrBytes::from_string(binding.kafka_principal()))
        .with_host(StrBytes::from_static_str(ANY_HOST))
        .with_operation(binding.operation)
        .with_permission_type(permission::ALLOW)
}

/// Removes the bindings of one filter from the store, one change per grant; the answer lists
/// each binding with its grant's outcome.
async fn remove(security: &Security, bindings: Vec<Binding>) -> DeleteAclsFilterResult {
    let mut per_grant: BTreeMap<(String, TopicPattern), BTreeSet<Operation>> = BTreeMap::new();
    for binding in &bindings {
        per_grant
            .entry((binding.principal.clone(), binding.pattern.clone()))
            .or_default()
            .extend(binding.operations.iter().copied());
    }
    let mut outcomes = BTreeMap::new();
    for ((principal, pattern), operations) in per_grant {
        let outcome = match security.remove_acl(&principal, &pattern, &operations).await {
            Ok(_) => {
                tracing::info!(%principal, topic = pattern.as_str(), "ACL removed through the Kafka listener");
                None
            }
            Err(error) => Some((acl_store_error(&error).code(), error.to_string())),
        };
        outcomes.insert((principal, pattern), outcome);
    }
    let matching_acls = bindings
        .iter()
        .map(|binding| {
            let outcome = outcomes
                .get(&(binding.principal.clone(), binding.pattern.clone()))
                .cloned()
                .flatten();
            matching(binding, outcome)
        })
        .collect();
    DeleteAclsFilterResult::default().with_matching_acls(matching_acls)
}

/// Answers a DeleteAcls request.
pub async fn handle(
    access: Access,
    correlation_id: i32,
    version: i16,
    request: DeleteAclsRequest,
) -> KafkaResponse {
    let answer = |results: Vec<DeleteAclsFilterResult>| KafkaResponse {
        correlation_id,
        api_key: ApiKey::DeleteAcls,
        api_version: version,
        body: ResponseBody::message(DeleteAclsResponse::default().with_filter_results(results)),
    };
    let refuse_all = |code: i16, message: String| {
        answer(
            request
                .filters
                .iter()
                .map(|_| failed(code, message.clone()))
                .collect(),
        )
    };
    let security = match acl_api_security(&access, true) {
        Ok(security) => security,
        Err((code, message)) => return refuse_all(code, message),
    };
    let entries: Vec<AclEntry> = match security.stored_acls().await {
        Ok(entries) => entries,
        Err(error) => return refuse_all(acl_store_error(&error).code(), error.to_string()),
    };
    let all: Vec<Binding> = entries.iter().flat_map(bindings_of).collect();
    let mut results = Vec::with_capacity(request.filters.len());
    for (index, kafka) in request.filters.iter().enumerate() {
        if index >= ACL_CHANGES_PER_REQUEST_MAX {
            results.push(failed(
                ResponseError::InvalidRequest.code(),
                format!("at most {ACL_CHANGES_PER_REQUEST_MAX} filters per request (ACL_CHANGES_PER_REQUEST_MAX): send the rest in another request"),
            ));
            continue;
        }
        let filter = Filter {
            resource_type: kafka.resource_type_filter,
            resource_name: kafka
                .resource_name_filter
                .as_ref()
                .map(|name| name.as_str()),
            pattern_type: kafka.pattern_type_filter,
            principal: kafka.principal_filter.as_ref().map(|name| name.as_str()),
            host: kafka.host_filter.as_ref().map(|name| name.as_str()),
            operation: kafka.operation,
            permission: kafka.permission_type,
        };
        if let Err(message) = filter.validate() {
            results.push(failed(ResponseError::InvalidRequest.code(), message));
            continue;
        }
        let bindings = all
            .iter()
            .filter(|binding| filter.matches(binding))
            .cloned()
            .collect();
        results.push(remove(&security, bindings).await);
    }
    answer(results)
}
