//! Thousands of partitions, fast restart and running out of resources (issue 14, deliverables 5
//! and 6): empty partitions cost (almost) no disk, a restart opens sealed segments without
//! reading them yet never serves a corrupt batch, a partition that fails to open is unavailable
//! while the others are served, descriptor exhaustion is answered rather than hung, a lease grant
//! that cannot write its checkpoint is told to retry without moving the epoch, and a shutdown
//! answers pending long polls at once. None of these tests measures speed.

use crate::support::storage;

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use fencelog::broker::{Broker, BrokerError};
use fencelog::client::Client;
use fencelog::domain::{FlushPolicy, TopicConfig};
use fencelog::protocol::ErrorCode;
use fencelog::storage::{Partition, StorageError};

fn topic_config() -> TopicConfig {
    TopicConfig {
        segment_bytes: fencelog::domain::DEFAULT_SEGMENT_BYTES,
        flush: FlushPolicy::Always,
        retention_bytes: None,
        retention_ms: None,
    }
}

/// Disk blocks (st_blocks x 512 bytes) of every file under `directory`.
fn disk_bytes(directory: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(directory).unwrap() {
        let entry = entry.unwrap();
        let metadata = entry.metadata().unwrap();
        total += metadata.blocks() * 512;
        if metadata.is_dir() {
            total += disk_bytes(&entry.path());
        }
    }
    total
}

/// A topic of 2,000 empty partitions with 64 MiB segments uses far less than 5% of
/// 2,000 x segment_bytes on disk: segments reserve space as they fill, not when created.
#[test]
fn two_thousand_empty_partitions_use_little_disk() {
    let directory = tempfile::tempdir().unwrap();
    let broker = Broker::open(directory.path()).unwrap();
    let config = topic_config();
    broker.create_topic("wide", 2000, config).unwrap();
    let used = disk_bytes(directory.path());
    let budget = 2000 * config.segment_bytes / 20;
    assert!(
        used < budget,
        "{used} bytes on disk, more than 5% of 2000 segments ({budget})"
    );
    drop(broker);
    let reopened = Broker::open(directory.path()).unwrap();
    assert_eq!(reopened.topic("wide").unwrap().partitions().len(), 2000);
    assert!(disk_bytes(directory.path()) < budget);
}

/// Segments synced whole (below the recovery point) are opened without a scan after a clean
/// close, yet a batch damaged on disk meanwhile is refused on read, never served; the
/// background check reports it, and the other batches are served.
#[test]
fn sealed_segments_open_without_a_scan_and_a_corrupt_batch_is_still_refused() {
    let directory = tempfile::tempdir().unwrap();
    let config = storage::config(4096, FlushPolicy::Always);
    let partition = storage::fresh(directory.path(), config);
    for tag in 0..40 {
        partition.append(&storage::batch(1, tag, 4, 100)).unwrap();
    }
    drop(partition);
    let bases = storage::segment_bases(directory.path());
    assert!(bases.len() > 3, "the log rolled: {bases:?}");
    // Flip a byte inside the first record of the first (sealed) segment's first batch.
    let first = directory.path().join(storage::log_name(bases[0]));
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[60] ^= 0xff;
    std::fs::write(&first, &bytes).unwrap();
    let worker = storage::seal_worker();
    let (partition, report) =
        Partition::open_with_report("t/0", directory.path(), config, &worker).unwrap();
    assert_eq!(report.segments_opened_lazily, bases.len() - 1);
    assert!(report.damaged.is_empty(), "nothing was scanned: {report:?}");
    match partition.read(0, 1 << 20) {
        Err(StorageError::Corrupt { .. }) => {}
        other => panic!(
            "a corrupt batch must be refused, got {}",
            storage::describe(&other)
        ),
    }
    let later = partition.read(bases[1], 1 << 20).unwrap();
    assert!(!later.batches.is_empty());
    // The read above checked the second segment whole; the check does the others.
    assert_eq!(
        partition.verify_unscanned_segments(|| true),
        bases.len() - 2
    );
    assert_eq!(
        partition.verify_unscanned_segments(|| true),
        1,
        "only the corrupt one is left"
    );
    assert!(
        partition.read(0, 1 << 20).is_err(),
        "still refused after the check"
    );
    assert_eq!(partition.high_watermark(), 160);
}

/// A partition whose files cannot be opened does not keep the broker from starting: its
/// requests answer PARTITION_UNAVAILABLE (native code 33) and the others are served.
#[test]
fn a_partition_that_fails_to_open_is_unavailable_while_the_others_serve() {
    let directory = tempfile::tempdir().unwrap();
    let broker = Broker::open(directory.path()).unwrap();
    broker.create_topic("t", 2, topic_config()).unwrap();
    drop(broker);
    std::fs::write(
        directory.path().join("topics/t/1/recovery-point"),
        "not an offset",
    )
    .unwrap();
    let broker = Broker::open(directory.path()).unwrap();
    assert!(broker.partition("t", 0).is_ok());
    let error = broker.partition("t", 1).unwrap_err();
    assert!(
        matches!(
            error,
            BrokerError::PartitionUnavailable { partition: 1, .. }
        ),
        "{error}"
    );
    let wire = fencelog::server::to_error_response(&error);
    assert_eq!(wire.code, ErrorCode::PartitionUnavailable);
    assert!(wire.message.contains("restart"), "{}", wire.message);
}

/// A graceful shutdown answers a pending 30 s long poll at once (well within 10 s), with what
/// there is (nothing).
#[tokio::test]
async fn shutdown_answers_a_pending_long_poll_at_once() {
    let server = fencelog::testing::TestServer::start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client.create_topic("t", 1, topic_config()).await.unwrap();
    let poll = tokio::spawn(async move {
        let started = Instant::now();
        let fetched = client
            .fetch("t", 0, 0, 1 << 20, Duration::from_secs(30))
            .await;
        (
            fetched.map(|result| result.records.len()),
            started.elapsed(),
        )
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    server.shutdown().await;
    let (fetched, _) = poll.await.unwrap();
    assert_eq!(fetched.unwrap(), 0);
    let waited = signalled.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "shutdown waited {waited:?}"
    );
}

/// One request frame of the native protocol with its reply read back: the reply's error code.
fn error_code_of_reply(stream: &mut std::net::TcpStream) -> Option<u16> {
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).ok()?;
    let mut frame = vec![0u8; u32::from_be_bytes(length) as usize];
    stream.read_exact(&mut frame).ok()?;
    // Response header: correlation id (4 bytes), then the error code.
    Some(u16::from_be_bytes([frame[4], frame[5]]))
}

/// With a low open-file limit (set on the server process with `ulimit -n`), clients beyond it
/// are answered TOO_MANY_CONNECTIONS or closed promptly instead of hanging; a lease grant that
/// cannot write its checkpoint gets the retriable RESOURCE_EXHAUSTED and the epoch does not
/// move; once descriptors free up, the server serves again.
#[test]
fn descriptor_exhaustion_is_answered_and_the_server_recovers() {
    let directory = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let server = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 64 && exec {} serve --data-dir {} --listen {addr} --log warn",
            crate::support::BIN,
            directory.path().display()
        ))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _server = KillOnDrop(server);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(async {
        for _ in 0..200 {
            if let Ok(client) = Client::connect(&addr).await {
                return client;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the server did not start");
    });
    runtime
        .block_on(client.create_topic("t", 1, topic_config()))
        .unwrap();
    // Take every descriptor the server has left.
    let mut held = Vec::new();
    let mut answered = 0;
    let started = Instant::now();
    for _ in 0..100 {
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut probe = [0u8; 1];
        stream.set_nonblocking(true).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let refused = stream.peek(&mut probe).is_ok();
        stream.set_nonblocking(false).unwrap();
        if refused {
            let code = error_code_of_reply(&mut stream);
            assert!(
                code.is_none() || code == Some(ErrorCode::TooManyConnections.as_u16()),
                "{code:?}"
            );
            answered += 1;
            if answered >= 3 {
                break;
            }
        } else {
            held.push(stream);
        }
    }
    assert!(answered >= 3, "clients beyond the limit were not answered");
    assert!(started.elapsed() < Duration::from_secs(20));
    // Let the server refuse whatever is still in its backlog: each refusal frees a descriptor
    // for a moment.
    std::thread::sleep(Duration::from_millis(500));
    // The lease grant cannot write its checkpoint: a retriable error, the epoch unchanged.
    let refused = runtime.block_on(client.acquire_lease("t", 0, "a", Duration::from_secs(10)));
    let error = refused.expect_err("no descriptor for the checkpoint");
    assert_eq!(error.code(), Some(ErrorCode::ResourceExhausted), "{error}");
    assert!(error.is_retriable());
    let offsets = runtime.block_on(client.list_offsets("t", 0)).unwrap();
    assert_eq!(offsets.epoch, 0);
    // Descriptors free up: the server serves again.
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    let lease = runtime
        .block_on(client.acquire_lease("t", 0, "a", Duration::from_secs(10)))
        .unwrap();
    assert_eq!(lease.epoch, 1);
}

/// Kills the child server however the test ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads one native response frame from an async stream; its error code.
async fn async_error_code(stream: &mut tokio::net::TcpStream) -> Option<u16> {
    use tokio::io::AsyncReadExt;
    let length = stream.read_u32().await.ok()?;
    let mut frame = vec![0u8; length as usize];
    stream.read_exact(&mut frame).await.ok()?;
    Some(u16::from_be_bytes([frame[4], frame[5]]))
}

/// A native request header (Metadata, whose body is never parsed here) declaring `length`.
fn header_declaring(length: u32, correlation_id: u32) -> Vec<u8> {
    let mut bytes = length.to_be_bytes().to_vec();
    bytes.extend_from_slice(&2u16.to_be_bytes());
    bytes.extend_from_slice(&0u16.to_be_bytes());
    bytes.extend_from_slice(&correlation_id.to_be_bytes());
    bytes
}

/// The server-wide memory budget for request frames (paid for as bytes arrive, not by declared
/// length): a frame larger than the whole budget is refused at once with RESOURCE_EXHAUSTED;
/// one that does not fit while another connection's half-sent frame holds the budget waits,
/// then is refused once `buffer_wait` passes; a well-behaved client is served once the budget
/// is given back.
#[tokio::test]
async fn frames_beyond_the_memory_budget_wait_then_are_refused() {
    use tokio::io::AsyncWriteExt;
    let config = fencelog::server::ServerConfig {
        memory_budget: fencelog::server::memory_budget::MemoryBudget::new(64 * 1024),
        connection_buffer_bytes: 4 * 1024,
        buffer_wait: Duration::from_millis(500),
        ..fencelog::server::ServerConfig::default()
    };
    let server = fencelog::testing::TestServer::builder()
        .server_config(config)
        .start()
        .await
        .unwrap();
    // Larger than the whole budget and the connection's share: refused at once.
    let mut huge = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    huge.write_all(&header_declaring(100_000, 1)).await.unwrap();
    assert_eq!(
        async_error_code(&mut huge).await,
        Some(ErrorCode::ResourceExhausted.as_u16())
    );
    // 60 KB of a half-sent frame hold most of the budget...
    let mut holder = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let mut bytes = header_declaring(64_000, 2);
    bytes.resize(60_000, 0);
    holder.write_all(&bytes).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // ...so a 16 KB frame waits, then is refused.
    let mut waiter = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let started = Instant::now();
    let mut bytes = header_declaring(16_000, 3);
    bytes.resize(4 + 16_000, 0);
    let _ = tokio::time::timeout(Duration::from_millis(200), waiter.write_all(&bytes)).await;
    assert_eq!(
        async_error_code(&mut waiter).await,
        Some(ErrorCode::ResourceExhausted.as_u16())
    );
    assert!(started.elapsed() >= Duration::from_millis(400));
    // Once the partial frame's connection is gone, requests are served again.
    drop(holder);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let client = Client::connect(server.addr()).await.unwrap();
    client.create_topic("t", 1, topic_config()).await.unwrap();
    server.shutdown().await;
}
