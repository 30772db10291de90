//! The client survives its connection: through `fencelog::testing_proxy::Proxy` the tests cut
//! connections, lose responses and refuse reconnects, and check what the client promises: the
//! next request reconnects, safe requests are retried, unsafe ones are handed back, concurrent
//! callers share one reconnect, backoff bounds the time spent, and produces keep their order.

use std::time::{Duration, Instant};

use crate::support::batch;
use fencelog::client::{Client, ClientError};
use fencelog::protocol::TopicConfig;
use fencelog::testing::TestServer;
use fencelog::testing_proxy::Proxy;

const TTL: Duration = Duration::from_secs(30);

async fn server_with_topic() -> TestServer {
    let server = TestServer::start().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    client
        .create_topic("events", 1, TopicConfig::default())
        .await
        .unwrap();
    server
}

/// After every connection is cut, the next request opens a new one and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_request_reconnects_after_a_cut() {
    let server = server_with_topic().await;
    let proxy = Proxy::start(server.addr()).await.unwrap();
    let client = Client::connect(proxy.addr()).await.unwrap();
    client.list_offsets("events", 0).await.unwrap();
    proxy.cut_all_and_wait().await;
    assert_eq!(client.list_offsets("events", 0).await.unwrap().latest, 0);
    assert_eq!(proxy.connections(), 2);
}

/// A safe request whose response was lost with its connection is sent again on a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn safe_request_is_retried_after_its_response_is_lost() {
    let server = server_with_topic().await;
    let proxy = Proxy::start(server.addr()).await.unwrap();
    let client = Client::connect(proxy.addr()).await.unwrap();
    proxy.cut_after_requests(1);
    // The first Metadata reaches the server, its answer is lost; the retry's answer is too (the
    // new connection is cut after one request as well) until cutting stops.
    let stopper = {
        let proxy_requests = async {
            while proxy.requests_forwarded() < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            proxy.stop_cutting_after_requests();
        };
        proxy_requests
    };
    let (topics, ()) = tokio::join!(client.list_topics(), stopper);
    assert_eq!(topics.unwrap()[0].name, "events");
    assert!(proxy.connections() >= 3, "{}", proxy.connections());
}

/// An unsafe request (AcquireLease) that reached the server but lost its answer is not repeated:
/// the caller gets the transport error, and the lease it did obtain is visible afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_request_is_not_retried_after_its_response_is_lost() {
    let server = server_with_topic().await;
    let proxy = Proxy::start(server.addr()).await.unwrap();
    let client = Client::connect(proxy.addr()).await.unwrap();
    // The connection's first exchange, without which no unsafe request is written on it.
    client.api_versions().await.unwrap();
    proxy.cut_after_requests(1);
    match client.acquire_lease("events", 0, "writer-1", TTL).await {
        Err(ClientError::Disconnected | ClientError::Io(_)) => {}
        other => panic!("expected a transport failure, got {other:?}"),
    }
    proxy.stop_cutting_after_requests();
    // The proxy counts a request once it has written it to the server, which may be after the
    // client saw the answer (or the cut): wait for both requests to be counted.
    let deadline = Instant::now() + Duration::from_secs(5);
    while proxy.requests_forwarded() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        proxy.requests_forwarded(),
        2,
        "ApiVersions, then the lease request sent once, never again"
    );
    // The first attempt did obtain the lease: a second acquire is refused, naming the holder.
    match client.acquire_lease("events", 0, "writer-2", TTL).await {
        Err(ClientError::LeaseHeld {
            holder,
            expires_in,
            current_epoch,
            ..
        }) => {
            assert_eq!(holder, "writer-1");
            assert!(expires_in > Duration::ZERO && expires_in <= TTL);
            assert_eq!(current_epoch, 1);
        }
        other => panic!("expected LeaseHeld, got {other:?}"),
    }
}

/// A produce whose answer was lost is not re-sent (it was appended once), and produces started
/// after it go on the new connection in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_is_not_retried_and_later_produces_keep_their_order() {
    let server = server_with_topic().await;
    let direct = Client::connect(server.addr()).await.unwrap();
    let lease = direct
        .acquire_lease("events", 0, "writer", TTL)
        .await
        .unwrap();
    let proxy = Proxy::start(server.addr()).await.unwrap();
    let client = Client::connect(proxy.addr()).await.unwrap();
    // The connection's first exchange, without which no produce is written on it.
    client.api_versions().await.unwrap();
    proxy.cut_after_requests(1);
    assert!(client
        .produce("events", 0, batch(lease.epoch, "lost-answer"))
        .await
        .is_err());
    proxy.stop_cutting_after_requests();
    for value in ["a", "b", "c"] {
        client
            .produce("events", 0, batch(lease.epoch, value))
            .await
            .unwrap();
    }
    let fetched = direct
        .fetch("events", 0, 0, 1 << 20, Duration::ZERO)
        .await
        .unwrap();
    let values: Vec<&[u8]> = fetched
        .records
        .iter()
        .map(|record| record.value.as_deref().unwrap())
        .collect();
    assert_eq!(values, [&b"lost-answer"[..], b"a", b"b", b"c"]);
}

/// Concurrent callers that find the connection dead share one reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_share_one_reconnect() {
    let server = server_with_topic().await;
    let proxy = Proxy::start(server.addr()).await.unwrap();
    let client = Client::connect(proxy.addr()).await.unwrap();
    client.api_versions().await.unwrap();
    proxy.cut_all_and_wait().await;
    let calls = (0..20).map(|_| client.list_offsets("events", 0));
    for result in futures::future::join_all(calls).await {
        result.unwrap();
    }
    assert_eq!(proxy.connections(), 2);
}

/// While the server cannot be reached the client backs off, and reconnects once it can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_backs_off_until_the_server_is_reachable_again() {
    let server = server_with_topic().await;
    let proxy = Proxy::start(server.addr()).await.unwrap();
    let client = Client::builder()
        .addr(proxy.addr().to_string())
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(100))
        .connect()
        .await
        .unwrap();
    client.api_versions().await.unwrap();
    proxy.refuse_connections_for(Duration::from_millis(500));
    proxy.cut_all_and_wait().await;
    let started = Instant::now();
    client.list_offsets("events", 0).await.unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(400), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
}

/// A call gives up reconnecting after `reconnect_timeout`, with the last connect error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_gives_up_after_its_budget_with_the_connect_error() {
    let server = server_with_topic().await;
    let proxy = Proxy::start(server.addr()).await.unwrap();
    let client = Client::builder()
        .addr(proxy.addr().to_string())
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(50))
        .reconnect_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    client.api_versions().await.unwrap();
    proxy.refuse_connections_for(Duration::from_secs(30));
    proxy.cut_all_and_wait().await;
    let started = Instant::now();
    match client.api_versions().await {
        Err(ClientError::Connect { .. }) => {}
        other => panic!("expected the connect error, got {other:?}"),
    }
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(3), "{waited:?}");
}

/// With several bootstrap addresses the client fails over to one that answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_fails_over_between_bootstrap_addresses() {
    let server = server_with_topic().await;
    let first = Proxy::start(server.addr()).await.unwrap();
    let second = Proxy::start(server.addr()).await.unwrap();
    let client = Client::builder()
        .addr_list(&format!("{}, {}", first.addr(), second.addr()))
        .connect()
        .await
        .unwrap();
    assert_eq!(client.peer_addr(), first.addr());
    client.api_versions().await.unwrap();
    first.refuse_connections_for(Duration::from_secs(30));
    first.cut_all_and_wait().await;
    client.list_offsets("events", 0).await.unwrap();
    assert_eq!(client.peer_addr(), second.addr());
}

/// A builder without addresses, or with a backoff cap below its start, is refused.
#[tokio::test]
async fn builder_refuses_unusable_settings() {
    assert!(matches!(
        Client::builder().connect().await,
        Err(ClientError::InvalidArgument(_))
    ));
    assert!(matches!(
        Client::builder()
            .addr("127.0.0.1:1")
            .reconnect_backoff(Duration::from_secs(2), Duration::from_secs(1))
            .connect()
            .await,
        Err(ClientError::InvalidArgument(_))
    ));
}
