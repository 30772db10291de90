//! Every native error code whose error body has details (section 4 of `docs/protocol.md`:
//! `LEASE_HELD`, `LEASE_LOST`, `OFFSET_OUT_OF_RANGE`, `NOT_LEADER`) carries them on every API
//! that can answer it, provoked through real servers: one table of cases per server kind, each
//! answer read as raw bytes and held to the details the case expects, byte for byte (the
//! answer is exactly its decoded error re-encoded: nothing missing, nothing trailing).
//!
//! The cases are checked against the document too: every API section that names a code with
//! details, and every API the document says a cluster's leader serves, has a case. This is the
//! test that would have caught an OffsetCommit past the high watermark answered
//! `OFFSET_OUT_OF_RANGE` without the offset and the range that Fetch and DeleteRecords send.

use bytes::BytesMut;
use fencelog::client::Client;
use fencelog::protocol::{
    ApiKey, ErrorCode, ErrorDetails, Replication, Request, RequestFrame, ResponseFrame,
    TopicConfig, TransactionProducer, TxnOffset,
};
use fencelog::testing::{TestCluster, TestServer};

use crate::protocol_doc_tables::{api_sections, codes_with_details};
use crate::protocol_layouts::exchange;
use crate::support::batch_of;
use crate::support::doc_examples::PROTOCOL_DOC;
use crate::support::raw_protocol::RawClient;

/// One way to provoke a code with details.
struct Case {
    /// The code, as the document names it.
    code: &'static str,
    /// The API that answers it.
    api: ApiKey,
    /// What the case does.
    label: &'static str,
    /// The request that provokes it.
    request: fn(&Scene) -> Request,
    /// The details the answer must carry (`expires_in_ms` is checked separately and compared
    /// as 0), and `current_epoch` where the code has one.
    expect: fn(&Scene) -> (Option<ErrorDetails>, Option<u64>),
}

/// What the cases' requests and expectations need to know about the server they run on.
#[derive(Debug, Clone, Default)]
struct Scene {
    /// The lease epoch of the partition (standalone) or of its writer (cluster).
    epoch: u64,
    /// The live lease's id.
    lease_id: u128,
    /// On a cluster: the partition's leader, its address and leader epoch.
    leader: (u32, String, u32),
    /// On a cluster: the group's (and transactional id's) coordinator and its address.
    coordinator: (u32, String),
}

const TOPIC: &str = "details";
/// The holder of the live lease.
const HOLDER: &str = "writer-1";
const TTL_MS: u64 = 60_000;
/// Standalone: the partition holds offsets 2..5 (5 produced, DeleteRecords to 2).
const LOG_START: u64 = 2;
const HIGH_WATERMARK: u64 = 5;
/// An offset past the high watermark.
const PAST: u64 = 9;

fn fetch(offset: u64, read_committed: Option<bool>) -> Request {
    Request::Fetch {
        topic: TOPIC.into(),
        partition: 0,
        offset,
        max_bytes: 1 << 20,
        max_wait_ms: 0,
        read_committed,
    }
}

fn out_of_range(offset: u64) -> (Option<ErrorDetails>, Option<u64>) {
    let details = ErrorDetails::OffsetOutOfRange {
        offset,
        earliest: LOG_START,
        latest: HIGH_WATERMARK,
    };
    (Some(details), None)
}

fn live_lease(scene: &Scene, lost: bool) -> (Option<ErrorDetails>, Option<u64>) {
    let (holder, expires_in_ms) = (HOLDER.to_owned(), 0);
    let details = if lost {
        ErrorDetails::LeaseLost {
            holder,
            expires_in_ms,
        }
    } else {
        ErrorDetails::LeaseHeld {
            holder,
            expires_in_ms,
        }
    };
    (Some(details), Some(scene.epoch))
}

fn renew(scene: &Scene, lease_id: u128) -> Request {
    let _ = scene;
    Request::RenewLease {
        topic: TOPIC.into(),
        partition: 0,
        lease_id,
    }
}

/// The cases a standalone server answers.
const STANDALONE: &[Case] = &[
    Case {
        code: "LEASE_HELD",
        api: ApiKey::AcquireLease,
        label: "another holder while the lease lives",
        request: |_| Request::AcquireLease {
            topic: TOPIC.into(),
            partition: 0,
            holder: "writer-2".into(),
            ttl_ms: TTL_MS,
        },
        expect: |scene| live_lease(scene, false),
    },
    Case {
        code: "LEASE_LOST",
        api: ApiKey::RenewLease,
        label: "a lease id that is not the live lease's",
        request: |scene| renew(scene, scene.lease_id + 1),
        expect: |scene| live_lease(scene, true),
    },
    Case {
        code: "LEASE_LOST",
        api: ApiKey::ReleaseLease,
        label: "a lease id that is not the live lease's",
        request: |scene| Request::ReleaseLease {
            topic: TOPIC.into(),
            partition: 0,
            lease_id: scene.lease_id + 1,
        },
        expect: |scene| live_lease(scene, true),
    },
    Case {
        code: "OFFSET_OUT_OF_RANGE",
        api: ApiKey::Fetch,
        label: "version 0, past the high watermark",
        request: |_| fetch(PAST, None),
        expect: |_| out_of_range(PAST),
    },
    Case {
        code: "OFFSET_OUT_OF_RANGE",
        api: ApiKey::Fetch,
        label: "version 0, below the log start",
        request: |_| fetch(0, None),
        expect: |_| out_of_range(0),
    },
    Case {
        code: "OFFSET_OUT_OF_RANGE",
        api: ApiKey::Fetch,
        label: "version 1 read_uncommitted, past the high watermark",
        request: |_| fetch(PAST, Some(false)),
        expect: |_| out_of_range(PAST),
    },
    Case {
        code: "OFFSET_OUT_OF_RANGE",
        api: ApiKey::Fetch,
        label: "version 1 read_committed, below the log start",
        request: |_| fetch(1, Some(true)),
        expect: |_| out_of_range(1),
    },
    Case {
        code: "OFFSET_OUT_OF_RANGE",
        api: ApiKey::DeleteRecords,
        label: "past the high watermark",
        request: |_| Request::DeleteRecords {
            topic: TOPIC.into(),
            partition: 0,
            offset: PAST,
        },
        expect: |_| out_of_range(PAST),
    },
    Case {
        code: "OFFSET_OUT_OF_RANGE",
        api: ApiKey::OffsetCommit,
        label: "past the high watermark",
        request: |_| Request::OffsetCommit {
            group: "billing".into(),
            topic: TOPIC.into(),
            partition: 0,
            offset: PAST,
            metadata: String::new(),
        },
        expect: |_| out_of_range(PAST),
    },
];

fn led(scene: &Scene) -> (Option<ErrorDetails>, Option<u64>) {
    let (leader, address, leader_epoch) = scene.leader.clone();
    let details = ErrorDetails::NotLeader {
        leader: Some(leader),
        address,
        leader_epoch,
    };
    (Some(details), None)
}

/// The leader epoch of a coordinator refusal is the offsets partition's, which the cases do
/// not look up: it is compared as 0 (and checked to be at least 1).
fn coordinated(scene: &Scene) -> (Option<ErrorDetails>, Option<u64>) {
    let (leader, address) = scene.coordinator.clone();
    let details = ErrorDetails::NotLeader {
        leader: Some(leader),
        address,
        leader_epoch: 0,
    };
    (Some(details), None)
}

fn producer() -> TransactionProducer {
    TransactionProducer {
        transactional_id: "billing".into(),
        producer_id: 1000,
        producer_epoch: 0,
    }
}

fn txn_offsets() -> Vec<TxnOffset> {
    vec![TxnOffset {
        topic: TOPIC.into(),
        partition: 0,
        offset: 1,
        leader_epoch: -1,
        metadata: String::new(),
    }]
}

/// The cases a broker of a cluster answers for a partition it does not lead, or a group (or
/// transactional id) it does not coordinate.
const CLUSTER: &[Case] = &[
    Case {
        code: "NOT_LEADER",
        api: ApiKey::Produce,
        label: "version 0",
        request: |scene| Request::Produce {
            topic: TOPIC.into(),
            partition: 0,
            batch: batch_of(scene.epoch, &["x"]),
            acks: None,
        },
        expect: led,
    },
    Case {
        code: "NOT_LEADER",
        api: ApiKey::Produce,
        label: "version 1",
        request: |scene| Request::Produce {
            topic: TOPIC.into(),
            partition: 0,
            batch: batch_of(scene.epoch, &["x"]),
            acks: Some(fencelog::protocol::Acks::All),
        },
        expect: led,
    },
    Case {
        code: "NOT_LEADER",
        api: ApiKey::Fetch,
        label: "version 0",
        request: |_| fetch(0, None),
        expect: led,
    },
    Case {
        code: "NOT_LEADER",
        api: ApiKey::Fetch,
        label: "version 1 read_uncommitted",
        request: |_| fetch(0, Some(false)),
        expect: led,
    },
    Case {
        code: "NOT_LEADER",
        api: ApiKey::Fetch,
        label: "version 1 read_committed",
        request: |_| fetch(0, Some(true)),
        expect: led,
    },
    Case {
        code: "NOT_LEADER",
        api: ApiKey::ListOffsets,
        label: "version 0",
        request: |_| Request::ListOffsets {
            topic: TOPIC.into(),
            partition: 0,
            timestamp: None,
        },
        expect: led,
    },
    Case {
        code: "NOT_LEADER",
        api: ApiKey::ListOffsets,
        label: "version 1",
        request: |_| Request::ListOffsets {
            topic: TOPIC.into(),
            partition: 0,
            timestamp: Some(0),
        },
        expect: led,
    },
    Case {
        code: "NOT_LEADER",
        api: ApiKey::AcquireLease,
        label: "a follower's copy",
        request: |_| Request::AcquireLease {
            topic: TOPIC.into(),
            partition: 0,
            holder: "writer-2".into(),
            ttl_ms: TTL_MS,
        },
        expect: led,
    },
    Case {
        code: "NOT_LEADER",
        api: ApiKey::RenewLease,
        label: "a follower's copy",
        request: |scene| renew(scene, scene.lease_id),
        expect: led,
    },
    Case {
        code: "NOT_LEADER",
        api: ApiKey::ReleaseLease,
        label: "a follower's copy",
        request: |scene| Request::ReleaseLease {
            topic: TOPIC.into(),
            partition: 0,
            lease_id: scene.lease_id,
        },
        expect: led,
    },
    Case {
        code: "NOT_LEADER",
        api: ApiKey::DeleteRecords,
        label: "a follower's copy",
        request: |_| Request::DeleteRecords {
            topic: TOPIC.into(),
            partition: 0,
            offset: 1,
        },
        expect: led,
    },
    Case {
        code: "NOT_LEADER",
        api: ApiKey::OffsetCommit,
        label: "not the group's coordinator",
        request: |_| Request::OffsetCommit {
            group: "billing".into(),
            topic: TOPIC.into(),
            partition: 0,
            offset: 1,
            metadata: String::new(),
        },
        expect: coordinated,
    },
    Case {
        code: "NOT_LEADER",
        api: ApiKey::OffsetFetch,
        label: "not the group's coordinator",
        request: |_| Request::OffsetFetch {
            group: "billing".into(),
            topic: TOPIC.into(),
            partition: 0,
        },
        expect: coordinated,
    },
    Case {
        code: "NOT_LEADER",
        api: ApiKey::VerifyTransaction,
        label: "not the transactional id's coordinator",
        request: |_| Request::VerifyTransaction {
            producer: producer(),
            topic: TOPIC.into(),
            partition: 0,
        },
        expect: coordinated,
    },
    Case {
        code: "NOT_LEADER",
        api: ApiKey::TxnOffsetCommit,
        label: "not the transactional id's coordinator",
        request: |_| Request::TxnOffsetCommit {
            producer: producer(),
            group: "billing".into(),
            offsets: txn_offsets(),
        },
        expect: coordinated,
    },
    Case {
        code: "NOT_LEADER",
        api: ApiKey::EndTxnOffsets,
        label: "not the group's coordinator",
        request: |_| Request::EndTxnOffsets {
            group: "billing".into(),
            transactional_id: "billing".into(),
            commit: true,
            offsets: txn_offsets(),
        },
        expect: coordinated,
    },
];

/// Sends `case`'s request and checks the answer: the case's code, its details (and
/// `current_epoch`) as expected, and the raw answer exactly the decoded error re-encoded.
async fn check(client: &mut RawClient, scene: &Scene, case: &Case) {
    let what = format!("{} on {} ({})", case.code, case.api.name(), case.label);
    let frame = RequestFrame::new(11, (case.request)(scene));
    assert_eq!(
        frame.request.api_key(),
        case.api,
        "{what}: the case's request"
    );
    let version = frame.api_version;
    let answer = exchange(client, frame).await;
    let decoded = ResponseFrame::decode_version(case.api, version, answer.clone())
        .unwrap_or_else(|error| panic!("{what}: the answer does not decode: {error}"));
    let mut reencoded = BytesMut::new();
    decoded.encode(&mut reencoded).unwrap();
    assert_eq!(
        &reencoded[4..],
        &answer[..],
        "{what}: the answer has bytes its code's layout does not (or lacks some)"
    );
    let mut error = match decoded.result {
        Err(error) => error,
        Ok(response) => panic!("{what}: answered {response:?}"),
    };
    assert_eq!(
        error.code.to_string(),
        case.code,
        "{what}: {}",
        error.message
    );
    match &mut error.details {
        Some(
            ErrorDetails::LeaseHeld { expires_in_ms, .. }
            | ErrorDetails::LeaseLost { expires_in_ms, .. },
        ) => {
            assert!(
                (1..=TTL_MS).contains(expires_in_ms),
                "{what}: {expires_in_ms} ms left"
            );
            *expires_in_ms = 0;
        }
        Some(ErrorDetails::NotLeader { leader_epoch, .. }) if scene.coordinator.0 != 0 => {
            assert!(*leader_epoch >= 1, "{what}: leader epoch {leader_epoch}");
            if (case.expect)(scene) == coordinated(scene) {
                *leader_epoch = 0;
            }
        }
        _ => {}
    }
    let (details, current_epoch) = (case.expect)(scene);
    assert_eq!(error.details, details, "{what}: {}", error.message);
    if let Some(current_epoch) = current_epoch {
        assert_eq!(error.current_epoch, current_epoch, "{what}: current_epoch");
    }
}

/// Every standalone case: the lease codes with the live lease's holder, `OFFSET_OUT_OF_RANGE`
/// with the offset, the log start and the high watermark on Fetch (both versions, both
/// isolations, both ends), DeleteRecords and OffsetCommit. Then `LEASE_LOST` without a live
/// lease, which the document gives no details: its body ends at `current_epoch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_code_with_details_carries_them_standalone() {
    let server = TestServer::start().await.expect("server");
    let mut client = RawClient::connect(server.addr()).await;
    client
        .create_topic(TOPIC, 1, TopicConfig::default())
        .await
        .unwrap();
    let (epoch, lease_id) = match client
        .call(Request::AcquireLease {
            topic: TOPIC.into(),
            partition: 0,
            holder: HOLDER.into(),
            ttl_ms: TTL_MS,
        })
        .await
        .unwrap()
    {
        fencelog::protocol::Response::AcquireLease {
            epoch, lease_id, ..
        } => (epoch, lease_id),
        other => panic!("{other:?}"),
    };
    client
        .produce(TOPIC, 0, batch_of(epoch, &["a", "b", "c", "d", "e"]))
        .await
        .unwrap();
    client
        .call(Request::DeleteRecords {
            topic: TOPIC.into(),
            partition: 0,
            offset: LOG_START,
        })
        .await
        .unwrap();
    assert_eq!(
        client.list_offsets(TOPIC, 0).await,
        (LOG_START, HIGH_WATERMARK, epoch)
    );
    let scene = Scene {
        epoch,
        lease_id,
        ..Scene::default()
    };
    for case in STANDALONE {
        check(&mut client, &scene, case).await;
    }

    client
        .call(Request::ReleaseLease {
            topic: TOPIC.into(),
            partition: 0,
            lease_id,
        })
        .await
        .unwrap();
    let answer = exchange(&mut client, RequestFrame::new(12, renew(&scene, lease_id))).await;
    let decoded = ResponseFrame::decode(ApiKey::RenewLease, answer.clone()).unwrap();
    let error = decoded.result.unwrap_err();
    assert_eq!(
        (error.code, error.details, error.current_epoch),
        (ErrorCode::LeaseLost, None, epoch)
    );
    assert_eq!(
        answer.len(),
        6 + 2 + error.message.len() + 16,
        "nothing after current_epoch"
    );
}

async fn leader_of(client: &Client, topic: &str) -> (u32, u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Ok(info) = client.cluster_metadata(&[topic]).await {
            let found = info
                .partitions
                .iter()
                .find(|p| p.topic == topic && p.partition == 0)
                .and_then(|p| p.leader.map(|leader| (leader, p.leader_epoch)));
            if let Some(found) = found {
                return found;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no leader for {topic}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Every cluster case, sent to a broker that does not lead the partition (or coordinate the
/// group): `NOT_LEADER` names the leader (the coordinator), its address and its leader epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn not_leader_names_the_leader_on_every_api() {
    let cluster = TestCluster::start(3).await.expect("cluster");
    let client = cluster.client().await.expect("client");
    let replication = Replication {
        factor: 3,
        min_insync: None,
    };
    client
        .create_replicated_topic(TOPIC, 1, TopicConfig::default(), replication)
        .await
        .expect("create");
    let (leader, leader_epoch) = leader_of(&client, TOPIC).await;
    let lease = client
        .acquire_lease(TOPIC, 0, HOLDER, std::time::Duration::from_secs(60))
        .await
        .expect("lease");
    // The first group request creates the offsets topic; its coordinator answers it.
    client
        .commit_offset("billing", TOPIC, 0, 0, "")
        .await
        .expect("commit");
    let address = |id: u32| {
        let node = cluster.nodes().iter().find(|node| node.id() == id).unwrap();
        node.addr().to_string()
    };
    let coordinator = cluster.nodes()[0]
        .service()
        .groups()
        .coordinator_of("billing")
        .await
        .expect("coordinator");
    let scene = Scene {
        epoch: lease.epoch,
        lease_id: lease.lease_id,
        leader: (leader, address(leader), leader_epoch),
        coordinator: (coordinator, address(coordinator)),
    };
    let follower = cluster
        .nodes()
        .iter()
        .find(|node| node.id() != leader && node.id() != coordinator)
        .or_else(|| cluster.nodes().iter().find(|node| node.id() != leader))
        .expect("a follower");
    let mut client = RawClient::connect(follower.addr()).await;
    for case in CLUSTER {
        let by_coordinator = (case.expect)(&scene) == coordinated(&scene);
        if by_coordinator && follower.id() == coordinator {
            panic!("the broker asked coordinates the group: pick another");
        }
        check(&mut client, &scene, case).await;
    }
}

/// The cases cover what the document promises: for every code with details, every API section
/// that names it (ReplicaFetch's codes are per-partition fields without an error body), every
/// API a cluster's leader serves ("every request about the partition (Produce, Fetch,
/// ListOffsets, the lease APIs)"), and OffsetFetch, refused "exactly as `OffsetCommit`".
#[test]
fn the_cases_cover_every_api_the_document_names_for_each_code() {
    let codes = codes_with_details();
    let mut promised = std::collections::BTreeSet::new();
    for section in api_sections() {
        if section.keys == [ApiKey::ReplicaFetch.as_u16()] {
            continue;
        }
        let text = section.text();
        for code in &codes {
            if text.contains(&format!("`{code}`")) {
                for key in &section.keys {
                    promised.insert((code.clone(), *key));
                }
            }
        }
    }
    assert!(PROTOCOL_DOC.contains("(Produce, Fetch, ListOffsets, the lease APIs)"));
    assert!(PROTOCOL_DOC.contains("is refused by other brokers,\nexactly as `OffsetCommit`"));
    for api in [
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::ListOffsets,
        ApiKey::AcquireLease,
        ApiKey::RenewLease,
        ApiKey::ReleaseLease,
        ApiKey::OffsetFetch,
    ] {
        promised.insert(("NOT_LEADER".to_owned(), api.as_u16()));
    }
    let covered: std::collections::BTreeSet<(String, u16)> = STANDALONE
        .iter()
        .chain(CLUSTER)
        .map(|case| (case.code.to_owned(), case.api.as_u16()))
        .collect();
    let missing: Vec<_> = promised.difference(&covered).collect();
    assert!(
        missing.is_empty(),
        "codes with details no case provokes: {missing:?}"
    );
    for code in &codes {
        assert!(
            covered.iter().any(|(covered, _)| covered == code),
            "no case for {code}"
        );
    }
}
