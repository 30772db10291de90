//! One file per Kafka API: each declares what the listener knows about its API (request type,
//! versions, ACL rule, answer to a refused request: an `impl` of [`api::KafkaApi`]) beside the
//! handler that turns a decoded request into [`crate::broker::BrokerService`] calls and a
//! response body, and documents at its top the choices a Kafka client can observe.
//!
//! [`HANDLERS`] lists them, in API key order: ApiVersions advertises exactly that list and the
//! request decoder serves exactly its versions ([`handler`]). Adding an API is its file here
//! (a unit type implementing [`api::KafkaApi`]), its `pub mod` line and its line in
//! [`HANDLERS`]; nothing else names it.
//!
//! Produce starts its appends *now*, through the session's
//! [`crate::broker::produce_queue::ProduceQueue`] (request order); an `acks=0` produce returns
//! `Started { response: None, .. }`; APIs that wait (Fetch, JoinGroup, SyncGroup) return a
//! response future. [`leader_epoch`] is not an API: the leader-epoch check three of them share.

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_configs;
pub mod api;
pub mod api_versions;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_acls;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_acls;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_transactions;
pub mod end_txn;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leader_epoch;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod request;
pub mod sasl_authenticate;
pub mod sasl_handshake;
pub mod sync_group;
pub mod txn_offset_commit;

use std::sync::Arc;

use kafka_protocol::messages::ApiKey;

pub use api::{AclRefusal, ApiHandler, Call, KafkaApi};

use super::response::KafkaResponse;
use super::{KafkaConfig, KafkaSession};
use crate::broker::BrokerService;
use crate::server::protocol::Started;
use request::KafkaRequest;

/// Every API the listener answers, in API key order (ApiVersions lists it as is; the order and
/// the keys' uniqueness are checked at compile time).
pub const HANDLERS: &[ApiHandler] = &[
    ApiHandler::of::<produce::Produce>(),
    ApiHandler::of::<fetch::Fetch>(),
    ApiHandler::of::<list_offsets::ListOffsets>(),
    ApiHandler::of::<metadata::Metadata>(),
    ApiHandler::of::<offset_commit::OffsetCommit>(),
    ApiHandler::of::<offset_fetch::OffsetFetch>(),
    ApiHandler::of::<find_coordinator::FindCoordinator>(),
    ApiHandler::of::<join_group::JoinGroup>(),
    ApiHandler::of::<heartbeat::Heartbeat>(),
    ApiHandler::of::<leave_group::LeaveGroup>(),
    ApiHandler::of::<sync_group::SyncGroup>(),
    ApiHandler::of::<describe_groups::DescribeGroups>(),
    ApiHandler::of::<list_groups::ListGroups>(),
    ApiHandler::of::<sasl_handshake::SaslHandshake>(),
    ApiHandler::of::<api_versions::ApiVersions>(),
    ApiHandler::of::<create_topics::CreateTopics>(),
    ApiHandler::of::<delete_topics::DeleteTopics>(),
    ApiHandler::of::<delete_records::DeleteRecords>(),
    ApiHandler::of::<init_producer_id::InitProducerId>(),
    ApiHandler::of::<offset_for_leader_epoch::OffsetForLeaderEpoch>(),
    ApiHandler::of::<add_partitions_to_txn::AddPartitionsToTxn>(),
    ApiHandler::of::<add_offsets_to_txn::AddOffsetsToTxn>(),
    ApiHandler::of::<end_txn::EndTxn>(),
    ApiHandler::of::<txn_offset_commit::TxnOffsetCommit>(),
    ApiHandler::of::<describe_acls::DescribeAcls>(),
    ApiHandler::of::<create_acls::CreateAcls>(),
    ApiHandler::of::<delete_acls::DeleteAcls>(),
    ApiHandler::of::<describe_configs::DescribeConfigs>(),
    ApiHandler::of::<alter_configs::AlterConfigs>(),
    ApiHandler::of::<describe_log_dirs::DescribeLogDirs>(),
    ApiHandler::of::<sasl_authenticate::SaslAuthenticate>(),
    ApiHandler::of::<create_partitions::CreatePartitions>(),
    ApiHandler::of::<delete_groups::DeleteGroups>(),
    ApiHandler::of::<incremental_alter_configs::IncrementalAlterConfigs>(),
    ApiHandler::of::<offset_delete::OffsetDelete>(),
    ApiHandler::of::<describe_cluster::DescribeCluster>(),
    ApiHandler::of::<describe_producers::DescribeProducers>(),
    ApiHandler::of::<describe_transactions::DescribeTransactions>(),
    ApiHandler::of::<list_transactions::ListTransactions>(),
    ApiHandler::of::<consumer_group_heartbeat::ConsumerGroupHeartbeat>(),
    ApiHandler::of::<consumer_group_describe::ConsumerGroupDescribe>(),
];

/// The list is in strictly increasing key order: sorted, and no API twice.
const _: () = assert!(
    in_strict_key_order(HANDLERS),
    "HANDLERS must be in API key order with one row per API"
);

const fn in_strict_key_order(handlers: &[ApiHandler]) -> bool {
    let mut index = 1;
    while index < handlers.len() {
        if handlers[index - 1].key as i16 >= handlers[index].key as i16 {
            return false;
        }
        index += 1;
    }
    true
}

/// The row of `key`, or `None` if the listener does not answer that API.
pub fn handler(key: ApiKey) -> Option<&'static ApiHandler> {
    HANDLERS.iter().find(|handler| handler.key == key)
}

/// Starts one decoded request: its API's SASL gate and ACL rule, then its handler.
pub fn start(
    service: &Arc<BrokerService>,
    config: &KafkaConfig,
    session: &mut KafkaSession,
    request: KafkaRequest,
) -> Started<KafkaResponse> {
    let access = session.sasl.authentication.access();
    request.body.start(Call {
        service,
        config,
        session,
        access,
        correlation_id: request.header.correlation_id,
        version: request.header.request_api_version,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// Every row names a distinct API with a non-empty range (the compile-time checks, kept as
    /// a test so a failure reads plainly).
    #[test]
    fn every_handler_has_a_distinct_key_and_a_range() {
        let mut keys = HashSet::new();
        for handler in HANDLERS {
            assert!(keys.insert(handler.key), "{:?} listed twice", handler.key);
            assert!(handler.min_version <= handler.max_version, "{handler:?}");
        }
        let keys: Vec<i16> = HANDLERS.iter().map(|handler| handler.key as i16).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(keys, sorted, "in API key order");
    }

    /// Nothing is advertised that the codec cannot decode and encode.
    #[test]
    fn every_listed_version_is_one_the_codec_knows() {
        for handler in HANDLERS {
            let valid = handler.key.valid_versions();
            assert!(
                valid.min <= handler.min_version && handler.max_version <= valid.max,
                "{:?} {}..={} outside the codec's {}..={}",
                handler.key,
                handler.min_version,
                handler.max_version,
                valid.min,
                valid.max
            );
        }
    }

    /// ApiVersions' answer, as encoded on the wire, is the list row for row: in every version
    /// and in the KIP-511 fallback.
    #[test]
    fn api_versions_answers_the_list() {
        use bytes::{Buf, BytesMut};
        use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
        use kafka_protocol::protocol::Decodable;

        let listed: Vec<(i16, i16, i16)> = HANDLERS
            .iter()
            .map(|handler| (handler.key as i16, handler.min_version, handler.max_version))
            .collect();
        let request = ApiVersionsRequest::default();
        let answers = (0..=4)
            .map(|version| api_versions::handle(7, version, &request))
            .chain([api_versions::unsupported(7)]);
        for answer in answers {
            let version = answer.api_version;
            let mut frame = BytesMut::new();
            answer
                .encode_frame(&mut frame, usize::MAX)
                .expect("encodes");
            let mut frame = frame.freeze();
            frame.advance(4);
            assert_eq!(frame.get_i32(), 7, "v0 header: the correlation id");
            let body = ApiVersionsResponse::decode(&mut frame, version).expect("decodes");
            let advertised: Vec<(i16, i16, i16)> = body
                .api_keys
                .iter()
                .map(|api| (api.api_key, api.min_version, api.max_version))
                .collect();
            assert_eq!(advertised, listed, "v{version}");
        }
    }
}
