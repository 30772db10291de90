//! Hostile and broken clients over real TCP: each one costs the server a bounded amount of time
//! and memory, is disconnected by a named limit (`idle_timeout`, `max_in_flight` then
//! `write_timeout`, `max_frame_bytes`), and never delays a well-behaved client on another
//! connection.
//!
//! The peak memory of the real binary under a flood is measured by an ignored test:
//! `cargo test --release --test cli hostile_clients -- --ignored --nocapture`.

use crate::support::raw_protocol;

use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use fencelog::protocol::{FlushPolicy, Request, RequestFrame};
use fencelog::server::ServerConfig;
use fencelog::testing::TestServer;
use rand::{rngs::StdRng, Rng, SeedableRng};
use raw_protocol::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest a well-behaved client's call may take while others misbehave.
const SERVED_PROMPTLY: Duration = Duration::from_secs(2);

async fn start(config: ServerConfig) -> TestServer {
    TestServer::builder()
        .server_config(config)
        .start()
        .await
        .expect("server starts")
}

/// Produces `count` one-record batches to `topic`/0 and reads them back, each call within
/// [`SERVED_PROMPTLY`].
async fn well_behaved_round(client: &mut RawClient, topic: &str, epoch: u64, round: usize) {
    let started = Instant::now();
    let payload = value(&format!("round {round}"), 64);
    let offset = client
        .produce(topic, 0, batch(epoch, std::slice::from_ref(&payload)))
        .await
        .expect("produce while others misbehave");
    let (records, _) = client.fetch(topic, 0, offset).await.expect("fetch");
    assert_eq!(records[0].value.as_deref(), Some(&payload[..]));
    assert!(
        started.elapsed() < SERVED_PROMPTLY,
        "a produce and fetch took {:?}",
        started.elapsed()
    );
}

async fn well_behaved_client(server: &TestServer, topic: &str) -> (RawClient, u64) {
    let mut client = RawClient::connect(server.addr()).await;
    client
        .create_topic(topic, 1, topic_config(1 << 20, FlushPolicy::Always))
        .await
        .unwrap();
    let epoch = client.acquire(topic, 0).await.unwrap();
    (client, epoch)
}

/// Reads until the server closes the connection (EOF or reset) and returns how long that took
/// and the bytes read; fails if it stays open past `limit`.
async fn wait_for_close(socket: &mut TcpStream, limit: Duration) -> (Duration, usize) {
    let started = Instant::now();
    let mut total = 0;
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let remaining = limit.saturating_sub(started.elapsed());
        match tokio::time::timeout(remaining, socket.read(&mut buffer)).await {
            Err(_) => panic!("connection still open after {limit:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => return (started.elapsed(), total),
            Ok(Ok(read)) => total += read,
        }
    }
}

/// Proves: a client that sends half a frame and stalls holds only its own connection (others are
/// served meanwhile), and is closed once `idle_timeout` passes without a complete frame, not
/// before; a client that trickles a frame one byte at a time, each well within the idle timeout,
/// is closed after the same time, because only a complete frame counts as activity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_frame_stalls_only_its_connection_and_is_closed_after_idle_timeout() {
    let idle_timeout = Duration::from_millis(700);
    let server = start(ServerConfig {
        idle_timeout,
        ..ServerConfig::default()
    })
    .await;
    let (mut good, epoch) = well_behaved_client(&server, "good").await;

    let mut stalled = TcpStream::connect(server.addr()).await.unwrap();
    stalled.write_all(&[0, 0, 1, 0, 0, 8, 0]).await.unwrap();
    let stalled_since = Instant::now();
    let mut trickler = TcpStream::connect(server.addr()).await.unwrap();
    let trickling = tokio::spawn(async move {
        let started = Instant::now();
        let mut frame = vec![0u8, 0, 4, 0];
        frame.resize(4 + 1024, 7);
        for byte in frame {
            if trickler.write_all(&[byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        started.elapsed()
    });

    for round in 0..5 {
        well_behaved_round(&mut good, "good", epoch, round).await;
    }
    wait_for_close(&mut stalled, Duration::from_secs(10)).await;
    let open_for = stalled_since.elapsed();
    assert!(
        open_for >= idle_timeout - Duration::from_millis(50),
        "closed after {open_for:?}, before the idle timeout"
    );
    let trickled_for = tokio::time::timeout(Duration::from_secs(10), trickling)
        .await
        .expect("the trickler is disconnected")
        .unwrap();
    assert!(
        trickled_for < idle_timeout * 4,
        "a trickling client kept its connection for {trickled_for:?}"
    );
    // The idle timeout applies to everyone: the good client, idle meanwhile, reconnects.
    let mut good = RawClient::connect(server.addr()).await;
    well_behaved_round(&mut good, "good", epoch, 99).await;
}

/// One Fetch request frame, raw bytes.
fn fetch_frame(correlation_id: u32, topic: &str, max_bytes: u32) -> Vec<u8> {
    let mut buffer = BytesMut::new();
    RequestFrame::new(
        correlation_id,
        Request::Fetch {
            topic: topic.into(),
            partition: 0,
            offset: 0,
            max_bytes,
            max_wait_ms: 0,
            read_committed: None,
        },
    )
    .encode(&mut buffer)
    .unwrap();
    buffer.to_vec()
}

/// Proves: a client that pipelines requests (large fetches) and never reads its responses is
/// bounded: the server reads no further once `max_in_flight` requests are pending and its
/// response write is blocked, so the client's own writes block (backpressure through TCP, not
/// memory); other clients are served meanwhile; the client is disconnected after
/// `write_timeout`, having received only a handful of responses out of thousands requested.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelining_client_that_never_reads_is_bounded_and_disconnected() {
    let write_timeout = Duration::from_millis(1500);
    let max_in_flight = 4;
    let server = start(ServerConfig {
        max_in_flight,
        write_timeout,
        ..ServerConfig::default()
    })
    .await;
    let (mut good, epoch) = well_behaved_client(&server, "good").await;
    // 4 MiB of data, so each fetch answer is about 4 MiB.
    good.create_topic("big", 1, topic_config(8 << 20, FlushPolicy::Never))
        .await
        .unwrap();
    let big_epoch = good.acquire("big", 0).await.unwrap();
    for index in 0..8 {
        good.produce(
            "big",
            0,
            batch(big_epoch, &[value(&format!("big {index}"), 512 << 10)]),
        )
        .await
        .unwrap();
    }

    let mut hog = TcpStream::connect(server.addr()).await.unwrap();
    let requests_per_write = 1_000;
    let mut chunk = Vec::new();
    for id in 0..requests_per_write {
        chunk.extend_from_slice(&fetch_frame(id + 1, "big", 4 << 20));
    }
    let mut sent = 0u64;
    let blocked = loop {
        match tokio::time::timeout(Duration::from_millis(300), hog.write_all(&chunk)).await {
            Ok(Ok(())) => sent += u64::from(requests_per_write),
            Ok(Err(_)) => break false,
            Err(_) => break true,
        }
        assert!(sent < 2_000_000, "the server kept reading: {sent} requests");
    };
    assert!(blocked, "the server disconnected before its writes blocked");

    for round in 0..3 {
        well_behaved_round(&mut good, "good", epoch, round).await;
    }
    // Not reading for longer than the write timeout gets the hog disconnected; what it can
    // still read is what was already in the socket buffers.
    tokio::time::sleep(write_timeout * 2).await;
    let (_, received) = wait_for_close(&mut hog, Duration::from_secs(10)).await;
    let responses = received / (4 << 20);
    println!(
        "pipelined {sent} fetches without reading; received {received} bytes before the disconnect"
    );
    // At most what the socket buffers held (up to 32 MiB on a loopback with autotuning).
    assert!(
        responses <= 16,
        "{responses} responses of 4 MiB for {sent} requests"
    );
    well_behaved_round(&mut good, "good", epoch, 99).await;
}

/// What one garbage connection sends.
fn garbage(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..7) {
        // Random bytes.
        0 => (0..rng.gen_range(1..2048)).map(|_| rng.gen()).collect(),
        // A 4 GiB length prefix.
        1 => vec![0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3],
        // A zero length.
        2 => vec![0, 0, 0, 0],
        // A frame shorter than a request header.
        3 => vec![0, 0, 0, 3, 1, 2, 3],
        // A well-framed body of junk (unknown API, bad strings).
        4 => {
            let mut frame = BytesMut::new();
            let body: Vec<u8> = (0..rng.gen_range(8..512)).map(|_| rng.gen()).collect();
            frame.put_u32(body.len() as u32);
            frame.put_slice(&body);
            frame.to_vec()
        }
        // Half of a large frame, then nothing.
        5 => {
            let mut frame = vec![0, 0x10, 0, 0];
            frame.extend((0..rng.gen_range(0..4096)).map(|_| rng.gen::<u8>()));
            frame
        }
        // A valid request followed by garbage.
        _ => {
            let mut frame = fetch_frame(1, "good", 1024);
            frame.extend((0..64).map(|_| rng.gen::<u8>()));
            frame
        }
    }
}

/// Proves: hundreds of garbage connections in parallel (random bytes, 4 GiB and zero lengths,
/// junk bodies, half frames, valid requests followed by junk) plus idle connections held open
/// do not disturb a well-behaved client: every one of its produce-and-fetch rounds during the
/// flood succeeds promptly, and its records are all there afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_flood_does_not_disturb_a_well_behaved_client() {
    let server = start(ServerConfig {
        idle_timeout: Duration::from_secs(2),
        ..ServerConfig::default()
    })
    .await;
    let (mut good, epoch) = well_behaved_client(&server, "good").await;
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(TcpStream::connect(server.addr()).await.unwrap());
    }
    let flood_for = Duration::from_millis(1500);
    let addr = server.addr();
    let flooders: Vec<_> = (0..8u64)
        .map(|seed| {
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed);
                let started = Instant::now();
                let mut connections = 0;
                while started.elapsed() < flood_for {
                    let Ok(mut socket) = TcpStream::connect(addr).await else {
                        continue;
                    };
                    connections += 1;
                    let _ = socket.write_all(&garbage(&mut rng)).await;
                    let mut answer = [0u8; 256];
                    let _ =
                        tokio::time::timeout(Duration::from_millis(20), socket.read(&mut answer))
                            .await;
                }
                connections
            })
        })
        .collect();
    let mut rounds = 0;
    let started = Instant::now();
    while started.elapsed() < flood_for {
        well_behaved_round(&mut good, "good", epoch, rounds).await;
        rounds += 1;
    }
    let mut connections = 0;
    for flooder in flooders {
        connections += flooder.await.unwrap();
    }
    assert!(connections > 200, "only {connections} garbage connections");
    assert!(rounds > 10, "only {rounds} rounds during the flood");
    let read = good.read_range("good", 0, 0, rounds as u64).await.unwrap();
    assert_eq!(read.len(), rounds);
    drop(idle);
}

/// Peak resident memory of the real binary under a hostile flood: 4 GiB length prefixes, half
/// frames of the largest allowed size held open, idle connections and garbage, while a
/// well-behaved client keeps being served. Prints the figures. Proves that memory follows what
/// clients actually send, never what they declare: the peak stays below 64 MiB plus twice the
/// bytes the half frames hold (1000 prefixes declaring 4 GiB and 300 declaring 16 MiB would be
/// 8.7 TiB if believed). Counts can be changed with FLOOD_HALF_FRAMES, FLOOD_HALF_FRAME_KIB
/// (bytes sent of each 16 MiB half frame), FLOOD_IDLE, FLOOD_GARBAGE and FLOOD_HUGE_PREFIXES.
#[test]
#[ignore = "long: starts the real binary and floods it (run with --ignored --nocapture)"]
fn peak_rss_stays_bounded_under_a_hostile_flood() {
    let count = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(default)
    };
    let half_frames = count("FLOOD_HALF_FRAMES", 300);
    let idle_connections = count("FLOOD_IDLE", 300);
    let garbage_connections = count("FLOOD_GARBAGE", 3000);
    let huge_prefixes = count("FLOOD_HUGE_PREFIXES", 1000);
    let half_frame_sent = count("FLOOD_HALF_FRAME_KIB", 256) * 1024;

    let directory = tempfile::tempdir().unwrap();
    let data_dir = directory.path().join("data");
    let mut server = ChildServer::spawn(&data_dir, &["--log", "error"], None);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let addr = server.addr;
    let baseline_kib = server.status_kib("VmHWM");
    let (held, rounds) = runtime.block_on(async move {
        let mut good = RawClient::connect(addr).await;
        good.create_topic("good", 1, topic_config(1 << 20, FlushPolicy::Always))
            .await
            .unwrap();
        let epoch = good.acquire("good", 0).await.unwrap();
        let mut rounds = 0;
        let mut held = Vec::new();
        // Half frames: the largest allowed length declared, 256 KiB of it sent, then silence.
        let mut half = vec![0u8; 4 + half_frame_sent];
        half[..4].copy_from_slice(&(16u32 << 20).to_be_bytes());
        for index in 0..half_frames {
            let mut socket = TcpStream::connect(addr).await.unwrap();
            socket.write_all(&half).await.unwrap();
            held.push(socket);
            if index % 50 == 0 {
                well_behaved_round(&mut good, "good", epoch, rounds).await;
                rounds += 1;
            }
        }
        for _ in 0..idle_connections {
            held.push(TcpStream::connect(addr).await.unwrap());
        }
        let mut rng = StdRng::seed_from_u64(7);
        for index in 0..huge_prefixes + garbage_connections {
            let bytes = if index < huge_prefixes {
                vec![0xFF, 0xFF, 0xFF, 0xFF, 0, 0]
            } else {
                garbage(&mut rng)
            };
            if let Ok(mut socket) = TcpStream::connect(addr).await {
                let _ = socket.write_all(&bytes).await;
                let mut answer = [0u8; 64];
                let _ =
                    tokio::time::timeout(Duration::from_millis(5), socket.read(&mut answer)).await;
            }
            if index % 200 == 0 {
                well_behaved_round(&mut good, "good", epoch, rounds).await;
                rounds += 1;
            }
        }
        well_behaved_round(&mut good, "good", epoch, rounds).await;
        (held, rounds + 1)
    });
    assert!(server.is_running(), "server died: {}", server.log_text());
    let peak_kib = server.status_kib("VmHWM");
    let now_kib = server.status_kib("VmRSS");
    println!(
        "peak RSS (VmHWM) {} MiB, now {} MiB, baseline {} MiB; flood: {half_frames} half frames \
         of 16 MiB with {} KiB sent, {idle_connections} idle, {huge_prefixes} 4 GiB prefixes, \
         {garbage_connections} garbage connections; {rounds} well-behaved rounds served",
        peak_kib / 1024,
        now_kib / 1024,
        baseline_kib / 1024,
        half_frame_sent / 1024,
    );
    drop(held);
    let held_kib = (half_frames * half_frame_sent / 1024) as u64;
    assert!(
        peak_kib < 64 * 1024 + 2 * held_kib,
        "peak RSS {} MiB under the flood, for {} MiB held by half frames",
        peak_kib / 1024,
        held_kib / 1024
    );
}
