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
    if Command::new("kcat").arg("-V").output().is_err() {
        eprintln!("kcat not found: skipping the kcat check (apt-get install kcat)");
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
