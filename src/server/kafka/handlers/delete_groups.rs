//! DeleteGroups (key 42), v0..=2: an admin deletes consumer groups (Kafka's
//! `kafka-consumer-groups --delete`, confluent-kafka's `delete_consumer_groups`, kafka-python's
//! `delete_consumer_groups`, kafkajs' `deleteGroups`).
//!
//! Each group is deleted on its own, in request order, each with its own result:
//! - No members: its committed offsets (and on a cluster its membership snapshot) are deleted
//!   durably (on a cluster: acknowledged by every in-sync replica of its offsets partition)
//!   before the answer says `NONE`.
//! - Members: `NON_EMPTY_GROUP` (68), nothing deleted. Neither members nor committed offsets:
//!   `GROUP_ID_NOT_FOUND` (69). An invalid id: `INVALID_GROUP_ID` (24).
//! - On a cluster, a group this broker does not coordinate: `NOT_COORDINATOR` (16), so the
//!   client asks FindCoordinator and sends the delete there (as Kafka's admin clients do).
//! - A group named twice in one request is deleted once; the second entry answers as the
//!   first did after it (`GROUP_ID_NOT_FOUND`), as Kafka's would.

use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{ApiKey, DeleteGroupsRequest, DeleteGroupsResponse};

use super::super::authorization::group_refused;
use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// DeleteGroups as the listener serves it.
pub struct DeleteGroups;

impl KafkaApi for DeleteGroups {
    type Request = DeleteGroupsRequest;
    const KEY: ApiKey = ApiKey::DeleteGroups;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 2;

    /// `admin` on some topic: Kafka asks DELETE on the group; fencelog has no group ACLs, so
    /// deleting a group is an admin's.
    fn authorize(access: &Access, _request: &DeleteGroupsRequest) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Admin)
    }

    /// Every group `GROUP_AUTHORIZATION_FAILED`.
    fn refuse(_refusal: &AclRefusal<'_>, request: &DeleteGroupsRequest) -> Option<ResponseBody> {
        let results = request
            .groups_names
            .iter()
            .map(|group| {
                DeletableGroupResult::default()
                    .with_group_id(group.clone())
                    .with_error_code(group_refused())
            })
            .collect();
        Some(ResponseBody::message(
            DeleteGroupsResponse::default().with_results(results),
        ))
    }

    fn start(call: Call<'_>, request: DeleteGroupsRequest) -> Started<KafkaResponse> {
        Started::later(handle(
            Arc::clone(call.service),
            call.correlation_id,
            call.version,
            request,
        ))
    }
}

/// Deletes the requested groups; the answer lists each with its outcome, in request order.
pub async fn handle(
    service: Arc<BrokerService>,
    correlation_id: i32,
    version: i16,
    request: DeleteGroupsRequest,
) -> KafkaResponse {
    let mut results = Vec::with_capacity(request.groups_names.len());
    for group in request.groups_names {
        let error_code = match service.groups().delete_group(group.as_str()).await {
            Ok(()) => 0,
            Err(error) => {
                tracing::debug!(group = %group.as_str(), %error, "DeleteGroups refused");
                kafka_error(&error).code()
            }
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(group)
                .with_error_code(error_code),
        );
    }
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::DeleteGroups,
        api_version: version,
        body: ResponseBody::message(DeleteGroupsResponse::default().with_results(results)),
    }
}
