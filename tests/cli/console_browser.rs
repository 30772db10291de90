//! The console in a real browser (issue 35): headless Chromium loads each page of the console a
//! `fencelog serve --metrics-listen` process serves, after a lease, a fenced write after a newer
//! grant and a group's commit, and shows what the CLI and the JSON views say: the lease's holder
//! and epoch as `fencelog lease acquire` printed them, the fenced write's two epochs, the
//! group's lag. A screenshot of each page is kept in `target/console-screenshots/` (CI prints
//! where). Under `--auth`, Chromium driven through WebDriver (`chromedriver`) logs in and sees
//! what the ACLs allow; on a three-broker cluster (where etcd is installed) the cluster page
//! shows the leader and ISR `cluster status --json` reports. Each test is skipped, with a note,
//! where what it needs is not installed (`.ci/run` installs chromium and chromium-driver).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::support::raw_protocol::unused_port;
use crate::support::BIN;

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser"].into_iter().find(|name| {
        Command::new(name)
            .arg("--version")
            .output()
            .is_ok_and(|output| output.status.success())
    })
}

fn fencelog(native: SocketAddr, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .args(["--addr", &native.to_string()])
        .output()
        .expect("run fencelog")
}

/// What Chromium shows at `url` once its script ran (the DOM after a virtual 5 s), and a
/// screenshot of it in `screenshot`.
fn browse(browser: &str, url: &str, screenshot: &Path) -> String {
    let common = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--virtual-time-budget=5000",
        "--window-size=1280,720",
    ];
    let dom = Command::new(browser)
        .args(common)
        .args(["--dump-dom", url])
        .stderr(Stdio::null())
        .output()
        .expect("run chromium");
    assert!(dom.status.success(), "chromium --dump-dom {url} failed");
    let shot = Command::new(browser)
        .args(common)
        .arg(format!("--screenshot={}", screenshot.display()))
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .expect("run chromium");
    assert!(shot.status.success(), "chromium --screenshot {url} failed");
    String::from_utf8_lossy(&dom.stdout).into_owned()
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn every_console_page_shows_the_lease_the_fence_and_the_lag() {
    let Some(browser) = chromium() else {
        eprintln!("note: chromium is not installed; the console's browser test is skipped");
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let native = SocketAddr::from(([127, 0, 0, 1], unused_port()));
    let http = SocketAddr::from(([127, 0, 0, 1], unused_port()));
    let kafka = SocketAddr::from(([127, 0, 0, 1], unused_port()));
    let _server = Server(
        Command::new(BIN)
            .args(["serve", "--data-dir"])
            .arg(data.path())
            .args(["--listen", &native.to_string()])
            .args(["--metrics-listen", &http.to_string()])
            .args(["--kafka-listen", &kafka.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fencelog serve"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fencelog(native, &["topic", "list"]).status.code() != Some(0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        fencelog(native, &["topic", "create", "orders", "--partitions", "2"])
            .status
            .success()
    );
    let first = fencelog(
        native,
        &[
            "lease", "acquire", "orders", "0", "--holder", "alice", "--ttl", "1s", "--json",
        ],
    );
    let first: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    std::thread::sleep(Duration::from_millis(1_100));
    let second = fencelog(
        native,
        &[
            "lease", "acquire", "orders", "0", "--holder", "bob", "--json",
        ],
    );
    let second: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    let (first, second) = (
        first["epoch"].as_u64().unwrap(),
        second["epoch"].as_u64().unwrap(),
    );
    let produce = |epoch: u64, lines: &str| {
        let mut child = Command::new(BIN)
            .args([
                "produce",
                "orders",
                "--epoch",
                &epoch.to_string(),
                "--addr",
                &native.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(lines.as_bytes())
            .unwrap();
        child.wait().unwrap().code()
    };
    assert_eq!(produce(second, "one\ntwo\nthree\n"), Some(0));
    assert_eq!(
        produce(first, "stale\n"),
        Some(3),
        "the stale holder is fenced"
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = fencelog::client::Client::connect(native).await.unwrap();
        client
            .commit_offset("billing", "orders", 0, 1, "")
            .await
            .unwrap();
    });

    // A Kafka consumer group with a live member (kcat's balanced consumer), where kcat is
    // installed: the groups page shows the member and the partitions SyncGroup gave it.
    let kcat = Command::new("kcat")
        .arg("-V")
        .output()
        .is_ok_and(|output| output.status.success())
        .then(|| {
            Server(
                Command::new("kcat")
                    .args(["-b", &kafka.to_string(), "-G", "readers", "orders", "-q"])
                    .args(["-X", "client.id=console-reader"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start kcat"),
            )
        });
    if kcat.is_some() {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (_, body) = runtime.block_on(crate::support::http::http_get(http, "/api/groups"));
            if body.contains("console-reader") && body.contains("orders-1") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "kcat's group never showed its assignment: {body}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    } else {
        eprintln!("note: kcat is not installed; the groups page is checked without a Kafka group");
    }

    let shots = screenshots();
    let page = |view: &str| {
        let dom = browse(
            browser,
            &format!("http://{http}/#{view}"),
            &shots.join(format!("{view}.png")),
        );
        assert!(
            dom.contains(&format!("data-loaded=\"{view}\"")),
            "{view} did not load: {dom}"
        );
        dom
    };
    let leases = page("leases");
    assert!(
        leases.contains(">bob<"),
        "the holder `lease acquire` named: {leases}"
    );
    assert!(
        leases.contains(&format!("<td class=\"num\">{second}</td>")),
        "its epoch {second}: {leases}"
    );
    assert!(
        leases.contains(&format!("epoch {first} &lt; {second} (alice)")),
        "the fenced write's epochs and whose the stale one was: {leases}"
    );
    assert!(
        leases.contains("data-grants=\"2\" data-expiries=\"1\" data-fenced=\"1\""),
        "the partition's leases over time: two grants, alice's expiry, the fenced write: {leases}"
    );
    let groups = page("groups");
    assert!(groups.contains(">billing<"), "{groups}");
    assert!(
        groups.contains("orders-0: 1 / 3 (lag 2)"),
        "the group's lag: {groups}"
    );
    if kcat.is_some() {
        assert!(
            groups.contains("console-reader") && groups.contains(": orders-0, orders-1"),
            "the Kafka group's member and its partitions: {groups}"
        );
    }
    let cluster = page("cluster");
    assert!(cluster.contains("Partitions (2"), "{cluster}");
    let topics = page("topics");
    assert!(topics.contains(">orders<"), "{topics}");
    page("messages");
    eprintln!("console screenshots: {}", shots.display());
}

/// Under `--auth`, in Chromium driven through WebDriver: the page asks for a login, a wrong
/// password is refused on the page, alice's login shows the topics her ACLs allow and not the
/// others, and logging out asks again. Screenshots `login.png` and `topics-as-alice.png`.
/// Skipped, with a note, without `chromedriver` (`.ci/run` installs Debian's `chromium-driver`).
#[test]
fn under_auth_the_console_logs_in_in_a_browser_and_shows_what_the_acls_allow() {
    use crate::support::webdriver::{chromedriver, Browser};

    let Some(driver) = chromedriver() else {
        eprintln!("note: chromedriver is not installed; the console's login test is skipped");
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let admin = |args: &[&str], password: &str| {
        let output = Command::new(BIN)
            .args(args)
            .env("FENCELOG_USER", "admin")
            .env("FENCELOG_PASSWORD", password)
            .output()
            .expect("run fencelog");
        assert!(
            output.status.success(),
            "fencelog {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let data_dir = data.path().to_str().unwrap();
    admin(
        &["user", "add", "admin", "--data-dir", data_dir],
        "admin-pw",
    );
    admin(
        &["user", "add", "alice", "--data-dir", data_dir],
        "alice-pw",
    );
    admin(
        &[
            "acl",
            "add",
            "--principal",
            "alice",
            "--topic",
            "orders",
            "--ops",
            "consume",
            "--data-dir",
            data_dir,
        ],
        "",
    );
    let native = SocketAddr::from(([127, 0, 0, 1], unused_port()));
    let http = SocketAddr::from(([127, 0, 0, 1], unused_port()));
    let _server = Server(
        Command::new(BIN)
            .args(["serve", "--auth", "--super-user", "admin", "--data-dir"])
            .arg(data.path())
            .args(["--listen", &native.to_string()])
            .args(["--http-listen", &http.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fencelog serve"),
    );
    let as_admin = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .args(["--addr", &native.to_string()])
            .env("FENCELOG_USER", "admin")
            .env("FENCELOG_PASSWORD", "admin-pw")
            .output()
            .expect("run fencelog")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while as_admin(&["topic", "list"]).status.code() != Some(0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for topic in ["orders", "payroll"] {
        assert!(as_admin(&["topic", "create", topic]).status.success());
    }

    let shots = screenshots();
    let browser = Browser::start(driver, unused_port());
    browser.open(&format!("http://{http}/#topics"));
    browser.wait_for("data-loaded=\"login\"");
    browser.screenshot(&shots.join("login.png"));
    browser.type_into("#login input[name=user]", "alice");
    browser.type_into("#login input[name=password]", "wrong");
    browser.click("#login button");
    browser.wait_for("wrong user name or password");
    browser.type_into("#login input[name=password]", "alice-pw");
    browser.click("#login button");
    let topics = browser.wait_for("data-loaded=\"topics\"");
    assert!(topics.contains(">orders<"), "alice's topic: {topics}");
    assert!(
        !topics.contains(">payroll<"),
        "a topic alice has no grant on: {topics}"
    );
    browser.screenshot(&shots.join("topics-as-alice.png"));
    browser.click("#logout");
    browser.wait_for("data-loaded=\"login\"");
}

/// Where the screenshots go: `target/console-screenshots/` (CI prints the directory).
fn screenshots() -> PathBuf {
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("console-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    shots
}

/// On a three-broker cluster (etcd and three `fencelog serve --etcd` processes), the cluster
/// page in Chromium shows the three brokers alive and, for a replication-factor-3 partition,
/// the leader, leader epoch and ISR that `fencelog cluster status --json` reports. Screenshot
/// `cluster-of-three.png`. Skipped, with a note, without chromium or etcd.
#[test]
fn on_a_cluster_the_page_shows_the_leader_and_isr_cluster_status_reports() {
    use crate::cluster_processes::BrokerProcess;
    use crate::support::etcd::EtcdServer;

    let Some(browser) = chromium() else {
        eprintln!("note: chromium is not installed; the console's cluster page test is skipped");
        return;
    };
    let Some(etcd) = EtcdServer::start_or_skip("the console's cluster page") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let http = SocketAddr::from(([127, 0, 0, 1], unused_port()));
    let mut brokers: Vec<BrokerProcess> = (1..=3)
        .map(|id| BrokerProcess::prepare(id, &root, &etcd.endpoint()))
        .collect();
    brokers[0]
        .extra
        .extend(["--http-listen".to_owned(), http.to_string()]);
    for broker in &mut brokers {
        broker.spawn();
    }
    let addrs: Vec<String> = brokers.iter().map(|broker| broker.addr.clone()).collect();
    let cli = |args: &[&str]| -> Output {
        Command::new(BIN)
            .args(args)
            .args(["--addr", &addrs.join(",")])
            .env_remove("FENCELOG_ADDR")
            .output()
            .expect("run fencelog")
    };
    let status = || -> Option<serde_json::Value> {
        let output = cli(&["cluster", "status", "--json"]);
        serde_json::from_slice(&output.stdout).ok()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while status().and_then(|status| {
        status["brokers"]
            .as_array()
            .map(|brokers| brokers.iter().filter(|b| b["alive"] == true).count())
    }) != Some(3)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "brokers never registered"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let created = cli(&[
        "topic",
        "create",
        "mirrored",
        "--partitions",
        "1",
        "--replication-factor",
        "3",
    ]);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let partition = loop {
        let found = status().and_then(|status| {
            status["partitions"]
                .as_array()
                .and_then(|rows| rows.iter().find(|row| row["topic"] == "mirrored").cloned())
        });
        if let Some(row) = found.filter(|row| {
            row["leader"].is_u64() && row["isr"].as_array().is_some_and(|isr| isr.len() == 3)
        }) {
            break row;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the partition never settled"
        );
        std::thread::sleep(Duration::from_millis(100));
    };

    let shots = screenshots();
    let dom = browse(
        browser,
        &format!("http://{http}/#cluster"),
        &shots.join("cluster-of-three.png"),
    );
    assert!(dom.contains("data-loaded=\"cluster\""), "{dom}");
    let isr: Vec<String> = partition["isr"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| node.to_string())
        .collect();
    let expected = format!(
        "<td>mirrored</td><td class=\"num\">0</td><td>{}</td><td class=\"num\">{}</td>",
        partition["leader"], partition["leader_epoch"]
    );
    assert!(
        dom.contains(&expected),
        "the leader and epoch `cluster status` reports ({partition}): {dom}"
    );
    assert!(
        dom.contains(&format!("<td>{}</td>", isr.join(", "))),
        "the ISR `cluster status` reports ({partition}): {dom}"
    );
    assert_eq!(
        dom.matches("<td>yes</td>").count(),
        3,
        "three brokers alive: {dom}"
    );
}
