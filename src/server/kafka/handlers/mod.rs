//! One file per Kafka API: each turns a decoded request into [`BrokerService`] calls and a
//! response body, and holds the choices a Kafka client can observe (documented at its top).
//!
//! [`start`] is the dispatch. A new API gets its file here, a row in
//! [`super::versions::SUPPORTED_APIS`], a request and a response variant, and an arm below.
//! Produce starts its appends *now*, through the session's
//! [`crate::broker::produce_queue::ProduceQueue`] (request order); an `acks=0` produce returns
//! `Started { response: None, .. }`; APIs that wait (Fetch, JoinGroup, SyncGroup) return a
//! response future.

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_configs;
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
pub mod sync_group;
pub mod txn_offset_commit;

use std::sync::Arc;

use super::request::{KafkaRequest, RequestBody};
use super::{KafkaConfig, KafkaSession};
use crate::broker::BrokerService;
use crate::server::protocol::Started;

use super::response::KafkaResponse;

/// Starts one decoded request: what must happen in request order happens now, the rest in
/// the returned response future.
pub fn start(
    service: &Arc<BrokerService>,
    config: &KafkaConfig,
    session: &mut KafkaSession,
    request: KafkaRequest,
) -> Started<KafkaResponse> {
    let correlation_id = request.header.correlation_id;
    let version = request.header.request_api_version;
    if let Some(closed) = super::sasl::gate(&session.sasl, request.api_key) {
        return closed;
    }
    let access = session.sasl.authentication.access();
    if let Some(refused) =
        super::authorization::refuse(&access, correlation_id, version, &request.body)
    {
        return refused;
    }
    match request.body {
        RequestBody::ApiVersions(body) => {
            Started::ready(api_versions::handle(correlation_id, version, &body))
        }
        RequestBody::Metadata(body) => Started::ready(super::authorization::filter_metadata(
            &access,
            super::authorization::lists_all_topics(&body),
            metadata::handle(service, config, correlation_id, version, &body),
        )),
        RequestBody::ListOffsets(body) => Started::ready(list_offsets::handle(
            service,
            correlation_id,
            version,
            &body,
        )),
        RequestBody::OffsetForLeaderEpoch(body) => Started::ready(offset_for_leader_epoch::handle(
            service,
            correlation_id,
            version,
            &body,
        )),
        RequestBody::CreateTopics(body) => Started::later(create_topics::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::DeleteTopics(body) => Started::later(delete_topics::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::DeleteRecords(body) => Started::later(delete_records::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::InitProducerId(body) => Started::later(init_producer_id::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::Produce(body) => {
            produce::start(service, session, correlation_id, version, body)
        }
        RequestBody::Fetch(body) => Started::later(fetch::handle(
            Arc::clone(service),
            session.fetch_memory.clone(),
            correlation_id,
            version,
            body,
        )),
        RequestBody::FindCoordinator(body) => Started::later(find_coordinator::handle(
            Arc::clone(service),
            metadata::brokers(service, config),
            correlation_id,
            version,
            body,
        )),
        RequestBody::JoinGroup(body) => Started::later(join_group::handle(
            Arc::clone(service),
            session.client_id.clone().unwrap_or_default(),
            session.peer,
            correlation_id,
            version,
            body,
        )),
        RequestBody::SyncGroup(body) => Started::later(sync_group::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::Heartbeat(body) => Started::later(heartbeat::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::LeaveGroup(body) => Started::later(leave_group::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::OffsetCommit(body) => Started::later(offset_commit::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::DescribeGroups(body) => Started::later(describe_groups::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::ListGroups(body) => {
            Started::ready(list_groups::handle(service, correlation_id, version, &body))
        }
        RequestBody::OffsetFetch(body) => Started::later(offset_fetch::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::DescribeConfigs(body) => Started::ready(describe_configs::handle(
            service,
            &access,
            correlation_id,
            version,
            &body,
        )),
        RequestBody::AlterConfigs(body) => Started::later(alter_configs::handle_alter(
            Arc::clone(service),
            access,
            correlation_id,
            version,
            body,
        )),
        RequestBody::IncrementalAlterConfigs(body) => {
            Started::later(alter_configs::handle_incremental(
                Arc::clone(service),
                access,
                correlation_id,
                version,
                body,
            ))
        }
        RequestBody::CreatePartitions(body) => Started::later(create_partitions::handle(
            Arc::clone(service),
            access,
            correlation_id,
            version,
            body,
        )),
        RequestBody::SaslHandshake(body) => {
            super::sasl::handshake(&mut session.sasl, correlation_id, version, &body)
        }
        RequestBody::SaslAuthenticate(body) => {
            super::sasl::authenticate(&mut session.sasl, correlation_id, version, &body)
        }
        RequestBody::DeleteGroups(body) => Started::later(delete_groups::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::OffsetDelete(body) => Started::later(offset_delete::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::ListTransactions(body) => Started::ready(list_transactions::handle(
            service,
            correlation_id,
            version,
            &body,
        )),
        RequestBody::DescribeTransactions(body) => Started::ready(describe_transactions::handle(
            service,
            correlation_id,
            version,
            &body,
        )),
        RequestBody::AddPartitionsToTxn(body) => Started::later(add_partitions_to_txn::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::AddOffsetsToTxn(body) => Started::later(add_offsets_to_txn::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::EndTxn(body) => Started::later(end_txn::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::TxnOffsetCommit(body) => Started::later(txn_offset_commit::handle(
            Arc::clone(service),
            correlation_id,
            version,
            body,
        )),
        RequestBody::DescribeLogDirs(body) => Started::later(describe_log_dirs::handle(
            Arc::clone(service),
            access,
            correlation_id,
            version,
            body,
        )),
        RequestBody::ConsumerGroupHeartbeat(body) => {
            Started::later(consumer_group_heartbeat::handle(
                Arc::clone(service),
                session.client_id.clone().unwrap_or_default(),
                session.peer,
                correlation_id,
                version,
                body,
            ))
        }
        RequestBody::DescribeProducers(body) => Started::ready(describe_producers::handle(
            service,
            &access,
            correlation_id,
            version,
            &body,
        )),
        RequestBody::DescribeAcls(body) => {
            Started::later(describe_acls::handle(access, correlation_id, version, body))
        }
        RequestBody::CreateAcls(body) => {
            Started::later(create_acls::handle(access, correlation_id, version, body))
        }
        RequestBody::DeleteAcls(body) => {
            Started::later(delete_acls::handle(access, correlation_id, version, body))
        }
        RequestBody::ConsumerGroupDescribe(body) => Started::later(
            consumer_group_describe::handle(Arc::clone(service), correlation_id, version, body),
        ),
        RequestBody::DescribeCluster(body) => Started::ready(describe_cluster::handle(
            service,
            config,
            correlation_id,
            version,
            &body,
        )),
    }
}
