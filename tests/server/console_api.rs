//! The console's first JSON view, `GET /api/partitions`, against a real server: a lease, a
//! fenced write after a newer grant, paging and filtering, refusals.

use std::time::Duration;

use bytes::Bytes;
use fencelog::client::{BatchBuilder, Client, ClientError};
use fencelog::protocol::{FlushPolicy, TopicConfig};
use fencelog::server::prometheus::MetricsEndpoint;
use fencelog::testing::TestServer;
use serde_json::Value;

use crate::support::http::http_get;

const TTL: Duration = Duration::from_secs(10);

fn topic_config() -> TopicConfig {
    TopicConfig {
        segment_bytes: 64 * 1024,
        flush: FlushPolicy::Always,
        retention_bytes: None,
        retention_ms: None,
    }
}

fn batch(epoch: u64, records: usize) -> Bytes {
    let mut builder = BatchBuilder::new(epoch);
    for index in 0..records {
        builder.push(1_000, None, Some(format!("record {index}").as_bytes()));
    }
    builder.finish()
}

/// A server (on a manual clock when asked) with its metrics listener serving the console, a
/// client of it, and `topics` (name, partitions) created with [`topic_config`].
async fn console(
    manual_clock: bool,
    topics: &[(&str, u32)],
) -> (TestServer, MetricsEndpoint, Client) {
    let builder = TestServer::builder();
    let builder = if manual_clock {
        builder.manual_clock()
    } else {
        builder
    };
    let server = builder.start().await.unwrap();
    let http = server.serve_metrics().await.unwrap();
    let client = Client::connect(server.addr()).await.unwrap();
    for (topic, partitions) in topics {
        client
            .create_topic(topic, *partitions, topic_config())
            .await
            .unwrap();
    }
    (server, http, client)
}

/// After a lease, a write, an expiry, a newer grant and the old holder's fenced write, the view
/// shows the new epoch, the offsets and one fenced write; paging and the topic filter cut rows;
/// a page beyond the limit is refused with a reason.
#[tokio::test]
async fn partitions_view_shows_epochs_offsets_and_fenced_writes() {
    let (server, http, client) = console(true, &[("orders", 3), ("audit", 1)]).await;

    let first = client.acquire_lease("orders", 1, "a", TTL).await.unwrap();
    client
        .produce("orders", 1, batch(first.epoch, 4))
        .await
        .unwrap();
    server.advance(TTL + Duration::from_secs(1));
    let second = client.acquire_lease("orders", 1, "b", TTL).await.unwrap();
    let stale = client.produce("orders", 1, batch(first.epoch, 2)).await;
    assert!(
        matches!(stale, Err(ClientError::Fenced { .. })),
        "{stale:?}"
    );

    let (status, body) = http_get(http.addr(), "/api/partitions").await;
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(view["total"], 4);
    let rows = view["partitions"].as_array().unwrap();
    let names: Vec<(String, u64)> = rows
        .iter()
        .map(|row| {
            let topic = row["topic"].as_str().unwrap().to_string();
            (topic, row["partition"].as_u64().unwrap())
        })
        .collect();
    let expected = [("audit", 0), ("orders", 0), ("orders", 1), ("orders", 2)];
    let expected: Vec<(String, u64)> = expected
        .iter()
        .map(|(topic, partition)| (topic.to_string(), *partition))
        .collect();
    assert_eq!(names, expected);
    let leased = &rows[2];
    assert_eq!(leased["leader_epoch"], second.epoch);
    assert_eq!(leased["log_end_offset"], 4);
    assert_eq!(leased["high_watermark"], 4);
    assert_eq!(leased["fenced_writes"], 1);
    assert_eq!(leased["recent_fenced"][0]["stale_epoch"], first.epoch);
    assert_eq!(leased["recent_fenced"][0]["current_epoch"], second.epoch);
    assert_eq!(leased["lease_grants"], 2);
    assert_eq!(leased["lease_expiries"], 1);
    assert_eq!(rows[1]["fenced_writes"], 0);

    let (_, body) = http_get(http.addr(), "/api/partitions?topic=orders&offset=1&limit=1").await;
    let page: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["total"], 3);
    assert_eq!(page["partitions"].as_array().unwrap().len(), 1);
    assert_eq!(page["partitions"][0]["partition"], 1);

    let (status, body) = http_get(http.addr(), "/api/partitions?limit=1000000").await;
    assert_eq!(status, 400);
    assert!(body.contains("page with offset"), "{body}");
    let (status, _) = http_get(http.addr(), "/metrics").await;
    assert_eq!(status, 200, "/metrics keeps working beside /api/");
}

/// `GET /api/leases`: the live lease's holder, epoch and time left as the grant said, the epoch
/// history (where each granted epoch's writes begin) and the write the fence turned away; a
/// partition without a live lease shows `null`.
#[tokio::test]
async fn leases_view_shows_the_holder_the_epoch_history_and_fenced_writes() {
    let (server, http, client) = console(true, &[("orders", 2)]).await;
    let first = client.acquire_lease("orders", 0, "a", TTL).await.unwrap();
    client
        .produce("orders", 0, batch(first.epoch, 3))
        .await
        .unwrap();
    server.advance(TTL + Duration::from_secs(1));
    let second = client.acquire_lease("orders", 0, "b", TTL).await.unwrap();
    assert!(client
        .produce("orders", 0, batch(first.epoch, 1))
        .await
        .is_err());

    let (status, body) = http_get(http.addr(), "/api/leases?topic=orders").await;
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(view["total"], 2);
    let leased = &view["partitions"][0];
    assert_eq!(leased["epoch"], second.epoch);
    assert_eq!(leased["lease"]["holder"], "b");
    assert_eq!(leased["lease"]["epoch"], second.epoch);
    let left = leased["lease"]["expires_in_ms"].as_u64().unwrap();
    assert!(left > 0 && left <= second.ttl_ms, "{left}");
    assert_eq!(
        leased["epoch_history"],
        serde_json::json!([[first.epoch, 0], [second.epoch, 3]])
    );
    assert_eq!(leased["fenced_writes"], 1);
    assert_eq!(leased["recent_fenced"][0]["stale_epoch"], first.epoch);
    assert_eq!(
        leased["recent_fenced"][0]["stale_holder"], "a",
        "whose epoch the fence turned away"
    );
    let grants: Vec<(u64, String)> = leased["recent_grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|grant| {
            (
                grant["epoch"].as_u64().unwrap(),
                grant["holder"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        grants,
        [(first.epoch, "a".into()), (second.epoch, "b".into())]
    );
    // a's lease ran out a second (of the test's clock) before b's grant found it so.
    let expiries = leased["recent_expiries"].as_array().unwrap();
    assert_eq!(expiries.len(), 1, "{body}");
    assert_eq!(
        (&expiries[0]["epoch"], &expiries[0]["holder"]),
        (&Value::from(first.epoch), &Value::from("a"))
    );
    let expired_at = expiries[0]["at_ms"].as_u64().unwrap();
    let granted_at = leased["recent_grants"][1]["at_ms"].as_u64().unwrap();
    assert!(
        expired_at < granted_at && granted_at - expired_at >= 900,
        "the expiry is placed when the lease ran out: {expired_at} vs grant {granted_at}"
    );
    assert!(view["partitions"][1]["lease"].is_null(), "{body}");
}

/// `GET /api/groups`: a group's committed offsets with the high watermark and the lag, and the
/// total lag; `?topic=` keeps the groups that committed there.
#[tokio::test]
async fn groups_view_shows_committed_offsets_and_lag() {
    let (_server, http, client) = console(false, &[("orders", 2), ("audit", 1)]).await;
    let lease = client.acquire_lease("orders", 0, "a", TTL).await.unwrap();
    client
        .produce("orders", 0, batch(lease.epoch, 5))
        .await
        .unwrap();
    client
        .commit_offset("billing", "orders", 0, 2, "")
        .await
        .unwrap();
    client
        .commit_offset("billing", "orders", 1, 0, "")
        .await
        .unwrap();
    client
        .commit_offset("archiver", "audit", 0, 0, "")
        .await
        .unwrap();

    let (status, body) = http_get(http.addr(), "/api/groups").await;
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(view["total"], 2);
    let billing = &view["groups"][1];
    assert_eq!(billing["group"], "billing");
    assert_eq!(billing["state"], "Empty");
    assert_eq!(billing["offsets"][0]["committed"], 2);
    assert_eq!(billing["offsets"][0]["high_watermark"], 5);
    assert_eq!(billing["offsets"][0]["lag"], 3);
    assert_eq!(billing["offsets"][1]["lag"], 0);
    assert_eq!(billing["lag"], 3);

    let (_, body) = http_get(http.addr(), "/api/groups?topic=audit").await;
    let view: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["total"], 1);
    assert_eq!(view["groups"][0]["group"], "archiver");
}

/// A consumer-protocol (KIP-848) group shows with its members, each with the partitions it owns
/// and its target, beside the classic and native groups.
#[tokio::test]
async fn groups_view_shows_a_kip_848_group_and_its_assignment() {
    use fencelog::broker::consumer_groups::HeartbeatRequest;

    let (server, http, _client) = console(false, &[("orders", 2)]).await;
    let topics = [("orders".to_string(), 2u32)].into_iter().collect();
    let joined = server
        .service()
        .groups()
        .consumer_groups()
        .heartbeat(
            HeartbeatRequest {
                group_id: "streams".into(),
                member_id: "member-1".into(),
                member_epoch: 0,
                instance_id: None,
                rack_id: None,
                rebalance_timeout: Some(Duration::from_secs(30)),
                subscribed_topic_names: Some(vec!["orders".into()]),
                subscribed_topic_regex: None,
                server_assignor: None,
                owned: Some(Default::default()),
                client_id: "reader".into(),
                client_host: "/127.0.0.1".into(),
            },
            &topics,
            std::time::Instant::now(),
        )
        .expect("joined");
    assert!(joined.member_epoch > 0);

    let (status, body) = http_get(http.addr(), "/api/groups").await;
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).unwrap();
    let group = view["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|group| group["group"] == "streams")
        .unwrap_or_else(|| panic!("the KIP-848 group is listed: {body}"));
    assert_eq!(group["kind"], "consumer", "{group}");
    assert_eq!(group["generation"], joined.member_epoch, "{group}");
    let member = &group["members"][0];
    assert_eq!(member["member_id"], "member-1");
    assert_eq!(member["client_id"], "reader");
    assert_eq!(
        member["target"],
        serde_json::json!(["orders-0", "orders-1"]),
        "one member is assigned both partitions: {group}"
    );
}

/// `GET /api/messages`: a partition's records from an offset with their epoch, key, value and
/// headers as text, hex or JSON, paged with `next_offset`; an idempotent producer's records show
/// its producer id and sequences; refusals say what to send.
#[tokio::test]
async fn message_browser_pages_records_with_their_epoch_and_producer() {
    let (_server, http, client) = console(false, &[("orders", 1)]).await;
    let lease = client.acquire_lease("orders", 0, "a", TTL).await.unwrap();
    let mut plain = BatchBuilder::new(lease.epoch);
    plain.push_with_headers(1_000, Some(b"k1"), Some(br#"{"n":1}"#), &[("h", b"v")]);
    plain.push(1_001, None, Some(b"two"));
    client.produce("orders", 0, plain.finish()).await.unwrap();
    let producer = client.init_producer_id().await.unwrap();
    let mut idempotent =
        BatchBuilder::with_producer(lease.epoch, producer.producer_id, producer.producer_epoch);
    idempotent.push(1_002, None, Some(b"three"));
    idempotent.push(1_003, None, Some(b"four"));
    client
        .produce("orders", 0, idempotent.finish_with_sequence(0))
        .await
        .unwrap();

    let (status, body) = http_get(
        http.addr(),
        "/api/messages?topic=orders&partition=0&limit=3&format=json",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let page: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(page["high_watermark"], 4);
    assert_eq!(page["next_offset"], 3);
    let messages = page["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[0]["key"], "k1");
    assert_eq!(messages[0]["value"], serde_json::json!({"n": 1}));
    assert_eq!(messages[0]["headers"][0]["name"], "h");
    assert_eq!(messages[0]["epoch"], lease.epoch);
    assert!(messages[0]["producer_id"].is_null());
    assert_eq!(messages[1]["value"], "two");
    assert_eq!(messages[2]["producer_id"], producer.producer_id);
    assert_eq!(messages[2]["sequence"], 0);

    let (_, body) = http_get(
        http.addr(),
        "/api/messages?topic=orders&partition=0&offset=3&format=hex",
    )
    .await;
    let page: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["messages"][0]["value"], "666f7572");
    assert_eq!(page["messages"][0]["sequence"], 1);
    assert_eq!(page["next_offset"], 4);

    let (status, body) = http_get(http.addr(), "/api/messages?topic=orders").await;
    assert_eq!(status, 400);
    assert!(body.contains("partition=N"), "{body}");
    let (status, _) = http_get(http.addr(), "/api/messages?topic=nope&partition=0").await;
    assert_eq!(status, 404);
    let (status, body) = http_get(
        http.addr(),
        "/api/messages?topic=orders&partition=0&offset=99",
    )
    .await;
    assert_eq!(status, 400);
    assert!(body.contains("outside the log"), "{body}");
}

/// `GET /api/topics` and `GET /api/cluster` on a standalone server: settings, sizes and record
/// counts per topic; one broker leading every partition in leader epoch 0, nothing
/// under-replicated.
#[tokio::test]
async fn topics_and_cluster_views_describe_the_topics_and_their_leaders() {
    let (_server, http, client) = console(false, &[]).await;
    let mut config = topic_config();
    config.retention_bytes = Some(1 << 30);
    client.create_topic("orders", 2, config).await.unwrap();
    client
        .create_topic("audit", 1, topic_config())
        .await
        .unwrap();
    let lease = client.acquire_lease("orders", 1, "a", TTL).await.unwrap();
    client
        .produce("orders", 1, batch(lease.epoch, 6))
        .await
        .unwrap();

    let (status, body) = http_get(http.addr(), "/api/topics").await;
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(view["total"], 2);
    let orders = &view["topics"][1];
    assert_eq!(orders["topic"], "orders");
    assert_eq!(orders["partitions"], 2);
    assert_eq!(orders["replication_factor"], 1);
    assert_eq!(orders["flush"], "always");
    assert_eq!(orders["retention_bytes"], 1u64 << 30);
    assert!(orders["retention_ms"].is_null());
    assert_eq!(orders["records"], 6);
    assert!(orders["size_bytes"].as_u64().unwrap() > 0);

    let (status, body) = http_get(http.addr(), "/api/cluster?topic=orders").await;
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(view["brokers"].as_array().unwrap().len(), 1);
    assert_eq!(view["total"], 2);
    let partition = &view["partitions"][1];
    assert_eq!(partition["partition"], 1);
    assert_eq!(partition["leader"], view["brokers"][0]["node_id"]);
    assert_eq!(partition["leader_epoch"], 0);
    assert_eq!(partition["under_replicated"], false);
    assert_eq!(partition["high_watermark"], 6);
}

/// `GET /`: the console's page, one HTML document served by the binary that reads the JSON views
/// (no script from elsewhere).
#[tokio::test]
async fn the_console_page_is_served_by_the_binary() {
    let server = TestServer::builder().start().await.unwrap();
    let http = server.serve_metrics().await.unwrap();
    let (status, body) = http_get(http.addr(), "/").await;
    assert_eq!(status, 200);
    assert!(body.contains("<title>fencelog console</title>"), "{body}");
    for view in [
        "/api/cluster",
        "/api/topics",
        "/api/leases",
        "/api/groups",
        "/api/messages",
    ] {
        assert!(body.contains(view), "the page reads {view}");
    }
    assert!(
        !body.contains("src=\"http"),
        "nothing is fetched from elsewhere"
    );
}

/// Under `--auth` the console asks for a login: nothing under `/api/` without one, a wrong
/// password refused, and a logged-in user sees only the topics its ACLs let it see (and reads
/// messages only where it may consume); a super user sees everything; logging out ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_auth_the_console_asks_for_a_login_and_applies_the_acls() {
    use fencelog::server::prometheus::MetricsEndpointConfig;

    let (server, security, _users) =
        crate::support::admin_and_alice("orders", fencelog::auth::Operation::Consume).await;
    let admin = Client::builder()
        .addr(server.addr().to_string())
        .credentials("admin", "admin-pw")
        .connect()
        .await
        .unwrap();
    admin
        .create_topic("orders", 1, topic_config())
        .await
        .unwrap();
    admin
        .create_topic("secret", 1, topic_config())
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let console = fencelog::server::prometheus::MetricsEndpoint::start(
        listener,
        server.service(),
        MetricsEndpointConfig {
            login: Some(security),
            ..MetricsEndpointConfig::default()
        },
    )
    .unwrap();
    let addr = console.addr();

    let (status, body) = http_get(addr, "/api/topics").await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("log in"), "{body}");
    let (status, _) = http_get(addr, "/").await;
    assert_eq!(status, 200, "the page (with its login form) is served");
    let (status, _, _) = post_form(addr, "/api/login", "user=alice&password=wrong").await;
    assert_eq!(status, 401);

    let (status, cookie, _) = post_form(addr, "/api/login", "user=alice&password=alice-pw").await;
    assert_eq!(status, 200);
    let cookie = cookie.expect("a session cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap().to_string();
    let (status, body) = http_get_with(addr, "/api/topics", &session).await;
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["total"], 1, "alice sees only orders: {body}");
    assert_eq!(view["topics"][0]["topic"], "orders");
    let (status, _) = http_get_with(addr, "/api/messages?topic=secret&partition=0", &session).await;
    assert_eq!(status, 403);
    let (status, _) = http_get_with(addr, "/api/messages?topic=orders&partition=0", &session).await;
    assert_eq!(status, 200);

    let (_, admin_cookie, _) = post_form(addr, "/api/login", "user=admin&password=admin-pw").await;
    let admin_session = admin_cookie.unwrap().split(';').next().unwrap().to_string();
    let (_, body) = http_get_with(addr, "/api/topics", &admin_session).await;
    let view: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["total"], 2, "a super user sees every topic");

    let (status, _) = http_get_with(addr, "/api/logout", &session).await;
    assert_eq!(status, 200);
    let (status, _) = http_get_with(addr, "/api/topics", &session).await;
    assert_eq!(status, 401, "logged out");
}

/// `GET path` with a `Cookie` header.
async fn http_get_with(addr: std::net::SocketAddr, path: &str, cookie: &str) -> (u16, String) {
    let (status, _, body) = http_request(
        addr,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
        ),
    )
    .await;
    (status, body)
}

/// `POST path` of a form: the status, the `Set-Cookie` header and the body.
async fn post_form(
    addr: std::net::SocketAddr,
    path: &str,
    form: &str,
) -> (u16, Option<String>, String) {
    http_request(
        addr,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
            form.len()
        ),
    )
    .await
}

async fn http_request(addr: std::net::SocketAddr, request: &str) -> (u16, Option<String>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let cookie = head.lines().find_map(|line| {
        let (name, value) = line.split_once(": ")?;
        name.eq_ignore_ascii_case("set-cookie")
            .then(|| value.to_string())
    });
    (status, cookie, body.to_string())
}
