//! A data directory written by the build before the broker service (commit 85927c3: `topic.json`
//! without a format version) opens with this build: topics, settings, records and epochs intact,
//! and the fence still at the installed epoch. The fixture in `tests/fixtures/data-dir-v0` was
//! made with that build's CLI: three topics (flush always / interval:250ms with retention /
//! never), `orders/0` written under epochs 1, 2 and 3 across three 4 KiB segments.

use std::time::Duration;

use fencelog::batch::BatchBuilder;
use fencelog::client::Client;
use fencelog::protocol::FlushPolicy;
use fencelog::testing::TestServer;

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Every topic, setting, record and epoch of the old directory is served as it was written.
#[tokio::test]
async fn data_directory_from_the_previous_build_opens_intact() {
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/data-dir-v0");
    let directory = tempfile::tempdir().unwrap();
    copy_dir(&fixture, directory.path());
    let server = TestServer::builder()
        .data_dir(directory.path())
        .start()
        .await
        .unwrap();
    let client = Client::connect(server.addr()).await.unwrap();

    let topics = client.list_topics().await.unwrap();
    let names: Vec<_> = topics.iter().map(|topic| topic.name.as_str()).collect();
    assert_eq!(names, ["events", "metrics", "orders"]);
    let events = &topics[0];
    assert_eq!(
        events.config.flush,
        FlushPolicy::Interval { interval_ms: 250 }
    );
    assert_eq!(events.config.retention_bytes, Some(1_000_000));
    assert_eq!(events.config.retention_ms, Some(3_600_000));
    assert_eq!(topics[1].config.flush, FlushPolicy::Never);
    assert_eq!(topics[2].partitions, 2);
    assert_eq!(topics[2].config.flush, FlushPolicy::Always);
    assert_eq!(topics[2].config.segment_bytes, 4096);

    let offsets = client.list_offsets("orders", 0).await.unwrap();
    assert_eq!(
        (offsets.earliest, offsets.latest, offsets.epoch),
        (0, 260, 3)
    );
    let mut values = Vec::new();
    let mut epochs = Vec::new();
    while values.len() < 260 {
        let fetched = client
            .fetch("orders", 0, values.len() as u64, 1 << 20, Duration::ZERO)
            .await
            .unwrap();
        assert!(
            !fetched.records.is_empty(),
            "records stop at {}",
            values.len()
        );
        for record in fetched.records {
            values.push(String::from_utf8(record.value.unwrap().to_vec()).unwrap());
            epochs.push(record.epoch);
        }
    }
    let expected: Vec<_> = (1..=260).map(|n| format!("order {n}")).collect();
    assert_eq!(values, expected);
    assert_eq!(
        (epochs[0], epochs[40], epochs[60], epochs[259]),
        (1, 2, 3, 3)
    );

    // The fence stands where the old build left it.
    let mut stale = BatchBuilder::new(2);
    stale.push(fencelog::batch::now_ms(), None, Some(b"late"));
    let error = client
        .produce("orders", 0, stale.finish())
        .await
        .unwrap_err();
    assert!(error.is_fenced(), "{error}");
    assert_eq!(client.list_offsets("events", 0).await.unwrap().latest, 2);
    assert_eq!(client.list_offsets("metrics", 0).await.unwrap().latest, 1);
}
