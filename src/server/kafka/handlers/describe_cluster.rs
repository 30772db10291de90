//! DescribeCluster (key 60), v0..=2: the brokers, the controller and the cluster id, as
//! Metadata answers them (the Java AdminClient's `describeCluster`, kafka-python 3's
//! `describe_cluster`).
//!
//! - The brokers are those Metadata lists (standalone: this one; on a cluster every live broker
//!   with a Kafka address), none of them fenced (v2's `is_fenced` is false: a broker whose
//!   registration lapsed is simply not listed). The controller is Metadata's (the answering
//!   broker: etcd, not a controller, decides in fencelog).
//! - `endpoint_type` (v1+): 1 (brokers) is answered; 2 (controllers) is refused with
//!   `UNSUPPORTED_ENDPOINT_TYPE` (fencelog has no controller listener).
//! - `cluster_authorized_operations` is Kafka's "not requested" value (`i32::MIN`) whatever was
//!   asked: fencelog's ACLs are not Kafka's operations.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{ApiKey, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::config::KafkaConfig;
use super::super::response::{KafkaResponse, ResponseBody};
use super::api::{Call, KafkaApi};
use super::metadata;
use crate::broker::BrokerService;
use crate::server::protocol::Started;

/// DescribeCluster as the listener serves it: authentication only.
pub struct DescribeCluster;

impl KafkaApi for DescribeCluster {
    type Request = DescribeClusterRequest;
    const KEY: ApiKey = ApiKey::DescribeCluster;
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 2;

    fn start(call: Call<'_>, request: DescribeClusterRequest) -> Started<KafkaResponse> {
        Started::ready(handle(
            call.service,
            call.config,
            call.correlation_id,
            call.version,
            &request,
        ))
    }
}

/// The endpoint type of brokers (Kafka's `EndpointType.BROKER`).
const BROKER_ENDPOINTS: i8 = 1;

/// The answer to a DescribeCluster request (immediate).
pub fn handle(
    service: &BrokerService,
    config: &KafkaConfig,
    correlation_id: i32,
    version: i16,
    request: &DescribeClusterRequest,
) -> KafkaResponse {
    let mut body = DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(config.cluster_id.clone()))
        .with_cluster_authorized_operations(i32::MIN);
    if version >= 1 {
        body = body.with_endpoint_type(BROKER_ENDPOINTS);
    }
    if version >= 1 && request.endpoint_type != BROKER_ENDPOINTS {
        body = body
            .with_error_code(ResponseError::UnsupportedEndpointType.code())
            .with_error_message(Some(StrBytes::from_string(format!(
                "endpoint type {} is not served: fencelog has brokers (1) only, no controllers",
                request.endpoint_type
            ))))
            .with_controller_id(kafka_protocol::messages::BrokerId(-1));
    } else {
        let brokers = metadata::brokers(service, config);
        let controller = metadata::kafka_broker_id(service);
        body = body.with_controller_id(controller).with_brokers(
            brokers
                .into_iter()
                .map(|broker| {
                    DescribeClusterBroker::default()
                        .with_broker_id(broker.node_id)
                        .with_host(broker.host)
                        .with_port(broker.port)
                        .with_rack(broker.rack)
                })
                .collect(),
        );
    }
    KafkaResponse {
        correlation_id,
        api_key: ApiKey::DescribeCluster,
        api_version: version,
        body: ResponseBody::message(body),
    }
}
