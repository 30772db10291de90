//! The latency a healthy client sees while 1,000 hostile connections hold whatever a stranger
//! can hold (issue 32): a benchmark, not a timed test. Run it with `tools/hostile-clients` (or
//! `cargo test --release --test cli hostile_p99 -- --ignored --nocapture`); it prints the
//! healthy client's p50, p99 and max, alone and under the flood.

use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use fencelog::protocol::{FlushPolicy, Request, RequestFrame};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::raw_protocol::{batch, topic_config, value, ChildServer, RawClient};

/// How long the healthy client is measured, alone and then under the flood (under the 30 s
/// partial-frame timeout, so the half frames are still held at the end).
const MEASURED_FOR: Duration = Duration::from_secs(10);

fn count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// A Fetch request frame, raw bytes.
fn fetch_frame(correlation_id: u32, topic: &str) -> Vec<u8> {
    let mut bytes = BytesMut::new();
    RequestFrame::new(
        correlation_id,
        Request::Fetch {
            topic: topic.into(),
            partition: 0,
            offset: 0,
            max_bytes: 1 << 20,
            max_wait_ms: 0,
            read_committed: None,
        },
    )
    .encode(&mut bytes)
    .unwrap();
    bytes.to_vec()
}

/// Latencies of a healthy client's calls (an ApiVersions and a one-record produce, alternately)
/// for [`MEASURED_FOR`], sorted.
async fn healthy_calls(client: &mut RawClient, epoch: u64) -> Vec<Duration> {
    let mut latencies = Vec::new();
    let until = Instant::now() + MEASURED_FOR;
    let payload = value("healthy", 100);
    while Instant::now() < until {
        let started = Instant::now();
        if latencies.len() % 2 == 0 {
            client.ping().await;
        } else {
            client
                .produce("healthy", 0, batch(epoch, std::slice::from_ref(&payload)))
                .await
                .expect("the healthy produce");
        }
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}

fn report(label: &str, latencies: &[Duration]) -> Duration {
    let at = |fraction: f64| latencies[((latencies.len() - 1) as f64 * fraction) as usize];
    let p99 = at(0.99);
    println!(
        "{label}: {} calls, p50 {:?}, p99 {:?}, max {:?}",
        latencies.len(),
        at(0.5),
        p99,
        latencies[latencies.len() - 1]
    );
    p99
}

/// 1,000 hostile connections (by default 400 that send only a prefix declaring 16 MiB, 300 that
/// send the header and 32 KiB of a 1 MiB frame and stall, 300 that pipeline fetches of 1 MiB
/// and never read the answers) against the real binary with its default limits (1,024
/// connections: the hostile ones stay under it, so the healthy client gets in), while a healthy
/// client's calls are timed. Prints the healthy client's latencies alone and under the flood.
/// Counts: HOSTILE_PREFIXES, HOSTILE_HALF_FRAMES, HOSTILE_SLOW_READERS.
#[test]
#[ignore = "benchmark: starts the real binary and floods it (run with --ignored --nocapture, or tools/hostile-clients)"]
fn hostile_p99_of_a_healthy_client_under_1000_hostile_connections() {
    let prefixes = count("HOSTILE_PREFIXES", 400);
    let half_frames = count("HOSTILE_HALF_FRAMES", 300);
    let slow_readers = count("HOSTILE_SLOW_READERS", 300);
    let directory = tempfile::tempdir().unwrap();
    let server = ChildServer::spawn(&directory.path().join("data"), &["--log", "error"], None);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let addr = server.addr;
        let mut setup = RawClient::connect(addr).await;
        for topic in ["healthy", "big"] {
            setup
                .create_topic(topic, 1, topic_config(64 << 20, FlushPolicy::Never))
                .await
                .unwrap();
        }
        let big_epoch = setup.acquire("big", 0).await.unwrap();
        let chunk: Vec<Vec<u8>> = (0..16).map(|i| value(&format!("big {i}"), 60_000)).collect();
        for _ in 0..4 {
            setup.produce("big", 0, batch(big_epoch, &chunk)).await.unwrap();
        }
        let mut healthy = RawClient::connect(addr).await;
        let epoch = healthy.acquire("healthy", 0).await.unwrap();
        let alone = healthy_calls(&mut healthy, epoch).await;

        let mut hostile = Vec::new();
        for _ in 0..prefixes {
            let mut socket = TcpStream::connect(addr).await.unwrap();
            socket.write_all(&[0x01, 0, 0, 0]).await.unwrap();
            hostile.push(socket);
        }
        for id in 0..half_frames {
            let mut socket = TcpStream::connect(addr).await.unwrap();
            let mut bytes = BytesMut::new();
            bytes.put_u32(1 << 20);
            bytes.put_u16(6);
            bytes.put_u16(0);
            bytes.put_u32(id as u32 + 1);
            bytes.resize(32 * 1024, 0);
            socket.write_all(&bytes).await.unwrap();
            hostile.push(socket);
        }
        for _ in 0..slow_readers {
            let mut socket = TcpStream::connect(addr).await.unwrap();
            let mut requests = Vec::new();
            for id in 1..=64 {
                requests.extend_from_slice(&fetch_frame(id, "big"));
            }
            // Never read: the server's writes to it block (write_timeout then disconnects it).
            let _ = tokio::time::timeout(Duration::from_millis(50), socket.write_all(&requests))
                .await;
            hostile.push(socket);
        }
        println!(
            "hostile connections open: {} ({prefixes} prefix-only, {half_frames} half frames, {slow_readers} slow readers)",
            hostile.len()
        );
        let flooded = healthy_calls(&mut healthy, epoch).await;
        report("healthy client alone", &alone);
        let p99 = report("healthy client under the flood", &flooded);
        println!("p99 under the flood: {:.2} ms", p99.as_secs_f64() * 1000.0);
        drop(hostile);
    });
    drop(server);
}
