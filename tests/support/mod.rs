//! The one support module of the integration tests. Every test binary (`tests/<area>/main.rs`)
//! includes it with `#[path = "../support/mod.rs"] mod support;` and its tests name what they
//! need as `crate::support::...`, so a helper is written once instead of once per test file.
//!
//! Here: the `fencelog` binary's path, the one-record batches most tests write, and a test server
//! on a runtime of its own. In submodules: the storage tests' configs and whole-log reads
//! ([`storage`]), a raw native-protocol client and the real binary as a child process
//! ([`raw_protocol`]), the protocol document's worked examples ([`doc_examples`]), proptest
//! strategies for protocol values ([`protocol_strategies`]), an etcd process ([`etcd`]), a raw
//! Kafka connection (`kafka`, feature `kafka`), the Python client check ([`python`]), signals
//! to child processes ([`process`]), the crate's own sources read as text ([`rust_source`]), an
//! HTTP GET for the console ([`http`]), headless Chromium through WebDriver (`webdriver`,
//! feature `cli`), a tmpfs whose disk can be filled on cue ([`tmpfs`]) and a LazyFS mount whose power can be cut ([`lazyfs`]).
// Each binary uses a part of the helpers.
#![allow(dead_code)]

pub mod doc_examples;
pub mod etcd;
pub mod http;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod lazyfs;
pub mod process;
pub mod protocol_strategies;
pub mod python;
pub mod raw_protocol;
pub mod rust_source;
pub mod storage;
pub mod tmpfs;
#[cfg(feature = "cli")]
pub mod webdriver;

use bytes::Bytes;
use fencelog::batch::BatchBuilder;
use fencelog::testing::TestServer;

/// The `fencelog` binary cargo built for the integration tests (it needs the `cli` feature).
#[cfg(feature = "cli")]
pub const BIN: &str = env!("CARGO_BIN_EXE_fencelog");

/// The timestamp of the records [`batch`] and [`batch_of`] build.
pub const RECORD_TIMESTAMP_MS: i64 = 1_000;

/// A batch of one record under `epoch`: `value`, no key, at [`RECORD_TIMESTAMP_MS`].
pub fn batch(epoch: u64, value: &str) -> Bytes {
    batch_of(epoch, &[value])
}

/// A batch of one record per value under `epoch`, no keys, all at [`RECORD_TIMESTAMP_MS`].
pub fn batch_of(epoch: u64, values: &[&str]) -> Bytes {
    let mut builder = BatchBuilder::new(epoch);
    for value in values {
        builder.push(RECORD_TIMESTAMP_MS, None, Some(value.as_bytes()));
    }
    builder.finish()
}

/// A test server with the defaults on a runtime the test owns, for a synchronous test that runs
/// the binary as a child process meanwhile (keep the runtime as long as the server).
pub fn start_server_on_own_runtime() -> (TestServer, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("build a runtime");
    let server = runtime
        .block_on(TestServer::start())
        .expect("start the test server");
    (server, runtime)
}

/// A proptest config of `cases` cases whose failures are kept in `<file>.proptest-regressions`
/// next to the test's source file (`tests/<area>/<module>.proptest-regressions`) and read back
/// from there. proptest's default would look for a `main.rs` above the file and use
/// `tests/proptest-regressions/<module>.txt` instead, away from the test.
pub fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..proptest::test_runner::Config::default()
    }
}

/// How long [`eventually`] retries: long enough for a test cluster to elect, place or move.
pub const EVENTUALLY: std::time::Duration = std::time::Duration::from_secs(20);

/// Retries `attempt` every 100 ms until it succeeds (within [`EVENTUALLY`]), while a cluster
/// moves a group or places a topic; panics with `what` and the last error after that.
pub async fn eventually<T, E: std::fmt::Display, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = std::time::Instant::now() + EVENTUALLY;
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(error) => {
                assert!(std::time::Instant::now() < deadline, "{what}: {error}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

/// Creates `topic` with `partitions` partitions of three replicas each (default config) on the
/// cluster `client` is connected to.
pub async fn create_replicated(
    client: &fencelog::client::Client,
    topic: &str,
    partitions: u32,
) -> Result<(), fencelog::client::ClientError> {
    let replication = fencelog::protocol::Replication {
        factor: 3,
        min_insync: None,
    };
    client
        .create_replicated_topic(
            topic,
            partitions,
            fencelog::protocol::TopicConfig::default(),
            replication,
        )
        .await
}

/// A server with `--auth` whose users are `admin` (a super user, password `admin-pw`) and
/// `alice` (`alice-pw`, granted `operation` on `topic`): the server, its security (a console
/// asks for it) and the directory holding the users, to keep while the server runs.
pub async fn admin_and_alice(
    topic: &str,
    operation: fencelog::auth::Operation,
) -> (
    TestServer,
    std::sync::Arc<fencelog::auth::Security>,
    tempfile::TempDir,
) {
    use fencelog::auth::{users, Security, TopicPattern};
    let directory = tempfile::tempdir().unwrap();
    users::add_user(directory.path(), "admin", "admin-pw").unwrap();
    users::add_user(directory.path(), "alice", "alice-pw").unwrap();
    let security =
        std::sync::Arc::new(Security::open(directory.path(), ["admin".to_owned()]).unwrap());
    security
        .add_acl(
            "alice",
            &TopicPattern::parse(topic).unwrap(),
            &[operation].into_iter().collect(),
        )
        .await
        .unwrap();
    let server = TestServer::builder()
        .server_config(fencelog::server::ServerConfig {
            security: Some(std::sync::Arc::clone(&security)),
            ..fencelog::server::ServerConfig::default()
        })
        .start()
        .await
        .unwrap();
    (server, security, directory)
}
