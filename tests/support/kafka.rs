//! A raw Kafka connection for the Kafka listener's tests: requests encoded the way a Kafka client
//! encodes them (`kafka-protocol`'s client side), responses decoded and checked to the last byte.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest a test waits for one response or for the server to close.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// A raw Kafka connection.
pub struct KafkaConnection {
    stream: TcpStream,
    next_correlation_id: i32,
}

impl KafkaConnection {
    pub async fn connect(addr: SocketAddr) -> Self {
        Self {
            stream: TcpStream::connect(addr).await.expect("connect"),
            next_correlation_id: 1,
        }
    }

    /// Encodes a request frame the way a Kafka client does.
    pub fn frame<R: Request>(correlation_id: i32, version: i16, body: &R) -> Bytes {
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("fencelog-test")));
        let mut payload = BytesMut::new();
        header
            .encode(&mut payload, R::header_version(version))
            .expect("encode header");
        body.encode(&mut payload, version).expect("encode body");
        let mut frame = BytesMut::new();
        frame.put_u32(payload.len() as u32);
        frame.extend_from_slice(&payload);
        frame.freeze()
    }

    pub async fn send<R: Request>(&mut self, version: i16, body: &R) -> i32 {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        self.write(&Self::frame(correlation_id, version, body))
            .await;
        correlation_id
    }

    pub async fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Reads one response frame; `None` if the server closed the connection.
    pub async fn read_frame(&mut self) -> Option<Bytes> {
        let mut length = [0u8; 4];
        match tokio::time::timeout(TIMEOUT, self.stream.read_exact(&mut length))
            .await
            .expect("response within the timeout")
        {
            Ok(_) => {}
            Err(_) => return None,
        }
        let mut body = vec![0u8; u32::from_be_bytes(length) as usize];
        tokio::time::timeout(TIMEOUT, self.stream.read_exact(&mut body))
            .await
            .expect("response body within the timeout")
            .expect("read response body");
        Some(Bytes::from(body))
    }

    /// Reads a response of `R` at `version` and checks its correlation id and that it decodes
    /// to the last byte.
    pub async fn receive<R: Request>(&mut self, correlation_id: i32, version: i16) -> R::Response {
        let mut frame = self.read_frame().await.expect("a response, not a close");
        let header = ResponseHeader::decode(
            &mut frame,
            <R::Response as HeaderVersion>::header_version(version),
        )
        .expect("response header");
        assert_eq!(header.correlation_id, correlation_id);
        let response = R::Response::decode(&mut frame, version).expect("response body");
        assert!(
            frame.is_empty(),
            "{} bytes left after the body",
            frame.len()
        );
        response
    }

    pub async fn call<R: Request>(&mut self, version: i16, body: &R) -> R::Response {
        let correlation_id = self.send(version, body).await;
        self.receive::<R>(correlation_id, version).await
    }

    /// Asserts the server closes the connection without answering.
    pub async fn assert_closed(&mut self) {
        assert!(
            self.read_frame().await.is_none(),
            "expected the server to close the connection"
        );
    }
}

/// A Kafka record at `offset` (its offset delta in the batch) with a key and value; of an
/// idempotent producer when `producer` is `(producer_id, base_sequence)`.
pub fn kafka_record(offset: i64, key: &str, value: &str, producer: Option<(i64, i32)>) -> Record {
    let (producer_id, producer_epoch, sequence) = match producer {
        Some((producer_id, base_sequence)) => (producer_id, 0, base_sequence + offset as i32),
        None => (-1, -1, -1),
    };
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id,
        producer_epoch,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence,
        timestamp: 1_700_000_000_000 + offset,
        key: Some(Bytes::from(key.to_owned())),
        value: Some(Bytes::from(value.to_owned())),
        headers: Default::default(),
    }
}

/// One Kafka record batch v2 of `records`.
pub fn kafka_batch_of(records: &[Record], compression: Compression) -> Bytes {
    let mut out = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut out,
        records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("encode batch");
    out.freeze()
}

/// A test server with a Kafka listener on a free loopback port and `broker`'s settings.
pub async fn kafka_server_with(
    broker: fencelog::broker::BrokerConfig,
) -> fencelog::testing::TestServer {
    let kafka = fencelog::server::KafkaConfig::advertising(SocketAddr::from(([127, 0, 0, 1], 0)));
    fencelog::testing::TestServer::builder()
        .broker_config(broker)
        .kafka_config(kafka)
        .start()
        .await
        .expect("start server")
}

/// A Kafka test server whose new groups settle after 200 ms instead of Kafka's 3 s initial
/// rebalance delay, so group tests do not spend most of their time waiting for more members.
pub async fn kafka_server_with_quick_groups() -> fencelog::testing::TestServer {
    kafka_server_with(fencelog::broker::BrokerConfig {
        coordinator: fencelog::broker::CoordinatorConfig {
            initial_rebalance_delay: Duration::from_millis(200),
            ..fencelog::broker::CoordinatorConfig::default()
        },
        ..fencelog::broker::BrokerConfig::default()
    })
    .await
}

/// Creates `topic` with `partitions` partitions (default config) through the native client.
pub async fn create_topic(server: &fencelog::testing::TestServer, topic: &str, partitions: u32) {
    let client = fencelog::client::Client::connect(server.addr())
        .await
        .expect("connect");
    client
        .create_topic(topic, partitions, fencelog::domain::TopicConfig::default())
        .await
        .expect("create topic");
}
