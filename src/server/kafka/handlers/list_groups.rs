//! ListGroups (key 16), v0..=5: an admin lists the groups this broker coordinates (Kafka's
//! `kafka-consumer-groups --list`, kafka-python's `list_groups`, confluent-kafka's
//! `list_consumer_groups`, kafkajs' `listGroups`).
//!
//! Listed: every group the coordinator holds in memory (with members, in its state) and every
//! group with committed offsets but no members (`Empty`, protocol type empty: Kafka lists such
//! groups the same way). Sorted by group id. What a client sees:
//! - `states_filter` (v4+): only groups in one of the named states (`Stable`, `Empty`, ...,
//!   compared without case, as Kafka does); empty means all.
//! - Consumer-protocol (KIP-848) groups with members are listed too, protocol type
//!   `consumer`, state `Reconciling` or `Stable`, group type `consumer` (v5+).
//! - `types_filter` (v5+): `classic` and/or `consumer` (compared without case); empty means
//!   both. The group type is answered from v5.
//! - The answer is bounded by the coordinator's and the offset store's group limits.

use std::collections::BTreeMap;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{ApiKey, GroupId, ListGroupsRequest, ListGroupsResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::authorization::group_refused;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{AclRefusal, Call, KafkaApi};
use crate::auth::{Access, NotAuthorized, Operation};
use crate::broker::coordinator::{GroupListing, GroupState};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// ListGroups as the listener serves it.
pub struct ListGroups;

impl KafkaApi for ListGroups {
    type Request = ListGroupsRequest;
    const KEY: ApiKey = ApiKey::ListGroups;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 5;

    /// `consume` on some topic (fencelog has no group ACLs).
    fn authorize(access: &Access, _request: &ListGroupsRequest) -> Result<(), NotAuthorized> {
        access.check_somewhere(Operation::Consume)
    }

    /// `GROUP_AUTHORIZATION_FAILED`, no groups.
    fn refuse(_refusal: &AclRefusal<'_>, _request: &ListGroupsRequest) -> Option<ResponseBody> {
        Some(ResponseBody::message(
            ListGroupsResponse::default().with_error_code(group_refused()),
        ))
    }

    fn start(call: Call<'_>, request: ListGroupsRequest) -> Started<KafkaResponse> {
        Started::ready(handle(
            call.service,
            call.correlation_id,
            call.version,
            &request,
        ))
    }
}

/// The type of every group fencelog coordinates: Kafka's classic group protocol.
pub const CLASSIC_GROUP_TYPE: &str = "classic";
/// The type of KIP-848 consumer-protocol groups.
pub const CONSUMER_GROUP_TYPE: &str = "consumer";

/// The answer to a ListGroups request (immediate).
pub fn handle(
    service: &BrokerService,
    correlation_id: i32,
    version: i16,
    request: &ListGroupsRequest,
) -> KafkaResponse {
    let type_wanted = |name: &str| {
        request.types_filter.is_empty()
            || request
                .types_filter
                .iter()
                .any(|wanted| wanted.eq_ignore_ascii_case(name))
    };
    let consumer_groups = service
        .groups()
        .consumer_groups()
        .list(std::time::Instant::now());
    let mut groups: Vec<ListedGroup> = match type_wanted(CLASSIC_GROUP_TYPE) {
        true => every_group(service)
            .into_iter()
            .filter(|group| !consumer_groups.iter().any(|(id, _)| *id == group.group_id))
            .filter(|group| state_wanted(&request.states_filter, group.state.kafka_name()))
            .map(|group| listed(version, group))
            .collect(),
        false => Vec::new(),
    };
    if type_wanted(CONSUMER_GROUP_TYPE) {
        for (group_id, state) in consumer_groups {
            if !state_wanted(&request.states_filter, state.kafka_name()) {
                continue;
            }
            let mut group = ListedGroup::default()
                .with_group_id(GroupId(StrBytes::from_string(group_id)))
                .with_protocol_type(StrBytes::from_static_str("consumer"));
            if version >= 4 {
                group = group.with_group_state(StrBytes::from_static_str(state.kafka_name()));
            }
            if version >= 5 {
                group = group.with_group_type(StrBytes::from_static_str(CONSUMER_GROUP_TYPE));
            }
            groups.push(group);
        }
        groups.sort_by(|a, b| a.group_id.0.cmp(&b.group_id.0));
    }
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::ListGroups,
        api_version: version,
        body: ResponseBody::message(ListGroupsResponse::default().with_groups(groups)),
    }
}

/// The coordinator's groups, and the groups with committed offsets only as `Empty`.
fn every_group(service: &BrokerService) -> Vec<GroupListing> {
    let mut groups: BTreeMap<String, GroupListing> = service
        .groups()
        .group_names()
        .into_iter()
        .map(|group_id| {
            let listing = GroupListing {
                group_id: group_id.clone(),
                state: GroupState::Empty,
                protocol_type: String::new(),
            };
            (group_id, listing)
        })
        .collect();
    for listing in service.groups().coordinator().list() {
        groups.insert(listing.group_id.clone(), listing);
    }
    groups.into_values().collect()
}

fn state_wanted(states_filter: &[StrBytes], state: &str) -> bool {
    states_filter.is_empty()
        || states_filter
            .iter()
            .any(|wanted| wanted.eq_ignore_ascii_case(state))
}

fn listed(version: i16, group: GroupListing) -> ListedGroup {
    let mut listed = ListedGroup::default()
        .with_group_id(GroupId(StrBytes::from_string(group.group_id)))
        .with_protocol_type(StrBytes::from_string(group.protocol_type));
    // Fields the older versions do not have must stay at their defaults to encode.
    if version >= 4 {
        listed = listed.with_group_state(StrBytes::from_static_str(group.state.kafka_name()));
    }
    if version >= 5 {
        listed = listed.with_group_type(StrBytes::from_static_str(CLASSIC_GROUP_TYPE));
    }
    listed
}
