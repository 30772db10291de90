//! kcat (librdkafka 2.0 on Debian, which speaks old non-flexible versions) lists fencelog's
//! topics through the Kafka listener. Skipped, with a note, where `kcat` is not installed
//! (`.ci/run` installs it where apt is available).

use std::process::Command;

use fencelog::client::Client;
use fencelog::domain::TopicConfig;
use fencelog::testing::TestServer;

/// `kcat -L` prints the broker at its advertised address and every topic with its partitions,
/// each led by broker 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_lists_the_topics_and_their_leader() {
    if kcat_missing() {
        return;
    }
    let server = TestServer::start_with_kafka().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("orders", 3, TopicConfig::default())
        .await
        .unwrap();
    client
        .create_topic("audit", 1, TopicConfig::default())
        .await
        .unwrap();
    let kafka = server.kafka_addr().to_string();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("kcat")
            .args(["-L", "-b", &kafka, "-m", "10"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "kcat -L failed:\n{stdout}\n{stderr}"
    );
    let addr = server.kafka_addr();
    assert!(
        stdout.contains(&format!("broker 0 at {}:{}", addr.ip(), addr.port())),
        "{stdout}"
    );
    assert!(
        stdout.contains("topic \"orders\" with 3 partitions:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("topic \"audit\" with 1 partitions:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("partition 2, leader 0, replicas: 0, isrs: 0"),
        "{stdout}"
    );
}

/// True (with a note) where kcat is not installed: the test is then skipped.
fn kcat_missing() -> bool {
    let missing = Command::new("kcat").arg("-V").output().is_err();
    if missing {
        eprintln!("kcat not found: skipping the kcat check (apt-get install kcat)");
    }
    missing
}

/// Runs kcat with `args`, feeding `stdin`; returns (success, stdout, stderr).
async fn kcat(args: Vec<String>, stdin: &str) -> (bool, String, String) {
    let stdin = stdin.to_owned();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = Command::new("kcat")
            .args(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let output = child.wait_with_output().unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// One log, two listeners: kcat writes (every compression) and reads back; a natively produced
/// record is read by kcat and a kcat record by the native consumer, key and value intact; and
/// a partition under a fencelog lease refuses kcat's write without any record landing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_produces_and_consumes_through_one_log_and_is_fenced_by_a_lease() {
    if kcat_missing() {
        return;
    }
    let server = TestServer::start_with_kafka().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("events", 2, TopicConfig::default())
        .await
        .unwrap();
    let kafka = server.kafka_addr().to_string();
    let args = |extra: &[&str]| -> Vec<String> {
        ["-b", &kafka, "-t", "events"]
            .iter()
            .chain(extra)
            .map(|arg| arg.to_string())
            .collect()
    };
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let (ok, _, stderr) = kcat(
            args(&["-P", "-p", "0", "-K", ":", "-z", codec]),
            &format!("key-{codec}:value {codec}\n"),
        )
        .await;
        assert!(ok, "kcat -P -z {codec}: {stderr}");
    }
    let (ok, stdout, stderr) = kcat(args(&["-C", "-p", "0", "-e", "-f", "%o %k %s\\n"]), "").await;
    assert!(ok, "kcat -C: {stderr}");
    assert_eq!(
        stdout,
        "0 key-none value none\n1 key-gzip value gzip\n2 key-snappy value snappy\n\
         3 key-lz4 value lz4\n4 key-zstd value zstd\n"
    );
    let native = client
        .fetch("events", 0, 0, 1 << 20, Default::default())
        .await
        .unwrap();
    let snappy = &native.records[2];
    assert_eq!(snappy.key.as_deref(), Some(&b"key-snappy"[..]));
    assert_eq!(snappy.value.as_deref(), Some(&b"value snappy"[..]));
    assert!(native.records.iter().all(|record| record.epoch == 0));

    // A leased partition: the native holder writes, kcat reads it, kcat's own write is refused.
    let producer = fencelog::client::Producer::builder(client.clone(), "events", 1)
        .lease("native", std::time::Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    producer
        .send(Some("nk".into()), "from native")
        .await
        .unwrap();
    let (ok, stdout, stderr) = kcat(args(&["-C", "-p", "1", "-e", "-f", "%k=%s\\n"]), "").await;
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "nk=from native\n");
    let (ok, _, stderr) = kcat(args(&["-P", "-p", "1"]), "from kafka\n").await;
    assert!(!ok, "kcat must fail on a leased partition");
    assert!(stderr.contains("old epoch"), "{stderr}");
    let offsets = client.list_offsets("events", 1).await.unwrap();
    assert_eq!(offsets.latest, 1, "no kcat record landed");
}
