//! What a newcomer is told where issue 33 found them tripping: a server started with `--auth`
//! and no user warns and says so in its start-up line; a client without credentials is told
//! which settings to give; a wrong lease id is not called "lost" without naming the live lease;
//! `user`/`acl` refuse a `--data-dir` that is not a data directory; `demo` runs on a server of
//! its own whatever FENCELOG_ADDR says.

use std::process::{Command, Output};

use serde_json::Value;

use crate::support::raw_protocol::ChildServer;
use crate::support::{start_server_on_own_runtime, BIN};

/// Runs `fencelog ARGS` in `dir` (the current directory if `None`) with `env` added to an
/// environment cleared of fencelog settings.
fn run(dir: Option<&std::path::Path>, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("FENCELOG_ADDR")
        .env_remove("FENCELOG_USER")
        .env_remove("FENCELOG_PASSWORD")
        .env_remove("FENCELOG_DATA_DIR")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied());
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    command.output().expect("run fencelog")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn auth_without_users_warns_and_a_client_without_credentials_is_told_what_to_set() {
    // Proves: `serve --auth` on a data directory with no users logs a WARN naming `fencelog
    // user add`, its start-up line says `auth=true`; a client command without credentials gets
    // "set FENCELOG_USER and FENCELOG_PASSWORD (or --user, --password-file)" instead of the
    // protocol's "authenticate with SCRAM-SHA-256 first", in plain text and as JSON
    // (AUTHENTICATION_REQUIRED); and a server without --auth says `auth=false`.
    let dir = tempfile::tempdir().unwrap();
    let server = ChildServer::spawn(&dir.path().join("data"), &["--auth"], None);
    let log = wait_for_log(&server, "fencelog listening");
    let listening = log
        .lines()
        .find(|line| line.contains("fencelog listening"))
        .unwrap();
    assert!(listening.contains("auth=true"), "{listening}");
    let warning = log
        .lines()
        .find(|line| line.contains("WARN") && line.contains("no users yet"))
        .unwrap_or_else(|| panic!("no WARN about missing users:\n{log}"));
    assert!(
        warning.contains("fencelog user add NAME --data-dir"),
        "{warning}"
    );

    let addr = server.addr.to_string();
    let plain = run(None, &["topic", "list", "--addr", &addr], &[]);
    assert_eq!(plain.status.code(), Some(1), "{plain:?}");
    let line = stderr(&plain);
    assert!(
        line.starts_with("error: ")
            && line
                .contains("set FENCELOG_USER and FENCELOG_PASSWORD (or --user, --password-file)")
            && !line.contains("AuthenticateStart"),
        "{line}"
    );
    let json = run(None, &["topic", "list", "--json", "--addr", &addr], &[]);
    assert_eq!(json.status.code(), Some(1));
    let error: Value = serde_json::from_str(stderr(&json).trim_end()).unwrap();
    assert_eq!(error["error"]["code"], "AUTHENTICATION_REQUIRED");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("FENCELOG_USER"));
    drop(server);

    let open = ChildServer::spawn(&dir.path().join("open"), &[], None);
    let log = wait_for_log(&open, "fencelog listening");
    assert!(log.contains("auth=false"), "{log}");
    assert!(!log.contains("no users yet"), "{log}");
}

/// The server's log once it holds `needle` (the listener accepts before the line is flushed).
fn wait_for_log(server: &ChildServer, needle: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let log = server.log_text();
        if log.contains(needle) {
            return log;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {needle:?} in:\n{log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn renewing_with_a_wrong_lease_id_names_the_live_lease() {
    // Proves: `lease renew --lease-id <wrong>` while the lease is live says the id does not
    // match the live lease and whose lease that is (holder, epoch), not only "lease lost: the
    // partition is at epoch N" as if the lease had ended; the real id still renews.
    let (server, _runtime) = start_server_on_own_runtime();
    let addr = server.addr().to_string();
    let cli = |args: &[&str]| {
        let mut full = args.to_vec();
        full.extend(["--addr", &addr]);
        run(None, &full, &[])
    };
    assert!(cli(&["topic", "create", "orders"]).status.success());
    let acquired = cli(&[
        "lease", "acquire", "orders", "0", "--holder", "svc-a", "--json",
    ]);
    let lease: Value = serde_json::from_str(stdout(&acquired).trim()).unwrap();
    let id = lease["lease_id"].as_str().unwrap();
    let wrong = format!(
        "{}{}",
        if id.starts_with('f') { 'e' } else { 'f' },
        &id[1..]
    );
    let refused = cli(&["lease", "renew", "orders", "0", "--lease-id", &wrong]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).starts_with(
            "error: lease lost: the lease id does not match the live lease, which \"svc-a\" holds at epoch 1 for another "
        ),
        "{refused:?}"
    );
    let renewed = cli(&["lease", "renew", "orders", "0", "--lease-id", id]);
    assert_eq!(stdout(&renewed), "epoch 1 ttl_ms 30000\n", "{renewed:?}");
}

#[test]
fn user_and_acl_refuse_a_directory_that_is_not_a_data_directory() {
    // Proves: `user add` into an existing directory that holds other files and no fencelog
    // file is refused (NOT_A_DATA_DIRECTORY) and writes nothing there; listing users or grants
    // of a directory that does not exist is refused rather than printing nothing; a new
    // directory is still created (the README flow), its note JSON under --json.
    let dir = tempfile::tempdir().unwrap();
    let password = [("FENCELOG_PASSWORD", "s3cret")];
    std::fs::create_dir(dir.path().join("photos")).unwrap();
    std::fs::write(dir.path().join("photos/cat.jpg"), b"meow").unwrap();
    let refused = run(
        Some(dir.path()),
        &["user", "add", "alice", "--data-dir", "photos"],
        &password,
    );
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).starts_with("error: photos is not a fencelog data directory"),
        "{refused:?}"
    );
    let mut names: Vec<String> = std::fs::read_dir(dir.path().join("photos"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["cat.jpg"]);
    let acl = run(
        Some(dir.path()),
        &[
            "acl",
            "add",
            "--principal",
            "alice",
            "--topic",
            "*",
            "--ops",
            "consume",
            "--data-dir",
            "photos",
            "--json",
        ],
        &[],
    );
    let error: Value = serde_json::from_str(stderr(&acl).trim_end()).unwrap();
    assert_eq!(error["error"]["code"], "NOT_A_DATA_DIRECTORY");
    assert_eq!(error["error"]["data_dir"], "photos");

    for list in [["user", "list"], ["acl", "list"]] {
        let missing = run(
            Some(dir.path()),
            &[list[0], list[1], "--data-dir", "no-such-dir"],
            &[],
        );
        assert_eq!(missing.status.code(), Some(1), "{missing:?}");
        assert!(
            stderr(&missing).contains("no-such-dir does not exist"),
            "{missing:?}"
        );
    }
    assert!(!dir.path().join("no-such-dir").exists());

    let created = run(
        Some(dir.path()),
        &["user", "add", "alice", "--data-dir", "new-data", "--json"],
        &password,
    );
    assert!(created.status.success(), "{created:?}");
    let note: Value = serde_json::from_str(stderr(&created).trim_end()).unwrap();
    assert_eq!(note["warning"]["code"], "DATA_DIRECTORY_CREATED");
    assert_eq!(note["warning"]["data_dir"], "new-data");
    let listed = run(
        Some(dir.path()),
        &["user", "list", "--data-dir", "new-data"],
        &[],
    );
    assert_eq!(stdout(&listed), "alice\n");
}

#[test]
fn demo_uses_its_own_server_whatever_fencelog_addr_says() {
    // Proves: `fencelog demo` with FENCELOG_ADDR exported (here, an address nothing listens on)
    // still runs the story on an in-process server of its own and says so, so it neither fails
    // nor leaves a demo topic on the user's server.
    let demo = run(
        None,
        &["demo", "--ttl", "300ms"],
        &[("FENCELOG_ADDR", "127.0.0.1:1"), ("RUST_LOG", "off")],
    );
    assert!(demo.status.success(), "{demo:?}");
    assert!(
        stdout(&demo).starts_with("started an in-process fencelog server on "),
        "{}",
        stdout(&demo)
    );
}
