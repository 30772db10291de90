//! The console in a real browser (issue 35): headless Chromium loads each page of the console a
//! `fencelog serve --metrics-listen` process serves, after a lease, a fenced write after a newer
//! grant and a group's commit, and shows what the CLI and the JSON views say: the lease's holder
//! and epoch as `fencelog lease acquire` printed them, the fenced write's two epochs, the
//! group's lag. A screenshot of each page is kept in `target/console-screenshots/` (CI prints
//! where). Skipped, with a note, where `chromium` is not installed (`.ci/run` installs it).

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
    let _server = Server(
        Command::new(BIN)
            .args(["serve", "--data-dir"])
            .arg(data.path())
            .args(["--listen", &native.to_string()])
            .args(["--metrics-listen", &http.to_string()])
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

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("console-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
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
    let groups = page("groups");
    assert!(groups.contains(">billing<"), "{groups}");
    assert!(
        groups.contains("orders-0: 1 / 3 (lag 2)"),
        "the group's lag: {groups}"
    );
    let cluster = page("cluster");
    assert!(cluster.contains("Partitions (2"), "{cluster}");
    let topics = page("topics");
    assert!(topics.contains(">orders<"), "{topics}");
    page("messages");
    eprintln!("console screenshots: {}", shots.display());
}
