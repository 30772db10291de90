//! `fencelog demo`, the paused-holder story as the real binary tells it: it must exit 0, print the
//! stale write's rejection, and leave only A's pre-pause records and B's records in the log.

use std::process::{Command, Output};
use std::time::Duration;

use fencelog::client::Client;
use fencelog::testing::TestServer;

fn demo(extra: &[&str]) -> Output {
    Command::new(crate::support::BIN)
        .args(["demo", "--ttl", "300ms"])
        .args(extra)
        .env_remove("FENCELOG_ADDR")
        .env("RUST_LOG", "off")
        .output()
        .expect("run fencelog demo")
}

/// The `offset N  epoch E  VALUE` lines of the read-back section.
fn read_back(stdout: &str) -> Vec<(u64, u64, String)> {
    let section = stdout
        .split_once("the partition, read back:\n")
        .expect("no read-back section")
        .1;
    section
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert!(
                fields.len() >= 5 && fields[0] == "offset" && fields[2] == "epoch",
                "unexpected read-back line {line:?}"
            );
            (
                fields[1].parse().unwrap(),
                fields[3].parse().unwrap(),
                fields[4..].join(" "),
            )
        })
        .collect()
}

const EXPECTED: [(u64, u64, &str); 5] = [
    (0, 1, "A: order 1"),
    (1, 1, "A: order 2"),
    (2, 1, "A: order 3"),
    (3, 2, "B: order 1"),
    (4, 2, "B: order 2"),
];

fn assert_story(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "demo failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("write \"A: order 4\"")
            && stdout.contains("REJECTED: fenced: epoch 1 < current 2"),
        "the stale write was not shown rejected:\n{stdout}"
    );
    assert!(
        stdout.contains(
            "refused: lease lost: the lease id does not match the live lease, which \"B\" holds at epoch 2"
        ),
        "A's renewal was not refused:\n{stdout}"
    );
    assert!(!stdout.contains("must never happen"), "{stdout}");
    let records = read_back(&stdout);
    let expected: Vec<(u64, u64, String)> = EXPECTED
        .iter()
        .map(|(offset, epoch, value)| (*offset, *epoch, value.to_string()))
        .collect();
    assert_eq!(records, expected, "read back:\n{stdout}");
    stdout
}

// Proves that the demo's story ends as fencing promises when the binary runs it against its own
// in-process server: exit status 0, A's late write printed as `REJECTED: fenced: epoch 1 <
// current 2`, and the read-back lines show A's three pre-pause records at epoch 1 followed by B's
// two at epoch 2, with nothing from A after the pause.
#[test]
fn demo_fences_the_paused_holder_and_exits_zero() {
    let stdout = assert_story(&demo(&[]));
    let pause_line = stdout
        .lines()
        .position(|line| line.contains("pauses for 450ms"))
        .expect("the pause is announced");
    let grant_line = stdout
        .lines()
        .position(|line| line.contains("B  epoch 2   acquire lease"))
        .expect("B's grant is shown");
    assert!(pause_line < grant_line, "B was granted before A paused");
}

// Proves the same against a server the test owns (`--addr`), reading the log back independently
// of the demo's own printout: after the demo, the partition holds exactly A's pre-pause records
// and B's, epoch 2 begins (per the durable epoch history) at B's first record, every record from
// that offset on is B's, and a restart changes none of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_against_an_external_server_leaves_no_stale_record() {
    let server = TestServer::start().await.unwrap();
    let addr = server.addr().to_string();
    let output = tokio::task::spawn_blocking(move || demo(&["--addr", &addr]))
        .await
        .unwrap();
    let stdout = assert_story(&output);
    let topic = stdout
        .split_once("topic ")
        .and_then(|(_, rest)| rest.split(',').next())
        .expect("the topic name is printed")
        .to_string();

    let server = server.restart().await.unwrap();
    let history = server
        .broker()
        .partition(&topic, 0)
        .unwrap()
        .epoch_history();
    assert_eq!(history, [(1, 0), (2, 3)]);
    let client = Client::connect(server.addr()).await.unwrap();
    let fetched = client
        .fetch(&topic, 0, 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    let records: Vec<(u64, u64, String)> = fetched
        .records
        .iter()
        .map(|r| {
            (
                r.offset,
                r.epoch,
                String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned(),
            )
        })
        .collect();
    let expected: Vec<(u64, u64, String)> = EXPECTED
        .iter()
        .map(|(offset, epoch, value)| (*offset, *epoch, value.to_string()))
        .collect();
    assert_eq!(records, expected);
    assert!(records
        .iter()
        .filter(|(offset, _, _)| *offset >= 3)
        .all(|(_, epoch, value)| *epoch == 2 && value.starts_with("B:")));
}
