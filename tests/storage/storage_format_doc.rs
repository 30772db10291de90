//! `docs/storage-format.md` checked against what the server really writes, so that a tool built
//! from the page alone reads our files: the data directory tree, `topic.json`, the
//! `recovery-point` bytes, the worked example's hex dump and the minimal Python reader; and the
//! two rules of the batch header that `docs/protocol.md` states for Produce (the producer's
//! `base_offset` is overwritten, non-zero `reserved` bytes are refused); and the idempotent
//! producer's files (`producer-id-block`, the `producer-state` snapshot's layout and hex dump).

use crate::support::raw_protocol;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::Bytes;
use fencelog::batch::{BatchBuilder, ProducerStamp};
use fencelog::broker::Broker;
use fencelog::protocol::{ErrorCode, FlushPolicy, Request, Response, TopicConfig};
use fencelog::storage::producer_state::{ProducerStates, SNAPSHOT_FILE};
use fencelog::storage::{Partition, PartitionConfig, SealWorker};
use fencelog::testing::TestServer;
use raw_protocol::RawClient;

const STORAGE_FORMAT_DOC: &str = include_str!("../../docs/storage-format.md");

/// The fenced block of `language` that follows `heading` in the storage-format doc.
fn doc_block(heading: &str, language: &str) -> &'static str {
    let section = &STORAGE_FORMAT_DOC[STORAGE_FORMAT_DOC
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?} in the doc"))..];
    let fence = format!("```{language}\n");
    let start = section.find(&fence).expect("a fenced block") + fence.len();
    let length = section[start..].find("```").expect("a closed block");
    &section[start..start + length]
}

/// `xxd -g1` of `bytes`, as the doc shows it.
fn xxd(bytes: &[u8]) -> String {
    bytes
        .chunks(16)
        .enumerate()
        .map(|(line, chunk)| {
            let hex: Vec<String> = chunk.iter().map(|byte| format!("{byte:02x}")).collect();
            format!("{:08x}: {}\n", line * 16, hex.join(" "))
        })
        .collect()
}

/// Every path under `root`, relative to it, with `/` separators.
fn tree(root: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).unwrap() {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(root).unwrap().to_string_lossy();
            found.insert(relative.replace('\\', "/"));
            if path.is_dir() {
                pending.push(path);
            }
        }
    }
    found
}

/// A one-record batch of `value_bytes` bytes (no key), or `records` empty records.
fn batch(epoch: u64, records: u32, value_bytes: usize) -> Bytes {
    let mut builder = BatchBuilder::new(epoch);
    for _ in 0..records {
        builder.push(1_700_000_000_000, None, Some(&vec![7u8; value_bytes]));
    }
    builder.finish()
}

#[test]
fn worked_example_hex_dump_is_what_the_engine_stores() {
    // Proves: the `xxd -g1` dump of the worked example in the doc is byte for byte the batch the
    // engine stores for one record (key "k", value "hello") appended at offset 5 under epoch 3.
    let directory = tempfile::tempdir().unwrap();
    let config = PartitionConfig {
        segment_bytes: 4096,
        ..PartitionConfig::default()
    };
    let partition = Partition::open(
        "t/0",
        directory.path(),
        config,
        &SealWorker::start().unwrap(),
    )
    .unwrap();
    partition.install_epoch(3).unwrap();
    partition.append(&batch(3, 5, 0)).unwrap();
    let mut builder = BatchBuilder::new(3);
    builder.push(1_700_000_000_000, Some(b"k"), Some(b"hello"));
    assert_eq!(partition.append(&builder.finish()).unwrap().base_offset, 5);
    let stored = partition.read(5, 1).unwrap().batches.remove(0);
    assert_eq!(doc_block("## Worked example", ""), xxd(&stored));
}

#[test]
fn data_directory_topic_file_and_recovery_point_are_as_documented() {
    // Proves: a topic created as in the doc's example, whose partition 0 rolled at offset 187 and
    // was closed, leaves exactly the documented tree (lock, topics/NAME/topic.json, partition
    // directories with 20-digit segment and index files, epoch-checkpoint, recovery-point),
    // `topic.json` reads as the doc's JSON, and `recovery-point` holds the documented bytes.
    let data = tempfile::tempdir().unwrap();
    let config = TopicConfig {
        segment_bytes: 1 << 20,
        flush: FlushPolicy::Always,
        retention_bytes: None,
        retention_ms: Some(7 * 24 * 3600 * 1000),
    };
    {
        let broker = Broker::open(data.path()).unwrap();
        broker.create_topic("orders", 2, config).unwrap();
        let partition = broker.partition("orders", 0).unwrap();
        partition.install_epoch(1).unwrap();
        // 187 empty records, then one record too large for what is left of the 1 MiB segment.
        assert_eq!(
            partition.append(&batch(1, 187, 0)).unwrap().log_end_offset,
            187
        );
        let rolled = partition.append(&batch(1, 1, 1_046_000)).unwrap();
        assert_eq!(rolled.base_offset, 187);
    }
    let segment = |partition: &str, base: &str, extension: &str| {
        format!("topics/orders/{partition}/{base:0>20}.{extension}")
    };
    let expected: BTreeSet<String> = [
        "fencelog.lock".to_owned(),
        "groups".to_owned(),
        "topics".to_owned(),
        "topics/orders".to_owned(),
        "topics/orders/topic.json".to_owned(),
        "topics/orders/0".to_owned(),
        segment("0", "0", "log"),
        segment("0", "0", "index"),
        segment("0", "187", "log"),
        segment("0", "187", "index"),
        "topics/orders/0/epoch-checkpoint".to_owned(),
        "topics/orders/0/recovery-point".to_owned(),
        "topics/orders/0/producer-state".to_owned(),
        "topics/orders/1".to_owned(),
        segment("1", "0", "log"),
        segment("1", "0", "index"),
    ]
    .into();
    assert_eq!(tree(data.path()), expected);
    let doc_tree = doc_block("## The data directory", "");
    for name in [
        "fencelog.lock",
        "topics/",
        "orders/",
        "topic.json",
        "0/",
        "00000000000000000000.log",
        "00000000000000000000.index",
        "00000000000000000187.log",
        "00000000000000000187.index",
        "epoch-checkpoint",
        "recovery-point",
    ] {
        assert!(doc_tree.contains(name), "the doc's tree lacks {name}");
    }

    let topic_file = std::fs::read_to_string(data.path().join("topics/orders/topic.json")).unwrap();
    let written: serde_json::Value = serde_json::from_str(&topic_file).unwrap();
    let documented: serde_json::Value =
        serde_json::from_str(doc_block("## The data directory", "json")).unwrap();
    assert_eq!(written, documented);

    let recovery_point = std::fs::read(data.path().join("topics/orders/0/recovery-point")).unwrap();
    let hex: Vec<String> = recovery_point
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    assert_eq!(
        doc_block("## Recovery point", "text"),
        format!("{}\n", hex.join(" "))
    );
    assert_eq!(recovery_point, b"187\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_overwrites_base_offset_and_refuses_reserved_bytes() {
    // Proves the two Produce rules of docs/protocol.md: whatever `base_offset` a producer sends
    // is replaced by the offset the server assigns (answered and stored), and a batch whose
    // `reserved` bytes (18..20) are not zero, with a valid CRC, is refused with INVALID_BATCH and
    // takes no offset.
    let server = TestServer::start().await.unwrap();
    let mut client = RawClient::connect(server.addr()).await;
    client
        .create_topic("t", 1, TopicConfig::default())
        .await
        .unwrap();
    let epoch = client.acquire("t", 0).await.unwrap();
    for (sent, assigned) in [(0x0123_4567_89ab_cdef_u64, 0), (u64::MAX, 1), (0, 2)] {
        let mut bytes = batch(epoch, 1, 3).to_vec();
        fencelog::batch::stamp_base_offset(&mut bytes, sent);
        let base_offset = client.produce("t", 0, Bytes::from(bytes)).await.unwrap();
        assert_eq!(base_offset, assigned, "sent {sent:#x}");
    }
    let fetched = client
        .call(Request::Fetch {
            topic: "t".into(),
            partition: 0,
            offset: 0,
            max_bytes: 1 << 20,
            max_wait_ms: 0,
            read_committed: None,
        })
        .await
        .unwrap();
    let Response::Fetch { batches, .. } = fetched else {
        panic!("unexpected {fetched:?}");
    };
    // The batches arrive back to back: walk them by `batch_length` (bytes 8..12).
    let bytes: Vec<u8> = batches.concat();
    let mut stored = Vec::new();
    let mut position = 0;
    while position < bytes.len() {
        let field = |at: usize, width: usize| &bytes[position + at..position + at + width];
        stored.push(u64::from_be_bytes(field(0, 8).try_into().unwrap()));
        position += u32::from_be_bytes(field(8, 4).try_into().unwrap()) as usize;
    }
    assert_eq!(stored, [0, 1, 2]);

    for reserved in [[0, 1], [0x80, 0]] {
        let mut bytes = batch(epoch, 1, 3).to_vec();
        bytes[18..20].copy_from_slice(&reserved);
        let crc = crc32fast::hash(&bytes[16..]);
        bytes[12..16].copy_from_slice(&crc.to_be_bytes());
        let refused = client
            .produce("t", 0, Bytes::from(bytes))
            .await
            .unwrap_err();
        assert_eq!(refused.code, ErrorCode::InvalidBatch, "{refused:?}");
    }
    assert_eq!(
        client.list_offsets("t", 0).await.1,
        3,
        "nothing was appended"
    );
}

#[test]
fn minimal_reader_in_the_doc_reads_engine_segments() {
    // Proves: the Python reader printed in the doc reads a segment the engine wrote (keys, null
    // values, headers, two epochs) record for record, and stops with an error at a damaged batch.
    // Skipped, with a note, where no `python3` is installed.
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("python3 not found: skipping the minimal reader check");
        return;
    }
    let directory = tempfile::tempdir().unwrap();
    let config = PartitionConfig {
        segment_bytes: 1 << 16,
        ..PartitionConfig::default()
    };
    let mut second_batch_position = 0;
    {
        let partition = Partition::open(
            "t/0",
            directory.path(),
            config,
            &SealWorker::start().unwrap(),
        )
        .unwrap();
        partition.install_epoch(1).unwrap();
        let mut builder = BatchBuilder::new(1);
        builder.push(1_700_000_000_000, Some(b"k"), Some(b"v"));
        builder.push(1_700_000_000_001, None, None);
        builder.push_with_headers(1_700_000_000_002, Some(b""), Some(b"x"), &[("h", b"1")]);
        let first = builder.finish();
        second_batch_position += first.len();
        partition.append(&first).unwrap();
        partition.install_epoch(2).unwrap();
        partition.append(&batch(2, 2, 10)).unwrap();
    }
    let reader = directory.path().join("reader.py");
    std::fs::write(&reader, doc_block("## A minimal reader", "python")).unwrap();
    let segment: PathBuf = directory.path().join(format!("{:020}.log", 0));
    let run = |segment: &Path| {
        Command::new("python3")
            .arg(&reader)
            .arg(segment)
            .output()
            .unwrap()
    };

    let read = run(&segment);
    let stdout = String::from_utf8_lossy(&read.stdout);
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    assert!(
        lines[0].starts_with("byte 0 offset 0 epoch 1 ts 1700000000000 key b'k'"),
        "{stdout}"
    );
    assert!(lines[1].contains("key None value None bytes"), "{stdout}");
    assert!(lines[2].ends_with("headers [('h', b'1')]"), "{stdout}");
    assert!(
        lines[4].starts_with(&format!("byte {second_batch_position} offset 4 epoch 2")),
        "{stdout}"
    );

    let damaged_directory = tempfile::tempdir().unwrap();
    let damaged = damaged_directory.path().join(format!("{:020}.log", 0));
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[second_batch_position + 40] ^= 0x10;
    std::fs::write(&damaged, bytes).unwrap();
    let refused = run(&damaged);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains(&format!("invalid batch at byte {second_batch_position}")),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

// The idempotent-producer parts: the data-directory tree's `producer-id-block` and
// `producer-state` entries, the text of `producer-id-block`, and the `producer-state` snapshot's
// byte layout and worked hex dump.

/// The doc's example: producer 0, producer epoch 0, one batch of sequences 0..=2 at offsets
/// 0..=2, snapshot as of offset 3.
fn example_stamp() -> ProducerStamp {
    ProducerStamp {
        producer_id: 0,
        producer_epoch: 0,
        base_sequence: 0,
    }
}

#[test]
fn producer_files_are_where_and_what_the_doc_says() {
    // Proves: an idempotent producer's first id and first batch, then a close, add exactly
    // `producer-id-block` (holding "1000\n") and `topics/T/P/producer-state` to the data
    // directory; the doc's tree names them (and `groups/`); and the snapshot file is byte for
    // byte the doc's worked hex dump, which is `encode_snapshot` of the documented state.
    let data = tempfile::tempdir().unwrap();
    let config = TopicConfig {
        segment_bytes: 1 << 20,
        flush: FlushPolicy::Always,
        retention_bytes: None,
        retention_ms: None,
    };
    {
        let broker = Broker::open(data.path()).unwrap();
        broker.create_topic("orders", 1, config).unwrap();
        assert_eq!(broker.allocate_producer_id().unwrap(), 0);
        let partition = broker.partition("orders", 0).unwrap();
        partition.install_epoch(1).unwrap();
        let mut builder = BatchBuilder::with_producer(1, 0, 0);
        for value in [b"a", b"b", b"c"] {
            builder.push(1_700_000_000_000, None, Some(value));
        }
        let appended = partition.append(&builder.finish_with_sequence(0)).unwrap();
        assert_eq!(appended.log_end_offset, 3);
    }
    let found = tree(data.path());
    assert!(found.contains("producer-id-block"), "{found:?}");
    assert!(found.contains("groups"), "{found:?}");
    assert!(
        found.contains("topics/orders/0/producer-state"),
        "{found:?}"
    );
    assert_eq!(
        std::fs::read_to_string(data.path().join("producer-id-block")).unwrap(),
        "1000\n"
    );
    let doc_tree = doc_block("## The data directory", "");
    for name in ["groups/", "producer-id-block", SNAPSHOT_FILE] {
        assert!(doc_tree.contains(name), "the doc's tree lacks {name}");
    }

    let mut state = ProducerStates::new(10);
    state.record(&example_stamp(), 3, 0, 0);
    let encoded = state.encode_snapshot(3);
    let file = std::fs::read(data.path().join("topics/orders/0").join(SNAPSHOT_FILE)).unwrap();
    assert_eq!(
        file, encoded,
        "the closed partition's snapshot is the documented state"
    );
    assert_eq!(
        doc_block("## Producer state (`producer-state`)", ""),
        xxd(&encoded),
        "the doc's hex dump of the snapshot"
    );
    let (offset, decoded) = ProducerStates::decode_snapshot(&encoded, 10).unwrap();
    assert_eq!((offset, decoded), (3, state));
}
