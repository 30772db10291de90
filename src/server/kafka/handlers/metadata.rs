//! Metadata (key 3), v0..=12: the brokers, the controller, and the requested topics with their
//! partitions, as the broker service's replica manager sees them.
//!
//! Choices a client can see:
//! - Topics are never created by Metadata (`allow_auto_topic_creation` is ignored): an unknown
//!   topic is `UNKNOWN_TOPIC_OR_PARTITION`, an invalid name `INVALID_TOPIC_EXCEPTION`, an
//!   unknown topic id (v10+) `UNKNOWN_TOPIC_ID`.
//! - Standalone, this broker is the only broker, leader, replica, in-sync replica and
//!   controller, and the leader epoch (v7+) is -1, "unknown": there is no leadership to change,
//!   and with -1 clients skip the `current_leader_epoch` checks.
//! - In a cluster, the brokers are the live brokers that registered a Kafka address (this one
//!   as it advertises itself); a partition names its leader (-1 with `LEADER_NOT_AVAILABLE`
//!   while it has none), its leader epoch (the cluster's, which Fetch, ListOffsets and
//!   OffsetForLeaderEpoch check), replicas, ISR and offline replicas (replicas with no live
//!   registration). The controller is the answering broker: fencelog has no controller (etcd
//!   decides), any broker carries out admin requests, and clients only need a live one there.
//! - Topic ids (v10+) are derived from the name ([`super::super::topic_id`]).
//! - Authorized operations (v8+) are left at Kafka's "not requested" value.
//! - Which topics: v0 lists all topics for an empty array; v1+ for a null array (an empty one
//!   asks for none).

use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{ApiKey, BrokerId, MetadataRequest, MetadataResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::super::authorization::TOPIC_REFUSED;
use super::super::config::KafkaConfig;
use super::super::errors::kafka_error;
use super::super::response::{KafkaResponse, ResponseBody};
use super::super::topic_id::{topic_id, topic_name};
use super::api::{Call, KafkaApi};
use crate::auth::Access;
use crate::broker::cluster::BrokerAddress;
use crate::broker::{validate_topic_name, BrokerService, Topic};
use crate::server::protocol::Started;

/// Metadata as the listener serves it: no ACL check before it runs, since what a principal may
/// not see is left out of the answer or refused in it ([`hide_unseen`]).
pub struct Metadata;

impl KafkaApi for Metadata {
    type Request = MetadataRequest;
    const KEY: ApiKey = ApiKey::Metadata;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 12;

    fn start(call: Call<'_>, request: MetadataRequest) -> Started<KafkaResponse> {
        Started::ready(handle(
            call.service,
            call.config,
            &call.access,
            call.correlation_id,
            call.version,
            &request,
        ))
    }
}

/// The answer to a Metadata request.
pub fn handle(
    service: &BrokerService,
    config: &KafkaConfig,
    access: &Access,
    correlation_id: i32,
    version: i16,
    request: &MetadataRequest,
) -> KafkaResponse {
    let node = kafka_broker_id(service);
    let live = service.replica_manager().brokers("");
    let brokers = listed(&live, service, config);
    // The answering broker: it is live (it answers), and any broker carries out what a Kafka
    // client sends its controller (etcd decides). A fixed choice such as the lowest id would
    // name a killed broker until its registration lapses, and admin clients would keep trying
    // it.
    let controller = node;
    let view = View {
        service,
        node,
        reachable: brokers.iter().map(|broker| broker.node_id).collect(),
        registered: live
            .iter()
            .map(|broker| BrokerId(i32::try_from(broker.node_id).unwrap_or(i32::MAX)))
            .collect(),
        cluster: service.replica_manager().is_cluster(),
    };
    let mut body = MetadataResponse::default()
        .with_brokers(brokers)
        .with_controller_id(controller)
        .with_topics(topics(&view, version, request));
    if version >= 2 {
        body.cluster_id = Some(StrBytes::from_string(config.cluster_id.clone()));
    }
    hide_unseen(access, lists_all_topics(request), &mut body);
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::Metadata,
        api_version: version,
        body: ResponseBody::message(body),
    }
}

/// Whether a Metadata request asks for every topic.
fn lists_all_topics(request: &MetadataRequest) -> bool {
    request.topics.as_ref().is_none_or(Vec::is_empty)
}

/// With `--auth`, leaves out of (all topics) or refuses in (named topics,
/// `TOPIC_AUTHORIZATION_FAILED` without partitions) a Metadata answer the topics the connection
/// may not see (no operation on them).
fn hide_unseen(access: &Access, all_topics: bool, body: &mut MetadataResponse) {
    if access.principal().is_none() {
        return;
    }
    let visible = |name: Option<&str>| name.is_none_or(|name| access.may_see(name));
    if all_topics {
        body.topics
            .retain(|topic| visible(topic.name.as_ref().map(|name| name.as_str())));
    } else {
        for topic in &mut body.topics {
            if !visible(topic.name.as_ref().map(|name| name.as_str())) {
                topic.error_code = TOPIC_REFUSED;
                topic.partitions.clear();
            }
        }
    }
}

/// The brokers a client may connect to: this one as it advertises itself, and in a cluster every
/// other live broker that registered a Kafka address.
pub(super) fn brokers(
    service: &BrokerService,
    config: &KafkaConfig,
) -> Vec<MetadataResponseBroker> {
    listed(&service.replica_manager().brokers(""), service, config)
}

/// [`brokers`] from the live brokers already read.
fn listed(
    live: &[BrokerAddress],
    service: &BrokerService,
    config: &KafkaConfig,
) -> Vec<MetadataResponseBroker> {
    let node = kafka_broker_id(service);
    let this = MetadataResponseBroker::default()
        .with_node_id(node)
        .with_host(StrBytes::from_string(config.advertised_host.clone()))
        .with_port(i32::from(config.advertised_port));
    let mut brokers = vec![this];
    for broker in live {
        let id = BrokerId(i32::try_from(broker.node_id).unwrap_or(i32::MAX));
        if id == node {
            continue;
        }
        // Registered as `KafkaConfig::advertised_address` wrote it.
        let Some(advertised) = broker
            .kafka_addr
            .as_deref()
            .and_then(|address| KafkaConfig::advertising_host_port(address).ok())
        else {
            continue;
        };
        brokers.push(
            MetadataResponseBroker::default()
                .with_node_id(id)
                .with_host(StrBytes::from_string(advertised.advertised_host))
                .with_port(i32::from(advertised.advertised_port)),
        );
    }
    brokers.sort_by_key(|broker| broker.node_id);
    brokers
}

/// What a topic's description needs to know.
struct View<'a> {
    service: &'a BrokerService,
    node: BrokerId,
    /// The brokers listed (a leader elsewhere is of no use to a Kafka client).
    reachable: Vec<BrokerId>,
    /// Every live broker (the others of a partition's replicas are offline).
    registered: Vec<BrokerId>,
    cluster: bool,
}

fn topics(view: &View<'_>, version: i16, request: &MetadataRequest) -> Vec<MetadataResponseTopic> {
    let service = view.service;
    let all = match &request.topics {
        None => true,
        Some(topics) => version == 0 && topics.is_empty(),
    };
    if all {
        return service
            .broker()
            .topics()
            .iter()
            .map(|topic| described(topic, view))
            .collect();
    }
    let mut known: Option<Vec<Arc<Topic>>> = None;
    request
        .topics
        .iter()
        .flatten()
        .map(|wanted| match &wanted.name {
            Some(name) => by_name(view, name.0.as_str()),
            None => {
                let topics = known.get_or_insert_with(|| service.broker().topics());
                by_id(topics, view, wanted.topic_id)
            }
        })
        .collect()
}

fn by_name(view: &View<'_>, name: &str) -> MetadataResponseTopic {
    if validate_topic_name(name).is_err() {
        return failed(
            Some(name),
            Uuid::nil(),
            ResponseError::InvalidTopicException,
        );
    }
    match view.service.broker().topic(name) {
        Ok(topic) => described(&topic, view),
        Err(error) => failed(Some(name), Uuid::nil(), kafka_error(&error)),
    }
}

fn by_id(topics: &[Arc<Topic>], view: &View<'_>, id: Uuid) -> MetadataResponseTopic {
    topics
        .iter()
        .find(|topic| topic_id(topic.name()) == id)
        .map(|topic| described(topic, view))
        .unwrap_or_else(|| failed(None, id, ResponseError::UnknownTopicId))
}

fn failed(name: Option<&str>, id: Uuid, error: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(error.code())
        .with_name(name.map(topic_name))
        .with_topic_id(id)
}

fn described(topic: &Topic, view: &View<'_>) -> MetadataResponseTopic {
    let count = i32::try_from(topic.partitions().len()).unwrap_or(i32::MAX);
    let partitions = (0..count)
        .map(|index| {
            if !view.cluster {
                return MetadataResponsePartition::default()
                    .with_partition_index(index)
                    .with_leader_id(view.node)
                    .with_leader_epoch(-1)
                    .with_replica_nodes(vec![view.node])
                    .with_isr_nodes(vec![view.node]);
            }
            let state = view
                .service
                .replica_manager()
                .partition_state(topic.name(), index as u32);
            let id = |node: &u32| BrokerId(i32::try_from(*node).unwrap_or(i32::MAX));
            let replicas: Vec<BrokerId> = state.replicas.iter().map(id).collect();
            let offline = replicas
                .iter()
                .copied()
                .filter(|replica| !view.registered.contains(replica))
                .collect();
            let leader = state.leader.as_ref().map(id);
            let answer = MetadataResponsePartition::default()
                .with_partition_index(index)
                .with_leader_id(leader.unwrap_or(BrokerId(-1)))
                .with_leader_epoch(i32::try_from(state.leader_epoch).unwrap_or(i32::MAX))
                .with_replica_nodes(replicas)
                .with_isr_nodes(state.isr.iter().map(id).collect())
                .with_offline_replicas(offline);
            match leader {
                Some(leader) if view.reachable.contains(&leader) => answer,
                _ => answer.with_error_code(ResponseError::LeaderNotAvailable.code()),
            }
        })
        .collect();
    // Kafka clients leave internal topics out of pattern subscriptions.
    let internal = view.cluster && topic.name() == crate::domain::OFFSETS_TOPIC;
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(topic.name())))
        .with_topic_id(topic_id(topic.name()))
        .with_is_internal(internal)
        .with_partitions(partitions)
}

/// This broker's id in Kafka's protocol: its node id (`serve --node-id`), the same number every
/// listener reports. Kafka's ids are signed; `serve` refuses a node id above `i32::MAX` with
/// `--kafka-listen`, so the clamp is never reached there.
pub(in crate::server::kafka) fn kafka_broker_id(service: &BrokerService) -> BrokerId {
    BrokerId(i32::try_from(service.node_id()).unwrap_or(i32::MAX))
}
