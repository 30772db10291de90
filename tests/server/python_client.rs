//! The independent Python client in tools/pyclient, written from docs/protocol.md and
//! docs/storage-format.md alone, runs its whole scenario against a real server: the documents
//! are enough to write a working client, and they agree with the server.

use std::process::Command;

use fencelog::testing::TestServer;

/// The Python client's scenario passes in strict mode (any deviation from the docs fails).
/// Skipped, with a note, where no `python3` is installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_written_from_the_docs_alone_talks_to_the_server() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("python3 not found: skipping the docs-only client check");
        return;
    }
    let server = TestServer::start().await.unwrap();
    let addr = server.addr().to_string();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/pyclient/check.py");
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .args([script, "--addr", &addr, "--strict"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "check.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
