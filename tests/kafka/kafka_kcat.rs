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
    let server = TestServer::builder().kafka().start().await.unwrap();
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
pub(crate) fn kcat_missing() -> bool {
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
    let server = TestServer::builder().kafka().start().await.unwrap();
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

/// kcat producing idempotently (`-X enable.idempotence=true`) with zstd and lz4, then reading
/// as a balanced consumer group (`-G`, librdkafka 2.0's subscribe): the group reads every
/// partition, commits, and a second run of the same group reads only what came since; `-Q`
/// answers offsets by time (the first offset at or after it, -1 past the end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_idempotent_producer_balanced_group_and_offsets_by_time() {
    if kcat_missing() {
        return;
    }
    let broker = fencelog::broker::BrokerConfig {
        coordinator: fencelog::broker::CoordinatorConfig {
            initial_rebalance_delay: std::time::Duration::from_millis(200),
            ..Default::default()
        },
        ..Default::default()
    };
    let kafka = fencelog::server::KafkaConfig::advertising(([127, 0, 0, 1], 0).into());
    let server = TestServer::builder()
        .broker_config(broker)
        .kafka_config(kafka)
        .start()
        .await
        .unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("grouped", 2, TopicConfig::default())
        .await
        .unwrap();
    let kafka = server.kafka_addr().to_string();
    let before_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 1;
    let produce = |partition: &str, codec: &str| -> Vec<String> {
        let args = [
            "-P", "-b", &kafka, "-t", "grouped", "-p", partition, "-z", codec,
        ];
        let idempotent = ["-X", "enable.idempotence=true"];
        args.iter()
            .chain(&idempotent)
            .map(|a| a.to_string())
            .collect()
    };
    let (ok, _, stderr) = kcat(produce("0", "zstd"), "a\nb\nc\n").await;
    assert!(ok, "kcat -P -z zstd idempotent: {stderr}");
    let (ok, _, stderr) = kcat(produce("1", "lz4"), "d\ne\nf\n").await;
    assert!(ok, "kcat -P -z lz4 idempotent: {stderr}");

    let group = |kafka: &str| -> Vec<String> {
        let args = [
            "-b",
            kafka,
            "-G",
            "kcat-group",
            "-X",
            "auto.offset.reset=earliest",
        ];
        let rest = ["-e", "-q", "-f", "%p %o %s\\n", "grouped"];
        args.iter().chain(&rest).map(|a| a.to_string()).collect()
    };
    let sorted_lines = |stdout: String| -> Vec<String> {
        let mut lines: Vec<String> = stdout.lines().map(str::to_string).collect();
        lines.sort();
        lines
    };
    let (ok, stdout, stderr) = kcat(group(&kafka), "").await;
    assert!(ok, "kcat -G: {stderr}");
    assert_eq!(
        sorted_lines(stdout),
        ["0 0 a", "0 1 b", "0 2 c", "1 0 d", "1 1 e", "1 2 f"]
    );
    let (ok, _, stderr) = kcat(produce("1", "zstd"), "g\n").await;
    assert!(ok, "{stderr}");
    let (ok, stdout, stderr) = kcat(group(&kafka), "").await;
    assert!(ok, "kcat -G again: {stderr}");
    assert_eq!(sorted_lines(stdout), ["1 3 g"], "resumed from the commits");

    let later_ms = before_ms + 3_600_000;
    let query = vec![
        "-Q".to_string(),
        "-b".to_string(),
        kafka.clone(),
        "-t".to_string(),
        format!("grouped:0:{before_ms}"),
        "-t".to_string(),
        format!("grouped:1:{later_ms}"),
    ];
    let (ok, stdout, stderr) = kcat(query, "").await;
    assert!(ok, "kcat -Q: {stderr}");
    assert_eq!(
        sorted_lines(stdout),
        ["grouped [0] offset 0", "grouped [1] offset -1"]
    );
}
