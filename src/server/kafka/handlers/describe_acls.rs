//! DescribeAcls (key 29), v1..=3: fencelog's grants as Kafka ACL bindings (Kafka's
//! `kafka-acls --list`, the AdminClient's `describeAcls`), through the one mapping in
//! [`super::super::acl_mapping`].
//!
//! What a client sees:
//! - Without `--auth`: `SECURITY_DISABLED` (54), as a Kafka broker without an authorizer.
//! - Without `admin` on some topic (Kafka: DESCRIBE on the cluster):
//!   `CLUSTER_AUTHORIZATION_FAILED` (31), naming the principal.
//! - A filter with an `UNKNOWN` field: `INVALID_REQUEST` (42).
//! - Otherwise every binding that matches the filter, grouped by resource: resource type
//!   `TOPIC`, host `*`, permission `ALLOW` (fencelog has no other). The grants are read from
//!   the store (the ACL file, or etcd on a cluster), so a change just made is listed.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{ApiKey, DescribeAclsRequest, DescribeAclsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::acl_mapping::{
    bindings_of, permission, resource_type, Binding, Filter, ANY_HOST,
};
use super::super::authorization::acl_api_security;
use super::super::errors::acl_store_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{Call, KafkaApi};
use crate::auth::Access;
use crate::server::protocol::Started;

/// DescribeAcls as the listener serves it: checked by its handler (`admin` on some topic; see [`acl_api_security`]).
pub struct DescribeAcls;

impl KafkaApi for DescribeAcls {
    type Request = DescribeAclsRequest;
    const KEY: ApiKey = ApiKey::DescribeAcls;
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 3;

    fn start(call: Call<'_>, request: DescribeAclsRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            call.access,
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// The request's filter in the mapping's terms.
fn filter_of(request: &DescribeAclsRequest) -> Filter<'_> {
    Filter {
        resource_type: request.resource_type_filter,
        resource_name: request
            .resource_name_filter
            .as_ref()
            .map(|name| name.as_str()),
        pattern_type: request.pattern_type_filter,
        principal: request.principal_filter.as_ref().map(|name| name.as_str()),
        host: request.host_filter.as_ref().map(|name| name.as_str()),
        operation: request.operation,
        permission: request.permission_type,
    }
}

/// The bindings grouped by resource (pattern type and name), in resource order.
fn resources(bindings: Vec<Binding>) -> Vec<DescribeAclsResource> {
    let mut grouped: BTreeMap<(i8, String), Vec<AclDescription>> = BTreeMap::new();
    for binding in bindings {
        let description = AclDescription::default()
            .with_principal(StrBytes::from_string(binding.kafka_principal()))
            .with_host(StrBytes::from_static_str(ANY_HOST))
            .with_operation(binding.operation)
            .with_permission_type(permission::ALLOW);
        grouped
            .entry((binding.pattern_type, binding.resource_name))
            .or_default()
            .push(description);
    }
    grouped
        .into_iter()
        .map(|((pattern_type, name), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(resource_type::TOPIC)
                .with_resource_name(StrBytes::from_string(name))
                .with_pattern_type(pattern_type)
                .with_acls(acls)
        })
        .collect()
}

/// Answers a DescribeAcls request.
pub async fn handle(
    access: Access,
    correlation_id: i32,
    version: i16,
    request: DescribeAclsRequest,
) -> KafkaResponse {
    let answer = |body: DescribeAclsResponse| KafkaResponse {
        correlation_id,
        api_key: ApiKey::DescribeAcls,
        api_version: version,
        body: ResponseBody::message(body),
    };
    let error = |code: i16, message: String| {
        answer(
            DescribeAclsResponse::default()
                .with_error_code(code)
                .with_error_message(Some(StrBytes::from_string(message))),
        )
    };
    let security = match acl_api_security(&access, false) {
        Ok(security) => security,
        Err((code, message)) => return error(code, message),
    };
    let filter = filter_of(&request);
    if let Err(message) = filter.validate() {
        return error(ResponseError::InvalidRequest.code(), message);
    }
    let entries = match security.stored_acls().await {
        Ok(entries) => entries,
        Err(failed) => return error(acl_store_error(&failed).code(), failed.to_string()),
    };
    let bindings = entries
        .iter()
        .flat_map(bindings_of)
        .filter(|binding| filter.matches(binding))
        .collect();
    answer(DescribeAclsResponse::default().with_resources(resources(bindings)))
}
