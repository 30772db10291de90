//! `fencelog topic delete NAME [--if-exists] [--addr ...] [--json]` as a user runs it: exit
//! status 0 when the topic is deleted, 1 with a clear message when there is no such topic, 0
//! with `--if-exists`, and the `{"name", "deleted"}` JSON. Runs the real binary against an
//! in-process server.

use std::process::{Command, Output};

use serde_json::Value;

use crate::support::start_server_on_own_runtime;
use crate::support::BIN;

fn run(args: &[&str], addr: &str) -> Output {
    Command::new(BIN)
        .args(args)
        .args(["--addr", addr])
        .env_remove("FENCELOG_ADDR")
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn topic_delete_deletes_and_reports_a_missing_topic() {
    // Proves: `topic delete` exits 0 and says so; the topic is gone from `topic list`; a second
    // delete exits 1 naming the topic; `--if-exists` makes that exit 0; `--json` prints
    // {"name", "deleted"}.
    let (server, _runtime) = start_server_on_own_runtime();
    let addr = server.addr().to_string();
    for topic in ["doomed", "kept", "json"] {
        let created = run(&["topic", "create", topic], &addr);
        assert!(created.status.success(), "{}", text(&created.stderr));
    }

    let deleted = run(&["topic", "delete", "doomed"], &addr);
    assert_eq!(deleted.status.code(), Some(0), "{}", text(&deleted.stderr));
    assert_eq!(text(&deleted.stdout).trim(), "deleted topic doomed");
    let listed = text(&run(&["topic", "list"], &addr).stdout);
    assert!(
        !listed.contains("doomed") && listed.contains("kept"),
        "{listed}"
    );

    let again = run(&["topic", "delete", "doomed"], &addr);
    assert_eq!(again.status.code(), Some(1));
    let message = text(&again.stderr);
    assert!(message.contains("doomed"), "{message}");
    assert!(
        message.to_lowercase().contains("unknown topic"),
        "{message}"
    );

    let tolerated = run(&["topic", "delete", "doomed", "--if-exists"], &addr);
    assert_eq!(
        tolerated.status.code(),
        Some(0),
        "{}",
        text(&tolerated.stderr)
    );
    assert!(text(&tolerated.stdout).contains("does not exist"));

    let json = run(&["topic", "delete", "json", "--json"], &addr);
    assert_eq!(json.status.code(), Some(0));
    let value: Value = serde_json::from_str(text(&json.stdout).trim()).unwrap();
    assert_eq!(value["name"], "json");
    assert_eq!(value["deleted"], true);
    let json = run(&["topic", "delete", "json", "--json", "--if-exists"], &addr);
    let value: Value = serde_json::from_str(text(&json.stdout).trim()).unwrap();
    assert_eq!(value["deleted"], false);
}
