//! Crash test: the real `fencelog serve` binary is killed with SIGKILL at random moments while
//! several producers write with flush `always`, then restarted. Every acknowledged record must be
//! readable, with a valid CRC, at the offset that was acknowledged; offsets stay dense; epochs
//! survive. A few cycles run in the default suite; `tools/crash-test` runs many.

use crate::support::raw_protocol;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelog::client::{BatchBuilder, Client, ClientError};
use fencelog::protocol::{FlushPolicy, TopicConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const TOPIC: &str = "crash";
const PARTITIONS: u32 = 2;
const PRODUCERS_PER_PARTITION: usize = 2;

/// A port below the ephemeral range, so that no outgoing connection can take it while the
/// server is down between a kill and its restart (see `raw_protocol::unused_port`).
fn free_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], raw_protocol::unused_port()))
}

fn start_server(data_dir: &Path, addr: SocketAddr) -> Child {
    Command::new(crate::support::BIN)
        .args(["serve", "--data-dir"])
        .arg(data_dir)
        .args(["--listen", &addr.to_string(), "--log", "warn"])
        // The one-copy produce path is opt-in; on, so that the SPLICED shape's batches take it.
        .args(["--splice-min-bytes", "262144"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start fencelog serve")
}

async fn connect(addr: SocketAddr) -> Client {
    crate::support::process::connect_within(addr, Duration::from_secs(30)).await
}

/// Acknowledged records: (partition, offset) → value.
type Acked = Arc<Mutex<BTreeMap<(u32, u64), String>>>;

/// The batches the producers send: records per batch, and filler bytes per record.
#[derive(Debug, Clone, Copy)]
struct Shape {
    records: (usize, usize),
    filler: (usize, usize),
}

/// Small batches (the copy path).
const SMALL: Shape = Shape {
    records: (1, 5),
    filler: (0, 300),
};

/// Batches of 280–470 KB: over the 256 KiB splice threshold the server runs with, so their
/// bytes go socket → pipe → segment file (the one-copy produce path).
const SPLICED: Shape = Shape {
    records: (300, 450),
    filler: (900, 1100),
};

/// One cycle: start, acquire an epoch per partition, produce until killed at a random moment.
/// Returns the epochs granted.
async fn cycle(
    data_dir: &Path,
    rng: &mut StdRng,
    cycle: usize,
    acked: &Acked,
    config: TopicConfig,
    shape: Shape,
) -> Vec<u64> {
    let addr = free_port();
    let mut server = start_server(data_dir, addr);
    let client = connect(addr).await;
    if cycle == 0 {
        client
            .create_topic(TOPIC, PARTITIONS, config)
            .await
            .unwrap();
    }
    let mut epochs = Vec::new();
    for partition in 0..PARTITIONS {
        let lease = client
            .acquire_lease(
                TOPIC,
                partition,
                &format!("cycle-{cycle}"),
                Duration::from_secs(60),
            )
            .await
            .unwrap();
        epochs.push(lease.epoch);
    }
    let mut producers = Vec::new();
    for partition in 0..PARTITIONS {
        for producer in 0..PRODUCERS_PER_PARTITION {
            let epoch = epochs[partition as usize];
            let acked = Arc::clone(acked);
            let seed = rng.gen::<u64>();
            producers.push(tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed);
                let Ok(client) = Client::connect(addr).await else {
                    return;
                };
                for sequence in 0.. {
                    let count = rng.gen_range(shape.records.0..=shape.records.1);
                    let mut builder = BatchBuilder::new(epoch);
                    let values: Vec<String> = (0..count)
                        .map(|n| {
                            format!(
                                "c{cycle}-p{partition}-w{producer}-s{sequence}-{n}-{}",
                                "x".repeat(rng.gen_range(shape.filler.0..shape.filler.1))
                            )
                        })
                        .collect();
                    for value in &values {
                        builder.push(0, None, Some(value.as_bytes()));
                    }
                    match client.produce(TOPIC, partition, builder.finish()).await {
                        Ok(ack) => {
                            let mut acked = acked.lock().unwrap();
                            for (n, value) in values.into_iter().enumerate() {
                                acked.insert((partition, ack.base_offset + n as u64), value);
                            }
                        }
                        Err(_) => return, // the server was killed
                    }
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(rng.gen_range(50..400))).await;
    server.kill().expect("SIGKILL the server");
    server.wait().unwrap();
    for producer in producers {
        producer.await.unwrap();
    }
    epochs
}

/// Restarts the server and checks every acknowledged record (those retention has not deleted:
/// below the log start) and the epochs.
async fn verify(data_dir: &Path, acked: &Acked, last_epochs: &[u64]) {
    let addr = free_port();
    let mut server = start_server(data_dir, addr);
    let client = connect(addr).await;
    let acked = acked.lock().unwrap().clone();
    for partition in 0..PARTITIONS {
        let offsets = client.list_offsets(TOPIC, partition).await.unwrap();
        assert!(
            offsets.epoch >= last_epochs[partition as usize],
            "partition {partition}: epoch went back from {} to {}",
            last_epochs[partition as usize],
            offsets.epoch
        );
        let mut earliest = offsets.earliest;
        let mut next = earliest;
        let mut log = BTreeMap::new();
        while next < offsets.latest {
            // fetch re-checks every batch's CRC on the client side.
            let fetched = match client
                .fetch(TOPIC, partition, next, 1 << 20, Duration::ZERO)
                .await
            {
                Ok(fetched) => fetched,
                // The restarted server's retention deleted the segment since `list_offsets`:
                // what it deleted is below the new log start, which is where the check begins.
                Err(ClientError::OffsetOutOfRange {
                    earliest: log_start,
                    ..
                }) if log_start > next => {
                    earliest = log_start;
                    next = log_start;
                    continue;
                }
                Err(error) => panic!("partition {partition}: fetch at {next}: {error}"),
            };
            for record in fetched.records {
                assert_eq!(
                    record.offset, next,
                    "partition {partition}: offsets are not dense"
                );
                next += 1;
                log.insert(
                    record.offset,
                    String::from_utf8(record.value.unwrap().to_vec()).unwrap(),
                );
            }
        }
        for ((_, offset), value) in acked.range((partition, earliest)..(partition + 1, 0)) {
            assert_eq!(
                log.get(offset),
                Some(value),
                "partition {partition}: acknowledged record at {offset} lost or changed"
            );
        }
    }
    server.kill().unwrap();
    server.wait().unwrap();
}

/// The topic of the default runs: no retention.
fn keep_everything() -> TopicConfig {
    TopicConfig {
        segment_bytes: 64 * 1024,
        flush: FlushPolicy::Always,
        retention_bytes: None,
        retention_ms: None,
    }
}

async fn run(cycles: usize, seed: u64, config: TopicConfig, shape: Shape) {
    let data = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let acked: Acked = Arc::default();
    let mut last_epochs = vec![0; PARTITIONS as usize];
    for number in 0..cycles {
        let epochs = cycle(data.path(), &mut rng, number, &acked, config, shape).await;
        for (last, granted) in last_epochs.iter_mut().zip(&epochs) {
            assert!(
                *granted > *last,
                "a grant after a crash reused epoch {granted}"
            );
            *last = *granted;
        }
        verify(data.path(), &acked, &last_epochs).await;
    }
    let total = acked.lock().unwrap().len();
    eprintln!("crash test: seed {seed}, {cycles} kill -9 cycles, {total} acknowledged records, all present");
    assert!(
        total > 0,
        "nothing was acknowledged: the test did not exercise anything"
    );
}

fn seed() -> u64 {
    std::env::var("FENCELOG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random)
}

/// A few kill -9 cycles: no acknowledged record is lost, offsets stay dense, epochs survive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_records_survive_kill_9() {
    let seed = seed();
    eprintln!("FENCELOG_SEED={seed}");
    run(3, seed, keep_everything(), SMALL).await;
}

/// The same with batches the server splices from the socket into the segment (the one-copy
/// produce path): a kill lands while batches are on their way socket → pipe → file, and what
/// was acknowledged survives, what was torn is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_spliced_batches_survive_kill_9() {
    let seed = seed();
    eprintln!("FENCELOG_SEED={seed}");
    let config = TopicConfig {
        segment_bytes: 2 * 1024 * 1024,
        ..keep_everything()
    };
    run(3, seed, config, SPLICED).await;
}

/// The same with small segments and a retention of a few, so kills land while retention deletes
/// segments. (Segments this small have their files reused emptied, src/storage/spare.rs; both
/// kinds of reuse are covered on crash images by tests/storage/segment_reuse.rs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_records_survive_kill_9_while_retention_deletes() {
    let seed = seed();
    eprintln!("FENCELOG_SEED={seed}");
    let config = TopicConfig {
        segment_bytes: 16 * 1024,
        retention_bytes: Some(64 * 1024),
        ..keep_everything()
    };
    run(4, seed, config, SMALL).await;
}

/// The long run: `FENCELOG_CRASH_CYCLES` cycles (default 50); see tools/crash-test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: run with tools/crash-test"]
async fn acknowledged_records_survive_many_kill_9_cycles() {
    let cycles = std::env::var("FENCELOG_CRASH_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let seed = seed();
    eprintln!("FENCELOG_SEED={seed}");
    let config = match std::env::var("FENCELOG_CRASH_RETENTION_BYTES") {
        Ok(bytes) => TopicConfig {
            segment_bytes: 16 * 1024,
            retention_bytes: Some(bytes.parse().expect("FENCELOG_CRASH_RETENTION_BYTES")),
            ..keep_everything()
        },
        Err(_) => keep_everything(),
    };
    // FENCELOG_CRASH_SPLICED=1: batches the server splices, in segments that hold several.
    if std::env::var_os("FENCELOG_CRASH_SPLICED").is_some() {
        let config = TopicConfig {
            segment_bytes: config.segment_bytes.max(2 * 1024 * 1024),
            ..config
        };
        run(cycles, seed, config, SPLICED).await;
    } else {
        run(cycles, seed, config, SMALL).await;
    }
}
