//! Fuzz-style property tests of the Kafka listener's decoding path, which sees untrusted bytes:
//! the request decoder (`server::kafka::request::decode`: header, then the vendored
//! `kafka-protocol` body decoder) and the record-batch conversion a Produce runs
//! (`kafka::to_native_batches`).
//!
//! Inputs are random bodies behind every advertised API and version, mutated valid requests
//! (flipped bytes, truncations, spliced garbage) and mutated record batches. Every case asserts:
//! no panic, no hang (a generous time budget per case, against loops and quadratic blow-ups, not
//! a performance claim), and only typed errors. Counts far beyond the frame are refused before
//! anything is reserved (see `tests/kafka/kafka_protocol.rs` for that allocation check).

use crate::support::kafka;

use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use fencelog::server::kafka::batches::{to_native_batches, RecordLimits};
use fencelog::server::kafka::request::decode;
use fencelog::server::kafka::versions::SUPPORTED_APIS;
use kafka::{kafka_batch_of, kafka_record};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiVersionsRequest, MetadataRequest, ProduceRequest, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Encodable, Request, StrBytes};
use kafka_protocol::records::Compression;
use proptest::prelude::*;

/// Longest one case may take (a hang guard for a slow CI machine).
const CASE_BUDGET: Duration = Duration::from_secs(2);

fn within_budget<T>(what: &str, work: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let result = work();
    let elapsed = started.elapsed();
    assert!(elapsed < CASE_BUDGET, "{what} took {elapsed:?}");
    result
}

/// A request frame body (no size prefix) as a Kafka client encodes it.
fn encoded<R: Request>(version: i16, body: &R) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("fuzz")));
    let mut out = BytesMut::new();
    header
        .encode(&mut out, R::header_version(version))
        .expect("header");
    body.encode(&mut out, version).expect("body");
    out.to_vec()
}

/// A Kafka record batch v2 of `count` small records.
fn kafka_batch(count: usize, compression: Compression) -> Bytes {
    let records: Vec<_> = (0..count)
        .map(|index| {
            let value = format!("value {index}");
            kafka_record(index as i64, &format!("k{index}"), &value, None)
        })
        .collect();
    kafka_batch_of(&records, compression)
}

/// Valid request bodies of several APIs to mutate.
fn valid_requests() -> Vec<Vec<u8>> {
    let produce =
        ProduceRequest::default()
            .with_acks(1)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(kafka_batch(3, Compression::None)))])]);
    let metadata = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str("t"))))]));
    vec![
        encoded(9, &produce),
        encoded(3, &produce),
        encoded(12, &metadata),
        encoded(4, &metadata),
        encoded(3, &ApiVersionsRequest::default()),
    ]
}

/// A mutation of `bytes`: flip, truncate or splice.
fn mutate(bytes: &[u8], kind: u8, at: usize, value: u8, garbage: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    if out.is_empty() {
        return garbage.to_vec();
    }
    let at = at % out.len();
    match kind % 3 {
        0 => out[at] ^= value.max(1),
        1 => out.truncate(at),
        _ => {
            out.splice(at..at, garbage.iter().copied());
        }
    }
    out
}

proptest! {
    #![proptest_config(crate::support::proptest_config(400))]

    /// Random bodies behind every advertised API and version: decoded or refused, never a panic.
    #[test]
    fn random_bodies_of_every_advertised_api_are_refused_or_decoded(
        api in 0..SUPPORTED_APIS.len(),
        version_offset in 0i16..20,
        body in proptest::collection::vec(any::<u8>(), 0..1024),
    ) {
        let api = SUPPORTED_APIS[api];
        let span = api.max_version - api.min_version + 1;
        let version = api.min_version + version_offset % span;
        let mut frame = BytesMut::new();
        frame.put_i16(api.key as i16);
        frame.put_i16(version);
        frame.put_i32(1);
        frame.extend_from_slice(&body);
        let _ = within_budget("decode", || decode(frame.freeze()));
    }

    /// Mutated valid requests: decoded or refused, never a panic.
    #[test]
    fn mutated_requests_are_refused_or_decoded(
        which in 0usize..5,
        kind in any::<u8>(),
        at in any::<usize>(),
        value in any::<u8>(),
        garbage in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let requests = valid_requests();
        let mutated = mutate(&requests[which % requests.len()], kind, at, value, &garbage);
        let _ = within_budget("decode", || decode(Bytes::from(mutated)));
    }

    /// Mutated record batches (every compression): converted or refused with a typed error.
    #[test]
    fn mutated_record_batches_are_converted_or_refused(
        count in 1usize..20,
        codec in 0usize..5,
        kind in any::<u8>(),
        at in any::<usize>(),
        value in any::<u8>(),
        garbage in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let compression = [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ][codec];
        let batch = kafka_batch(count, compression);
        let mutated = mutate(&batch, kind, at, value, &garbage);
        let converted = within_budget("convert", || {
            to_native_batches(&bytes::Bytes::copy_from_slice(&mutated), 0, &RecordLimits::default())
        });
        // What the listener keeps as it arrived (compressed batches too) is validated by the
        // partition, which decompresses it: refused or valid, within the budget too.
        for batch in converted.into_iter().flatten() {
            let stored = batch.bytes.to_bytes();
            let _ = within_budget("validate", || fencelog::batch::validate(&stored, usize::MAX));
        }
    }
}
