//! A newcomer's first mistakes, run as the real binary in a fresh directory: `fencelog serve`
//! checks its addresses and binds its listeners before it creates or locks the data directory
//! (a bad `--listen` or a port in use leaves the directory it ran in empty), a client `--addr`
//! without a port is told to add one, and `user add` / `acl add` say when they created the data
//! directory (a mistyped `--data-dir` would otherwise go unnoticed).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::BIN;

/// How long a command that fails on its arguments may take (it should take milliseconds).
const DEADLINE: Duration = Duration::from_secs(30);

/// What a finished command left behind.
#[derive(Debug)]
struct Finished {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `fencelog ARGS` in `dir` with no FENCELOG_* settings but `env`; kills it (and fails)
/// if it is still running after [`DEADLINE`], as a server that started by mistake would be.
fn run_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Finished {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, _) in std::env::vars() {
        if name.starts_with("FENCELOG_") || name == "RUST_LOG" {
            command.env_remove(name);
        }
    }
    command.envs(env.iter().copied());
    let mut child = command.spawn().expect("spawn fencelog");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > DEADLINE {
            child.kill().ok();
            let output = child.wait_with_output().expect("output");
            panic!(
                "fencelog {args:?} still ran after {DEADLINE:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("output");
    Finished {
        code: output.status.code().expect("exited normally"),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The names in `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// The one line a failed command prints, without the `error: ` prefix.
fn error_line(finished: &Finished) -> &str {
    assert_eq!(finished.code, 1, "{finished:?}");
    assert!(finished.stdout.is_empty(), "{finished:?}");
    let lines: Vec<&str> = finished.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "stderr must be one line: {finished:?}");
    lines[0]
        .strip_prefix("error: ")
        .unwrap_or_else(|| panic!("{finished:?}"))
}

#[test]
fn serve_with_a_malformed_address_names_the_flag_and_leaves_the_directory_empty() {
    // Proves: a malformed address in any of serve's address flags is refused with the flag, the
    // value and what it should look like, before the data directory (default or given) exists.
    let dir = tempfile::tempdir().expect("temp dir");
    let cases: [(&[&str], &str); 5] = [
        (
            &["--listen", "nonsense"],
            "--listen nonsense: not an address: expected HOST:PORT, e.g. 127.0.0.1:7171",
        ),
        (
            &["--listen", "127.0.0.1"],
            "--listen 127.0.0.1: missing port: use HOST:PORT, e.g. 127.0.0.1:7171 (the native listener's default port is 7171)",
        ),
        (
            &["--listen", "127.0.0.1:0", "--kafka-listen", "9092"],
            "--kafka-listen 9092: not an address: expected HOST:PORT, e.g. 127.0.0.1:9092",
        ),
        (
            &["--listen", "127.0.0.1:0", "--metrics-listen", "localhost"],
            "--metrics-listen localhost: missing port: use HOST:PORT, e.g. 127.0.0.1:9464",
        ),
        (
            &["--listen", "127.0.0.1:0", "--advertise", "host:port"],
            "--advertise host:port: not an address: expected HOST:PORT, e.g. 127.0.0.1:7171",
        ),
    ];
    for (flags, expected) in cases {
        for data_dir in [None, Some("given-data")] {
            let mut args = vec!["serve"];
            args.extend_from_slice(flags);
            if let Some(data_dir) = data_dir {
                args.extend_from_slice(&["--data-dir", data_dir, "--auth"]);
            }
            let finished = run_in(dir.path(), &args, &[]);
            assert_eq!(error_line(&finished), expected, "{args:?}");
            assert!(
                entries(dir.path()).is_empty(),
                "{args:?} left {:?}",
                entries(dir.path())
            );
        }
    }
}

#[test]
fn serve_on_a_port_in_use_fails_before_creating_the_data_directory() {
    // Proves: when a listener's port is taken (native, Kafka or metrics, with or without
    // --auth, which reads the data directory), serve fails naming the flag and the address, and
    // creates no data directory: every listener is bound before the directory is touched.
    let dir = tempfile::tempdir().expect("temp dir");
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = taken.local_addr().expect("address").to_string();
    let cases: [(&[&str], &str); 3] = [
        (&["--listen", &taken], "--listen"),
        (
            &["--listen", "127.0.0.1:0", "--kafka-listen", &taken],
            "--kafka-listen",
        ),
        (
            &["--listen", "127.0.0.1:0", "--metrics-listen", &taken],
            "--metrics-listen",
        ),
    ];
    for (flags, flag) in cases {
        for auth in [false, true] {
            let mut args = vec!["serve", "--data-dir", "fresh-data"];
            args.extend_from_slice(flags);
            if auth {
                args.push("--auth");
            }
            let finished = run_in(dir.path(), &args, &[]);
            let line = error_line(&finished);
            assert!(
                line.starts_with(&format!("{flag} {taken}: cannot listen: ")),
                "{args:?}: {line}"
            );
            assert!(line.contains("pick another port"), "{args:?}: {line}");
            assert!(
                entries(dir.path()).is_empty(),
                "{args:?} left {:?}",
                entries(dir.path())
            );
        }
    }
}

#[test]
fn client_addr_without_a_port_is_told_to_add_one() {
    // Proves: a client `--addr` (or FENCELOG_ADDR) with no port, or in any entry of a list, gets
    // "missing port" with an example and the default port, not a resolver's "invalid socket
    // address"; an address that is no HOST:PORT at all gets the shape to use.
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = "--addr 127.0.0.1: missing port: use HOST:PORT, e.g. 127.0.0.1:7171 (the native listener's default port is 7171)";
    let by_flag = run_in(dir.path(), &["topic", "list", "--addr", "127.0.0.1"], &[]);
    assert_eq!(error_line(&by_flag), missing);
    let by_env = run_in(
        dir.path(),
        &["topic", "list"],
        &[("FENCELOG_ADDR", "127.0.0.1")],
    );
    assert_eq!(error_line(&by_env), missing);
    let in_list = run_in(
        dir.path(),
        &[
            "lease",
            "acquire",
            "t",
            "0",
            "--addr",
            "127.0.0.1:1,127.0.0.1",
        ],
        &[],
    );
    assert_eq!(error_line(&in_list), missing);
    let shapeless = run_in(dir.path(), &["consume", "t", "--addr", "nonsense"], &[]);
    assert_eq!(
        error_line(&shapeless),
        "--addr nonsense: not an address: expected HOST:PORT, e.g. 127.0.0.1:7171"
    );
    assert!(entries(dir.path()).is_empty());
}

#[test]
fn user_and_acl_changes_say_when_they_created_the_data_directory() {
    // Proves: the README's "Locking it down" flow (users and grants before the first serve)
    // still works on a directory that does not exist yet, and the command that created it says
    // so on stderr, naming it, so a mistyped --data-dir is noticed; later changes say nothing.
    let dir = tempfile::tempdir().expect("temp dir");
    let password = [("FENCELOG_PASSWORD", "s3cret")];
    let first = run_in(
        dir.path(),
        &["user", "add", "orders-svc", "--data-dir", "new-data"],
        &password,
    );
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(first.stdout, "added user orders-svc\n");
    let note = first.stderr.trim_end();
    assert!(
        note.starts_with("note: created data directory new-data (it did not exist); if that is a typo, remove it"),
        "{first:?}"
    );
    assert_eq!(first.stderr.lines().count(), 1, "{first:?}");
    let again = run_in(
        dir.path(),
        &["user", "add", "alice", "--data-dir", "new-data"],
        &password,
    );
    assert_eq!((again.code, again.stderr.as_str()), (0, ""), "{again:?}");
    let grant = [
        "acl",
        "add",
        "--principal",
        "orders-svc",
        "--topic",
        "orders-*",
        "--ops",
        "produce,lease",
    ];
    let known = run_in(
        dir.path(),
        &[&grant[..], &["--data-dir", "new-data"]].concat(),
        &[],
    );
    assert_eq!((known.code, known.stderr.as_str()), (0, ""), "{known:?}");
    let mistyped = run_in(
        dir.path(),
        &[&grant[..], &["--data-dir", "new-dta"]].concat(),
        &[],
    );
    assert_eq!(mistyped.code, 0, "{mistyped:?}");
    assert!(
        mistyped
            .stderr
            .starts_with("note: created data directory new-dta "),
        "{mistyped:?}"
    );
    assert_eq!(entries(dir.path()), ["new-data", "new-dta"]);
}
