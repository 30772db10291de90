//! Every native API version's bodies, as a real server answers them, laid out exactly as the
//! field tables of `docs/protocol.md` say: the request the encoder writes and the response the
//! server sends split into the document's fields for that version, in the document's order,
//! with no byte left over, and the fields hold what the scenario makes them hold.
//!
//! This is the test that catches a version answered in another version's layout (a Fetch
//! version 1 with isolation 0 once came back in version 0's layout, without
//! `last_stable_offset` and `next_offset`): the answers are read as raw bytes against the
//! document, never through the crate's own decoder, which could share the server's mistake.

use std::collections::BTreeSet;

use bytes::{Bytes, BytesMut};
use fencelog::protocol::{
    Acks, ApiKey, ApiVersionRange, FlushPolicy, Replication, Request, RequestFrame, TopicConfig,
    TopicConfigChange, FRAME_LENGTH_BYTES, REQUEST_HEADER_BYTES, RESPONSE_HEADER_BYTES,
};
use fencelog::testing::TestServer;
use futures::{SinkExt, StreamExt};

use crate::protocol_doc_tables::{section_of, walk, Layout, Value};
use crate::support::batch_of;
use crate::support::raw_protocol::{RawClient, CALL_TIMEOUT};

/// Sends `frame` and returns the raw answer: the frame body after the length prefix.
pub async fn exchange(client: &mut RawClient, frame: RequestFrame) -> Bytes {
    let exchange = async {
        client.framed.send(frame).await.expect("send request");
        client
            .framed
            .next()
            .await
            .expect("connection closed before the response")
            .expect("read response")
    };
    tokio::time::timeout(CALL_TIMEOUT, exchange)
        .await
        .expect("call timed out")
}

/// What the checks saw: which (api, version) requests and responses were held to a table.
#[derive(Default)]
struct Checked {
    requests: BTreeSet<(u16, u16)>,
    responses: BTreeSet<(u16, u16)>,
}

/// One request in the version its fields make it, checked both ways against the document:
/// its encoding splits into the request table's fields; the server's success answer splits into
/// the response table's, and the named integer fields hold `expect`. Returns the response's
/// fields (empty when the document gives no field table).
async fn check(
    client: &mut RawClient,
    checked: &mut Checked,
    label: &str,
    request: Request,
    version: u16,
    expect: &[(&str, i128)],
) -> std::collections::BTreeMap<String, Value> {
    let frame = RequestFrame::new(7, request);
    assert_eq!(
        frame.api_version, version,
        "{label}: sent in another version"
    );
    let key = frame.request.api_key().as_u16();
    let section = section_of(key);

    let mut encoded = BytesMut::new();
    frame.encode(&mut encoded).expect("encodable request");
    if let Some(fields) = section.request().fields_of(version) {
        let body = &encoded[FRAME_LENGTH_BYTES + REQUEST_HEADER_BYTES..];
        walk(&fields, body).unwrap_or_else(|error| {
            panic!("{label}: the request is not the document's version {version} layout: {error}")
        });
        checked.requests.insert((key, version));
    }

    let answer = exchange(client, frame).await;
    assert_eq!(&answer[..4], &7u32.to_be_bytes(), "{label}: correlation id");
    assert_eq!(
        &answer[4..6],
        &[0, 0],
        "{label}: refused: {:?}",
        String::from_utf8_lossy(&answer[8.min(answer.len())..])
    );
    let Some(fields) = section.response().fields_of(version) else {
        assert!(expect.is_empty(), "{label}: expectations without a table");
        return Default::default();
    };
    let values = walk(&fields, &answer[RESPONSE_HEADER_BYTES..]).unwrap_or_else(|error| {
        panic!(
            "{label}: the answer is not the document's version {version} layout ({:?}): {error}",
            fields.iter().map(|field| &field.name).collect::<Vec<_>>()
        )
    });
    if let Layout::Fields { stated_sizes, .. } = section.response() {
        let fixed = stated_sizes
            .iter()
            .filter(|(since, _)| *since <= version)
            .max_by_key(|(since, _)| *since);
        if let Some((_, size)) = fixed {
            assert_eq!(
                answer.len() - RESPONSE_HEADER_BYTES,
                *size,
                "{label}: the size the document states"
            );
        }
    }
    for (name, value) in expect {
        assert_eq!(
            values.get(*name),
            Some(&Value::Integer(*value)),
            "{label}: field {name}"
        );
    }
    checked.responses.insert((key, version));
    values
}

fn integer(values: &std::collections::BTreeMap<String, Value>, name: &str) -> i128 {
    match values.get(name) {
        Some(Value::Integer(value)) => *value,
        other => panic!("{name} is {other:?}"),
    }
}

fn bytes_len(values: &std::collections::BTreeMap<String, Value>, name: &str) -> usize {
    match values.get(name) {
        Some(Value::Bytes(bytes)) => bytes.len(),
        other => panic!("{name} is {other:?}"),
    }
}

fn fetch(offset: u64, read_committed: Option<bool>) -> Request {
    Request::Fetch {
        topic: "layouts".into(),
        partition: 0,
        offset,
        max_bytes: 1 << 20,
        max_wait_ms: 0,
        read_committed,
    }
}

/// Every version of every API whose bodies the document gives as field tables, through a
/// standalone server: Fetch versions 0 and 1 with both isolations (with batches and without),
/// Produce and ListOffsets in both versions, the leases, the group offsets, DeleteRecords and
/// the topic APIs. Any (api, version) with a table that no step checked fails the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_version_answers_in_the_documented_layout() {
    let server = TestServer::start().await.expect("server");
    let mut client = RawClient::connect(server.addr()).await;
    let mut checked = Checked::default();
    let config = TopicConfig {
        segment_bytes: 1 << 20,
        flush: FlushPolicy::Always,
        retention_bytes: None,
        retention_ms: None,
    };

    check(
        &mut client,
        &mut checked,
        "ApiVersions",
        Request::ApiVersions,
        0,
        &[],
    )
    .await;
    let create = |name: &str, replication| Request::CreateTopic {
        name: name.into(),
        partitions: 1,
        config,
        replication,
    };
    check(
        &mut client,
        &mut checked,
        "CreateTopic v0",
        create("layouts", None),
        0,
        &[],
    )
    .await;
    let replication = Replication {
        factor: 1,
        min_insync: None,
    };
    let second = create("layouts-1", Some(replication));
    check(&mut client, &mut checked, "CreateTopic v1", second, 1, &[]).await;

    let acquire = Request::AcquireLease {
        topic: "layouts".into(),
        partition: 0,
        holder: "writer".into(),
        ttl_ms: 60_000,
    };
    let lease = check(
        &mut client,
        &mut checked,
        "AcquireLease",
        acquire,
        0,
        &[("ttl_ms", 60_000)],
    )
    .await;
    let epoch = integer(&lease, "epoch");
    let lease_id = integer(&lease, "lease_id") as u128;
    let renew = Request::RenewLease {
        topic: "layouts".into(),
        partition: 0,
        lease_id,
    };
    let expect = [("epoch", epoch), ("ttl_ms", 60_000)];
    check(&mut client, &mut checked, "RenewLease", renew, 0, &expect).await;

    let produce = |values: &[&str], acks| Request::Produce {
        topic: "layouts".into(),
        partition: 0,
        batch: batch_of(epoch as u64, values),
        acks,
    };
    let expect = [
        ("base_offset", 0),
        ("last_offset", 2),
        ("log_end_offset", 3),
    ];
    check(
        &mut client,
        &mut checked,
        "Produce v0",
        produce(&["a", "b", "c"], None),
        0,
        &expect,
    )
    .await;
    let expect = [
        ("base_offset", 3),
        ("last_offset", 4),
        ("log_end_offset", 5),
    ];
    let acked = produce(&["d", "e"], Some(Acks::Leader));
    check(&mut client, &mut checked, "Produce v1", acked, 1, &expect).await;

    let expect = [("high_watermark", 5), ("log_start_offset", 0)];
    let read = check(
        &mut client,
        &mut checked,
        "Fetch v0",
        fetch(0, None),
        0,
        &expect,
    )
    .await;
    assert!(bytes_len(&read, "batches") > 0);
    // Version 1 has both trailing fields whatever the isolation; without a transaction the last
    // stable offset is the high watermark, and the reader goes on after the last batch.
    let expect = [
        ("high_watermark", 5),
        ("log_start_offset", 0),
        ("last_stable_offset", 5),
        ("next_offset", 5),
    ];
    for (label, read_committed) in [
        ("Fetch v1 read_uncommitted", false),
        ("Fetch v1 read_committed", true),
    ] {
        let read = check(
            &mut client,
            &mut checked,
            label,
            fetch(1, Some(read_committed)),
            1,
            &expect,
        )
        .await;
        assert!(bytes_len(&read, "batches") > 0, "{label}");
        // At the high watermark there is nothing to read: next_offset is the offset asked for.
        let label = format!("{label} at the high watermark");
        let empty = check(
            &mut client,
            &mut checked,
            &label,
            fetch(5, Some(read_committed)),
            1,
            &expect,
        )
        .await;
        assert_eq!(bytes_len(&empty, "batches"), 0, "{label}");
    }

    let list = |timestamp| Request::ListOffsets {
        topic: "layouts".into(),
        partition: 0,
        timestamp,
    };
    let expect = [("earliest", 0), ("latest", 5), ("epoch", epoch)];
    check(
        &mut client,
        &mut checked,
        "ListOffsets v0",
        list(None),
        0,
        &expect,
    )
    .await;
    let expect = [
        ("earliest", 0),
        ("latest", 5),
        ("epoch", epoch),
        ("offset_for_timestamp", 0),
    ];
    check(
        &mut client,
        &mut checked,
        "ListOffsets v1",
        list(Some(0)),
        1,
        &expect,
    )
    .await;
    let expect = [("offset_for_timestamp", -1)];
    check(
        &mut client,
        &mut checked,
        "ListOffsets v1, none that recent",
        list(Some(i64::MAX)),
        1,
        &expect,
    )
    .await;

    let ids = check(
        &mut client,
        &mut checked,
        "InitProducerId",
        Request::InitProducerId,
        0,
        &[("producer_epoch", 0)],
    )
    .await;
    assert!(integer(&ids, "producer_id") >= 0);

    let commit = Request::OffsetCommit {
        group: "billing".into(),
        topic: "layouts".into(),
        partition: 0,
        offset: 3,
        metadata: "h1".into(),
    };
    check(&mut client, &mut checked, "OffsetCommit", commit, 0, &[]).await;
    let committed = Request::OffsetFetch {
        group: "billing".into(),
        topic: "layouts".into(),
        partition: 0,
    };
    let read = check(
        &mut client,
        &mut checked,
        "OffsetFetch",
        committed,
        0,
        &[("offset", 3)],
    )
    .await;
    assert_eq!(read.get("metadata"), Some(&Value::Bytes(b"h1".to_vec())));

    let delete = Request::DeleteRecords {
        topic: "layouts".into(),
        partition: 0,
        offset: 2,
    };
    check(
        &mut client,
        &mut checked,
        "DeleteRecords",
        delete,
        0,
        &[("low_watermark", 2)],
    )
    .await;
    let expect = [
        ("high_watermark", 5),
        ("log_start_offset", 2),
        ("last_stable_offset", 5),
        ("next_offset", 5),
    ];
    check(
        &mut client,
        &mut checked,
        "Fetch v1 after DeleteRecords",
        fetch(2, Some(false)),
        1,
        &expect,
    )
    .await;

    let alter = Request::AlterTopicConfig {
        name: "layouts".into(),
        change: TopicConfigChange {
            segment_bytes: Some(2 << 20),
            retention_bytes: None,
            retention_ms: None,
        },
    };
    check(&mut client, &mut checked, "AlterTopicConfig", alter, 0, &[]).await;
    let grow = Request::CreatePartitions {
        name: "layouts".into(),
        partition_count: 2,
        validate_only: false,
    };
    check(
        &mut client,
        &mut checked,
        "CreatePartitions",
        grow,
        0,
        &[("partition_count", 2)],
    )
    .await;
    let release = Request::ReleaseLease {
        topic: "layouts".into(),
        partition: 0,
        lease_id,
    };
    check(&mut client, &mut checked, "ReleaseLease", release, 0, &[]).await;
    let drop_topic = Request::DeleteTopic {
        name: "layouts-1".into(),
    };
    check(&mut client, &mut checked, "DeleteTopic", drop_topic, 0, &[]).await;

    // Every (api, version) the server supports whose bodies the document tabulates was checked.
    let mut missing = Vec::new();
    for range in ApiVersionRange::supported() {
        let section = section_of(range.api_key);
        for version in range.min_version..=range.max_version {
            let name = ApiKey::from_u16(range.api_key).map(|key| key.name());
            let pair = (range.api_key, version);
            if section.request().fields_of(version).is_some() && !checked.requests.contains(&pair) {
                missing.push(format!("{name:?} v{version} request"));
            }
            if section.response().fields_of(version).is_some() && !checked.responses.contains(&pair)
            {
                missing.push(format!("{name:?} v{version} response"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not checked against the document: {missing:?}"
    );
}
