//! A first address whose server accepts connections and never answers (issue 56: a frozen
//! broker, whose kernel completes the TCP handshake while the process is stopped): every call,
//! those that must not be sent twice included (topic creation and deletion, a lease grant, a
//! plain produce, a transaction), goes to the next address within about the attempt timeout,
//! and nothing but the connection's first exchange (an `ApiVersions`) is ever written to the
//! frozen one, so nothing can be carried out twice when it wakes up.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fencelog::client::Client;
use fencelog::domain::TopicConfig;
use fencelog::protocol::{ApiKey, RequestFrame};
use fencelog::testing::TestServer;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

use crate::support::batch;

const TTL: Duration = Duration::from_secs(30);
/// The bound each call is held to: the attempt timeout (1 s) for the frozen connection's first
/// exchange, a reconnect, and the call itself, with a wide margin for a loaded machine; far
/// below the 30 s request timeout a call written to the frozen server would wait.
const BOUND: Duration = Duration::from_secs(10);

/// A server that accepts every connection, reads everything written on it and never answers;
/// what each connection carried is kept once the client closes it.
struct FrozenServer {
    addr: String,
    accepted: Arc<Mutex<usize>>,
    /// The bytes of each connection the client has closed.
    received: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl FrozenServer {
    async fn start() -> FrozenServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(Mutex::new(0));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (counted, kept) = (Arc::clone(&accepted), Arc::clone(&received));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                *counted.lock().unwrap() += 1;
                let kept = Arc::clone(&kept);
                tokio::spawn(async move {
                    let mut bytes = Vec::new();
                    let _ = socket.read_to_end(&mut bytes).await;
                    kept.lock().unwrap().push(bytes);
                });
            }
        });
        FrozenServer {
            addr,
            accepted,
            received,
        }
    }

    /// The APIs of every request written to it, once every connection it accepted is closed.
    async fn requests_received(&self) -> Vec<ApiKey> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.received.lock().unwrap().len() < *self.accepted.lock().unwrap() {
            assert!(
                Instant::now() < deadline,
                "the client kept a connection open"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut apis = Vec::new();
        for mut bytes in self.received.lock().unwrap().iter().map(|b| &b[..]) {
            while bytes.len() >= 4 {
                let length = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
                let body = Bytes::copy_from_slice(&bytes[4..4 + length]);
                let frame = RequestFrame::decode(body).expect("a request frame");
                apis.push(frame.request.api_key());
                bytes = &bytes[4 + length..];
            }
        }
        apis
    }
}

// Proves: with a frozen first address, creating and deleting a topic, acquiring, renewing and
// releasing a lease, a plain produce and a transaction each succeed on the next address within
// the bound (not after the 30 s request timeout), and the frozen server was only ever sent
// ApiVersions (one per connection it accepted), never a request that changes anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_must_not_be_sent_twice_go_past_a_frozen_first_address() {
    let live = TestServer::start().await.unwrap();
    let frozen = FrozenServer::start().await;
    let addrs = [frozen.addr.clone(), live.addr().to_string()];
    // A new client for each call, so that each starts on the frozen address.
    let client = || async {
        Client::builder()
            .addrs(addrs.clone())
            .connect()
            .await
            .unwrap()
    };
    let timed = |what: &'static str, started: Instant| {
        let took = started.elapsed();
        assert!(
            took < BOUND,
            "{what} took {took:?} with its first address frozen"
        );
    };

    let started = Instant::now();
    client()
        .await
        .create_topic("orders", 2, TopicConfig::default())
        .await
        .unwrap();
    timed("create_topic", started);

    let started = Instant::now();
    let lease = client()
        .await
        .acquire_lease("orders", 0, "writer", TTL)
        .await
        .unwrap();
    timed("acquire_lease", started);
    assert_eq!(lease.epoch, 1);

    let started = Instant::now();
    let ack = client()
        .await
        .produce("orders", 0, batch(lease.epoch, "plain"))
        .await
        .unwrap();
    timed("produce", started);
    assert_eq!(ack.base_offset, 0);

    let started = Instant::now();
    client()
        .await
        .renew_lease("orders", 0, lease.lease_id)
        .await
        .unwrap();
    timed("renew_lease", started);

    let started = Instant::now();
    let other = client()
        .await
        .acquire_lease("orders", 1, "bank", TTL)
        .await
        .unwrap();
    let mut transaction = client()
        .await
        .init_transaction("transfer", Duration::from_secs(60))
        .await
        .unwrap();
    let record = (None, Bytes::from_static(b"credit 10"));
    transaction
        .send("orders", 1, other.epoch, &[record])
        .await
        .unwrap();
    transaction.commit().await.unwrap();
    timed("a transaction", started);

    let started = Instant::now();
    client()
        .await
        .release_lease("orders", 0, lease.lease_id)
        .await
        .unwrap();
    timed("release_lease", started);

    let started = Instant::now();
    client().await.delete_topic("orders").await.unwrap();
    timed("delete_topic", started);

    let apis = frozen.requests_received().await;
    assert!(!apis.is_empty(), "the frozen address was never tried");
    assert!(
        apis.iter().all(|api| *api == ApiKey::ApiVersions),
        "the frozen server was sent more than its connections' first exchange: {apis:?}"
    );
}
