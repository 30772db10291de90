//! The idempotent-producer parts of `docs/storage-format.md` checked against what the engine
//! writes: the data-directory tree's `producer-id-block` and `producer-state` entries (and
//! `groups/`), the text of `producer-id-block`, and the `producer-state` snapshot's byte layout
//! and worked hex dump (compared with `ProducerStates::encode_snapshot` and with the file a
//! closed partition leaves).

use std::collections::BTreeSet;
use std::path::Path;

use fencelog::batch::{BatchBuilder, ProducerStamp};
use fencelog::broker::Broker;
use fencelog::protocol::{FlushPolicy, TopicConfig};
use fencelog::storage::producer_state::{ProducerStates, SNAPSHOT_FILE};

const STORAGE_FORMAT_DOC: &str = include_str!("../docs/storage-format.md");

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
    state.record(&example_stamp(), 3, 0);
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
