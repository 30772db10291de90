//! Proves that the documentation's terminal sessions are true: every fenced ```console block of
//! README.md and docs/*.md is run, command by command, by bash against a real `fencelog serve`
//! process, and each command's output (stdout and stderr together, in order) must equal the
//! lines the block shows under it. A doc example that drifts from the code fails CI.
//!
//! How a block is run (the rules a doc writer needs):
//! - Lines starting `$ ` are commands (a line ending in `\` continues on the next); the lines up
//!   to the next command are its expected output. A line `...` in the expected output matches
//!   any number of lines.
//! - Each block runs in a fresh empty directory (also `$HOME`), with the `fencelog` binary under
//!   test first on `PATH` and every `FENCELOG_*` variable of the environment removed.
//! - A block with no `fencelog serve` command of its own gets a server started for it (on a free
//!   port, data in `server-data/`), and `FENCELOG_ADDR` pointing at it: "with the server
//!   running" in the prose before it.
//! - A `$ fencelog serve ... &` command starts that server in the background (its log goes to
//!   `serve.log`, not into the session) and the next command waits until it listens; without a
//!   `--listen` it is given a free port and `FENCELOG_ADDR` points at it. Every loopback
//!   address `127.0.0.1:PORT` (or `localhost:`/`0.0.0.0:`) in the block is moved to a free
//!   port, the same one everywhere in the block, expected output included, so blocks run in
//!   parallel and beside whatever the machine runs.
//! - Masked on both sides before comparing: 32-hex-digit ids (lease ids) become `<id>`, and
//!   13-digit numbers (milliseconds since 1970: record timestamps) `<ms>`.
//! - An HTML comment on the line before the fence configures a block:
//!   `<!-- console-test: skip (why) -->` (a cluster, a long run: said in the comment) or
//!   `<!-- console-test: needs kcat curl -->` (commands it runs; the block is skipped with a note
//!   where one is missing, as the other kcat tests do).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::raw_protocol::unused_port;
use crate::support::BIN;

/// The longest one block may run (its `sleep`s included).
const BLOCK_TIMEOUT: Duration = Duration::from_secs(120);
/// Separates the commands' outputs in the session's combined output.
const END_MARKER: &str = "@@console-test-end@@";

/// One ```console block, as parsed from its file.
#[derive(Debug)]
struct Block {
    /// `file:line` of the opening fence, for messages.
    origin: String,
    /// The directive before the fence, if any (`skip ...`, `needs ...`).
    directive: Option<String>,
    commands: Vec<Step>,
}

/// A command of a block and the output the doc shows for it.
#[derive(Debug, Clone)]
struct Step {
    command: String,
    expected: Vec<String>,
}

// Every console block of the docs runs as written.
#[test]
fn every_console_block_of_the_docs_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("docs entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    files.extend(docs);

    let blocks: Vec<Block> = files
        .iter()
        .flat_map(|file| parse_blocks(root, file))
        .collect();
    assert!(
        blocks.len() >= 3,
        "expected the README's and the docs' console blocks, found {}",
        blocks.len()
    );

    // Blocks are independent (own directory, own server, own ports): run them in parallel.
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = blocks
            .iter()
            .map(|block| scope.spawn(move || run_block(block)))
            .collect();
        handles
            .into_iter()
            .filter_map(|handle| handle.join().expect("block thread").err())
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} console block(s) of the docs do not run as written:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The ```console blocks of `file`.
fn parse_blocks(root: &Path, file: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(file).expect("read doc");
    let name = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        if lines[index].trim_end() != "```console" {
            index += 1;
            continue;
        }
        let directive = index
            .checked_sub(1)
            .map(|before| lines[before].trim())
            .and_then(|line| line.strip_prefix("<!-- console-test:"))
            .and_then(|rest| rest.strip_suffix("-->"))
            .map(|rest| rest.trim().to_string());
        let origin = format!("{name}:{}", index + 1);
        index += 1;
        let mut body = Vec::new();
        while index < lines.len() && !lines[index].starts_with("```") {
            body.push(lines[index]);
            index += 1;
        }
        index += 1;
        blocks.push(Block {
            origin,
            directive,
            commands: parse_steps(&body),
        });
    }
    blocks
}

/// Commands and their expected output lines.
fn parse_steps(body: &[&str]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut continuing = false;
    for line in body {
        if continuing {
            let step = steps.last_mut().expect("a continued command");
            step.command.push('\n');
            step.command.push_str(line);
            continuing = line.ends_with('\\');
        } else if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step {
                command: command.to_string(),
                expected: Vec::new(),
            });
            continuing = command.ends_with('\\');
        } else if let Some(step) = steps.last_mut() {
            step.expected.push(line.to_string());
        }
    }
    steps
}

/// Runs one block; `Err` says what differed.
fn run_block(block: &Block) -> Result<(), String> {
    let directive = block.directive.as_deref().unwrap_or("");
    if directive.starts_with("skip") {
        eprintln!("{}: skipped ({directive})", block.origin);
        return Ok(());
    }
    if let Some(needs) = directive.strip_prefix("needs") {
        for tool in needs.split_whitespace() {
            if Command::new(tool).arg("--version").output().is_err()
                && Command::new(tool).arg("-V").output().is_err()
            {
                eprintln!("{}: {tool} not found, skipping this block", block.origin);
                return Ok(());
            }
        }
    }

    let dir = tempfile::tempdir().expect("block directory");
    let ports = loopback_ports(&block.commands);
    let steps: Vec<Step> = block
        .commands
        .iter()
        .map(|step| Step {
            command: move_ports(&step.command, &ports),
            expected: step
                .expected
                .iter()
                .map(|line| move_ports(line, &ports))
                .collect(),
        })
        .collect();

    let mut script =
        String::from("exec 2>&1 </dev/null\ntrap 'kill $(jobs -p) 2>/dev/null' EXIT\n");
    let has_own_server = steps
        .iter()
        .any(|step| step.command.trim_start().starts_with("fencelog serve"));
    if !has_own_server {
        let port = unused_port();
        script.push_str(&format!(
            "fencelog serve --listen 127.0.0.1:{port} --data-dir server-data >serve.log 2>&1 &\n\
             export FENCELOG_ADDR=127.0.0.1:{port}\n{}\n",
            wait_for_port(port)
        ));
    }
    for step in &steps {
        script.push_str(&session_command(&step.command));
        script.push_str(&format!("\necho '{END_MARKER}'\n"));
    }

    let bin_dir = Path::new(BIN).parent().expect("binary directory");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", path)
        .env("HOME", dir.path())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, _) in std::env::vars() {
        if name.starts_with("FENCELOG_") {
            command.env_remove(name);
        }
    }
    let output = run_with_timeout(command, BLOCK_TIMEOUT)
        .map_err(|why| format!("{}: {why}", block.origin))?;
    let server_log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();

    let segments: Vec<&str> = output.split(END_MARKER).collect();
    let mut differences = Vec::new();
    for (number, step) in steps.iter().enumerate() {
        let Some(segment) = segments.get(number) else {
            differences.push(format!(
                "$ {}\n  did not finish (the session ended early)",
                step.command
            ));
            break;
        };
        let actual: Vec<String> = segment.trim_start_matches('\n').lines().map(mask).collect();
        let expected: Vec<String> = step.expected.iter().map(|line| mask(line)).collect();
        if !lines_match(&expected, &actual) {
            differences.push(format!(
                "$ {}\n  the doc shows:\n{}\n  it printed:\n{}",
                step.command,
                indent(&expected),
                indent(&actual)
            ));
        }
    }
    if differences.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} ({} of {} commands differ):\n{}\n  server log:\n{}",
            block.origin,
            differences.len(),
            steps.len(),
            differences.join("\n"),
            indent(&server_log.lines().map(str::to_string).collect::<Vec<_>>())
        ))
    }
}

/// A command as the session runs it: a background `fencelog serve` logs to `serve.log` (not into
/// the session's output), gets a port if it names none, and is waited for.
fn session_command(command: &str) -> String {
    let trimmed = command.trim();
    let Some(serve) = trimmed
        .strip_suffix('&')
        .filter(|line| line.trim_start().starts_with("fencelog serve"))
    else {
        return command.to_string();
    };
    let mut serve = serve.trim_end().to_string();
    let mut prologue = String::new();
    if !serve.contains("--listen") {
        let port = unused_port();
        serve.push_str(&format!(" --listen 127.0.0.1:{port}"));
        prologue = format!("export FENCELOG_ADDR=127.0.0.1:{port}\n");
    }
    let waits: Vec<String> = ports_in(&serve).into_iter().map(wait_for_port).collect();
    format!("{prologue}{serve} >>serve.log 2>&1 &\n{}", waits.join("\n"))
}

/// Bash that waits (up to 20 s) until something listens on the loopback `port`.
fn wait_for_port(port: u16) -> String {
    format!(
        "for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; sleep 0.1; done"
    )
}

/// Each loopback port the block names, mapped to a free one.
fn loopback_ports(steps: &[Step]) -> BTreeMap<u16, u16> {
    let mut ports = BTreeMap::new();
    for step in steps {
        for text in std::iter::once(&step.command).chain(&step.expected) {
            for port in ports_in(text) {
                ports.entry(port).or_insert_with(unused_port);
            }
        }
    }
    ports
}

/// The hosts whose ports a block's addresses name on this machine.
const LOOPBACK_HOSTS: [&str; 3] = ["127.0.0.1:", "localhost:", "0.0.0.0:"];

/// The ports of loopback addresses in `text`.
fn ports_in(text: &str) -> Vec<u16> {
    let mut ports = Vec::new();
    for host in LOOPBACK_HOSTS {
        let mut rest = text;
        while let Some(at) = rest.find(host) {
            rest = &rest[at + host.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if let Ok(port) = digits.parse() {
                ports.push(port);
            }
        }
    }
    ports
}

/// `text` with every loopback address's port replaced by its mapped one.
fn move_ports(text: &str, ports: &BTreeMap<u16, u16>) -> String {
    let mut out = text.to_string();
    for host in LOOPBACK_HOSTS {
        let mut result = String::new();
        let mut rest = out.as_str();
        while let Some(at) = rest.find(host) {
            result.push_str(&rest[..at + host.len()]);
            rest = &rest[at + host.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            match digits.parse::<u16>().ok().and_then(|port| ports.get(&port)) {
                Some(moved) => result.push_str(&moved.to_string()),
                None => result.push_str(&digits),
            }
            rest = &rest[digits.len()..];
        }
        result.push_str(rest);
        out = result;
    }
    out
}

/// `line` with what differs from run to run masked: 32-hex-digit ids become `<id>`, 13-digit
/// numbers (timestamps in milliseconds) `<ms>`.
fn mask(line: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = line.chars().collect();
    let mut index = 0;
    while index < chars.len() {
        let run_of = |accept: fn(&char) -> bool| {
            let run = chars[index..].iter().take_while(|c| accept(c)).count();
            let after = chars.get(index + run);
            (after.is_none_or(|c| !c.is_ascii_alphanumeric())).then_some(run)
        };
        let bounded = index == 0 || !chars[index - 1].is_ascii_alphanumeric();
        let hex = run_of(|c| c.is_ascii_digit() || ('a'..='f').contains(c));
        let digits = run_of(char::is_ascii_digit);
        if bounded && hex == Some(32) {
            out.push_str("<id>");
            index += 32;
        } else if bounded && digits == Some(13) {
            out.push_str("<ms>");
            index += 13;
        } else {
            out.push(chars[index]);
            index += 1;
        }
    }
    out.trim_end().to_string()
}

/// Whether `actual` matches `expected`, where an expected `...` line matches any lines.
fn lines_match(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.iter().all(|line| line.is_empty()),
        Some((first, rest)) if first == "..." => {
            (0..=actual.len()).any(|skip| lines_match(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(line, others)| line == first && lines_match(rest, others)),
    }
}

fn indent(lines: &[String]) -> String {
    if lines.is_empty() {
        return "    (nothing)".to_string();
    }
    lines
        .iter()
        .map(|line| format!("    {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `command` to its end, or kills it after `timeout`; its stdout (the session's output).
fn run_with_timeout(mut command: Command, timeout: Duration) -> Result<String, String> {
    let mut child = command.spawn().map_err(|error| format!("bash: {error}"))?;
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut text).map(|_| text)
    });
    let deadline = Instant::now() + timeout;
    loop {
        if child
            .try_wait()
            .map_err(|error| error.to_string())?
            .is_some()
        {
            break;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("the session ran longer than {timeout:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader
        .join()
        .expect("reader thread")
        .map_err(|error| format!("reading the session's output: {error}"))
}
