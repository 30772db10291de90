//! The central claim of fencelog, end to end over TCP against an in-process server: a holder that
//! froze past its lease can never write after a newer holder was granted. Each test tells one part
//! of the paused-holder story (docs/fencing.md, "What is guaranteed") with real clients, real
//! sockets, a real data directory and real restarts.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::batch_of;
use fencelog::client::{Client, ClientError, Producer, ProducerConfig};
use fencelog::protocol::{FlushPolicy, Request, RequestFrame, TopicConfig};
use fencelog::testing::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const TOPIC: &str = "jobs";
/// A's short lease, and how long it "freezes" (past the lease).
const SHORT_TTL: Duration = Duration::from_millis(200);
const PAUSE: Duration = Duration::from_millis(300);
const LONG_TTL: Duration = Duration::from_secs(30);

fn topic_config() -> TopicConfig {
    TopicConfig {
        segment_bytes: 64 * 1024,
        flush: FlushPolicy::Always,
        retention_bytes: None,
        retention_ms: None,
    }
}

async fn setup() -> (TestServer, Client) {
    let server = TestServer::start().await.expect("start test server");
    let admin = Client::connect(server.addr()).await.expect("connect");
    admin
        .create_topic(TOPIC, 1, topic_config())
        .await
        .expect("create topic");
    (server, admin)
}

/// Every record of the partition: (offset, epoch, value).
async fn read_all(client: &Client) -> Vec<(u64, u64, String)> {
    let mut records = Vec::new();
    let mut offset = 0;
    loop {
        let fetched = client
            .fetch(TOPIC, 0, offset, 1 << 20, Duration::ZERO)
            .await
            .expect("fetch");
        for record in &fetched.records {
            let value = String::from_utf8(record.value.clone().unwrap_or_default().to_vec())
                .expect("utf-8 value");
            records.push((record.offset, record.epoch, value));
            offset = record.offset + 1;
        }
        if offset >= fetched.high_watermark || fetched.records.is_empty() {
            return records;
        }
    }
}

fn values(records: &[(u64, u64, String)]) -> Vec<&str> {
    records.iter().map(|(_, _, value)| value.as_str()).collect()
}

/// The offset where `epoch` starts according to the partition's durable epoch history.
fn epoch_start(server: &TestServer, epoch: u64) -> u64 {
    let history = server
        .broker()
        .partition(TOPIC, 0)
        .expect("partition")
        .epoch_history();
    history
        .iter()
        .find(|(e, _)| *e == epoch)
        .unwrap_or_else(|| panic!("epoch {epoch} is not in the history {history:?}"))
        .1
}

fn assert_fenced(result: Result<impl std::fmt::Debug, ClientError>, epoch: u64, current: u64) {
    match result {
        Err(ClientError::Fenced {
            epoch: rejected,
            current: now,
        }) => assert_eq!((rejected, now), (epoch, current)),
        other => panic!("stale write with epoch {epoch} was not fenced: {other:?}"),
    }
}

// Proves guarantee 1 in its plainest form: A is granted epoch 1 with a short TTL, writes, freezes
// past its TTL; B is granted epoch 2 and writes; A wakes up and writes with its old token and is
// refused with FENCED (epoch 1 < current 2). The log holds A's pre-pause records, then B's, and
// nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_is_fenced_after_a_newer_grant() {
    let (server, admin) = setup().await;
    let a = Client::connect(server.addr()).await.unwrap();
    let b = Client::connect(server.addr()).await.unwrap();

    let lease_a = a.acquire_lease(TOPIC, 0, "a", SHORT_TTL).await.unwrap();
    assert_eq!(lease_a.epoch, 1);
    for value in ["a-1", "a-2"] {
        a.produce(TOPIC, 0, batch_of(lease_a.epoch, &[value]))
            .await
            .unwrap();
    }

    tokio::time::sleep(PAUSE).await; // A freezes; its lease lapses.

    let lease_b = b.acquire_lease(TOPIC, 0, "b", LONG_TTL).await.unwrap();
    assert_eq!(lease_b.epoch, 2);
    let ack_b = b
        .produce(TOPIC, 0, batch_of(lease_b.epoch, &["b-1", "b-2"]))
        .await
        .unwrap();
    assert_eq!((ack_b.base_offset, ack_b.last_offset), (2, 3));

    // A wakes up still believing it holds the lease.
    assert_fenced(
        a.produce(TOPIC, 0, batch_of(lease_a.epoch, &["a-3"])).await,
        1,
        2,
    );
    // Not a one-off: every further stale write is refused too, and B keeps writing.
    assert_fenced(
        a.produce(TOPIC, 0, batch_of(lease_a.epoch, &["a-4"])).await,
        1,
        2,
    );
    b.produce(TOPIC, 0, batch_of(lease_b.epoch, &["b-3"]))
        .await
        .unwrap();

    let records = read_all(&admin).await;
    assert_eq!(values(&records), ["a-1", "a-2", "b-1", "b-2", "b-3"]);
    let epochs: Vec<u64> = records.iter().map(|(_, epoch, _)| *epoch).collect();
    assert_eq!(epochs, [1, 1, 2, 2, 2]);
    assert_eq!(epoch_start(&server, 2), 2);
}

/// A TCP proxy between one client and the server that can hold the client's bytes: while the
/// gate is closed, client→server bytes are read and kept (so they have left the client) but not
/// forwarded; opening the gate delivers them. Server→client bytes always flow.
struct HoldingProxy {
    addr: SocketAddr,
    gate: watch::Sender<bool>,
    held: watch::Receiver<usize>,
}

impl HoldingProxy {
    async fn start(upstream: SocketAddr) -> HoldingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (gate, gate_rx) = watch::channel(false);
        let (held_tx, held) = watch::channel(0usize);
        tokio::spawn(async move {
            let (client, _) = listener.accept().await.unwrap();
            let server = TcpStream::connect(upstream).await.unwrap();
            client.set_nodelay(true).unwrap();
            server.set_nodelay(true).unwrap();
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                let _ = client_write.shutdown().await;
            });
            let mut gate = gate_rx;
            let mut pending: Vec<u8> = Vec::new();
            let mut buffer = vec![0u8; 64 * 1024];
            let mut gate_alive = true;
            loop {
                if !*gate.borrow() && !pending.is_empty() {
                    if server_write.write_all(&pending).await.is_err() {
                        return;
                    }
                    pending.clear();
                    let _ = held_tx.send(0);
                }
                tokio::select! {
                    read = client_read.read(&mut buffer) => {
                        let n = match read {
                            Ok(0) | Err(_) => {
                                let _ = server_write.write_all(&pending).await;
                                let _ = server_write.shutdown().await;
                                return;
                            }
                            Ok(n) => n,
                        };
                        if *gate.borrow() {
                            pending.extend_from_slice(&buffer[..n]);
                            let _ = held_tx.send(pending.len());
                        } else if server_write.write_all(&buffer[..n]).await.is_err() {
                            return;
                        }
                    }
                    changed = gate.changed(), if gate_alive => gate_alive = changed.is_ok(),
                }
            }
        });
        HoldingProxy { addr, gate, held }
    }

    fn hold(&self) {
        self.gate.send_replace(true);
    }

    fn release(&self) {
        self.gate.send_replace(false);
    }

    /// Waits until at least `bytes` client bytes are held.
    async fn wait_held(&mut self, bytes: usize) {
        tokio::time::timeout(Duration::from_secs(5), self.held.wait_for(|n| *n >= bytes))
            .await
            .expect("the proxy never received the held request")
            .unwrap();
    }
}

// Proves guarantee 1 against the network: a produce that A *sent before* B's grant but that
// *reaches the server after* it is rejected. A proxy between A and the server takes A's produce
// off the wire and holds it; A's lease lapses; B is granted epoch 2 (the grant has returned);
// only then does the proxy deliver A's bytes. A's produce answers FENCED (1 < 2), and no record of
// A's lies at or after the offset where epoch 2 begins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_produce_sent_before_the_grant_but_delivered_after_is_fenced() {
    let (server, admin) = setup().await;
    let mut proxy = HoldingProxy::start(server.addr()).await;
    let a = Client::connect(proxy.addr).await.unwrap();
    let b = Client::connect(server.addr()).await.unwrap();

    let lease_a = a.acquire_lease(TOPIC, 0, "a", SHORT_TTL).await.unwrap();
    a.produce(TOPIC, 0, batch_of(lease_a.epoch, &["a-1"]))
        .await
        .unwrap(); // The proxy forwards while its gate is open.

    // A sends its produce; the proxy takes every byte of it off the wire and holds it.
    proxy.hold();
    let late = batch_of(lease_a.epoch, &["a-late"]);
    let frame_len = RequestFrame::new(
        1,
        Request::Produce {
            topic: TOPIC.into(),
            partition: 0,
            batch: late.clone(),
            acks: None,
        },
    )
    .encoded_len();
    let in_flight = {
        let a = a.clone();
        tokio::spawn(async move { a.produce(TOPIC, 0, late).await })
    };
    proxy.wait_held(frame_len).await;
    let sent_at = Instant::now();

    // A's lease lapses while its request is in the network; B is granted epoch 2.
    tokio::time::sleep(PAUSE).await;
    let lease_b = b.acquire_lease(TOPIC, 0, "b", LONG_TTL).await.unwrap();
    let granted_at = Instant::now();
    assert_eq!(lease_b.epoch, 2);
    assert!(sent_at < granted_at);
    assert!(
        !in_flight.is_finished(),
        "A's request was answered while held"
    );

    // Only now is A's request delivered.
    proxy.release();
    let answered = tokio::time::timeout(Duration::from_secs(5), in_flight)
        .await
        .expect("A's held produce was never answered")
        .unwrap();
    assert_fenced(answered, 1, 2);

    b.produce(TOPIC, 0, batch_of(lease_b.epoch, &["b-1"]))
        .await
        .unwrap();
    let records = read_all(&admin).await;
    assert_eq!(values(&records), ["a-1", "b-1"]);
    let start = epoch_start(&server, 2);
    assert_eq!(start, 1);
    assert!(
        records
            .iter()
            .filter(|(offset, _, _)| *offset >= start)
            .all(|(_, epoch, value)| *epoch == 2 && value.starts_with("b-")),
        "a record of A's landed after B's grant: {records:?}"
    );
}

/// Streams batches of about 16 KiB stamped with `epoch` on a connection of its own until `stop`,
/// the first error, or a bound. Returns each produce's outcome (base offset or error).
async fn stream(
    addr: SocketAddr,
    epoch: u64,
    tag: String,
    stop: Arc<AtomicBool>,
) -> Vec<Result<u64, ClientError>> {
    let client = Client::connect(addr).await.unwrap();
    let padding = "x".repeat(16 * 1024);
    let mut outcomes = Vec::new();
    for n in 0..10_000 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let value = format!("{tag}-{n}-{padding}");
        let result = client.produce(TOPIC, 0, batch_of(epoch, &[&value])).await;
        let failed = result.is_err();
        outcomes.push(result.map(|ack| ack.base_offset));
        if failed {
            break;
        }
    }
    outcomes
}

// Proves guarantee 1 under load, where the fence's critical section matters. In each of five
// rounds the holder of epoch e streams large batches from six connections at once (each append
// needs a CRC pass, each ack an fsync) while its lease lapses and a successor is granted e + 1.
// Every one of the holder's batches either landed before the offset where e + 1 begins or was
// FENCED (e < e + 1); none was acknowledged at or after it. Over the whole log, every record's
// epoch is the one in force at its offset per the epoch history, so epochs never go back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_stale_holder_never_lands_after_the_grant() {
    const WRITERS: usize = 6;
    let (server, admin) = setup().await;
    let mut holder = admin
        .acquire_lease(TOPIC, 0, "h1", SHORT_TTL)
        .await
        .unwrap();
    for round in 1..=5u64 {
        assert_eq!(holder.epoch, round);
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let tag = format!("r{round}w{writer}");
                tokio::spawn(stream(server.addr(), holder.epoch, tag, Arc::clone(&stop)))
            })
            .collect();
        tokio::time::sleep(PAUSE).await; // The holder's lease lapses while it streams.
        let successor = admin
            .acquire_lease(TOPIC, 0, &format!("h{}", round + 1), SHORT_TTL)
            .await
            .unwrap();
        assert_eq!(successor.epoch, holder.epoch + 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.store(true, Ordering::Relaxed);

        let start = epoch_start(&server, successor.epoch);
        let mut accepted = 0;
        for writer in writers {
            for outcome in writer.await.unwrap() {
                match outcome {
                    Ok(offset) => {
                        accepted += 1;
                        assert!(
                            offset < start,
                            "a batch of epoch {} was acknowledged at {offset}, after epoch {} \
                             began at {start}",
                            holder.epoch,
                            successor.epoch
                        );
                    }
                    Err(error) => assert_fenced(Err::<(), _>(error), holder.epoch, successor.epoch),
                }
            }
        }
        assert!(
            accepted > 0,
            "round {round}: nothing was written before the grant"
        );
        holder = successor;
    }

    let history = server.broker().partition(TOPIC, 0).unwrap().epoch_history();
    let records = read_all(&admin).await;
    assert!(!records.is_empty());
    for (offset, epoch, value) in &records {
        let in_force = history
            .iter()
            .filter(|(_, start)| start <= offset)
            .map(|(e, _)| *e)
            .max()
            .unwrap();
        assert_eq!(
            *epoch, in_force,
            "offset {offset} has epoch {epoch} but epoch {in_force} was in force there ({history:?})"
        );
        assert!(value.starts_with(&format!("r{epoch}w")), "at {offset}");
    }
}

// Proves guarantee 2: the fence survives a server restart between B's grant and A's stale write.
// B is granted epoch 2 but writes nothing before the restart, so epoch 2 is known only from the
// durable epoch checkpoint, not from the log. After the restart A (reconnecting) is still FENCED,
// B can still write with epoch 2 (the epoch, not the in-memory lease, is the authority), and the
// next grant is epoch 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_survives_a_restart_between_the_grant_and_the_stale_write() {
    let (server, admin) = setup().await;
    let lease_a = admin.acquire_lease(TOPIC, 0, "a", SHORT_TTL).await.unwrap();
    admin
        .produce(TOPIC, 0, batch_of(lease_a.epoch, &["a-1"]))
        .await
        .unwrap();
    tokio::time::sleep(PAUSE).await;
    let lease_b = admin.acquire_lease(TOPIC, 0, "b", LONG_TTL).await.unwrap();
    assert_eq!(lease_b.epoch, 2);
    drop(admin);

    let server = server.restart().await.expect("restart");
    let a = Client::connect(server.addr()).await.unwrap();
    assert_eq!(a.list_offsets(TOPIC, 0).await.unwrap().epoch, 2);
    assert_fenced(
        a.produce(TOPIC, 0, batch_of(lease_a.epoch, &["a-2"])).await,
        1,
        2,
    );
    let b = Client::connect(server.addr()).await.unwrap();
    b.produce(TOPIC, 0, batch_of(lease_b.epoch, &["b-1"]))
        .await
        .unwrap();

    // A second restart, now with epoch 2 in the log as well: still fenced.
    drop((a, b));
    let server = server.restart().await.expect("restart");
    let a = Client::connect(server.addr()).await.unwrap();
    assert_fenced(
        a.produce(TOPIC, 0, batch_of(lease_a.epoch, &["a-3"])).await,
        1,
        2,
    );
    // Leases live in memory: after a restart none is live, and the next grant is newer still.
    let lease_c = a.acquire_lease(TOPIC, 0, "c", LONG_TTL).await.unwrap();
    assert_eq!(lease_c.epoch, 3);
    assert_fenced(
        a.produce(TOPIC, 0, batch_of(lease_b.epoch, &["b-2"])).await,
        2,
        3,
    );

    assert_eq!(values(&read_all(&a).await), ["a-1", "b-1"]);
    assert_eq!(epoch_start(&server, 2), 1);
}

// Proves the renew rule: renewing after another holder was granted answers LEASE_LOST with the
// partition's current epoch, and so does releasing; a renewal after the lease lapsed with nobody
// else granted is LEASE_LOST too (at the holder's own epoch). After a restart, which forgets
// every lease, a renewal still reports the partition's current epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_after_loss_answers_lease_lost_with_the_current_epoch() {
    let (server, client) = setup().await;
    let lease_a = client
        .acquire_lease(TOPIC, 0, "a", SHORT_TTL)
        .await
        .unwrap();
    assert_eq!(
        client
            .renew_lease(TOPIC, 0, lease_a.lease_id)
            .await
            .unwrap()
            .epoch,
        1
    );

    // Lapsed, nobody else granted: lost, and the partition is still at epoch 1.
    tokio::time::sleep(PAUSE).await;
    match client.renew_lease(TOPIC, 0, lease_a.lease_id).await {
        Err(ClientError::LeaseLost { current_epoch, .. }) => assert_eq!(current_epoch, 1),
        other => panic!("renewal of a lapsed lease: {other:?}"),
    }

    // Superseded: lost, at the newer holder's epoch.
    let lease_b = client.acquire_lease(TOPIC, 0, "b", LONG_TTL).await.unwrap();
    assert_eq!(lease_b.epoch, 2);
    match client.renew_lease(TOPIC, 0, lease_a.lease_id).await {
        Err(ClientError::LeaseLost { current_epoch, .. }) => assert_eq!(current_epoch, 2),
        other => panic!("renewal of a superseded lease: {other:?}"),
    }
    match client.release_lease(TOPIC, 0, lease_a.lease_id).await {
        Err(ClientError::LeaseLost { current_epoch, .. }) => assert_eq!(current_epoch, 2),
        other => panic!("release of a superseded lease: {other:?}"),
    }
    // The loser's renewal did not disturb the live lease.
    assert_eq!(
        client
            .renew_lease(TOPIC, 0, lease_b.lease_id)
            .await
            .unwrap()
            .epoch,
        2
    );
    drop(client);

    // After a restart no lease is live; renewing either lease reports where the partition is.
    let server = server.restart().await.expect("restart");
    let client = Client::connect(server.addr()).await.unwrap();
    for lease in [lease_a, lease_b] {
        match client.renew_lease(TOPIC, 0, lease.lease_id).await {
            Err(ClientError::LeaseLost { current_epoch, .. }) => assert_eq!(
                current_epoch, 2,
                "LEASE_LOST after a restart must carry the partition's current epoch"
            ),
            other => panic!("renewal after a restart: {other:?}"),
        }
    }
}

// Proves that the Producer's background renewal keeps a short lease alive for as long as it
// works: with a 750 ms TTL the producer writes for about 3 s (four TTLs); every acquire attempt
// by someone else meanwhile answers LEASE_HELD at epoch 1, every send is acknowledged at dense
// offsets, and the producer is never fenced. The TTL leaves room for a loaded CI machine: the
// producer renews every third of it, so the lease lapses only if a renewal is half a second late
// (with 300 ms, a renewal 200 ms late on a 2-core machine running seven tests at once lost it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_renewal_keeps_a_short_lease_alive_across_many_ttls() {
    let (server, admin) = setup().await;
    let ttl = Duration::from_millis(750);
    let client = Client::connect(server.addr()).await.unwrap();
    let producer = Producer::acquire(client, TOPIC, 0, "keeper", ttl, ProducerConfig::default())
        .await
        .unwrap();
    assert_eq!(producer.epoch(), 1);

    let usurper = {
        let addr = server.addr();
        tokio::spawn(async move {
            let other = Client::connect(addr).await.unwrap();
            let mut refusals = 0;
            let started = Instant::now();
            while started.elapsed() < Duration::from_millis(2_900) {
                tokio::time::sleep(Duration::from_millis(130)).await;
                match other.acquire_lease(TOPIC, 0, "usurper", ttl).await {
                    Err(ClientError::LeaseHeld { current_epoch, .. }) => {
                        assert_eq!(current_epoch, 1);
                        refusals += 1;
                    }
                    other => panic!("the kept lease was granted to someone else: {other:?}"),
                }
            }
            refusals
        })
    };

    let started = Instant::now();
    let mut offsets = Vec::new();
    let mut n = 0;
    while started.elapsed() < Duration::from_secs(3) {
        let sends: Vec<_> = (0..5)
            .map(|_| {
                n += 1;
                producer.send(None, format!("r{n}"))
            })
            .collect();
        for send in sends {
            offsets.push(send.await.expect("send while holding the lease"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refusals = usurper.await.unwrap();
    assert!(refusals >= 10, "only {refusals} acquire attempts were made");
    assert!(producer.error().is_none());
    assert_eq!(offsets, (0..offsets.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        admin.list_offsets(TOPIC, 0).await.unwrap(),
        fencelog::client::Offsets {
            earliest: 0,
            latest: offsets.len() as u64,
            epoch: 1
        }
    );
    producer.close().await.unwrap();
}

// Proves that releasing ends a lease at once: after A releases a lease with a long TTL, B is
// granted the next epoch immediately (no waiting out the TTL), and A's writes with the released
// epoch are FENCED from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_lease_can_be_acquired_at_once_with_the_next_epoch() {
    let (_server, client) = setup().await;
    let lease_a = client.acquire_lease(TOPIC, 0, "a", LONG_TTL).await.unwrap();
    client
        .produce(TOPIC, 0, batch_of(lease_a.epoch, &["a-1"]))
        .await
        .unwrap();
    match client.acquire_lease(TOPIC, 0, "b", LONG_TTL).await {
        Err(ClientError::LeaseHeld { current_epoch, .. }) => assert_eq!(current_epoch, 1),
        other => panic!("granted while A's lease is live: {other:?}"),
    }
    client
        .release_lease(TOPIC, 0, lease_a.lease_id)
        .await
        .unwrap();
    let released_at = Instant::now();
    let lease_b = client.acquire_lease(TOPIC, 0, "b", LONG_TTL).await.unwrap();
    assert!(released_at.elapsed() < Duration::from_secs(5));
    assert_eq!(lease_b.epoch, 2);
    assert_fenced(
        client
            .produce(TOPIC, 0, batch_of(lease_a.epoch, &["a-2"]))
            .await,
        1,
        2,
    );
    client
        .produce(TOPIC, 0, batch_of(lease_b.epoch, &["b-1"]))
        .await
        .unwrap();
    assert_eq!(values(&read_all(&client).await), ["a-1", "b-1"]);
}
