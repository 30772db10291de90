//! The listener's one list of Kafka API handlers and what ApiVersions says of it: one row per
//! API with a non-empty range, in key order; every ApiVersions version answers exactly that
//! list on the wire; v3+ refuses an invalid client software name; and the KIP-511 fallback
//! answers a version the listener does not have with the list in v0.

use crate::support::kafka;

use std::collections::HashSet;

use bytes::{Buf, BufMut, BytesMut};
use fencelog::server::kafka::handlers::HANDLERS;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::{Decodable, StrBytes};

use crate::kafka_protocol::{assert_still_open, kafka_server};
use kafka::KafkaConnection;

/// The handler list (`HANDLERS` in `src/server/kafka/handlers/mod.rs`), as ApiVersions lists it.
fn advertised_table() -> Vec<(i16, i16, i16)> {
    HANDLERS
        .iter()
        .map(|handler| (handler.key as i16, handler.min_version, handler.max_version))
        .collect()
}

/// Every handler in the list names a distinct API with a non-empty version range, and the list
/// is in API key order (ApiVersions lists it as is). Also proved at compile time; this says it
/// plainly and keeps saying it if the compile-time check is ever loosened.
#[test]
fn every_handler_has_a_distinct_key_and_min_at_most_max() {
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

/// Every ApiVersions version answers the same table: the listener's handler list, row for row
/// in API key order (each API's test file checks the literal ranges it exercises).
#[tokio::test]
async fn api_versions_lists_exactly_the_implemented_table_in_every_version() {
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    for version in 0..=4 {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("fencelog-test"))
            .with_client_software_version(StrBytes::from_static_str("1.0"));
        let response = connection.call(version, &request).await;
        assert_eq!(response.error_code, 0, "v{version}");
        let table: Vec<(i16, i16, i16)> = response
            .api_keys
            .iter()
            .map(|api| (api.api_key, api.min_version, api.max_version))
            .collect();
        assert_eq!(table, advertised_table(), "v{version}");
    }
}

/// ApiVersions v3+ refuses a client software name outside Kafka's pattern, as Kafka does.
#[tokio::test]
async fn api_versions_v3_refuses_an_invalid_client_software_name() {
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    let request = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("bad name!"))
        .with_client_software_version(StrBytes::from_static_str("1.0"));
    let response = connection.call(3, &request).await;
    assert_eq!(response.error_code, 42, "INVALID_REQUEST");
}

/// KIP-511: an ApiVersions version the listener does not have is answered in v0 (header and
/// body) with UNSUPPORTED_VERSION and the table, and the connection stays open.
#[tokio::test]
async fn an_unknown_api_versions_version_gets_the_table_in_v0_with_unsupported_version() {
    let server = kafka_server().await;
    let mut connection = KafkaConnection::connect(server.kafka_addr()).await;
    // A future version whose body we cannot know: only the prefix matters.
    let mut frame = BytesMut::new();
    frame.put_u32(12);
    frame.put_i16(ApiKey::ApiVersions as i16);
    frame.put_i16(77);
    frame.put_i32(4242);
    frame.put_u32(0xdead_beef);
    connection.write(&frame).await;
    let mut response = connection.read_frame().await.expect("an answer");
    assert_eq!(
        response.get_i32(),
        4242,
        "v0 header: the correlation id alone"
    );
    let body = ApiVersionsResponse::decode(&mut response, 0).expect("v0 body");
    assert!(response.is_empty());
    assert_eq!(body.error_code, 35, "UNSUPPORTED_VERSION");
    assert_eq!(body.api_keys.len(), advertised_table().len());
    assert_still_open(&mut connection).await;
}
